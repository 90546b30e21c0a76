"""Phase measurements → owners and the KV figure. Pure functions over integers.

Notation (docs/design.md): A(p) torch allocated at the end of phase p, P(p) torch peak during p,
R(p) torch reserved, U(p) device used, `others` other processes at baseline, and
NT(p) = U(p) − R(p) − others, the non-torch bytes of this process.

Every non-KV byte of the process is claimed by exactly one owner, so the ledger balances by
construction: the owners plus `kv_unallocated` equal the requested budget, and the owners minus
the transient peak minus any unused graph reservation equal U(last) − others. `check_balance`
re-proves that on any report, including ones read back from disk.

What the KV figure holds and whether the config fits (tokens, levers, safe flags, the over-commit
tolerance) is kvaudit/capacity.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvaudit.errors import BadInputError
from kvaudit.schema import (
    NON_KV_OWNERS,
    BudgetTerm,
    KvTerm,
    Owner,
    Phase,
    PhaseRecord,
    RankReport,
    budget_total,
)
from kvaudit.units import minus, plus

Phases = Mapping[Phase, PhaseRecord]


def requested_bytes(device_total_bytes: int, gpu_memory_utilization: float) -> int:
    """vLLM's request_memory: ceil(total × utilization), total as mem_get_info reports it
    (docs/vllm-startup.md §1.2, §2.1)."""
    return math.ceil(device_total_bytes * gpu_memory_utilization)


def _reading(phases: Phases, phase: Phase, attr: str) -> int | None:
    record = phases.get(phase)
    return None if record is None else getattr(record, attr)


def _allocated(phases: Phases, phase: Phase) -> int | None:
    """A(p)."""
    return _reading(phases, phase, "torch_allocated_bytes")


def _reserved(phases: Phases, phase: Phase) -> int | None:
    """R(p)."""
    return _reading(phases, phase, "torch_reserved_bytes")


def _outside_torch(phases: Phases, phase: Phase) -> int | None:
    """U(p) − R(p): non-torch bytes on the device, other processes included."""
    return minus(_reading(phases, phase, "device_used_bytes"), _reserved(phases, phase))


def _pool_segments(phases: Phases, phase: Phase) -> int | None:
    """Graph private-pool segments at the end of the phase; None when they were not read."""
    return _reading(phases, phase, "graph_pool_bytes")


@dataclass(frozen=True)
class RankLedger:
    """The arithmetic of one rank, at sizing time (before KV) or at the end of the boot."""

    owners: dict[Owner, int | None]
    requested_bytes: int | None
    kv_available_bytes: int | None
    """What the engine gave vLLM for KV: the budget's terms before vLLM's block rounding."""
    kv_budget: tuple[KvTerm, ...] | None
    naive_kv_available_bytes: int | None
    graph_pool_actual_bytes: int | None
    free_at_start_bytes: int | None


@dataclass(frozen=True)
class GraphMeasurement:
    """kvaudit's own profiling capture before KV: every configured graph (the speculator's too)
    captured into a temporary private pool under a minimal KV cache, then torn down. All bytes."""

    pool_bytes: int
    """The temporary pool's segments at the end of capture: its full high-water, pages freed
    inside the pool included (a pool never returns segments while it is alive)."""
    live_non_torch_bytes: int
    """Device memory outside the allocator that the live graphs held (driver graph objects)."""
    transient_bytes: int
    """The capture's peak above what the session held at its end: warmup runs and capture inputs
    outside the pool, freed before KV is used."""
    retained_pool_bytes: int = 0
    """Private-pool segments still resident after the teardown (a pool something keeps alive)."""
    retained_live_bytes: int = 0
    """Of those, bytes still in use by live blocks."""
    residue_bytes: int = 0
    """Torch reserved after the teardown minus before the minimal cache was built: what the
    session kept after its teardown (already resident when KV is sized)."""
    residue_non_torch_bytes: int = 0
    """Non-torch bytes the teardown did not give back."""
    session_torch_bytes: int = 0
    """Torch reserved the capture session held at its end over its start: the pool, the buffers
    the capture keeps alive outside it (vLLM 0.33 MRv2: 32 MiB per graph manager) and the
    default pool's cached blocks of its warmup passes; the real capture holds the same, since
    vLLM empties no cache after it. 0 where not read (older measurements: the pool alone)."""
    profiling_residue_non_torch_bytes: int = 0
    """Non-torch bytes the whole graphs phase left resident (vLLM's own profiling capture and
    this session): driver memory of destroyed graphs, which the real capture reuses."""

    @property
    def estimate_bytes(self) -> int:
        """The graph memory KV sizing charges: what the real capture will hold in torch memory
        (the session's held bytes, at least its pool) and in driver memory (its graphs' driver
        memory, or the residue profiling left resident, whichever is larger: the residue is
        resident when KV is sized and the real capture reuses it). A retained pool with live
        blocks may have none of its pages reused, so it is charged on top; a retained pool whose
        pages are all free holds the same capture again, so only its part above the high-water is."""
        held = max(self.session_torch_bytes, self.pool_bytes)
        if self.retained_live_bytes:
            retained = self.retained_pool_bytes
        else:
            retained = max(self.retained_pool_bytes - held, 0)
        driver = max(self.live_non_torch_bytes, self.profiling_residue_non_torch_bytes, 0)
        return held + driver + retained

    def facts(self) -> dict[str, int]:
        return {"graph_pool_measured_bytes": self.pool_bytes, "graph_live_non_torch_bytes": self.live_non_torch_bytes,
                "graph_capture_transient_bytes": self.transient_bytes,
                "graph_retained_pool_bytes": self.retained_pool_bytes,
                "graph_retained_live_bytes": self.retained_live_bytes,
                "graph_profiling_residue_bytes": self.residue_bytes,
                "graph_profiling_residue_non_torch_bytes": self.residue_non_torch_bytes,
                "graph_session_torch_bytes": self.session_torch_bytes,
                "graph_phase_residue_non_torch_bytes": self.profiling_residue_non_torch_bytes}


def kv_structures_bytes(before: tuple[int, int], built: tuple[int, int], kv_cache_bytes: int) -> int:
    """What KV initialisation takes besides the cache (metadata builders, block tables, input batch), from the
    torch (reserved, allocated) bytes read before and after it made a minimal KV cache of `kv_cache_bytes`: it
    comes again with the real cache, so the sizing keeps it back. Reserved, since the device holds the
    structures' segments and the allocator's rounding of the KV tensors (up to 2 MiB) lands there too (H200,
    vLLM 0.26: 36 MiB allocated, 39.2 MiB reserved); but at least what was allocated: where the allocator's
    cache had room (a warm compile cache left 2.35 GiB of it after the profile, H100, vLLM 0.26, DeepSeek-V3
    dims with MTP), the minimal cache's structures reserved nothing, while the real cache's reserved 76.01 MiB
    for 72.0 MiB allocated and the boot ended 75.39 MiB over its budget."""
    reserved = built[0] - before[0] - kv_cache_bytes
    allocated = built[1] - before[1] - kv_cache_bytes
    return max(reserved, allocated, 0)


def measure_graphs(*, resident: tuple[int, int], start: tuple[int, int], end: tuple[int, int],
                   peak_reserved: int, pool: int, after: tuple[int, int],
                   retained: tuple[int, int] = (0, 0), phase_start: tuple[int, int] | None = None) -> GraphMeasurement:
    """GraphMeasurement from (torch reserved, device used) pairs read around the capture:
    `phase_start` before vLLM's own graph profiling (None: not read), `resident` before the
    minimal cache was built, `start` just before capture (cache built), `end` just after it
    (graphs live), `after` once everything was torn down and the cache emptied; `peak_reserved`
    the allocator's peak during capture (reset at `start`), `pool` the temporary pool's segments
    at `end`, `retained` (reserved, allocated) of private pools after."""
    first = phase_start if phase_start is not None else resident
    return GraphMeasurement(
        pool_bytes=pool,
        live_non_torch_bytes=_non_torch(end) - _non_torch(start),
        transient_bytes=max(peak_reserved - max(end[0], start[0] + pool), 0),
        retained_pool_bytes=retained[0], retained_live_bytes=retained[1],
        residue_bytes=after[0] - resident[0],
        residue_non_torch_bytes=_non_torch(after) - _non_torch(resident),
        session_torch_bytes=max(end[0] - start[0], 0),
        profiling_residue_non_torch_bytes=max(_non_torch(after) - _non_torch(first), 0))


def _non_torch(reading: tuple[int, int]) -> int:
    """Device used − torch reserved of one (torch reserved, device used) reading."""
    torch_reserved, device_used = reading
    return device_used - torch_reserved


ALLOCATOR_ROUND_BYTES = 2 << 20
"""PyTorch's CUDA caching allocator gives an allocation of 10 MiB or more a segment rounded up to
2 MiB: what a KV tensor really takes (docs/design.md, KV sizing)."""


def _round_up(n: int, granularity: int) -> int:
    return -(-n // granularity) * granularity


def kv_blocks_within(available_bytes: int, tensor_block_bytes: Sequence[int],
                     granularity: int = ALLOCATOR_ROUND_BYTES) -> int:
    """The most KV blocks N whose tensors' allocator segments fit in `available_bytes`: vLLM
    allocates one tensor of N × p bytes per entry of `tensor_block_bytes` (0.26: one per
    KVCacheTensor), and each takes its size rounded up to the allocator's granularity. On an
    8B dense model (32 tensors) the rounding is 52 MiB, which a bytes-only budget misses."""
    per_block = sum(tensor_block_bytes)
    if per_block <= 0 or available_bytes <= 0:
        return 0

    def fits(n: int) -> bool:
        return sum(_round_up(n * block_bytes, granularity) for block_bytes in tensor_block_bytes) <= available_bytes

    lo = max((available_bytes - len(tensor_block_bytes) * granularity) // per_block, 0)
    hi = available_bytes // per_block
    while lo < hi:  # fits(lo) holds; find the largest n that fits
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def last_measured_phase(phases: Phases) -> Phase | None:
    """The latest phase up to capture with a device measurement (verify is a separate check)."""
    for phase in (Phase.CAPTURE, Phase.KV, Phase.GRAPHS, Phase.REPLAY, Phase.PERSISTENT, Phase.PROFILE,
                  Phase.LOAD, Phase.BASELINE):
        if _reading(phases, phase, "device_used_bytes") is not None:
            return phase
    return None


def graphs_non_torch(phases: Phases) -> int:
    """Non-torch bytes the graph-profiling phase left behind (driver state of pools and graphs
    that outlive it): graph memory, claimed by graph_pool, not by non_torch."""
    growth = minus(_outside_torch(phases, Phase.GRAPHS), _outside_torch(phases, Phase.REPLAY))
    return max(growth or 0, 0)


def capture_non_torch(phases: Phases) -> int | None:
    """Non-torch bytes the real capture added (driver state of its graphs)."""
    return minus(_outside_torch(phases, Phase.CAPTURE), _outside_torch(phases, Phase.KV))


def capture_held_outside_pool(phases: Phases) -> int:
    """Torch memory the real capture added outside its pool, where it captured graphs (its pool
    grew): buffers the graph managers keep alive and the cached blocks of the capture's warmup
    passes (vLLM 0.33 MRv2: 33 MiB of live buffers per graph manager). Graph memory, charged at
    sizing in kvaudit's estimate (GraphMeasurement.session_torch_bytes); 0 where nothing was
    captured (eager, the CPU backend), where the phase's growth is not graph memory."""
    pool_growth = minus(_pool_segments(phases, Phase.CAPTURE), _pool_segments(phases, Phase.KV))
    if not pool_growth or pool_growth <= 0:
        return 0
    torch_growth = minus(_reserved(phases, Phase.CAPTURE), _reserved(phases, Phase.KV))
    return max((torch_growth or 0) - pool_growth, 0)


def graph_pool_actual(phases: Phases) -> int | None:
    """Pool segments at the end of the real capture (retained pages included), plus what the
    capture holds outside its pool, the non-torch growth of the capture and what graph
    profiling left behind."""
    if Phase.CAPTURE not in phases or Phase.KV not in phases:
        return None
    return plus(_pool_segments(phases, Phase.CAPTURE), capture_held_outside_pool(phases),
                capture_non_torch(phases), graphs_non_torch(phases))


def _lower(before: int | None, after: int | None) -> int | None:
    """The lower reading; `before` alone where the other is unknown."""
    return before if after is None or before is None else min(before, after)


@dataclass(frozen=True)
class StepTransients:
    """What activation_peak weighs beside the replay's own transient: the graph capture's outside
    its pool, kvaudit's long-prefill probe's (one max_num_batched_tokens chunk attending to a
    max_model_len context, with attention, which vLLM's profile pass runs without; GPU, Model
    Runner V2, vLLM 0.33 on), None where not measured; and whether torch's allocator ran with
    expandable segments (`expandable_segments`)."""
    capture_bytes: int | None = None
    prefill_probe_bytes: int | None = None
    expandable_segments: bool = False

    @property
    def largest(self) -> int | None:
        known = [t for t in (self.capture_bytes, self.prefill_probe_bytes) if t is not None]
        return max(known) if known else None


NO_STEP_TRANSIENTS = StepTransients()


ALLOC_CONF_ENV = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")
"""torch's allocator settings, in the order it reads them: the first that is set is the only one
read (c10/core/AllocatorConfig.h: PYTORCH_ALLOC_CONF, then the older names)."""


def expandable_segments(env: Mapping[str, str]) -> bool:
    """Whether torch's device allocator maps its memory into expandable segments in a process with
    this environment: `expandable_segments:True` among the comma-separated `key:value` options of
    the first ALLOC_CONF_ENV variable that is set (a later option overrides an earlier one)."""
    name = next((n for n in ALLOC_CONF_ENV if n in env), None)
    found = False
    for option in env.get(name, "").split(",") if name else ():
        key, _, value = option.partition(":")
        if key.strip() == "expandable_segments":
            found = value.strip().lower() == "true"
    return found


def activation_peak(phases: Phases, transients: StepTransients = NO_STEP_TRANSIENTS) -> int | None:
    """P(replay) − A(persistent), or the reserved transient PR(replay) − R(persistent) when it is
    larger: the allocator rounds the transient's blocks up to its segments (2 MiB for small
    blocks, 20 MiB for 1–10 MiB ones), and the device must hold the segments, not the blocks.
    The transients measured beside the replay (StepTransients) are charged where larger: the
    capture runs after KV inside the same activation budget, and the probe's steps are the
    longest prompt's.

    With expandable segments (StepTransients.expandable_segments), where the long-prefill probe
    measured, the replay's reserved transient is left out; its allocated one stays. From 0.32 vLLM
    runs its profile pass under a 20 MiB split limit (Worker._scoped_allocator_max_split), which
    serving does not have: the pass never splits a freed block above the limit, so it reserves
    far more than serving does. The probe measures the longest steps' reserved growth outside the
    limit. With the default allocator the replay's reserved transient stays: serving fragments its
    cache beyond any single step. Figures, one boot each way: docs/vllm-0.34.md, fourth lease.

    The base is the lower of the readings before and after the replay: KV sits on what is left
    after it, so memory the replay released (host RSS that the heap returned to the system during
    the pass: 10 MiB in one CPU boot, whose verify then peaked 18.6 MiB above its request) is
    transient headroom the peak needed, not persistent memory charged elsewhere."""
    allocated = minus(_reading(phases, Phase.REPLAY, "torch_peak_allocated_bytes"),
                      _lower(_allocated(phases, Phase.PERSISTENT), _allocated(phases, Phase.REPLAY)))
    reserved = minus(_reading(phases, Phase.REPLAY, "torch_peak_reserved_bytes"),
                     _lower(_reserved(phases, Phase.PERSISTENT), _reserved(phases, Phase.REPLAY)))
    if transients.prefill_probe_bytes is not None and transients.expandable_segments:
        reserved = None
    peak = allocated if allocated is None or reserved is None else max(allocated, reserved)
    extra = transients.largest
    if peak is None or extra is None:
        return peak
    return max(peak, extra)


def growth_after_sizing(phases: Phases, *, others_bytes: int | None, graph_pool_estimate_bytes: int | None,
                        kv_cache_bytes: int | None, requested: int | None,
                        transients: StepTransients = NO_STEP_TRANSIENTS) -> dict[Owner, int]:
    """Per non-KV owner: what it held at the end of the boot minus what KV sizing charged it:
    the bytes that arrived after the budget was fixed (KV structures, the real capture above
    its estimate, sampler buffers, deferred warmups). Only owners that grew are listed."""
    final = owners_from_phases(phases, others_bytes=others_bytes, graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                               kv_cache_bytes=kv_cache_bytes, requested=requested,
                               transients=transients)
    sizing = owners_at_sizing(phases, others_bytes=others_bytes, graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                              requested=requested, transients=transients)
    out = {}
    for owner in NON_KV_OWNERS:
        delta = minus(final[owner], sizing[owner])
        if delta:
            out[owner] = delta
    return out


def owners_from_phases(phases: Phases, *, others_bytes: int | None, graph_pool_estimate_bytes: int | None,
                       kv_cache_bytes: int | None, requested: int | None,
                       last: Phase | None = None,
                       transients: StepTransients = NO_STEP_TRANSIENTS) -> dict[Owner, int | None]:
    """docs/design.md's owner formulas, with every process byte claimed once (see `Owner.TORCH_OTHER`)."""
    last = last or last_measured_phase(phases)
    weights = minus(_allocated(phases, Phase.LOAD), _allocated(phases, Phase.BASELINE))
    persistent_torch = minus(_allocated(phases, Phase.PERSISTENT), _allocated(phases, Phase.PROFILE))
    persistent_non_torch = minus(_outside_torch(phases, Phase.PERSISTENT), _outside_torch(phases, Phase.PROFILE))
    persistent = plus(persistent_torch, persistent_non_torch)
    activation = activation_peak(phases, transients)

    actual = graph_pool_actual(phases) if last is Phase.CAPTURE else None
    graphs_left = graphs_non_torch(phases) if last in (Phase.GRAPHS, Phase.KV, Phase.CAPTURE) else 0
    # Before capture, graph profiling's non-torch residue is already resident: the owner holds at
    # least that, even when vLLM's estimate is smaller, or those bytes would be charged to nobody.
    resident_graph = graphs_left if last in (Phase.GRAPHS, Phase.KV) else None
    known_graph = [g for g in (graph_pool_estimate_bytes, actual, resident_graph) if g is not None]
    graph_pool = max(known_graph) if known_graph else None
    capture_added = capture_non_torch(phases) if last is Phase.CAPTURE else 0

    kv_held = kv_cache_bytes if last in (Phase.KV, Phase.CAPTURE) else 0
    non_torch = torch_other = None
    if last is not None:
        non_torch_at_last = minus(_outside_torch(phases, last), others_bytes)  # NT(last)
        non_torch = minus(non_torch_at_last, plus(persistent_non_torch, capture_added, graphs_left))
        held = capture_held_outside_pool(phases) if last is Phase.CAPTURE else 0
        torch_other = minus(_reserved(phases, last),
                            plus(_pool_segments(phases, last), weights, persistent_torch, kv_held, held))

    owners = {Owner.WEIGHTS: weights, Owner.PERSISTENT: persistent, Owner.ACTIVATION_PEAK: activation,
              Owner.GRAPH_POOL: graph_pool, Owner.NON_TORCH: non_torch, Owner.TORCH_OTHER: torch_other,
              Owner.KV_CACHE: kv_cache_bytes if last in (Phase.KV, Phase.CAPTURE) else None}
    charged = plus(*(owners[o] for o in NON_KV_OWNERS), owners[Owner.KV_CACHE])
    owners[Owner.KV_UNALLOCATED] = minus(requested, charged)
    return owners


def naive_kv_available(phases: Phases, *, requested: int | None, others_bytes: int | None,
                       graph_pool_estimate_bytes: int | None) -> int | None:
    """What one profile pass before any warmup gives (upstream vLLM's order):
    requested − (weights + P(profile) − A(load) + non-torch at profile + graph estimate)."""
    weights = minus(_allocated(phases, Phase.LOAD), _allocated(phases, Phase.BASELINE))
    transient = minus(_reading(phases, Phase.PROFILE, "torch_peak_allocated_bytes"), _allocated(phases, Phase.LOAD))
    non_torch = minus(_outside_torch(phases, Phase.PROFILE), others_bytes)
    return minus(requested, plus(weights, transient, non_torch, graph_pool_estimate_bytes or 0))


def owners_at_sizing(phases: Phases, *, others_bytes: int | None, graph_pool_estimate_bytes: int | None,
                     requested: int | None, transients: StepTransients = NO_STEP_TRANSIENTS) -> dict[Owner, int | None]:
    """The owners as KV sizing charged them: from the phases before KV (kv, capture and verify
    come after the budget is fixed)."""
    before_kv: dict[Phase, PhaseRecord] = {phase: record for phase, record in phases.items()
                 if phase not in (Phase.KV, Phase.CAPTURE, Phase.VERIFY)}
    return owners_from_phases(before_kv, others_bytes=others_bytes, graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                              kv_cache_bytes=None, requested=requested,
                              transients=transients)


def kv_budget(phases: Phases, *, requested: int, others_bytes: int | None,
              graph_pool_estimate_bytes: int | None, transients: StepTransients = NO_STEP_TRANSIENTS,
              kv_structures_bytes: int = 0, kv_tensor_block_bytes: Sequence[int] | None = None,
              fallback_bytes: int | None = None, returned_bytes: int | None = None,
              kv_cache_bytes: int | None = None) -> tuple[KvTerm, ...] | None:
    """Every term from the requested budget down to the KV bytes of one rank, in order (the
    requested budget positive, each deduction negative; `budget_total` is their sum):

    requested − each non-KV owner as KV sizing charged it (`owners_at_sizing`) − the KV structures
    (what KV initialisation takes besides the cache, measured before sizing) − the segment rounding
    (CUDA, `kv_tensor_block_bytes` known: the most whole blocks whose tensors' allocator segments
    fit, `kv_blocks_within`) = kvaudit's KV figure, what the audit worker returns to vLLM. Where a
    phase sizing needs was not read, `unmeasured` takes the budget down to `fallback_bytes` (the
    engine's fallback: vLLM's own figure, else 0) instead.

    Read back from a record: `returned_bytes`, what the engine says it returned, adds
    `sized_otherwise` where it differs (the selftest's naive sizing; else a disagreement the
    caller must say aloud); `kv_cache_bytes`, what vLLM allocated, adds `block_rounding`, so the
    terms then sum to the rank's `owners.kv_cache`."""
    sizing = owners_at_sizing(phases, others_bytes=others_bytes, graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                              requested=requested, transients=transients)
    terms = [KvTerm(BudgetTerm.REQUESTED, requested)]
    charged = [sizing[o] for o in NON_KV_OWNERS]
    if Phase.REPLAY in phases and all(c is not None for c in charged):
        terms += [KvTerm(BudgetTerm(o.value), -c) for o, c in zip(NON_KV_OWNERS, charged)]  # type: ignore[operator]
        terms.append(KvTerm(BudgetTerm.KV_STRUCTURES, -kv_structures_bytes))
        if kv_tensor_block_bytes:  # whole blocks whose tensors' allocator segments fit, not just their bytes
            available = budget_total(tuple(terms))
            fitted = kv_blocks_within(available, kv_tensor_block_bytes) * sum(kv_tensor_block_bytes)
            terms.append(KvTerm(BudgetTerm.SEGMENT_ROUNDING, fitted - available))
    else:
        fallback = returned_bytes if returned_bytes is not None else fallback_bytes
        if fallback is None:
            return None
        terms.append(KvTerm(BudgetTerm.UNMEASURED, fallback - requested))
    if returned_bytes is not None and returned_bytes != budget_total(tuple(terms)):
        terms.append(KvTerm(BudgetTerm.SIZED_OTHERWISE, returned_bytes - budget_total(tuple(terms))))
    if kv_cache_bytes is not None:
        terms.append(KvTerm(BudgetTerm.BLOCK_ROUNDING, kv_cache_bytes - budget_total(tuple(terms))))
    return tuple(terms)


def budget_term(terms: Sequence[KvTerm] | None, term: BudgetTerm) -> int | None:
    """The bytes of one term of a budget (its deduction as a negative number); None where absent."""
    return next((t.bytes for t in terms or () if t.term is term), None)


def rank_ledger(phases: Phases, *, device_total_bytes: int | None, gpu_memory_utilization: float | None,
                others_bytes: int | None, graph_pool_estimate_bytes: int | None,
                kv_cache_bytes: int | None, transients: StepTransients = NO_STEP_TRANSIENTS,
                kv_structures_bytes: int = 0, kv_tensor_block_bytes: Sequence[int] | None = None,
                returned_bytes: int | None = None) -> RankLedger:
    """Everything the report says of one rank that arithmetic can say; `returned_bytes`: the KV
    figure the engine says it gave vLLM (see kv_budget)."""
    requested = (requested_bytes(device_total_bytes, gpu_memory_utilization)
                 if device_total_bytes is not None and gpu_memory_utilization is not None else None)
    budget = (kv_budget(phases, requested=requested, others_bytes=others_bytes,
                        graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                        transients=transients, kv_structures_bytes=kv_structures_bytes,
                        kv_tensor_block_bytes=kv_tensor_block_bytes, returned_bytes=returned_bytes,
                        kv_cache_bytes=kv_cache_bytes)
              if requested is not None else None)
    return RankLedger(
        owners=owners_from_phases(phases, others_bytes=others_bytes,
                                  graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                                  kv_cache_bytes=kv_cache_bytes, requested=requested,
                                  transients=transients),
        requested_bytes=requested,
        kv_available_bytes=kv_figure(budget) if budget is not None else returned_bytes,
        kv_budget=budget,
        naive_kv_available_bytes=naive_kv_available(phases, requested=requested, others_bytes=others_bytes,
                                                    graph_pool_estimate_bytes=graph_pool_estimate_bytes),
        graph_pool_actual_bytes=graph_pool_actual(phases),
        free_at_start_bytes=minus(device_total_bytes, _reading(phases, Phase.BASELINE, "device_used_bytes")),
    )


def kv_figure(terms: Sequence[KvTerm]) -> int:
    """The KV figure given to vLLM: the budget's terms before vLLM's block rounding."""
    return sum(t.bytes for t in terms if t.term is not BudgetTerm.BLOCK_ROUNDING)


def check_balance(rank: RankReport) -> None:
    """Owners + kv_unallocated = requested whenever all are known; anything else is bad input.
    torch_other is an extension: a report written without it balances over the other seven."""
    keys = [o for o in Owner if not (o is Owner.TORCH_OTHER and rank.owners.get(o) is None)]
    values = [rank.owners.get(o) for o in keys]
    if rank.requested_bytes is None or any(v is None for v in values):
        return
    total = sum(values)  # type: ignore[arg-type]
    if total != rank.requested_bytes:
        name = f"rank {rank.rank}" if rank.rank is not None else "a rank with no number"  # never "rank None"
        raise BadInputError(f"{name}: owners sum to {total} bytes but requested is "
                            f"{rank.requested_bytes} ({total - rank.requested_bytes:+d}): the ledger does not balance")


def owners_from_readings(readings: Mapping[Owner, int | None], *, requested: int | None,
                         graph_pool_estimate_bytes: int | None = None,
                         graph_pool_actual_bytes: int | None = None) -> dict[Owner, int | None]:
    """Every owner key, as stated; `graph_pool`, when not stated, the larger known of the pool
    charged at sizing and the real capture's (docs/design.md), a figure below zero being no pool
    (vLLM's capture measured as free memory that something else freed meanwhile: the log engine
    notes it); `kv_unallocated` = requested −
    the others when all of them are known (torch_other is an extension: a source that does not
    state it balances over the rest, as ledger.check_balance does). A null reading stays null."""
    owners: dict[Owner, int | None] = {o: readings.get(o) for o in Owner}
    if owners[Owner.GRAPH_POOL] is None:
        known = [g for g in (graph_pool_estimate_bytes, graph_pool_actual_bytes) if g is not None and g >= 0]
        owners[Owner.GRAPH_POOL] = max(known) if known else None
    charged = [owners[o] for o in NON_KV_OWNERS if not (o is Owner.TORCH_OTHER and owners[o] is None)]
    charged.append(owners[Owner.KV_CACHE])
    owners[Owner.KV_UNALLOCATED] = None if None in charged else minus(requested, sum(charged))  # type: ignore[arg-type]
    return owners
