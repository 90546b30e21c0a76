"""The one sequence of sections of a report and of a diff, for every human-readable format.

`SectionReporter` walks the sections in order (header, per-rank owners and the nodes they ran on,
accuracy, bars, capacity, levers, verify's scenarios, the spread of --repeat, sites, notes, warnings,
the failure, the verdict); a format only
says how each kind of section is drawn, by giving a `Page`. So the table and markdown show the same things in the same
order and cannot drift. The words of each section come from kvaudit/render/summary.py, the tables
from kvaudit/render/frames.py.

Strings from a report or log (a model name, a failure message, a warning, a site) are data: a
page only ever receives one line, each newline and carriage return in it escaped (`_OneLine`), so
none can start a line of its own (a model name holding "\nverdict: ok" printed a `verdict: ok`
line above a FAIL). Each format then escapes its own syntax: markdown its delimiters and inline
markup (kvaudit/render/markdown.py); an HTML page would escape `<`, `>` and `&`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import TYPE_CHECKING, TextIO

from kvaudit.printable import one_line
from kvaudit.render import frames, summary
from kvaudit.render.frames import Frame
from kvaudit.schema import DiffReport, Report, Verdict

if TYPE_CHECKING:
    from kvaudit.plan_schema import Plan

OWNERS_LABEL = "owner (GiB)"
ACCURACY_LABEL = "planted vs measured (GiB)"
"""The accuracy table's corner label: short enough that its six columns fit 80 columns."""
DIFF_BINDING_LABEL = "owner, binding rank (GiB)"
DIFF_RANKS_LABEL = "Δ per rank (GiB)"


class Tone(Enum):
    """How much a line asks for attention; a format may colour it."""

    PLAIN = "plain"
    WARNING = "warning"
    ALERT = "alert"


class Page(ABC):
    """How one format draws each kind of section, on one output stream."""

    @abstractmethod
    def title(self, text: str) -> None:
        """The first line: what was audited or compared."""

    @abstractmethod
    def table(self, frame: Frame, label: str) -> None:
        """A table of text cells; `label` heads its index column."""

    @abstractmethod
    def footnote(self, text: str) -> None:
        """A line that explains a mark in the table just drawn."""

    @abstractmethod
    def gap(self) -> None:
        """The space between two blocks."""

    @abstractmethod
    def bars(self, report: Report) -> None:
        """The owners of each rank as a picture, where the format has one."""

    @abstractmethod
    def fact(self, label: str, value: str, *, pasteable: bool) -> None:
        """One capacity figure; a pasteable value is meant to be copied whole."""

    @abstractmethod
    def lever(self, flag: str, effect: str) -> None:
        """One lever: the flag to paste and what it frees."""

    @abstractmethod
    def line(self, text: str, *, label: str | None = None, tone: Tone = Tone.PLAIN) -> None:
        """One line of prose, after `label: ` where given."""

    @abstractmethod
    def verdict(self, text: str, verdict: Verdict) -> None:
        """The last line: the verdict and why."""


class _OneLine(Page):
    """A format's page that is handed one line at a time: every string (a table's labels and cells
    too) with its newlines and carriage returns escaped."""

    def __init__(self, page: Page):
        self.page = page

    def title(self, text: str) -> None:
        self.page.title(one_line(text))

    def table(self, frame: Frame, label: str) -> None:
        # lists, not a dict: two columns of one label (a diff of a file with itself) stay two
        cells = Frame.of([[one_line(str(v)) for v in row] for row in frame.itertuples(index=False)],
                         index=[one_line(str(v)) for v in frame.index],
                         columns=[one_line(str(v)) for v in frame.columns])
        self.page.table(cells, one_line(label))

    def footnote(self, text: str) -> None:
        self.page.footnote(one_line(text))

    def gap(self) -> None:
        self.page.gap()

    def bars(self, report: Report) -> None:
        self.page.bars(report)  # rank numbers and owner letters only

    def fact(self, label: str, value: str, *, pasteable: bool) -> None:
        self.page.fact(one_line(label), one_line(value), pasteable=pasteable)

    def lever(self, flag: str, effect: str) -> None:
        self.page.lever(one_line(flag), one_line(effect))

    def line(self, text: str, *, label: str | None = None, tone: Tone = Tone.PLAIN) -> None:
        self.page.line(one_line(text), label=None if label is None else one_line(label), tone=tone)

    def verdict(self, text: str, verdict: Verdict) -> None:
        self.page.verdict(one_line(text), verdict)


class SectionReporter(ABC):
    """A reporter that draws reports and diffs section by section on the page of its format."""

    @abstractmethod
    def page(self, out: TextIO) -> Page: ...

    plan_markdown = False
    """Whether a plan's how-each-figure-was-obtained lines are markdown (the markdown reporter)."""

    def plan(self, plan: Plan, out: TextIO) -> None:
        """The predicted report as any report, then how each figure was obtained."""
        from kvaudit.render.plan import write_plan_lines
        self.report(plan.report, out)
        write_plan_lines(plan, out, markdown=self.plan_markdown)

    def report(self, report: Report, out: TextIO) -> None:
        page = _OneLine(self.page(out))
        page.title(summary.headline(report))
        if report.ranks:
            page.table(frames.owners_wide(report), OWNERS_LABEL)
        else:
            page.footnote(summary.no_ranks_line(report))
        if (note := summary.binding_note(report)) is not None:
            page.footnote(note)
        for line in summary.node_lines(report):  # more than one node: where each rank ran
            page.footnote(line)
        page.gap()
        if report.accuracy:
            page.table(frames.accuracy_frame(report), ACCURACY_LABEL)
            page.gap()
        page.bars(report)
        for label, value in summary.capacity_lines(report):
            page.fact(label, value, pasteable=label in summary.FLAG_LABELS)
        for flag, effect in summary.lever_parts(report):
            page.lever(flag, effect)
        if report.verify is not None and report.verify.scenarios:
            page.gap()
            page.table(frames.verify_frame(report), summary.VERIFY_LABEL)
            for line in summary.verify_allocator_lines(report):
                page.footnote(line)
        if report.repeat is not None:
            page.gap()
            page.table(frames.repeat_frame(report), summary.REPEAT_LABEL)
            for line in summary.repeat_lines(report):
                page.footnote(line)
            page.gap()
        for line in summary.site_lines(report):
            page.line(line, label="sites")
        notes, warnings = summary.notes_and_warnings(report)
        for line in notes:
            page.line(line, label="note")
        for line in warnings:
            page.line(line, label="warning", tone=Tone.WARNING)
        if (failure := summary.failure_line(report)) is not None:
            page.line(failure, label="failure", tone=Tone.ALERT)
        page.verdict(summary.verdict_line(report), report.verdict)

    def diff(self, diff: DiffReport, out: TextIO) -> None:
        page = _OneLine(self.page(out))
        page.title(f"kvaudit diff {diff.a_name} → {diff.b_name}")
        page.table(frames.diff_binding(diff), DIFF_BINDING_LABEL)
        page.gap()
        per_rank = frames.diff_ranks(diff)
        if len(per_rank.columns) > 0:  # neither side numbers its ranks: nothing to show per rank
            page.table(per_rank, DIFF_RANKS_LABEL)
            page.gap()
        for line in summary.diff_summary(diff):
            page.line(line, tone=Tone.WARNING if line.startswith(summary.NOT_COMPARABLE) else Tone.PLAIN)
        for line in summary.diff_site_lines(diff):
            page.line(line, label="sites")
