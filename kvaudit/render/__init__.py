"""Reporters: one per output format, each writing to an injected stream. The human formats
(table, markdown, html) draw the one sequence of sections of kvaudit/render/sections.py; the
machine formats (json, csv) are kvaudit/render/machine.py; prom (Prometheus text) is
kvaudit/render/prom.py.

stdout is data, stderr is chatter: a reporter writes only what its format promises, so
`kvaudit run -f json > a.json` is always valid JSON.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TextIO, assert_never

from kvaudit.schema import DiffReport, Report

if TYPE_CHECKING:
    from kvaudit.plan_schema import Plan


class Format(StrEnum):
    """`--format`: what stdout carries."""

    TABLE = "table"
    JSON = "json"
    CSV = "csv"
    MARKDOWN = "markdown"
    HTML = "html"
    """One self-contained page (inline SVG and CSS, no script): kvaudit/render/html.py."""
    PROM = "prom"
    """Prometheus text exposition for node-exporter's textfile collector: kvaudit/render/prom.py."""


DOCUMENT_FORMATS = frozenset({Format.HTML, Format.PROM})
DOCUMENT_SUFFIXES = {Format.HTML: (".html", ".htm"), Format.PROM: (".prom",)}
"""The file suffixes that name a document format (an `-o` with one but another -f gets a note)."""
"""Formats that are files by nature (a page, a textfile-collector file): `-o FILE` writes the
document itself, atomically, and nothing goes to stdout. For the other formats `-o` keeps the
report JSON (the record) and the view goes to stdout."""


def check_format(fmt: Format) -> None:
    """UsageError (exit 2) when `fmt` cannot be drawn here (html without matplotlib): asked
    before a boot, so a long run does not end without its output."""
    if fmt is Format.HTML:
        from kvaudit.render.charts import check_matplotlib
        check_matplotlib()


class Reporter(Protocol):
    """Writes a report, a diff or a plan in one format: every output of kvaudit goes through one
    of these, made by `reporter` (the one dispatch, checked exhaustively)."""

    def report(self, report: Report, out: TextIO) -> None: ...

    def diff(self, diff: DiffReport, out: TextIO) -> None: ...

    def plan(self, plan: Plan, out: TextIO) -> None: ...


def reporter(fmt: Format, *, width: int | None = None, color: bool | None = None) -> Reporter:
    # the table reporter escapes report strings itself (its own colour codes must pass); JSON
    # escapes every control character by its nature; html escapes its own (and its markup must
    # pass); prom's label values are escaped by prometheus-client; CSV and markdown pass through
    # _Printable
    return _Encodable(_reporter(fmt, width=width, color=color), printable=fmt in (Format.CSV, Format.MARKDOWN))


class _EscapedSurrogates:
    """A text stream that writes lone surrogates as the JSON escapes they came from ('\\ud800'):
    the report loader accepts them, and no UTF-8 stream can encode them."""

    def __init__(self, out: TextIO):
        self._out = out

    def write(self, text: str) -> int:
        return self._out.write(text.encode("utf-8", "backslashreplace").decode("utf-8"))

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno…: the real stream's
        return getattr(self._out, name)


class _Printable(_EscapedSurrogates):
    """A text stream that escapes control characters (terminal escape sequences) but newlines
    and tabs: CSV and markdown carry report strings verbatim and are often read on a terminal."""

    def write(self, text: str) -> int:
        from kvaudit.printable import printable
        return super().write(printable(text))


def printable_stream(out: TextIO) -> TextIO:
    """`out`, escaping control characters but newlines and tabs: for text a command writes
    besides a reporter's (the plan's how-each-figure-was-obtained section)."""
    return _Printable(out)  # type: ignore[return-value]


def reporter_stream(out: TextIO) -> TextIO:
    """`out` as a reporter sees it: lone surrogates written as their escapes (for a renderer
    called without `reporter`, e.g. the plan's page)."""
    return _EscapedSurrogates(out)  # type: ignore[return-value]


class _Encodable:
    """Any reporter, writing through _EscapedSurrogates (or _Printable)."""

    def __init__(self, inner: Reporter, printable: bool = False):
        self._inner = inner
        self._wrap = _Printable if printable else _EscapedSurrogates

    def report(self, report: Report, out: TextIO) -> None:
        self._inner.report(report, self._wrap(out))

    def diff(self, diff: DiffReport, out: TextIO) -> None:
        self._inner.diff(diff, self._wrap(out))

    def plan(self, plan: Plan, out: TextIO) -> None:
        self._inner.plan(plan, self._wrap(out))


def _reporter(fmt: Format, *, width: int | None, color: bool | None) -> Reporter:
    match fmt:
        case Format.TABLE:
            from kvaudit.render.table import TableReporter
            return TableReporter(width=width, color=color)
        case Format.JSON:
            from kvaudit.render.machine import JsonReporter
            return JsonReporter()
        case Format.CSV:
            from kvaudit.render.machine import CsvReporter
            return CsvReporter()
        case Format.MARKDOWN:
            from kvaudit.render.markdown import MarkdownReporter
            return MarkdownReporter()
        case Format.HTML:
            from kvaudit.render.html import HtmlReporter
            return HtmlReporter()
        case Format.PROM:
            from kvaudit.render.prom import PromReporter
            return PromReporter()
        case _:
            assert_never(fmt)
