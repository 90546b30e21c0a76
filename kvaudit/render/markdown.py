"""Markdown, for pull requests and issues: each section of kvaudit/render/sections.py drawn as
GitHub-flavoured markdown. Bars are left out: the owner table already holds their numbers, and a
picture of letters does not survive a proportional font."""

from __future__ import annotations

from typing import TextIO

import pandas as pd

from kvaudit.render.sections import Page, SectionReporter, Tone
from kvaudit.schema import Report, Verdict


def markdown_table(frame: pd.DataFrame, index_name: str) -> str:
    """A GitHub table; cells are already text. Pipes in cells are escaped."""
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|")
    header = [index_name, *map(str, frame.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * len(frame.columns)) + "|"]
    for name, row in frame.iterrows():
        lines.append("| " + " | ".join([cell(name), *map(cell, row.tolist())]) + " |")
    return "\n".join(lines) + "\n"


class _MarkdownPage(Page):
    def __init__(self, out: TextIO):
        self.out = out

    def title(self, text: str) -> None:
        self.out.write(f"**{text}**\n\n")

    def table(self, frame: pd.DataFrame, label: str) -> None:
        self.out.write(markdown_table(frame, label))

    def footnote(self, text: str) -> None:
        escape = "\\" if text.startswith("*") else ""  # a leading * would start a list
        self.out.write(f"\n{escape}{text}\n")

    def gap(self) -> None:
        self.out.write("\n")

    def bars(self, report: Report) -> None:
        """None in markdown (the module's docstring says why)."""

    def fact(self, label: str, value: str, *, pasteable: bool) -> None:
        # what is meant for pasting goes in a code span, the prose stays prose
        self.out.write(f"- {label}: `{value}`\n" if pasteable else f"- {label}: {value}\n")

    def lever(self, flag: str, effect: str) -> None:
        self.out.write(f"- lever: `{flag}` {effect}\n")

    def line(self, text: str, *, label: str | None = None, tone: Tone = Tone.PLAIN) -> None:
        self.out.write(f"- {text}\n" if label is None else f"- {label}: {text}\n")

    def verdict(self, text: str, verdict: Verdict) -> None:
        self.out.write(f"\n**{text}**\n")


class MarkdownReporter(SectionReporter):
    def page(self, out: TextIO) -> Page:
        return _MarkdownPage(out)
