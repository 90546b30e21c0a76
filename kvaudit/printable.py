"""Text from reports and logs, made safe for a terminal.

Report and log strings (failure messages, paths, model names, warnings, vLLM's own lines) are
data: an escape sequence among them must never reach the terminal raw, where it could recolour,
retitle or rewrite the screen. Control characters are shown as Python escapes (`\\x1b`), and so
are the bidirectional overrides that reorder what is shown ("Trojan source")."""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 controls but tab and newline, DEL, C1 controls, bidi marks, embeddings and isolates."""

_UNSAFE_ONE_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character but tab and newline escaped."""
    return _UNSAFE.sub(_escape, text)


def one_line(text: str) -> str:
    """`text` as a single safe line: newlines escaped too (error messages, progress lines)."""
    return _UNSAFE_ONE_LINE.sub(_escape, text)
