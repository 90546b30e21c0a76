"""The report contract, `kvaudit.report/1`, and the diff contract, `kvaudit.diff/1`: their types,
and how they are written as JSON (kvaudit/validate.py reads them back).

Frozen dataclasses with a docstring under each field; integer bytes with the unit in the name;
unknown is `None` (JSON null), never 0. Phases and owners are spelled once, here, as enums, and
used everywhere: code, JSON and tables. docs/design.md lists the stable keys; the fields marked
"Extension" are optional.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum, StrEnum
from typing import Any

from kvaudit.config import AuditConfig

REPORT_SCHEMA = "kvaudit.report/1"
DIFF_SCHEMA = "kvaudit.diff/1"


class Phase(StrEnum):
    """Per-rank phases, in the fixed profiling order."""

    BASELINE = "baseline"
    LOAD = "load"
    PROFILE = "profile"
    PERSISTENT = "persistent"
    REPLAY = "replay"
    GRAPHS = "graphs"
    KV = "kv"
    CAPTURE = "capture"
    VERIFY = "verify"


PHASE_ORDER = tuple(Phase)


class Owner(StrEnum):
    """Who holds the bytes of a rank's budget. See docs/design.md for each formula."""

    WEIGHTS = "weights"
    PERSISTENT = "persistent"
    ACTIVATION_PEAK = "activation_peak"
    GRAPH_POOL = "graph_pool"
    NON_TORCH = "non_torch"
    TORCH_OTHER = "torch_other"
    """Extension: torch bytes no phase claims (runner buffers made before load, what the first
    profile pass left behind, allocator slack, torch growth after KV outside the graph pool).
    Without it those bytes would hide in kv_unallocated."""
    KV_CACHE = "kv_cache"
    KV_UNALLOCATED = "kv_unallocated"


NON_KV_OWNERS = (Owner.WEIGHTS, Owner.PERSISTENT, Owner.ACTIVATION_PEAK, Owner.GRAPH_POOL,
                 Owner.NON_TORCH, Owner.TORCH_OTHER)
"""The owners that compete with the KV cache for the budget; a diff's dominant owner is one of them."""

STABLE_OWNERS = tuple(o for o in Owner if o is not Owner.TORCH_OTHER)
"""The owner keys every report must carry (torch_other is an extension and may be absent)."""


class BudgetTerm(StrEnum):
    """The terms of a rank's KV budget (`RankReport.kv_budget`, made by `ledger.kv_budget`), from
    the requested budget down to the KV bytes, in this order. The non-KV owners' terms carry their
    Owner's name and what KV sizing charged them (before KV: not their final figure)."""

    REQUESTED = "requested"
    """The requested budget, ceil(device total × gpu_memory_utilization): the one positive term."""
    WEIGHTS = Owner.WEIGHTS.value
    PERSISTENT = Owner.PERSISTENT.value
    ACTIVATION_PEAK = Owner.ACTIVATION_PEAK.value
    GRAPH_POOL = Owner.GRAPH_POOL.value
    NON_TORCH = Owner.NON_TORCH.value
    TORCH_OTHER = Owner.TORCH_OTHER.value
    KV_STRUCTURES = "kv_structures"
    """What KV initialisation allocates besides the cache (measured under the minimal KV cache
    before sizing; 0 where not measured: the host backend, the selftest)."""
    SEGMENT_ROUNDING = "segment_rounding"
    """CUDA: the budget left unused so that whole blocks' allocator segments fit."""
    UNMEASURED = "unmeasured"
    """A phase KV sizing needs was not read: the figure the engine fell back on (vLLM's own, else
    0) minus the requested budget; the owner terms are then absent."""
    SIZED_OTHERWISE = "sized_otherwise"
    """What the engine gave vLLM minus what the ledger re-derives from the same record: only
    where another rule sized KV on purpose (the selftest's naive sizing) or the two disagree (a
    warning says so)."""
    BLOCK_ROUNDING = "block_rounding"
    """What vLLM allocated minus the figure it was given: its whole blocks (0 or negative)."""


class PhaseStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    DEFERRED = "deferred"
    INTERRUPTED = "interrupted"
    """Stopped from outside while it ran (the boot was stopped: vLLM's signal handler raises
    SystemExit in its workers), not failed. An extension of the report contract."""


class Source(StrEnum):
    RUN = "run"
    LOG = "log"
    SELFTEST = "selftest"
    PLAN = "plan"
    """Predicted by `kvaudit plan` from a measured report; nothing was booted."""


class KvSizing(StrEnum):
    """Who sized the KV cache, and when (report extension `engine.kv_cache_sizing`)."""

    KVAUDIT = "kvaudit"
    """`kvaudit run`: kvaudit's fixed order (persistent warmup, replay, graph pool measured, then KV)."""
    PROFILE = "profile"
    """vLLM from its profile pass, before warmup and graph capture (every release before 0.34, and
    0.34 with its extensible KV cache off)."""
    AFTER_WARMUP = "after_warmup"
    """vLLM 0.34's extensible KV cache: from the memory measured after warmup and graph capture."""
    FIXED = "fixed"
    """Nobody: kv_cache_memory_bytes (on CPU, VLLM_CPU_KVCACHE_SPACE) fixed it, and vLLM skipped its profile for it."""


class Verdict(StrEnum):
    OK = "ok"
    FAIL = "fail"
    UNKNOWN = "unknown"


class FailureKind(StrEnum):
    """Why a boot did not finish. `does_not_fit` is a finding (exit 1); the rest are exit 3."""

    DOES_NOT_FIT = "does_not_fit"
    """vLLM's KV ValueError: the sized cache cannot hold one request at max_model_len, or none at all."""
    STARTUP_MEMORY = "startup_memory"
    """Free memory at startup below the requested budget (vLLM refuses to start)."""
    OOM = "oom"
    WORKER_DIED = "worker_died"
    REFUSED = "refused"
    """vLLM refused the configuration (e.g. DCP on a backend without softmax LSE)."""
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    NO_DEVICE = "no_device"
    CRASH = "crash"


Owners = Mapping[Owner, "int | None"]


@dataclass(frozen=True)
class PhaseRecord:
    """One rank's measurement at the end of one phase (peak stats were reset at its start)."""

    name: Phase
    status: PhaseStatus = PhaseStatus.OK
    seconds: float | None = None
    torch_allocated_bytes: int | None = None
    """A(p): torch allocated at the end of the phase (host backend: the process RSS)."""
    torch_reserved_bytes: int | None = None
    """R(p): torch reserved (host backend: the process RSS)."""
    torch_peak_allocated_bytes: int | None = None
    """P(p): torch peak allocated during the phase (host backend: peak RSS since the phase began)."""
    device_used_bytes: int | None = None
    """U(p): device total − free (host backend: other processes at baseline + this process's RSS)."""
    detail: str | None = None
    graph_pool_bytes: int | None = None
    """Extension: bytes of allocator segments in private (graph) pools at the end of the phase."""
    torch_peak_reserved_bytes: int | None = None
    """Extension: torch peak reserved during the phase: the device memory the allocator needed,
    segment rounding included."""


@dataclass(frozen=True)
class Site:
    """`--trace`: one allocation site's blocks at the end of a phase, or at the phase's peak."""

    phase: str
    owner: str
    """An owner name, or `unattributed` (no rule matched: named by its frame, never guessed)."""
    site: str
    bytes: int
    """Block sizes as the allocator handed them out (its 512-byte granularity)."""
    blocks: int
    at: str = "end"
    """`end`: live at the end of the phase. `peak`: allocated during the phase and live when the
    phase's allocated total was highest (the transient, e.g. the activation peak)."""


OMIT_NONE = {"omit_none": True}
"""Field metadata: an extension written only when known, so reports without it keep their bytes."""


@dataclass(frozen=True)
class SweepPoint:
    """`kvaudit run --sweep`: one extra profile pass at fewer tokens, after the replay phase."""

    tokens: int
    """Tokens of the pass (the runner's max_num_tokens for that one call)."""
    activation_peak_bytes: int
    """The pass's transient, by the activation_peak rule: max(peak allocated − allocated,
    peak reserved − reserved) over the readings just before it (host backend: peak RSS growth)."""
    seconds: float | None = None


@dataclass(frozen=True)
class KvTerm:
    """One term of a rank's KV budget: bytes added to (the requested budget) or taken from it."""

    term: BudgetTerm
    bytes: int
    """Signed: the requested budget positive, every deduction negative."""


def budget_total(terms: tuple[KvTerm, ...]) -> int:
    """The sum of a budget's terms: the KV bytes they come down to."""
    return sum(t.bytes for t in terms)


@dataclass(frozen=True)
class RankNode:
    """Where a rank ran (`kvaudit run`), as the rank itself saw it."""

    node_rank: int | None = None
    """vLLM's --node-rank where the boot had one (mp multi-node); otherwise nodes are numbered
    by host and IP in the order of their lowest rank (the node of rank 0 is 0)."""
    host: str | None = None
    ip: str | None = None
    """The IP vLLM uses for the rank's node (its get_ip: VLLM_HOST_IP when set)."""
    local_rank: int | None = None
    """vLLM's local rank on that node."""
    device_index: int | None = None
    """The local device: the CUDA device index; on the CPU backend the NUMA node."""
    journal: str | None = None
    """How the record reached the report: `rpc` (collective_rpc at the end of a boot that lived),
    `file` (the journal on the supervisor's node) or `relay` (from another node through vLLM's
    distributed store, kvaudit.engines.relay)."""


@dataclass(frozen=True)
class NodeSummary:
    """One node of a run: its ranks and where it is tightest (`kvaudit run`)."""

    node_rank: int
    host: str | None
    ip: str | None
    ranks: tuple[int, ...]
    others_bytes: int | None
    """The most any of its ranks' devices held for other processes at baseline (on the CPU
    backend every rank of a NUMA node sees the same figure)."""
    physical_headroom_bytes: int | None
    """Free at start − requested on its tightest rank; null when a rank does not say."""
    binding_rank: int | None
    """Its rank with the least KV memory."""
    kv_available_bytes: int | None
    """KV on that rank."""


COMPILE_MISS, COMPILE_HIT, COMPILE_PARTIAL = "miss", "hit", "partial"
COMPILE_CACHE_STATES = (COMPILE_MISS, COMPILE_HIT, COMPILE_PARTIAL)
"""RankReport.compile_cache's values: the model compiled in the boot, loaded from vLLM's compile cache, some of each."""


def compile_cache_state(compiled: bool, loaded: bool) -> str | None:
    """compile_cache from whether any graph was compiled in the boot and any loaded from the cache; None for neither."""
    if compiled and loaded:
        return COMPILE_PARTIAL
    return COMPILE_MISS if compiled else COMPILE_HIT if loaded else None


def boot_compile_cache(states: Iterable[str | None]) -> str | None:
    """A boot's compile_cache over its ranks' (None where none recorded one): theirs where they agree, else partial."""
    seen = {state for state in states if state is not None}
    return seen.pop() if len(seen) == 1 else COMPILE_PARTIAL if seen else None


@dataclass(frozen=True)
class RankReport:
    """Everything one rank measured, and the owners the ledger made of it."""

    rank: int
    """Global rank."""
    tp_rank: int | None = None
    dcp_rank: int | None = None
    device_total_bytes: int | None = None
    """Device total as vLLM reads it (mem_get_info total; host backend: the NUMA node total)."""
    requested_bytes: int | None = None
    """ceil(device_total × gpu_memory_utilization): the budget every owner is charged against."""
    others_bytes: int | None = None
    """Other processes' device memory at baseline (NVML)."""
    owners: Mapping[Owner, int | None] = field(default_factory=dict)
    """Bytes per owner; every Owner key is present, None where unknown."""
    graph_pool_estimate_bytes: int | None = None
    """The graph pool charged at KV sizing: kvaudit's own profiling capture before KV (every
    configured graph into a temporary pool: its full high-water plus the graphs' driver memory).
    Reports from logs carry vLLM's logged estimate here, the only figure a log has."""
    graph_pool_actual_bytes: int | None = None
    """Graph pool high-water of the real capture after KV, plus its non-torch growth."""
    kv_available_bytes: int | None = None
    """The figure the boot the report describes sized this rank's KV cache to: in a run, the
    selftest and a plan kvaudit's (returned to vLLM); in a log vLLM's own, the only sizing a log
    shows (then also `vllm_kv_available_bytes`)."""
    phases: tuple[PhaseRecord, ...] = ()
    naive_kv_available_bytes: int | None = None
    """Extension: what a single profile pass before warmup would have given this rank."""
    free_at_start_bytes: int | None = None
    """Extension: device free at baseline; vLLM refuses a budget above it."""
    graph_pool_retained_bytes: int | None = None
    """Extension: graph pages a fork's log says profiling retained (recorded, never subtracted)."""
    kv_blocks: int | None = None
    """Extension: KV blocks vLLM allocated on this rank."""
    deferred_steps: tuple[str, ...] = ()
    """Extension: warmup steps that needed KV and ran only after it (their bytes were not budgeted)."""
    vllm_kv_available_bytes: int | None = None
    """Extension: what vLLM's own arithmetic gave in the same boot, always vLLM's figure: beside
    kvaudit's in a run (after kvaudit's warmup ran); in a log the figure the log states (written
    there from this version on)."""
    vllm_graph_estimate_bytes: int | None = None
    """Extension: vLLM's own graph memory estimate in the same boot (profile_cudagraph_memory;
    0 from MRv2 before 0.29), beside kvaudit's measured `graph_pool_estimate_bytes`."""
    vllm_suggested_kv_cache_memory_bytes: int | None = None
    """Extension: the `--kv-cache-memory` vLLM itself suggests in the same boot to fit the
    requested memory (its "Actual usage …" line; 0.32 on), beside kvaudit's safe bytes; null
    where vLLM states none."""
    vllm_consumed_bytes: int | None = None
    """Extension, from a log: vLLM 0.28+'s `total_consumed` (its "Actual usage is X GiB for consumed
    memory (weights + non-torch)" line; the free memory the rank lost up to the profile's end: weights,
    persistent torch and non-torch), three owners a log does not split; null elsewhere."""
    vllm_peak_activation_bytes: int | None = None
    """Extension, from a log: the peak activation of vLLM 0.28+'s "Actual usage" line as printed
    (`peak_activation_memory` = transient_peak_headroom + the graph estimate applied, gpu_worker.py
    determine_available_memory), of which `activation_peak` is the part without the estimate; the
    suggestion on the same line counts that estimate twice (vllm#57936); null elsewhere."""
    graph_capture_transient_bytes: int | None = None
    """Extension: the profiling capture's peak outside its pool; charged to activation_peak
    only where it exceeds the replay's transient."""
    prefill_probe_transient_bytes: int | None = None
    """Extension: the transient of kvaudit's long-prefill probe before KV (GPU, Model Runner V2 from
    vLLM 0.33: one request of max_num_batched_tokens tokens attending to a max_model_len context,
    attention included, which vLLM's profile pass runs without); charged to activation_peak where it
    is larger than the replay's. Null where not run."""
    allocator_expandable_segments: bool | None = field(default=None, metadata=OMIT_NONE)
    """Extension: torch's allocator ran with expandable segments in this rank's worker (GPU; its
    environment as torch reads it, ledger.expandable_segments). Then, where the long-prefill probe
    measured, activation_peak leaves the profile pass's reserved transient out (docs/design.md).
    Absent where not recorded (older reports, logs, plans, the CPU backend)."""
    sites: tuple[Site, ...] | None = None
    """Extension (`--trace`): aggregated allocation sites per phase; null when not traced."""
    sweep: tuple[SweepPoint, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`--sweep`): the activation peak at several token counts up to
    max_num_batched_tokens; absent when not swept."""
    kv_cache_spec_dtype: str | None = field(default=None, metadata=OMIT_NONE)
    """Extension: the dtype of vLLM's KV cache spec in this boot (`torch.bfloat16`), which
    `--kv-cache-dtype auto` leaves implicit; absent when not recorded."""
    compile_cache: str | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`kvaudit run`; a log's `Compiling a graph for` / `Directly load` lines): `miss` where
    vLLM compiled the model in this boot (its torch.compile cache held none of it), `hit` where it
    loaded every compiled graph from that cache, `partial` for some of each; absent where nothing was
    compiled (eager) or not recorded. A boot that loads the cache can hold more after vLLM's profile
    than the one that filled it, so flags from a `miss` boot come with a warning
    (assemble.compile_cache_warning)."""
    kv_tensor_block_bytes: tuple[int, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Extension (CUDA): bytes per block of each KV tensor vLLM allocates; the allocator rounds
    each tensor up to its segments, so KV is sized in whole blocks whose segments fit. Absent
    where no allocator rounds (host memory) or the boot did not record it."""
    kv_segment_rounding_bytes: int | None = field(default=None, metadata=OMIT_NONE)
    """Extension (CUDA): bytes of the budget left unused so that whole blocks' segments fit
    (kv_available_bytes is after it); absent where kv_tensor_block_bytes is."""
    kv_budget: tuple[KvTerm, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`kvaudit run`, selftest): every term from the requested budget down to the KV
    bytes (`ledger.kv_budget`), in order; they sum to `owners.kv_cache`, or to
    `kv_available_bytes` where vLLM allocated no cache. Absent in reports from logs and plans and
    in runs written before it (those cannot all be re-derived: tests/unit/test_kv_budget.py)."""
    node: RankNode | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`kvaudit run`): where this rank ran and how its record reached the report;
    absent in reports from logs and older runs."""

    def owner(self, owner: Owner) -> int | None:
        return self.owners.get(owner)

    def phase(self, name: Phase) -> PhaseRecord | None:
        return next((p for p in self.phases if p.name is name), None)


RANK_STABLE_KEYS = ("rank", "tp_rank", "dcp_rank", "device_total_bytes", "requested_bytes", "others_bytes", "owners",
                    "graph_pool_estimate_bytes", "graph_pool_actual_bytes", "kv_available_bytes", "phases")
"""The keys every report's rank carries (docs/design.md, report contract); RankReport's other
fields are extensions, optional when a report is read back."""


@dataclass(frozen=True)
class Lever:
    """One way to make a failing config fit, with what it frees where that can be computed."""

    name: str
    """A config key (`max_model_len`, `gpu_memory_utilization`, …) or `enforce_eager`."""
    flag: str
    """The `vllm serve` flag that pulls it, ready to paste."""
    frees_bytes: int | None
    frees_tokens: int | None
    note: str = ""


@dataclass(frozen=True)
class Capacity:
    kv_available_bytes: int | None = None
    """kvaudit's KV figure on the binding rank."""
    binding_rank: int | None = None
    """The rank with the least KV memory; vLLM allocates its block count on every rank."""
    kv_tokens: int | None = None
    kv_needed_bytes: int | None = None
    """KV bytes one request at max_model_len needs on a rank."""
    max_model_len_fits: bool | None = None
    max_feasible_model_len: int | None = None
    gmu_needed: float | None = None
    """The smallest gpu_memory_utilization at which max_model_len fits on every rank."""
    physical_headroom_bytes: int | None = None
    """Free at start − requested on the tightest rank: all that raising GMU can recover."""
    naive_kv_available_bytes: int | None = None
    safe_serve_flags: tuple[str, ...] = ()
    kv_bytes_per_block: int | None = None
    """Extension: KV pool bytes of one block on a rank (all layers of all groups)."""
    block_size: int | None = None
    """Extension: tokens per block per rank."""
    tokens_per_block: int | None = None
    """Extension: tokens one block holds across the DCP group (block_size × dcp)."""
    over_allocation_bytes: int | None = None
    """Extension: naive − kvaudit's KV figure: what the single-profile order over-allocates."""
    levers: tuple[Lever, ...] = ()
    safe_serve_env: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Extension: `NAME=value` of each allocator setting the boot ran under (capacity.ALLOCATOR_ENV):
    the safe flags were measured with them, so they go with the flags. Absent where it set none."""
    kv_not_served: str | None = field(default=None, metadata=OMIT_NONE)
    """Extension: why the KV figure is one the boot sized and never served with (assemble.kv_not_served:
    it died after sizing, or ran out of memory once serving), in words; no safe flags are derived from it.
    Absent where the figure stands."""


@dataclass(frozen=True)
class VerifyRank:
    rank: int
    true_peak_bytes: int | None
    slack_bytes: int | None
    torch_allocated_start_bytes: int | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`--verify` scenarios): torch's allocated bytes on this rank when the scenario began."""
    torch_peak_allocated_bytes: int | None = field(default=None, metadata=OMIT_NONE)
    """Extension: torch's highest allocated bytes during the scenario."""
    torch_reserved_start_bytes: int | None = field(default=None, metadata=OMIT_NONE)
    """Extension: the caching allocator's reserved bytes when the scenario began (what earlier loads
    left cached is in it: kvaudit does not empty the cache between scenarios, as a server does not; the
    allocator itself frees cached segments only when a device allocation fails)."""
    torch_peak_reserved_bytes: int | None = field(default=None, metadata=OMIT_NONE)
    """Extension: the highest reserved bytes during the scenario; the true peak is this plus the
    rank's non-torch memory. Reserved peak − allocated peak is the least the allocator's cache held
    (segments held, not in use: fragmentation); the two peaks may fall at different moments. On the
    CPU both are RSS growth (equal)."""


VERIFY_TORCH_KEYS = ("torch_allocated_start_bytes", "torch_peak_allocated_bytes", "torch_reserved_start_bytes",
                     "torch_peak_reserved_bytes")
"""VerifyRank's allocator figures, as the workers' kvaudit_verify_end returns them and the report
holds them (a test holds this list to the dataclass's fields)."""


class Scenario(StrEnum):
    """`kvaudit run --verify`: the loads run on the sized cache, each measured on its own."""

    PREFILL = "prefill"
    """One request of max_model_len − decode tokens, then a few decode steps."""
    BATCH = "batch"
    """max_num_seqs requests whose KV fills the cache as far as the config allows, decoding
    together (greedy)."""
    SPEC = "spec"
    """With speculative decoding only: the batch's requests, K draft tokens a step, random
    sampling (the rejection sampler's probabilistic path)."""
    SAMPLING = "sampling"
    """The batch's requests with top-k, top-p, min-p (not with speculative decoding, which vLLM
    refuses it with) and the most logprobs the model allows."""


@dataclass(frozen=True)
class VerifyScenario:
    """One `--verify` scenario on the sized cache: its load and its true peak per rank."""

    name: Scenario
    ok: bool
    requests: int | None = None
    """Requests submitted together."""
    tokens: int | None = None
    """KV tokens the requests held together at their end (prompts + generated tokens)."""
    prompt_tokens: int | None = None
    """The longest prompt of the scenario."""
    decode_tokens: int | None = None
    """Tokens each request generated."""
    step_tokens: int | None = None
    """The largest decode step: requests × (1 + draft tokens)."""
    draft_tokens: int | None = None
    """Speculative tokens per step (0 without speculative decoding)."""
    sampling: str | None = None
    """The sampling parameters, as vLLM's SamplingParams names them."""
    true_peak_bytes: int | None = None
    """Highest device use of any rank during the scenario (not counting other processes)."""
    slack_bytes: int | None = None
    """requested − true peak, on the rank where it is smallest; negative = over budget."""
    error: str | None = None
    ranks: tuple[VerifyRank, ...] = ()
    seconds: float | None = None


@dataclass(frozen=True)
class Verify:
    ok: bool
    """Every scenario held."""
    prompt_tokens: int | None = None
    true_peak_bytes: int | None = None
    """Highest device use of any rank during the verify step (not counting other processes)."""
    slack_bytes: int | None = None
    """requested − true peak, on the rank where it is smallest; negative = over budget."""
    error: str | None = None
    decode_tokens: int | None = None
    repeats: int | None = None
    oom_count: int | None = None
    ranks: tuple[VerifyRank, ...] = ()
    scenarios: tuple[VerifyScenario, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`kvaudit run --verify`): each scenario on its own; the fields above are the
    worst one's (a failed one first, the least measured slack first), with `error` naming each failed
    scenario. Absent where verify ran one step (the selftest, older reports)."""

    @property
    def overrun_bytes(self) -> int:
        """How far the true peak went above the budget in the worst scenario (0 when every one
        stayed inside or is unknown)."""
        slacks = [self.slack_bytes] + [s.slack_bytes for s in self.scenarios or ()]
        return max([0] + [-s for s in slacks if s is not None])


@dataclass(frozen=True)
class RepeatBoot:
    """`kvaudit run --repeat N`: one boot's outcome, in the order they ran."""

    boot: int
    """1 for the first boot."""
    verdict: Verdict
    kv_tokens: int | None = None
    kv_available_bytes: int | None = None
    """KV on the binding rank."""
    safe_kv_cache_memory_bytes: int | None = None
    """The `--kv-cache-memory-bytes` of this boot's safe flags."""
    verify_slack_bytes: int | None = None
    failure: str | None = None
    """Why the boot did not finish (its failure kind and message), or null."""
    compile_cache: str | None = field(default=None, metadata=OMIT_NONE)
    """The boot's compile_cache over its ranks (schema.boot_compile_cache); absent where no rank recorded one.
    A first boot that compiled the model can size other KV than the boots that load it (docs/evidence.md)."""


@dataclass(frozen=True)
class OwnerSpread:
    """One owner on one rank over the boots of `--repeat` (the boots that measured it)."""

    rank: int
    owner: Owner
    min_bytes: int | None
    median_bytes: int | None
    """The lower median (a value one boot measured)."""
    max_bytes: int | None


@dataclass(frozen=True)
class Repeat:
    """Extension (`kvaudit run --repeat N`): how much a boot varies. The report around it is the
    worst boot's (a boot that did not finish, else a failed verdict, else the fewest safe KV
    bytes): its owners, capacity, safe flags and verdict."""

    boots: int
    """Boots asked for."""
    cold: bool
    """`--cold`: vLLM's, torch.compile's and the kernel caches were emptied (a private folder)
    before each boot; otherwise each boot used the caches as the user's vLLM would."""
    worst_boot: int
    """The boot this report is."""
    runs: tuple[RepeatBoot, ...] = ()
    """The boots that ran (fewer than `boots` when one did not finish: the rest were not run)."""
    kv_tokens_min: int | None = None
    kv_tokens_median: int | None = None
    kv_tokens_max: int | None = None
    owners: tuple[OwnerSpread, ...] = ()
    """Per rank and owner: min, median and max over the boots."""

    @property
    def kv_tokens_spread(self) -> int | None:
        return None if self.kv_tokens_min is None or self.kv_tokens_max is None \
            else self.kv_tokens_max - self.kv_tokens_min


@dataclass(frozen=True)
class AccuracyEntry:
    owner: Owner
    rank: int
    planted_bytes: int
    measured_bytes: int | None


@dataclass(frozen=True)
class Failure:
    phase: Phase | None
    rank: int | None
    kind: FailureKind
    message: str
    step: str | None = field(default=None, metadata=OMIT_NONE)
    """Extension: the startup step within the phase where a log's traceback names it, in words that stand
    for ` in <phase>` (`after KV sizing, in the sampler warmup (`_dummy_sampler_run`)`): the capture phase
    holds every step after KV sizing (the kernel warmups, the capture, the sampler warmup), and what fixes a
    death differs between them. Absent where nothing names one."""


@dataclass(frozen=True)
class Engine:
    name: str | None = None
    version: str | None = None
    model_runner: str | None = None
    attention_backend: str | None = None
    kv_cache_sizing: KvSizing | None = field(default=None, metadata=OMIT_NONE)
    """Who sized the KV cache, and when (an extension; omitted where a log does not show it)."""
    generation: str | None = field(default=None, metadata=OMIT_NONE)
    """vLLM's engine, V0 or V1, where a log shows which (an extension: 0.8–0.10 ran either; omitted where not
    shown, and in a run: kvaudit boots V1 releases only)."""


@dataclass(frozen=True)
class Environment:
    device_name: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    vllm: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    """VLLM_* and other variables that change memory."""
    platform: str | None = None
    """Extension: the platform a log names (`Automatically detected platform rocm.`: cuda, rocm, cpu, tpu, xpu,
    a plugin's name); null where it names none, and in a run, whose device_name says more."""


@dataclass(frozen=True)
class Report:
    source: Source
    engine: Engine
    environment: Environment
    config: AuditConfig
    ranks: tuple[RankReport, ...]
    capacity: Capacity
    verdict: Verdict
    verify: Verify | None = None
    accuracy: tuple[AccuracyEntry, ...] | None = None
    failure: Failure | None = None
    verdict_reason: str = ""
    """Extension: the verdict in one sentence that names the fix."""
    warnings: tuple[str, ...] = ()
    kvaudit_version: str | None = None
    schema: str = REPORT_SCHEMA
    nodes: tuple[NodeSummary, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`kvaudit run`): per node, its ranks, others, physical headroom and binding
    rank; absent where the ranks do not say where they ran."""
    repeat: Repeat | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`kvaudit run --repeat N`): the spread over N boots; absent for one boot."""
    planned_from: Source | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`kvaudit plan`): the source of the report the plan was made from (`run` or `log`);
    absent in every other report."""

    def binding(self) -> RankReport | None:
        return next((r for r in self.ranks if r.rank == self.capacity.binding_rank), None)


def from_log(report: Report) -> bool:
    """Whether the report's KV figure is a log's (vLLM's own one-pass sizing, not audited): a report
    read from a log, or a plan made from one. Its flags are then not called safe, and no deployment
    config is written from it."""
    return report.source is Source.LOG or report.planned_from is Source.LOG


@dataclass(frozen=True)
class KnobDifference:
    knob: str
    a: Any
    b: Any


@dataclass(frozen=True)
class EnvDifference:
    key: str
    a: Any
    b: Any


@dataclass(frozen=True)
class OwnerDelta:
    owner: Owner
    rank: int | None
    """None: each report's binding rank."""
    a_bytes: int | None
    b_bytes: int | None
    delta_bytes: int | None


@dataclass(frozen=True)
class SizingDelta:
    """One term KV sizing took from the budget on the binding ranks, as each side's sizing charged it (a diff
    extension, `DiffReport.kv_sizing`): KV = requested − the other terms, so KV moves by +delta of `requested` and
    −delta of each charge. Charged before KV was sized, not the owner's figure at the end of the boot: the CUDA
    graph pool is charged the estimate vLLM subtracts (gpu_worker.py determine_available_memory), and its capture,
    after KV (compile_or_warm_up_model), moves KV by nothing."""

    term: str
    """`requested` (the budget: device × gpu_memory_utilization), `consumed` (vLLM's consumed figure, a 0.28+
    log's weights + persistent + non_torch, where both sides state it) or a non-KV owner's name."""
    a_bytes: int | None
    b_bytes: int | None
    delta_bytes: int | None
    kv_delta_bytes: int | None
    """What the term's change moved KV by (positive: more KV for B); null where either side's is unknown."""
    part_of: str | None = None
    """`consumed` for an owner that figure holds: its change is in the figure's, not added again."""


@dataclass(frozen=True)
class DiffReport:
    comparable: bool
    knob_differences: tuple[KnobDifference, ...]
    environment_differences: tuple[EnvDifference, ...]
    owners: tuple[OwnerDelta, ...]
    dominant_owner: Owner | None
    """The non-KV owner whose change moved KV most on the binding ranks: by `kv_sizing` (what sizing charged it),
    else, in a diff written before that extension, by the owners' own change."""
    capacity: Mapping[str, Any]
    """{a: Capacity, b: Capacity, kv_available_delta_bytes, kv_tokens_delta, requested_delta_bytes (the
    binding ranks' budgets, B − A; null where a side does not state its own; an extension),
    consumed_delta_bytes (the binding ranks' `vllm_consumed_bytes`, B − A; present only where both
    state it; an extension)}."""
    verdict: Mapping[str, Verdict]
    a_name: str = "a"
    b_name: str = "b"
    schema: str = DIFF_SCHEMA
    sites: tuple[SiteDelta, ...] = ()
    """Extension: site-level deltas, when both reports carry `--trace` sites; largest |delta| first."""
    repeat: Mapping[str, Repeat | None] | None = field(default=None, metadata=OMIT_NONE)
    """Extension: {`a`, `b`}: each side's `--repeat` spread (null for a side of one boot); absent
    when neither side repeated."""
    warnings: Mapping[str, tuple[str, ...]] | None = field(default=None, metadata=OMIT_NONE)
    """Extension: {`a`, `b`}: each side's own report warnings (a log cut before startup finished,
    tokens derived from a block count): what each side's verdict and figures rest on; absent when
    neither side warns."""
    one_sided_knobs: tuple[KnobDifference, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Extension: knobs one side states and a log on the other side does not (null there; a run's
    null is vLLM's default, which it knows). `comparable` holds as far as both sides state their
    knobs; these are what it could not compare. Absent when there are none."""
    failures: Mapping[str, Failure | None] | None = field(default=None, metadata=OMIT_NONE)
    """Extension: {`a`, `b`}: each side's own `failure` (null on a side that did not fail): a boot
    that died is not a short excerpt, though both may have no verdict. Absent when neither failed."""
    kv_sizing: tuple[SizingDelta, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Extension: the terms KV sizing took from the budget on the binding ranks (`SizingDelta`): `requested`,
    then each charge; those not `part_of` another add up to KV's change where all are known, less what sizing
    rounds (whole blocks, segments; a log's figures to 0.01 GiB). Absent in a diff written before it."""


@dataclass(frozen=True)
class SiteDelta:
    """One allocation site's change between two traced runs, at the last phase both reached."""

    owner: str
    site: str
    rank: int
    phase: str
    a_bytes: int | None
    b_bytes: int | None
    delta_bytes: int | None
    """Unknown (null) where either side traced the site without a size."""


# --------------------------------------------------------------------------------------------
# JSON out: dataclasses → plain dicts, enums → their value, tuples → lists.


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, AuditConfig):
        return obj.to_json()
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in fields(obj)
                if not (f.metadata.get("omit_none") and getattr(obj, f.name) is None)}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {(k.value if isinstance(k, Enum) else k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def dumps(obj: Report | DiffReport) -> str:
    return json.dumps(to_jsonable(obj), indent=2) + "\n"
