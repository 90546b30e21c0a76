"""Markdown's escaping, on its own: what the markdown reporter (render/markdown.py) and the plan's
how-each-figure-was-obtained lines (render/plan.py) both write. A leaf module, so neither has to
import the other's page."""

from __future__ import annotations

import re

_SYNTAX = re.compile(r"[\\`*\[\]<>|~&]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
"""What markdown reads as syntax in a line; `_` only at a word's edge (GFM ignores it inside one)."""


def text(value: object) -> str:
    """`value` as markdown text that renders as itself."""
    return _SYNTAX.sub(lambda m: "\\" + m.group(), str(value))


def code(value: str) -> str:
    """`value` as a code span (no escapes apply inside one), fenced by one more backtick than its
    longest run of them, and padded where it starts or ends with one (CommonMark's rule)."""
    fence = "`" * (max((len(run) for run in re.findall("`+", value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"
