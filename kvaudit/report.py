"""A finished report's exit code, and a report read from JSON text: its size cap, then the report
JSON's own checks (its schema, then the ledger's balance).

Reports are made in `kvaudit.assemble`; an input file's text (gzip, standard input, encodings,
size caps) is `kvaudit.input_text`'s; telling a report from a vLLM log is
`kvaudit.engines.inputs`' job (a log needs the log engine, which nothing here imports).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kvaudit.errors import BadInputError, ExitCode
from kvaudit.ledger import check_balance
from kvaudit.schema import FailureKind, Phase, PhaseRecord, RankReport, Report, Verdict
from kvaudit.validate import report_from_json


def exit_code(report: Report) -> ExitCode:
    """0 fits; 1 a finding (does not fit); 3 the audit could not complete."""
    if report.failure is not None and report.failure.kind is not FailureKind.DOES_NOT_FIT:
        return ExitCode.INCOMPLETE
    if report.verdict is Verdict.OK:
        return ExitCode.OK
    if report.verdict is Verdict.FAIL:
        return ExitCode.FINDING
    return ExitCode.INCOMPLETE


MAX_REPORT_CHARS = 256 << 20
"""A JSON report is kilobytes to a few MB (a traced one included); parsed JSON takes about 25×
its size in memory, so a larger document is refused before it is parsed."""


def parse_report_text(text: str, where: str) -> Report:
    """A report from JSON text; every problem is one BadInputError line."""
    return report_from_data(load_json(text, where), where)


def load_json(text: str, where: str) -> Any:
    """The JSON value of a report's text; a text too large or not JSON is one BadInputError line."""
    if len(text) > MAX_REPORT_CHARS:
        raise BadInputError(f"{where}: {len(text) >> 20} MiB of JSON, far larger than any kvaudit report "
                            f"(at most {MAX_REPORT_CHARS >> 20} MiB are read)")
    try:
        # Editors on Windows save a UTF-8 BOM; first_char skips it when a report is told from a
        # log, so json.loads must too.
        return json.loads(text.removeprefix("\ufeff"))
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise BadInputError(f"{where}: not valid JSON ({_json_error(exc)})") from None


REPORT_KEYS = frozenset(("schema", "source", "ranks", "capacity", "verdict", "kvaudit_version"))
"""Top-level keys only a report (or a damaged one) has: a JSON object with none of them is no report
(a Jupyter notebook's cells, whose outputs hold a vLLM log, is read as a log)."""


def report_from_data(data: Any, where: str) -> Report:
    """A report from parsed JSON; every problem is one BadInputError line."""
    try:
        report = report_from_json(data, where)
    except RecursionError:
        raise BadInputError(f"{where}: nested too deeply to be a report") from None
    try:
        for rank in report.ranks:
            check_balance(rank)
    except BadInputError as exc:  # name the file: `kvaudit diff` reads two
        raise BadInputError(f"{where}: {exc}") from None
    return report


def _json_error(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return type(exc).__name__


def first_char(text: str) -> str:
    """The first character after a BOM and blank space: how a report is told from a log."""
    return text.lstrip("\ufeff \t\r\n")[:1]


def looks_like_json(text: str) -> bool:
    return first_char(text) in ("{", "[")


def phase_map(rank: RankReport) -> Mapping[Phase, PhaseRecord]:
    return {p.name: p for p in rank.phases}
