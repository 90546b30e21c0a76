"""The shape of one vLLM log line: process tag, level, source file, message.

vLLM 0.32 formats records as (vllm/logger.py, `_FORMAT`)

    {VLLM_LOGGING_PREFIX}({proc} pid={pid}) {LEVEL} {MM-DD HH:MM:SS} [{file}.py:{line}] {message}

and older releases printed `LEVEL MM-DD HH:MM:SS [file.py:line] message` with the
`({worker} pid={pid}) ` tag added in front of worker output only (`_add_prefix` in
vllm/utils/system_utils.py). Container runtimes put their own prefix in front
(`2026-11-30T10:00:00.123456789Z `, `[pod-xyz] `), `VLLM_LOGGING_COLOR` adds ANSI codes (pasted
as the escape byte or written out: printable.strip_colours), a copy of a web page keeps HTML's
`&#39;`, and multi-line messages repeat the prefix after `\\r\\n` (NewLineFormatter). So the tag is
searched near the start of the line instead of anchored to it, and colours and character
references are read first (printable.plain_text).
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from kvaudit.printable import plain_text

# `(Worker_TP0_DCP1 pid=123)`, `(VllmWorker-0 pid=123)`, `(EngineCore_DP0 pid=123)`, the older
# `(VllmWorker rank=0 pid=123)` / `(VllmWorker TP0 pid=123)`, and Ray's `(RayWorkerWrapper
# pid=123, ip=10.0.0.1)`. Ray and Ray Serve nest them: `(ServeReplica:app pid=1) (EngineCore pid=2)
# (RayWorkerProc pid=3) (Worker_TP1 pid=3) INFO …`: the last tag of the chain printed the line.
# Some pastes bracket the tag instead (`[Worker_TP3 pid=540] INFO …`, vllm#29070).
_TAG = re.compile(r"[(\[]([A-Za-z][\w.\-]{0,80}(?: [\w.=\-]{1,40}){0,3}) pid=(\d{1,10})(?:, ip=([\w.:\-]{1,64}))?[)\]]")
_NEXT_TAG = re.compile(r"[ \t]{0,4}[(\[]([A-Za-z][\w.:\-]{0,160}(?: [\w.=\-]{1,40}){0,3}) pid=(\d{1,10})"
                       r"(?:, ip=([\w.:\-]{1,64}))?[)\]]")
MAX_NESTED_TAGS = 8
RECORD_TIME = r"\d\d-\d\d \d\d:\d\d:\d\d"
"""vLLM's record time, `MM-DD HH:MM:SS` (a fraction may follow)."""
RECORD_TIME_RX = re.compile(r"\b" + RECORD_TIME + r"\b")


KV_BLOCK_DEVICES = ("GPU", "gpu", "CUDA", "cuda", "ROCM", "rocm", "XPU", "xpu", "HPU", "hpu", "TPU", "tpu",
                    "NEURON", "neuron", "cpu")
"""The device word of V0's KV block count, `# <device> blocks: N, # CPU blocks: M` (executor_base.py,
llm_engine.py): `GPU` before 0.6.4, then the platform's enum name (`CUDA`, `ROCM`, …), then its
device_name (`cuda`, `rocm`, …, vLLM 0.7–0.10; the sllm-store ROCm guide's `# rocm blocks: 37011`), on
vLLM's CPU platform and IBM Spyre `cpu` (`# cpu blocks: 2340, # CPU blocks: 0`: real pastes round
eighteen). `CPU` is left out: it names the swap space's blocks there."""
_V0_BLOCKS = re.compile(r"#\s?(?:" + "|".join((*KV_BLOCK_DEVICES, "CPU")) + ") blocks: ")
"""V0's own `# GPU blocks: N, # CPU blocks: M` at a line's start, a paste that kept only the message."""


def person_heading(text: str) -> bool:
    """A line (or an unlogged line's message) that opens with `#`: a shell comment or a Markdown heading, a
    person's words, as an issue's title pasted above its log (BuildKit's `#12 3.6 INFO …` is a record: its
    message starts after that head; V0's own `# GPU blocks: …` is vLLM's message, _V0_BLOCKS)."""
    head = text.lstrip(" \t\ufeff")
    return head.startswith("#") and _V0_BLOCKS.match(head) is None


def record_seconds(stamp: str) -> int | None:
    """A record time (`MM-DD HH:MM:SS`) in seconds within its year, months taken as 31 days: only
    differences of minutes are read from it. None for a month outside 1–12 (no record time)."""
    month, day, hour, minute, second = map(int, re.split(r"[- :]", stamp[:14]))
    if not 1 <= month <= 12:
        return None
    return (((month * 31 + day) * 24 + hour) * 60 + minute) * 60 + second
LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL"
"""The levels vLLM's logger prints (WARN: older releases' and other programs' word for WARNING), as a regex's
alternatives."""
_RECORD_HEAD = (r"(" + LEVELS + r")\s+(" + RECORD_TIME + r")(?:[.,]\d{1,9})?\s+"
                r"\[?([^\]\s]{1,200}?\.py):\d{1,7}\]")
"""vLLM's record head: `INFO 08-04 07:35:11 [core.py:515]` (V0: `core.py:515]`, no opening bracket)."""
_HEAD = re.compile(r"\s*" + _RECORD_HEAD + r"\s?")
_LEVEL_COLON = re.compile(r"\s?(" + LEVELS + r"): ")
"""A tagged record whose head the paste shortened to the level and a colon (`(Worker_PP1 pid=297)
ERROR: torch.AcceleratorError: …`, real pastes round fifteen), as Python logging's own `LEVEL:`."""
_UNTAGGED_HEAD = re.compile(_RECORD_HEAD + r"\s?")

# A pasted excerpt often keeps only `[file.py:N] message`, or the level and file without a time;
# retyped ones put a clock time first and keep the process name without its pid
# (`18:03:00  (Worker_TP0) INFO [gpu_model_runner.py:5332] …`, spark-vllm-docker#336).
_BARE_HEAD = re.compile(
    r"\s{0,8}(?:\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\s+)?(?:\([A-Za-z][\w.\-]{0,80}\)\s+)?"
    r"(?:(" + LEVELS + r")\s+)?(?:" + RECORD_TIME + r"(?:[.,]\d{1,9})?\s+)?"
    r"\[([^\]\s]{1,200}?\.py):\d{1,7}\]\s?")

def bare_records(text: str, most: int = 10_000) -> int:
    """How many lines open with a record head a paste shortened to `[file.py:N]` (at most `most` lines looked
    at): vLLM's lines, or another Python program's."""
    count, start = 0, 0
    for _ in range(most):
        if _BARE_HEAD.match(text, start, start + 1000) is not None:
            count += 1
        end = text.find("\n", start)
        if end < 0:
            break
        start = end + 1
    return count


TAG_SEARCH_CHARS = 400
"""How far into a line the process tag may sit (container prefixes are short)."""

NCCL_RECORD = r"[\w.\-]{1,64}:\d{1,7}:\d{1,7} \[\d{1,3}\] NCCL (?:INFO|WARN|ERROR)\b"
"""The head of NCCL's own debug record (NCCL_DEBUG=INFO: `host:pid:tid [cuda device] NCCL INFO …`), which NCCL
prints to the process's stdout beside vLLM's records, with no level-time-file prefix of vLLM's."""

# A log viewer that runs a paste's records together on one line (Modal's: `Aug 04  00:35:11.716 |
# ERROR 08-04 07:35:11 [core.py:515] EngineCore failed to start. ERROR 08-04 07:35:11
# [core.py:515] Traceback (most recent call last): ERROR …`, modal-examples#1318): each record head
# after the line's first, with its chain of process tags where it has one (MAX_NESTED_TAGS), starts
# a record of its own; an NCCL debug record's head too (real pastes round twenty-five, vllm#21661: a
# paste whose line breaks became spaces, `… RuntimeError: NCCL error: unhandled cuda error (run with
# NCCL_DEBUG=INFO for details) 02fdc141b80d:213:213 [1] NCCL INFO cudaDriverVersion 12080 …`, was
# the failure's message).
_JOINED_HEAD = re.compile(r"(?<=\S)[ \t]+(?=(?P<record>(?:[(\[][A-Za-z][\w.:\-]{0,160}(?: [\w.=\-]{1,40}){0,3} "
                          r"pid=\d{1,10}(?:, ip=[\w.:\-]{1,64})?[)\]][ \t]+){0," + str(MAX_NESTED_TAGS) + "}"
                          + "(?:" + _RECORD_HEAD + "|(?P<nccl>" + NCCL_RECORD + "))))")
_HEAD_CHARS = 260
"""The longest record head _RECORD_HEAD matches (a 200-character file name and its line number)."""


_FRAME_BEFORE = re.compile(r'", line \d{1,7},? in \S{1,84}$')
"""A traceback frame's header ending where a joined record's head starts: the frame is a record of its own, not the
record's prefix (real pastes round twenty-five, vllm#21661: a flattened paste's first line `…/pynccl.py", line 139,
in **init** ERROR 11-04 18:02:56 [v1/executor/multiproc_executor.py:597] self.all_reduce(data) …`)."""


TERMINAL_PADDING = 8
"""The fewest blanks before the first record on a line that starts with a message of its own (an exception's) for
the records on it to be read as lines a terminal joined (its wrapped lines padded to the width: real pastes round
thirty-two, vllm-gfx906#14, `… #environment-variables)                                ERROR 07-04 14:53:23
[engine.py:458] Traceback …`); a sentence that quotes a record sets it one blank apart."""

PROSE_LEAD = 200
"""A line whose first record head comes after more than this many characters starts with a person's
words, not with a prefix (a container's, a viewer's, a journal's: all far shorter)."""


def split_joined_records(text: str) -> tuple[str, int]:
    """The text with each record a viewer joined to the line before it on a line of its own, where
    that line starts with a record head (within TAG_SEARCH_CHARS: a person's sentence that quotes a
    record keeps it), and how many were split off. A line that starts with a person's words (more than
    PROSE_LEAD characters before its first head) and then holds two or more records with their process
    tags is a whole log flattened onto it (an issue copied by a wiki mirror, real pastes round nineteen:
    `### Your current environment … vllm serve … (Worker_TP1_EP1 pid=96931) ERROR … WorkerProc hit an
    exception. (Worker pid=96931) …`): each record on it, the first included, tagged or not, is split
    off. A `\r` ends a line as a `\n` does. One pass; each line's start looked at once. NCCL's debug
    records (NCCL_RECORD) are split off as vLLM's are, and not counted: the count is of vLLM's records."""
    out: list[str] = []
    done = nccl = 0
    for line, heads in _heads_by_line(text):
        start, end, tagged, _ = heads[0]
        own = _UNTAGGED_HEAD.search(text, line, min(start, line + TAG_SEARCH_CHARS + _HEAD_CHARS))
        first_at = own.start() if own is not None else end  # the line's first record head
        cuts: list[tuple[int, int, bool]] = []
        if own is None and end - start >= TERMINAL_PADDING and not _FRAME_BEFORE.search(text, line, start):
            cuts = [(s, e, n) for s, e, _, n in heads]  # a message, then records a terminal's wrap padded apart
        elif first_at - line > PROSE_LEAD and sum(t for _, _, t, _ in heads) >= 2:
            cuts = [(s, e, n) for s, e, _, n in heads]  # a flattened log after a person's words: every record
        elif own is not None and own.start() - line <= TAG_SEARCH_CHARS:
            cuts = [(s, e, n) for s, e, _, n in heads]  # the line's own head is before the first joined one
        elif own is None and end - line <= TAG_SEARCH_CHARS and not _FRAME_BEFORE.search(text, line, start):
            cuts = [(s, e, n) for s, e, _, n in heads[1:]]  # the first joined head is the line's own
        elif own is None and end - line <= TAG_SEARCH_CHARS:
            cuts = [(s, e, n) for s, e, _, n in heads]  # a traceback frame before it is a record of its own
        for s, e, is_nccl in cuts:
            out += [text[done:s], "\n"]
            done = e
            nccl += is_nccl
    if not out:
        return text, 0
    return "".join(out) + text[done:], len(out) // 2 - nccl


def _heads_by_line(text: str) -> Iterator[tuple[int, list[tuple[int, int, bool, bool]]]]:
    """Each line that holds a joined record head: (its start, [(the blank before each head, the head's
    start, whether the head has a process tag, whether it is NCCL's)])."""
    line: int | None = None
    heads: list[tuple[int, int, bool, bool]] = []
    seen = 0
    for m in _JOINED_HEAD.finditer(text):
        if m.start() < seen:  # the blank between a record's process tag and its level
            continue
        # the last line break since the previous head (never searched further back: linear)
        brk = max(text.rfind("\n", seen, m.start()), text.rfind("\r", seen, m.start()))
        if line is None or brk >= 0:
            if heads:
                yield line, heads  # type: ignore[misc]
            if brk < 0:  # the text's first head: its line starts at the last break before it, once
                brk = max(text.rfind("\n", 0, m.start()), text.rfind("\r", 0, m.start()))
            line, heads = brk + 1, []
        seen = m.end("record")
        heads.append((m.start(), m.end(), text[m.end()] in "([", m.group("nccl") is not None))
    if heads:
        yield line, heads  # type: ignore[misc]


@dataclass(frozen=True)
class LogLine:
    """One physical line (a `\\n`- or `\\r`-delimited segment) of a log, split into its parts."""

    pos: int
    """Offset of the segment in the file's text: orders lines and finds neighbours."""
    pid: int | None
    """The pid of the `(tag pid=N)` prefix; None for untagged output (tqdm, tracebacks, V0)."""
    tag: str | None
    """The process name printed on this line (a worker is renamed during boot)."""
    level: str | None
    src: str | None
    """`gpu_worker.py`, or a relative path under VLLM_LOGGING_LEVEL=DEBUG."""
    msg: str
    """The message after the prefix (the whole line when it has no vLLM prefix)."""

    @property
    def is_vllm(self) -> bool:
        """True when the line carries vLLM's logger prefix (a tag, or level + time + file)."""
        return self.pid is not None or self.src is not None


def _innermost(segment: str, tag: re.Match[str]) -> re.Match[str]:
    """The last tag of a chain that starts with `tag` (Ray's nested prefixes)."""
    for _ in range(MAX_NESTED_TAGS):
        nxt = _NEXT_TAG.match(segment, tag.end())
        if nxt is None:
            break
        tag = nxt
    return tag


def process_key(tag: re.Match[str]) -> int:
    """The process a tag names: its pid, and where Ray names the node (`pid=345, ip=10.42.9.225`) the
    node as well, above 2**32: containers on two nodes start their workers at the same low pids (a
    gpt-oss-120b TP 4 boot over four Ray nodes had pid 345 on two of them, read as one worker)."""
    pid = int(tag.group(2))
    return pid if tag.group(3) is None else pid + (zlib.crc32(tag.group(3).encode()) + 1) * 2**32


def parse_line(segment: str, pos: int) -> LogLine:
    segment = plain_text(segment)
    head = segment[:TAG_SEARCH_CHARS]
    tag = _TAG.search(head)
    if tag is not None:
        tag = _innermost(segment, tag)
        rest = _HEAD.match(segment, tag.end())
        if rest is not None:
            return LogLine(pos, process_key(tag), tag.group(1), _level(rest.group(1)), rest.group(3),
                           segment[rest.end():].strip())
        if (short := _LEVEL_COLON.match(segment, tag.end())) is not None:
            return LogLine(pos, process_key(tag), tag.group(1), _level(short.group(1)), None,
                           segment[short.end():].strip())
        # Older releases prefixed raw worker stdout/stderr too (tracebacks, prints).
        return LogLine(pos, process_key(tag), tag.group(1), None, None, segment[tag.end():].strip())
    rest = _UNTAGGED_HEAD.search(head)
    if rest is not None:
        return LogLine(pos, None, None, _level(rest.group(1)), rest.group(3), segment[rest.end():].strip())
    bare = _BARE_HEAD.match(head)
    if bare is not None:
        level = _level(bare.group(1)) if bare.group(1) else None
        return LogLine(pos, None, None, level, bare.group(2), segment[bare.end():].strip())
    return LogLine(pos, None, None, None, None, segment.strip())


def _level(text: str) -> str:
    return "WARNING" if text == "WARN" else text


def has_prefix(segment: str) -> bool:
    """Whether a line carries vLLM's logger prefix near its start (a tag, or level + time + file)."""
    head = segment[:TAG_SEARCH_CHARS]
    return _TAG.search(head) is not None or _UNTAGGED_HEAD.search(head) is not None


def tag_of(segment: str) -> tuple[str, int] | None:
    """The `(tag, pid)` a segment carries, if any (used to follow a pid's renames)."""
    segment = plain_text(segment)
    m = _TAG.search(segment[:TAG_SEARCH_CHARS])
    if m is None:
        return None
    m = _innermost(segment, m)
    return m.group(1), process_key(m)


def looks_like_vllm(text: str) -> bool:
    """Whether any line of `text` has vLLM's logger shape (the slow path: only for inputs in which
    no memory line was found, to tell "a vLLM log without memory lines" from "not a log"). Each
    pattern runs only where the literal it needs occurs: the regex engine is slow on miles of text
    that hold neither."""
    return ((" pid=" in text and _TAG.search(text) is not None)
            or (".py:" in text and _UNTAGGED_HEAD.search(text) is not None))


# --------------------------------------------------------------------------------------------
# Process tags → roles and parallel coordinates


class Role(StrEnum):
    WORKER = "worker"
    ENGINE = "engine"
    """EngineCore: with the `uni` executor (GPU, world size 1) it runs the worker too."""
    FRONTEND = "frontend"
    """APIServer / MainProcess / the LLM() process."""
    OTHER = "other"


@dataclass(frozen=True)
class ProcTag:
    """What a process name says about where the process sits.

    Worker names come from `WorkerProc.setup_proc_title_and_log_prefix`
    (vllm/v1/executor/multiproc_executor.py): `Worker[_DPd][_PPp][_PCPc][_TPt][_DCPd][_EPe]`,
    each suffix only when that group is larger than 1. Before that runs, a worker is
    `VllmWorker-{global_rank}` (the multiprocessing name) and then plain `Worker`.
    """

    role: Role
    dp: int | None = None
    pp: int | None = None
    pcp: int | None = None
    tp: int | None = None
    dcp: int | None = None
    ep: int | None = None
    global_rank: int | None = None
    """Only the provisional `VllmWorker-N` (and old `VllmWorker rank=N`) name it outright."""
    ray: bool = False
    """Ray's actor name (`RayWorkerWrapper`, `RayWorkerProc`): a worker whose name says no rank."""

    @property
    def provisional(self) -> bool:
        """A name a worker carries before its parallel groups exist (it will be renamed)."""
        return (self.role is Role.WORKER and not self.ray and self.tp is None and self.pp is None
                and self.dp is None)


# `_TP3` in vLLM's names; 0.10's `VllmWorker PP0_TP0` put a space before the first one.
_SUFFIX = {key: re.compile(rf"[_ ]{key.upper()}(\d{{1,6}})") for key in ("dp", "pp", "pcp", "tp", "dcp", "ep")}
_OLD_RANK = re.compile(r"(?:-| rank=)(\d{1,6})\b")
_OLD_TP = re.compile(r" TP(\d{1,6})\b")
_ENGINE_INDEX = re.compile(r"^EngineCore_(\d{1,6})$")


@functools.lru_cache(maxsize=4096)
def proc_tag(name: str) -> ProcTag:
    """What a process name says (cached: a log repeats a handful of names on every line)."""
    return _proc_tag(name)


def _proc_tag(name: str) -> ProcTag:
    if name.startswith("RayWorker"):
        return ProcTag(Role.WORKER, ray=True)
    if name.startswith(("Worker", "VllmWorker")):
        coords = {key: (int(m.group(1)) if (m := rx.search(name)) else None) for key, rx in _SUFFIX.items()}
        if coords["tp"] is None and (m := _OLD_TP.search(name)):
            coords["tp"] = int(m.group(1))
        old = _OLD_RANK.search(name) if name.startswith("VllmWorker") else None
        return ProcTag(Role.WORKER, global_rank=int(old.group(1)) if old else None, **coords)
    if name.startswith("EngineCore"):
        dp = _SUFFIX["dp"].search(name) or _ENGINE_INDEX.search(name)
        return ProcTag(Role.ENGINE, dp=int(dp.group(1)) if dp else None)
    if name.startswith(("APIServer", "ApiServer", "MainProcess", "LLM", "Frontend")):
        return ProcTag(Role.FRONTEND)
    return ProcTag(Role.OTHER)
