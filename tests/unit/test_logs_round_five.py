"""Real pastes, round five (tests/fixtures/logs/public/88-… to 99-…, each with its thread in its
header; what a careful reader takes from each is in test_logs_public.EXPECTED). Here, each general
rule they needed, on its own: the keywords of a pasted offline `LLM(...)` call, an ERROR record the
paste cut off before its message, and the KV check's ValueError cut after the size it needs.
"""

from __future__ import annotations

import pytest

from kvaudit.engines.failures import BARE
from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.facts import FactKind, facts_from_message
from kvaudit.engines.logs.scan import scan, scan_exhaustive
from kvaudit.schema import FailureKind, Phase, Verdict
from kvaudit.units import gib_to_bytes


def command_args(line: str) -> dict[str, float | int]:
    return dict(f.value for f in facts_from_message(line) if f.kind is FactKind.COMMAND_ARG)


# --------------------------------------------------------------------------------------------
# 1. An offline `LLM(...)` call's keywords are the boot's knobs, as a command line's flags are


@pytest.mark.parametrize("line, args", [
    # vllm#44376: a call spread over lines, one keyword a line, a Python numeral with `_`
    ("    tensor_parallel_size=2,", {"tensor_parallel_size": 2}),
    ("    max_model_len=30_000,", {"max_model_len": 30000}),
    ("    gpu_memory_utilization=0.95,", {"gpu_memory_utilization": 0.95}),
    ("    gpu_memory_utilization=0.85)", {"gpu_memory_utilization": 0.85}),  # the last keyword closes the call
    # vllm#5515: the keywords on the line that opens the call
    ('llm = LLM(model="/m/llama-3-70b-awq", tensor_parallel_size=8, gpu_memory_utilization=0.85)',
     {"tensor_parallel_size": 8, "gpu_memory_utilization": 0.85}),
    ("LLM(model='m', max_model_len=4096, block_size=32, pipeline_parallel_size=2)",
     {"max_model_len": 4096, "block_size": 32, "pipeline_parallel_size": 2}),
    # someone's sentence, an env var of another tool, and keywords outside any call: not this boot's knobs
    ("I set tensor_parallel_size=2 and it still failed", {}),
    ("TENSOR_PARALLEL_SIZE=1", {}),
    ("    enable_expert_parallel=True,", {}),
    ("model_config.max_model_len=4096, cache_config.block_size=16", {}),
])
def test_an_llm_calls_keywords_are_read_as_its_knobs(line: str, args: dict[str, float | int]) -> None:
    assert command_args(line) == args


CALL = """**My setup:**

```
llm = LLM(
    model="DeepSeek-V4-Flash",
    tensor_parallel_size=2,
    max_model_len=30_000,
    gpu_memory_utilization=0.95,
)
```
(EngineCore pid=7) ERROR 06-03 14:24:40 [core.py:1165] ValueError: To serve at least one request with the model's \
max seq len (30000), (6.66 GiB KV cache is needed, which is larger than the available KV cache memory (5.44 GiB). \
Based on the available memory, the estimated maximum model length is 13528.
"""


def test_a_pasted_offline_call_gives_the_report_its_tp_length_and_utilization() -> None:
    report = report_from_log_text(CALL, "call.log")
    assert report.config.tensor_parallel_size == 2
    assert report.config.gpu_memory_utilization == 0.95
    assert report.config.max_model_len == 30000
    assert report.capacity.kv_needed_bytes == gib_to_bytes("6.66")
    # the scan finds the keyword lines, and finds the same lines as the line-by-line reference
    assert scan(CALL).segments == scan_exhaustive(CALL).segments
    found = [CALL[a:b] for a, b in scan(CALL).segments]
    assert "    tensor_parallel_size=2," in found and "    gpu_memory_utilization=0.95," in found


def test_a_vllm_record_that_prints_the_keyword_form_is_no_call() -> None:
    """V0's engine config line prints `tensor_parallel_size=1`: its knobs come from the config
    reading, and a keyword inside a record's message is never taken as a pasted call's."""
    text = ("INFO 01-11 15:51:02 llm_engine.py:70] Initializing an LLM engine with config: model='m', "
            "tensor_parallel_size=4, max_seq_len=4096\n"
            "(Worker pid=3) INFO 01-11 15:51:03 [gpu_worker.py:1] gpu_memory_utilization=0.5,\n")
    report = report_from_log_text(text, "v0.log")
    assert report.config.tensor_parallel_size == 4
    assert report.config.gpu_memory_utilization is None


# --------------------------------------------------------------------------------------------
# 2. An ERROR record cut off before its message: the boot logged an error there


def failures(msg: str) -> list[tuple[FailureKind, int]]:
    return [(f.value.kind, f.value.priority) for f in facts_from_message(msg) if f.kind is FactKind.FAILURE]


@pytest.mark.parametrize("msg, found", [
    ("ERROR 07-13 00:04:10 [co", [(FailureKind.CRASH, BARE)]),  # club-3090#617, the tag already stripped
    ("ERROR 07-13 00:04:10", [(FailureKind.CRASH, BARE)]),  # cut right after the time
    ("2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py", [(FailureKind.CRASH, BARE)]),  # behind docker's time
    ("ERROR 07-13 00:04:10 [core.py:1165]", []),  # the header whole: no cut (an empty message is no error)
    ("the log shows ERROR 07-13 00:04:10 and then the server came up", []),  # someone's sentence
    ("INFO 07-13 00:04:10 [co", []),  # a cut INFO record says nothing
])
def test_an_error_record_cut_before_its_message_is_a_failure_whose_cause_is_not_shown(
        msg: str, found: list[tuple[FailureKind, int]]) -> None:
    assert failures(msg) == found


KV = "(EngineCore pid=43) INFO 07-13 00:04:10 [gpu_worker.py:508] Available KV cache memory: 3.93 GiB\n"
CUT = "(EngineCore pid=43) ERROR 07-13 00:04:10 [co\n"


def test_a_paste_that_ends_in_a_cut_error_record_failed_where_the_boot_was() -> None:
    report = report_from_log_text(KV + CUT, "cut.log")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.phase is Phase.KV and report.verdict is Verdict.UNKNOWN
    assert "cut off before its message" in report.failure.message
    assert report_from_log_text(KV, "whole.log").failure is None
    assert scan(KV + CUT).segments == scan_exhaustive(KV + CUT).segments


def test_a_cut_error_record_gives_way_to_a_stated_cause_and_to_a_header_wrapped_by_the_terminal() -> None:
    stated = KV + CUT + "ValueError: No available memory for the cache blocks. Try increasing\n"
    assert report_from_log_text(stated, "stated.log").failure.kind is FailureKind.DOES_NOT_FIT
    wrapped = KV + "(EngineCore pid=43) ERROR 07-13 00:04:10 [co\nre.py:1165] ValueError: No available memory " \
                   "for the cache blocks. Try increasing\n"
    assert report_from_log_text(wrapped, "wrapped.log").failure.kind is FailureKind.DOES_NOT_FIT


def test_a_cut_error_record_after_startup_finished_is_a_note_not_the_boots_failure() -> None:
    served = KV + ("(EngineCore pid=43) INFO 07-13 00:04:12 [core.py:273] init engine (profile, create kv cache, "
                   "warmup model) took 2.93 seconds\n") + CUT
    report = report_from_log_text(served, "served.log")
    assert report.failure is None
    assert any(w.startswith("after startup finished: ERROR 07-13 00:04:10 [co") for w in report.warnings)


# --------------------------------------------------------------------------------------------
# 3. The KV check cut after the needed size still states the length and what it needs


def kinds(msg: str) -> dict[FactKind, object]:
    return {f.kind: f.value for f in facts_from_message(msg) if f.kind is not FactKind.FAILURE}


def test_a_kv_check_cut_after_the_needed_size_states_the_length_and_the_need() -> None:
    cut = ("ValueError: To serve at least one request with the model's max seq len (1048576), "
           "23.32 GiB KV cache is needed, which is larger t")  # vllm#53961
    assert kinds(cut) == {FactKind.CHECKED_MODEL_LEN: 1048576, FactKind.KV_NEEDED: gib_to_bytes("23.32")}
    whole = cut + "han the available KV cache memory (5.44 GiB)."
    assert kinds(whole)[FactKind.KV_AVAILABLE_AT_CHECK] == gib_to_bytes("5.44")
    # a figure cut before its unit is not read at all
    assert kinds(cut.replace("23.32 GiB KV cache is needed, which is larger t", "23.3")) == {}
    report = report_from_log_text(cut + "\n", "cut-check.log")
    assert report.config.max_model_len == 1048576 and report.capacity.kv_needed_bytes == gib_to_bytes("23.32")
    assert report.verdict is Verdict.FAIL and report.verdict_reason.startswith("does not fit: max_model_len 1048576 needs")
