"""vLLM 0.34's extensible KV cache in a log: which ranks it sized, and the cache it gave them.

With it (on by default on CUDA), vLLM reserves the cache's address range where it used to size the
cache ("Available KV cache memory", and the "Actual usage" line's "Current kv cache memory in use":
GMU 1.0 when not given, no graph term), captures graphs once, and sizes the cache after warmup:
each rank states what it measured room for ("Memory after warmup: … N KV cache blocks (S GiB) fit
…"), the engine takes the ranks' minimum, and each rank commits it ("Extended KV cache to N blocks
(X GiB).", physical bytes rounded up to the driver's granule per segment). docs/vllm-startup.md §5.4.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvaudit.engines.logs.facts import FactKind
from kvaudit.engines.logs.ranks import RankFacts
from kvaudit.schema import KvSizing
from kvaudit.units import fmt_gib
from kvaudit.vllm_source import EXTENSIBLE_KV_RELEASE
from kvaudit.vllm_source import release as vllm_release

ESTIMATE_LINES = (FactKind.GRAPH_ESTIMATE, FactKind.ADVISORY, FactKind.ADVISORY_DISABLED)
"""Lines vLLM prints only where it sizes the KV cache from its profile (a graph estimate > 0)."""
HALF_HUNDREDTH_GIB = (1 << 30) / 200
"""The most vLLM's two-decimal GiB figures are off by."""
NOTE_HEAD = "vLLM sized the KV cache after warmup and graph capture (vLLM 0.34's extensible KV cache)"




def sized_after_warmup(ranks: Mapping[int, RankFacts], version: str | None, estimates_disabled: bool,
                       gmu: float | None) -> bool:
    """Whether the extensible KV cache sized (or was to size) the boot's KV cache (an engine-wide
    setting: one rank's signs speak for all): a rank's sizing lines; where the log ends before them,
    the reservation's signs after the profile: a budget of the whole device in the "Actual usage"
    line (GMU 1.0, the extensible cache's default; a boot sized from its profile fails vLLM's
    start-up check at 1.0), or, on 0.34 on, graphs captured only after "Available KV cache memory"
    with no graph estimate (sized from its profile, 0.34 captures before it too, or says the
    estimate is off)."""
    return any(_signs(r, version, estimates_disabled, gmu) for r in ranks.values())


def _signs(r: RankFacts, version: str | None, estimates_disabled: bool, gmu: float | None) -> bool:
    if r.has(FactKind.KV_MEASURED, FactKind.KV_EXTENDED):
        return True
    if gmu == 1.0 and r.has(FactKind.KV_IN_USE):
        return True
    available = r.facts.get(FactKind.KV_AVAILABLE, [])
    release = vllm_release(version)
    if (not available or release is None or release < EXTENSIBLE_KV_RELEASE or estimates_disabled
            or r.has(*ESTIMATE_LINES)):
        return False
    captures = r.facts.get(FactKind.GRAPH_CAPTURE, [])
    first = min((f.file, f.pos) for f in available)
    return bool(captures) and all((c.file, c.pos) > first for c in captures)


def kv_sizing(ranks: Mapping[int, RankFacts], version: str | None, estimates_disabled: bool,
              after_warmup: bool, fixed: bool = False) -> KvSizing | None:
    """Who sized the boot's KV cache (the report's engine.kv_cache_sizing): after warmup where the log
    shows the extensible cache (`after_warmup`: sized_after_warmup); fixed where a rank states its cache
    was, or `fixed` (kv_cache_memory_bytes in the arguments); from the profile where the
    release predates it, a rank states a graph estimate, or the estimate is off (0.34 says so only
    without the extensible cache); else unknown (a 0.34 excerpt, or an eager boot, that shows neither)."""
    if after_warmup:
        return KvSizing.AFTER_WARMUP
    if fixed or any(r.has(FactKind.KV_FIXED) for r in ranks.values()):
        return KvSizing.FIXED
    release = vllm_release(version)
    if (release is not None and release < EXTENSIBLE_KV_RELEASE) or estimates_disabled \
            or any(r.has(*ESTIMATE_LINES) for r in ranks.values()):
        return KvSizing.PROFILE
    return None


def bytes_per_block(ranks: Mapping[int, RankFacts]) -> dict[int, float]:
    """Each measuring rank's KV bytes per block, from its "Memory after warmup" line (S GiB / N
    blocks, S to two decimals): the most precise figure among the ranks whose blocks may be the
    same size as its own (they agree within their rounding), so that ranks extended to the same
    blocks state the same bytes."""
    figures = {rank: (m[1] / m[0], HALF_HUNDREDTH_GIB / m[0]) for rank, r in ranks.items()
               if (m := r.last(FactKind.KV_MEASURED)) is not None and m[0] > 0}
    out = {}
    for rank, (value, error) in figures.items():
        alike = [(e, v) for v, e in figures.values() if abs(v - value) <= error + e]
        out[rank] = min(alike)[1]
    return out


def sized_cache(r: RankFacts, per_block: float | None) -> tuple[int, int] | None:
    """(blocks, bytes) of the rank's extensible cache: the blocks it was extended to (the ranks'
    minimum), else the blocks it measured room for (the log ends before the extension), at
    `per_block` (bytes_per_block) where the rank measured; None where the log ends before either."""
    measured, extended = r.last(FactKind.KV_MEASURED), r.last(FactKind.KV_EXTENDED)
    sized = extended if extended is not None else measured
    if sized is None:
        return None
    return (sized[0], round(sized[0] * per_block)) if per_block is not None else sized


def note(rank: int, sized: tuple[int, int] | None, extended: bool, reserved: int | None) -> str:
    """Once per log, for the first rank read: what the lines mean (every rank's figures are in the
    table). vLLM's --kv-cache-memory suggestion of the "Actual usage" line is left out of such
    ranks: in this mode it is computed at GMU 1.0 against the device's total, above what is free."""
    reserved_text = (f"'Available KV cache memory' {fmt_gib(reserved)} was the address range it reserved, not the "
                     f"cache" if reserved is not None else "")
    if sized is None:
        return (f"{NOTE_HEAD}, and the log ends before it did (rank {rank}): "
                + (reserved_text + "; " if reserved_text else "") + "no KV figure")
    blocks, size = sized
    what = (f"rank {rank} was extended to {blocks:,} blocks ({fmt_gib(size)}), its KV figure here" if extended else
            f"rank {rank} measured room for {blocks:,} blocks ({fmt_gib(size)}), its KV figure here (the log ends "
            f"before the cache was extended to the ranks' minimum)")
    return f"{NOTE_HEAD}: {what}" + (f"; {reserved_text}" if reserved_text else "") + \
        "; vLLM's --kv-cache-memory suggestion (computed at GMU 1.0 against the device's total) is left out"
