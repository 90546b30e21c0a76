"""`kvaudit run --repeat N`: N boots of one config, each a report of its own, folded into one.

The report is the worst boot's (its owners, capacity, safe flags and verdict: what a deployment
has to survive), with `repeat` beside it: per rank and owner the min, median and max over the
boots, and the KV tokens' spread. Worst: a boot that did not finish, else a failed verdict, else
the fewest safe KV bytes (the `--kv-cache-memory-bytes` of its safe flags), else the least KV. The
safe flags' KV bytes are the fewest of any boot (a boot with a failed verdict can leave more than
one that held).
Pure: no engine, no torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace

from kvaudit.assemble import COLD_COMPILE
from kvaudit.capacity import safe_kv_bytes
from kvaudit.schema import (
    COMPILE_HIT,
    COMPILE_PARTIAL,
    Owner,
    OwnerSpread,
    Repeat,
    RepeatBoot,
    Report,
    Verdict,
    boot_compile_cache,
)
from kvaudit.units import fmt_tokens


def boot_of(index: int, report: Report) -> RepeatBoot:
    """One boot's line of `repeat.runs` (index: 1 for the first)."""
    failure = report.failure
    return RepeatBoot(boot=index, verdict=report.verdict, kv_tokens=report.capacity.kv_tokens,
                      kv_available_bytes=report.capacity.kv_available_bytes,
                      safe_kv_cache_memory_bytes=safe_kv_bytes(report.capacity),
                      verify_slack_bytes=report.verify.slack_bytes if report.verify is not None else None,
                      failure=f"{failure.kind.value}: {failure.message}" if failure is not None else None,
                      compile_cache=boot_compile_cache(r.compile_cache for r in report.ranks))


def worst_index(reports: Sequence[Report]) -> int:
    """The position of the worst boot (the module's docstring says which); the later of equals."""
    def badness(item: tuple[int, Report]) -> tuple[int, int, int, int]:
        i, r = item
        grade = 0 if r.failure is not None else 1 if r.verdict is not Verdict.OK else 2
        safe = safe_kv_bytes(r.capacity)
        kv = r.capacity.kv_available_bytes
        return (grade, safe if safe is not None else -1, kv if kv is not None else -1, -i)
    return min(enumerate(reports), key=badness)[0]


def _spread(values: Sequence[int | None]) -> tuple[int | None, int | None, int | None]:
    known = sorted(v for v in values if v is not None)
    if not known:
        return None, None, None
    return known[0], statistics.median_low(known), known[-1]


def combine(reports: Sequence[Report], *, boots: int, cold: bool) -> Report:
    """The worst boot's report with the spread of all of them (`reports` in the order they ran;
    fewer than `boots` when one did not finish)."""
    if not reports:
        raise ValueError("no boot to combine")
    worst = worst_index(reports)
    ranks = sorted({r.rank for report in reports for r in report.ranks if r.rank is not None})
    owners = []
    for rank in ranks:
        for owner in Owner:
            values = [next((r.owners.get(owner) for r in report.ranks if r.rank == rank), None) for report in reports]
            low, mid, high = _spread(values)
            owners.append(OwnerSpread(rank=rank, owner=owner, min_bytes=low, median_bytes=mid, max_bytes=high))
    tokens = _spread([r.capacity.kv_tokens for r in reports])
    section = Repeat(boots=boots, cold=cold, worst_boot=worst + 1,
                     runs=tuple(boot_of(i + 1, r) for i, r in enumerate(reports)),
                     kv_tokens_min=tokens[0], kv_tokens_median=tokens[1], kv_tokens_max=tokens[2],
                     owners=tuple(owners))
    chosen = reports[worst]
    note = (f"note: the worst of {len(reports)} boots (boot {worst + 1}): its owners, capacity, safe flags and verdict"
            + (f"; KV tokens {fmt_tokens(tokens[0])} to {fmt_tokens(tokens[2])}" if tokens[0] is not None else ""))
    if len(reports) < boots:
        note += f"; boot {len(reports)} did not finish, so the other {boots - len(reports)} were not run"
    capacity = chosen.capacity
    own = safe_kv_bytes(capacity)
    safe = [safe_kv_bytes(r.capacity) for r in reports]
    fewest = min((b for b in safe if b is not None), default=None)
    if own is not None and fewest is not None and fewest < own:
        # a boot that held (or failed less) can still leave fewer safe bytes: the flags take the fewest
        flags = tuple(f"--kv-cache-memory-bytes={fewest}" if f.partition("=")[0] == "--kv-cache-memory-bytes" else f
                      for f in capacity.safe_serve_flags)
        capacity = replace(capacity, safe_serve_flags=flags)
        note += (f"; its --kv-cache-memory-bytes lowered to {fewest}, the fewest safe bytes of any boot "
                 f"(boot {safe.index(fewest) + 1})")
    warnings = chosen.warnings
    if any(r.compile_cache == COMPILE_HIT for report in reports for r in report.ranks) or not cold and any(
            r.compile_cache == COMPILE_PARTIAL for report in reports[1:] for r in report.ranks):
        # a boot loaded vLLM's compile cache: the fewest safe bytes above cover a restart that does. A later boot
        # in the caches the first one filled is that restart, though vLLM counts some graphs as compiled in it:
        # vLLM 0.26 loads the AOT artifact and still runs inductor, from its cache, for the pieces (`Directly load
        # AOT compilation …` beside `Compiling a graph … takes 0.51 s`; H100, DeepSeek-V3 dims with MTP: 2.35 GiB
        # more held after the profile than the first boot, as 0.34's warm boots)
        warnings = tuple(w for w in warnings if not w.startswith(COLD_COMPILE))
    return replace(chosen, capacity=capacity, repeat=section, warnings=(*warnings, note))
