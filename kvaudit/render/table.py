"""The terminal view: each section of kvaudit/render/sections.py drawn with rich."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from kvaudit.printable import printable
from kvaudit.render import bars
from kvaudit.render.sections import Page, SectionReporter, Tone
from kvaudit.schema import Report, Verdict

VERDICT_STYLE = {Verdict.OK: "bold green", Verdict.FAIL: "bold red", Verdict.UNKNOWN: "bold yellow"}
TONE_STYLE = {Tone.PLAIN: None, Tone.WARNING: "yellow", Tone.ALERT: "red"}
LABEL_WIDTH = 30
"""Capacity labels are right-aligned to this width, their values start after it."""
MAX_RENDERED_CHARS = 2000
"""A string longer than this (a hostile report's message or path) is cut before rich lays it out:
rich's wrapping is slower than linear in the length of one string."""

if TYPE_CHECKING:
    from kvaudit.render.frames import Frame


def _cap(text: str) -> str:
    if len(text) <= MAX_RENDERED_CHARS:
        return text
    return f"{text[:MAX_RENDERED_CHARS]}… ({len(text) - MAX_RENDERED_CHARS:,} more characters)"


def _table(frame: Frame, index_name: str) -> Table:
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column(_cap(index_name), no_wrap=True)
    for col in frame.columns:
        table.add_column(printable(_cap(str(col))), justify="right", no_wrap=True)
    for name, row in frame.iterrows():
        table.add_row(printable(_cap(str(name))), *(printable(_cap(str(v))) for v in row.tolist()))
    return table


_WIDEST = 10_000
"""The widest a table is measured and printed: wider than the table of any report of up to a few hundred
ranks (a wider one, beyond what a terminal or a file reader shows, is cut there as before)."""


class _Console(Console):
    def print(self, *objects: Any, **kwargs: Any) -> None:
        # report strings are data: their escape sequences are shown, never run (rich passes ESC),
        # and capped, so one huge string cannot stall the renderer
        super().print(*(printable(_cap(o)) if isinstance(o, str) else o for o in objects), **kwargs)

    def on_broken_pipe(self) -> None:
        # rich's default redirects sys.stdout and exits 1 (a finding); the stream was injected, so
        # its closing is the caller's to handle (the CLI exits 0 when a reader like `head` stops).
        raise BrokenPipeError(errno.EPIPE, "output closed")


class _TablePage(Page):
    def __init__(self, console: Console):
        self.con = console

    def title(self, text: str) -> None:
        self.con.print(text, style="bold")

    def table(self, frame: Frame, label: str) -> None:
        # a table wider than the console is printed whole, at its own width (a terminal wraps the
        # lines; a file keeps them): cut to the console, its cells lost their figures ("32,…", "FAI…")
        table = _table(frame, label)
        natural = Measurement.get(self.con, self.con.options.update(max_width=_WIDEST), table).maximum
        width = self.con.width
        self.con.width = max(width, natural)  # print(width=…) cannot widen past the console's own
        try:
            self.con.print(table)
        finally:
            self.con.width = width

    def footnote(self, text: str) -> None:
        self.con.print(text)

    def gap(self) -> None:
        self.con.print()

    def bars(self, report: Report) -> None:
        for line in bars.report_bars(report, min(self.con.width, 100)):
            self.con.print(line)
        self.con.print()

    def fact(self, label: str, value: str, *, pasteable: bool) -> None:
        # flags meant for pasting stay on one line whatever the width: a wrap would split them
        self.con.print(f"{label:>{LABEL_WIDTH}}: {value}", soft_wrap=pasteable)

    def lever(self, flag: str, effect: str) -> None:
        self.con.print(f"{'lever':>{LABEL_WIDTH}}: {flag}", soft_wrap=True)
        self.con.print(f"{'':>{LABEL_WIDTH}}  {effect}")

    def line(self, text: str, *, label: str | None = None, tone: Tone = Tone.PLAIN) -> None:
        self.con.print(text if label is None else f"{label}: {text}", style=TONE_STYLE[tone])

    def verdict(self, text: str, verdict: Verdict) -> None:
        self.con.print(text, style=VERDICT_STYLE[verdict])


class TableReporter(SectionReporter):
    """The terminal view (rich): tables, bars, right-aligned labels, colour where the terminal has it."""

    def __init__(self, width: int | None = None, color: bool | None = None):
        self.width, self.color = width, color

    def page(self, out: TextIO) -> Page:
        # markup and emoji off: report strings (failure messages, paths, warnings) print verbatim,
        # '[/models/x]' is no closing tag and ':memo:' no emoji.
        return _TablePage(_Console(file=out, width=self.width, no_color=self.color is False,
                                   force_terminal=self.color, highlight=False, soft_wrap=False, markup=False,
                                   emoji=False))
