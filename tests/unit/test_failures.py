"""Failure lines of vLLM startup logs, classified (engines/failures.py), on real and template lines."""

from __future__ import annotations

import pytest
from factories import DATA

from kvaudit.engines.failures import classify_line, estimated_max_model_len, find_failure_in_log
from kvaudit.schema import FailureKind

PREFIX = "(EngineCore pid=9612) ERROR 12-02 21:04:01 [core.py:1510] "
DOES_NOT_FIT = (PREFIX + "ValueError: To serve at least one request with the model's max seq len (160000), (0.34 "
                "GiB KV cache is needed, which is larger than the available KV cache memory (0.28 GiB). Based on the "
                "available memory, the estimated maximum model length is 131968. Try increasing "
                "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
DCP = (PREFIX + "RuntimeError: Worker failed with error 'Decode Context Parallelism (DCP) requires attention "
       "implementations to return the softmax LSE during decode, but AMXMLAImpl does not. Try a different backend "
       "by setting --attention-backend or disable DCP.', please check the stack trace above for the root cause")


@pytest.mark.parametrize("line, kind", [
    (DOES_NOT_FIT, FailureKind.DOES_NOT_FIT),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine.", FailureKind.DOES_NOT_FIT),
    ("ValueError: Cannot auto-fit max_model_len: not enough KV cache memory", FailureKind.DOES_NOT_FIT),
    ("ValueError: Free memory on device (70.1/79.2 GiB) on startup is less than desired GPU memory utilization "
     "(0.9, 71.3 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
     FailureKind.STARTUP_MEMORY),
    ("ValueError: Free memory on device on startup is less than desired CPU memory utilization",
     FailureKind.STARTUP_MEMORY),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
     "139.81 GiB of which 1.02 GiB is free.", FailureKind.OOM),
    ("AssertionError: Error in memory profiling. Initial free memory 80.0 GiB, current free memory 81.0 GiB.",
     FailureKind.CRASH),
    (DCP, FailureKind.REFUSED),
    ("NotImplementedError: FP8 KV cache with MLA is not supported on this backend", FailureKind.REFUSED),
    ("ValueError: chunked prefill is not supported by the CPU backend", FailureKind.REFUSED),
    ("INFO 12-02 21:04:01 [gpu_worker.py:201] Available KV cache memory: 0.28 GiB", None),
    ("WARNING: error-free line about memory", None),
])
def test_classify_line(line, kind):
    assert classify_line(line) is kind


def test_the_message_starts_at_the_exception_name():
    kind, message = find_failure_in_log(f"INFO starting\n{DCP}\n")
    assert kind is FailureKind.REFUSED
    assert message.startswith("RuntimeError: Worker failed with error 'Decode Context Parallelism (DCP)")
    assert "[core.py:1510]" not in message and "\n" not in message


def test_does_not_fit_wins_over_a_later_crash_line_that_reports_it():
    log = "\n".join([DOES_NOT_FIT, PREFIX + "AssertionError: Error in memory profiling. whatever", "done"])
    kind, message = find_failure_in_log(log)
    assert kind is FailureKind.DOES_NOT_FIT and message.startswith("ValueError: To serve at least one request")


def test_among_equally_telling_lines_the_first_wins_as_in_ingest():
    log = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert find_failure_in_log(log) == (FailureKind.OOM, "torch.OutOfMemoryError: CUDA out of memory. Tried to "
                                                         "allocate 1.00 GiB")
    # the log engine reads the same failure from the same lines
    from kvaudit.engines.logs import report_from_log_text
    failure = report_from_log_text("INFO 12-03 17:13:39 [core.py:1] starting\n" + log, "run.log").failure
    assert (failure.kind, failure.message) == find_failure_in_log(log)


def test_colour_codes_are_stripped():
    kind, message = find_failure_in_log("\x1b[1;31mERROR\x1b[0m ValueError: No available memory for the cache "
                                        "blocks.\x1b[0m")
    assert kind is FailureKind.DOES_NOT_FIT and "\x1b" not in message


def test_lines_too_long_to_be_a_message_are_skipped_and_messages_are_capped():
    assert find_failure_in_log("ValueError: No available memory for the cache blocks " + "x" * 20_001) is None
    _, message = find_failure_in_log("ValueError: No available memory for the cache blocks " + "x" * 5000)
    assert len(message) == 400 and message.endswith("…")


def test_a_clean_log_has_no_failure():
    assert find_failure_in_log("INFO all good\nINFO Available KV cache memory: 10 GiB\n") is None
    assert estimated_max_model_len("INFO all good") is None


def test_the_real_does_not_fit_log():
    # GIVEN the real vLLM log of a boot that did not fit (kvaudit run5)
    text = (DATA / "run5.vllm.log").read_text(encoding="utf-8")
    kind, message = find_failure_in_log(text)
    assert kind is FailureKind.DOES_NOT_FIT
    assert message.startswith("ValueError: To serve at least one request with the model's max seq len (160000)")
    assert estimated_max_model_len(text) == 131968


def test_estimated_max_model_len_takes_the_last_estimate():
    text = "the estimated maximum model length is 1000.\n...\nthe estimated maximum model length is 2048."
    assert estimated_max_model_len(text) == 2048


# ------------------------------------------------------------------------------------------
# One decision for every engine (failures.decide_failure)

from kvaudit.engines.failures import Candidate, Evidence, decide_failure, rank_error_failure  # noqa: E402
from kvaudit.schema import Failure, Phase  # noqa: E402


def test_a_ranks_exception_is_classified_by_the_catalogue():
    oom = rank_error_failure(1, {"error": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate"},
                             Phase.REPLAY)
    assert (oom.evidence, oom.item) == (Evidence.RANK_ERROR, Failure(Phase.REPLAY, 1, FailureKind.OOM,
                                                                     "CUDA out of memory. Tried to allocate"))
    gone = rank_error_failure(0, {"error": "RuntimeError", "message": "no CUDA device is visible to torch"},
                              Phase.BASELINE)
    assert gone.item.kind is FailureKind.NO_DEVICE
    crash = rank_error_failure(0, {"error": "KeyError", "message": "'layers.0'"}, Phase.LOAD)
    assert crash.item.kind is FailureKind.CRASH


def test_the_decision_orders_by_evidence_then_priority_then_position():
    def cand(evidence, priority, position, name):
        return Candidate(evidence, name, priority, position)
    # a rank's OOM (priority 0) loses to any log line: vLLM's words come first
    assert decide_failure([cand(Evidence.RANK_ERROR, 0, (0,), "rank oom"),
                           cand(Evidence.LOG_LINE, 1, (9,), "log crash")]).item == "log crash"
    # among log lines the memory cause wins over an earlier crash; among equals the earliest
    assert decide_failure([cand(Evidence.LOG_LINE, 1, (1,), "crash"), cand(Evidence.LOG_LINE, 0, (5,), "oom"),
                           cand(Evidence.LOG_LINE, 0, (3,), "first oom")]).item == "first oom"
    # kvaudit's own stop beats everything; no evidence is no failure
    assert decide_failure([cand(Evidence.NO_RECORDS, 0, (), "none"), cand(Evidence.STOPPED, 0, (), "timeout"),
                           cand(Evidence.LOG_LINE, 0, (0,), "oom")]).item == "timeout"
    assert decide_failure([]) is None


def test_among_ranks_the_memory_cause_wins_over_a_rank_that_only_saw_it():
    from kvaudit.engines import measured_ranks
    from kvaudit.engines.vllm.supervise import run_failure
    folded = [measured_ranks.fold(0, [{"type": "error", "phase": "replay", "error": "RuntimeError",
                                       "message": "NCCL error: remote process exited"}]),
              measured_ranks.fold(1, [{"type": "error", "phase": "replay", "error": "OutOfMemoryError",
                                       "message": "CUDA out of memory. Tried to allocate 2.00 GiB"}])]
    failure = run_failure(folded, None, "", stop=None, exit_code=1, timeout_s=60)
    assert (failure.rank, failure.kind, failure.phase) == (1, FailureKind.OOM, Phase.REPLAY)


@pytest.mark.parametrize(("level", "found"), [("ERROR", True), ("WARNING", False), ("INFO", False)])
def test_a_runs_own_log_reads_a_line_at_a_handled_level_as_no_death(level, found):
    # the same rule as for a user's log (failures.handled): an exception vLLM logs at WARNING went on
    log = (f"(EngineCore pid=7) {level} 12-03 14:49:28 [base.py:380] torch.OutOfMemoryError: CUDA out of memory. "
           f"Tried to allocate 2.00 GiB\n")
    message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert find_failure_in_log(log) == ((FailureKind.OOM, message) if found else None)
