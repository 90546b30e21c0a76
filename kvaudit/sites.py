"""Allocation sites: which code made each live block, and which owner it belongs to (`--trace`).

With `--trace` the engine records PyTorch's allocator state with Python stacks and, at every
phase boundary, hands the live blocks here. Each block is attributed by rules (TOML: frame
patterns → owner and a short site name); blocks in a private pool are graph-pool blocks, named
by pool id. What no rule matches is listed as unattributed, under the innermost frame of the
code that made it — never guessed into an owner. The report keeps aggregates only (phase,
owner, site, bytes, blocks), capped per phase: never raw snapshots.

Pure Python: rules and blocks in, aggregates out; `engines/trace.py` does the torch part.

Rule file (kvaudit/data/owners.toml holds the defaults; `--owners FILE` adds rules that are
tried first):

    [[rule]]
    owner = "weights"                      # an owner name (docs/design.md)
    site = "weights:{inner}"               # {function}, {file}: the matched frame;
                                           # {inner}: the innermost frame outside torch/stdlib
    file = "vllm/model_executor/model_loader/"   # regex searched in the frame's path
    function = "load_model|load_weights"   # optional regex, matched against the whole name

The first rule (in file order) with a frame that matches wins.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from kvaudit.errors import BadInputError
from kvaudit.schema import PHASE_ORDER, Owner, Site, SiteDelta

UNATTRIBUTED = "unattributed"
"""The owner of blocks no rule matched (shown as such, never guessed)."""
OTHER_SITES = "(other sites)"
SITES_PER_PHASE = 24
"""Cap: the largest sites of each phase are kept by name; the rest are summed into one row."""

_LIBRARY = re.compile(r"(/|^)(torch|contextlib|functools|threading|kvaudit/engines/trace)(/|\.py)|"
                      r"/lib/python3\.\d+/[^/]+\.py$|^<|/inductor_cache/|vllm/model_executor/parameter\.py$")
"""Frames that are never "the code that asked": torch itself, the standard library, the code
torch.compile generates and vLLM's Parameter dispatch (their caller, a model layer, is the site)."""


@dataclass(frozen=True)
class Rule:
    owner: str
    site: str
    file: re.Pattern[str]
    function: re.Pattern[str] | None = None

    def matches(self, frame: Mapping[str, Any]) -> bool:
        if not self.file.search(_path(frame)):
            return False
        return self.function is None or self.function.fullmatch(str(frame.get("name", ""))) is not None


# --------------------------------------------------------------------------------------------
# rules


def default_rules_path() -> Path:
    return Path(str(resources.files("kvaudit") / "data" / "owners.toml"))


def load_rules(extra: Sequence[Path] = ()) -> tuple[Rule, ...]:
    """The user's rule files first (they override), then the shipped defaults."""
    rules: list[Rule] = []
    for path in (*extra, default_rules_path()):
        rules.extend(parse_rules(_read(path), str(path)))
    return tuple(rules)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path}: cannot read owner rules: {exc.__class__.__name__}") from None


def parse_rules(text: str, where: str) -> tuple[Rule, ...]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{where}: not valid TOML: {exc}") from None
    entries = data.get("rule", [])
    if not isinstance(entries, list):
        raise BadInputError(f"{where}: `rule` must be an array of tables ([[rule]])")
    owners = {o.value for o in Owner}
    rules = []
    for i, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise BadInputError(f"{where}: rule {i} is not a table")
        owner, site, file, function = (entry.get(k) for k in ("owner", "site", "file", "function"))
        if owner not in owners:
            raise BadInputError(f"{where}: rule {i}: owner must be one of {', '.join(sorted(owners))}, not {owner!r}")
        if not isinstance(site, str) or not site or not isinstance(file, str) or not file:
            raise BadInputError(f"{where}: rule {i}: `site` and `file` must be non-empty strings")
        if function is not None and not isinstance(function, str):
            raise BadInputError(f"{where}: rule {i}: `function` must be a string")
        try:
            rules.append(Rule(owner=owner, site=site, file=re.compile(file),
                              function=re.compile(function) if function else None))
        except re.error as exc:
            raise BadInputError(f"{where}: rule {i}: bad pattern: {exc}") from None
    return tuple(rules)


# --------------------------------------------------------------------------------------------
# attribution


def _path(frame: Mapping[str, Any]) -> str:
    return str(frame.get("filename", "")).replace("\\", "/")


def frame_name(frame: Mapping[str, Any]) -> str:
    """`dir/file:function`, short enough for a table, long enough to find the code."""
    parts = _path(frame).removesuffix(".py").split("/")
    return f"{'/'.join(parts[-2:])}:{frame.get('name', '?')}"


def inner_frame(frames: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The innermost frame of the code that asked for the memory (not torch, not the stdlib).
    Frames come innermost first, as the allocator records them."""
    for frame in frames:
        if not _LIBRARY.search(_path(frame)):
            return frame
    return frames[0] if frames else None


def classify(frames: Sequence[Mapping[str, Any]], pool: tuple[int, int], rules: Sequence[Rule]) -> tuple[str, str]:
    """(owner, site) of one block."""
    if pool != (0, 0):  # a private pool: CUDA graph memory, whatever code asked for it
        return Owner.GRAPH_POOL.value, f"graph pool {pool[0]}.{pool[1]}"
    if not frames:
        return UNATTRIBUTED, "(allocated before tracing began)"
    inner = inner_frame(frames)
    inner_text = frame_name(inner) if inner is not None else "?"
    for rule in rules:
        for frame in frames:
            if rule.matches(frame):
                return rule.owner, rule.site.format(function=frame.get("name", "?"),
                                                    file=_path(frame).rsplit("/", 1)[-1].removesuffix(".py"),
                                                    inner=inner_text)
    return UNATTRIBUTED, inner_text


def live_blocks(segments: Iterable[Mapping[str, Any]]) -> Iterable[tuple[int, tuple[int, int], list]]:
    """(size, pool id, frames) of every allocated block in the allocator's segments (the
    `segments` of torch.cuda.memory._snapshot()). A private pool's segment counts whole, as the
    ledger charges it: graphs free their blocks into the pool, which keeps every page."""
    for seg in segments:
        pool = tuple(seg.get("segment_pool_id") or (0, 0))
        if pool != (0, 0):
            yield int(seg.get("total_size", 0)), (int(pool[0]), int(pool[1])), []
            continue
        for block in seg.get("blocks", ()):
            if block.get("state") == "active_allocated":
                yield int(block.get("size", 0)), (int(pool[0]), int(pool[1])), list(block.get("frames") or ())


def aggregate(phase: str, blocks: Iterable[tuple[int, tuple[int, int], list]], rules: Sequence[Rule], *,
              cap: int = SITES_PER_PHASE, at: str = "end") -> tuple[Site, ...]:
    """The sites of one phase, largest first; past `cap`, the rest summed per owner."""
    return _ranked(phase, ((classify(frames, pool, rules), size) for size, pool, frames in blocks), cap, at)


def _tally(items: Iterable[tuple[Any, int, int]]) -> dict[Any, tuple[int, int]]:
    """key → (bytes, blocks), summed over (key, bytes, blocks) items."""
    sums: dict[Any, tuple[int, int]] = {}
    for key, nbytes, count in items:
        b, c = sums.get(key, (0, 0))
        sums[key] = (b + nbytes, c + count)
    return sums


def _ranked(phase: str, attributed: Iterable[tuple[tuple[str, str], int]], cap: int, at: str) -> tuple[Site, ...]:
    sums = _tally((key, size, 1) for key, size in attributed)
    ranked = sorted(sums.items(), key=lambda kv: (-kv[1][0], kv[0]))
    kept = [Site(phase, owner, site, nbytes, count, at) for (owner, site), (nbytes, count) in ranked[:cap]]
    rest = _tally((owner, nbytes, count) for (owner, _), (nbytes, count) in ranked[cap:])
    kept += [Site(phase, owner, OTHER_SITES, nbytes, count, at) for owner, (nbytes, count) in sorted(rest.items())]
    return tuple(kept)


def peak_transient(phase: str, events: Sequence[Mapping[str, Any]], rules: Sequence[Rule], *,
                   cap: int = SITES_PER_PHASE) -> tuple[Site, ...]:
    """The blocks allocated during a phase that were live when its allocated total peaked.

    `events` are the allocator's trace of the phase alone (history cleared at its start), in
    order: `alloc` carries the allocating stack, `free_completed` the address that went back.
    Frees of blocks from before the phase lower the total too, so the peak found here is the
    phase's own high-water mark relative to its start, as `P(p) − A(start)` is."""
    total = best = 0
    best_at = -1
    for i, event in enumerate(events):
        action, size = event.get("action"), int(event.get("size", 0))
        if action == "alloc":
            total += size
        elif action == "free_completed":
            total -= size
        if total > best:
            best, best_at = total, i
    if best_at < 0:
        return ()
    at_peak: dict[int, Mapping[str, Any]] = {}
    for event in events[: best_at + 1]:  # replay to the peak: which of this phase's blocks were live
        if event.get("action") == "alloc":
            at_peak[int(event.get("addr", 0))] = event
        elif event.get("action") == "free_completed":
            at_peak.pop(int(event.get("addr", 0)), None)
    attributed = ((classify(list(e.get("frames") or ()), (0, 0), rules), int(e.get("size", 0)))
                  for e in at_peak.values())
    return _ranked(phase, attributed, cap, "peak")


# --------------------------------------------------------------------------------------------
# diff


def last_common_phase(a: Sequence[Site], b: Sequence[Site]) -> str | None:
    """The latest phase both traces reached (capture for two complete boots)."""
    common = {s.phase for s in a if s.at == "end"} & {s.phase for s in b if s.at == "end"}
    for phase in reversed(PHASE_ORDER):
        if phase.value in common:
            return phase.value
    return None


def site_deltas(a: Sequence[Site], b: Sequence[Site], rank: int) -> tuple[SiteDelta, ...]:
    """Per (owner, site) at the last phase both traces reached, sorted by |delta|, zeros dropped."""
    phase = last_common_phase(a, b)
    if phase is None:
        return ()

    def by_site(sites: Sequence[Site]) -> dict[tuple[str, str], int]:
        return {(s.owner, s.site): s.bytes for s in sites if s.phase == phase and s.at == "end"}
    sa, sb = by_site(a), by_site(b)
    deltas = []
    for owner, site in sa.keys() | sb.keys():
        av, bv = sa.get((owner, site), 0), sb.get((owner, site), 0)
        if av != bv:  # a site of unknown size on either side has an unknown change, never 0
            deltas.append(SiteDelta(owner=owner, site=site, rank=rank, phase=phase, a_bytes=av, b_bytes=bv,
                                    delta_bytes=None if av is None or bv is None else bv - av))
    return tuple(sorted(deltas, key=lambda d: (d.delta_bytes is None, -abs(d.delta_bytes or 0), d.owner, d.site)))
