"""What the KV figure holds and whether the config fits: tokens on the binding rank (and per
node, where a run spans several), the levers that would make a failing config fit, the `vllm
serve` flags that reproduce the audited budget, and the tolerances of the over-commit and verify
checks. Pure functions over integers.

The owners and the KV figure per rank come from kvaudit/ledger.py; docs/design.md (KV sizing)
and docs/vllm-startup.md §2.3 give vLLM's block and token arithmetic this module follows.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kvaudit.config import AuditConfig
from kvaudit.ledger import ALLOC_CONF_ENV, requested_bytes
from kvaudit.schema import Capacity, Failure, FailureKind, Lever, NodeSummary, Owner, RankReport
from kvaudit.units import INT64_MAX, fmt_gib, minus


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
        """vLLM's max_memory_usage_bytes for one request: cdiv(cdiv(len, dcp), block_size) blocks
        (docs/vllm-startup.md §2.3)."""
        per_rank = -(-model_len // self.dcp)
        return -(-per_rank // self.block_size) * self.bytes_per_block

    def max_len(self, available_bytes: int) -> int:
        """Longest request that fits: vLLM's check keeps one block back (the null block)."""
        return max((available_bytes - self.bytes_per_block) // self.bytes_per_block, 0) * self.tokens_per_block


def _gmu_rounded_up(fraction: float) -> float:
    """A GMU rounded up to four decimals (a float a hair above a step stays on it)."""
    return math.ceil(fraction * 10_000 - 1e-9) / 10_000


def binding_rank(ranks: Sequence[RankReport]) -> RankReport | None:
    """The rank with the least KV memory; on a tie the one whose KV cache holds the fewest bytes (a
    log prints the available memory to 0.01 GiB and the cache in use to the byte: real pastes round
    eighteen, two ranks at 10.64 GiB that hold 11,423,138,508 and 11,425,235,660 bytes), then the
    lowest rank; None when no rank sized KV."""
    sized = [r for r in ranks if r.kv_available_bytes is not None]

    def cache(r: RankReport) -> int:
        held = r.owners.get(Owner.KV_CACHE)
        return held if held is not None else INT64_MAX
    # a rank without a number (a report may leave it null) loses a tie to every numbered one
    return min(sized, key=lambda r: (r.kv_available_bytes, cache(r), r.rank is None, r.rank or 0)) if sized else None


def physical_headroom(ranks: Sequence[RankReport]) -> int | None:
    """Free at start − requested on the tightest rank; None when a rank does not say."""
    per_rank = [minus(r.free_at_start_bytes, r.requested_bytes) for r in ranks]
    known = [h for h in per_rank if h is not None]
    return min(known) if known and len(known) == len(per_rank) else None


def node_summaries(ranks: Sequence[RankReport]) -> tuple[NodeSummary, ...] | None:
    """Per node (the ranks that say where they ran): its ranks, the most its devices held for
    other processes, its physical headroom and its binding rank; None when no rank says."""
    groups: dict[int, list[RankReport]] = {}
    for r in ranks:
        if r.node is not None and r.node.node_rank is not None:
            groups.setdefault(r.node.node_rank, []).append(r)
    if not groups:
        return None
    summaries = []
    for node_rank, members in sorted(groups.items()):
        others = [r.others_bytes for r in members]
        binding = binding_rank(members)
        first = members[0].node
        assert first is not None
        summaries.append(NodeSummary(
            node_rank=node_rank, host=first.host, ip=first.ip, ranks=tuple(r.rank for r in members),
            others_bytes=max(others) if None not in others else None,  # type: ignore[type-var]
            physical_headroom_bytes=physical_headroom(members), binding_rank=binding.rank if binding else None,
            kv_available_bytes=binding.kv_available_bytes if binding else None))
    return tuple(summaries)


def capacity(ranks: Sequence[RankReport], config: AuditConfig, geometry: KvGeometry | None, *,
             known_kv_tokens: int | None = None, known_max_feasible_model_len: int | None = None,
             known_max_model_len_fits: bool | None = None, known_kv_needed_bytes: int | None = None,
             graph_bytes_per_size: int | None = None, verify_overrun_bytes: int = 0,
             budget_was_a_cap: bool = False, serve_sizes_after_warmup: bool = False) -> Capacity:
    """Capacity on the binding rank, the levers when it does not fit, and the flags that are safe.

    `known_*`: facts a log states outright (vLLM's KV size line means the check passed; its
    ValueError names the bytes one request needs); used where the geometry cannot say.
    `verify_overrun_bytes`: how far a verify's true peak went above the budget (0 if it did not).
    `budget_was_a_cap`: vLLM 0.34's extensible KV cache sized the cache, where the GMU is only a cap
    and may exceed the memory free at start (safe_serve_flags). `serve_sizes_after_warmup`: the
    release's vllm serve sizes the cache after warmup by default (0.34 on, GPU), so a GMU lever,
    which is about sizing from the profile, has to say so (compute_levers)."""
    binding = binding_rank(ranks)
    kv_available = binding.kv_available_bytes if binding else None
    naive_per_rank = [r.naive_kv_available_bytes for r in ranks]
    naive_known = [n for n in naive_per_rank if n is not None]
    naive = min(naive_known) if naive_known and len(naive_known) == len(naive_per_rank) else None
    headroom = physical_headroom(ranks)
    length = config.max_model_len

    tokens, needed, fits = known_kv_tokens, known_kv_needed_bytes, known_max_model_len_fits
    feasible, gmu_needed = known_max_feasible_model_len, None
    if geometry is not None and kv_available is not None:
        tokens = geometry.blocks(kv_available) * geometry.tokens_per_block
        feasible = geometry.max_len(kv_available)
        if length is not None:
            needed = geometry.needed_bytes(length)
            fits = needed <= kv_available - geometry.bytes_per_block
            gmu_needed = _gmu_needed(ranks, needed + geometry.bytes_per_block, verify_overrun_bytes)
    elif fits is None and length is not None and feasible is not None:
        fits = feasible >= length

    cap = Capacity(
        kv_available_bytes=kv_available, binding_rank=binding.rank if binding else None, kv_tokens=tokens,
        kv_needed_bytes=needed, max_model_len_fits=fits, max_feasible_model_len=feasible, gmu_needed=gmu_needed,
        physical_headroom_bytes=headroom, naive_kv_available_bytes=naive,
        kv_bytes_per_block=geometry.bytes_per_block if geometry else None,
        block_size=geometry.block_size if geometry else None,
        tokens_per_block=geometry.tokens_per_block if geometry else None,
        over_allocation_bytes=minus(naive, kv_available))
    levers = (compute_levers(cap, binding, ranks, config, geometry, graph_bytes_per_size,
                             serve_sizes_after_warmup=serve_sizes_after_warmup)
              if binding is not None and (fits is False or over_committed(ranks)) else ())
    flags = safe_serve_flags(cap, binding, ranks, config, geometry, verify_overrun_bytes=verify_overrun_bytes,
                             budget_was_a_cap=budget_was_a_cap)
    return replace(cap, levers=levers, safe_serve_flags=flags)


def _gmu_needed(ranks: Sequence[RankReport], kv_bytes_needed: int, verify_overrun_bytes: int) -> float | None:
    """Smallest GMU at which every rank has kv_bytes_needed beside its non-KV owners: the larger of
    what they were charged when KV was sized and what they held at the end (the growth after
    sizing, or a verify's overrun, is what the safe flags hold back)."""
    worst = None
    for r in ranks:
        total = r.device_total_bytes
        if total is None or total <= 0 or r.requested_bytes is None \
                or r.kv_available_bytes is None:  # a log's "0.00 GiB" total is no total to divide by
            return None
        non_kv = r.requested_bytes - r.kv_available_bytes
        need = _gmu_rounded_up((non_kv + _grown_after_sizing(r, verify_overrun_bytes) + kv_bytes_needed) / total)
        worst = need if worst is None else max(worst, need)
    return worst


def _grown_after_sizing(rank: RankReport, verify_overrun_bytes: int) -> int:
    """The non-KV owners' bytes at the end beyond their sizing charge (requested − the KV figure).
    The owners add up to requested, so that is the KV figure's remainder beside the allocated KV
    less what stayed unallocated: on CUDA, where the figure is whole blocks, a negative
    kv_unallocated; on CPU also the pages that grew inside the whole-block remainder."""
    kv_cache, unallocated = rank.owners.get(Owner.KV_CACHE), rank.owners.get(Owner.KV_UNALLOCATED)
    available = rank.kv_available_bytes
    grown = (available - kv_cache - unallocated
             if available is not None and kv_cache is not None and unallocated is not None else -(unallocated or 0))
    return max(grown, verify_overrun_bytes, 0)


ONEDNN_CACHE_ENV = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY")
"""How many compiled kernels oneDNN's primitive cache keeps, one per GEMM shape (the first name read first; DNNL_ is
oneDNN's older name)."""
IDEEP_CACHE_ENV = ("LRU_CACHE_CAPACITY",)
"""How many torch's oneDNN front end (ideep, under `F.linear` on CPU) keeps, one per GEMM shape."""
JIT_CACHE_ENV = (*ONEDNN_CACHE_ENV, *IDEEP_CACHE_ENV)
JIT_CACHE_DEFAULT = 1024
"""Either cache's capacity where no variable sets it."""

ALLOCATOR_ENV = (*ALLOC_CONF_ENV, "MALLOC_", "GLIBC_TUNABLES", "TCMALLOC_", "LD_PRELOAD", *JIT_CACHE_ENV)
"""Environment variables (names, or prefixes ending in `_`) that set how memory is allocated, torch's
caching allocator or the host's (glibc's tunables, jemalloc's MALLOC_CONF, tcmalloc's, one
preloaded), or how much the host's kernel caches keep (JIT_CACHE_ENV): the same KV bytes fit or not
with them, so the safe flags hold only where they are set."""


HOST_MMAP_THRESHOLD = ("MALLOC_MMAP_THRESHOLD_", "131072")
"""glibc's mmap threshold at a process's start (128 KiB): `kvaudit run` holds it there for a CPU boot that chose no
allocator (engines/vllm/supervise.py), as its moving default moved a boot's RSS by tens of MiB."""


HOST_JIT_CACHES = ((ONEDNN_CACHE_ENV, "32"), (IDEEP_CACHE_ENV, "32"))
"""Each kernel cache's variables and the capacity `kvaudit run` holds a CPU boot at where its environment sets none
(engines/vllm/supervise.py): at JIT_CACHE_DEFAULT, oneDNN on an AVX-512 CPU keeps 0.27-0.53 MiB per GEMM row
count a server meets, up to ~0.8 GiB, all of it after KV sizing; at 32 (what vLLM's own oneDNN handlers keep)
the audit fills them before sizing (worker_cpu.fill_gemm_caches) and the safe flags carry the setting."""


def jit_caches_unset(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """`(variable, capacity)` of each HOST_JIT_CACHES an environment leaves to its default (none of its names set)."""
    return tuple((names[0], value) for names, value in HOST_JIT_CACHES if not any(n in env for n in names))


def jit_cache_capacities(env: Mapping[str, str]) -> tuple[int, int]:
    """(oneDNN's, ideep's) kernel cache capacity in a process of this environment, as each reads its variables
    (JIT_CACHE_DEFAULT where unset or not a number)."""
    def capacity(names: tuple[str, ...]) -> int:
        raw = next((env[n] for n in names if n in env), None)
        try:
            return max(int(raw), 0) if raw is not None else JIT_CACHE_DEFAULT
        except ValueError:
            return JIT_CACHE_DEFAULT
    oned, ideep = (capacity(names) for names, _ in HOST_JIT_CACHES)
    return oned, ideep


def host_allocator_chosen(env: Mapping[str, str]) -> bool:
    """Whether an environment decides the host heap's mmap threshold: the variable, glibc's tunable, or another
    allocator preloaded (tcmalloc, jemalloc)."""
    return ("MALLOC_MMAP_THRESHOLD_" in env or "mmap_threshold" in env.get("GLIBC_TUNABLES", "")
            or "malloc" in env.get("LD_PRELOAD", ""))


def allocator_env(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """`NAME=value` (quoted for a shell) of each allocator setting in a boot's environment, by name;
    None where there is none."""
    found = tuple(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())
                  if k in ALLOCATOR_ENV or any(p.endswith("_") and k.startswith(p) for p in ALLOCATOR_ENV))
    return found or None


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


def gmu_ceiling(ranks: Sequence[RankReport]) -> float | None:
    """The highest GMU vLLM accepts on every rank (requested must not exceed the memory free at
    start), rounded down to vLLM's 4 decimals; None when a rank's free memory is unknown."""
    values = []
    for r in ranks:
        if r.free_at_start_bytes is None or not r.device_total_bytes:
            return None
        values.append(math.floor(r.free_at_start_bytes / r.device_total_bytes * 10_000) / 10_000)
    return min(values) if values else None


def _tokens_in(geometry: KvGeometry | None, freed: int | None) -> int | None:
    """Tokens the freed bytes hold, in whole blocks; None where either is unknown."""
    if geometry is None or freed is None:
        return None
    return (freed // geometry.bytes_per_block) * geometry.tokens_per_block


def kv_shortfall(cap: Capacity) -> int | None:
    """How much more KV max_model_len needs than the binding rank has: its bytes and the block vLLM's check
    keeps back (the null block; none counted where the block is unknown), less the KV available."""
    if cap.kv_needed_bytes is None or cap.kv_available_bytes is None:
        return None
    return cap.kv_needed_bytes + (cap.kv_bytes_per_block or 0) - cap.kv_available_bytes


def compute_levers(cap: Capacity, binding: RankReport, ranks: Sequence[RankReport], config: AuditConfig,
                   geometry: KvGeometry | None, graph_bytes_per_size: int | None, *,
                   serve_sizes_after_warmup: bool = False) -> tuple[Lever, ...]:
    """What each knob frees on the binding rank, where that can be computed. With
    `serve_sizes_after_warmup` (vLLM 0.34 on) the GMU lever turns the extensible KV cache off too:
    what it frees is sizing from the profile's, and with the extensible cache the GMU is a cap."""
    levers: list[Lever] = []
    device_total = binding.device_total_bytes
    short = kv_shortfall(cap)
    shortfall = None if short is None else max(short, 0)
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
    ceiling = gmu_ceiling(ranks)
    if gmu is not None and device_total and ceiling is not None and cap.physical_headroom_bytes is not None \
            and cap.physical_headroom_bytes > 0 and binding.requested_bytes is not None:
        target = min(cap.gmu_needed, ceiling) if cap.gmu_needed is not None else ceiling
        if target > gmu:
            freed = requested_bytes(device_total, target) - binding.requested_bytes
            note = (f"raising GMU can recover at most {fmt_gib(cap.physical_headroom_bytes)} on this device"
                    + ("" if cap.gmu_needed is None or cap.gmu_needed <= ceiling
                       else f"; {cap.gmu_needed} would be needed, above the physical ceiling {ceiling}"))
            flag = f"--gpu-memory-utilization={target}"
            if serve_sizes_after_warmup:
                flag += " --no-enable-extensible-kv-cache"
                note += "; vLLM 0.34 sizes the KV cache after warmup unless told not to"
            levers.append(Lever("gpu_memory_utilization", flag, freed, _tokens_in(geometry, freed), note))

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
                            _tokens_in(geometry, freed), f"drops the {drop} largest capture sizes"))
    if graph and not config.enforce_eager:
        levers.append(Lever("enforce_eager", "--enforce-eager", graph, _tokens_in(geometry, graph),
                            "frees the whole graph pool at the cost of decode speed"))

    activation = binding.owners.get(Owner.ACTIVATION_PEAK)
    # without chunked prefill a step is a whole prompt: vLLM raises max_num_batched_tokens to max_model_len again
    # (vLLM's CPU platform forces that for MLA without AMX; the newcomer of stop 51 was offered half of it)
    if activation and config.max_num_batched_tokens and config.max_num_batched_tokens > 1 \
            and config.enable_chunked_prefill is not False:
        half = config.max_num_batched_tokens // 2
        freed = activation - activation * half // config.max_num_batched_tokens
        levers.append(Lever("max_num_batched_tokens", f"--max-num-batched-tokens={half}", freed,
                            _tokens_in(geometry, freed),
                            "estimate: the profile's transient scales about linearly with batched tokens"))
    if shortfall:
        # a lever that frees less than the config is short of makes it fit only beside others (a newcomer read
        # `--enforce-eager frees 1.25 GiB` under `free 2.25 GiB` as the fix)
        levers = [replace(lv, note=f"{lv.note}; not enough alone: the config is {fmt_gib(shortfall)} short")
                  if lv.name != "max_model_len" and lv.frees_bytes is not None and lv.frees_bytes < shortfall else lv
                  for lv in levers]
    # A lever that frees less than one block gains no KV (max_model_len's tokens are the context given up)
    return tuple(lv for lv in levers if lv.name == "max_model_len" or lv.frees_tokens != 0)


def safe_serve_flags(cap: Capacity, binding: RankReport | None, ranks: Sequence[RankReport],
                     config: AuditConfig, geometry: KvGeometry | None, *,
                     verify_overrun_bytes: int = 0, budget_was_a_cap: bool = False) -> tuple[str, ...]:
    """`vllm serve` flags that reproduce the audited budget: whole blocks of the binding rank,
    at a GMU and length that fit. `budget_was_a_cap`: the boot's GMU was the extensible KV cache's
    cap; the flags' pinned bytes turn that cache off, and vLLM's start-up check then needs the GMU
    within the memory free at start, so it is lowered to the highest that passes (gmu_ceiling)."""
    if binding is None or cap.kv_available_bytes is None or binding.requested_bytes is None:
        return ()
    gmu, kv, length = config.gpu_memory_utilization, cap.kv_available_bytes, config.max_model_len
    # A boot that used more than it requested (graphs above their estimate, deferred warmups), or
    # a verify whose true peak went over the budget, proved the KV figure too large by that much.
    # Both measure the same excess from different ends: the larger one is taken, not the sum.
    kv -= max(overcommit_bytes(ranks), verify_overrun_bytes)
    if cap.max_model_len_fits is False:
        needed = (requested_bytes(binding.device_total_bytes, cap.gmu_needed)
                  if cap.gmu_needed is not None and binding.device_total_bytes is not None else None)
        if needed is not None and cap.physical_headroom_bytes is not None \
                and needed <= binding.requested_bytes + cap.physical_headroom_bytes:
            kv += needed - binding.requested_bytes
            gmu = cap.gmu_needed
        else:
            length = cap.max_feasible_model_len
    if geometry is not None:
        kv = geometry.blocks(kv) * geometry.bytes_per_block
        if length and geometry.needed_bytes(length) + geometry.bytes_per_block > kv:
            length = geometry.max_len(kv)  # the reduced cache must still hold one request
    if kv <= 0 or not length:
        return ()
    ceiling = gmu_ceiling(ranks) if budget_was_a_cap else None
    if gmu is not None and ceiling is not None and gmu > ceiling:
        gmu = ceiling  # with the KV bytes given, the GMU only has to pass vLLM's start-up check
    flags = [f"--kv-cache-memory-bytes={kv}"]
    if gmu is not None:
        flags.append(f"--gpu-memory-utilization={gmu}")
    flags.append(f"--max-model-len={length}")
    return tuple(flags)


SIZED_NOT_SERVED = "sized, not served"
SERVED_THEN_OOM = "served, then out of memory"


def kv_not_served(failure: Failure | None, died_serving: Failure | None) -> str | None:
    """The one gate on a KV figure no boot can be trusted to serve with: its label and why (`sized, not
    served: the boot died in capture (oom)`), or None where the figure stands. The report then derives no
    safe flags from it (assemble) and labels it (capacity.kv_not_served, the table's KV line).

    A boot that died in startup sized its KV cache (where it got that far) and never served with it; one that
    ran out of memory after startup (died_serving: a request's step, the user's `llm.generate`) showed that
    figure left too little for serving. Flags from either recreate the boot that died (real pastes round
    twenty-three, LMCache#3430: `--kv-cache-memory-bytes=6839735419` offered from the KV that was live at the
    OOM). vLLM's own KV check failing (does_not_fit) is no such death: its flags are the corrected ones (a
    shorter length, a higher GMU)."""
    if failure is not None and failure.kind is not FailureKind.DOES_NOT_FIT:
        where = failure.step or (f"in {failure.phase.value}" if failure.phase else "before startup finished")
        return f"{SIZED_NOT_SERVED}: the boot died {where} ({failure.kind.value})"
    if died_serving is not None:
        return f"{SERVED_THEN_OOM}: the boot ran out of memory after startup, while serving"
    return None


def not_served_label(cap: Capacity) -> str | None:
    """The label kv_not_served put before its reason (SIZED_NOT_SERVED, SERVED_THEN_OOM), or None."""
    return cap.kv_not_served.split(": ", 1)[0] if cap.kv_not_served else None


def safe_kv_bytes(cap: Capacity) -> int | None:
    """The KV bytes of kvaudit's safe flags (`--kv-cache-memory-bytes=N`), or None."""
    for flag in cap.safe_serve_flags:
        name, _, value = flag.partition("=")
        if name == "--kv-cache-memory-bytes" and value.isdigit():
            return int(value)
    return None
