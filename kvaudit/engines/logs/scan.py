"""Find the few lines worth parsing in a log of hundreds of megabytes, without a per-line loop.

A 200 MB startup log of 8 ranks is millions of lines of NCCL chatter, tqdm redraws and
tracebacks around a few hundred memory lines. Python cannot afford even one regex or one `in`
per line there, and CPython's `str.find` is fast for a single character (memchr) but several
times slower for short needles, so the scan runs a handful of single-character passes and checks
each hit in place:

- `B`, preceded by `Gi` / `Mi` / `G` (or starting `B12X`): every figure vLLM prints in GiB, MiB
  or, in V0, GB: weights, KV, graphs, "Actual usage", budgets, OOM messages, CPU "Auto set".
- `V`, starting `V cache size` (the KV size line), `V1 LLM engine` (version and config), `V2
  Model Runner` / `V1 model runner`, `VLLM_` (the graph profiling advisory, env dumps) or
  `Vllm` (`VllmWorker-0 died unexpectedly`).
- `{` after `non-default args: `.
- `Error` followed by `: ` or `(`, one multi-character pass: the exception lines of failures that
  print no unit (`ValueError: No available memory for the cache blocks`, `AssertionError: Workspace
  is locked`), and `raise ValueError(` where a paste kept the traceback but lost the message.
- `#` before ` GPU blocks: ` / ` cuda blocks: ` / ` rocm blocks: ` … (facts.KV_BLOCK_WORDS) / ` CPU blocks: `:
  V0's KV block count.
- `LLM engine` and ` version `, searched before the first other hit only (printed before anything
  is loaded): V0's config line (version, model, max_seq_len, TP) and the version banners.
- A few long needles, one `str.find` pass each (long needles are the fast ones), at most
  MAX_NEEDLE_LINES lines each: `Traceback (most recent call last)`, the sign of a boot that died
  whatever its exception; in an excerpt (up to EXCERPT_CHARS) also `failed to start`,
  `unexpectedly`, Ray's `x across cluster]`, `num_gpu_blocks is: `, the NPU worker's `, total
  memory: ` and the NVIDIA driver's `NV_ERR_NO_MEMORY` (a pasted dmesg line). And `", line `,
  the traceback frames, one regex (in an excerpt everywhere, in a whole log after each traceback
  header): kept only where the frame names a startup call (its phase)
  or is faulthandler's (a crash in C code), and at most MAX_FRAMES.
- In an excerpt, the failure catalogue's anchors no other pass finds (`WorkerProc hit an
  exception`, `CUDA out of memory` …: _CATALOGUE_NEEDLES), on lines vLLM's logger printed only,
  at most MAX_NEEDLE_LINES lines looked at each; and vLLM's eager-mode, KV padding and
  stream-capture lines.
- In an excerpt, an ERROR record cut off before its message (`ERROR 07-13 00:04:10 [co` ending
  a line: a paste that stops there), one regex with the literal `ERROR` in front, at most
  MAX_NEEDLE_LINES lines; and an ERROR record that is a traceback frame (`ERROR 11-25 08:05:06
  [multiproc_executor.py:815]   File "…`: a paste may stop inside the traceback, before its
  exception line), the same way, at most MAX_NEEDLE_LINES lines.
- Pasted command lines (`--tensor-parallel-size 8`, `-tp=8`) and an offline `LLM(…)` call's
  keywords (`tensor_parallel_size=2,`), looked for in the first COMMAND_WINDOW characters only: a
  command comes before the log it started.

Two lines are found by neighbourhood instead: the attention backend (printed once, so the first
match wins and the search stops there) and the second half of the two-line KV size form of older
releases ("Maximum concurrency for …" right after "GPU KV cache size: …").

A segment is a run between `\\n` or `\\r`: tqdm redraws with `\\r`, and vLLM's NewLineFormatter
continues multi-line messages after `\\r\\n`, so a message may sit behind a progress bar.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice

from kvaudit.engines.failures import (
    CAUGHT_SIGNAL,
    CAUSES,
    CUDA_CHECK,
    FAULTHANDLER,
    INTERRUPTED_LINE,
    KILLED,
    LAUNCHER_STOPS,
    LINKER_NO_LIBCUDA,
    NATIVE_FRAME,
    NCCL_WATCHDOG,
    SHELL_SIGNALS,
    SIGNAL_REPORT,
    TORCH_ALLOC_OOM,
    TRACEBACK,
)
from kvaudit.engines.logs.facts import (
    AUTOTUNER_OOM,
    BANNER_MODEL,
    BLOCK_SIZE_LINE,
    CHUNKED_OFF_LINE,
    CHUNKED_PREFILL,
    COMPILE_CACHE_LINES,
    COMPILED_LINE,
    CUT_ERROR_HEAD,
    DP_EAGER_LINE,
    EAGER_LINE,
    ENCODER_BUDGET,
    ERROR_FRAME_HEAD,
    FRAME_CALLS,
    HYBRID_OFF,
    IMAGE_NEEDLE,
    KV_BLOCK_WORDS,
    KV_SETUP_CALL,
    KWARG_NEEDLES,
    LOADED_LINE,
    LOADING_MODEL,
    LORA_LINE,
    MAX_MODEL_LEN_LINE,
    MTP_LINE,
    NAMESPACE_ARGS,
    PADDING_LINE,
    PARALLEL_STATE_LINE,
    PLATFORM_LINE,
    PLATFORM_SIGNS,
    SERVE_NEEDLE,
    SOURCE_CALL_HEAD,
    STREAM_CAPTURE,
    WORLD_RANK_LINE,
    backend,
    communicator_init,
)
from kvaudit.engines.logs.lines import TAG_SEARCH_CHARS, parse_line
from kvaudit.engines.logs.unwrap import FRAME, QUOTE_OPENER, bounds, line_end

_V_WORDS = ("V cache size", "V1 LLM engine", "V2 Model Runner", "V1 model runner", "V2 requires", "VLLM_", "Vllm")
# `V` is common (NVLS, NVIDIA, "GPU KV cache usage" in every metrics line): a pattern with a literal
# first character lets the regex engine skip to each `V` and check the words in C.
_V_RX = re.compile("V(?:" + "|".join(re.escape(w[1:]) for w in _V_WORDS) + ")")
_ARGS = "non-default args: "
_PRELUDE = ("LLM engine", " version ", NAMESPACE_ARGS, LOADING_MODEL, CHUNKED_PREFILL, CHUNKED_OFF_LINE,
            MAX_MODEL_LEN_LINE, BLOCK_SIZE_LINE, PLATFORM_LINE, "Platform plugin ", BANNER_MODEL, PLATFORM_SIGNS[0][0])
"""Lines printed before anything is loaded that hold no character the other passes look for: V0's
config line `Initializing an LLM engine (v0.5.4) with config: …` (V1's is found by its `V`), the
banner's `version 0.19.1`, V0's `vLLM API server version 0.6.3`, its `args: Namespace(…)`, a
worker's `Starting to load model M...`, the scheduler's `Chunked prefill is enabled with …` (and a line
turning it off again: `… supports chunked prefill and prefix caching; disabling both.`), the
model config's `Using max model len N`, the platform's `Setting attention block size to N tokens` and the
platform itself (`Automatically detected platform rocm.`, a plugin's `Platform plugin ascend is activated`),
or AMD's aiter loading its modules, a ROCm boot's sign where that line was cut (facts.PLATFORM_SIGNS)."""


def prelude_limit(text: str, first_hit: int) -> int:
    """Where _PRELUDE's lines are looked for up to: printed before anything is loaded, so before the
    first other hit, and in any case in the first COMMAND_WINDOW characters, where a paste's own
    lines before them (`$Env:VLLM_…`, an nvidia-smi row's `MiB`, an earlier `ValueError: `) may hold
    what other passes look for (real pastes, round eight: the version was lost)."""
    limit = max(first_hit, min(len(text), COMMAND_WINDOW))
    end = line_end(text, limit) if limit < len(text) else None  # the whole line it falls in (as the slow scan)
    return len(text) if end is None else end


_ERROR = "Error"
_ERROR_NEXT = (": ", "(", " executing")
"""`ValueError: …`, `raise ValueError(` when a paste keeps the traceback but not the message, and
V0's `Error executing method 'determine_num_available_blocks'`."""
_LONG_NEEDLES = (TRACEBACK, COMPILED_LINE, LOADED_LINE)
"""Found in a whole log: a traceback's header; vLLM's lines of a graph compiled in the boot or loaded from its
compile cache (each worker prints its own, once per compile range: a rank's `compile_cache`)."""
_CUT_ERROR_RX = re.compile(CUT_ERROR_HEAD + r"(?=[\r\n]|\Z)")
"""facts.CUT_ERROR_RECORD as the scan finds it: an ERROR record's level and time at a line's end,
its `[file.py:N]` not closed."""
_ERROR_FRAME_RX = re.compile(ERROR_FRAME_HEAD)
"""facts.ERROR_FRAME_HEAD: an ERROR record whose message is a traceback frame (facts.error_frame_facts)."""
_SOURCE_CALL_RX = re.compile(SOURCE_CALL_HEAD)
"""facts.SOURCE_CALL_HEAD: a traceback's source line that calls a startup method."""
_ERROR_RECORDS = (_CUT_ERROR_RX, _ERROR_FRAME_RX, _SOURCE_CALL_RX)
"""The ERROR records and source lines looked for in an excerpt only, each at most MAX_NEEDLE_LINES lines."""
STARTUP_FAILED_SENTENCE = "Engine core initialization failed. See root cause above"
"""vLLM's own words when an engine core died starting (v1/engine/utils.py wait_for_engine_startup), read on any
line: a wrapper re-logs the exception in its own format (real pastes round twenty-two, kserve#5056: `kserve ERROR
[__main__.py:<module>():337] Failed to start model server: Engine core initialization failed. See root cause
above.`, read as a bare traceback); a person who writes the sentence quotes a log."""
_EXCERPT_NEEDLES = ("failed to start", "unexpectedly", "x across cluster]", "num_gpu_blocks is: ", ", total memory: ",
                    "NV_ERR_NO_MEMORY", EAGER_LINE, DP_EAGER_LINE, PADDING_LINE, STREAM_CAPTURE[1], PARALLEL_STATE_LINE,
                    KILLED,
                    BLOCK_SIZE_LINE, NCCL_WATCHDOG, TORCH_ALLOC_OOM, WORLD_RANK_LINE, INTERRUPTED_LINE, FAULTHANDLER,
                    AUTOTUNER_OOM, *SHELL_SIGNALS, SIGNAL_REPORT, CAUGHT_SIGNAL, NATIVE_FRAME, CUDA_CHECK,
                    "Maximum concurrency for", ENCODER_BUDGET, HYBRID_OFF, LORA_LINE, LINKER_NO_LIBCUDA,
                    STARTUP_FAILED_SENTENCE, IMAGE_NEEDLE, MTP_LINE, *COMPILE_CACHE_LINES[:2], *LAUNCHER_STOPS)
"""Looked for in a text up to EXCERPT_CHARS only (~0.05–0.1 s a pass over 200 MB): in a whole log
`EngineCore failed to start.` comes with the traceback logger.exception prints, a dead worker or
engine core with the API server's RuntimeError (an `Error: ` line) or the monitor's `VllmWorker-N
died unexpectedly` (a `Vllm` word), the KV size line says what num_gpu_blocks does, the memory
lines Ray folds are read anyway (their marker with them), and the engine config line says
enforce_eager; an excerpt may hold the one line and not the other. vLLM's padding warning is a
note, read in an excerpt only: in a whole log it would cost a pass of its own; so is the second
line of a CUDA error raised in a stream capture (a whole log has its first, an `Error: ` line), and
parallel_state's rank assignment and a worker's `world_size=… rank=…` line (a whole log's worker names
say the layout), and the shell's
`Killed` (a line of its own, which no vLLM record holds). The platform's block size line is in the
prelude where the engine core prints it; a worker prints it after loading (real pastes, round twelve).
torch's NCCL watchdog line is no vLLM record either (round fifteen), nor is its allocator's OOM warning
(round seventeen), nor Python's `KeyboardInterrupt` ending a traceback after a ^C (its review), nor
faulthandler's `Fatal Python error` (round eighteen). The concurrency line is read after a KV line
in a whole log, and alone in an excerpt (round twenty-one: a paste that kept it and not the size line); so is
the vLLM image a paste names, whose tag is the release where no banner is in it (round twenty-two), and the MTP
drafter's line (round twenty-three: a paste with no config line; a whole log's config line names the drafter). So
are a worker's torch.compile cache path lines (the third, `Directly load …`, is a long needle anyway), as the
parallel_state line: the rank of a Ray worker (round twenty-six)."""
EXCERPT_CHARS = 4 << 20
_FRAME = FRAME
FRAME_WINDOW = 1 << 16
"""How far after a traceback header its frames are looked for, in a whole log."""
MAX_NEEDLE_LINES = 256
"""Lines kept per long needle, per file."""
MAX_FRAMES = 256
"""Frame lines kept per file: a traceback names a startup call a few times at most."""
COMMAND_WINDOW = 1 << 18
"""How far into a file a pasted command line is looked for."""
_COMMAND_NEEDLES = ("--", "-tp", "-pp", "-dp", SERVE_NEEDLE) + KWARG_NEEDLES
_CALLS = tuple(sorted(FRAME_CALLS, key=len, reverse=True))
_FRAME_NAME = re.compile(r"[A-Za-z_<]")
"""What starts a faulthandler frame's function name (`line 207 in run_engine_core`, `in <module>`)."""
_FRAME_RX = re.compile(r'", line \d{1,7}(?:, in (?:' + "|".join(map(re.escape, _CALLS)) + r')(?!\w)| in [A-Za-z_<]'
                       r'|(?P<init>, in (?:__init__(?!\w)|\*\*init\*\*)))')
"""A frame naming a startup call, faulthandler's frame, or a constructor's frame (kept where it is a device
communicator's: facts.communicator_init)."""
CONCURRENCY_WINDOW = 4096
"""How far after a KV size line the old second line ("Maximum concurrency for …") may be."""


def _b(text: str, i: int) -> bool:
    return (text[max(i - 2, 0):i] in ("Gi", "Mi") or text[i - 1:i] == "G" or text.startswith("B12X", i)
            or (text[i - 1:i] == "M" and _number_before(text, i - 1)))


def _number_before(text: str, i: int) -> bool:
    """A digit right before offset i, or one space and a digit (`244.61 MB`, 0.3's weights line)."""
    return text[i - 1:i].isdigit() or (text[i - 1:i] == " " and text[i - 2:i - 1].isdigit())


def _brace(text: str, i: int) -> bool:
    return i >= len(_ARGS) and text.startswith(_ARGS, i - len(_ARGS))


_BLOCK_WORDS = (*KV_BLOCK_WORDS, " CPU blocks: ")


def _hash(text: str, i: int) -> bool:
    """V0's "# GPU blocks: N, # CPU blocks: M" (the first `#` is sometimes lost in a paste)."""
    return text.startswith(_BLOCK_WORDS, i + 1)


_CHAR_NEEDLES = (("B", _b), ("{", _brace), ("#", _hash))
# The same checks as patterns, for a line dense with the character and none of the words (a
# hostile line of a million braces): after MISSES_BEFORE_LINE misses in a row the rest of the
# line is searched in C, once, instead of one Python check per character.
_B_RX = re.compile(r"Gi?B|MiB|B12X|\d ?MB")
MISSES_BEFORE_LINE = 8


def _next_in_line(char: str, text: str, i: int, end: int) -> int:
    """The next offset in text[i:end] where `char` passes its check, or -1."""
    if char == "{":
        j = text.find(_ARGS + "{", max(i - len(_ARGS), 0), end)  # a negative start counts from the end
        return -1 if j < 0 else j + len(_ARGS)
    if char == "#":
        j = text.find("#", i, end)
        while j >= 0 and not _hash(text, j):
            j = text.find("#", j + 1, end)
        return j
    m = _B_RX.search(text, i, end)
    return -1 if m is None else (m.start() if m.group(0) == "B12X" else m.end() - 1)


@dataclass(frozen=True)
class Candidates:
    segments: tuple[tuple[int, int], ...]
    """(start, end) of every segment to run the whole catalogue on, in text order."""
    concurrency: tuple[tuple[int, int], ...]
    """Segments that follow a KV size or blocks line in older releases (see FOLLOWERS)."""
    backend: tuple[int, int] | None
    """The first line that names the attention backend."""


def scan(text: str) -> Candidates:
    found: dict[int, int] = {}
    for char, check in _CHAR_NEEDLES:
        i = text.find(char)
        misses = 0
        while i >= 0:
            if check(text, i):
                start, end = bounds(text, i)
                found.setdefault(start, end)
                i, misses = text.find(char, end), 0
            elif misses < MISSES_BEFORE_LINE:
                i, misses = text.find(char, i + 1), misses + 1
            else:
                end = line_end(text, i)
                j = _next_in_line(char, text, i + 1, end)
                i, misses = (j if j >= 0 else text.find(char, end)), 0
    pos = 0
    while m := _V_RX.search(text, pos):
        start, end = bounds(text, m.start())
        found.setdefault(start, end)
        pos = end
    i = text.find(_ERROR)
    misses = 0
    while i >= 0:
        if text.startswith(_ERROR_NEXT, i + len(_ERROR)):
            start, end = bounds(text, i)
            found.setdefault(start, end)
            i, misses = text.find(_ERROR, end), 0
        elif misses < MISSES_BEFORE_LINE:
            i, misses = text.find(_ERROR, i + len(_ERROR)), misses + 1
        else:  # a line dense with "Error": the rest of it in C, once
            end = line_end(text, i)
            hits = [j for j in (text.find(_ERROR + n, i, end) for n in _ERROR_NEXT) if j >= 0]
            i, misses = (min(hits) if hits else text.find(_ERROR, end)), 0
    limit = prelude_limit(text, min(found, default=len(text)))
    headers = []
    for needle in _long_needles(text):
        lines = _needle_lines(text, needle, found)
        if needle == TRACEBACK:
            headers = lines
    if len(text) <= EXCERPT_CHARS:
        for rx in _ERROR_RECORDS:  # each at most MAX_NEEDLE_LINES lines
            for m in islice(rx.finditer(text), MAX_NEEDLE_LINES):
                # the match's last character: a source call's may start on the line break before it
                found.setdefault(*bounds(text, m.end() - 1))
        for needle in _CATALOGUE_NEEDLES:
            _needle_lines(text, needle, found, logged_only=True)
    kept = [0]
    for start, stop in _frame_windows(text, headers):
        _frame_lines(text, found, start, stop, kept)
    window = min(len(text), COMMAND_WINDOW)
    for needle in _COMMAND_NEEDLES:
        _needle_lines(text, needle, found, stop=window)
    for needle in _PRELUDE:
        i = text.find(needle, 0, limit)
        while i >= 0:
            start, end = bounds(text, i)
            found.setdefault(start, end)
            i = text.find(needle, end, limit)
    segments = tuple(sorted(found.items()))
    return Candidates(segments, _concurrency(text, segments), _first_backend(text))


def _needle_lines(text: str, needle: str, found: dict[int, int], stop: int | None = None,
                  logged_only: bool = False) -> list[int]:
    """Of the first MAX_NEEDLE_LINES lines that hold `needle` (before `stop`), those kept (all, or
    with `logged_only` those vLLM's logger printed), found with str.find (one pass at most): a boot
    dies once, and a log of a thousand tracebacks is a server's, not a start-up's."""
    stop = len(text) if stop is None else stop
    i = text.find(needle, 0, stop)
    starts: list[int] = []
    seen = 0
    while i >= 0 and seen < MAX_NEEDLE_LINES:
        start, end = bounds(text, i)
        seen += 1
        if not logged_only or logged(text[start:end]):
            found.setdefault(start, end)
            starts.append(start)
        i = text.find(needle, end, stop)
    return starts


def _frame_windows(text: str, headers: list[int]) -> list[tuple[int, int]]:
    """Where to look for traceback frames: the whole of an excerpt (up to EXCERPT_CHARS, where a
    faulthandler dump may stand alone), in a whole log the FRAME_WINDOW after each traceback
    header (a log's hundred thousand frames of other calls are not read)."""
    if len(text) <= EXCERPT_CHARS:
        return [(0, len(text))]
    windows: list[tuple[int, int]] = []
    for start in headers:
        stop = min(start + FRAME_WINDOW, len(text))
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], stop)
        else:
            windows.append((start, stop))
    return windows


def _frame_lines(text: str, found: dict[int, int], start: int, stop: int, kept: list[int]) -> None:
    """Traceback frames that name a startup call, and faulthandler's frames (`line N in name`,
    without the comma), at most MAX_FRAMES. One regex with the literal `", line ` in front: the
    frames of other calls (a log can hold a hundred thousand) fail in C, never in Python."""
    m = _FRAME_RX.search(text, start, stop)
    while m is not None and kept[0] < MAX_FRAMES:
        line_start, end = bounds(text, m.start())
        if m.group("init") is None or communicator_init(text[line_start:end]):
            found.setdefault(line_start, end)
            kept[0] += 1
        m = _FRAME_RX.search(text, end, stop)


def _frame_counts(text: str, j: int) -> bool:
    k = j
    while k < j + 7 and text[k:k + 1].isdigit():  # \d{1,7}, as _FRAME_RX
        k += 1
    if k == j:
        return False
    if text.startswith(" in ", k):
        return _FRAME_NAME.match(text, k + 4) is not None  # faulthandler: `line N in name`, as _FRAME_RX
    return text.startswith(", in ", k) and (_names_startup_call(text, k + 5) or communicator_init(text))


def _names_startup_call(text: str, k: int) -> bool:
    for name in _CALLS:
        if text.startswith(name, k) and not (text[k + len(name):k + len(name) + 1].isalnum()
                                             or text[k + len(name):k + len(name) + 1] == "_"):
            return True
    return False


def scan_exhaustive(text: str) -> Candidates:
    """The same selection, one segment at a time: the slow reference the tests hold `scan` to."""
    found, extra, engine, frames = [], [], [], 0
    records = dict.fromkeys(_ERROR_RECORDS, 0)  # excerpt-only ERROR records kept per pattern
    catalogue = dict.fromkeys(_CATALOGUE_NEEDLES, 0)  # excerpt-only logged catalogue lines kept per anchor
    window = min(len(text), COMMAND_WINDOW)
    needle_lines = dict.fromkeys(_long_needles(text) + _COMMAND_NEEDLES, 0)
    headers = [m.start() for m in re.finditer(r"[^\r\n]+", text) if TRACEBACK in m.group(0)][:MAX_NEEDLE_LINES]
    windows = _frame_windows(text, headers)
    for m in re.finditer(r"[^\r\n]+", text):
        seg = m.group(0)
        frame = frames < MAX_FRAMES and any(
            _frame_counts(seg, i + len(_FRAME)) and any(a <= m.start() + i < b for a, b in windows)
            for i in _positions(seg, _FRAME))
        frames += frame
        hit = _has_error(seg) or _V_RX.search(seg) is not None or any(
            check(seg, i) for char, check in _CHAR_NEEDLES for i in _positions(seg, char))
        needles = [n for n in _long_needles(text) if n in seg] + [
            n for n in _COMMAND_NEEDLES if text.find(n, m.start(), min(m.end(), window)) >= 0]
        kept = [n for n in needles if needle_lines[n] < MAX_NEEDLE_LINES]
        for n in needles:
            needle_lines[n] += 1
        for rx in records if len(text) <= EXCERPT_CHARS else ():
            if records[rx] < MAX_NEEDLE_LINES and rx.search(seg):
                records[rx] += 1
                kept.append(rx.pattern)
        for needle in catalogue if len(text) <= EXCERPT_CHARS else ():
            if catalogue[needle] < MAX_NEEDLE_LINES and needle in seg:
                catalogue[needle] += 1  # the lines looked at, logged or not (_needle_lines)
                if logged(seg):
                    kept.append(needle)
        if hit:
            found.append((m.start(), m.end()))
        elif frame or kept:
            extra.append((m.start(), m.end()))
        elif any(needle in seg for needle in _PRELUDE):
            engine.append((m.start(), m.end()))
    limit = prelude_limit(text, found[0][0] if found else len(text))
    segments = tuple(sorted(found + extra + [s for s in engine if s[0] < limit and s not in extra]))
    first_backend = next(((m.start(), m.end()) for m in re.finditer(r"[^\r\n]+", text)
                          if " backend" in m.group(0) and any(backend(m.group(0)))), None)
    return Candidates(segments, _concurrency(text, segments), first_backend)


def segment_hits(seg: str) -> bool:
    """Whether one line holds anything the scan looks for (the exhaustive scan's test, for a line
    made of several)."""
    return (_has_error(seg) or _V_RX.search(seg) is not None
            or any(check(seg, i) for char, check in _CHAR_NEEDLES for i in _positions(seg, char))
            or any(needle in seg for needle in _LONG_NEEDLES + _EXCERPT_NEEDLES + _PRELUDE)
            or (any(needle in seg for needle in _CATALOGUE_NEEDLES) and logged(seg))
            or any(rx.search(seg) is not None for rx in _ERROR_RECORDS)
            or any(_frame_counts(seg, i + len(_FRAME)) for i in _positions(seg, _FRAME)))


def _long_needles(text: str) -> tuple[str, ...]:
    return _LONG_NEEDLES + (_EXCERPT_NEEDLES if len(text) <= EXCERPT_CHARS else ())


def _has_error(seg: str) -> bool:
    return any(seg.startswith(_ERROR_NEXT, i + len(_ERROR)) for i in _positions(seg, _ERROR))


def _positions(seg: str, char: str):
    i = seg.find(char)
    while i >= 0:
        yield i
        i = seg.find(char, i + 1)


def _found_anyway(anchor: str) -> bool:
    """Whether a line that holds only the anchor is a candidate without a needle of its own."""
    return (_has_error(anchor) or _V_RX.search(anchor) is not None
            or any(check(anchor, i) for char, check in _CHAR_NEEDLES for i in _positions(anchor, char))
            or any(needle in anchor for needle in _LONG_NEEDLES + _EXCERPT_NEEDLES))


_CATALOGUE_NEEDLES = tuple(c.anchor for c in CAUSES if not _found_anyway(c.anchor))
"""The failure catalogue's anchors (engines/failures.py) that no other pass finds, looked for in an
excerpt on lines vLLM's logger printed (a person's sentence may name them: `I get CUDA out of
memory`): a paste may hold the one line that says the boot died, with nothing else the scan looks
for on it (vllm#40821: `(Worker_TP0_EP0 pid=52608) ERROR … [multiproc_executor.py:962] WorkerProc
hit an exception.`, then the paste ends; after KV lines, that read as a boot that fits). In a
whole log each comes with the traceback the scan finds."""


def logged(seg: str) -> bool:
    """A record vLLM's logger printed: its level, time and `[file.py:N]` (after a tag, if any). A
    person's sentence that names a process (`the (EngineCore pid=548) process said CUDA out of
    memory`) has no level after it. Only the line's head is read: its length costs nothing."""
    return parse_line(seg[:LOGGED_HEAD_CHARS], 0).level is not None


LOGGED_HEAD_CHARS = TAG_SEARCH_CHARS + 300
"""How much of a line `logged` reads: the tag's search window and a level, time and file after it."""


FOLLOWERS = ("Maximum concurrency for", "is larger than the maximum number of tokens")
"""What older releases printed right after the KV size or blocks line, on lines of their own with
nothing the scan looks for: the concurrency, and V0's "The model's max seq len (N) is larger than
the maximum number of tokens that can be stored in KV cache (M)"."""


def _concurrency(text: str, segments: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out = []
    for start, end in segments:
        # The KV size line (U and older), or V0's blocks line (0.6.4), and what follows them; or the worker's
        # available-memory line where a paste dropped the size line between (real pastes round twenty)
        if (text.find("KV cache size: ", start, end) >= 0 or text.find(" blocks: ", start, end) >= 0
                or text.find("Available KV cache memory: ", start, end) >= 0):
            for follower in FOLLOWERS:
                if text.find(follower, start, end) >= 0:
                    continue
                if (j := text.find(follower, end, end + CONCURRENCY_WINDOW)) >= 0:
                    out.append(bounds(text, j))
    return tuple(out)


def _first_backend(text: str) -> tuple[int, int] | None:
    needle = " backend"
    i = text.find(needle)
    while i >= 0:
        start, end = bounds(text, i)
        if any(backend(text[start:end])):
            return start, end
        i = text.find(needle, end)
    return None


def next_line_of(text: str, pid: int, after: int, stop: int | None = None) -> tuple[int, int] | None:
    """The next segment printed by `pid` after offset `after` and before `stop` (to follow a
    worker's renames)."""
    end = len(text) if stop is None else stop
    found = [i for close in ")]" if (i := text.find(f" pid={pid}{close}", after, end)) >= 0]  # (tag) or [tag]
    return bounds(text, min(found)) if found else None


LOGO_MARK = "█ ▀▄▀ █"
"""The middle of vLLM's logo's version line, its colours aside (entrypoints/common/startup.py)."""
SERVER_START = ("vLLM API server version", "vLLM server version", LOGO_MARK)
"""`vllm serve`'s first line, once per start of the server: api_server.py's up to 0.11, then
entrypoints' `vLLM server version …, serving model …` or its logo's version line (`█ ▀▄▀ █  version
0.15.1`: each of the logo's lines logged in 0.1x, the logo one multi-line record in 0.34)."""


BOOT_DONE = "init engine (profile, create kv cache, warmup model) took"
"""v1/engine/core.py `_initialize_kv_caches`' last line: after it, a failure is not the boot's."""
STATS = "Avg prompt throughput"
"""The API server's periodic stats line (`Engine 000: Avg prompt throughput: …`, every 10 s while
it serves): printed only by a boot that finished, so a failure before one in the same file struck
while it served (vllm#23582: a worker died, 5 s later the stats line with 46 requests running)."""
HPU_INIT_DONE = "init_cache_engine took"
"""Gaudi's V0 executor's last startup line (HabanaAI/vllm-fork habana_executor.py: `init_cache_engine
took 64.26 GiB of device memory …`, after its HPU graph warmup; real pastes round sixteen)."""
SPEC_METRICS = "SpecDecoding metrics"
"""The API server's speculative-decoding stats (v1/spec_decode/metrics.py), logged only for drafts it
ran for requests (real pastes round seventeen: a DFlash boot's only line after startup)."""
BENCH_DONE = " total tokens/s, "
"""`vllm bench throughput`'s summary (`Throughput: 0.05 requests/s, 36.80 total tokens/s, 12.27 output
tokens/s`), printed once the engine ran every request (real pastes round eighteen)."""
METRIC_SAMPLE = '{engine="'
"""A sample of the running server's /metrics (`vllm:prefix_cache_queries_total{engine="0",…} 35.0`)."""
STEP_DUMP = "Dumping scheduler output for model execution"
"""v1/engine/core.py log_error_detail (logging_utils/dump_input.py): a model step the scheduler planned
failed, so the engine was serving requests (real pastes round nineteen: a Triton autotuner's
out-of-memory on the first request, read as the boot's death)."""
STATS_DUMP = "Dumping scheduler stats: SchedulerStats("
"""The same step-error dump's next record (dump_input.py: `Dumping scheduler stats: SchedulerStats(num_running_reqs=809,
…`), kept where a paste trimmed the scheduler output's long record (real pastes round thirty-five, vllm#43222: a DP
deployment's crash under load read as the boot's death)."""
STEP_DUMPS = (STEP_DUMP, STATS_DUMP)
"""The records of a failed model step's dump (either may be all a paste kept)."""
KV_USAGE = "GPU KV cache usage: "
"""The same stats record's cache share (`Engine 000: …, GPU KV cache usage: 4.7%, …`; V0's `… Pending: 0 reqs,
GPU KV cache usage: 0.0%, CPU KV cache usage: 0.0%.`), found where a page elided the throughput before it
(real pastes round twenty)."""
REQUEST_TOO_LONG = "However, your request has"
"""The API server refusing one request (`This model's maximum context length is 40000 tokens. However, your
request has 78344 input tokens.`, entrypoints' prompt validation): a running server's words."""
ENGINE_DEAD = "EngineDeadError"
"""v1/engine/exceptions.py: what the engine's client raises to a request once a running engine core died
(a dead start raises "Engine core initialization failed" instead; real pastes round twenty: `EngineDeadError,
500 Internal Server Error` read as a boot that died)."""
BUSY_LOOP = "engine_core.run_busy_loop()"
"""v1/engine/core.py run_engine_core's call of the engine's busy loop, a frame's source line in its traceback:
run_engine_core reaches it only once the engine is built, KV cache and warmup included (real pastes round
twenty-one: a GB200 DP8 crash while serving, read as a log that ends before startup finished)."""
SERVED_STEP = "execute_model(scheduler_output"
"""A V1 worker's model step, a frame's source line (worker_base.py, the worker's and the model runner's
execute_model): the scheduler's steps run only once the engine serves (its startup runs profile, warmup and
capture through _dummy_run; V0's execute_model takes an execute_model_req). Real pastes round twenty-one: a
DP4×TP4 worker's `RuntimeError: bIndex is out of range` while serving, read as the boot's failure."""
SERVING = (BOOT_DONE, "EngineCore encountered a fatal error", STEP_DUMP, STATS_DUMP, BUSY_LOOP, SERVED_STEP,
           "Application startup complete", "Starting vLLM API server", "Starting vLLM server on",
           "num_gpu_blocks is: ", STATS,
           '"GET /health HTTP/1.1" 200', '"POST /v1/', "Processed prompts: ", HPU_INIT_DONE, SPEC_METRICS,
           BENCH_DONE, METRIC_SAMPLE, KV_USAGE, REQUEST_TOO_LONG, ENGINE_DEAD, "Sleep mode freed ",
           "Successfully reset prefix cache")
"""Lines that only a boot that finished prints (the engine's busy loop failing, the API server up,
requests served, an offline `LLM.generate`'s progress bar, V0's only sign of a finished offline
start; a trainer's calls of a running engine: gpu_worker.py's sleep, `Sleep mode freed …`, and block_pool.py's
`Successfully reset prefix cache`, real pastes rounds thirty-one and thirty-two, EasyR1 and OpenRLHF): a failure
after the first of them is not the boot's. One before them is only where
failure_timeline shows, on logged lines, that startup went on past it (SERVER_UP, first_logged)."""
IN_FRAME = (BUSY_LOOP, SERVED_STEP)
"""Markers in a traceback's frames: serving begins at the traceback (and the record that announced it)."""
IN_EXCEPTION = (REQUEST_TOO_LONG, ENGINE_DEAD, *IN_FRAME)
"""Markers inside the exception line a failure is read from: serving begins at that line's start."""
SERVER_UP = tuple(m for m in SERVING
                  if m not in (BOOT_DONE, "EngineCore encountered a fatal error", ENGINE_DEAD, BUSY_LOOP, SERVED_STEP))
"""The API server's lines once every engine started, or a request it served."""


def first_logged(text: str, marker: str, pos: int, pid: int | None = None) -> int | None:
    """Where the first line after `pos` that holds `marker` and that vLLM's logger printed (from
    process `pid`, where given) starts; None when none of the first MAX_NEEDLE_LINES does."""
    i = text.find(marker, pos)
    for _ in range(MAX_NEEDLE_LINES):
        if i < 0:
            return None
        start, end = bounds(text, i)
        line = parse_line(text[start:min(end, start + LOGGED_HEAD_CHARS)], start)
        if line.level is not None and (pid is None or line.pid == pid):
            return start
        i = text.find(marker, end)
    return None


def last_logged(text: str, marker: str) -> int:
    """Where the last line that holds `marker` and that vLLM's logger printed starts (looked at
    from the end, MAX_NEEDLE_LINES lines at most); -1 when none."""
    i = text.rfind(marker)
    for _ in range(MAX_NEEDLE_LINES):
        if i < 0:
            return -1
        start, end = bounds(text, i)
        if logged(text[start:end]):
            return start
        i = text.rfind(marker, 0, start)
    return -1


_SHAPED = {BENCH_DONE: re.compile(r"[ \t]*Throughput: [\d.]{1,20} requests/s, [\d.]{1,20}\Z"),
           METRIC_SAMPLE: re.compile(r"[ \t]*vllm:[A-Za-z_:]{1,120}\Z")}
"""Markers that count only on a line of their own shape: a person's sentence may hold the words
(the second review of round eighteen: "… Throughput: 2.10 requests/s, 1500.30 total tokens/s …" and
"I was watching vllm:num_requests_running{engine="0"}" before a boot that died)."""
_REFUSED = re.compile(r'"POST /v1/[^"\n]{0,300} HTTP/[\d.]{1,3}" 5\d\d\b')
"""A request the server answered 5xx (`"POST /v1/chat/completions HTTP/1.1" 503`): no sign that an
engine served it (real pastes round nineteen: Xinference's own front end answers 503 while vLLM loads)."""
LINE_LOOKBACK = 400
"""How far back a marker's line start is looked for (past it, the marker is inside a long line)."""


def _not_the_logs(text: str, i: int, marker: str) -> bool:
    """Whether the marker at `i` is no sign the boot finished: a request answered 5xx (_REFUSED), or a
    person's words, not the log's line: a shaped marker (_SHAPED) on a
    line of another shape, or a marker in backticks inside a sentence (real pastes round seventeen:
    "Twenty minutes later `Application startup complete` had still not been printed"; its second review:
    "It never prints `Starting vLLM API server 0 on …`"). A record quoted whole on a line of its own, or
    after a list's bullet (`` - `Starting vLLM API server on http://0.0.0.0:8010`: 服务已成功启动 ``, round
    eighteen), is the log's line."""
    if marker == '"POST /v1/' and _REFUSED.match(text, i):
        return True
    if marker in IN_FRAME:
        head = _traceback_head(text, i)
        return any(text.find(call, head, i) >= 0 for call in _STARTUP_CALLS)
    shape = _SHAPED.get(marker)
    start = text.rfind("\n", max(0, i - LINE_LOOKBACK), i) + 1
    if start == 0 and i > LINE_LOOKBACK:
        return shape is not None or "`" in text[i - LINE_LOOKBACK:i]  # deep inside a long line
    before = text[start:i]
    if before.count("`") % 2:  # inside a quote: the log's line only where the quote opens the line
        return QUOTE_OPENER.match(before[:before.rfind("`")]) is None
    return shape is not None and shape.match(before) is None


_STARTUP_CALLS = ("in compile_or_warm_up_model", "in determine_available_memory", "in profile_run", "in _dummy_run",
                  "in capture_model", "in initialize_from_config", f"in {KV_SETUP_CALL}", "in load_model",
                  "in init_device", "in warm_up", "in _warmup")
"""Startup's calls, as a traceback's frames name them: a model step under one of them is startup's (Model Runner
V2's warmup and the V1 runner's hybrid warmup call the worker's execute_model; the review of round twenty-one)."""
TRACEBACK_LOOKBACK = 1 << 15
"""How far before a frame its traceback's header is looked for."""
_ANNOUNCED = ("hit an exception", "encountered a fatal error")
"""The record before a traceback that says whose it is (a worker's, the engine core's)."""


def _traceback_head(text: str, i: int) -> int:
    """Where the traceback holding the frame at `i` starts: its header's line, or the record just before it that
    announced it (`WorkerProc hit an exception.`); the frame's own line where no header is near."""
    header = text.rfind(TRACEBACK, max(0, i - TRACEBACK_LOOKBACK), i)
    if header < 0:
        return bounds(text, i)[0]
    start = bounds(text, header)[0]
    if start > 0:
        before = bounds(text, start - 1)[0]
        if any(words in text[before:start] for words in _ANNOUNCED):
            return before
    return start


def serving_from(text: str, runs: tuple[tuple[int, int], ...] = ()) -> int:
    """Where the log shows the boot had finished: the first SERVING line, in the text or in a run
    of lines cut at a fixed column (read joined); else past its end. One pass per marker, each only
    up to the first found so far (a marker the log lacks costs a pass over the whole text); the runs
    are a paste's, a few KiB."""
    first = len(text) + 1
    for m in SERVING:
        i = text.find(m, 0, first - 1 + len(m))
        for _ in range(MAX_NEEDLE_LINES):
            if i < 0 or not _not_the_logs(text, i, m):
                break
            i = text.find(m, i + 1, first - 1 + len(m))
        if i >= 0 and not _not_the_logs(text, i, m):
            # an exception's own words: its line starts where the server is seen running; a frame's, its traceback
            first = (_traceback_head(text, i) if m in IN_FRAME else bounds(text, i)[0]) if m in IN_EXCEPTION else i
    found = [start for start, end in runs if any(m in text[start:end].replace("\n", "") for m in SERVING)]
    return min([first, *found])
