"""Markdown, for pull requests and issues: each section of kvaudit/render/sections.py drawn as
GitHub-flavoured markdown. Bars are left out: the owner table already holds their numbers, and a
picture of letters does not survive a proportional font.

Text is data here too: every line arrives as one line (sections._OneLine), and in it the
characters markdown would read as syntax are backslash-escaped (markdown_text.text): a table's `|` (a new cell),
`<` (an HTML tag: `<module>` vanished), `` ` ``, `*`, `_`, `[`, `]`, `~`, `&` and the backslash
itself; a value meant for pasting goes in a code span fenced longer than any run of backticks in
it (markdown_text.code)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from kvaudit.render.markdown_text import code, text
from kvaudit.render.sections import Page, SectionReporter, Tone
from kvaudit.schema import Report, Verdict

if TYPE_CHECKING:
    from kvaudit.render.frames import Frame


def markdown_table(frame: Frame, index_name: str) -> str:
    """A GitHub table; cells are already text, escaped here (a `|` would start a cell)."""
    header = [text(index_name), *map(text, frame.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * len(frame.columns)) + "|"]
    for name, row in frame.iterrows():
        lines.append("| " + " | ".join([text(name), *map(text, row.tolist())]) + " |")
    return "\n".join(lines) + "\n"


class _MarkdownPage(Page):
    def __init__(self, out: TextIO):
        self.out = out

    def title(self, line: str) -> None:
        self.out.write(f"**{text(line)}**\n\n")

    def table(self, frame: Frame, label: str) -> None:
        self.out.write(markdown_table(frame, label))

    def footnote(self, line: str) -> None:
        self.out.write(f"\n{text(line)}\n")  # a leading * is escaped: it would start a list

    def gap(self) -> None:
        self.out.write("\n")

    def bars(self, report: Report) -> None:
        """None in markdown (the module's docstring says why)."""

    def fact(self, label: str, value: str, *, pasteable: bool) -> None:
        # what is meant for pasting goes in a code span, the prose stays prose
        self.out.write(f"- {text(label)}: {code(value) if pasteable else text(value)}\n")

    def lever(self, flag: str, effect: str) -> None:
        self.out.write(f"- lever: {code(flag)} {text(effect)}\n")

    def line(self, line: str, *, label: str | None = None, tone: Tone = Tone.PLAIN) -> None:
        self.out.write(f"- {text(line)}\n" if label is None else f"- {text(label)}: {text(line)}\n")

    def verdict(self, line: str, verdict: Verdict) -> None:
        self.out.write(f"\n**{text(line)}**\n")


class MarkdownReporter(SectionReporter):
    plan_markdown = True

    def page(self, out: TextIO) -> Page:
        return _MarkdownPage(out)
