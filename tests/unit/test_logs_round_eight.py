"""Real pastes, round eight (tests/fixtures/logs/public/119–121, each thread in its header; what a
careful reader takes from each is in test_logs_public.EXPECTED). Here, the general rules they
needed, on their own: an ERROR record that ends the log is a crash whose cause is not shown; the
message `logger.exception` logs right before a traceback is that traceback's cause; V0's block
count names the platform's device (`# rocm blocks: N`); V0's graph capture comes after KV sizing.
"""

from __future__ import annotations

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.facts import KV_BLOCK_DEVICES
from kvaudit.engines.logs.parse import CLOSING_ERROR, LOGGED_WITH
from kvaudit.schema import FailureKind, Phase

_BLOCKS = "INFO 06-12 08:12:23 distributed_gpu_executor.py:45] # GPU blocks: 507, # CPU blocks: 1024"
_CUT = "ERROR 06-12 08:12:23 worker_base.py:145] Error execut"
_LOAD = "INFO 08-16 18:12:09 [model_runner.py:1203] Model loading took 4.1367 GiB and 15.434767 seconds"
_CAPTURE = ("INFO 08-16 18:12:26 [model_runner.py:1513] Capturing cudagraphs for decoding. This may lead to "
            "unexpected consequences if the model is not static.")
_E = "ERROR 08-16 18:12:26 [engine.py:458] "
_TRACEBACK = [_E + "Traceback (most recent call last):",
              _E + '  File "/x/vllm/engine/multiprocessing/engine.py", line 446, in run_mp_engine',
              _E + "    engine = MQLLMEngine.from_vllm_config("]


def report_of(lines: list[str]):
    return report_from_log_text("\n".join(lines) + "\n", "paste.log")


def test_an_error_record_that_ends_the_log_is_a_crash_whose_cause_is_not_shown() -> None:
    report = report_of([_BLOCKS, _CUT, "", "  "])  # blank lines after it change nothing
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.CRASH, Phase.KV)
    assert report.failure.message == "Error execut" + CLOSING_ERROR
    assert report.verdict.value == "unknown"


@pytest.mark.parametrize("lines", [
    [_BLOCKS, _CUT, "INFO 06-12 08:12:30 llm_engine.py:100] init engine (profile, create kv cache, warmup model) "
                    "took 9.0 seconds"],  # the boot went on past the record
    [_BLOCKS, "WARNING 06-12 08:12:23 worker_base.py:145] Error execut"],  # not an ERROR
    [_BLOCKS, "ERROR 06-12 08:12:23 worker_base.py:145] "],  # an ERROR record without a word
])
def test_an_error_record_the_log_goes_on_past_or_a_lower_level_is_no_failure(lines: list[str]) -> None:
    assert report_of(lines).failure is None


def test_a_stated_cause_wins_over_the_error_record_that_ends_the_log() -> None:
    report = report_of([_BLOCKS, "ValueError: No available memory for the cache blocks. Try increasing "
                        "`gpu_memory_utilization` when initializing the engine.", _CUT])
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT


def test_the_message_logged_before_a_traceback_is_its_cause_and_v0s_capture_its_phase() -> None:
    report = report_of([_LOAD, _CAPTURE, _E + "size_k must divisible by BLOCK_SIZE_K", *_TRACEBACK])
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.CRASH, Phase.CAPTURE)
    assert report.failure.message == "size_k must divisible by BLOCK_SIZE_K" + LOGGED_WITH


@pytest.mark.parametrize("before", [
    "ERROR 08-16 18:12:26 [worker.py:99] size_k must divisible by BLOCK_SIZE_K",  # another source line
    "(VllmWorkerProcess pid=7) ERROR 08-16 18:12:26 [engine.py:458] size_k must divisible",  # another process
    "INFO 08-16 18:12:26 [engine.py:458] size_k must divisible by BLOCK_SIZE_K",  # not an ERROR
])
def test_a_line_before_the_traceback_from_elsewhere_is_not_its_message(before: str) -> None:
    report = report_of([_LOAD, before, *_TRACEBACK])
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.message.startswith("Traceback (most recent call last)")


def test_a_cause_the_line_before_states_itself_is_not_rewritten() -> None:
    failed = "(EngineCore_DP0 pid=9) ERROR 11-25 08:05:06 [core.py:708] EngineCore failed to start."
    tb = "(EngineCore_DP0 pid=9) ERROR 11-25 08:05:06 [core.py:708] Traceback (most recent call last):"
    report = report_of([failed, tb])
    assert report.failure is not None and report.failure.message == "EngineCore failed to start."


@pytest.mark.parametrize("device", KV_BLOCK_DEVICES)
def test_v0s_block_count_under_every_device_name_is_the_kv_block_count(device: str) -> None:
    report = report_of([f"INFO 06-05 13:03:17 [executor_base.py:112] # {device} blocks: 37011, # CPU blocks: 7281",
                        "INFO 06-05 13:03:17 [executor_base.py:117] Maximum concurrency for 2048 tokens per "
                        "request: 289.15x"])
    assert report.capacity.kv_tokens == 37011 * 16


def test_the_swap_spaces_cpu_block_count_is_not_the_kv_block_count() -> None:
    assert report_of(["INFO 06-05 13:03:17 [executor_base.py:112] # CPU blocks: 7281"]).capacity.kv_tokens is None


@pytest.mark.parametrize("device", ["rocm", "cuda", "ROCM"])
def test_a_failure_after_v0s_block_count_is_past_kv_sizing(device: str) -> None:
    report = report_of([_LOAD, f"INFO 08-16 18:12:25 [executor_base.py:113] # {device} blocks: 9000, # CPU blocks: "
                        "2000", "Traceback (most recent call last):"])
    assert report.failure is not None and report.failure.phase is Phase.KV
