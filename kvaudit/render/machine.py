"""Machine formats: JSON (the report and diff contracts, whole) and CSV (exact bytes, long form)."""

from __future__ import annotations

from typing import TextIO

from kvaudit.render import frames
from kvaudit.schema import DiffReport, Report, dumps


class JsonReporter:
    def report(self, report: Report, out: TextIO) -> None:
        out.write(dumps(report))

    def diff(self, diff: DiffReport, out: TextIO) -> None:
        out.write(dumps(diff))


class CsvReporter:
    def report(self, report: Report, out: TextIO) -> None:
        frames.owners_long(report).to_csv(out, index=False, lineterminator="\n")

    def diff(self, diff: DiffReport, out: TextIO) -> None:
        frames.diff_long(diff).to_csv(out, index=False, lineterminator="\n")
