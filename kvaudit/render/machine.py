"""Machine formats: JSON (the report and diff contracts, whole) and CSV (exact bytes, long form)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from kvaudit.render import frames
from kvaudit.schema import DiffReport, Report, dumps

if TYPE_CHECKING:
    from kvaudit.plan_schema import Plan


class JsonReporter:
    def report(self, report: Report, out: TextIO) -> None:
        out.write(dumps(report))

    def diff(self, diff: DiffReport, out: TextIO) -> None:
        out.write(dumps(diff))

    def plan(self, plan: Plan, out: TextIO) -> None:
        from kvaudit.plan_schema import plan_dumps
        out.write(plan_dumps(plan))


class CsvReporter:
    def report(self, report: Report, out: TextIO) -> None:
        frames.owners_long(report).to_csv(out, index=False, lineterminator="\n")

    def diff(self, diff: DiffReport, out: TextIO) -> None:
        frames.diff_long(diff).to_csv(out, index=False, lineterminator="\n")

    def plan(self, plan: Plan, out: TextIO) -> None:
        from kvaudit.render.plan import write_plan_csv
        write_plan_csv(plan, out)
