"""Real pastes, round twenty-four: a course doc's illustrative log lines and troubleshooting table (no boot at all),
and vllm-ascend's DP notes (two runs' errors, `^M` and `^[[` in caret form, `VllmWorker rank=6`). Each test names its
source and what kvaudit read before; the data are the files as the round saved them
(tests/unit/data/round_twenty_four), a case where the rule must not fire beside each rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.unwrap import clean
from kvaudit.errors import BadInputError
from kvaudit.schema import Report

_DATA = Path(__file__).parent / "data" / "round_twenty_four"
COURSE = "10_code71495569791_course_doc_illustrative_landmarks_and_troubleshooting_error_table.log"
"""A DGX Spark course's module 02 (code id 71495569791): an "Expected log landmarks" block whose lines have `…` for
their time and file (`INFO … Available KV cache memory: 33.4 GiB`), "(Numbers are illustrative. Note yours.)", and a
Troubleshooting table whose rows quote vLLM's errors in backticks. No boot."""
ASCEND = "14_code55786078040_ascend_two_error_msgs_two_runs_caret_ansi_caret_M.log"
"""vllm-ascend DP notes (code id 55786078040): the `data_parallel.py --dp-size=2 --tp-size=8` command, then "error
msg 1" (04-17, a V0 `VllmWorkerProcess pid=176029` dying in load_model, every line ending in `^M`, colours as `^[[`)
and "error msg 2" (04-22, V1: `EngineCore_1 pid=382867`, `EngineCore_0 pid=382869`, `VllmWorker rank=6 pid=384550`)."""
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
    2,918,000 tokens from the illustration. Now the one-line refusal a document with no log gets, naming the
    illustration's lines (a newcomer read "looked for `Model loading took`" as contradicting the file, stop 55)."""
    with pytest.raises(BadInputError, match=_NO_LOG) as refused:
        _report(COURSE)
    assert ("(lines 16, 17, 18 show vLLM's records with `…` where the time and file go, as a document's example "
            "does; looked for") in str(refused.value)


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


def _run_one() -> str:
    text = _text(ASCEND)
    return text[text.index("# error msg 1"):text.index("# error msg 2")]


_HCCL_END = "HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_)), error code is 7"


@pytest.mark.parametrize("frame", ["| {} |", "  | {}", "│ {} │"])
def test_a_log_framed_by_bars_is_still_read(frame: str) -> None:
    """Must not fire: run 1 of the vllm-ascend notes inside a terminal pane's frame, closed by a bar or not: its
    records keep their heads, and its exception line has no bar inside, so it is no table row (a closing `|` is
    not taken off the message, as before)."""
    text = "".join(frame.format(line) + "\n" for line in _run_one().replace("^M", "").splitlines())
    report = _report(ASCEND, text)
    assert report.failure is not None and report.failure.phase is not None
    assert _HCCL_END in report.failure.message


def test_a_caret_m_at_a_lines_end_is_its_line_break() -> None:
    """The vllm-ascend notes: CRLF lines pasted as `^M`. Before: the failure's message ended in "error code is 7^M".
    Must not fire: a traceback's `^^^^^` underline keeps its own carets (only the last two characters go), and a
    real `\\r` reads the same."""
    report = _report(ASCEND, _run_one())
    assert report.failure is not None and report.failure.message.endswith(_HCCL_END)
    underline = "    ^^^^^^^^^^^^^M"
    assert clean(underline) == "    ^^^^^^^^^^^^"
    assert clean("a ^M b") == "a ^M b"
    crlf = _report(ASCEND, _run_one().replace("^M\n", "\r\n"))
    assert crlf.failure is not None and crlf.failure.message == report.failure.message


_AT_LEAST = "tensor_parallel_size × pipeline_parallel_size: ≥ 7, sizes not stated (worker names show rank 6"


def test_a_worker_rank_above_zero_leaves_tp_unknown_not_one() -> None:
    """The vllm-ascend notes: `VllmWorker rank=6`, and a command whose sizes are the data-parallel example's own
    flags. Before: tensor_parallel_size 1, vLLM's default, no word of the ranks. Since round twenty-four b the
    example's `--tp-size=8` is read as what it passes to LLM(...): TP 8, which holds rank 6; with it gone, TP is
    unknown and the warning says how far the ranks reach."""
    assert _report(ASCEND).config.tensor_parallel_size == 8
    report = _report(ASCEND, _text(ASCEND).replace("--tp-size=8", ""))
    assert report.config.tensor_parallel_size is None
    assert any(w.startswith(_AT_LEAST) for w in report.warnings)


def test_a_stated_size_that_covers_the_ranks_keeps_the_default() -> None:
    """Must not fire: the same paste with `--pipeline-parallel-size=8` typed for its sizes: PP 8 holds rank 6, so TP
    stays vLLM's default 1; with `--tensor-parallel-size=8` TP is 8. (The paste's own `--dp-size=2 --tp-size=8` are
    the data-parallel example's, read since round twenty-four b: TP 8.)"""
    text = _text(ASCEND)  # the command is printed above run 1 and again below run 2, which the report reads
    assert "--dp-size=2 --tp-size=8" in text
    pp = _report(ASCEND, text.replace("--dp-size=2 --tp-size=8", "--pipeline-parallel-size=8 "))
    assert pp.config.tensor_parallel_size == 1
    assert not any(w.startswith("tensor_parallel_size × ") for w in pp.warnings)
    tp = _report(ASCEND, text.replace("--dp-size=2", "--tensor-parallel-size=8"))
    assert tp.config.tensor_parallel_size == 8


_TWO_RUNS = ": two runs pasted together: records up to 04-17 15:30:42 (pid 176029) and, from line 66, records of " \
            "04-22 17:08:49 (pid 382867, 382869), a day or more later, no process in both"


def test_two_runs_days_apart_with_no_process_in_common_are_read_as_the_later_run() -> None:
    """The vllm-ascend notes. Before: run 1's failure (rank 1, V0) with run 2's layout, and no word of run 2 (04-22,
    V1, its engine cores' "got fatal signal from worker processes"). Now, as for restarts, the later run, whose lines
    state a failure: a worker's death, which the engine cores' fatal signal says (round twenty-four b: rank 6's
    traceback, read at first, is its own shutdown, `raise SystemExit()` in vLLM's signal handler).

    The rule is the smallest that is safe: the records jump forward by more than a day and no pid prints on both
    sides. Dates alone would fire on one container restarted a day later, whose `APIServer pid=1` prints on both
    sides and which _last_server_start already reads; pids alone would fire on every paste that kept two workers'
    lines; V0 against V1 is not needed once both hold. The figures of the two runs never mix."""
    report = _report(ASCEND)
    assert any(w.endswith("the report reads the later one; the earlier one's figures and failure are not in it")
               and _TWO_RUNS in w for w in report.warnings)
    assert report.failure is not None and _HCCL_END not in report.failure.message
    assert (report.failure.kind, report.failure.rank) == ("worker_died", None)
    assert report.engine.generation == "V1"


def test_the_earlier_run_is_read_where_the_later_states_nothing() -> None:
    """Run 2 cut to a record that states nothing: run 1 is read, its HCCL failure in load."""
    quiet = "# error msg 2:\n(EngineCore_1 pid=382867) INFO 04-22 17:08:40 [core.py:100] Waiting for the workers.\n"
    report = _report(ASCEND, _run_one() + quiet)
    assert any("the report reads the earlier one, as the later one's lines state no figure or failure" in w
               for w in report.warnings)
    assert report.failure is not None and report.failure.message.endswith(_HCCL_END)


@pytest.mark.parametrize("change", [
    ("04-22 17:08", "04-17 17:08"),  # the same day: one run's lines, for all the dates say
    ("pid=382867", "pid=176029"),  # a process on both sides: one run
])
def test_two_runs_need_both_a_day_apart_and_no_process_in_common(change: tuple[str, str]) -> None:
    """Must not fire: the same paste with run 2 on run 1's day, or with one of its engine cores carrying run 1's
    pid; and run 2 alone."""
    report = _report(ASCEND, _text(ASCEND).replace(*change))
    assert not any("two runs pasted together" in w for w in report.warnings)
    text = _text(ASCEND)
    alone = _report(ASCEND, text[text.index("# error msg 2"):])
    assert not any("two runs pasted together" in w for w in alone.warnings)
