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


def clipped(text: str, most: int = 60) -> str:
    """`text` in at most `most` characters, its end an ellipsis where it was longer: user text in a message
    stays one short line whatever the file holds."""
    return text if len(text) <= most else text[:most - 1] + "…"


def one_line(text: str) -> str:
    """`text` as a single safe line: newlines escaped too (error messages, progress lines)."""
    return _UNSAFE_ONE_LINE.sub(_escape, text)


_COLOUR = re.compile(r"(?:\x1b|\^\[|\u241b|\\x1b|\\u001b|\\033)\[[0-9;?]{0,32}[A-Za-z]")
"""A terminal colour or cursor sequence (`ESC [ … m`) as vLLM's coloured logging writes it
(VLLM_LOGGING_COLOR), and as it arrives pasted: the escape byte itself, a terminal's caret form
`^[` (vllm#33155: `^[[0;36m(EngineCore_DP0 pid=70073)^[[0;0m INFO …`), the ␛ symbol, or the
escape written out by a JSON log driver or a `repr` (`\\x1b`, `\\u001b`, `\\033`)."""
_COLOUR_MARKS = ("\x1b", "^[", "\u241b", "\\x1b", "\\u001b", "\\033")


def strip_colours(text: str) -> str:
    """`text` without terminal colour sequences, in any of the forms _COLOUR names."""
    if not any(mark in text for mark in _COLOUR_MARKS):
        return text
    return _COLOUR.sub("", text)


_ENTITY = re.compile(r"&(?:#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6})|(quot|amp|lt|gt|apos));")
"""An HTML character reference, as a log copied from a rendered web page keeps it (`The model&#39;s
max seq len`): the numeric ones and the five of XML, no other name."""
_NAMED = {"quot": '"', "amp": "&", "lt": "<", "gt": ">", "apos": "'"}


def _character(m: re.Match[str]) -> str:
    """The character a reference names; NUL, a surrogate, a number past Unicode or a line break stays
    as written (none belongs inside one line of a log). html.unescape would drop control characters,
    and an escaped ESC must stay one for strip_colours to find its sequence."""
    if m.group(3):
        return _NAMED[m.group(3)]
    code = int(m.group(1)) if m.group(1) else int(m.group(2), 16)
    if code <= 0 or code >= 0x110000 or 0xD800 <= code <= 0xDFFF or chr(code) in _LINE_BREAKS:
        return m.group(0)
    return chr(code)


_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
"""What str.splitlines breaks a line at."""


_FIGURE = r"(-?[0-9][0-9,._]{0,40}(?: ?(?:GiB|MiB|GB|MB|tokens|seconds))?)"
_MARKED_FIGURE = re.compile(r"(\*\*|`)" + _FIGURE + r"\1")
"""A figure a person set in bold or as code in a Markdown post (vllm PR 2031: `# GPU blocks: **20865**`)."""
_TAGGED_FIGURE = re.compile(r"<(strong|b|code|em)>" + _FIGURE + r"<\\?/\1>")
"""The same in a web page's HTML, `/` escaped where the page came as JSON (a blog's `Model loading took
<strong>48.5 GiB<\\/strong>`)."""


def marked_figure(span: str) -> bool:
    """Whether `span` is a figure a person set in bold or as code, which plain_text reads as the figure."""
    return _MARKED_FIGURE.fullmatch(span) is not None


def plain_text(text: str) -> str:
    """A pasted line as vLLM wrote it: with the HTML character references of a copied web page read
    (`&#39;` is `'`), then without colour sequences (strip_colours: `&#27;[31m` is one too), and its
    figures without the Markdown or HTML a post may have set them in (`**20865**`, `<strong>48.5 GiB</strong>`)."""
    if "&" in text:
        text = _ENTITY.sub(_character, text)
    text = strip_colours(text)
    if "**" in text or "`" in text:
        text = _MARKED_FIGURE.sub(r"\2", text)
    if "<" in text:
        text = _TAGGED_FIGURE.sub(r"\2", text)
    return text

