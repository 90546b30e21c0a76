"""Reporters: one per output format, each writing to an injected stream.

stdout is data, stderr is chatter: a reporter writes only what its format promises, so
`kvaudit run -f json > a.json` is always valid JSON.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol, TextIO, assert_never

from kvaudit.schema import DiffReport, Report


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"
    MARKDOWN = "markdown"


class Reporter(Protocol):
    def report(self, report: Report, out: TextIO) -> None: ...

    def diff(self, diff: DiffReport, out: TextIO) -> None: ...


def reporter(fmt: Format, *, width: int | None = None, color: bool | None = None) -> Reporter:
    match fmt:
        case Format.TABLE:
            from kvaudit.render.table import TableReporter
            return TableReporter(width=width, color=color)
        case Format.JSON:
            from kvaudit.render.text import JsonReporter
            return JsonReporter()
        case Format.CSV:
            from kvaudit.render.text import CsvReporter
            return CsvReporter()
        case Format.MARKDOWN:
            from kvaudit.render.text import MarkdownReporter
            return MarkdownReporter()
        case _:
            assert_never(fmt)
