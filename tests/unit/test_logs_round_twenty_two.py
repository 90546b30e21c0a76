"""Real pastes, round twenty-two (stop 52): a death while serving dumped after it, a wrapper's re-logged startup
failure, 0.6.4's `Gib`, a V0 breakdown cut before its KV figure, torch.compile's first forward, a shell line that
quotes the arguments' wording. Each test names its source; the data are the excerpts as the helpers saved them
(tests/unit/data/round_twenty_two)."""
from __future__ import annotations

from pathlib import Path

from kvaudit.engines.logs import report_from_log_text
from kvaudit.schema import FailureKind, Phase, Verdict
from kvaudit.units import GiB

_DATA = Path(__file__).parent / "data" / "round_twenty_two"
WARMUP_KERNELS = "01_v0271_mrv2_wsl_qwen05b_capture_suggestion_then_warmup_kernels_nvcc.log"
"""vLLM 0.27.1 (MRv2) on a WSL2 RTX 4090: the capture, then the sampler warmup's JIT build without nvcc (also the
side A of tests/unit/test_diff_round_twenty_two.py)."""


def _report(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


def _gib(value: float) -> int:
    return round(value * GiB)


def test_a_worker_death_the_engine_dumped_as_a_failed_step_is_after_startup() -> None:
    """ROCm/aiter#5192 (Kimi-K3 TP8 on MI355X, containerd's `stdout F` lines quoted): eight GPUs' memory access
    faults, `Worker proc VllmWorker-4 died unexpectedly`, the executor's shutdown, then `Dumping scheduler output
    for model execution` of two running requests. Before: "before startup finished, which it then did"."""
    report = _report("aiter_serving_fault_then_step_dump.log")
    assert report.failure is None and report.verdict is Verdict.OK
    assert report.warnings == ("after startup finished: Worker proc VllmWorker-4 died unexpectedly (exit code: None), "
                               "shutting down executor.",)


def test_a_wrappers_record_of_vllms_startup_failure_is_the_boots_failure() -> None:
    """kserve#5056: `kserve ERROR [__main__.py:<module>():337] Failed to start model server: Engine core
    initialization failed. See root cause above. Failed core proc(s): {}`, then kserve's own traceback, cut.
    Before: only the bare traceback ("its exception line is not in the log")."""
    report = _report("kserve_engine_core_init_failed.log")
    assert report.verdict is Verdict.UNKNOWN
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.message.endswith("Failed to start model server: Engine core initialization failed. See "
                                           "root cause above. Failed core proc(s): {}")


def test_the_064_profiling_line_with_its_gib_typo_is_read() -> None:
    """vllm#12155 (0.6.4, Ray TP2): `memory_usage_post_profile=7.89Gib` (worker.py's own spelling in that
    release). Before: the whole line dropped, no device, GMU, non-torch or KV figure."""
    report = _report("v064_profiling_results_gib_typo.log")
    rank = next(r for r in report.ranks if r.rank == 0)
    assert rank.device_total_bytes == _gib(23.64)
    assert rank.owners["non_torch"] == _gib(0.76)
    assert rank.kv_available_bytes == _gib(12.67)
    assert report.config.gpu_memory_utilization == 0.98


def test_a_v0_breakdown_cut_before_its_kv_figure_keeps_the_three_before_it() -> None:
    """Orpheus-TTS#115 (V0 ~0.7): `model weights take 6.18GiB; non_torch_memory takes 0.10GiB; PyTorch activation
    peak memory takes 1.44GiB; the rest of the memory reserved` and the paste ends. Before: none of them read."""
    rank = _report("v0_breakdown_cut_before_kv.log").ranks[0]
    # (the weights from the loader's more exact `Loading model weights took 6.1799 GB` before it)
    assert (rank.owners["weights"], rank.owners["non_torch"], rank.owners["activation_peak"]) == (
        _gib(6.1799), _gib(0.10), _gib(1.44))
    assert rank.kv_available_bytes is None


def test_a_death_after_torch_compiles_graphs_of_the_first_forward_is_in_the_profile() -> None:
    """vllm-project/recipes#429 (DeepSeek-V4-Flash TP8+EP on H20): `Cache the graph of compile range (65, 2048)
    for later use`, then `WorkerProc hit an exception.` on TP6. Before: no phase."""
    report = _report("compile_range_then_worker_exception.log")
    assert report.failure is not None
    assert (report.failure.phase, report.failure.rank) == (Phase.PROFILE, 6)


def test_a_dynamo_failure_after_ascends_weights_line_is_in_the_profile() -> None:
    """vllm-ascend#5629 (DeepSeek-V3.1 DP4×TP4, 2 nodes): `Loading model weights took 45.6571 GB`
    (model_runner_v1.py), then `torch._dynamo.exc.TorchRuntimeError` on rank 7. Before: no phase."""
    report = _report("ascend_weights_then_dynamo_error.log")
    assert report.failure is not None
    assert (report.failure.phase, report.failure.rank) == (Phase.PROFILE, 7)
    assert report.failure.message.startswith("torch._dynamo.exc.TorchRuntimeError: Dynamo failed to run FX node")


def test_a_shell_line_quoting_the_arguments_wording_yields_to_the_record() -> None:
    """A vLLM 0.30.0+cpu run's notes: `$ grep -o "non-default args: {[^}]*}" e1-run3-vllm.log`, then the record.
    Before: the grep pattern was read as the arguments, and every knob of the record was lost."""
    config = _report("grep_line_quotes_non_default_args.log").config
    assert (config.model, config.max_model_len, config.enforce_eager, config.max_num_seqs) == (
        "Qwen/Qwen2.5-0.5B-Instruct", 2048, True, 8)


def test_model_runner_v2s_kernel_warmup_frame_is_the_capture_phase() -> None:
    # the frame of a 0.27.1 traceback (a sampler kernel's JIT build without nvcc), alone: MRv2's warmup after its
    # capture (v1/worker/gpu/warmup.py), where the full traceback also names compile_or_warm_up_model
    lines = (_DATA / WARMUP_KERNELS).read_text(encoding="utf-8").splitlines()
    frame = next(line for line in lines if line.endswith("in warmup_kernels"))
    error = next(line for line in lines if "RuntimeError: Could not find nvcc" in line)
    report = report_from_log_text(f"{frame}\n{error}\n", "frame.log")
    assert report.failure is not None and report.failure.phase is Phase.CAPTURE
    full = _report(WARMUP_KERNELS)
    assert full.failure is not None and full.failure.phase is Phase.CAPTURE


def test_the_release_of_the_vllm_image_a_paste_names_is_its_version_where_no_line_states_one() -> None:
    """An A100's notes (vLLM 0.31.0, MRv2): `vllm image used: vllm/vllm-openai:v0.31.0-ubuntu2404`, no banner, no
    engine line. Before: engine.version null."""
    report = _report("graphs_a100_mrv2_usage_line_cut.log")
    assert (report.engine.version, report.environment.vllm) == ("0.31.0", "0.31.0")
    # a banner or engine line states the release where there is one; `latest` names none
    text = ("image: vllm/vllm-openai:v0.30.0\n"
            "INFO 12-05 05:43:38 [core.py:96] Initializing a V1 LLM engine (v0.31.1) with config: model='m', seed=0\n")
    assert report_from_log_text(text, "both.log").engine.version == "0.31.1"
    latest = ("image: vllm/vllm-openai:latest\n"
              "INFO 12-05 05:43:38 [gpu_model_runner.py:2602] Model loading took 15.2 GiB and 6.1 seconds\n")
    assert report_from_log_text(latest, "latest.log").engine.version is None


def test_kserves_model_id_flag_names_the_model() -> None:
    """kserve PR 4470 (vLLM 0.8.5 under KServe's huggingfaceserver): `python -m huggingfaceserver
    --model_id=Qwen/Qwen3-14B --max-model-len=4096`. Before: the length read, the model not."""
    config = _report("kserve_hfserver_model_id.log").config
    assert (config.model, config.max_model_len) == ("Qwen/Qwen3-14B", 4096)


def test_another_programs_error_just_before_a_cut_startup_failure_is_quoted() -> None:
    """aibrix#1433 (a P/D decode pod, NIXL): UCX's `ib_mlx5dv_md.c:1100 UCX  ERROR mlx5_7: ibv_modify_qp(UMR QP
    0x9b5e) failed to modify to RTR: No such device`, then `EngineCore failed to start.` and a traceback cut before
    its exception line. Before: "what failed is not in the log", the UCX line not named."""
    report = _report("aibrix_ucx_error_then_engine_core_failed.log")
    assert report.failure is not None and report.failure.message == "EngineCore failed to start."
    (cut,) = [w for w in report.warnings if w.startswith("the traceback after `EngineCore failed to start.`")]
    assert cut.endswith("; the line before it is another program's error: `[1754890927.298391] "
                        "[vllm-1p1d-roleset-sf8w4-decode-85b9745648-0:270  :0]    ib_mlx5dv_md.c:1100 UCX  ERROR "
                        "mlx5_7: ibv_modify_qp(UMR QP 0x9b5e) failed to modify to RTR: No such device`")
