"""Machine formats: JSON (the contract), CSV (exact bytes, long form) and markdown (for PRs)."""

from __future__ import annotations

from typing import TextIO

import pandas as pd

from kvaudit.render import frames, summary
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


def markdown_table(frame: pd.DataFrame, index_name: str) -> str:
    """A GitHub table; cells are already text. Pipes in cells are escaped."""
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|")
    header = [index_name, *map(str, frame.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * len(frame.columns)) + "|"]
    for name, row in frame.iterrows():
        lines.append("| " + " | ".join([cell(name), *map(cell, row.tolist())]) + " |")
    return "\n".join(lines) + "\n"


class MarkdownReporter:
    def report(self, report: Report, out: TextIO) -> None:
        out.write(f"**{summary.headline(report)}**\n\n")
        out.write(markdown_table(frames.owners_wide(report), "owner (GiB)"))
        if (note := summary.binding_note(report)) is not None:
            out.write(f"\n\\{note}\n")  # a leading * would start a list
        out.write("\n")
        if report.accuracy:
            out.write(markdown_table(frames.accuracy_frame(report), summary.ACCURACY_LABEL))
            out.write("\n")
        for label, value in summary.capacity_lines(report):
            # what is meant for pasting goes in a code span, the prose stays prose
            out.write(f"- {label}: `{value}`\n" if label == summary.SAFE_FLAGS_LABEL else f"- {label}: {value}\n")
        for flag, rest in summary.lever_parts(report):
            out.write(f"- lever: `{flag}` {rest}\n")
        for line in summary.site_lines(report):
            out.write(f"- sites: {line}\n")
        notes, warnings = summary.notes_and_warnings(report)
        for line in notes:
            out.write(f"- note: {line}\n")
        for line in warnings:
            out.write(f"- warning: {line}\n")
        if (failure := summary.failure_line(report)) is not None:
            out.write(f"- failure: {failure}\n")
        out.write(f"\n**{summary.verdict_line(report)}**\n")

    def diff(self, diff: DiffReport, out: TextIO) -> None:
        out.write(f"**kvaudit diff {diff.a_name} → {diff.b_name}**\n\n")
        out.write(markdown_table(frames.diff_binding(diff), "owner, binding rank (GiB)"))
        out.write("\n")
        if len(frames.diff_ranks(diff).columns) > 0:
            out.write(markdown_table(frames.diff_ranks(diff), "Δ per rank (GiB)"))
            out.write("\n")
        for line in summary.diff_summary(diff):
            out.write(f"- {line}\n")
        for line in summary.diff_site_lines(diff):
            out.write(f"- sites: {line}\n")
