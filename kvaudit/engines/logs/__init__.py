"""Parse existing vLLM startup logs into a `kvaudit.report/1` (source `log`).

    record_from_logs([(text, where), …])    several logs of one boot (one file per node) → BootRecord
    report_from_log_text(text, where)       one log → Report (`show`, `diff`: a report or a log)
    report_from_logs([(text, where), …])    several logs of one boot → Report (`ingest`: logs only)

The pipeline: `parse` drives one file: `scan` finds the few lines worth reading (single-character
passes, no per-line loop), `unwrap` joins a record's wrapped and continuation lines, `lines` splits
each into process tag / level / file / message, `facts` turns messages into typed facts (the
catalogue of docs/vllm-startup.md §5; `knobs` reads the engine arguments) and `parse` follows
worker renames (and, in a paste, reads the runs of lines cut at a fixed column). Then `layout`
tells the parallel sizes from what the logs state and the worker names show, `ranks` gives each
fact to its rank; `logged_config`, `failure_timeline` and `owners` read the config, the failure
(a boot that died is never `ok`) and each rank's owners; and `boot_record` makes the `BootRecord`
that `kvaudit.assemble.assemble` turns into the report. Nothing here imports torch or vllm.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from kvaudit.assemble import BootRecord, assemble
from kvaudit.engines.logs.boot_record import LogBoot
from kvaudit.engines.logs.lines import bare_records
from kvaudit.engines.logs.parse import parse_file
from kvaudit.engines.logs.ranks import check_one_boot
from kvaudit.errors import BadInputError
from kvaudit.printable import one_line
from kvaudit.schema import Report

__all__ = ["record_from_logs", "report_from_log_text", "report_from_logs"]

LOG_LINES = ("`(Worker_TP0 pid=N)` / `LEVEL MM-DD hh:mm:ss [file.py:N]` / `[file.py:N]` prefixes, and memory lines "
             "such as `Model loading took`, `Available KV cache memory`, `KV cache size`, `Actual usage`, `To serve at "
             "least one request`")
LOOKED_FOR = "a JSON object with a `schema` key, " + LOG_LINES
"""What `show` and `diff` look for in a file (a report, or a log)."""


def report_from_log_text(text: str, where: str) -> Report:
    """A log's report for `show` and `diff`, which read reports too (their error says so)."""
    return assemble(record_from_logs([(text, where)], reports_too=True))


def report_from_logs(texts: Sequence[tuple[str, str]], *, exhaustive: bool = False) -> Report:
    """One report from the logs of one boot (see record_from_logs)."""
    return assemble(record_from_logs(texts, exhaustive=exhaustive))


def record_from_logs(texts: Sequence[tuple[str, str]], *, exhaustive: bool = False,
                     reports_too: bool = False) -> BootRecord:
    """What the logs of one boot say. `exhaustive` reads every line (slow; for tests). A file
    with no vLLM line at all is a BadInputError naming it, and so are files that belong to
    different engine runs and (unless `reports_too`: the caller reads reports elsewhere) a
    kvaudit report, which `ingest` does not take."""
    if not texts:
        raise BadInputError("no log given: pass at least one vLLM log")
    scans = []
    for index, (text, where) in enumerate(texts):
        if not reports_too and (schema := _report_schema(text)) is not None:
            raise BadInputError(f"{where}: a kvaudit report ({schema}), not a log: `kvaudit ingest` reads vLLM startup "
                                f"logs; `kvaudit show`, `kvaudit diff` and `kvaudit plan` read reports")
        scan = parse_file(text, where, index, exhaustive=exhaustive)
        if not scan.is_vllm and not text.lstrip("\ufeff").strip():
            if where == "<stdin>":
                raise BadInputError(f"{where}: no text came on standard input")
            # NUL bytes are dropped on reading (input_text), so a file of them reads as empty too
            raise BadInputError(f"{where}: holds no text (it is empty, or only whitespace or NUL bytes)")
        if not scan.is_vllm and (shown := bare_records(text)):
            # `[loggers.py:123] Engine 000: Avg prompt throughput: …` alone: vLLM's lines, none of startup's (the
            # error had said it found no `[file.py:N]` line; real pastes round twenty, discuss.vllm.ai 1863)
            raise BadInputError(f"{where}: {shown} line(s) open with a `[file.py:N]` record head, as vLLM's do, and "
                                f"none is from a boot's startup (no config, memory, KV or failure line: a running "
                                f"server's lines only?): kvaudit reads startup logs")
        if not scan.is_vllm:
            named = _named_only(scan.mentions) + _illustrated(scan.illustrations)
            if reports_too:
                raise BadInputError(f"{where}: neither a kvaudit report nor a vLLM log: no vLLM log lines found "
                                    f"({named}looked for {LOOKED_FOR})")
            raise BadInputError(f"{where}: not a vLLM log: no vLLM log lines found ({named}looked for {LOG_LINES})")
        scans.append(scan)
    check_one_boot(scans)
    return LogBoot(tuple(scans)).record()


def _named_only(lines: tuple[int, ...]) -> str:
    """What the refusal of a document says of its lines that name vLLM's wordings (parse._mentions_only)."""
    if not lines:
        return ""
    return (f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))} and the like name vLLM's wordings "
            f"only inside a sentence's quotes or in commands, as a document does; ")


def _illustrated(lines: tuple[int, ...]) -> str:
    """What the refusal of a document says of its lines that show records with `…` for their time."""
    if not lines:
        return ""
    return (f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))} show vLLM's records with `…` where the "
            f"time and file go, as a document's example does; ")


def _report_schema(text: str) -> str | None:
    """The `schema` of a text that is a JSON object carrying one (a report, a diff), else None.
    Parsed, never evaluated; json.loads is linear in the text."""
    if text.lstrip("\ufeff \t\r\n")[:1] != "{":
        return None
    try:
        value = json.loads(text.removeprefix("\ufeff"))
    except (ValueError, RecursionError):
        return None
    schema = value.get("schema") if isinstance(value, dict) else None
    return one_line(schema)[:80] if isinstance(schema, str) and schema.strip() else None
