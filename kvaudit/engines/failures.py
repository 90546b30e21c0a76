"""What went wrong, from vLLM's own words: the failure lines of a startup log, classified.

Used by the run supervisor on the log of the boot it ran, and by the log engine on users' logs.
Order matters: the first pattern that matches the last failure line wins, most specific first.
"""

from __future__ import annotations

import re

from kvaudit.schema import FailureKind

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# (kind, pattern) — templates from vllm/v1/core/kv_cache_utils.py, vllm/v1/worker/utils.py,
# vllm/v1/worker/cpu_worker.py, vllm/v1/worker/gpu_model_runner.py and the attention backends.
PATTERNS: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    (FailureKind.DOES_NOT_FIT, re.compile(r"To serve at least one request with the models?'?s? max seq len")),
    (FailureKind.DOES_NOT_FIT, re.compile(r"No available memory for the cache blocks")),
    (FailureKind.DOES_NOT_FIT, re.compile(r"Cannot auto-fit max_model_len")),
    (FailureKind.STARTUP_MEMORY, re.compile(r"on startup is less than desired (?:GPU|CPU) memory utilization")),
    (FailureKind.STARTUP_MEMORY, re.compile(r"on kv cache allocation is less than requested memory for kv")),
    (FailureKind.OOM, re.compile(r"CUDA out of memory|OutOfMemoryError|Failed to load model - not enough GPU memory")),
    (FailureKind.CRASH, re.compile(r"Error in memory profiling")),
    (FailureKind.CRASH, re.compile(r"Workspace is locked but")),
    (FailureKind.REFUSED, re.compile(r"Decode Context Parallelism \(DCP\) requires")),
    (FailureKind.REFUSED, re.compile(r"NotImplementedError: .*not supported|is not supported (?:by|on|for) ")),
)
_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception)): (.+)$")
_MAX_LEN = re.compile(r"estimated maximum model length is (\d+)")


def _message(line: str) -> str:
    """The error sentence: from the exception name on, without the log prefix."""
    line = _ANSI.sub("", line).strip()
    m = _EXCEPTION.search(line)
    text = f"{m.group(1)}: {m.group(2)}" if m else line
    return text[:600]


def classify_line(line: str) -> FailureKind | None:
    for kind, pattern in PATTERNS:
        if pattern.search(line):
            return kind
    return None


def find_failure_in_log(text: str) -> tuple[FailureKind, str] | None:
    """The most telling failure in a log: the last line matching a failure pattern, preferring
    a does-not-fit or memory error over a generic crash line that merely reports it."""
    best: tuple[int, FailureKind, str] | None = None
    rank = {FailureKind.DOES_NOT_FIT: 0, FailureKind.STARTUP_MEMORY: 0, FailureKind.OOM: 1,
            FailureKind.REFUSED: 2, FailureKind.CRASH: 3}
    for line in text.splitlines():
        if len(line) > 20000 or not ("Error" in line or "error" in line or "memory" in line or "support" in line
                                     or "Exception" in line):
            continue
        kind = classify_line(line)
        if kind is None:
            continue
        candidate = (rank.get(kind, 4), kind, _message(line))
        if best is None or candidate[0] <= best[0]:
            best = candidate
    return (best[1], best[2]) if best else None


def estimated_max_model_len(text: str) -> int | None:
    """vLLM's own estimate in its does-not-fit ValueError ("the estimated maximum model length is N")."""
    found = _MAX_LEN.findall(text)
    return int(found[-1]) if found else None
