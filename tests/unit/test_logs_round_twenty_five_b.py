"""Real pastes, round twenty-five (findings F3, F4, F5): a paste whose line breaks became spaces, with NCCL's own
`NCCL INFO` records run on after vLLM's (vllm#21661), a 0.8 data-parallel boot whose engine cores are `EngineCore_4`
and `EngineCore_6` (trl#3310), and one comment that holds three runs of one model (vllm#10517). Each test names its
source and what kvaudit read before; the data are the files as the round saved them
(tests/unit/data/round_twenty_five), a case where the rule must not fire beside each rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.lines import split_joined_records
from kvaudit.engines.logs.parse import parse_file
from kvaudit.engines.logs.ranks import _served_runs
from kvaudit.errors import BadInputError
from kvaudit.schema import Report

_DATA = Path(__file__).parent / "data" / "round_twenty_five"
FLATTENED = "10_vllm21661_v1_flattened_whitespace_nccl_unhandled_cuda_error_with_nccl_info.log"
"""vllm#21661, turn 5: a V1 worker's traceback logged by `[v1/executor/multiproc_executor.py:597]` with no process
tag, its line breaks turned into spaces, ending `RuntimeError: NCCL error: unhandled cuda error (run with
NCCL_DEBUG=INFO for details) 02fdc141b80d:213:213 [1] NCCL INFO cudaDriverVersion 12080 02fdc141b80d:213:213 [1] N`."""
DP_CORES = "09_trl3310_v1_dp8_engine_cores_interleaved_pynccl_init_exception.log"
"""trl#3310, turn 8: two 0.8 engine cores of a DP 8 run, `(EngineCore_4 pid=2095686)` and `(EngineCore_6
pid=2095499)`, dying in NCCL's communicator init, their lines interleaved."""
THREE_RUNS = "11_vllm10517_v06x_rtx3090_llama8b_three_runs_20k_ok_29k_bad_35k_ok.log"
"""vllm#10517, a comment by kaspersiminski: three fenced blocks of one model on an RTX 3090, "20k - OK" (`Maximum
concurrency for 20000 tokens`), "29k - BAD" (29000, and the KV error) and "35k - OK", cut after its profiling line."""
V0_UNTAGGED = "04_qanything302_v0_old_qwen7b_gpu_blocks_0_stderr_prefix.log"
"""QAnything#302: an old V0 single-GPU boot, `llm_engine.py:…]` records with no process tag, `# GPU blocks: 0`."""
V1_UNTAGGED = "05_weclone83_v1_085_single_3090_weights_14gb_compile_then_engine_core_exception.log"
"""WeClone#83: a V1 0.8.5 boot on one RTX 3090, `[core.py:343]` records with no process tag, the traceback cut."""
ASCEND_TP = "06_ascend3843_qwen3next80b_910b4_tp8_available_memory_0_engine_failed.log"
"""vllm-ascend#3843: `(Worker_TP0 pid=…)`, `_TP2`, `_TP4` and `_TP7` print `Available memory: 0`."""


def _text(name: str) -> str:
    return (_DATA / name).read_text(encoding="utf-8")


def _report(name: str, text: str | None = None) -> Report:
    return report_from_log_text(_text(name) if text is None else text, name)


_NCCL_ERROR = "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
_WORKER_ERROR = f"ERROR 11-04 18:02:56 [v1/executor/multiproc_executor.py:597] {_NCCL_ERROR}"


# --------------------------------------------------------------------------------------------
# F3: NCCL's debug records run on after vLLM's, and an untagged worker's failure on no rank


def test_nccl_records_run_on_after_the_failure_are_not_its_message() -> None:
    """The flattened paste, whole. Before: "crash on rank 0: RuntimeError: NCCL error: unhandled cuda error (run with
    NCCL_DEBUG=INFO for details) 02fdc141b80d:213:213 [1] NCCL INFO cudaDriverVersion 12080 02fdc141b80d:213:213 [1]
    N". Now the NCCL records are lines of their own; `(run with NCCL_DEBUG=INFO for details)` is the error's own, and
    the note counts the 7 vLLM records that ran on (6 before the cut frame opening the first line was read as a frame
    of its own: round twenty-four b, G2)."""
    report = _report(FLATTENED)
    assert report.failure is not None
    assert (report.failure.message, report.failure.rank) == (_NCCL_ERROR, None)
    assert report.warnings == (f"{FLATTENED}: 7 vLLM records ran on after another record on the same line, as a log "
                               f"viewer copies them: each was read as a line of its own",)


def test_an_nccl_record_run_on_after_a_vllm_record_is_split_off_and_not_counted() -> None:
    """The NCCL heads after a vLLM record on one line each start a line; the count is of vLLM's records only. A cut
    head (`… [1] N`) is no head and stays in the record before it."""
    line = (f"{_WORKER_ERROR} 02fdc141b80d:213:213 [1] NCCL INFO cudaDriverVersion 12080 "
            f"02fdc141b80d:213:215 [1] NCCL WARN Cuda failure 'out of memory' 02fdc141b80d:213:213 [1] N\n")
    text, split = split_joined_records(line)
    assert split == 0
    assert text.splitlines() == [
        _WORKER_ERROR,
        "02fdc141b80d:213:213 [1] NCCL INFO cudaDriverVersion 12080",
        "02fdc141b80d:213:215 [1] NCCL WARN Cuda failure 'out of memory' 02fdc141b80d:213:213 [1] N"]


@pytest.mark.parametrize("line", [
    # a Ray worker's NCCL record: its process tags are its own (round twenty's ROCm log)
    "(EngineCore_DP0 pid=742) (RayWorkerWrapper pid=927) corona:927:927 [0] NCCL INFO Bootstrap: Using eth0",
    # a container's prefix before one NCCL record
    "vllm-1  | 2025-11-04T18:02:56.123Z 02fdc141b80d:213:213 [1] NCCL INFO cudaDriverVersion 12080",
    # NCCL's hint in vLLM's message has no `host:pid:tid [n]` head
    _WORKER_ERROR,
])
def test_a_line_of_one_nccl_record_or_nccls_hint_is_not_split(line: str) -> None:
    assert split_joined_records(line + "\n") == (line + "\n", 0)


def test_an_nccl_record_on_the_next_line_does_not_continue_the_failure() -> None:
    """Not flattened: the NCCL record on the line after the error. Before: its host name's digit (`02fdc…`) made it
    the rest of the error's message."""
    report = _report(FLATTENED, f"{_WORKER_ERROR}\n02fdc141b80d:213:213 [1] NCCL INFO cudaDriverVersion 12080\n")
    assert report.failure is not None and report.failure.message == _NCCL_ERROR


def test_an_untagged_workers_failure_names_no_rank() -> None:
    """The paste's error record alone (/tmp/r25/t10_min.log in the round). Before: "crash on rank 0", with no note
    either: multiproc_executor.py's WorkerProc runs where the world has 2 ranks or more, so the record names none."""
    report = _report(FLATTENED, _WORKER_ERROR + "\n")
    assert report.failure is not None
    assert (report.failure.message, report.failure.rank) == (_NCCL_ERROR, None)


def test_an_untagged_workers_failure_in_a_world_of_one_is_rank_0() -> None:
    """Must not fire: a command that states TP 1 (the mp executor forced for one worker): one rank, rank 0."""
    report = _report(FLATTENED, f"vllm serve Qwen/Qwen3-8B --tensor-parallel-size 1\n{_WORKER_ERROR}\n")
    assert report.failure is not None
    assert (report.failure.message, report.failure.rank) == (_NCCL_ERROR, 0)


def test_an_untagged_workers_failure_on_vllms_cpu_platform_is_rank_0() -> None:
    """Must not fire: vLLM's CPU platform runs the mp executor for a world of 1 too."""
    text = f"INFO 11-04 18:02:50 [__init__.py:235] Automatically detected platform cpu.\n{_WORKER_ERROR}\n"
    report = _report(FLATTENED, text)
    assert report.failure is not None
    assert (report.failure.message, report.failure.rank) == (_NCCL_ERROR, 0)


@pytest.mark.parametrize(("name", "rank", "message"), [
    (V0_UNTAGGED, 0, "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                     "when initializing the engine."),
    (V1_UNTAGGED, 0, "Traceback (most recent call last): the boot died; its exception line is not in the log"),
])
def test_an_untagged_single_process_log_keeps_rank_0(name: str, rank: int, message: str) -> None:
    """Must not fire: V0's `llm_engine.py` and V1's in-process `core.py` records with no process tag, as before."""
    report = _report(name)
    assert report.failure is not None
    assert (report.failure.message, report.failure.rank) == (message, rank)
    assert report.warnings == ("the log names no process (no `(Worker_TP0 pid=…)` prefixes): its figures are taken "
                               "as one rank, rank 0",)


def test_an_untagged_core_records_failure_alone_keeps_rank_0() -> None:
    """Must not fire: a one-line `[core.py:…]` OOM (an untagged single-process log's)."""
    line = ("ERROR 11-04 18:02:56 [core.py:343] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
            "GiB. GPU 0 has a total capacity of 23.57 GiB of which 1.02 GiB is free.\n")
    report = _report(FLATTENED, line)
    assert report.failure is not None and report.failure.rank == 0


# --------------------------------------------------------------------------------------------
# F4: the DP note quotes the names as the log spells them


def test_the_dp_note_quotes_engine_cores_named_without_dp() -> None:
    """The trl paste, whole. Before: "process names show _DP4, _DP6", names the log does not hold."""
    assert _report(DP_CORES).warnings == (
        "data_parallel_size: ≥ 7, size not stated (process names show EngineCore_4, EngineCore_6; one engine core "
        "per DP rank)",)


def test_the_dp_note_keeps_the_suffix_of_engine_cores_named_with_dp() -> None:
    """Must not fire: 0.9's `EngineCore_DP4` (the trl paste with its engine cores renamed so)."""
    text = _text(DP_CORES).replace("EngineCore_4 ", "EngineCore_DP4 ").replace("EngineCore_6 ", "EngineCore_DP6 ")
    assert _report(DP_CORES, text).warnings == (
        "data_parallel_size: ≥ 7, size not stated (process names show _DP4, _DP6; one engine core per DP rank)",)


def test_the_tp_note_keeps_the_workers_suffixes() -> None:
    """Must not fire: the Ascend paste's `Worker_TP7` names, as before."""
    assert _report(ASCEND_TP).warnings == (
        "tensor_parallel_size: ≥ 8, size not stated (worker names show _TP0, _TP2, _TP4, _TP7; vLLM adds the suffix "
        "only when the group has 2 or more ranks)",)


# --------------------------------------------------------------------------------------------
# F5: a file of more than two runs says how many


def test_three_runs_in_one_paste_are_counted_three() -> None:
    """The vllm#10517 comment, whole. Before: "the logs of two engine runs in one file (served length 20000, then
    29000)". The third run's load line comes after the second's served length; its own length is cut off."""
    with pytest.raises(BadInputError) as refused:
        _report(THREE_RUNS)
    assert str(refused.value) == (
        f"{THREE_RUNS}: the logs of three engine runs in one file (served length 20000, then 29000, then one the log "
        f"does not state): split it and ingest each run on its own, or compare them with kvaudit diff")


def test_two_runs_in_one_paste_are_still_two() -> None:
    """Must not fire: the comment cut before its third block."""
    text = _text(THREE_RUNS)
    with pytest.raises(BadInputError) as refused:
        _report(THREE_RUNS, text[:text.index("35k - OK")])
    assert str(refused.value) == (
        f"{THREE_RUNS}: the logs of two engine runs in one file (served length 20000, then 29000): split it and "
        f"ingest each run on its own, or compare them with kvaudit diff")


_TP_BOOT = """(Worker_TP0 pid=101) INFO 12-02 10:00:00 [gpu_model_runner.py:1186] Model loading took 7.49 GiB and 9.1 seconds
(Worker_TP1 pid=102) INFO 12-02 10:00:00 [gpu_model_runner.py:1186] Model loading took 7.49 GiB and 9.2 seconds
(EngineCore_DP0 pid=100) INFO 12-02 10:00:30 [kv_cache_utils.py:1087] Maximum concurrency for {n} tokens per request: 1.56x
"""


def test_tp_workers_each_printing_the_load_line_are_one_run() -> None:
    """Must not fire: two TP boots, each worker printing `Model loading took` once: two runs, not four."""
    text = _TP_BOOT.format(n=20000) + _TP_BOOT.format(n=29000).replace("pid=10", "pid=20")
    assert _served_runs(parse_file(_TP_BOOT.format(n=20000), "x")) == [20000]
    with pytest.raises(BadInputError, match=r"the logs of two engine runs in one file \(served length 20000, then "
                                            r"29000\)"):
        _report(THREE_RUNS, text)


def test_untagged_load_lines_before_one_served_length_are_one_run() -> None:
    """Must not fire: V0's driver and a worker whose tag the paste dropped each print the load line in one boot."""
    boot = ("INFO 12-02 10:00:00 model_runner.py:1072] Loading model weights took 14.9888 GB\n"
            "INFO 12-02 10:00:00 model_runner.py:1072] Loading model weights took 14.9888 GB\n"
            "INFO 12-02 10:00:30 executor_base.py:110] Maximum concurrency for {n} tokens per request: 1.56x\n")
    assert _served_runs(parse_file(boot.format(n=20000) + boot.format(n=29000), "x")) == [20000, 29000]
