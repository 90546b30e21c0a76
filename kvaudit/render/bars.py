"""Per-rank stacked bars: each owner's share of the device, the requested budget marked.

Each owner has a letter as well as a colour, so the bars read in a log file or without colour.
"""

from __future__ import annotations

from rich.text import Text

from kvaudit.render.summary import rank_name
from kvaudit.schema import Owner, RankReport, Report

STYLE = {
    Owner.WEIGHTS: ("W", "blue"), Owner.PERSISTENT: ("P", "magenta"), Owner.ACTIVATION_PEAK: ("A", "yellow"),
    Owner.GRAPH_POOL: ("G", "cyan"), Owner.NON_TORCH: ("N", "red"), Owner.TORCH_OTHER: ("T", "white"),
    Owner.KV_CACHE: ("K", "green"), Owner.KV_UNALLOCATED: ("u", "dim green"),
}


def _cells(value: int, total: int, width: int) -> int:
    # Capped at the total: an owner past it fills the bar, and the quotient (<= 1) cannot overflow a float.
    return round(min(value, total) / total * width) if value > 0 else 0


def rank_bar(rank: RankReport, width: int, drawn: set[Owner | str] | None = None) -> Text | None:
    """The rank's bar; the owners given at least one cell are added to `drawn` (the legend's owners), and
    UNKNOWN_CELLS where blank cells stand for owners not known."""
    total = rank.device_total_bytes
    # The loader accepts any integer: a total of 0 or less has no bar (cell counts would go negative).
    if total is None or total <= 0 or rank.requested_bytes is None:
        return None
    text = Text()
    # Each owner ends where the owners so far end: rounding the running sum, not each owner, so the cells add up to
    # the owners' bytes and they meet the budget mark where they fill it (rounded one by one, three small owners
    # each took a cell and pushed the `|` off a selftest's bar at 80 columns; at 60 two rounded to no cell, blanks)
    used = reached = 0
    for owner in Owner:
        value = rank.owners.get(owner)
        if value is None or value <= 0:
            continue
        letter, style = STYLE[owner]
        reached += value
        n = max(min(_cells(reached, total, width), width) - used, 0)
        text.append(letter * n, style=style)
        if n > 0 and drawn is not None:
            drawn.add(owner)
        used += n
    mark = min(_cells(rank.requested_bytes, total, width), width)
    if used < mark:
        # what no known owner fills below the budget: owners the report does not know (null)
        text.append(" " * (mark - used))
        if drawn is not None:
            drawn.add(UNKNOWN_CELLS)
        used = mark
    rest = width - used
    if rest > 0:
        # Past the budget: the 1 − GMU margin (others and what no owner claims live there).
        text.append("|" + "·" * (rest - 1) if used == mark else "·" * rest, style="dim")
    return text


UNKNOWN_CELLS = "unknown"
"""Put in a bar's `drawn` where blank cells stand for owners the report does not know."""


def legend(owners: set[Owner | str]) -> Text:
    """Only the owners drawn in the bars (one that rounds to no cell is not), so the legend fits on one line; and
    what blank cells below the budget mean, where a bar has them."""
    text = Text("  ")
    for owner, (letter, style) in STYLE.items():
        if owner in owners:
            text.append(letter, style=style)
            text.append(f" {owner.value}  ")
    if UNKNOWN_CELLS in owners:
        text.append("(blank) not known  ")
    text.append("| requested  · past it", style="dim")
    return text


def report_bars(report: Report, width: int) -> list[Text]:
    lines = []
    drawn: set[Owner | str] = set()
    names = [rank_name(r.rank, i) for i, r in enumerate(report.ranks)]
    label_width = max(map(len, names), default=6)
    for rank, name in zip(report.ranks, names):
        bar = rank_bar(rank, max(width - label_width - 3, 10), drawn)
        if bar is not None:
            line = Text(f"{name:<{label_width}} [")
            line.append_text(bar)
            line.append("]")
            lines.append(line)
    if lines:
        lines.append(legend(drawn))
    return lines
