"""Phase measurements → owners, KV sizing, capacity and levers. Pure functions over integers.

Notation (docs/design.md): A(p) torch allocated at the end of phase p, P(p) torch peak during p,
R(p) torch reserved, U(p) device used, `others` other processes at baseline, and
NT(p) = U(p) − R(p) − others, the non-torch bytes of this process.

Every non-KV byte of the process is claimed by exactly one owner, so the ledger balances by
construction: the owners plus `kv_unallocated` equal the requested budget, and the owners minus
the transient peak minus any unused graph reservation equal U(last) − others. `check_balance`
re-proves that on any report, including ones read back from disk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from kvaudit.config import AuditConfig
from kvaudit.errors import BadInputError
from kvaudit.schema import (
    NON_KV_OWNERS, Capacity, Lever, Owner, Phase, PhaseRecord, RankReport,
)
from kvaudit.units import fmt_gib

Phases = Mapping[Phase, PhaseRecord]


def requested_bytes(device_total_bytes: int, gpu_memory_utilization: float) -> int:
    """vLLM's request_memory: ceil(total × utilization), total as mem_get_info reports it."""
    return math.ceil(device_total_bytes * gpu_memory_utilization)


def _sub(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def _sum(*values: int | None) -> int | None:
    return None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]


def _val(phases: Phases, phase: Phase, attr: str) -> int | None:
    record = phases.get(phase)
    return None if record is None else getattr(record, attr)


def _a(ph: Phases, p: Phase) -> int | None:
    return _val(ph, p, "torch_allocated_bytes")


def _r(ph: Phases, p: Phase) -> int | None:
    return _val(ph, p, "torch_reserved_bytes")


def _u_minus_r(ph: Phases, p: Phase) -> int | None:
    """U(p) − R(p): non-torch bytes on the device, other processes included."""
    return _sub(_val(ph, p, "device_used_bytes"), _r(ph, p))


def _pool(ph: Phases, p: Phase) -> int | None:
    """Graph private-pool segments at the end of p; None when they were not read."""
    return _val(ph, p, "graph_pool_bytes")


@dataclass(frozen=True)
class RankLedger:
    """The arithmetic of one rank, at sizing time (before KV) or at the end of the boot."""

    owners: dict[Owner, int | None]
    requested_bytes: int | None
    kv_available_bytes: int | None
    """requested − every non-KV owner at sizing time: what kvaudit gives vLLM for KV."""
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
    """The capture's peak above what was resident before it and the final pool: warmup runs and
    capture inputs outside the pool, freed before KV is used."""
    retained_pool_bytes: int = 0
    """Private-pool segments still resident after the teardown (a pool something keeps alive)."""
    retained_live_bytes: int = 0
    """Of those, bytes still in use by live blocks."""
    residue_bytes: int = 0
    """Torch reserved after the teardown minus before the minimal cache was built: what one
    capture session keeps outside its pool (measured on the H200: a 32 MiB buffer of
    torch.compile's generated code per session). The real capture keeps the same again."""
    residue_non_torch_bytes: int = 0
    """Non-torch bytes the teardown did not give back."""

    @property
    def estimate_bytes(self) -> int:
        """What the real capture will hold: the pool's high-water and the graphs' driver memory.
        A retained pool with live blocks may have none of its pages reused, so it is charged on
        top; a retained pool whose pages are all free holds the same capture again, so only its
        part above the high-water is."""
        if self.retained_live_bytes:
            retained = self.retained_pool_bytes
        else:
            retained = max(self.retained_pool_bytes - self.pool_bytes, 0)
        return self.pool_bytes + max(self.live_non_torch_bytes, 0) + retained

    @property
    def capture_reserve_bytes(self) -> int:
        """What the real capture leaves outside the pool: the residue of this session, less the
        retained pool segments, which the estimate already charges."""
        return max(self.residue_bytes - self.retained_pool_bytes, 0)

    def facts(self) -> dict[str, int]:
        return {"graph_pool_measured_bytes": self.pool_bytes, "graph_live_non_torch_bytes": self.live_non_torch_bytes,
                "graph_capture_transient_bytes": self.transient_bytes,
                "graph_retained_pool_bytes": self.retained_pool_bytes,
                "graph_retained_live_bytes": self.retained_live_bytes,
                "graph_profiling_residue_bytes": self.residue_bytes,
                "graph_profiling_residue_non_torch_bytes": self.residue_non_torch_bytes}


def measure_graphs(*, resident: tuple[int, int], start: tuple[int, int], end: tuple[int, int],
                   peak_reserved: int, pool: int, after: tuple[int, int],
                   retained: tuple[int, int] = (0, 0)) -> GraphMeasurement:
    """GraphMeasurement from (torch reserved, device used) pairs read around the capture:
    `resident` before the minimal cache was built, `start` just before capture (cache built),
    `end` just after it (graphs live), `after` once everything was torn down and the cache
    emptied; `peak_reserved` the allocator's peak during capture (reset at `start`), `pool` the
    temporary pool's segments at `end`, `retained` (reserved, allocated) of private pools after."""
    non_torch = lambda reading: reading[1] - reading[0]  # noqa: E731
    return GraphMeasurement(
        pool_bytes=pool,
        live_non_torch_bytes=non_torch(end) - non_torch(start),
        transient_bytes=max(peak_reserved - start[0] - pool, 0),
        retained_pool_bytes=retained[0], retained_live_bytes=retained[1],
        residue_bytes=after[0] - resident[0],
        residue_non_torch_bytes=non_torch(after) - non_torch(resident))


ALLOCATOR_ROUND_BYTES = 2 << 20
"""PyTorch's CUDA caching allocator gives an allocation of 10 MiB or more a segment rounded up to
2 MiB (kRoundLarge, c10/cuda/CUDACachingAllocator.cpp): what a KV tensor really takes."""


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
        return sum(_round_up(n * p, granularity) for p in tensor_block_bytes) <= available_bytes

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
        if _val(phases, phase, "device_used_bytes") is not None:
            return phase
    return None


def graphs_non_torch(phases: Phases) -> int:
    """Non-torch bytes the graph-profiling phase left behind (driver state of pools and graphs
    that outlive it): graph memory, claimed by graph_pool, not by non_torch."""
    growth = _sub(_u_minus_r(phases, Phase.GRAPHS), _u_minus_r(phases, Phase.REPLAY))
    return max(growth or 0, 0)


def capture_non_torch(phases: Phases) -> int | None:
    return _sub(_u_minus_r(phases, Phase.CAPTURE), _u_minus_r(phases, Phase.KV))


def graph_pool_actual(phases: Phases) -> int | None:
    """Pool segments at the end of the real capture (retained pages included), plus the
    non-torch growth of the capture and what graph profiling left behind."""
    if Phase.CAPTURE not in phases or Phase.KV not in phases:
        return None
    return _sum(_pool(phases, Phase.CAPTURE), capture_non_torch(phases), graphs_non_torch(phases))


def activation_peak(phases: Phases, capture_transient_bytes: int | None = None) -> int | None:
    """P(replay) − A(persistent), or the reserved transient PR(replay) − R(persistent) when it is
    larger: the allocator rounds the transient's blocks up to its segments (2 MiB for small
    blocks, 20 MiB for 1–10 MiB ones), and the device must hold the segments, not the blocks.
    The graph capture's own transient (outside its pool) is charged only where it is larger:
    the capture runs after KV, inside the same activation budget."""
    allocated = _sub(_val(phases, Phase.REPLAY, "torch_peak_allocated_bytes"), _a(phases, Phase.PERSISTENT))
    reserved = _sub(_val(phases, Phase.REPLAY, "torch_peak_reserved_bytes"), _r(phases, Phase.PERSISTENT))
    peak = allocated if allocated is None or reserved is None else max(allocated, reserved)
    if peak is None or capture_transient_bytes is None:
        return peak
    return max(peak, capture_transient_bytes)


def growth_after_sizing(phases: Phases, *, others_bytes: int | None, graph_pool_estimate_bytes: int | None,
                        kv_cache_bytes: int | None, requested: int | None) -> dict[Owner, int]:
    """Per non-KV owner: what it held at the end of the boot minus what KV sizing charged it:
    the bytes that arrived after the budget was fixed (KV structures, the real capture above
    its estimate, sampler buffers, deferred warmups). Only owners that grew are listed."""
    final = owners_from_phases(phases, others_bytes=others_bytes, graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                               kv_cache_bytes=kv_cache_bytes, requested=requested)
    sizing_phases = {p: r for p, r in phases.items() if p not in (Phase.KV, Phase.CAPTURE, Phase.VERIFY)}
    sizing = owners_from_phases(sizing_phases, others_bytes=others_bytes,
                                graph_pool_estimate_bytes=graph_pool_estimate_bytes, kv_cache_bytes=None,
                                requested=requested)
    out = {}
    for owner in NON_KV_OWNERS:
        delta = _sub(final[owner], sizing[owner])
        if delta:
            out[owner] = delta
    return out


def owners_from_phases(phases: Phases, *, others_bytes: int | None, graph_pool_estimate_bytes: int | None,
                       kv_cache_bytes: int | None, requested: int | None,
                       last: Phase | None = None,
                       capture_transient_bytes: int | None = None) -> dict[Owner, int | None]:
    """docs/design.md's owner formulas, with every process byte claimed once (see `Owner.TORCH_OTHER`)."""
    last = last or last_measured_phase(phases)
    b, ld, pr, pe = Phase.BASELINE, Phase.LOAD, Phase.PROFILE, Phase.PERSISTENT
    weights = _sub(_a(phases, ld), _a(phases, b))
    persistent_torch = _sub(_a(phases, pe), _a(phases, pr))
    persistent_non_torch = _sub(_u_minus_r(phases, pe), _u_minus_r(phases, pr))
    persistent = _sum(persistent_torch, persistent_non_torch)
    activation = activation_peak(phases, capture_transient_bytes)

    actual = graph_pool_actual(phases) if last is Phase.CAPTURE else None
    graphs_nt = graphs_non_torch(phases) if last in (Phase.GRAPHS, Phase.KV, Phase.CAPTURE) else 0
    # Before capture, graph profiling's non-torch residue is already resident: the owner holds at
    # least that, even when vLLM's estimate is smaller, or those bytes would be charged to nobody.
    resident_graph = graphs_nt if last in (Phase.GRAPHS, Phase.KV) else None
    known_graph = [g for g in (graph_pool_estimate_bytes, actual, resident_graph) if g is not None]
    graph_pool = max(known_graph) if known_graph else None
    captured_nt = capture_non_torch(phases) if last is Phase.CAPTURE else 0

    kv_held = kv_cache_bytes if last in (Phase.KV, Phase.CAPTURE) else 0
    non_torch = torch_other = None
    if last is not None:
        nt_last = _sub(_u_minus_r(phases, last), others_bytes)
        non_torch = _sub(nt_last, _sum(persistent_non_torch, captured_nt, graphs_nt))
        torch_other = _sub(_r(phases, last), _sum(_pool(phases, last), weights, persistent_torch, kv_held))

    owners = {Owner.WEIGHTS: weights, Owner.PERSISTENT: persistent, Owner.ACTIVATION_PEAK: activation,
              Owner.GRAPH_POOL: graph_pool, Owner.NON_TORCH: non_torch, Owner.TORCH_OTHER: torch_other,
              Owner.KV_CACHE: kv_cache_bytes if last in (Phase.KV, Phase.CAPTURE) else None}
    charged = _sum(*(owners[o] for o in NON_KV_OWNERS), owners[Owner.KV_CACHE])
    owners[Owner.KV_UNALLOCATED] = _sub(requested, charged)
    return owners


def naive_kv_available(phases: Phases, *, requested: int | None, others_bytes: int | None,
                       graph_pool_estimate_bytes: int | None) -> int | None:
    """What one profile pass before any warmup gives (the seed bug):
    requested − (weights + P(profile) − A(load) + non-torch at profile + graph estimate)."""
    weights = _sub(_a(phases, Phase.LOAD), _a(phases, Phase.BASELINE))
    transient = _sub(_val(phases, Phase.PROFILE, "torch_peak_allocated_bytes"), _a(phases, Phase.LOAD))
    non_torch = _sub(_u_minus_r(phases, Phase.PROFILE), others_bytes)
    return _sub(requested, _sum(weights, transient, non_torch, graph_pool_estimate_bytes or 0))


def size_kv(phases: Phases, *, requested: int, others_bytes: int | None,
            graph_pool_estimate_bytes: int | None, capture_transient_bytes: int | None = None) -> int | None:
    """kvaudit's KV figure for one rank, from the phases up to `graphs`: requested − non-KV owners."""
    owners = owners_from_phases(phases, others_bytes=others_bytes, graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                                kv_cache_bytes=None, requested=requested, last=last_measured_phase(
                                    {p: r for p, r in phases.items() if p not in (Phase.KV, Phase.CAPTURE)}),
                                capture_transient_bytes=capture_transient_bytes)
    return _sub(requested, _sum(*(owners[o] for o in NON_KV_OWNERS)))


def rank_ledger(phases: Phases, *, device_total_bytes: int | None, gpu_memory_utilization: float | None,
                others_bytes: int | None, graph_pool_estimate_bytes: int | None,
                kv_cache_bytes: int | None, capture_transient_bytes: int | None = None) -> RankLedger:
    """Everything the report says of one rank that arithmetic can say."""
    requested = (requested_bytes(device_total_bytes, gpu_memory_utilization)
                 if device_total_bytes is not None and gpu_memory_utilization is not None else None)
    kv_available = (size_kv(phases, requested=requested, others_bytes=others_bytes,
                            graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                            capture_transient_bytes=capture_transient_bytes)
                    if requested is not None and Phase.REPLAY in phases else None)
    return RankLedger(
        owners=owners_from_phases(phases, others_bytes=others_bytes,
                                  graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                                  kv_cache_bytes=kv_cache_bytes, requested=requested,
                                  capture_transient_bytes=capture_transient_bytes),
        requested_bytes=requested,
        kv_available_bytes=kv_available,
        naive_kv_available_bytes=naive_kv_available(phases, requested=requested, others_bytes=others_bytes,
                                                    graph_pool_estimate_bytes=graph_pool_estimate_bytes),
        graph_pool_actual_bytes=graph_pool_actual(phases),
        free_at_start_bytes=_sub(device_total_bytes, _val(phases, Phase.BASELINE, "device_used_bytes")),
    )


def check_balance(rank: RankReport) -> None:
    """Owners + kv_unallocated = requested whenever all are known; anything else is bad input.
    torch_other is an extension: a report written without it balances over the other seven."""
    keys = [o for o in Owner if not (o is Owner.TORCH_OTHER and rank.owners.get(o) is None)]
    values = [rank.owners.get(o) for o in keys]
    if rank.requested_bytes is None or any(v is None for v in values):
        return
    total = sum(values)  # type: ignore[arg-type]
    if total != rank.requested_bytes:
        raise BadInputError(f"rank {rank.rank}: owners sum to {total} bytes but requested is "
                            f"{rank.requested_bytes} ({total - rank.requested_bytes:+d}): the ledger does not balance")


# --------------------------------------------------------------------------------------------
# Capacity


@dataclass(frozen=True)
class KvGeometry:
    """How KV bytes turn into tokens on one rank (vLLM's kv_cache_config)."""

    block_size: int
    """Tokens per block on a rank."""
    bytes_per_block: int
    """Pool bytes of one block, summed over all attention layers (MTP layers included)."""
    dcp: int = 1
    """DCP shards the sequence: the same per-rank bytes hold dcp× the tokens."""

    @property
    def tokens_per_block(self) -> int:
        return self.block_size * self.dcp

    def blocks(self, available_bytes: int) -> int:
        return max(available_bytes // self.bytes_per_block, 0)

    def needed_bytes(self, model_len: int) -> int:
        """vLLM's max_memory_usage_bytes for one request: cdiv(cdiv(len, dcp), block_size) blocks."""
        return -(-(-(-model_len // self.dcp)) // self.block_size) * self.bytes_per_block

    def max_len(self, available_bytes: int) -> int:
        """Longest request that fits: vLLM's check keeps one block back (the null block)."""
        return max((available_bytes - self.bytes_per_block) // self.bytes_per_block, 0) * self.tokens_per_block


def _gmu_ceil(fraction: float) -> float:
    return math.ceil(fraction * 10_000 - 1e-9) / 10_000


def capacity(ranks: Sequence[RankReport], config: AuditConfig, geometry: KvGeometry | None, *,
             known_kv_tokens: int | None = None, known_max_feasible_model_len: int | None = None,
             known_max_model_len_fits: bool | None = None, known_kv_needed_bytes: int | None = None,
             graph_bytes_per_size: int | None = None, verify_overrun_bytes: int = 0) -> Capacity:
    """Capacity on the binding rank, the levers when it does not fit, and the flags that are safe.

    `known_*`: facts a log states outright (vLLM's KV size line means the check passed; its
    ValueError names the bytes one request needs); used where the geometry cannot say.
    `verify_overrun_bytes`: how far a verify's true peak went above the budget (0 if it did not)."""
    sized = [r for r in ranks if r.kv_available_bytes is not None]
    binding = min(sized, key=lambda r: (r.kv_available_bytes, r.rank)) if sized else None
    avail = binding.kv_available_bytes if binding else None
    naive_all = [r.naive_kv_available_bytes for r in ranks]
    naive = min(naive_all) if naive_all and None not in naive_all else None
    headrooms = [_sub(r.free_at_start_bytes, r.requested_bytes) for r in ranks]
    headroom = min(headrooms) if headrooms and None not in headrooms else None
    length = config.max_model_len

    tokens, needed, fits = known_kv_tokens, known_kv_needed_bytes, known_max_model_len_fits
    feasible, gmu_needed = known_max_feasible_model_len, None
    if geometry is not None and avail is not None:
        tokens = geometry.blocks(avail) * geometry.tokens_per_block
        feasible = geometry.max_len(avail)
        if length is not None:
            needed = geometry.needed_bytes(length)
            fits = needed <= avail - geometry.bytes_per_block
            gmu_needed = _gmu_needed(ranks, needed + geometry.bytes_per_block)
    elif fits is None and length is not None and feasible is not None:
        fits = feasible >= length

    cap = Capacity(
        kv_available_bytes=avail, binding_rank=binding.rank if binding else None, kv_tokens=tokens,
        kv_needed_bytes=needed, max_model_len_fits=fits, max_feasible_model_len=feasible, gmu_needed=gmu_needed,
        physical_headroom_bytes=headroom, naive_kv_available_bytes=naive,
        kv_bytes_per_block=geometry.bytes_per_block if geometry else None,
        block_size=geometry.block_size if geometry else None,
        tokens_per_block=geometry.tokens_per_block if geometry else None,
        over_allocation_bytes=_sub(naive, avail))
    levers = (compute_levers(cap, binding, ranks, config, geometry, graph_bytes_per_size)
              if binding is not None and (fits is False or over_committed(ranks)) else ())
    flags = safe_serve_flags(cap, binding, ranks, config, geometry, verify_overrun_bytes=verify_overrun_bytes)
    return _with(cap, levers=levers, safe_serve_flags=flags)


def _gmu_needed(ranks: Sequence[RankReport], kv_bytes_needed: int) -> float | None:
    """Smallest GMU at which every rank has kv_bytes_needed after its non-KV owners."""
    worst = None
    for r in ranks:
        if r.device_total_bytes is None or r.requested_bytes is None or r.kv_available_bytes is None:
            return None
        non_kv = r.requested_bytes - r.kv_available_bytes
        need = _gmu_ceil((non_kv + kv_bytes_needed) / r.device_total_bytes)
        worst = need if worst is None else max(worst, need)
    return worst


OVERCOMMIT_TOLERANCE_BYTES = 16 << 20
"""Post-KV growth below this (page-granular RSS on the CPU backend, a few allocator blocks on
CUDA) is reported as a warning, not a failed verdict."""


def verify_holds(slacks: Sequence[int]) -> bool:
    """Verify's true peak stayed inside the budget on every rank, to the same tolerance as the
    over-commit check: page-granular RSS on the CPU backend moves the peak by a few MiB between
    the profile and the verify step, with nothing of the audit's own behind it."""
    return bool(slacks) and min(slacks) >= -OVERCOMMIT_TOLERANCE_BYTES


def verify_error(slacks: Sequence[int]) -> str | None:
    """Why a verify that ran without an error of its own failed, or None when it held."""
    if not slacks:
        return "no true peak was measured"
    return None if verify_holds(slacks) else "true peak above the requested budget"


def overcommit_bytes(ranks: Sequence[RankReport]) -> int:
    """How far the worst rank used more than it requested (a negative kv_unallocated), else 0."""
    return max([0] + [-(r.owners.get(Owner.KV_UNALLOCATED) or 0) for r in ranks])


def over_committed(ranks: Sequence[RankReport]) -> bool:
    """Over the tolerance: the boot used more than it requested, a finding."""
    return overcommit_bytes(ranks) > OVERCOMMIT_TOLERANCE_BYTES


def _with(cap: Capacity, **changes) -> Capacity:
    from dataclasses import replace
    return replace(cap, **changes)


def _tokens(geometry: KvGeometry | None, freed: int | None) -> int | None:
    if geometry is None or freed is None:
        return None
    return (freed // geometry.bytes_per_block) * geometry.tokens_per_block


def compute_levers(cap: Capacity, binding: RankReport, ranks: Sequence[RankReport], config: AuditConfig,
                   geometry: KvGeometry | None, graph_bytes_per_size: int | None) -> tuple[Lever, ...]:
    """What each knob frees on the binding rank, where that can be computed."""
    levers: list[Lever] = []
    total = binding.device_total_bytes
    shortfall = None
    if cap.kv_needed_bytes is not None and cap.kv_available_bytes is not None and geometry is not None:
        shortfall = max(cap.kv_needed_bytes + geometry.bytes_per_block - cap.kv_available_bytes, 0)
    overcommit = overcommit_bytes(ranks)
    if overcommit > 0:
        shortfall = max(shortfall or 0, overcommit)

    if config.max_model_len and cap.max_feasible_model_len is not None and geometry is not None \
            and 0 < cap.max_feasible_model_len < config.max_model_len:
        saved = geometry.needed_bytes(config.max_model_len) - geometry.needed_bytes(max(cap.max_feasible_model_len, 1))
        levers.append(Lever("max_model_len", f"--max-model-len={cap.max_feasible_model_len}", saved,
                            config.max_model_len - cap.max_feasible_model_len,
                            "needs less KV per request; frees_tokens is the context given up"))

    gmu = config.gpu_memory_utilization
    if gmu is not None and total and cap.physical_headroom_bytes is not None and cap.physical_headroom_bytes > 0:
        ceiling = math.floor((binding.requested_bytes + cap.physical_headroom_bytes) / total * 10_000) / 10_000
        target = min(cap.gmu_needed, ceiling) if cap.gmu_needed is not None else ceiling
        if target > gmu:
            freed = requested_bytes(total, target) - binding.requested_bytes
            note = (f"raising GMU can recover at most {fmt_gib(cap.physical_headroom_bytes)} on this device"
                    + ("" if cap.gmu_needed is None or cap.gmu_needed <= ceiling
                       else f"; {cap.gmu_needed} would be needed, above the physical ceiling {ceiling}"))
            levers.append(Lever("gpu_memory_utilization", f"--gpu-memory-utilization={target}", freed,
                                _tokens(geometry, freed), note))

    graph = binding.owners.get(Owner.GRAPH_POOL)
    sizes = config.cudagraph_capture_sizes
    if graph_bytes_per_size and sizes and len(sizes) > 1:
        drop = len(sizes) - 1
        if shortfall:
            drop = min(drop, -(-shortfall // graph_bytes_per_size))
        keep = sorted(sizes)[: len(sizes) - drop]
        freed = drop * graph_bytes_per_size
        levers.append(Lever("cudagraph_capture_sizes",
                            f"--cudagraph-capture-sizes {' '.join(map(str, keep))}", freed,
                            _tokens(geometry, freed), f"drops the {drop} largest capture sizes"))
    if graph and not config.enforce_eager:
        levers.append(Lever("enforce_eager", "--enforce-eager", graph, _tokens(geometry, graph),
                            "frees the whole graph pool at the cost of decode speed"))

    activation = binding.owners.get(Owner.ACTIVATION_PEAK)
    if activation and config.max_num_batched_tokens and config.max_num_batched_tokens > 1:
        half = config.max_num_batched_tokens // 2
        freed = activation - activation * half // config.max_num_batched_tokens
        levers.append(Lever("max_num_batched_tokens", f"--max-num-batched-tokens={half}", freed,
                            _tokens(geometry, freed),
                            "estimate: the profile's transient scales about linearly with batched tokens"))
    return tuple(levers)


def safe_serve_flags(cap: Capacity, binding: RankReport | None, ranks: Sequence[RankReport],
                     config: AuditConfig, geometry: KvGeometry | None, *,
                     verify_overrun_bytes: int = 0) -> tuple[str, ...]:
    """`vllm serve` flags that reproduce the audited budget: whole blocks of the binding rank,
    at a GMU and length that fit."""
    if binding is None or cap.kv_available_bytes is None or binding.requested_bytes is None:
        return ()
    gmu, kv, length = config.gpu_memory_utilization, cap.kv_available_bytes, config.max_model_len
    # A boot that used more than it requested (graphs above their estimate, deferred warmups), or
    # a verify whose true peak went over the budget, proved the KV figure too large by that much.
    # Both measure the same excess from different ends: the larger one is taken, not the sum.
    kv -= max(overcommit_bytes(ranks), verify_overrun_bytes)
    if cap.max_model_len_fits is False:
        ceiling_ok = (cap.gmu_needed is not None and cap.physical_headroom_bytes is not None
                      and binding.device_total_bytes is not None
                      and requested_bytes(binding.device_total_bytes, cap.gmu_needed)
                      <= binding.requested_bytes + cap.physical_headroom_bytes)
        if ceiling_ok:
            kv += requested_bytes(binding.device_total_bytes, cap.gmu_needed) - binding.requested_bytes
            gmu = cap.gmu_needed
        else:
            length = cap.max_feasible_model_len
    if geometry is not None:
        kv = geometry.blocks(kv) * geometry.bytes_per_block
        if length and geometry.needed_bytes(length) + geometry.bytes_per_block > kv:
            length = geometry.max_len(kv)  # the reduced cache must still hold one request
    if kv <= 0 or not length:
        return ()
    flags = [f"--kv-cache-memory-bytes={kv}"]
    if gmu is not None:
        flags.append(f"--gpu-memory-utilization={gmu}")
    flags.append(f"--max-model-len={length}")
    return tuple(flags)
