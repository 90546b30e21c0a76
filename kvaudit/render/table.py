"""The terminal view: owner table per rank, bars, capacity, levers and the verdict (rich)."""

from __future__ import annotations

import errno
from typing import Any, TextIO

import pandas as pd
from rich.console import Console
from rich.table import Table

from kvaudit.render import bars, frames, summary
from kvaudit.render.printable import printable
from kvaudit.schema import DiffReport, Report, Verdict

VERDICT_STYLE = {Verdict.OK: "bold green", Verdict.FAIL: "bold red", Verdict.UNKNOWN: "bold yellow"}
MAX_RENDERED_CHARS = 2000
"""A string longer than this (a hostile report's message or path) is cut before rich lays it out:
rich's wrapping is slower than linear in the length of one string."""


def _cap(text: str) -> str:
    if len(text) <= MAX_RENDERED_CHARS:
        return text
    return f"{text[:MAX_RENDERED_CHARS]}… ({len(text) - MAX_RENDERED_CHARS:,} more characters)"


def _table(frame: pd.DataFrame, index_name: str, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, header_style="bold")
    table.add_column(_cap(index_name), no_wrap=True)
    for col in frame.columns:
        table.add_column(printable(_cap(str(col))), justify="right", no_wrap=True)
    for name, row in frame.iterrows():
        table.add_row(printable(_cap(str(name))), *(printable(_cap(str(v))) for v in row.tolist()))
    return table


class _Console(Console):
    def print(self, *objects: Any, **kwargs: Any) -> None:
        # report strings are data: their escape sequences are shown, never run (rich passes ESC),
        # and capped, so one huge string cannot stall the renderer
        super().print(*(printable(_cap(o)) if isinstance(o, str) else o for o in objects), **kwargs)

    def on_broken_pipe(self) -> None:
        # rich's default redirects sys.stdout and exits 1 (a finding); the stream was injected, so
        # its closing is the caller's to handle (the CLI exits 0 when a reader like `head` stops).
        raise BrokenPipeError(errno.EPIPE, "output closed")


class TableReporter:
    def __init__(self, width: int | None = None, color: bool | None = None):
        self.width, self.color = width, color

    def _console(self, out: TextIO) -> Console:
        # markup and emoji off: report strings (failure messages, paths, warnings) print verbatim,
        # '[/models/x]' is no closing tag and ':memo:' no emoji.
        return _Console(file=out, width=self.width, no_color=self.color is False, force_terminal=self.color,
                        highlight=False, soft_wrap=False, markup=False, emoji=False)

    def report(self, report: Report, out: TextIO) -> None:
        con = self._console(out)
        con.print(summary.headline(report), style="bold")
        con.print(_table(frames.owners_wide(report), "owner (GiB)"))
        if (note := summary.binding_note(report)) is not None:
            con.print(note)
        con.print()
        if report.accuracy:
            con.print(_table(frames.accuracy_frame(report), summary.ACCURACY_LABEL))
            con.print()
        for line in bars.report_bars(report, min(con.width, 100)):
            con.print(line)
        con.print()
        for label, value in summary.capacity_lines(report):
            # flags meant for pasting stay on one line whatever the width: a wrap would split them
            con.print(f"{label:>30}: {value}", soft_wrap=label == summary.SAFE_FLAGS_LABEL)
        for flag, rest in summary.lever_parts(report):
            con.print(f"{'lever':>30}: {flag}", soft_wrap=True)
            con.print(f"{'':>30}  {rest}")
        for line in summary.site_lines(report):
            con.print(f"sites: {line}")
        notes, warnings = summary.notes_and_warnings(report)
        for line in notes:
            con.print(f"note: {line}")
        for line in warnings:
            con.print(f"warning: {line}", style="yellow")
        if (failure := summary.failure_line(report)) is not None:
            con.print(f"failure: {failure}", style="red")
        con.print(summary.verdict_line(report), style=VERDICT_STYLE[report.verdict])

    def diff(self, diff: DiffReport, out: TextIO) -> None:
        con = self._console(out)
        con.print(f"kvaudit diff {diff.a_name} → {diff.b_name}", style="bold")
        con.print(_table(frames.diff_binding(diff), "owner, binding rank (GiB)"))
        con.print()
        if len(frames.diff_ranks(diff).columns) > 0:
            con.print(_table(frames.diff_ranks(diff), "Δ per rank (GiB)"))
            con.print()
        for line in summary.diff_summary(diff):
            con.print(line, style="yellow" if line.startswith("NOT comparable") else None)
        for line in summary.diff_site_lines(diff):
            con.print(f"sites: {line}")
