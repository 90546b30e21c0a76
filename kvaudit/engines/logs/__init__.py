"""Parse existing vLLM startup logs into a `kvaudit.report/1` (source `log`).

    record_from_logs([(text, where), …])    several logs of one boot (one file per node) → BootRecord
    report_from_log_text(text, where)       one log → Report
    report_from_logs([(text, where), …])    several logs of one boot → Report

The pipeline: `parse` drives one file: `scan` finds the few lines worth reading (single-character
passes, no per-line loop), `unwrap` joins a record's wrapped and continuation lines, `lines` splits
each into process tag / level / file / message, `facts` turns messages into typed facts (the
catalogue of docs/vllm-startup.md §5; `knobs` reads the engine arguments) and `parse` follows
worker renames. Then `ranks` gives each fact to its rank; `logged_config`, `failure_timeline` and
`owners` read the config, the failure and each rank's owners; and `boot_record` makes the
`BootRecord` that `kvaudit.assemble.assemble` turns into the report. Nothing here imports torch or vllm.
"""

from __future__ import annotations

from typing import Sequence

from kvaudit.assemble import BootRecord, assemble
from kvaudit.engines.logs.boot_record import LogBoot
from kvaudit.engines.logs.parse import parse_file
from kvaudit.engines.logs.ranks import check_one_boot
from kvaudit.errors import BadInputError
from kvaudit.schema import Report

__all__ = ["record_from_logs", "report_from_log_text", "report_from_logs"]

LOOKED_FOR = ("a JSON object with a `schema` key, `(Worker_TP0 pid=N)` / `LEVEL MM-DD hh:mm:ss [file.py:N]` / "
              "`[file.py:N]` prefixes, and memory lines such as `Model loading took`, `Available KV cache memory`, "
              "`KV cache size`, `Actual usage`, `To serve at least one request`")


def report_from_log_text(text: str, where: str) -> Report:
    return report_from_logs([(text, where)])


def report_from_logs(texts: Sequence[tuple[str, str]], *, exhaustive: bool = False) -> Report:
    """One report from the logs of one boot (see record_from_logs)."""
    return assemble(record_from_logs(texts, exhaustive=exhaustive))


def record_from_logs(texts: Sequence[tuple[str, str]], *, exhaustive: bool = False) -> BootRecord:
    """What the logs of one boot say. `exhaustive` reads every line (slow; for tests). A file
    with no vLLM line at all is a BadInputError naming it, and so are files that belong to
    different engine runs."""
    if not texts:
        raise BadInputError("no log given: pass at least one vLLM log")
    scans = []
    for index, (text, where) in enumerate(texts):
        scan = parse_file(text, where, index, exhaustive=exhaustive)
        if not scan.is_vllm:
            raise BadInputError(f"{where}: neither a kvaudit report nor a vLLM log: no vLLM log lines found "
                                f"(looked for {LOOKED_FOR})")
        scans.append(scan)
    check_one_boot(scans)
    return LogBoot(tuple(scans)).record()
