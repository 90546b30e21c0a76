"""The report contract, `kvaudit.report/1`, and the diff contract, `kvaudit.diff/1`.

Frozen dataclasses with a docstring under each field; integer bytes with the unit in the name;
unknown is `None` (JSON null), never 0. Phases and owners are spelled once, here, as enums, and
used everywhere: code, JSON and tables.

Loading is strict about the stable keys of docs/design.md and lenient about everything else: any
JSON document that carries them is a report, extra keys are ignored, and the extensions this
module adds are optional. A document that is not one gives a one-line `BadInputError`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum, StrEnum
from typing import Any, Mapping

from kvaudit.config import AuditConfig, CONFIG_KEYS, config_from_json
from kvaudit.errors import BadInputError

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


class PhaseStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    DEFERRED = "deferred"


class Source(StrEnum):
    RUN = "run"
    LOG = "log"
    SELFTEST = "selftest"
    PLAN = "plan"
    """Predicted by `kvaudit plan` from a measured report; nothing was booted."""


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
    """What kvaudit sized the KV cache to on this rank (returned to vLLM)."""
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
    """Extension: what vLLM's own arithmetic gave in the same boot (after kvaudit's warmup ran)."""
    vllm_graph_estimate_bytes: int | None = None
    """Extension: vLLM's own graph memory estimate in the same boot (profile_cudagraph_memory;
    0 from MRv2 before 0.29), beside kvaudit's measured `graph_pool_estimate_bytes`."""
    graph_capture_transient_bytes: int | None = None
    """Extension: the profiling capture's peak outside its pool; charged to activation_peak
    only where it exceeds the replay's transient."""
    sites: tuple[Site, ...] | None = None
    """Extension (`--trace`): aggregated allocation sites per phase; null when not traced."""
    sweep: tuple[SweepPoint, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`--sweep`): the activation peak at several token counts up to
    max_num_batched_tokens; absent when not swept."""
    kv_cache_spec_dtype: str | None = field(default=None, metadata=OMIT_NONE)
    """Extension: the dtype of vLLM's KV cache spec in this boot (`torch.bfloat16`), which
    `--kv-cache-dtype auto` leaves implicit; absent when not recorded."""
    node: RankNode | None = field(default=None, metadata=OMIT_NONE)
    """Extension (`kvaudit run`): where this rank ran and how its record reached the report;
    absent in reports from logs and older runs."""

    def owner(self, owner: Owner) -> int | None:
        return self.owners.get(owner)

    def phase(self, name: Phase) -> PhaseRecord | None:
        return next((p for p in self.phases if p.name is name), None)


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


@dataclass(frozen=True)
class VerifyRank:
    rank: int
    true_peak_bytes: int | None
    slack_bytes: int | None


@dataclass(frozen=True)
class Verify:
    ok: bool
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

    @property
    def overrun_bytes(self) -> int:
        """How far the true peak went above the budget (0 when it stayed inside or is unknown)."""
        return max(-(self.slack_bytes or 0), 0)


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


@dataclass(frozen=True)
class Engine:
    name: str | None = None
    version: str | None = None
    model_runner: str | None = None
    attention_backend: str | None = None


@dataclass(frozen=True)
class Environment:
    device_name: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    vllm: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    """VLLM_* and other variables that change memory."""


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

    def binding(self) -> RankReport | None:
        return next((r for r in self.ranks if r.rank == self.capacity.binding_rank), None)


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
class DiffReport:
    comparable: bool
    knob_differences: tuple[KnobDifference, ...]
    environment_differences: tuple[EnvDifference, ...]
    owners: tuple[OwnerDelta, ...]
    dominant_owner: Owner | None
    capacity: Mapping[str, Any]
    """{a: Capacity, b: Capacity, kv_available_delta_bytes, kv_tokens_delta}."""
    verdict: Mapping[str, Verdict]
    a_name: str = "a"
    b_name: str = "b"
    schema: str = DIFF_SCHEMA
    sites: tuple[SiteDelta, ...] = ()
    """Extension: site-level deltas, when both reports carry `--trace` sites; largest |delta| first."""


@dataclass(frozen=True)
class SiteDelta:
    """One allocation site's change between two traced runs, at the last phase both reached."""

    owner: str
    site: str
    rank: int
    phase: str
    a_bytes: int
    b_bytes: int
    delta_bytes: int


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


# --------------------------------------------------------------------------------------------
# JSON in: every value checked, every error one line with the path to the bad key.


class _Obj:
    """A JSON object being read, with the path to it for error messages."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise BadInputError(f"{where}: expected an object, got {_kind(data)}")
        self.data, self.where = data, where

    def _get(self, key: str, required: bool, nullable: bool = True) -> Any:
        if key not in self.data:
            if required:
                raise BadInputError(f"{self.where}: missing key {key!r}")
            return None
        v = self.data[key]
        # Unknown numbers and strings are null, but a section or a name the report is built
        # around is not: null there would crash the loader or every renderer downstream.
        if v is None and required and not nullable:
            raise BadInputError(f"{self.where}.{key}: must not be null")
        return v

    def _bad(self, key: str, want: str, value: Any) -> BadInputError:
        return BadInputError(f"{self.where}.{key}: expected {want}, got {_kind(value)}")

    def int(self, key: str, required: bool = True) -> int | None:
        v = self._get(key, required)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._bad(key, "an integer or null", v)
        return v

    def num(self, key: str, required: bool = True) -> float | None:
        v = self._get(key, required)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self._bad(key, "a number or null", v)
        # json.loads reads NaN, Infinity and 1e999 as non-finite floats, which json.dumps would
        # write back as non-JSON literals; an integer beyond float range cannot become a float.
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f):
            raise BadInputError(f"{self.where}.{key}: expected a number or null, got {_short(v)} (not finite)")
        return f

    def str(self, key: str, required: bool = True) -> str | None:
        v = self._get(key, required)
        if v is not None and not isinstance(v, str):
            raise self._bad(key, "a string or null", v)
        return v

    def bool(self, key: str, required: bool = True) -> bool | None:
        v = self._get(key, required)
        if v is not None and not isinstance(v, bool):
            raise self._bad(key, "true, false or null", v)
        return v

    def enum(self, key: str, kind: type[Enum], required: bool = True, nullable: bool = False) -> Any:
        v = self._get(key, required, nullable)
        if v is None:
            return None
        try:
            return kind(v)
        except (ValueError, TypeError):
            allowed = ", ".join(str(m.value) for m in kind)  # type: ignore[attr-defined]
            raise BadInputError(f"{self.where}.{key}: expected one of {allowed}, got {_short(v)}") from None

    def list(self, key: str, required: bool = True) -> list[Any] | None:
        v = self._get(key, required)
        if v is not None and not isinstance(v, list):
            raise self._bad(key, "a list or null", v)
        return v

    def obj(self, key: str, required: bool = True, nullable: bool = False) -> _Obj | None:
        v = self._get(key, required, nullable)
        return None if v is None else _Obj(v, f"{self.where}.{key}")

    def objs(self, key: str, required: bool = True) -> list[_Obj]:
        items = self.list(key, required) or []
        return [_Obj(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(items)]

    def strs(self, key: str) -> tuple[str, ...]:
        items = self.list(key, required=False) or []
        if not all(isinstance(s, str) for s in items):
            raise BadInputError(f"{self.where}.{key}: expected a list of strings")
        return tuple(items)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: f"the string {_short(v)}",
            list: "a list", dict: "an object"}.get(type(v), type(v).__name__)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _phase(o: _Obj) -> PhaseRecord:
    return PhaseRecord(
        name=o.enum("name", Phase), status=o.enum("status", PhaseStatus), seconds=o.num("seconds"),
        torch_allocated_bytes=o.int("torch_allocated_bytes"), torch_reserved_bytes=o.int("torch_reserved_bytes"),
        torch_peak_allocated_bytes=o.int("torch_peak_allocated_bytes"), device_used_bytes=o.int("device_used_bytes"),
        detail=o.str("detail"), graph_pool_bytes=o.int("graph_pool_bytes", required=False),
        torch_peak_reserved_bytes=o.int("torch_peak_reserved_bytes", required=False))


def _owners(o: _Obj) -> dict[Owner, int | None]:
    for key in o.data:
        if key not in Owner.__members__.values():
            raise BadInputError(f"{o.where}: unknown owner {_short(key)}")
    return {owner: o.int(owner.value, required=owner in STABLE_OWNERS) for owner in Owner}


def _rank(o: _Obj) -> RankReport:
    return RankReport(
        rank=o.int("rank"), tp_rank=o.int("tp_rank"), dcp_rank=o.int("dcp_rank"),
        device_total_bytes=o.int("device_total_bytes"), requested_bytes=o.int("requested_bytes"),
        others_bytes=o.int("others_bytes"), owners=_owners(o.obj("owners")),
        graph_pool_estimate_bytes=o.int("graph_pool_estimate_bytes"),
        graph_pool_actual_bytes=o.int("graph_pool_actual_bytes"), kv_available_bytes=o.int("kv_available_bytes"),
        phases=tuple(_phase(p) for p in o.objs("phases")),
        naive_kv_available_bytes=o.int("naive_kv_available_bytes", required=False),
        free_at_start_bytes=o.int("free_at_start_bytes", required=False),
        graph_pool_retained_bytes=o.int("graph_pool_retained_bytes", required=False),
        kv_blocks=o.int("kv_blocks", required=False), deferred_steps=o.strs("deferred_steps"),
        vllm_kv_available_bytes=o.int("vllm_kv_available_bytes", required=False),
        vllm_graph_estimate_bytes=o.int("vllm_graph_estimate_bytes", required=False),
        graph_capture_transient_bytes=o.int("graph_capture_transient_bytes", required=False),
        sites=_sites(o), sweep=_sweep(o), kv_cache_spec_dtype=o.str("kv_cache_spec_dtype", required=False),
        node=_rank_node(o.obj("node", required=False, nullable=True)))


def _rank_node(o: _Obj | None) -> RankNode | None:
    if o is None:
        return None
    journal = o.str("journal", required=False)
    if journal not in (None, "rpc", "file", "relay"):
        raise BadInputError(f"{o.where}.journal: expected rpc, file, relay or null, got {_short(journal)}")
    return RankNode(node_rank=o.int("node_rank", required=False), host=o.str("host", required=False),
                    ip=o.str("ip", required=False), local_rank=o.int("local_rank", required=False),
                    device_index=o.int("device_index", required=False), journal=journal)


def _nodes(o: _Obj) -> tuple[NodeSummary, ...] | None:
    if o.list("nodes", required=False) is None:
        return None
    out = []
    for n in o.objs("nodes"):
        node_rank = n.int("node_rank")
        if node_rank is None:
            raise BadInputError(f"{n.where}.node_rank: must not be null")
        ranks = n.list("ranks") or []
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise BadInputError(f"{n.where}.ranks: expected a list of integers")
        out.append(NodeSummary(node_rank=node_rank, host=n.str("host"), ip=n.str("ip"), ranks=tuple(ranks),
                               others_bytes=n.int("others_bytes"),
                               physical_headroom_bytes=n.int("physical_headroom_bytes"),
                               binding_rank=n.int("binding_rank"), kv_available_bytes=n.int("kv_available_bytes")))
    return tuple(out)


def _sweep(o: _Obj) -> tuple[SweepPoint, ...] | None:
    if o.list("sweep", required=False) is None:
        return None
    out = []
    for p in o.objs("sweep"):
        tokens, peak = p.int("tokens"), p.int("activation_peak_bytes")
        if tokens is None or tokens < 1 or peak is None:
            raise BadInputError(f"{p.where}: expected tokens ≥ 1 and activation_peak_bytes, not null")
        out.append(SweepPoint(tokens=tokens, activation_peak_bytes=peak, seconds=p.num("seconds", required=False)))
    return tuple(sorted(out, key=lambda x: x.tokens))


def _sites(o: _Obj) -> tuple[Site, ...] | None:
    if o.list("sites", required=False) is None:
        return None
    out = []
    for s in o.objs("sites"):
        at = s.str("at", required=False) or "end"
        if at not in ("end", "peak"):
            raise BadInputError(f"{s.where}.at: expected end or peak, got {_short(at)}")
        out.append(Site(phase=s.str("phase"), owner=s.str("owner"), site=s.str("site"), bytes=s.int("bytes"),
                        blocks=s.int("blocks"), at=at))
    return tuple(out)


def _lever(o: _Obj) -> Lever:
    return Lever(name=o.str("name"), flag=o.str("flag"), frees_bytes=o.int("frees_bytes"),
                 frees_tokens=o.int("frees_tokens"), note=o.str("note", required=False) or "")


def _capacity(o: _Obj) -> Capacity:
    return Capacity(
        kv_available_bytes=o.int("kv_available_bytes"), binding_rank=o.int("binding_rank"),
        kv_tokens=o.int("kv_tokens"), kv_needed_bytes=o.int("kv_needed_bytes"),
        max_model_len_fits=o.bool("max_model_len_fits"), max_feasible_model_len=o.int("max_feasible_model_len"),
        gmu_needed=o.num("gmu_needed"), physical_headroom_bytes=o.int("physical_headroom_bytes"),
        naive_kv_available_bytes=o.int("naive_kv_available_bytes"), safe_serve_flags=o.strs("safe_serve_flags"),
        kv_bytes_per_block=o.int("kv_bytes_per_block", required=False),
        block_size=o.int("block_size", required=False), tokens_per_block=o.int("tokens_per_block", required=False),
        over_allocation_bytes=o.int("over_allocation_bytes", required=False),
        levers=tuple(_lever(x) for x in o.objs("levers", required=False)))


def _verify(o: _Obj) -> Verify:
    return Verify(
        ok=bool(o.bool("ok")), prompt_tokens=o.int("prompt_tokens"), true_peak_bytes=o.int("true_peak_bytes"),
        slack_bytes=o.int("slack_bytes"), error=o.str("error"), decode_tokens=o.int("decode_tokens", required=False),
        repeats=o.int("repeats", required=False), oom_count=o.int("oom_count", required=False),
        ranks=tuple(VerifyRank(rank=r.int("rank"), true_peak_bytes=r.int("true_peak_bytes"),
                               slack_bytes=r.int("slack_bytes")) for r in o.objs("ranks", required=False)))


def _config(o: _Obj) -> AuditConfig:
    stable = ("model", "tensor_parallel_size", "decode_context_parallel_size", "speculative_method",
              "num_speculative_tokens", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
              "max_num_batched_tokens", "cudagraph_capture_sizes", "enforce_eager", "kv_cache_dtype", "block_size")
    for key in stable:
        o._get(key, required=True)
    for key in ("model", "speculative_method", "kv_cache_dtype", "load_format"):
        o.str(key, required=False)
    for key in ("tensor_parallel_size", "decode_context_parallel_size", "num_speculative_tokens", "max_model_len",
                "max_num_seqs", "max_num_batched_tokens", "block_size"):
        o.int(key)
    o.num("gpu_memory_utilization")
    o.bool("enforce_eager")
    sizes = o.list("cudagraph_capture_sizes")
    if sizes is not None and not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
        raise BadInputError(f"{o.where}.cudagraph_capture_sizes: expected a list of integers")
    extra = o.obj("extra_args", required=False)
    data = {k: o.data.get(k) for k in CONFIG_KEYS if k in o.data and k != "extra_args"}
    data["extra_args"] = extra.data if extra else {}
    return config_from_json(data)


def report_from_json(data: Any, where: str = "report") -> Report:
    """Parse a `kvaudit.report/1` document; raises BadInputError with the path to the first problem."""
    o = _Obj(data, where)
    schema = o.str("schema")
    if schema != REPORT_SCHEMA:
        raise BadInputError(f"{where}: schema {schema!r} is not {REPORT_SCHEMA!r}"
                            + (": a diff, not a report" if schema == DIFF_SCHEMA else ""))
    eng, env = o.obj("engine"), o.obj("environment")
    env_vars = env.obj("env", nullable=True)
    if env_vars is not None and not all(isinstance(v, str) for v in env_vars.data.values()):
        raise BadInputError(f"{env_vars.where}: expected string values")
    verify, failure = o.obj("verify", nullable=True), o.obj("failure", nullable=True)
    accuracy = o.list("accuracy", required=False)
    return Report(
        schema=schema, source=o.enum("source", Source),
        engine=Engine(name=eng.str("name"), version=eng.str("version"), model_runner=eng.str("model_runner"),
                      attention_backend=eng.str("attention_backend")),
        environment=Environment(device_name=env.str("device_name"), driver=env.str("driver"), cuda=env.str("cuda"),
                                torch=env.str("torch"), vllm=env.str("vllm"),
                                env=dict(env_vars.data) if env_vars else {}),
        config=_config(o.obj("config")),
        ranks=tuple(_rank(r) for r in o.objs("ranks")),
        capacity=_capacity(o.obj("capacity")),
        verify=_verify(verify) if verify else None,
        accuracy=None if accuracy is None else tuple(
            AccuracyEntry(owner=a.enum("owner", Owner), rank=a.int("rank"), planted_bytes=a.int("planted_bytes"),
                          measured_bytes=a.int("measured_bytes")) for a in o.objs("accuracy", required=False)),
        verdict=o.enum("verdict", Verdict),
        failure=None if failure is None else Failure(
            phase=failure.enum("phase", Phase, nullable=True), rank=failure.int("rank"),
            kind=failure.enum("kind", FailureKind), message=failure.str("message") or ""),
        verdict_reason=o.str("verdict_reason", required=False) or "",
        warnings=o.strs("warnings"), kvaudit_version=o.str("kvaudit_version", required=False), nodes=_nodes(o))


def diff_from_json(data: Any, where: str = "diff") -> DiffReport:
    o = _Obj(data, where)
    if o.str("schema") != DIFF_SCHEMA:
        raise BadInputError(f"{where}: schema {o.data.get('schema')!r} is not {DIFF_SCHEMA!r}")
    cap = o.obj("capacity")
    cap_a, cap_b = cap.obj("a", nullable=True), cap.obj("b", nullable=True)
    verdict = o.obj("verdict")
    return DiffReport(
        comparable=bool(o.bool("comparable")),
        knob_differences=tuple(KnobDifference(k.str("knob"), k._get("a", True), k._get("b", True))
                               for k in o.objs("knob_differences")),
        environment_differences=tuple(EnvDifference(e.str("key"), e._get("a", True), e._get("b", True))
                                      for e in o.objs("environment_differences")),
        owners=tuple(OwnerDelta(owner=d.enum("owner", Owner), rank=d.int("rank"), a_bytes=d.int("a_bytes"),
                                b_bytes=d.int("b_bytes"), delta_bytes=d.int("delta_bytes")) for d in o.objs("owners")),
        dominant_owner=o.enum("dominant_owner", Owner, nullable=True),
        capacity={"a": _capacity(cap_a) if cap_a else None, "b": _capacity(cap_b) if cap_b else None,
                  "kv_available_delta_bytes": cap.int("kv_available_delta_bytes"),
                  "kv_tokens_delta": cap.int("kv_tokens_delta", required=False)},
        verdict={"a": verdict.enum("a", Verdict), "b": verdict.enum("b", Verdict)},
        a_name=o.str("a_name", required=False) or "a", b_name=o.str("b_name", required=False) or "b",
        sites=tuple(SiteDelta(owner=d.str("owner"), site=d.str("site"), rank=d.int("rank"), phase=d.str("phase"),
                              a_bytes=d.int("a_bytes"), b_bytes=d.int("b_bytes"), delta_bytes=d.int("delta_bytes"))
                    for d in o.objs("sites", required=False)))
