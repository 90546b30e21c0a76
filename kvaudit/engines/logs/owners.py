"""One rank's readings in its logs: the owners a log can show and what it says of each phase.

Owners a log can show (docs/vllm-startup.md §5.7): weights, graph_pool, kv_cache,
activation_peak (new wording: {peak} − the applied graph estimate; old wording: {peak}; V0
0.6.4–0.6.5: peak_torch_memory − the weights; vLLM 0.34's extensible KV cache: what its sizing
kept free for transients, kvaudit/engines/logs/extensible.py), non_torch (old wording; new wording:
consumed − weights, persistent torch included).
`persistent` and `torch_other` are never logged; the ledger (`kvaudit.ledger.owners_from_readings`)
makes graph_pool and kv_unallocated of what is stated, and a null stays null.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TypeVar

from kvaudit.engines.logs import extensible
from kvaudit.engines.logs.facts import FactKind, GraphEstimate
from kvaudit.engines.logs.ranks import KV_KINDS, Located, RankFacts
from kvaudit.ledger import requested_bytes as request_memory
from kvaudit.record import StatedRank
from kvaudit.schema import (
    COMPILE_HIT,
    COMPILE_MISS,
    Failure,
    Owner,
    Phase,
    PhaseRecord,
    PhaseStatus,
    RankReport,
    compile_cache_state,
)
from kvaudit.units import GiB, fmt_gib

GRAPH_OVER_LEAST = GiB // 100
"""The least a capture past its charged estimate is said to be: 0.01 GiB, the figures' own precision."""
NEVER_NEGATIVE = (Owner.WEIGHTS, Owner.ACTIVATION_PEAK, Owner.KV_CACHE)
"""Owners a log states as memory held: a negative figure for one is no reading. (non_torch is a
difference vLLM measures and may dip below zero; an over-committed budget's available KV is
negative, and kv_cache is then unknown since nothing was allocated.)"""
BEFORE_ALLOCATION = (Phase.BASELINE, Phase.LOAD, Phase.PROFILE, Phase.GRAPHS, Phase.KV)
"""Phases a failure can strike in before vLLM allocated the KV cache: no KV figure is its size then."""


@dataclass(frozen=True)
class _Graphs:
    estimate: int | None
    actual: int | None
    retained: int | None
    inferred_zero: bool
    """The estimate is 0 because vLLM printed none of the lines it prints when it is > 0."""
    graphs_off: bool
    """The estimate is 0 because the engine captures no CUDA graphs (enforce_eager, cudagraph_mode NONE)."""
    profile_capture: tuple[float, int] | None
    real_capture: tuple[float, int] | None


_ESTIMATE_ORDER = ("mrv2", "pool", "estimated")


_SIZED = (FactKind.KV_AVAILABLE, FactKind.ADVISORY, FactKind.ADVISORY_DISABLED, FactKind.KV_FIXED)
"""What gpu_worker.py determine_available_memory prints once the profiling capture is over; or,
where kv_cache_memory_bytes fixed the cache, instead of profiling (no profiling capture then: the
one capture after it is the real one, seen in vLLM 0.34.0's log on the H200)."""
_CAPTURED = (FactKind.GRAPH_ACTUAL, FactKind.PEAK_WITH_GRAPHS, FactKind.GRAPH_USAGE)
"""What compile_or_warm_up_model prints once the real capture is over ("CUDA graph pool memory",
the "Actual usage" line in either wording: GRAPH_USAGE is the older one's `… and 2.04 GiB for CUDAGraph
memory`, real pastes round twenty: vllm PR 48601's MRv2 boot)."""


def _at(fact: Located) -> tuple[int, int]:
    """Where a fact was printed, in the order of the boot's lines (a rank's come from one file)."""
    return fact.file, fact.pos


def _v2_captures(r: RankFacts) -> tuple[tuple[float, int] | None, tuple[float, int] | None]:
    """(profiling capture, real capture) of a Model Runner V2 rank. V2 prints "Graph capturing
    finished" for the profiling capture (capture_model(profile_only=True), before the KV cache is
    sized) and again for the real one (gpu/model_runner.py). Where the rank's lines show when the
    KV cache was sized, a capture before it is the profiling one and a capture after it the real
    one; else a capture right before the lines printed after the real capture is the real one (an
    excerpt that starts there); else, as the order goes, the first is the profiling one."""
    captures = r.facts.get(FactKind.GRAPH_CAPTURE, [])
    if not captures:
        return None, None
    sized = [_at(f) for k in _SIZED for f in r.facts.get(k, ())]
    captured = [_at(f) for k in _CAPTURED for f in r.facts.get(k, ())]
    if sized:
        before = [c.value for c in captures if _at(c) < min(sized)]
        after = [c.value for c in captures if _at(c) > min(sized)]
        return (before[0] if before else None), (after[-1] if after else None)
    if captured:
        until = [c for c in captures if _at(c) < max(captured)]
        if until:
            earlier = [c.value for c in until[:-1]]
            return (earlier[0] if earlier else None), until[-1].value
    values = [c.value for c in captures]
    return values[0], (values[-1] if len(values) >= 2 else None)


def _shows_where_estimate_lines_go(r: RankFacts) -> bool:
    """Whether the rank's lines cover a place where vLLM prints an estimate line when the estimate
    is > 0: the advisory right after "Available KV cache memory" (determine_available_memory), the
    pool line between the real capture and "Actual usage" (compile_or_warm_up_model). An excerpt
    that starts at the "Actual usage" line shows neither, and says nothing of the estimate; nor does
    one whose "Available KV cache memory" line comes after its "Actual usage" line (lines a person
    picked and reordered: real pastes round seventeen, 17:00:41 before 17:00:33)."""
    usage = sorted(_at(f) for k in (FactKind.PEAK_WITH_GRAPHS, FactKind.GRAPH_USAGE) for f in r.facts.get(k, ()))
    captures = r.facts.get(FactKind.GRAPH_CAPTURE, [])
    return any(_at(c) < usage[-1] for c in captures + r.facts.get(FactKind.KV_AVAILABLE, [])) if usage else False


SUM_SLACK = round(0.03 * 2**30)
"""How far vLLM's KV in use may be from the request less three figures and still be that difference: five
figures, each rounded to 0.01 GiB (0.005 GiB each way)."""


def _sized_without_graphs(r: RankFacts, requested: int | None) -> bool:
    """The older "Actual usage" line proves vLLM charged no graph memory where its KV cache in use is the
    request less weights, peak and non-torch, to the figures' precision (vllm PR 48601's MRv2 boot: 72.78 −
    7.39 − 1.54 − 0.60 = 63.25 GiB in use, beside a 2.04 GiB capture)."""
    figures = (requested, r.last(FactKind.WEIGHTS), r.last(FactKind.PEAK), r.last(FactKind.NON_TORCH),
               r.last(FactKind.KV_IN_USE))
    if not r.has(FactKind.GRAPH_USAGE) or r.has(FactKind.PEAK_WITH_GRAPHS) or None in figures:
        return False
    budget, weights, peak, non_torch, in_use = figures
    return abs(budget - weights - peak - non_torch - in_use) <= SUM_SLACK  # type: ignore[operator]


def _graphs(r: RankFacts, total: int | None, runner: str | None, estimates_disabled: bool,
            requested: int | None = None, graphs_off: bool = False) -> _Graphs:
    captures = r.all(FactKind.GRAPH_CAPTURE)
    # V2 prints "Graph capturing finished" for the profiling capture and again for the real one
    # (gpu/model_runner.py capture_model); V1 prints it once, for the real capture.
    if runner == "V2":
        profile_capture, real_capture = _v2_captures(r)
    else:
        profile_capture, real_capture = None, (captures[-1] if captures else None)
    estimates: list[GraphEstimate] = r.all(FactKind.GRAPH_ESTIMATE)
    estimate = next((e.bytes for source in _ESTIMATE_ORDER for e in reversed(estimates) if e.source == source), None)
    if estimate is None and total is not None:
        if (adv := r.last(FactKind.ADVISORY)) is not None and adv[0] >= adv[1]:
            estimate = round((adv[0] - adv[1]) * total)
        elif (dis := r.last(FactKind.ADVISORY_DISABLED)) is not None and dis[0] <= dis[1] < 1.0:
            estimate = round((dis[1] - dis[0]) * total)  # "suggested" is only an estimate below the 1.0 cap
    if estimate is None and profile_capture is not None:
        estimate = profile_capture[1]  # V2 captures for real while profiling: that capture is its estimate
    inferred_zero = False
    by_config = estimate is None and graphs_off
    if by_config:
        # gpu_worker.py determine_available_memory profiles graphs only where
        # `compilation_config.cudagraph_mode != CUDAGraphMode.NONE` (enforce_eager sets NONE): else
        # cudagraph_memory_estimate stays 0, on every rank of the engine, whichever rank prints the
        # lines that would show it (real pastes round twenty-two: an eager MRv2 TP2 boot where only TP0
        # prints "Available KV cache memory", so TP1's estimate, and its activation, went unknown).
        estimate = 0
    usage = r.last(FactKind.GRAPH_USAGE)
    # (a capture measured below zero, vLLM's own bug, leaves the pool unknown: no estimate is inferred for it)
    measured_below_zero = usage is not None and usage < 0
    if (estimate is None and r.has(FactKind.PEAK_WITH_GRAPHS, FactKind.GRAPH_USAGE) and not measured_below_zero
            and not r.has(FactKind.ADVISORY, FactKind.ADVISORY_DISABLED, FactKind.GRAPH_ESTIMATE)
            and not estimates_disabled and _shows_where_estimate_lines_go(r)):
        # gpu_worker.py prints the advisory and "CUDA graph pool memory" exactly when the estimate
        # is > 0, both before "Actual usage": a rank that printed the latter and neither of the
        # former estimated 0 (MRv2 before it estimated graphs, docs/vllm-startup.md §3.2, or no graphs).
        estimate, inferred_zero = 0, True
    elif (estimate is None and not estimates_disabled and not measured_below_zero
          and _sized_without_graphs(r, requested)):
        estimate, inferred_zero = 0, True
    actual = r.last(FactKind.GRAPH_ACTUAL)
    if actual is None:
        actual = usage
    if actual is None and real_capture is not None:
        actual = real_capture[1]
    return _Graphs(estimate, actual, r.last(FactKind.GRAPH_RETAINED), inferred_zero, by_config, profile_capture,
                   real_capture)


def _activation(r: RankFacts, graphs: _Graphs, estimates_disabled: bool) -> tuple[int | None, str | None]:
    """activation_peak and, when the figure cannot be trusted, why."""
    peak = r.last(FactKind.PEAK_WITH_GRAPHS)
    if peak is not None:
        # New wording: peak_activation_memory = transient_peak_headroom + cg_applied, where
        # cg_applied is the estimate unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (gpu_worker.py).
        applied = 0 if estimates_disabled else graphs.estimate
        if applied is None:
            return None, None
        if peak - applied < 0:
            return None, (f"peak activation {fmt_gib(peak)} is below the graph estimate {fmt_gib(applied)}; "
                          f"activation_peak left unknown")
        return peak - applied, None
    peak = r.last(FactKind.PEAK)
    torch_peak, weights = r.last(FactKind.TORCH_PEAK_TOTAL), r.first(FactKind.WEIGHTS)
    if peak is None and torch_peak is not None and weights is not None:
        return torch_peak - weights, None  # a negative one (another boot's weights) is left unknown by the caller
    return peak, None


def stated_rank(rank: int, r: RankFacts, *, gmu: float | None, runner: str | None, estimates_disabled: bool,
                failure: Failure | None, notes: list[str], tp_size: int | None = None,
                dcp_size: int | None = None, after_warmup: bool = False,
                kv_bytes_per_block: float | None = None, graphs_off: bool = False,
                largest_device: int | None = None) -> StatedRank:
    """One rank's owners as its lines state them. `after_warmup`: vLLM 0.34's extensible KV cache
    sized the boot's cache (extensible.sized_after_warmup); `kv_bytes_per_block`: the rank's, from
    its measurement (extensible.bytes_per_block); `graphs_off`: the engine captures no CUDA graphs
    (enforce_eager, cudagraph_mode NONE); `largest_device`: the largest device total any rank of the
    log states."""
    total = r.last(FactKind.DEVICE_TOTAL)
    requested = r.last(FactKind.REQUESTED)
    if requested is None and total is not None and gmu is not None:
        requested = request_memory(total, gmu)
    # vLLM 0.34's extensible KV cache: sized after warmup and capture, with no graph estimate before
    no_estimate = estimates_disabled or after_warmup
    graphs = _graphs(r, total, runner, no_estimate, requested, graphs_off)
    activation, why = _activation(r, graphs, no_estimate)
    if why:
        notes.append(f"rank {rank}: {why}")
    kv_available = _first_known(*(r.last(kind) for kind in KV_KINDS))
    allocated = failure is None or failure.phase not in BEFORE_ALLOCATION
    kv_cache = (_first_known(r.last(FactKind.KV_IN_USE), r.last(FactKind.KV_FIXED), r.last(FactKind.KV_AVAILABLE))
                if allocated else None)
    kv_blocks = r.last(FactKind.KV_BLOCKS)
    suggested = r.last(FactKind.KV_SUGGESTION)
    if after_warmup:
        sized = extensible.sized_cache(r, kv_bytes_per_block)
        if not any(n.startswith(extensible.NOTE_HEAD) for n in notes):
            notes.append(extensible.note(rank, sized, r.has(FactKind.KV_EXTENDED), r.first(FactKind.KV_AVAILABLE)))
        # the reserved range is no KV figure: unknown until the log states the sized cache
        kv_blocks, kv_available = sized if sized is not None else (None, None)
        kv_cache = kv_available if allocated else None
        # what the sizing kept free for the warmup's transients (vLLM's "Actual usage" peak is the profile's)
        activation = _first_known(r.last(FactKind.KV_KEPT_TRANSIENT), activation)
        suggested = None  # computed at GMU 1.0 against the device's total in this mode (extensible.note)
    # the estimate profiled and printed, not charged when the KV cache was sized (gpu_worker.py: cg_applied 0):
    # the pool is what the capture took, where the log shows it (else, as always, the larger of the two)
    not_charged = no_estimate and bool(graphs.estimate) and not after_warmup
    if not_charged:
        notes.append(f"rank {rank}: vLLM profiled {fmt_gib(graphs.estimate)} of CUDA graph memory but did not "
                     f"charge it when it sized the KV cache (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS off)"
                     + (f"; capture took {fmt_gib(graphs.actual)}: those bytes were not budgeted"
                        if graphs.actual else ""))
    readings = {Owner.WEIGHTS: r.first(FactKind.WEIGHTS), Owner.ACTIVATION_PEAK: activation,
                Owner.NON_TORCH: r.last(FactKind.NON_TORCH), Owner.KV_CACHE: kv_cache,
                Owner.GRAPH_POOL: graphs.actual if not_charged else None}
    for owner in NEVER_NEGATIVE:  # a garbled or doctored figure: no memory is below zero
        if (value := readings[owner]) is not None and value < 0:
            notes.append(f"rank {rank}: the log states {owner.value} {fmt_gib(value)}, below zero, which no memory "
                         f"can be: {owner.value} left unknown")
            readings[owner] = None
    weights, consumed = readings[Owner.WEIGHTS], r.last(FactKind.CONSUMED)
    if weights == 0 and activation == 0 and readings[Owner.NON_TORCH] == 0 and kv_available:
        # a profile that saw none of the model: vLLM measured another device than the one the model is on (an RL
        # trainer's side device; real pastes round twenty-seven, trl#2688: an 8B model's `model weights take
        # 0.00GiB; non_torch_memory takes 0.00GiB; PyTorch activation peak memory takes 0.00GiB`, the whole
        # 71.19 GiB budget then given to KV and the boot dead right after)
        notes.append(f"rank {rank}: vLLM measured 0 bytes of weights, activation peak and non-torch memory, which a "
                     f"loaded model cannot be: its profile did not see this model's memory (another device "
                     f"measured?), so the KV cache it sized ({fmt_gib(kv_available)}) is not backed by a "
                     f"measurement")
    if weights is not None and largest_device and weights > largest_device:
        # the ranks of one boot share a GPU type: weights no device of the log holds are another run's line
        # (real pastes round twenty-two: a GB300 decode worker's log trimmed into srt-slurm's tests, where a DP
        # rank's `Model loading took 999.99 GiB memory`, the test's planted decoy, stands beside `Free memory
        # on device (274.27/276.62 GiB)`; a paste that joins two runs has the same shape)
        notes.append(f"rank {rank}: the log states weights {fmt_gib(weights)}, more than any device in this log "
                     f"holds ({fmt_gib(largest_device)}): a line from another run? weights left unknown")
        readings[Owner.WEIGHTS] = weights = None
    if readings[Owner.NON_TORCH] is None and consumed is not None and weights is not None and consumed >= weights:
        # vLLM 0.28+'s "consumed memory (weights + non-torch)" is total_consumed = init.free − after.free:
        # weights + persistent torch + non-torch (gpu_worker.py determine_available_memory, mem_utils.py
        # memory_profiling; docs/vllm-startup.md §2.1). Less the weights it is the other two, unsplit: without
        # it the owners fell short of the budget by exactly that (real pastes round twenty-two: GB300, 171.25 −
        # 168.89 = 2.36 GiB, the gap between the owners' 252.13 GiB and the 254.49 requested).
        readings[Owner.NON_TORCH] = consumed - weights
        if not any(n.startswith(CONSUMED_NOTE_HEAD) for n in notes):
            notes.append(f"{CONSUMED_NOTE_HEAD} (rank {rank}: {fmt_gib(consumed)} − {fmt_gib(weights)} = "
                         f"{fmt_gib(consumed - weights)}): persistent torch and non-torch memory together, which "
                         f"vLLM does not split (persistent left unknown)")
    if graphs.actual is not None and graphs.actual < 0:
        notes.append(f"rank {rank}: vLLM measured its CUDA graph capture as {fmt_gib(graphs.actual)}, below zero: a "
                     f"difference of free memory that something else freed during the capture (vLLM's own bug, "
                     f"fixed by vllm PR 25683), no pool: graph_pool is "
                     + (f"the estimate, {fmt_gib(graphs.estimate)}"
                        if graphs.estimate is not None and graphs.estimate >= 0 else "unknown"))
    over = (graphs.actual - graphs.estimate if graphs.actual is not None and graphs.estimate is not None
            and graphs.estimate >= 0 and not no_estimate and not graphs.inferred_zero else 0)
    if over >= GRAPH_OVER_LEAST:
        # the KV cache was sized with the estimate charged: what the capture took past it is past the budget
        # (real pastes round nineteen: `CUDA graph pool memory: 0.67 GiB (actual), 0.45 GiB (estimated)`)
        notes.append(f"rank {rank}: the CUDA graph capture took {fmt_gib(graphs.actual)}, {fmt_gib(over)} more than "
                     f"the {fmt_gib(graphs.estimate)} vLLM charged for it when it sized the KV cache: that much is "
                     f"held past the budget (graph_pool is the capture's)")
    idle = (graphs.estimate - graphs.actual if graphs.actual is not None and graphs.estimate is not None
            and graphs.actual >= 0 and not no_estimate and graphs.retained is None
            and r.has(FactKind.GRAPH_ESTIMATE, FactKind.ADVISORY) else 0)
    if idle >= GRAPH_OVER_LEAST:
        # The mirror of the note above: determine_available_memory gave the KV cache requested − non-KV −
        # the estimate; what the capture left of the estimate is budget neither KV nor graphs hold (real
        # pastes round twenty-two: GB300, `CUDA graph pool memory: 8.57 GiB (actual), 33.06 GiB (estimated),
        # difference: 24.49 GiB (285.9%)`, 53% of the rank's 46.50 GiB KV cache). Only an estimate a line
        # states: a V2 profiling capture is not the figure vLLM charged (model_runner.py extrapolates it).
        notes.append(_idle_note(rank, graphs, idle, kv_available))
    if graphs.estimate is not None and graphs.estimate < 0 and not no_estimate:
        notes.append(f"rank {rank}: vLLM's CUDA graph estimate is {fmt_gib(graphs.estimate)}, below zero, and vLLM "
                     f"subtracts it when it sizes the KV cache: the cache was sized {fmt_gib(-graphs.estimate)} past "
                     f"its budget (free memory that rose during the profiling capture, as on unified-memory GPUs: "
                     f"vllm#44740)")
    b12x = r.last(FactKind.B12X_TRANSIENT)
    if b12x is not None:
        notes.append(f"rank {rank}: the profile peak includes {b12x / 2**20:.2f} MiB of B12X sparse DCP transient "
                     f"memory (fork line); it is part of activation_peak")
    if graphs.retained is not None:
        notes.append(f"rank {rank}: graph profiling retained {fmt_gib(graphs.retained)} (fork line); graph_pool "
                     f"counts the full {fmt_gib(graphs.estimate)} captured, nothing is subtracted")
    if suggested is not None and suggested < 0:
        # gpu_worker.py compile_or_warm_up_model: kv_cache_memory_bytes_to_requested_limit = requested
        # − (total_consumed + peak_activation_memory + CUDA graph memory) − a 150 MiB buffer; below
        # zero, the rank's use without its KV cache is already over the budget.
        notes.append(f"rank {rank}: vLLM's --kv-cache-memory suggestion to fit the requested memory is "
                     f"{fmt_gib(suggested)}, below zero: without its KV cache (and vLLM's 150 MiB buffer) the rank "
                     f"already uses more than it requested, so no KV cache fits the budget")
    if graphs.inferred_zero and graphs.actual:
        notes.append(f"rank {rank}: vLLM reserved no CUDA graph memory before sizing the KV cache (estimate 0), but "
                     f"capture took {fmt_gib(graphs.actual)}: those bytes were not budgeted")
    tag = r.tag
    # A name without _TP is a TP=1 worker, or an old / provisional one that names the global rank;
    # without _DCP the DCP rank is 0 only when there is no DCP.
    tp_rank = tag.tp if tag.tp is not None else (rank % tp_size if tp_size else None)
    dcp_rank = tag.dcp if tag.dcp is not None else (0 if dcp_size == 1 else None)
    return StatedRank(RankReport(
        rank=rank, tp_rank=tp_rank, dcp_rank=dcp_rank,
        device_total_bytes=total, requested_bytes=requested, others_bytes=None, owners=readings,
        graph_pool_estimate_bytes=graphs.estimate, graph_pool_actual_bytes=graphs.actual,
        kv_available_bytes=kv_available, phases=_phases(rank, r, graphs, failure), kv_blocks=kv_blocks,
        free_at_start_bytes=r.first(FactKind.FREE_AT_START), graph_pool_retained_bytes=graphs.retained,
        vllm_kv_available_bytes=kv_available, vllm_suggested_kv_cache_memory_bytes=suggested,
        vllm_consumed_bytes=consumed, vllm_peak_activation_bytes=r.last(FactKind.PEAK_WITH_GRAPHS),
        compile_cache=_compile_cache(r.all(FactKind.COMPILE))))


def _compile_cache(lines: list[str]) -> str | None:
    """The rank's compile_cache from its compile lines (facts.COMPILED_LINE, LOADED_LINE): one state, or
    partial for both; None without one."""
    return compile_cache_state(COMPILE_MISS in lines, COMPILE_HIT in lines)


CONSUMED_NOTE_HEAD = "note: non_torch is vLLM's consumed memory less the weights"
"""Once per log: where non_torch comes from when a 0.28+ log states consumed memory and no non-torch figure."""
SUGGESTION_BUFFER = 150 * 2**20
"""gpu_worker.py compile_or_warm_up_model's redundancy_buffer_memory, left out of its --kv-cache-memory suggestion."""


def _idle_note(rank: int, graphs: _Graphs, idle: int, available: int | None) -> str:
    """The graph budget the capture did not use, and the KV cache the same budget would hold: a note
    (render/summary.py NOTE_PREFIX), capacity left unused and no risk, as the over-case's warning is."""
    text = (f"note: rank {rank}: vLLM charged {fmt_gib(graphs.estimate)} for CUDA graphs when it sized the KV cache, "
            f"and the capture took {fmt_gib(graphs.actual)}: {fmt_gib(idle)} of the requested budget holds neither "
            f"KV nor graphs (graph_pool is the charge)")
    if available is not None and available > 0:
        # available + idle − 150 MiB = requested − consumed − transient peak − the capture − 150 MiB: vLLM's
        # own suggestion with the graph memory counted once (vllm#57936; render/summary.py compares it so)
        fit = available + idle - SUGGESTION_BUFFER
        # (a lever vLLM's one profile pass sized, as the log's flags are: the H200's 0.33 log of V3 dims + MTP
        # overran those by 2.00 GiB under --verify, so it is not called safe)
        text += (f"; by vLLM's arithmetic the same gpu_memory_utilization sizes about {fmt_gib(available + idle)} "
                 f"of KV (--kv-cache-memory-bytes={fit}, its 150 MiB buffer kept; not audited)")
    return text


T = TypeVar("T")


def _first_known(*values: T | None) -> T | None:
    return next((v for v in values if v is not None), None)


def _phases(rank: int, r: RankFacts, graphs: _Graphs, failure: Failure | None) -> tuple[PhaseRecord, ...]:
    """What the log says of each phase, as text: the bytes are in the owners."""
    details: dict[Phase, list[str]] = defaultdict(list)
    seconds: dict[Phase, float] = {}
    if (w := r.first(FactKind.WEIGHTS)) is not None:
        details[Phase.LOAD].append(f"weights {fmt_gib(w)}")
    if (s := r.first(FactKind.LOAD_SECONDS)) is not None:
        seconds[Phase.LOAD] = s
    if (s := r.last(FactKind.PROFILE_SECONDS)) is not None:
        seconds[Phase.PROFILE] = s
    for kind, label in ((FactKind.CONSUMED, "consumed (weights + persistent torch + non-torch)"),
                        (FactKind.PEAK_WITH_GRAPHS, "peak activation incl. the applied graph estimate"),
                        (FactKind.PEAK, "peak activation"),
                        (FactKind.TORCH_PEAK_INCREASE, "torch peak increase"),
                        (FactKind.NON_KV_TOTAL, "total non-KV"),
                        (FactKind.NON_KV_RSS, "non-KV usage (process RSS)")):
        if (v := r.last(kind)) is not None:
            details[Phase.PROFILE].append(f"{label} {fmt_gib(v)}")
    if (v := r.last(FactKind.B12X_TRANSIENT)) is not None:
        details[Phase.PROFILE].append(f"includes {v / 2**20:.2f} MiB of B12X sparse DCP transient memory")
    if graphs.estimate is not None:
        details[Phase.GRAPHS].append(f"estimate {fmt_gib(graphs.estimate)}"
                                     + (" (inferred: no estimate line)" if graphs.inferred_zero
                                        else " (enforce_eager / cudagraph_mode NONE: vLLM profiles no graphs)"
                                        if graphs.graphs_off else ""))
    if graphs.profile_capture is not None:
        seconds[Phase.GRAPHS] = graphs.profile_capture[0]
        details[Phase.GRAPHS].append(f"profiling capture took {fmt_gib(graphs.profile_capture[1])}")
    if graphs.retained is not None:
        details[Phase.GRAPHS].append(f"retained {fmt_gib(graphs.retained)}")
    if (m := r.last(FactKind.KV_MEASURED)) is not None:
        details[Phase.KV].append(f"measured after warmup: {m[0]:,} blocks ({fmt_gib(m[1])})")
    if (k := r.last(FactKind.KV_KEPT_TRANSIENT)) is not None:
        details[Phase.KV].append(f"kept free for transients {fmt_gib(k)}")
    if (e := r.last(FactKind.KV_EXTENDED)) is not None:
        details[Phase.KV].append(f"extended to {e[0]:,} blocks ({fmt_gib(e[1])})")
    for kind, label in ((FactKind.KV_FIXED, "fixed"), (FactKind.KV_AVAILABLE, "available"),
                        (FactKind.KV_IN_USE, "in use"),
                        (FactKind.KV_SUGGESTION, "vLLM's --kv-cache-memory suggestion")):
        if (v := r.last(kind)) is not None:
            details[Phase.KV].append(f"{label} {fmt_gib(v)}")
    if graphs.real_capture is not None:
        seconds[Phase.CAPTURE] = graphs.real_capture[0]
        details[Phase.CAPTURE].append(f"capture took {fmt_gib(graphs.real_capture[1])}")
    if graphs.actual is not None and graphs.real_capture is None:
        details[Phase.CAPTURE].append(f"graph pool {fmt_gib(graphs.actual)}")
    failed = failure.phase if failure is not None and failure.rank == rank else None
    if failed is not None and failure is not None and failure.step:
        # the phase's own lines may say it finished (`Graph capturing finished`): the step says what did not
        details[failed].append(f"died {failure.step}")
    phases = []
    for phase in Phase:
        if phase in details or phase in seconds or phase is failed:
            phases.append(PhaseRecord(name=phase, status=PhaseStatus.FAILED if phase is failed else PhaseStatus.OK,
                                      seconds=seconds.get(phase), detail="; ".join(details[phase]) or None))
    return tuple(phases)
