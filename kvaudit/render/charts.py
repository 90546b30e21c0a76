"""The HTML report's two pictures, drawn by matplotlib's SVG backend: per-rank stacked bars of
the owners against the requested budget and the device, and a diff's waterfall from A's KV to B's.

matplotlib is imported here, inside the functions, and only for `-f html`: every other path
(offline `show`/`diff` in a table, the CLI's start-up) pays nothing for it. No pyplot: a
`Figure` with the SVG canvas has no global state and never probes for a GUI backend.

No string from a report reaches matplotlib: rank numbers, owner names (enums) and byte figures
kvaudit formats itself are all it draws, so a model name cannot become mathtext or markup. The
HTML around the pictures carries the report's strings, escaped (kvaudit/render/html.py).

Every element a test or a reader may look for has an id (matplotlib writes an artist's gid as
the id of its SVG group): `kv-device-I`, `kv-bar-I-OWNER` and `kv-requested-I` for the I-th rank
drawn; `kv-wf-start`, `kv-wf-OWNER` (or `budget`, `rest`) and `kv-wf-end` for the waterfall.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kvaudit.errors import UsageError
from kvaudit.schema import Owner, RankReport
from kvaudit.units import GiB, fmt_bytes

OWNER_COLOR = {
    Owner.WEIGHTS: "#4e79a7", Owner.PERSISTENT: "#b07aa1", Owner.ACTIVATION_PEAK: "#f28e2b",
    Owner.GRAPH_POOL: "#76b7b2", Owner.NON_TORCH: "#e15759", Owner.TORCH_OTHER: "#9d9d9d",
    Owner.KV_CACHE: "#59a14f", Owner.KV_UNALLOCATED: "#b6dca8",
}
"""The same hues as the terminal's bars (kvaudit/render/bars.py): blue weights, green KV…"""
DEVICE_COLOR = "#ececec"
DEVICE_EDGE = "#a0a0a0"
REQUESTED_COLOR = "#000000"
MORE_KV = "#59a14f"
LESS_KV = "#e15759"
KV_ENDS = "#4e79a7"

MATPLOTLIB_MISSING = ("-f html draws its charts with matplotlib, which is not installed here: "
                      "pip install 'kvaudit[html]' (or pip install matplotlib)")

_RC = {"svg.fonttype": "none",   # text stays text (<text>): small, selectable, no glyph outlines
       "text.parse_math": False,  # a `$` is a dollar sign, never mathtext
       "font.family": "sans-serif", "font.size": 9.0, "axes.spines.top": False, "axes.spines.right": False}


def check_matplotlib() -> None:
    """UsageError (exit 2) naming the install when matplotlib is missing: asked before a boot."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(MATPLOTLIB_MISSING)


def _matplotlib():
    """matplotlib, imported now (the first -f html chart pays for it), or the usage error."""
    try:
        import matplotlib
        import matplotlib.backends.backend_svg  # noqa: F401
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise UsageError(MATPLOTLIB_MISSING) from None
    return matplotlib


def _figure(width_in: float, height_in: float):
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasSVG(fig)
    return fig


def _svg(fig, salt: str) -> str:
    """The figure as an SVG element to inline in HTML: no XML prolog or DOCTYPE, no date, and the
    ids matplotlib derives from content (clip paths, markers) salted per chart, so two charts on
    one page never share one."""
    import matplotlib
    out = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": f"kvaudit-{salt}"}):
        fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    text = out.getvalue()
    start = text.find("<svg")
    svg = text[start:] if start >= 0 else text
    # matplotlib's plain ids (figure_1, axes_1, patch_3…) are the same in every chart: prefix
    # them, and the references to them (clip paths, markers), so the page's ids stay unique. The
    # kvaudit ids set as gids start with `kv-` and nothing refers to them.
    svg = re.sub(r'id="(?!kv-)([^"]*)"', lambda m: f'id="{salt}-{m.group(1)}"', svg)
    return svg.replace("url(#", f"url(#{salt}-").replace('href="#', f'href="#{salt}-')


# --------------------------------------------------------------------------------------------
# Per-rank bars


@dataclass(frozen=True)
class DrawnRank:
    """One rank's bar: which rank, and the segments drawn (owner, bytes), left to right."""

    index: int
    rank: RankReport
    segments: tuple[tuple[Owner, int], ...]


def drawable(ranks: Sequence[RankReport]) -> list[DrawnRank]:
    """The ranks that have something to draw: a positive owner or a device total. Owners that
    are unknown, zero or negative (kv_unallocated of an over-commit) take no width."""
    drawn = []
    for rank in ranks:
        segments = tuple((o, v) for o in Owner if (v := rank.owners.get(o)) is not None and v > 0)
        if segments or (rank.device_total_bytes or 0) > 0:
            drawn.append(DrawnRank(len(drawn), rank, segments))
    return drawn


def rank_bars_svg(drawn: Sequence[DrawnRank], binding_rank: int | None) -> str:
    """Per rank, a light box as wide as the device, the owners stacked from 0 in Owner order,
    and a black tick at the requested budget (gpu_memory_utilization × the device)."""
    matplotlib = _matplotlib()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    with matplotlib.rc_context(_RC):
        fig = _figure(9.6, 1.3 + 0.45 * len(drawn))
        ax = fig.add_subplot()
        shown: list[Owner] = []
        right = 0.0
        for d in drawn:
            y, device = d.index, d.rank.device_total_bytes
            if device is not None and device > 0:
                ax.barh(y, device / GiB, height=0.8, color=DEVICE_COLOR, edgecolor=DEVICE_EDGE,
                        linewidth=0.8)[0].set_gid(f"kv-device-{d.index}")
                right = max(right, device / GiB)
            left = 0
            for owner, value in d.segments:
                ax.barh(y, value / GiB, left=left / GiB, height=0.56, color=OWNER_COLOR[owner],
                        linewidth=0)[0].set_gid(f"kv-bar-{d.index}-{owner.value}")
                left += value
                if owner not in shown:
                    shown.append(owner)
            right = max(right, left / GiB)
            requested = d.rank.requested_bytes
            if requested is not None and requested > 0:
                ax.vlines(requested / GiB, y - 0.46, y + 0.46, colors=REQUESTED_COLOR,
                          linewidth=1.6).set_gid(f"kv-requested-{d.index}")
                right = max(right, requested / GiB)
        ax.set_yticks(range(len(drawn)), labels=[_rank_label(d.rank, binding_rank, len(drawn)) for d in drawn])
        ax.set_ylim(len(drawn) - 0.5, -0.5)  # rank 0 on top
        ax.set_xlim(0, right * 1.02 if right > 0 else 1)
        ax.set_xlabel("GiB")
        ax.tick_params(axis="y", length=0)
        handles = [Patch(color=OWNER_COLOR[o], label=o.value) for o in Owner if o in shown]
        handles.append(Line2D([], [], color=REQUESTED_COLOR, linewidth=1.6, label="requested budget"))
        handles.append(Patch(facecolor=DEVICE_COLOR, edgecolor=DEVICE_EDGE, label="device"))
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5), frameon=False)
        return _svg(fig, "ranks")


def _rank_label(rank: RankReport, binding_rank: int | None, count: int) -> str:
    name = "rank ?" if rank.rank is None else f"rank {rank.rank}"
    return name + (" *" if count > 1 and rank.rank is not None and rank.rank == binding_rank else "")


# --------------------------------------------------------------------------------------------
# Diff waterfall


@dataclass(frozen=True)
class Step:
    """One bar of the waterfall: what moved KV by `delta_bytes` (positive: more KV for B)."""

    key: str
    """An owner's name, `budget` or `rest`: the bar's id is kv-wf-KEY."""
    label: str
    delta_bytes: int


def waterfall_svg(start_bytes: int, steps: Sequence[Step], end_bytes: int) -> tuple[str, int | None]:
    """A's KV, each step up (green) or down (red) from where the last one ended, B's KV. The axis
    is zoomed on the steps (they are small beside KV itself): returns the SVG and the bytes where
    the axis starts when that is above 0 (the ends are then cut, and the page says so)."""
    matplotlib = _matplotlib()
    with matplotlib.rc_context(_RC):
        fig = _figure(min(max(6.0, 1.0 + 0.95 * (len(steps) + 2)), 9.6), 3.6)
        ax = fig.add_subplot()
        totals = [start_bytes]
        for step in steps:
            totals.append(totals[-1] + step.delta_bytes)
        lo, hi = min(totals + [end_bytes]), max(totals + [end_bytes])
        span = hi - lo or max(abs(start_bytes) // 100, 1 << 20)
        bottom = max(lo - span * 0.6, 0) if lo >= 0 else lo - span * 0.6
        top = hi + span * 0.35
        labels = ["A: KV"]
        ax.bar(0, start_bytes / GiB, color=KV_ENDS, width=0.6)[0].set_gid("kv-wf-start")
        _value(ax, 0, start_bytes, start_bytes, signed=False)
        for x, step in enumerate(steps, start=1):
            before, after = totals[x - 1], totals[x]
            ax.bar(x, abs(step.delta_bytes) / GiB, bottom=min(before, after) / GiB, width=0.6,
                   color=MORE_KV if step.delta_bytes > 0 else LESS_KV)[0].set_gid(f"kv-wf-{step.key}")
            ax.plot([x - 1.3, x + 0.3], [before / GiB, before / GiB], color="#777777", linewidth=0.6,
                    linestyle=":")
            _value(ax, x, max(before, after), step.delta_bytes, signed=True)
            labels.append(step.label)
        end_x = len(steps) + 1
        ax.plot([end_x - 1.3, end_x + 0.3], [totals[-1] / GiB] * 2, color="#777777", linewidth=0.6, linestyle=":")
        ax.bar(end_x, end_bytes / GiB, color=KV_ENDS, width=0.6)[0].set_gid("kv-wf-end")
        _value(ax, end_x, end_bytes, end_bytes, signed=False)
        labels.append("B: KV")
        ax.set_xticks(range(end_x + 1), labels=labels, rotation=20, ha="right", rotation_mode="anchor")
        ax.set_ylim(bottom / GiB, top / GiB)
        ax.set_ylabel("KV on the binding rank (GiB)")
        ax.tick_params(axis="x", length=0)
        return _svg(fig, "waterfall"), (int(bottom) if bottom > 0 else None)


def _value(ax, x: float, at_bytes: int, value: int, *, signed: bool) -> None:
    ax.annotate(fmt_bytes(value, signed=signed), (x, at_bytes / GiB), xytext=(0, 3), textcoords="offset points",
                ha="center", va="bottom", fontsize=8)
