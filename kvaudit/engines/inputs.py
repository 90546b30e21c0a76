"""What an input file holds, told by its content: a report JSON (read by `kvaudit.report`) or a
raw vLLM startup log, or an excerpt of one (read by the log engine). `show`, `diff` and `plan`
open their inputs here; nothing on this path imports torch or vllm.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from kvaudit.errors import BadInputError
from kvaudit.input_text import input_name, read_text
from kvaudit.report import MAX_REPORT_CHARS, REPORT_KEYS, first_char, load_json, parse_report_text, report_from_data
from kvaudit.schema import Report


def load_report(path: Path | str) -> Report:
    """A report from a report JSON or a raw vLLM startup log, told apart by content; `-` reads
    standard input."""
    return report_from_text(read_text(path), input_name(path))


def report_from_text(text: str, where: str) -> Report:
    """A report is a JSON object (its loader says what is wrong with a damaged one); anything else
    is read as a log, a JSON object with none of a report's keys too (a Jupyter notebook). A text
    that starts with `[` is a log excerpt (`[gpu_worker.py:298] …`) unless it is JSON. The log
    engine is imported only for a log (80 ms of a cold `kvaudit diff` of two reports, on the 2-core
    machine)."""
    first = first_char(text)
    if first == "{":
        try:
            data = load_json(text, where)
        except BadInputError:
            head = text[:JSON_LINE_CHARS + 64].lstrip("\ufeff \t\r\n")[:JSON_LINE_CHARS]
            if _log_record(head.split("\n", 1)[0]):
                return _from_log(text, where)  # Docker's json-file log: one `{"log": "…", "stream": …}` a line
            raise
        if _log_record(data):
            return _from_log(text, where)  # a notebook (.ipynb) whose outputs hold the log
        return report_from_data(data, where)
    if first == "[" and len(text) <= MAX_REPORT_CHARS:
        try:
            json.loads(text.removeprefix("\ufeff"))
        except (json.JSONDecodeError, RecursionError, ValueError):
            try:
                return _from_log(text, where)
            except BadInputError:
                stripped = text.lstrip("\ufeff \t\r\n")
                if _LOG_HEAD.match(stripped) or not _JSON_ARRAY.match(stripped):
                    # `[loggers.py:123] …`: a log's lines, whatever the log reader says of them; `[project]`: a
                    # TOML or INI file (a newcomer's `kvaudit show pyproject.toml` was "not valid JSON")
                    raise
                # neither: the JSON error says more about a file that starts like JSON
        return parse_report_text(text, where)
    return _from_log(text, where)


_JSON_ARRAY = re.compile(r"\[\s*(?:[\[{\"\-\d\]]|true\b|false\b|null\b)")
"""How a JSON array opens: what a text that starts with `[` must look like for its JSON error to say more than the
log reader's refusal."""
_LOG_HEAD = re.compile(r"\[[^\]\s]{1,200}\.py:\d{1,7}\]")
"""A record head a paste shortened to `[file.py:N]`: a text that opens with one is a log's, not JSON."""


JSON_LINE_CHARS = 1 << 16
"""How much of a text's first line is parsed to tell a JSON-lines log from a damaged report."""


def _log_record(value: object) -> bool:
    """A JSON object (or a line's text that is one) with none of a report's keys: a notebook, a line of Docker's
    json-file log. `{}` is not: a damaged report says more of it."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError, ValueError):
            return False
    return isinstance(value, dict) and bool(value) and not value.keys() & REPORT_KEYS


def _from_log(text: str, where: str) -> Report:
    from kvaudit.engines import logs
    return logs.report_from_log_text(text, where)
