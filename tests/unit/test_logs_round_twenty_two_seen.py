"""Real pastes, round twenty-two's "seen, not changed" (stop 53): a docker-style quoted argument list, the model
after vLLM's image in a container's run, two pods or two CI runs in one paste, named workers' lower bound on the
parallel size, LMCache's KV registration, a two-node boot's absent ranks. Each test names its source; the data are
the excerpts as the helpers saved them (tests/unit/data/round_twenty_two), a negative case beside each rule."""
from __future__ import annotations

from pathlib import Path

from kvaudit.engines.logs import report_from_log_text
from kvaudit.schema import FailureKind, Phase

_DATA = Path(__file__).parent / "data" / "round_twenty_two"
QUOTED_ARGS = "09_vllm10360_v064post1_qwen32b_awq_a6000_profiling_inline.log"
"""vllm#10360 (0.6.4.post1, Qwen2.5-32B AWQ on an A6000): the container's arguments as `docker inspect` prints them,
then the profiling line."""
IMAGE_MODEL = "13_recipes381_dsv4pro_8xh200_dp8_ep_800k_command_shape_cut.log"
"""recipes#381 (DeepSeek-V4-Pro, 8×H200, DP8 EP): a `docker run` of `vllm/vllm-openai:deepseekv4-cu130` and the
model as the image's first positional, cut inside `--max-model-len`."""


def _text(name: str) -> str:
    return (_DATA / name).read_text(encoding="utf-8")


def test_a_docker_style_quoted_argument_list_is_read_as_the_command() -> None:
    """vllm#10360: CMD: `'--model' 'Qwen2.5-32B-Instruct-AWQ' '--max-model-len' '4096' '--enable-prefix-caching'`.
    Before: model and max_model_len null (gmu 0.9 from the profiling line only)."""
    report = report_from_log_text(_text(QUOTED_ARGS), QUOTED_ARGS)
    assert report.config.model == "Qwen2.5-32B-Instruct-AWQ"
    assert report.config.max_model_len == 4096
    assert report.config.gpu_memory_utilization == 0.9


def test_a_quoted_flag_in_a_persons_sentence_is_no_argument_list() -> None:
    """The same paste with the flag quoted in a sentence, its value not an argument of its own: nothing is read."""
    text = _text(QUOTED_ARGS).replace("CMD: `'--model' 'Qwen2.5-32B-Instruct-AWQ' '--max-model-len' '4096' "
                                      "'--enable-prefix-caching'`", "I did not set '--max-model-len' to 4096 here")
    assert "'--max-model-len' to" in text
    report = report_from_log_text(text, QUOTED_ARGS)
    assert report.config.model is None and report.config.max_model_len is None


def test_the_model_after_vllms_image_in_a_container_run_is_read() -> None:
    """recipes#381: `vllm/vllm-openai:deepseekv4-cu130 \\` then `deepseek-ai/DeepSeek-V4-Pro \\`. Before: model null
    (dp 8, EP, fp8 KV and block 256 read)."""
    report = report_from_log_text(_text(IMAGE_MODEL), IMAGE_MODEL)
    assert report.config.model == "deepseek-ai/DeepSeek-V4-Pro"
    assert report.config.extra_args["data_parallel_size"] == 8
    assert report.config.block_size == 256


def test_a_flag_after_vllms_image_is_no_model() -> None:
    """The same run without the positional (its next word a flag), and one whose next word starts another program
    (`bash`): no model."""
    text = _text(IMAGE_MODEL)
    for replacement in ("", "  bash \\\n"):
        edited = text.replace("  deepseek-ai/DeepSeek-V4-Pro \\\n", replacement)
        assert edited != text
        report = report_from_log_text(edited, IMAGE_MODEL)
        assert report.config.model is None
        assert report.config.block_size == 256


KUBECTL_PODS = "04_gke_refarch_kubectl_prefix_two_replicas_gemma4_31b_mrv2_load_grep.log"
"""A GKE reference architecture's notes: `kubectl logs --prefix` lines of two replicas of one Deployment, each
`(EngineCore pid=126)` loading 58.99 GiB."""
TWO_CI_RUNS = "02_vllm33297_ci_quoted_buildkite_caret_colour_levels_free_memory_two_runs.log"
"""vllm#33297: two Buildkite runs two days apart quoted in one issue, each failing the free-memory check."""
_POD_A, _POD_B = "vllm-h100-gemma-4-31b-it-595fcb9f4-hq6jp", "vllm-h100-gemma-4-31b-it-595fcb9f4-dw6vg"


def test_two_kubectl_pods_are_two_vllms_with_a_note() -> None:
    """Before: one rank, and no word that the lines are two pods' (two replicas, the same pid in each)."""
    report = report_from_log_text(_text(KUBECTL_PODS), "x")
    assert report.warnings[0] == (f"x: the lines of 2 kubectl pods ({_POD_A}, {_POD_B}), each a vLLM of its own; the "
                                  f"report reads {_POD_A}'s, the first that states a memory figure: pass {_POD_B}'s "
                                  f"lines on their own (`kubectl logs {_POD_B}`)")
    assert [r.rank for r in report.ranks] == [0]
    assert report.ranks[0].owners["weights"] == round(58.99 * 2**30)


def test_one_kubectl_pods_lines_get_no_note() -> None:
    text = "".join(line for line in _text(KUBECTL_PODS).splitlines(keepends=True) if _POD_B not in line)
    report = report_from_log_text(text, "x")
    assert not [w for w in report.warnings if "kubectl pods" in w]
    assert report.ranks[0].owners["weights"] == round(58.99 * 2**30)


def test_two_ci_runs_failing_in_one_paste_are_named_and_the_one_read_said() -> None:
    """Before: the failure of pid 972's run (1.53 GiB free), no word of pid 738's (1.54 GiB)."""
    report = report_from_log_text(_text(TWO_CI_RUNS), "x")
    assert report.failure is not None and "(1.53/22.05 GiB)" in report.failure.message
    assert ("2 engine cores named EngineCore_DP0 each fail (pid=972, pid=738): runs of their own pasted together "
            "(one boot has one EngineCore_DP0); the report reads pid=972's failure, the others' are not in it"
            ) in report.warnings


def test_two_data_parallel_engines_failing_are_one_boot() -> None:
    """The same paste with the second engine core named `EngineCore_DP1`: one DP2 boot's two engines, no note."""
    text = _text(TWO_CI_RUNS).replace("(EngineCore_DP0 pid=738)", "(EngineCore_DP1 pid=738)")
    assert text != _text(TWO_CI_RUNS)
    report = report_from_log_text(text, "x")
    assert report.failure is not None
    assert not [w for w in report.warnings if "engine cores named" in w]


RANK_NAMES = "13_vllm16841_docker_debug_waiting_core_engine_kv_x4_rank_workers.log"
"""vllm#16841 (V1 0.8.x): four workers `(VllmWorker rank=0 pid=299)` … `rank=3`, each printing torch.compile's time
only, then the KV size line four times; no size stated."""
V0_WORKERS = "12_instructlab2092_wrapper_waiting_lines_interleaved_v0_tp8_load.log"
"""instructlab#2092 (V0): the driver's and seven `VllmWorkerProcess` pids' weights lines, the wrapper's lines between
them, cut."""
_WORLD = "tensor_parallel_size × pipeline_parallel_size: ≥ "


def test_workers_named_by_their_rank_bound_the_world() -> None:
    """Before: tensor_parallel_size null, no ranks, and no note of the four workers."""
    report = report_from_log_text(_text(RANK_NAMES), RANK_NAMES)
    assert report.config.tensor_parallel_size is None
    assert (f"{_WORLD}4, sizes not stated (worker names show rank 0, 1, 2, 3; one process per rank)"
            in report.warnings)


def test_v0s_driver_and_its_worker_pids_bound_the_world() -> None:
    """Before: ranks 0 and 2–7 and no size note."""
    report = report_from_log_text(_text(V0_WORKERS), V0_WORKERS)
    assert (f"{_WORLD}8, sizes not stated (V0's driver and 7 worker processes; one process per rank)"
            in report.warnings)


def test_one_rank_named_or_a_stated_size_gives_no_world_note() -> None:
    """`VllmWorker rank=0` alone bounds nothing; a pasted `--tensor-parallel-size 8` states the size."""
    alone = "".join(line for line in _text(RANK_NAMES).splitlines(keepends=True)
                    if "VllmWorker rank=" not in line or "rank=0 " in line)
    stated = "$ vllm serve ibm/granite --tensor-parallel-size 8\n" + _text(V0_WORKERS)
    for text in (alone, stated):
        report = report_from_log_text(text, "x")
        assert not [w for w in report.warnings if w.startswith(_WORLD)]
    assert report_from_log_text(stated, "x").config.tensor_parallel_size == 8


LMCACHE = "04_lmcache3339_glm5_fp8_tp_ep_v021_lmcache_register_then_workerproc_exception.log"
"""LMCache#3339 (GLM-5 FP8, TP+EP, LMCache connector): `LMCache INFO: GPU KV Cache Dimensions: [158][4372, 64,
132]` from its register_kv_caches, then `WorkerProc hit an exception.`, its traceback cut."""


def test_a_crash_after_lmcache_registered_the_kv_tensors_is_in_the_kv_phase() -> None:
    """Before: failure {phase: null, rank: 0, kind: crash}."""
    report = report_from_log_text(_text(LMCACHE), LMCACHE)
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.phase is Phase.KV and report.failure.rank == 0
    assert report.failure.message == "WorkerProc hit an exception."


def test_without_lmcaches_registration_line_the_crash_has_no_phase() -> None:
    text = "".join(line for line in _text(LMCACHE).splitlines(keepends=True) if "GPU KV Cache Dimensions" not in line)
    assert text != _text(LMCACHE)
    report = report_from_log_text(text, LMCACHE)
    assert report.failure is not None and report.failure.phase is None


TWO_NODES = "01_ascend5629_dsv31_terminus_dp4_tp4_ep_2nodes_mtp3_gmu092_profile_compile_error.log"
"""vllm-ascend#5629 (DeepSeek-V3.1-Terminus W8A8, two nodes): `--data-parallel-size 4 --data-parallel-size-local 2
--tensor-parallel-size 4 --enable-expert-parallel`, this node's workers `Worker_DP0_*` and `Worker_DP1_*` (EP0–EP7),
a Dynamo failure of the first forward."""


def test_a_two_node_boot_shows_which_ranks_are_not_in_the_log() -> None:
    """Before: tp 4, dp 4, ranks 0–7, and no word of ranks 8–15."""
    report = report_from_log_text(_text(TWO_NODES), TWO_NODES)
    assert [r.rank for r in report.ranks] == list(range(8))
    assert ("the worker names show 8 of the 16 ranks of DP 4 × TP 4: ranks 8–15 are not in the log (another node's, "
            "or lines the paste left out): their figures are not in the report") in report.warnings


def test_ranks_here_and_there_are_an_excerpt_not_a_node() -> None:
    """The same log without one worker's lines (rank 1): ranks 0 and 2–7 are no node's share, and no note."""
    text = "".join(line for line in _text(TWO_NODES).splitlines(keepends=True) if "Worker_DP0_TP1_EP1" not in line)
    assert text != _text(TWO_NODES)
    report = report_from_log_text(text, TWO_NODES)
    assert not [w for w in report.warnings if w.startswith("the worker names show")]
