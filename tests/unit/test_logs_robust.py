"""Hostile input: truncated files, binary garbage, 1 MB lines, CRLF, empty files, and real lines as
people paste them (quoted, fenced, wrapped, framed, with non-breaking spaces).

Whatever the input, ingesting gives a report or a one-line BadInputError, never a traceback; the
report is valid `kvaudit.report/1` JSON that loads back unchanged; and the fast scanner selects
exactly what a line-by-line scan selects.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvaudit.engines.inputs import load_report
from kvaudit.engines.logs import report_from_log_text, report_from_logs
from kvaudit.engines.logs.scan import scan, scan_exhaustive
from kvaudit.errors import BadInputError
from kvaudit.input_text import read_text
from kvaudit.report import parse_report_text
from kvaudit.schema import Report, dumps

FIXTURES = Path(__file__).parent.parent / "fixtures" / "logs"
REAL_LINES = sorted({line for p in FIXTURES.rglob("*") if p.suffix in (".log", ".txt")
                     for line in read_text(p).splitlines() if line.strip()})  # whole logs, excerpts, the corpus


def ingest_ok(text: str) -> Report | None:
    """Ingest and check the contract; None when the input was refused (properly)."""
    try:
        report = report_from_log_text(text, "input.log")
    except BadInputError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith("input.log: ")
        return None
    again = parse_report_text(dumps(report), "roundtrip")
    assert dumps(again) == dumps(report)
    return report


def _mutate(line: str, how: int, rnd: random.Random) -> str:
    if how == 0:
        return line[: rnd.randrange(len(line) + 1)]  # truncated mid-line
    if how == 1:  # other numbers, some absurdly long
        return re.sub(r"\d+", lambda m: str(rnd.choice([0, 1, 7, 10**rnd.randrange(1, 40), -3])), line)
    if how == 2:
        at = rnd.randrange(len(line) + 1)
        return line[:at] + rnd.choice(["\x1b[0;36m", "\r", "\x00", "�", "×", "{", "(", " pid=", "GiB", "Error: ",
                                       "VLLM_", "V cache size"]) + line[at:]
    if how == 3:
        return line.replace(" ", "", 1)
    if how == 4:  # as pasted: quoted, fenced, wrapped (indented or cut in a word), NBSP, tabs, frames
        at = rnd.randrange(len(line) + 1)
        return rnd.choice([
            "> " + line, "```\n" + line + "\n```", line[:at] + "\n    " + line[at:], line[:at] + "\n" + line[at:],
            line.replace(" ", "\u00a0"), line.replace(" ", "\t", 2), "│ " + line + " │", "  | " + line,
            line + ",\n", "raise ValueError(" + line, "# GPU blocks: " + line])
    return line


@st.composite
def log_texts(draw) -> str:
    rnd = random.Random(draw(st.integers(0, 2**32)))
    parts = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.integers(0, 9))
        if kind <= 5:
            parts.append(_mutate(rnd.choice(REAL_LINES), draw(st.integers(0, 7)), rnd))
        elif kind == 6:
            parts.append(draw(st.binary(max_size=300)).decode("utf-8", errors="replace"))
        elif kind == 7:
            parts.append(draw(st.text(max_size=200)))
        elif kind == 8:  # a long line, sometimes with a memory message buried in it
            body = rnd.choice(["x", "GiB ", "{", "V", "B"]) * draw(st.integers(1000, 60_000))
            parts.append(body + rnd.choice(REAL_LINES))
        else:
            parts.append(rnd.choice(REAL_LINES) * draw(st.integers(2, 5)))  # several lines glued together
    sep = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return sep.join(parts) + draw(st.sampled_from(["", sep]))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log_texts())
# found by this test (stop 47's CI): a source call right after a lone `\r` was looked for on the line before it
@example("(EngineCore pid=7334) ERROR 12-02 20:52:35 [core.py:1512] Traceback (most recent cal\n# sour\n"
         "    \rcheck_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)")
def test_any_input_gives_a_report_or_one_line_error(text: str) -> None:
    report = ingest_ok(text)
    assert scan(text) == scan_exhaustive(text)
    if report is not None:
        assert report == report_from_logs([(text, "input.log")], exhaustive=True)


@pytest.mark.parametrize(("tail", "frame"), [("207 in ", False), ("207 in 9", False), ("207 in run_engine_core", True),
                                            ("207 in <module>", True), ("1234567, in get_kv_cache_configs", True),
                                            ("12345678, in get_kv_cache_configs", False)])
def test_both_scans_read_a_frame_alike(tail: str, frame: bool) -> None:
    # a faulthandler frame needs a name after "in"; a line number has at most 7 digits (the fuzzer above
    # found the scans reading a paste cut after "line 207 in ", and an 8-digit line number, differently)
    head = "(EngineCore pid=7) INFO 11-30 10:01:33 [gpu_worker.py:298] Available KV cache memory: 6.51 GiB\n"
    line = f'(RayWorkerWrapper pid=336, ip=10.0.0.1)   File "/x/vllm/v1/core/kv_cache_utils.py", line {tail}'
    text = head + line
    assert scan(text) == scan_exhaustive(text)
    assert ((len(head), len(text)) in scan(text).segments) is frame


@pytest.mark.parametrize("text", ["", "\n\n\n", " \t\r\n", "\ufeff\n"])
def test_an_empty_input_is_said_to_hold_no_text(text: str) -> None:
    with pytest.raises(BadInputError, match=r"^x\.log: holds no text \(it is empty, or only whitespace or NUL bytes\)$"):
        report_from_log_text(text, "x.log")
    with pytest.raises(BadInputError, match=r"^<stdin>: no text came on standard input$"):
        report_from_log_text(text, "<stdin>")


def test_a_file_of_nul_bytes_holds_no_text(tmp_path) -> None:
    # a newcomer's 100 MB of NUL bytes was called "empty"; NUL bytes are dropped on reading
    from kvaudit.engines.inputs import load_report
    path = tmp_path / "nul.log"
    path.write_bytes(b"\0" * 100_000)
    with pytest.raises(BadInputError, match=r"nul\.log: holds no text \(it is empty, or only whitespace or NUL bytes\)$"):
        load_report(path)


@pytest.mark.parametrize("text", ["\x00\x01\x02" * 100, "hello world\n", "{not json",
                                  bytes(range(256)).decode("utf-8", errors="replace") * 50])
def test_no_vllm_line_is_one_bad_input_error(text: str) -> None:
    expected = (r"^x\.log: neither a kvaudit report nor a vLLM log: no vLLM log lines found \(looked for a JSON object "
                r"with a `schema` key, .*`Model loading took`, `Available KV cache memory`.*\)$")
    with pytest.raises(BadInputError, match=expected):
        report_from_log_text(text, "x.log")


def test_a_vllm_log_without_memory_lines_is_a_partial_report() -> None:
    text = "(APIServer pid=1) INFO 11-30 10:00:00 [launcher.py:1] Route: /v1/models\n"
    report = report_from_log_text(text, "x")
    assert report.ranks == () and report.verdict.value == "unknown"


def test_one_megabyte_lines_are_fast() -> None:
    """GIVEN 1 MB lines, one of them full of "GiB" and braces, and a real memory line at the end
    THEN ingest finishes quickly and still finds the memory line."""
    noise = ("GiB {V " * 150_000)[:1_000_000]
    text = "\n".join([noise, "x" * 1_000_000, noise + "(Worker_TP0 pid=3) INFO 11-30 10:00:00 [gpu_worker.py:760] "
                      "Available KV cache memory: 4.0 GiB"]) + "\n"
    start = time.perf_counter()
    report = ingest_ok(text)
    assert time.perf_counter() - start < 10
    assert report is not None and report.ranks[0].kv_available_bytes == 4 << 30


def test_truncated_fixture_prefixes_never_fail() -> None:
    text = read_text(FIXTURES / "gpu-0.32-v1-tp2-ok.log")
    for cut in range(0, len(text), 97):
        ingest_ok(text[:cut] + "(Worker_TP0 pid=1) INFO 11-30 10:00:00 [x.py:1] tail\n")


def test_load_report_detects_logs_by_content_gzip_included(tmp_path: Path) -> None:
    """GIVEN a log saved under a .txt name and the same log gzip-compressed with a .json name
    THEN both load as logs (content decides), through kvaudit.engines.inputs.load_report."""
    text = read_text(FIXTURES / "gpu-0.32-v1-tp2-ok.log")
    plain, packed = tmp_path / "boot.txt", tmp_path / "boot.json"
    plain.write_text(text, encoding="utf-8")
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    a, b = load_report(plain), load_report(packed)
    assert dumps(a) == dumps(b) and a.source.value == "log"
    json.loads(dumps(a))


def test_truncated_gzip_is_a_bad_input_error(tmp_path: Path) -> None:
    path = tmp_path / "boot.log.gz"
    path.write_bytes(gzip.compress(b"(Worker_TP0 pid=1) INFO 11-30 10:00:00 [x.py:1] hi\n" * 1000)[:200])
    with pytest.raises(BadInputError):
        load_report(path)


def test_a_dense_brace_line_near_the_start_still_finds_the_engine_arguments():
    """Found by the property test above: after eight braces that are not vLLM's, the scan looks
    for `non-default args: {` in the rest of the line from a few characters back, which near the
    start of the text was a negative offset (str.find counts it from the end)."""
    line = ("(MainProcess pid=7881) INFO 12-02 20:55:20 [api_utils.py:286] non-default args: "
            "{'max_model_len': 1024, 'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.3}")
    text = "{" * 10 + line
    assert scan(text) == scan_exhaustive(text)
    assert scan(text).segments == ((0, len(text)),)


def test_a_knob_beyond_int64_in_a_log_is_unknown_and_the_report_round_trips() -> None:
    # found by the property above: a 40-digit max_model_len reached the report and broke its JSON contract
    text = ("(MainProcess pid=1) INFO 11-30 10:00:00 [api_utils.py:1] non-default args: {'max_model_len': "
            "1000000000000000000000000000000000000000, 'tensor_parallel_size': 7, 'model': '/tmp/boot/tiny'}\n"
            "(Worker_TP2 pid=32) INFO 11-30 13:03:00 [gpu_model_runner.py:6475] Estimated CUDA graph memory: "
            "1.27 GiB total\n")
    report = ingest_ok(text)
    assert report is not None
    assert report.config.max_model_len is None and report.config.tensor_parallel_size == 7
