"""Real pastes, round twenty-four: a course doc's illustrative log lines and troubleshooting table (no boot at all),
and vllm-ascend's DP notes (two runs' errors, `^M` and `^[[` in caret form, `VllmWorker rank=6`). Each test names its
source and what kvaudit read before; the data are the files as the round saved them
(tests/unit/data/round_twenty_four), a case where the rule must not fire beside each rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.errors import BadInputError
from kvaudit.schema import Report

_DATA = Path(__file__).parent / "data" / "round_twenty_four"
COURSE = "10_code71495569791_course_doc_illustrative_landmarks_and_troubleshooting_error_table.log"
"""A DGX Spark course's module 02 (code id 71495569791): an "Expected log landmarks" block whose lines have `…` for
their time and file (`INFO … Available KV cache memory: 33.4 GiB`), "(Numbers are illustrative. Note yours.)", and a
Troubleshooting table whose rows quote vLLM's errors in backticks. No boot."""
EKS = "12_code55796019153_eks_kubectl_logs_v0151_args_ellipsis_then_startup_complete.log"
"""An EKS Auto Mode doc (vLLM 0.15.1, code id 55796019153): `kubectl logs`, the banner and `non-default args`, a
line `...` where the doc cut the log, then `Application startup complete.`"""


def _text(name: str) -> str:
    return (_DATA / name).read_text(encoding="utf-8")


def _report(name: str, text: str | None = None) -> Report:
    return report_from_log_text(_text(name) if text is None else text, name)


_NO_LOG = "neither a kvaudit report nor a vLLM log: no vLLM log lines found"


def test_a_course_docs_illustrative_lines_and_table_are_no_log() -> None:
    """The course doc, whole. Before: verdict fail, "boot failed in kv on rank 0 (does_not_fit): Symptom | Cause |
    Diagnose | Fix | ---|…" (the table's rows joined into one failure), weights 0.93 GiB and KV 33.4 GiB =
    2,918,000 tokens from the illustration. Now the one-line refusal a document with no log gets."""
    with pytest.raises(BadInputError, match=_NO_LOG):
        _report(COURSE)


def _landmarks() -> str:
    text = _text(COURSE)
    return text[text.index("Expected log landmarks"):text.index("(Numbers are illustrative")]


def test_records_with_an_ellipsis_for_their_time_are_an_illustration() -> None:
    """The "Expected log landmarks" block alone. Before: owners.weights 0.93 GiB, KV 33.4 GiB, 2,918,000 tokens.
    vLLM's logger never prints `…` where `MM-DD hh:mm:ss [file.py:N]` goes."""
    with pytest.raises(BadInputError, match=_NO_LOG):
        _report(COURSE, _landmarks())


def test_the_same_lines_with_a_time_and_file_are_records() -> None:
    """Must not fire: the landmarks with a record head each are a log, `…` inside a message included (`Capturing
    CUDA graphs … took 12 seconds`); and a paste that shortened only the time (`(EngineCore pid=...) INFO ...
    [kv_cache_utils.py:1733] GPU KV cache size: 7,584 tokens`, round twenty-one) is still read."""
    text = _landmarks().replace("INFO … ", "INFO 05-28 08:00:00 [gpu_worker.py:1] ")
    report = _report(COURSE, text)
    assert report.capacity.kv_tokens == 2918000
    assert report.capacity.kv_available_bytes == round(33.4 * 2**30)
    hybrid = (Path(__file__).parent / "data" / "round_twenty_one" / "hybrid_kv_manager_off.log").read_text(
        encoding="utf-8")
    assert report_from_log_text(hybrid, "x").capacity.kv_tokens == 7584


def test_a_cut_marked_with_dots_between_records_still_reads() -> None:
    """Must not fire: the EKS doc's `...` alone on a line between the args and the server's lines: the model and a
    started server, as before."""
    report = _report(EKS)
    assert report.config.model == "s3://genai-models-080403789922/Ministral-3-8B-Instruct-2512/"
    assert report.failure is None and report.verdict.value == "ok"


def _troubleshooting() -> str:
    text = _text(COURSE)
    return text[text.index("## 7. Troubleshooting"):]


def test_an_error_quoted_in_a_markdown_table_row_is_no_failure() -> None:
    """The Troubleshooting table below the landmarks given a record head each (a log above a doc's table):
    `| `No available memory for the cache blocks` | weights fit, no room for KV | … |`. Before: failure
    does_not_fit in kv, its message the whole table ("Symptom | Cause | Diagnose | Fix | ---|…"). The table alone
    was refused before as well (its wordings are in backticks: parse._mentions_only)."""
    landmarks = _landmarks().replace("INFO … ", "INFO 05-28 08:00:00 [gpu_worker.py:1] ")
    report = _report(COURSE, landmarks + "\n" + _troubleshooting())
    assert report.failure is None
    assert report.capacity.kv_tokens == 2918000
    with pytest.raises(BadInputError, match=_NO_LOG):
        _report(COURSE, _troubleshooting())
