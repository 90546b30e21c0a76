"""Real pastes, round twelve (stop 46): each test names the thread or file its log came from."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.diff import diff_reports
from kvaudit.engines.logs import report_from_log_text
from kvaudit.render.summary import diff_summary
from kvaudit.schema import FailureKind, to_jsonable
from kvaudit.validate import diff_from_json

_DATA = Path(__file__).parent / "data" / "round_twelve"


def _log(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


@pytest.mark.parametrize("name", ["kv_bytes_suggestion_fork.log", "kv_bytes_suggestion_wrapped.log"])
def test_a_suggestion_that_names_the_flag_in_full_is_read(name: str) -> None:
    """A fork's MRv2 worker (DeepSeek-V4, TP 2): `Replace gpu_memory_utilization config with
    `--kv-cache-memory-bytes=8538253005` (7.95 GiB)`, on one line and folded at 100 columns."""
    (rank,) = _log(name).ranks
    assert rank.vllm_suggested_kv_cache_memory_bytes == 8538253005


@pytest.mark.parametrize("name, size", [
    ("hybrid_block_size.log", 800),    # sostrowsk/dgx-spark-local-llm qwen38-int4.log, the engine core's line
    ("hybrid_block_wrapped.log", 2128),  # eugr/spark-vllm-docker#237, a worker's line after loading, folded
    ("xpu_block_size.log", 2048),      # intel/llm-scaler#615: `[XPU]Setting attention block size to 2048 tokens`
])
def test_the_block_size_the_platform_set_is_the_configs(name: str, size: int) -> None:
    assert _log(name).config.block_size == size


def test_the_set_block_size_wins_over_the_typed_one() -> None:
    text = ("INFO 08-21 10:24:45 [arg_utils.py:1] non-default args: {'model': 'm', 'block_size': 16}\n"
            + (_DATA / "hybrid_block_size.log").read_text(encoding="utf-8"))
    assert report_from_log_text(text, "x").config.block_size == 800


def test_the_attention_backend_in_its_enum_form_is_read() -> None:
    """sostrowsk/dgx-spark-local-llm gemma4-int4.log (0.25.1): `Using AttentionBackendEnum.TRITON_ATTN backend.`"""
    assert _log("backend_enum_triton.log").engine.attention_backend == "TRITON_ATTN"


def test_the_model_configs_max_model_len_line_is_read() -> None:
    """LMCache#1088 (0.9.2), a paste that ends before loading: `[config.py:1472] Using max model len 40960`."""
    assert _log("max_model_len_line.log").config.max_model_len == 40960


def test_the_targets_max_model_len_comes_before_a_draft_models() -> None:
    """sostrowsk/dgx-spark-local-llm: the target's `Using max model len 65536`, then the draft's 1048576."""
    text = ("(APIServer pid=2) INFO 08-01 18:02:55 [model.py:1776] Using max model len 65536\n"
            "(APIServer pid=2) INFO 08-01 18:02:56 [model.py:1776] Using max model len 1048576\n")
    assert report_from_log_text(text, "x").config.max_model_len == 65536


def test_a_pastes_elision_mark_is_not_the_failures_message() -> None:
    """eugr/spark-vllm-docker#296: `EngineCore failed to start.` and then the user's `...`."""
    failure = _log("elided_after_failure.log").failure
    assert failure is not None and failure.message == "EngineCore failed to start."


def test_a_diff_says_which_side_died() -> None:
    """vllm#9630 against vllm#10569: the second boot died in its profile run, cut before its exception
    line. Both verdicts alone (ok → unknown) read as a short excerpt; the failure says what it was."""
    a, b = _log("dead_pair_a.log"), _log("dead_pair_b.log")
    diff = diff_reports(a, b, "a.log", "b.log")
    assert diff.failures is not None and diff.failures["a"] is None
    assert diff.failures["b"] == b.failure and b.failure is not None and b.failure.kind is FailureKind.CRASH
    lines = diff_summary(diff)
    assert [line for line in lines if line.startswith("failed (")] == [
        "failed (b.log): crash in profile on rank 0: Traceback (most recent call last): the boot died; its "
        "exception line "
        "is not in the log"]
    assert diff_from_json(to_jsonable(diff)).failures == diff.failures  # the contract round-trips
    assert "failures" not in to_jsonable(diff_reports(a, a))  # absent when neither side failed


def test_a_dominant_owner_that_moved_little_of_the_kv_change_says_what_is_unstated() -> None:
    """sostrowsk/dgx-spark-local-llm, two boots of Laguna-S INT4 (0.25.1): KV −0.58 GiB, of which the graph
    estimate's +0.05 GiB is all either log states; activation and non-torch memory are in neither (persistent and
    torch_other, which no log states, are no term of vLLM's sizing: round 22a)."""
    diff = diff_reports(_log("laguna_boot_a.log"), _log("laguna_boot_b.log"))
    (line,) = [line for line in diff_summary(diff) if line.startswith("dominant owner")]
    assert line == ("dominant owner: graph_pool; it moved +0.05 GiB of KV's -0.58 GiB: the rest is in owners not "
                    "known on both sides (activation_peak, non_torch) or the budget "
                    "(requested: device × gpu_memory_utilization), not known on both sides")  # neither names its device
    # where the owner moved at least half of it (KV −0.08 GiB), no such note
    text = (_DATA / "laguna_boot_b.log").read_text(encoding="utf-8").replace("35.06 GiB", "35.56 GiB")
    close = diff_reports(_log("laguna_boot_a.log"), report_from_log_text(text, "b"))
    (line,) = [line for line in diff_summary(close) if line.startswith("dominant owner")]
    assert line == "dominant owner: graph_pool"


def test_each_folded_memory_line_is_counted() -> None:
    """vllm-ascend#6678, Ray over two nodes: each node's weights line folds 8 more workers
    (`[repeated 8x across cluster]`): 16 workers' lines, not the one count 8x."""
    (note,) = [w for w in _log("ray_two_nodes_folded.log").warnings if "Ray folded lines" in w]
    assert note.endswith("(memory lines folded: 8x, 8x)")


def test_the_engine_cores_names_bound_dp() -> None:
    """vllm-ascend#3022: `(EngineCore_DP1 pid=…) ERROR … Worker failed with error 'kv_cache must be a tuple'`
    and `(EngineCore_DP0 pid=…)`: one engine core per DP rank, so DP is 2 or more."""
    report = _log("dp_engine_cores.log")
    assert ("data_parallel_size: ≥ 2, size not stated (process names show _DP0, _DP1; one engine core per DP "
            "rank)") in report.warnings
    # every engine core is EngineCore_DP0 at DP 1 too: that name alone bounds nothing
    alone = report_from_log_text("(EngineCore_DP0 pid=1) ERROR 09-19 02:54:06 [core.py:1] EngineCore failed to "
                                 "start.\n", "x")
    assert not any(w.startswith("data_parallel_size") for w in alone.warnings)


_CUT = ("the traceback after `EngineCore failed to start.` ends before its exception line: what failed is not in "
        "the log (the lines after it say)")


def test_a_traceback_cut_in_its_frames_says_the_cause_is_not_in_the_log() -> None:
    """vllm#10569's shape (jetson-containers#1568, vllm-ascend#3479 and #8621 alike): `EngineCore failed to
    start.`, the traceback's frames, and the paste ends."""
    assert _CUT in _log("traceback_cut_in_frames.log").warnings


@pytest.mark.parametrize("last", [
    "(EngineCore_DP0 pid=3132) ERROR 10-15 16:32:16 [core.py:708] AssertionError",
    # a dotted name and `: ` the catalogue does not read (its `…Error: ` would end the traceback anyway)
    "(EngineCore_DP0 pid=3132) ERROR 10-15 16:32:16 [core.py:708] torch._dynamo.exc.Unsupported: call_function",
    "(EngineCore_DP0 pid=3132) ERROR 10-15 16:32:16 [core.py:708] Exception: WorkerProc initialization failed",
])
def test_a_traceback_with_its_exception_line_is_not_cut(last: str) -> None:
    text = (_DATA / "traceback_cut_in_frames.log").read_text(encoding="utf-8") + last + "\n"
    assert _CUT not in report_from_log_text(text, "x").warnings


def test_a_text_that_goes_on_past_the_frame_window_says_nothing_of_a_cut() -> None:
    from kvaudit.engines.logs.scan import FRAME_WINDOW
    other = "(APIServer pid=1) INFO 10-15 16:32:17 [api_server.py:1] waiting\n"
    text = (_DATA / "traceback_cut_in_frames.log").read_text(encoding="utf-8") + other * (FRAME_WINDOW // len(other) + 1)
    assert _CUT not in report_from_log_text(text, "x").warnings


# ------------------------------------------------------------------------------------------
# The review of this round's reading (a reviewer's reproducers)

_TAIL = ", 'tensor_parallel_size': 2, 'kv_cache_dtype': <CacheDType.FP8: 'fp8'>}"


@pytest.mark.parametrize("head", [
    "{'model': 'm', 'api_key': ['k]1']",                        # a bracket inside a list's string
    "{'model': 'm', 'override_generation_config': {'stop': ['}']}",  # a brace inside a nested string
    "{'model': 'm', 'chat_template': 'a\"b\\'k\": 1 c'",          # an escaped quote, a key-like text
    "{'model': 'm', 'kv_transfer_config': Cfg(x='say \"k\": \"it')",  # an object's repr with quotes
])
def test_a_non_literal_args_dict_keeps_its_later_top_level_keys(head: str) -> None:
    from kvaudit.engines.logs.knobs import non_default_args
    args = non_default_args(head + _TAIL)
    assert (args.get("model"), args.get("tensor_parallel_size"), "k" in args) == ("m", 2, False)


def test_a_cut_nested_dicts_keys_are_no_flags() -> None:
    from kvaudit.engines.logs.knobs import non_default_args
    args = non_default_args("{'model': 'm', 'tensor_parallel_size': 2, 'compilation_config': {'mode': None, "
                            "'backend': 'inductor', 'custom_ops': ['none'], 'x': '")
    assert args == {"model": "m", "tensor_parallel_size": 2}


_ARGS = "INFO 07-18 19:51:25 [cli_args.py:325] non-default args: {'model': 'm', 'max_model_len': %s}\n"
_USING = "INFO 07-18 19:51:31 [config.py:1472] Using max model len %d\n"


@pytest.mark.parametrize("text, length", [
    (_ARGS % "8192" + _USING % 32768, 8192),    # typed wins over a draft model's line
    (_ARGS % "-1" + _USING % 40960, 40960),     # auto: the length vLLM resolved
    (_ARGS % "8192" + "INFO 07-18 19:51:31 [x.py:1] I expected `Using max model len 131072` here\n", 8192),
    ("INFO 07-18 19:51:31 [x.py:1] I expected `Using max model len 131072` here\n", None),  # a sentence
])
def test_the_logged_max_model_len_is_vllms_own_line_below_the_typed_length(text: str, length: int | None) -> None:
    assert report_from_log_text(text, "x").config.max_model_len == length


def test_a_block_size_of_zero_is_no_block_size() -> None:
    text = ("INFO 08-21 10:24:45 [arg_utils.py:1] non-default args: {'model': 'm', 'block_size': 16}\n"
            "INFO 08-21 10:27:36 [interface.py:890] Setting attention block size to 0 tokens to ensure that "
            "attention page size is >= mamba page size.\n")
    assert report_from_log_text(text, "x").config.block_size == 16


def test_the_enum_form_names_any_backend() -> None:
    text = "(EngineCore pid=1) INFO 08-02 11:06:19 [cuda.py:416] Using AttentionBackendEnum.FLASHINFER backend.\n"
    assert report_from_log_text(text, "x").engine.attention_backend == "FLASHINFER"


def test_a_message_cut_at_the_column_right_before_its_own_dots_keeps_them() -> None:
    """A fold at a fixed column that fell right before `Starting to load model M...`'s `...`: the
    line of dots continues the record (the paste's own elision mark would not be at the cut)."""
    assert _log("review_elision_at_cut_column.log").config.model == "meta-llama/Llama-3.1-8B-Instruct"


def test_many_folded_memory_lines_are_counted_in_one_short_note() -> None:
    line = "(RayWorkerWrapper pid=%d, ip=10.0.0.%d) INFO 06-18 10:01:02 [gpu_model_runner.py:1] Model loading " \
           "took 14.99 GiB and 5.1 seconds [repeated 8x across cluster]\n"
    text = "".join(line % (100 + i, i) for i in range(20))
    (note,) = [w for w in report_from_log_text(text, "x").warnings if "Ray folded lines" in w]
    assert note.endswith("(memory lines folded: 8x, 8x, 8x, 8x, 8x, 8x, 8x, 8x … (20 lines))")
