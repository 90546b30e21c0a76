"""Real pastes, round twenty-seven (findings F1–F5): a sampler warmup's death after a finished graph capture with
no KV line in the paste (vllm PR 14728), the sampler run named only by its caller's statement (vllm#29049), a V0
profile that measured nothing of an 8B model (trl#2688), a CI log's two KV-check failures with different figures
(intel-xpu-backend-for-triton#7958), and capture bars that finished before the paste's end (vllm PR 29335). Each
test names its source and what kvaudit read before; the data are the files as the round saved them
(tests/unit/data/round_twenty_seven), a case where the rule must not fire beside each rule."""
from __future__ import annotations

import pytest

from kvaudit.engines.logs.boot_record import UNFINISHED_PAST_CAPTURE
from tests.unit.factories import log_report, pasted

_ROUND = "round_twenty_seven"
CAPTURED_THEN_SAMPLER = "03_vllmpr14728_v1_08dev_graph_took_0_64_then_enginecore_sampler_frames_cut.log"
"""vllm PR 14728: `Graph capturing finished in 22 secs, took 0.64 GiB`, then `EngineCore hit an exception:
Traceback …` and a frame `in _dummy_sampler_run`, cut there; no KV line in the paste."""
SAMPLER_STATEMENT = ("04_vllm29049_v1_0111_gke_logviewer_prefix_enginecore_frames_compile_or_warm_up_sampler_no_"
                     "exception.log")
"""vllm#29049 (0.11.1 on GKE): frames to `in compile_or_warm_up_model`, whose statement
`self.model_runner._dummy_sampler_run(hidden_states=last_hidden_states)` ends the paste."""
ZERO_PROFILE = "13_trl2688_v0_grpo_weights_0_kv_71_19_cuda_blocks_then_rank0_llm_traceback_cut.log"
"""trl#2688: a V0 boot of an 8B model in a GRPO trainer: `Loading model weights took 0.0000 GB`, `model weights take
0.00GiB; non_torch_memory takes 0.00GiB; PyTorch activation peak memory takes 0.00GiB; the rest of the memory
reserved for KV Cache is 71.19GiB`, then a traceback."""
TWO_CHECKS = "14_xputriton7958_pytest_failed_two_kv_short_valueerrors_40960_vs_3_6_and_3_74.log"
"""intel-xpu-backend-for-triton#7958: two `FAILED tests/…[ray] - ValueError: To serve at least one request …` lines,
3.6 GiB available / estimated maximum model length 33664, and 3.74 GiB / 34944."""
BARS_DONE = "12_vllmpr29335_v1_weights_2_05_kv_33_31_1587648_tokens_capture_bars_cut.log"
"""vllm PR 29335: KV 33.31 GiB, 1,587,648 tokens, then `Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):
100%|██████████| 51/51` and `(decode, FULL): 100%|██████████| 35/35`, the paste's end."""

_SAMPLER_STEP = "after the graph capture finished, in the sampler warmup (`_dummy_sampler_run`)"


def test_a_sampler_death_after_a_finished_capture_is_in_capture() -> None:
    """Before: "crash on rank 0: Traceback (most recent call last): …", no phase, no step. vLLM captures only after
    sizing the KV cache, so the sampler run after the capture is compile_or_warm_up_model's, not profile_run's."""
    report = log_report(pasted(_ROUND, CAPTURED_THEN_SAMPLER), CAPTURED_THEN_SAMPLER)
    assert report.failure is not None
    assert (report.failure.phase, report.failure.rank, report.failure.step) == ("capture", 0, _SAMPLER_STEP)


_LOADED_THEN_TRACEBACK = (
    "INFO 03-14 02:44:00 [gpu_model_runner.py:1100] Model loading took 15.00 GiB and 9.1 seconds\n"
    "ERROR 03-14 02:45:06 [core.py:337] EngineCore hit an exception: Traceback (most recent call last):\n"
    'ERROR 03-14 02:45:06 [core.py:337]   File "/v/vllm/v1/worker/gpu_model_runner.py", line 1292, in ')
"""A V1 0.8 boot's weights loaded, then an engine core's traceback: the frame's function and what follows it are
each test's own."""


@pytest.mark.parametrize("tail", [
    "_dummy_sampler_run\n",  # the profile's sampler run (profile_run calls it before sizing)
    "profile_run\nERROR 03-14 02:45:06 [core.py:337]     sampler_output = self._dummy_sampler_run(hidden_states)\n",
])
def test_a_sampler_death_after_only_the_load_stays_in_the_profile(tail: str) -> None:
    """Must not fire: profile_run runs the sampler too (V1 0.8), before KV sizing; neither a frame in the sampler run
    nor its statement under profile_run's frame names the capture or a step."""
    report = log_report(_LOADED_THEN_TRACEBACK + tail)
    assert report.failure is not None
    assert (report.failure.phase, report.failure.step) == ("profile", None)


def test_the_sampler_runs_statement_names_the_step() -> None:
    """Before: "crash in capture", no step: only a frame `in _dummy_sampler_run` made one."""
    report = log_report(pasted(_ROUND, SAMPLER_STATEMENT), SAMPLER_STATEMENT)
    assert report.failure is not None
    assert (report.failure.phase, report.failure.step) == (
        "capture", "after KV sizing, in the sampler warmup (`_dummy_sampler_run`)")


_ZERO_NOTE = ("rank 0: vLLM measured 0 bytes of weights, activation peak and non-torch memory, which a loaded model "
              "cannot be: its profile did not see this model's memory (another device measured?), so the KV cache "
              "it sized (71.19 GiB) is not backed by a measurement")


def test_a_profile_that_measured_nothing_is_said_to_be_no_measurement() -> None:
    """Before: weights, activation peak and non-torch 0.000 shown as fact, no word of it."""
    report = log_report(pasted(_ROUND, ZERO_PROFILE), ZERO_PROFILE)
    assert _ZERO_NOTE in report.warnings


def test_one_owner_at_zero_is_no_empty_profile() -> None:
    """Must not fire: vLLM's rounding gives non-torch 0.00 GiB beside real weights."""
    text = ("INFO 01-30 05:50:16 worker.py:266] model weights take 14.96GiB; non_torch_memory takes 0.00GiB; PyTorch "
            "activation peak memory takes 1.20GiB; the rest of the memory reserved for KV Cache is 55.03GiB.\n")
    report = log_report(text)
    assert not any("measured 0 bytes" in w for w in report.warnings)
    assert report.ranks[0].owners["weights"] == round(14.96 * 2**30)


_CHECK_NOTE = ("vLLM's KV check failed with different figures (3.60 GiB, 3.74 GiB available; longest feasible 33,664, "
               "34,944 tokens): runs or ranks the log does not tell apart; the smallest is read, which fits each")


def test_two_kv_checks_with_different_figures_are_said_and_the_shorter_length_offered() -> None:
    """Before: the second line was not mentioned; with the two lines swapped the length offered (34,944) was the other
    run's, which the run with 3.60 GiB cannot serve (its own estimate: 33,664)."""
    text = pasted(_ROUND, TWO_CHECKS)
    lines = text.splitlines(keepends=True)
    failed = [i for i, line in enumerate(lines) if line.startswith("FAILED ")]
    assert len(failed) == 2
    swapped = list(lines)
    swapped[failed[0]], swapped[failed[1]] = lines[failed[1]], lines[failed[0]]
    for pasted_text in (text, "".join(swapped)):
        report = log_report(pasted_text, TWO_CHECKS)
        assert report.capacity.max_feasible_model_len == 33664
        assert _CHECK_NOTE in report.warnings


def test_one_kv_check_repeated_is_no_disagreement() -> None:
    """Must not fire: the front end re-raising the engine core's check says the same figures."""
    check = ("ValueError: To serve at least one request with the model's max seq len (40960), (4.38 GiB KV cache is "
             "needed, which is larger than the available KV cache memory (3.6 GiB). Based on the available memory, "
             "the estimated maximum model length is 33664. Try increasing `gpu_memory_utilization` or decreasing "
             "`max_model_len` when initializing the engine.\n")
    report = log_report(f"ERROR 01-01 00:00:00 [core.py:1] {check}{check}")
    assert report.capacity.max_feasible_model_len == 33664
    assert not any("different figures" in w for w in report.warnings)


def test_capture_bars_that_reached_their_count_are_a_finished_capture() -> None:
    """Before: "…: the warmup and graph capture … that follow KV sizing are not in it" though both bars are at n/n."""
    report = log_report(pasted(_ROUND, BARS_DONE), BARS_DONE)
    assert UNFINISHED_PAST_CAPTURE in report.warnings


_KV = ("(EngineCore_DP0 pid=441) INFO 11-24 11:44:17 [gpu_model_runner.py:5914] Profiling CUDA graph memory: "
       "PIECEWISE=51 (largest=512), FULL=35 (largest=256)\n"
       "(EngineCore_DP0 pid=441) INFO 11-24 11:44:17 [gpu_worker.py:348] Available KV cache memory: 33.31 GiB\n"
       "(EngineCore_DP0 pid=441) INFO 11-24 11:44:18 [kv_cache_utils.py:1234] GPU KV cache size: 1,587,648 tokens\n")


def test_a_bar_short_of_its_count_or_a_mode_not_drawn_is_no_finished_capture() -> None:
    """Must not fire: a bar at 57/67 (the capture cut), and a finished PIECEWISE bar where the profile named FULL graphs
    too and their bar is not in the paste."""
    short = _KV + "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  85%|████████▌ | 43/51 [00:01<00:00]\n"
    piecewise = _KV + "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 51/51 [00:01<00:00]\n"
    both = piecewise + "Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35 [00:01<00:00, 33.86it/s]\n"
    assert UNFINISHED_PAST_CAPTURE not in log_report(short).warnings
    assert UNFINISHED_PAST_CAPTURE not in log_report(piecewise).warnings
    assert UNFINISHED_PAST_CAPTURE in log_report(both).warnings


ROCM_AITER = "10_vllm28052_rocm_v0111_aiter_python_logging_lines_kv_83_88_610816_tokens_cut.log"
"""vllm#28052 (0.11.1 on ROCm): `(EngineCore_DP0 pid=4448) [aiter] import [module_aiter_enum] under …`, no
`Automatically detected platform` line in the paste."""
ASCEND_ACL = "08_ascend11514_tp8_acl_graph_estimate_0_29_kv_5_15_gmu_095_cut.log"
"""vllm-ascend#11514: `(Worker_TP7 pid=36409) INFO … [worker.py:566] ACL graph memory profiling is enabled (default
since v0.22.1). …`, no platform plugin line in the paste."""


def test_a_platforms_own_runtime_lines_name_it() -> None:
    """F6. Before: platform null on both (the graph rows said "CUDA graph" of an ACL graph pool)."""
    assert log_report(pasted(_ROUND, ROCM_AITER), ROCM_AITER).environment.platform == "rocm"
    assert log_report(pasted(_ROUND, ASCEND_ACL), ASCEND_ACL).environment.platform == "ascend"


def test_a_package_listing_that_names_aiter_names_no_platform() -> None:
    """Must not fire: collect_env's pip list (`aiter==0.1.5`) beside a CUDA boot's lines."""
    text = ("aiter==0.1.5\n"
            "INFO 01-01 00:00:00 [gpu_model_runner.py:1] Model loading took 1.00 GiB and 1.0 seconds\n")
    assert log_report(text).environment.platform is None
    cuda = "INFO 01-01 00:00:00 [__init__.py:1] Automatically detected platform cuda.\n" + text
    assert log_report(cuda).environment.platform == "cuda"
