"""Physical lines → records: a message wrapped onto several lines is read whole.

Logs are shared as excerpts pasted into issues, e-mails and chats, and on the way a long message
is wrapped: by the terminal it was copied from (at a fixed width, often in the middle of a word),
by an e-mail client or a markdown renderer (at a space, the rest indented or not). A record is a
head line and the continuation lines that follow it. A line is a head when it begins like a log
record: a process tag `(Worker_TP0 pid=1)` or vLLM's level-time-file prefix near its start, a
level, a timestamp, a `[file.py:N]` tag, an exception name (`ValueError:`), `Traceback`, a shell's
job notice (`run.sh: line 3: 1234 Killed …`), a pasted `vllm serve` command, NCCL's debug record
(`02fdc141b80d:213:213 [1] NCCL INFO …`: its host name's lower-case letter or digit would continue the
record above it, the failure's message in real pastes round twenty-five, vllm#21661). Any other line
continues the record above it when it is indented deeper than the head, begins as the rest of a
sentence (a lower-case letter, a digit, punctuation), follows a line that breaks off mid-sentence
(after `,`, `(` or a word such as `the` or `than`), or follows a line cut at the excerpt's fixed
wrap width.

Around the lines: `> ` quote markers, the bars chat and editor tools draw (`▎`, `│`, `┃`), the
frame of a terminal pane (`│ … │`) or of a CI log viewer (`  | `), list bullets (`- `, `* `, `• `)
before a record and markdown code fences (indented too) are dropped, CRLF is one line end and a
lone `\\r` another, tabs and non-breaking spaces are spaces. Only the lines the scanner picked are
assembled, each within a bounded window, so a whole log costs what it cost before.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kvaudit.engines.failures import EXCEPTION_NAME, SHELL_JOB_NOTICE
from kvaudit.engines.logs.lines import LEVELS, NCCL_RECORD, has_prefix
from kvaudit.printable import marked_figure

MAX_RECORD_LINES = 16
"""Physical lines one record may span (vLLM 0.33's KV ValueError is 8 lines at 80 columns, 12 at 60)."""
MAX_JOIN_LINE = 4096
"""A line longer than this never joins another: wrapped lines are short by nature."""
WIDTH_WINDOW = 48
"""Lines each side of a record looked at to find the excerpt's wrap width."""
MIN_WRAP_WIDTH = 60
"""Narrower "wrap widths" are coincidences of short lines, not a terminal's column count."""
MAX_RECORD_CHARS = 1 << 16
"""What the catalogue's patterns may look at in one record: its first and last half of this. A
real record is a few KiB at most (the engine config line); a longer one is garbage, or a memory
message glued behind a progress bar or another long line, hence the tail too."""

_QUOTE_CHARS = ">│┃║|▎▍▌▏"
_QUOTE = re.compile(rf"[ \t]{{0,8}}(?:[{_QUOTE_CHARS}][ \t]?){{1,8}}")
"""`> ` quote markers, the bars of chat and editor tools (`▎ `), and the frame a terminal pane or CI
log viewer draws (`│ `, `  | `)."""
CARET_CR = "^M"
"""A CRLF line's CR as a terminal or `cat -v` shows it, at the line's end: the line break's, as a real `\\r` is
(real pastes round twenty-four, vllm-ascend DP notes: `… error code is 7^M` was the failure's message). Colour
sequences in caret form (`^[[0;36m`) are printable.strip_colours'."""
_BULLET = re.compile(r"[ \t]{0,8}([-*•])[ \t]+")
_FRAME_END = re.compile(r"[ \t]{1,400}[│┃║][ \t]{0,8}$")
_FENCE = ("```", "~~~")
QUOTE_OPENER = re.compile(r"[ \t]*(?:[-*•>]|\d{1,3}[.)])?[ \t]*\Z")
"""What may come before an inline code span that quotes a log's record on its line: nothing, or a list's
bullet (`` - `Starting vLLM API server on http://0.0.0.0:8010`: 服务已成功启动 ``, real pastes round
eighteen), as scan's serving markers and without_quotations read it."""
FRAME = '", line '
"""What follows the path a traceback frame quotes (`File "/…/vllm/v1/engine/core.py", line 1482, in …`)."""
_SPACES = (("\t", " "), ("\u00a0", " "), ("\u202f", " "), ("\u2007", " "), ("\u2009", " "), ("\u200b", ""),
           ("\ufeff", ""))
_LEVELS = r"(?:" + LEVELS + r")\b"
_HEAD_MARK = re.compile(
    _LEVELS
    + r"|\d{4}-\d\d-\d\d[T ]\d\d:|\d\d-\d\d \d\d:\d\d"          # an ISO or vLLM timestamp
    + r"|\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\s"                       # a clock time (a retyped or dmesg line)
    + r"|\[[^\]\s]{1,200}\.py:\d{1,7}\]"                      # [file.py:N]
    + r"|\[rank\d{1,6}\]:"                                    # torch.distributed's prefix
    + r"|" + EXCEPTION_NAME + r"(?::|$)"
    + r"|" + SHELL_JOB_NOTICE                                    # a shell's job notice: `run.sh: line 3: 1234 Killed …`
    + r"|vllm serve |python3? -m vllm\."                        # a pasted command (`I ran:` then `vllm serve M …`)
    + r"|" + NCCL_RECORD                                         # NCCL's debug record (`host:213:213 [1] NCCL INFO …`)
    + r"|Traceback \(most recent|File \"|During handling of|The above exception")
_ELISION = re.compile(r"[ \t]*(?:\.{3,}|…+|\[(?:\.{3}|…)\]|\((?:\.{3}|…)\)|<(?:snip|\.{3}|…)>)[ \t]*")
"""A line that is only the paste's mark of lines left out (`...`, `…`, `[...]`, `<snip>`): it ends
the record above it, whose message is not the mark (vllm-ascend paste, round twelve:
`EngineCore failed to start. ...`)."""
_GREP_LINE = re.compile(r"[ \t]{0,4}(\d{1,9})[:-](?=\S)")
"""`grep -n`'s line number before each line it prints (`-` on a context line): two lines whose
numbers are not consecutive were not next to each other in the file (real pastes round fifteen:
`9:Feb 26 … ValueError: …`, then `67:Feb 26 … systemd[1669]: … Main process exited`)."""
_PROGRESS = re.compile(r"[ \t]{0,8}(?:[^|\n]{0,60}\|){0,2}[ \t]{0,4}\d{1,9}/\d{1,9} \[\d{1,4}:\d\d(?::\d\d)?<")
"""A tqdm bar's redraw as a line of its own (`  | 26/35 [00:20<00:06,  1.34it/s]Capturing CUDA graph
shapes: …`, where a terminal's carriage returns became line breaks; a frame's ` | ` cleaned off or
not): it continues no record
(real pastes round thirteen, a 0.7.2 log: it was glued to `RuntimeError: Engine process failed to
start. …`)."""
_CONNECTORS = frozenset(
    "a an the of for to is are was were be than with by in on at as from which that and or but if when "
    "memory least".split())
_MID_SENTENCE_END = ",(:=-+/"
_LATER_SENTENCES = ("Based on the available memory", "Try increasing", "Try lowering", "See https://docs.vllm.ai",
                    "Decrease GPU memory", "Decrease --kv-cache-memory", "Increase GPU memory", "To resolve",
                    "This happens when", "To fix this", "Reduce CPU memory", "Replace gpu_memory_utilization",
                    "Current kv cache memory", "Actual usage", "Desired GPU memory utilization", "If OOM'ed",
                    "Only use kv_cache_memory_bytes", "This does not respect", "The current --gpu-memory-utilization")
_MESSAGES = (
    # (how a multi-sentence memory message of vLLM starts, how its last sentence ends)
    ("To serve at least one request", ("for more details.", "when initializing the engine.")),
    ("No available memory for the cache blocks", ("for more details.", "when initializing the engine.")),
    ("on startup is less than desired", ("used by other processes.",)),
    ("Actual usage", ("Current kv cache memory in use is",)),
    ("Memory profiling takes", ("weights memory:",)),
    ("CUDA graph memory profiling is enabled", ("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",)),
    ("as specified by kv_cache_memory_bytes", ("update it correspondingly.",)),
    ("Failed to load model - not enough GPU memory", ("(original error:",)),
    ("on kv cache allocation is less than", ("other processes.",)),
)
"""Messages whose record stays open until its last sentence: a line that is no record of its own
continues such a record whatever it starts with ("… (24.0\nGiB KV cache is needed, …")."""
"""Sentences vLLM's memory messages go on with (kv_cache_planning.py, gpu_worker.py, utils.py): a
line that starts with one continues the record above it even after a full stop, as when a paste
breaks "… (3.18 GiB).\nBased on the available memory, the estimated maximum model length is …"."""


@dataclass(frozen=True)
class Record:
    start: int
    """Offset of the head line: the record's position."""
    spans: tuple[tuple[int, int], ...]
    """(start, end) of each physical line, head first."""
    cut: tuple[bool, ...] = ()
    """Per continuation: the line before it was cut at the wrap width (join with nothing between)."""


def line_start(text: str, i: int, limit: int | None = None) -> int | None:
    """Start of the physical line holding offset i (after the nearest `\\n` or `\\r`); None when
    it is more than `limit` characters back. The search widens step by step, so it costs the
    distance to the line start and never a search back to the start of the file."""
    width = 256
    while True:
        lo = max(i - width, 0)
        if limit is not None:
            lo = max(lo, i - limit - 1)
        cut = max(text.rfind("\n", lo, i), text.rfind("\r", lo, i))
        if cut >= 0:
            return cut + 1
        if lo == 0:
            return 0
        if limit is not None and lo <= i - limit - 1:
            return None
        width *= 4


def line_end(text: str, i: int, limit: int | None = None) -> int | None:
    """End of the physical line holding offset i (the next `\\n` or `\\r`, or the end of the
    text); None when it is more than `limit` characters on."""
    width = 256
    n = len(text)
    while True:
        hi = min(i + width, n)
        if limit is not None:
            hi = min(hi, i + limit + 1)
        ends = [j for j in (text.find("\n", i, hi), text.find("\r", i, hi)) if j >= 0]
        if ends:
            return min(ends)
        if hi == n:
            return n
        if limit is not None and hi >= i + limit + 1:
            return None
        width *= 4


def bounds(text: str, i: int) -> tuple[int, int]:
    """The physical line around offset i."""
    return line_start(text, i), line_end(text, i)  # type: ignore[return-value]


def next_span(text: str, end: int, limit: int | None = MAX_JOIN_LINE) -> tuple[int, int] | None:
    """The physical line after the one that ends at `end`; None at the text's end or where it is
    longer than `limit` (None: however long)."""
    if end >= len(text):
        return None
    start = end + 2 if text.startswith("\r\n", end) else end + 1
    if start > len(text):
        return None
    stop = line_end(text, start, limit)
    return None if stop is None else (start, stop)


def prev_span(text: str, start: int) -> tuple[int, int] | None:
    """The physical line before the one starting at `start` (None at the text's start, or past
    MAX_JOIN_LINE characters)."""
    if start == 0:
        return None
    stop = start - 2 if start >= 2 and text.startswith("\r\n", start - 2) else start - 1
    begin = line_start(text, stop, MAX_JOIN_LINE)
    return None if begin is None else (begin, stop)


def clean(line: str) -> str:
    """A physical line without quote markers, tabs or special spaces, or a CRLF's CR shown in caret form."""
    if line.endswith(CARET_CR):
        line = line[:-len(CARET_CR)]
    for char, space in _SPACES:
        if char in line:  # str.replace per character found: translate() is a dict look-up per character
            line = line.replace(char, space)
    head = line[:20]
    if any(c in head for c in _QUOTE_CHARS) and (m := _QUOTE.match(line)):
        line = line[m.end():]
        tail = line[-420:]
        if tail[-1:] in ("│", "┃", "║") and (m := _FRAME_END.search(tail)):
            line = line[:len(line) - len(tail) + m.start()]
    if line[:12].lstrip()[:1] in ("-", "*", "•") and (m := _BULLET.match(line)):
        rest = line[m.end():]
        if m.group(1) == "•" or is_head(rest):
            line = rest
    return line


def without_quotations(text: str) -> str:
    """The text with what each quotation inside a person's sentence holds blanked out (spaces; line
    breaks, offsets and line lengths stay): vLLM's wordings a person mentions are no line of a log
    (the README's "a boot that died is never `ok` (`EngineCore failed to start`, …)", a design note's
    'it raises "No available memory for the cache blocks…". It works only…'). A quotation is an inline
    code span, which may go on past a line break within its block (the lines between blank lines, fences
    and records with vLLM's prefix: one stray backtick cannot run on through a log), or a pair of double
    quotes on one line after a word (_IN_A_SENTENCE). What stays is a quoted record (_quotes_a_record), a code span that
    holds only a figure (`**20865**`, printable.marked_figure), a traceback frame's path (`File "…",
    line 12, in load_model`) and the marks themselves. One pass over the lines; each block's marks are
    paired in one pass from its end (_pairs)."""
    if "`" not in text and '"' not in text:
        return text
    blanks: list[tuple[int, int]] = []
    block: list[_Mark] = []
    start, n, opens = 0, len(text), True
    while start <= n:
        stop = text.find("\n", start)
        end = n if stop < 0 else stop
        line = text[start:end]
        blank = _blank(clean(line))  # a fence too, in a `> ` quote as well
        if blank or has_prefix(line):
            blanks += _blanked(text, block)
            block, opens = [], True
        if not blank and ("`" in line or '"' in line):
            block += [_Mark(start + m.start(), start + m.end(), start, end, k == 0, opens)
                      for k, m in enumerate(_MARKS.finditer(line))]
        opens = blank
        start = end + 1
    blanks += _blanked(text, block)
    if not blanks:
        return text
    out, done = [], 0
    for a, b in sorted(blanks):
        out += [text[done:a], _NOT_A_BREAK.sub(" ", text[a:b])]
        done = b
    return "".join(out) + text[done:]


_MARKS = re.compile('`+|"')
_NOT_A_BREAK = re.compile(r"[^\r\n]")
_AFTER_RECORD = re.compile(r"[ \t.,:;!?…)\]]*\r?\Z")
"""What may follow a record quoted at its line's end: punctuation."""
_LABEL_END = re.compile(r":[ \t]{0,8}\Z")
_SPACES_LOOKED_AT = 64
_IN_A_SENTENCE = re.compile(rf"(?:[\w)\].!?]|(?<!\"):)[ \t]{{1,{_SPACES_LOOKED_AT - 2}}}\Z")
"""What comes before a pair of double quotes that quotes inside a sentence: a word, or a sentence's punctuation,
and a space (`it raises "No available memory…"`, `the log says: "…"`). Data's strings are not quotations: a JSON
value after its key's `":` (Docker's json-file log, `{"log": "INFO … Available KV cache memory: …"}`, real pastes
round twenty), an item after `[`, `{`, `(`, `,` or `=` (a dict's repr, a call in a traceback's source line)."""


class _Mark(NamedTuple):
    start: int
    end: int
    line_start: int
    line_end: int
    first: bool
    """The first mark on its line."""
    opens_block: bool
    """Its line is the first of its block."""


def _pairs(marks: list[_Mark]) -> list[tuple[_Mark, _Mark]]:
    """(opening, closing) marks: a mark closes at the next mark of its length (CommonMark's code spans:
    a run of backticks closes at the next run as long; one that none closes is a plain character)."""
    closer: list[int | None] = [None] * len(marks)
    later: dict[int, int] = {}
    for k in range(len(marks) - 1, -1, -1):
        size = marks[k].end - marks[k].start
        closer[k] = later.get(size)
        later[size] = k
    pairs, k = [], 0
    while k < len(marks):
        j = closer[k]
        if j is None:
            k += 1
            continue
        pairs.append((marks[k], marks[j]))
        k = j + 1
    return pairs


def _blanked(text: str, marks: list[_Mark]) -> list[tuple[int, int]]:
    """What the quotations of one block hold, where it is left out: its code spans, then its pairs of double
    quotes outside them that follow a word (_IN_A_SENTENCE) and are no traceback frame's path (FRAME)."""
    ticks = _pairs([m for m in marks if text[m.start] == "`"])
    spans = iter(ticks)
    span = next(spans, None)
    quotes = []
    for m in marks:  # the double quotes outside every code span (both lists in text order)
        while span is not None and span[1].end <= m.start:
            span = next(spans, None)
        if text[m.start] == '"' and (span is None or m.start < span[0].start):
            quotes.append(m)
    said = [(o, c) for o, c in _by_line(quotes) if not text.startswith(FRAME, c.start)
            and _IN_A_SENTENCE.search(text, max(o.line_start, o.start - _SPACES_LOOKED_AT), o.start)]
    out = []
    for opening, closing in ticks + said:
        figure = text[opening.start] == "`" and marked_figure(text[opening.start:closing.end])
        if not figure and not _quotes_a_record(text, opening, closing):
            out.append((opening.end, closing.start))
    return out


def _by_line(quotes: list[_Mark]) -> list[tuple[_Mark, _Mark]]:
    """Double quotes paired one after another on each line (an odd one out at a line's end pairs with none)."""
    pairs, k = [], 0
    while k + 1 < len(quotes):
        if quotes[k + 1].line_start == quotes[k].line_start:
            pairs.append((quotes[k], quotes[k + 1]))
            k += 2
        else:
            k += 1
    return pairs


def _quotes_a_record(text: str, opening: _Mark, closing: _Mark) -> bool:
    """Whether a quotation holds a record quoted whole, closed on its line and either the last thing on it, the
    first quotation on it or after a label's colon (`LOG: `Memory profiling results: …``, `- vLLM 0.2.5 and
    `main`: `# GPU blocks: 112, # CPU blocks: 1310``, `I get `torch.OutOfMemoryError: …``, real pastes round
    twenty-two), or the first thing on it (QUOTE_OPENER) where the line opens its block or a list's item
    (`` - `Starting vLLM API server on http://0.0.0.0:8010`: 服务已成功启动 ``, round eighteen). A quotation with
    a sentence's words after it, that goes on past its line or ends a list of them, is a mention (`a boot that
    died is never `ok` (`EngineCore failed to start`, a cut traceback, …)`, `Failures: `A`, `B`, `C``)."""
    if closing.line_start != opening.line_start:
        return False
    if _AFTER_RECORD.match(text, closing.end, closing.line_end) is not None and (
            opening.first or _LABEL_END.search(text, max(opening.line_start, opening.start - 10), opening.start)):
        return True
    if not opening.first:
        return False
    before = text[opening.line_start:opening.start]
    if (m := _QUOTE.match(before)) is not None:
        before = before[m.end():]
    return QUOTE_OPENER.match(before) is not None and (opening.opens_block or bool(before.strip()))


_FENCE_LINE = re.compile(r"^[ \t]{0,8}(?:```|~~~)", re.M)


def fenced_block_starts(text: str) -> list[int]:
    """Where each fenced block of a Markdown text (```` ``` ```` or `~~~` lines, opening and closing in turn)
    opens, in order; bisect a position into it (odd count: inside the block) to tell which block holds it."""
    return [m.start() for m in _FENCE_LINE.finditer(text)]


def _blank(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith(_FENCE)


def is_head(line: str) -> bool:
    """Whether a cleaned line begins like a log record of its own."""
    stripped = line.lstrip()
    return bool(_HEAD_MARK.match(stripped)) or has_prefix(line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _breaks_off(prev: str) -> bool:
    """The previous line stops mid-sentence."""
    tail = prev.rstrip()
    if not tail:
        return False
    if tail[-1] in _MID_SENTENCE_END:
        return True
    word = tail.rsplit(" ", 1)[-1].lower()
    return word in _CONNECTORS


_OTHER_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
"""Kana, CJK ideographs, Hangul: a line in them is a person's words, never the rest of vLLM's English
message (real pastes round nineteen: a Korean write-up's paragraphs read into an unfinished `No
available memory for the cache blocks.`, a 581-character failure message)."""


_HEADING = re.compile(r"[ \t]{0,3}#{1,6}[ \t]")
"""A Markdown heading's line, an issue's title pasted above its log (real pastes round thirty, vllm-ascend#3308: the
corpus's header line ending `· C++` read as breaking off mid-sentence, and the title that quotes the boot's error
joined to it, its failure read as the boot's). Markdown allows three blanks before it."""


_FIGURES_CLOSED = re.compile(r"\d ?GiB\)\.\s*$")
"""A memory message's sentence that closes on its figures: `… (0.95, 90.22 GiB).`, `… memory (15.57 GiB).`"""


def _open_message(parts: list[str]) -> bool:
    """The record so far holds the start of one of _MESSAGES and not yet its end."""
    text = " ".join(p.strip() for p in parts)
    return any(start in text and not any(e in text[text.find(start):] for e in ends) for start, ends in _MESSAGES)


def _continues(head: str, prev: str, line: str, width: Callable[[], int],
               still_open: Callable[[], bool] = lambda: False) -> bool:
    """Whether `line` continues the record headed by `head` whose last line is `prev`. `width`
    gives the excerpt's wrap width and `still_open` whether the record holds an unfinished
    message of vLLM's (each asked only when nothing else decides)."""
    if _blank(line) or is_head(line):
        return False
    if _PROGRESS.match(line):  # a progress bar's redraw, not the record's words
        return False
    if (number := _GREP_LINE.match(line)) and (before := _GREP_LINE.match(prev)) \
            and int(number.group(1)) != int(before.group(1)) + 1:
        return False
    if _ELISION.fullmatch(line):  # unless a fixed-column cut fell right before a message's own `...`
        return len(prev) >= MIN_WRAP_WIDTH and len(prev) == width()
    if _HEADING.match(line):
        # a Markdown heading is a person's words, whatever the line above ends with or however it is indented; a
        # terminal's cut at a fixed column still joins (V0's own `# GPU blocks: 0, # CPU blocks: …` after a full line)
        return len(prev) >= MIN_WRAP_WIDTH and len(prev) == width()
    if _indent(line) > _indent(head):
        return True
    first = line.lstrip()[:1]
    if first.islower() or first.isdigit() or first in ",.;:)]}%'\"-`":
        return True
    if line.lstrip().startswith(_LATER_SENTENCES):
        return True
    if _breaks_off(prev):
        return True
    size = len(prev)
    if size >= MIN_WRAP_WIDTH and size == width():
        return True
    # an open message's sentence that closed on its figures (`… (0.95, 90.22 GiB).`) goes on only with vLLM's own
    # next sentence (_LATER_SENTENCES, above) or a line a wrap would start (lowercase, a digit: above): another
    # is the writer's (real pastes round thirty-one: a trimmed startup error read on into 900 characters of prose)
    return still_open() and not _OTHER_SCRIPT.search(line) and _FIGURES_CLOSED.search(prev) is None


def _width(text: str, first: tuple[int, int], last: tuple[int, int]) -> int:
    """The excerpt's wrap width: the longest line near the record, when two or more lines have
    exactly that length (a terminal or `fold` cuts every long line at the same column; `fold`
    keeps a space it cut after, so lengths are counted with trailing spaces); else 0."""
    lengths = []
    span: tuple[int, int] | None = first
    for _ in range(WIDTH_WINDOW):
        if span is None:
            break
        lengths.append(len(clean(text[span[0]:span[1]])))
        span = prev_span(text, span[0])
    span = next_span(text, last[1])
    for _ in range(WIDTH_WINDOW):
        if span is None:
            break
        lengths.append(len(clean(text[span[0]:span[1]])))
        span = next_span(text, span[1])
    widest = max(lengths, default=0)
    return widest if lengths.count(widest) >= 2 else 0


def record_at(text: str, start: int, end: int, width_hint: int | None = None) -> Record:
    """The record the physical line (start, end) belongs to. `width_hint`: the paste's cut column
    when the caller knows it (fixed_column_cuts), instead of measuring the lines around the record."""
    alone = Record(start, ((start, end),))
    if end - start > MAX_JOIN_LINE:
        return alone
    line = clean(text[start:end])
    # Back to the earliest line that could head this record.
    first, current = (start, end), line
    for _ in range(MAX_RECORD_LINES):
        if _blank(current) or is_head(current):
            break
        prev = prev_span(text, first[0])
        if prev is None:
            break
        prev_line = clean(text[prev[0]:prev[1]])
        if _blank(prev_line):
            break
        first, current = prev, prev_line
    if first == (start, end) and _next_line_is_head_or_blank(text, end):
        return alone  # the usual case in a whole log: one line, one record
    known: list[int] = []

    def width() -> int:
        if not known:
            known.append(width_hint if width_hint is not None else _width(text, first, (start, end)))
        return known[0]

    # Forward from there, cutting records, until the one that holds the line; then to its end.
    spans, cut = [first], []
    head = prev_line = current
    parts = [current]
    while True:
        nxt_span = next_span(text, spans[-1][1])
        if nxt_span is None:
            break
        nxt = clean(text[nxt_span[0]:nxt_span[1]])
        opens = lambda parts=parts: _open_message(parts)  # noqa: E731 - called now, inside _continues
        if len(spans) < MAX_RECORD_LINES and _continues(head, prev_line, nxt, width, opens):
            spans.append(nxt_span)
            size = len(prev_line)
            cut.append(_indent(nxt) == 0 and size >= MIN_WRAP_WIDTH and size == width())
            prev_line = nxt
            parts.append(nxt)
        elif spans[-1][1] >= end:
            break
        else:
            spans, cut, head, prev_line, parts = [nxt_span], [], nxt, nxt, [nxt]
    if spans[0][0] <= start <= spans[-1][0]:
        if any(cut) and _wrapped_at_spaces(text, spans, width()):
            cut = [False] * len(cut)
        return Record(spans[0][0], tuple(spans), tuple(cut))
    return alone


def _wrapped_at_spaces(text: str, spans: list[tuple[int, int]], width: int) -> bool:
    """A record whose lines (but its last) are mostly shorter than the width was wrapped at spaces,
    and the lines that happen to be as long as the widest were too: a terminal or `fold` cuts every
    line at the column (a line one shorter lost the space it was cut after). Where most are cut at
    the column, a shorter one is a break of the paste's own (dennislee22/vLLM-benchmarking: an engine
    config line broken after its model, then nine lines cut at 147 columns, one inside `488,4|80`)."""
    short = sum(len(clean(text[s:e])) < width - 1 for s, e in spans[:-1])
    return 2 * short >= len(spans) - 1


def _next_line_is_head_or_blank(text: str, end: int) -> bool:
    nxt = next_span(text, end)
    if nxt is None:
        return True
    line = clean(text[nxt[0]:nxt[1]])
    return _blank(line) or is_head(line)


def joined(text: str, record: Record) -> tuple[str, ...]:
    """The record as one line, in the ways its line breaks can be read: first a continuation joins
    with a space, or with nothing where the line before it was cut at the wrap width; then, when
    some continuation is not indented, with nothing at each of those (a single cut line shows no
    wrap width); then with a space everywhere (a text wrapped at spaces can have several lines of
    its widest length, which look cut). Distinct readings only; the caller keeps the one that
    states the most."""
    parts = [clean(_bounded(text, s, e)) for s, e in record.spans]
    if len(parts) == 1:
        return (parts[0],)
    readings = (_join(parts, record.cut), _join(parts, tuple(_indent(p) == 0 for p in parts[1:])),
                _join(parts, (False,) * (len(parts) - 1)))
    return tuple(dict.fromkeys(readings))


def _join(parts: list[str], cuts: tuple[bool, ...]) -> str:
    """Lines joined with nothing where `cuts` says the line before was cut (its trailing space, if
    any, kept: `fold` cuts after a space as readily as inside a word), else with one space."""
    out = [parts[0]]
    for part, cut in zip(parts[1:], cuts):
        if cut:
            out.append(part)
        else:
            out[-1] = out[-1].rstrip()
            out.append(" " + part.lstrip())
    return _squeeze("".join(out).rstrip())


def _bounded(text: str, start: int, end: int) -> str:
    half = MAX_RECORD_CHARS // 2
    if end - start <= MAX_RECORD_CHARS:
        return text[start:end]
    return text[start:start + half] + " … " + text[end - half:end]


def _squeeze(line: str) -> str:
    return re.sub(r" {2,}", " ", line)


# --------------------------------------------------------------------------------------------
# A paste cut at a fixed column (`fold -w 60`, a terminal's width)

CUT_CHECK_CHARS = 4 << 20
"""Texts up to this size are checked for a fixed cut column (a paste; a whole log is not cut)."""
MIN_CUT_WIDTH = 40
"""Narrower "columns" are coincidences of short lines."""


@dataclass(frozen=True)
class Cuts:
    width: int | None
    runs: tuple[tuple[int, int], ...] = ()
    """(offset of the run's first line, offset of the end of its last line) for each run of lines
    cut at the column: each but the last goes on in the next."""
    cut_lines: tuple[int, ...] = ()
    """1-based numbers of the lines that were cut (go on in the next)."""


_WHOLE_BAR = re.compile(r"\d{1,3}%\|[^|]{0,400}\| {0,8}\d{1,9}/\d{1,9} \[[^\]]{0,200}\][ \t]*\Z")
"""A whole tqdm bar, up to its closing `]`: tqdm pads every bar to the terminal's width, so bars alone make lines of
one length that go on in the next (the next bar, the program's next print), and set no column a paste was cut at
(real pastes round twenty-six, vllm#16258: three 115-column `Processed prompts: 100%|████| 10/10 [00:31<00:00, …]`
bars of a benchmark's output made a false `fold -w 115` warning, the last bar joined to the next line). A whole bar is
no cut line, whatever column other lines set, and no line goes on in one: tqdm's redraw starts with `\r`, a line
break in a paste, so the line before it ended there (FlashInfer's autotuner: two WARNING records of 211 columns printed
after a bar, each followed by the next bar). A bar a fold cut ends inside it, not at `]`, and is a cut line; a line a
fold cut right before a bar's percentage is one this misses (its words are the bar's label: no figure)."""


def _whole_bar(line: str) -> bool:
    return "%|" in line and _WHOLE_BAR.search(line) is not None


def _same_bullet(line: str, following: str) -> bool:
    """A list's next item, which a fold does not make: both lines open with the same indent and bullet (two
    152-column `  - tag … digest …` items of a report, real pastes round twenty)."""
    a, b = _BULLET.match(line), _BULLET.match(following)
    return a is not None and b is not None and a.group(0).rstrip() == b.group(0).rstrip()


def fixed_column_cuts(text: str) -> Cuts:
    """Where a paste was cut at one fixed column. The scan looks for whole words (`KV cache size`),
    so a line cut inside one would be lost without a word said: the caller reads each run as a
    record (record_at joins it, and `joined` tries the join without a space). The column is the
    length most lines that go on in a next line share: at least two of them, lines longer than it
    no more than a quarter as many (a `fold` leaves none; a header or a prose line may be longer),
    and a run of lines that go on one into the next counts where its lines are that long (a
    terminal that drops the space it cut after leaves one shorter): all of the run's, or two or more
    in a row of a run with other lengths, which was wrapped at spaces (a mail client, a renderer)
    and makes a line as long as the column now and then. Lengths are measured without quote markers and frames (a
    pane's frame pads every line to one width)."""
    if len(text) > CUT_CHECK_CHARS or len(text) < 2 * MIN_CUT_WIDTH:
        return Cuts(None)
    raw = text.split("\n")
    lines = [clean(line.removesuffix("\r")) for line in raw]
    goes_on = [i for i in range(len(lines) - 1)
               if len(lines[i]) >= MIN_CUT_WIDTH and not _blank(lines[i + 1]) and not is_head(lines[i + 1])
               and not _same_bullet(lines[i], lines[i + 1])
               and not _whole_bar(lines[i]) and not _whole_bar(lines[i + 1])]
    if len(goes_on) < 2:
        return Cuts(None)
    counts: dict[int, int] = {}
    for i in goes_on:
        counts[len(lines[i])] = counts.get(len(lines[i]), 0) + 1
    width, count = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    if count < 2 or sum(1 for line in lines if len(line) > width) * 4 > count:
        return Cuts(None)
    offsets = [0]
    for line in raw:
        offsets.append(offsets[-1] + len(line) + 1)
    going = set(goes_on)
    runs: list[tuple[int, int]] = []
    cut: list[int] = []
    i = 0
    while i < len(lines):
        j = i
        while j in going:
            j += 1
        # lines i … j-1 go on, line j ends the run: its stretches of lines as long as the column
        k = i
        while k < j:
            if len(lines[k]) not in (width, width - 1):
                k += 1
                continue
            end = k
            while end < j and len(lines[end]) in (width, width - 1):
                end += 1
            stretch = range(k, end)
            exact = sum(1 for m in stretch if len(lines[m]) == width)
            # a stretch that is the whole run was cut; inside a run of other lengths, only one of two
            # or more cut lines (wrapping at spaces makes a line as long as the column now and then)
            # …and a fold leaves a shorter tail: a stretch closed by a line as long as the column is rows a
            # program cut at the terminal's width (nvtop's table at 168 columns, real pastes round twenty)
            if exact and ((k == i and end == j) or exact >= 2) and len(lines[end]) != width:
                cut.extend(stretch)
                runs.append((offsets[k], offsets[end] + len(raw[end])))
            k = end
        i = j + 1
    return Cuts(width, tuple(runs), tuple(m + 1 for m in cut)) if cut else Cuts(None)
