"""Each message of the catalogue (docs/vllm-startup.md §5), built from vLLM's own format strings, → its facts.

The messages are the templates with values filled in the way vLLM fills them (format_gib for
GiB, `%.2f` / `%.4f` where the template says so, `f"{n:,}"` for token counts).
"""

from __future__ import annotations

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.facts import FactKind, GraphEstimate, facts_from_message, grep_pattern
from kvaudit.schema import FailureKind, Owner, Phase, Verdict

GiB = 1 << 30
MiB = 1 << 20


def facts(msg: str) -> dict[FactKind, object]:
    out: dict[FactKind, object] = {}
    for f in facts_from_message(msg):
        out.setdefault(f.kind, f.value)
    return out


def log(*lines: str) -> str:
    """Lines as one TP=1 worker (uni executor: EngineCore) prints them."""
    return "\n".join(f"(EngineCore pid=9) INFO 11-30 10:00:00 [gpu_worker.py:1] {m}" for m in lines) + "\n"


@pytest.mark.parametrize("msg, weights, seconds", [
    ("Model loading took 12.34 GiB memory and 3.250000 seconds", 13_249_974_108, 3.25),  # 0.32 V1/V2
    ("Model loading took 0.0 GiB and 3.28 seconds", 0, 3.28),  # U/N V2
    ("Model loading took 0.5151 GiB and 3.479114 seconds", 553_084_414, 3.479114),  # V0 (4 decimals)
    ("Loading model weights took 2.3463 GB", 2_519_320_442, None),  # V0 GB meant GiB
])
def test_model_loading_variants(msg: str, weights: int, seconds: float | None) -> None:
    f = facts(msg)
    assert f[FactKind.WEIGHTS] == weights
    assert f.get(FactKind.LOAD_SECONDS) == seconds


@pytest.mark.parametrize("msg, available", [
    ("Available KV cache memory: 31.12 GiB", 33_414_845_563),
    ("Available KV cache memory: -1.5 GiB", -1_610_612_736),  # an over-committed budget prints negative
    ("Available KV cache memory: 85.0 GiB", 85 * GiB),
])
def test_available_kv(msg: str, available: int) -> None:
    assert facts(msg)[FactKind.KV_AVAILABLE] == available


@pytest.mark.parametrize("msg, device, tokens, length, x", [
    ("GPU KV cache size: 4,525,824 tokens, Maximum concurrency for 1,024 tokens per request: 4419.75x",
     "GPU", 4_525_824, 1024, 4419.75),
    ("CPU KV cache size: 5,765,888 tokens, Maximum concurrency for 1,024 tokens per request: 5630.75x",
     "CPU", 5_765_888, 1024, 5630.75),
    ("GPU + host KV cache size: 100 tokens, Maximum concurrency for 64 tokens per request: 1.56x",
     "GPU + host", 100, 64, 1.56),
])
def test_kv_size_one_line(msg: str, device: str, tokens: int, length: int, x: float) -> None:
    f = facts(msg)
    assert f[FactKind.KV_TOKENS] == (device, tokens)
    assert f[FactKind.MAX_CONCURRENCY] == (length, x)


def test_kv_size_two_lines_of_older_releases() -> None:
    """GIVEN U's two lines, "GPU KV cache size: N tokens" then "Maximum concurrency for …"
    THEN both halves are read, and the length becomes the config's max_model_len."""
    report = report_from_log_text(log("GPU KV cache size: 987,008 tokens",
                                      "Maximum concurrency for 32,768 tokens per request: 30.12x"), "x")
    assert report.capacity.kv_tokens == 987_008 and report.config.max_model_len == 32_768
    assert report.capacity.max_model_len_fits is True


def test_graph_capture_and_pool_lines() -> None:
    f = facts("Graph capturing finished in 12 secs, took 0.91 GiB")
    assert f[FactKind.GRAPH_CAPTURE] == (12.0, 977_105_060)
    f = facts("Graph capturing finished in 0 secs, took -0.01 GiB")  # free memory may grow
    assert f[FactKind.GRAPH_CAPTURE] == (0.0, -10_737_418)
    f = facts("CUDA graph pool memory: 0.12 GiB (actual), 0.1 GiB (estimated), difference: 0.03 GiB (20.3%).")
    assert f[FactKind.GRAPH_ACTUAL] == 128_849_019 and f[FactKind.GRAPH_ESTIMATE] == GraphEstimate(107_374_182, "pool")
    # The unmerged #51590 wording carries the same two figures.
    f = facts("CUDA graph pool memory: 1.5 GiB (actual: 1.0 GiB captured + 0.5 GiB retained by profiling), "
              "1.25 GiB (estimated), difference: 0.25 GiB (16.7%).")
    assert f[FactKind.GRAPH_ACTUAL] == 1_610_612_736 and f[FactKind.GRAPH_ESTIMATE].bytes == 1_342_177_280
    f = facts("Estimated CUDA graph memory: 118.65 GiB total")  # vllm#53013
    assert f[FactKind.GRAPH_ESTIMATE] == GraphEstimate(127_399_467_418, "estimated")


def test_fork_graph_lines() -> None:
    f = facts("Estimated MRV2 CUDA graph memory: 0.36 GiB additional (1.08 GiB captured, 0.72 GiB retained and "
              "counted as non-torch)")
    assert f[FactKind.GRAPH_ESTIMATE] == GraphEstimate(1_159_641_170, "mrv2")  # the captured 1.08, not 0.36
    assert f[FactKind.GRAPH_RETAINED] == 773_094_113
    f = facts("Estimated MRV2 CUDA graph memory: 1.08 GiB total (0.72 GiB retained in the reusable pool)")
    assert f[FactKind.GRAPH_ESTIMATE] == GraphEstimate(1_159_641_170, "mrv2")
    assert f[FactKind.GRAPH_RETAINED] == 773_094_113
    assert facts("Including 233.25 MiB of B12X sparse DCP transient memory in the profile peak")[
        FactKind.B12X_TRANSIENT] == 244_580_352


def test_per_mode_debug_estimate() -> None:
    f = facts("Estimated PIECEWISE CUDA graph memory: 40.00 MiB first-capture + (51-1) × 2.50 MiB per-graph")
    assert f[FactKind.GRAPH_PER_SIZE] == ("PIECEWISE", 2_621_440)


def test_advisory_gives_the_estimate_not_the_suggestion() -> None:
    """GIVEN "current 0.9500 ≡ 0.9421 without profiling; increase to 0.9579" and a 79.19 GiB device
    THEN the estimate is (0.95 − 0.9421) × total; the suggested 0.9579 is not used."""
    advisory = ("CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                "--gpu-memory-utilization=0.9500 is equivalent to --gpu-memory-utilization=0.9421 without CUDA graph "
                "memory profiling. To maintain the same effective KV cache size as before, increase "
                "--gpu-memory-utilization to 0.9579. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.")
    assert facts(advisory)[FactKind.ADVISORY] == (0.95, 0.9421)
    assert FactKind.ENV not in facts(advisory)  # "To disable, set …=0" is advice, not the environment
    startup = ("Free memory on device (78.5/79.19 GiB) on startup. "
               "Desired GPU memory utilization is (0.95, 75.23 GiB). "
               "Actual usage is 10.0 GiB for consumed memory (weights + non-torch), 1.0 GiB for peak activation, and "
               "0.5 GiB for CUDAGraph memory. Current kv cache memory in use is 60.0 GiB.")
    report = report_from_log_text(log(advisory, startup), "x")
    total = 85_029_615_043  # 79.19 GiB
    est = report.ranks[0].graph_pool_estimate_bytes
    assert est == round((0.95 - 0.9421) * total)
    assert abs(est - 0.0079 * total) <= 0.00005 * total
    assert report.ranks[0].owners[Owner.ACTIVATION_PEAK] == GiB - est


def test_advisory_without_a_total_leaves_the_estimate_unknown() -> None:
    advisory = ("The current --gpu-memory-utilization=0.9500 is equivalent to --gpu-memory-utilization=0.9421 without "
                "CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase "
                "--gpu-memory-utilization to 0.9579. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.")
    report = report_from_log_text(log(advisory, "Available KV cache memory: 3.0 GiB"), "x")
    assert report.ranks[0].graph_pool_estimate_bytes is None
    assert report.config.gpu_memory_utilization == 0.95


def test_disabled_profiler_applies_no_estimate() -> None:
    """GIVEN VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (the WARNING says so)
    THEN the new wording's peak holds no graph estimate: activation = peak."""
    warning = ("CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA "
               "graph memory is not accounted for during KV cache allocation, which may require lowering "
               "--gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of v0.21.0) and "
               "increasing --gpu-memory-utilization from 0.9000 to 0.9100.")
    usage = ("Free memory on device (79.0/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). "
             "Actual usage is 10.0 GiB for consumed memory (weights + non-torch), 1.5 GiB for peak activation, and "
             "0.75 GiB for CUDAGraph memory. Current kv cache memory in use is 55.0 GiB.")
    report = report_from_log_text(log(warning, usage), "x")
    r = report.ranks[0]
    assert report.environment.env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"] == "0"
    assert r.owners[Owner.ACTIVATION_PEAK] == 1_610_612_736  # 1.5 GiB
    assert r.graph_pool_estimate_bytes == round(0.01 * 85_029_615_043)  # (0.91 − 0.90) × 79.19 GiB


USAGE = ("Free memory on device (79.0/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). "
         "Actual usage is 10.0 GiB for consumed memory (weights + non-torch), 1.5 GiB for peak activation, and "
         "0.75 GiB for CUDAGraph memory. Current kv cache memory in use is 55.0 GiB.")


def test_no_estimate_lines_means_vllm_estimated_zero() -> None:
    """GIVEN a 0.32 capture and right after it the "Actual usage" line, without the pool line
    between them or the advisory (vLLM prints both exactly when the estimate is > 0)
    THEN the estimate was 0, activation = peak, and the unbudgeted capture is a warning."""
    report = report_from_log_text(log("Graph capturing finished in 2 secs, took 0.75 GiB", USAGE), "x")
    r = report.ranks[0]
    assert r.graph_pool_estimate_bytes == 0 and r.graph_pool_actual_bytes == 805_306_368
    assert r.owners[Owner.ACTIVATION_PEAK] == 1_610_612_736 and r.owners[Owner.GRAPH_POOL] == 805_306_368
    assert any("reserved no CUDA graph memory" in w for w in report.warnings)


@pytest.mark.parametrize("before", [(), ("Initializing a V1 LLM engine (v0.33.0) with config: model='m'",)])
def test_an_excerpt_that_starts_at_actual_usage_says_nothing_of_the_estimate(before: tuple[str, ...]) -> None:
    """GIVEN an "Actual usage" line with neither the rank's capture before it nor its "Available KV
    cache memory" (club-3090#1087 pastes TP0's line first, its pool line cut off above it)
    THEN the estimate is unknown, and so is the activation (the peak includes the estimate): no
    estimate 0 is inferred and no unbudgeted capture is claimed."""
    report = report_from_log_text(log(*before, USAGE), "x")
    r = report.ranks[0]
    assert r.graph_pool_estimate_bytes is None and r.graph_pool_actual_bytes == 805_306_368
    assert r.owners[Owner.ACTIVATION_PEAK] is None
    assert not any("reserved no CUDA graph memory" in w for w in report.warnings)


def test_available_kv_without_the_advisory_after_it_means_vllm_estimated_zero() -> None:
    """GIVEN "Available KV cache memory" (the advisory follows it when the estimate is > 0) and the
    "Actual usage" line, no capture line
    THEN the estimate was 0."""
    report = report_from_log_text(log("Available KV cache memory: 55.0 GiB", USAGE), "x")
    assert report.ranks[0].graph_pool_estimate_bytes == 0
    assert report.ranks[0].owners[Owner.ACTIVATION_PEAK] == 1_610_612_736


def test_actual_usage_old_and_npu_wordings() -> None:
    old = facts("Actual usage is 0.0 GiB for weight, 0.13 GiB for peak activation, 0.22 GiB for non-torch memory, "
                "and 0.07 GiB for CUDAGraph memory.")
    assert (old[FactKind.WEIGHTS], old[FactKind.PEAK], old[FactKind.NON_TORCH], old[FactKind.GRAPH_USAGE]) == (
        0, 139_586_437, 236_223_201, 75_161_928)
    npu = facts("Actual usage: 1.14 GiB for weights, 0.22 GiB for peak activation, 0.13 GiB for non-torch memory, "
                "0.04 GiB for NPU graph memory")
    assert npu[FactKind.NON_TORCH] == 139_586_437 and npu[FactKind.WEIGHTS] == 1_224_065_679


def test_startup_budget_lines() -> None:
    f = facts("Initial free memory: 139.25 GiB; Requested memory: 0.920000 (util), 128.57 GiB")  # DEBUG
    assert (f[FactKind.FREE_AT_START], f[FactKind.GMU], f[FactKind.REQUESTED]) == (
        149_518_548_992, 0.92, 138_050_986_312)
    assert facts("worker requested memory: 128.57GiB")[FactKind.REQUESTED] == 138_050_986_312
    f = facts("Memory profiling takes 5.25 seconds. Total non KV cache memory: 70.75GiB; torch peak memory increase: "
              "4.5GiB; total consumed (from mem_get_info): 66.25GiB; weights memory: 65.5GiB.")
    assert (f[FactKind.PROFILE_SECONDS], f[FactKind.NON_KV_TOTAL], f[FactKind.TORCH_PEAK_INCREASE]) == (
        5.25, 75_967_234_048, 4_831_838_208)
    assert f[FactKind.CONSUMED] == 71_135_395_840 and f[FactKind.WEIGHTS] == 70_330_089_472
    u = facts("Memory profiling takes 5.25 seconds. Total non KV cache memory: 70.75GiB; torch peak memory increase: "
              "4.5GiB; non-torch forward increase memory: 0.5GiB; weights memory: 65.5GiB.")  # U
    assert FactKind.CONSUMED not in u and u[FactKind.WEIGHTS] == 70_330_089_472


def test_requested_computed_from_total_and_gmu_when_not_printed() -> None:
    """GIVEN the device total (startup error wording without the request) and the GMU knob
    THEN requested = ceil(total × gmu), kvaudit.ledger.requested_bytes."""
    text = ("(APIServer pid=1) INFO 11-30 10:00:00 [api_utils.py:286] "
            "non-default args: {'gpu_memory_utilization': 0.5}\n"
            + log("Free memory on device (70.0/79.19 GiB) on startup.", "Available KV cache memory: 20.0 GiB"))
    r = report_from_log_text(text, "x").ranks[0]
    assert r.requested_bytes == -(-85_029_615_043 // 2)  # ceil(79.19 GiB × 0.5)


def test_fixed_kv_size_is_noted() -> None:
    msg = ("Initial free memory 139.25 GiB, reserved 40.0 GiB memory for KV Cache as specified by "
           "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
           "gpu_memory_utilization config.")
    report = report_from_log_text(log(msg), "x")
    r = report.ranks[0]
    assert r.kv_available_bytes == r.owners[Owner.KV_CACHE] == 40 * GiB
    assert any("kv_cache_memory_bytes" in w for w in report.warnings)


def test_cpu_explicit_set() -> None:
    text = ("(Worker pid=5) INFO 12-02 11:04:18 [cpu_worker.py:260] "
            "Explicitly set (4.0/9.34) GiB for KV cache on node 0.\n")
    r = report_from_log_text(text, "x").ranks[0]
    assert r.kv_available_bytes == r.owners[Owner.KV_CACHE] == 4 * GiB
    assert r.device_total_bytes == 10_028_748_636  # 9.34 GiB


@pytest.mark.parametrize("line, name", [
    ("Using FLASH_ATTN_MLA attention backend out of potential backends: ['FLASH_ATTN_MLA', 'FLASHMLA'].",
     "FLASH_ATTN_MLA"),
    ("Using CPU_MLA backend.", "CPU_MLA"),
    ("Using Flash Attention backend on V1 engine.", "Flash Attention"),
])
def test_attention_backend(line: str, name: str) -> None:
    assert facts(line)[FactKind.ATTENTION_BACKEND] == name


def test_backend_word_in_other_lines_is_not_a_backend() -> None:
    assert FactKind.ATTENTION_BACKEND not in facts("world_size=2 rank=0 distributed_init_method=tcp://x backend=nccl")


@pytest.mark.parametrize("line, runner", [
    ("Using V2 Model Runner", "V2"),
    ("Model Runner V2 requires Triton; using the V1 model runner instead.", "V1"),
])
def test_model_runner_lines(line: str, runner: str) -> None:
    assert facts(line)[FactKind.MODEL_RUNNER] == runner


def test_env_lines() -> None:
    assert facts("VLLM_USE_V2_MODEL_RUNNER=1")[FactKind.ENV] == ("VLLM_USE_V2_MODEL_RUNNER", "1")
    assert facts("\tVLLM_CPU_OMP_THREADS_BIND='0|1', auto_setup=False")[FactKind.ENV] == (
        "VLLM_CPU_OMP_THREADS_BIND", "0|1")
    assert FactKind.ENV not in facts("Set VLLM_FOO=1 to enable this")


def test_grep_pattern_is_a_valid_ere() -> None:
    import shutil
    import subprocess
    if shutil.which("grep") is None:
        pytest.skip("no grep")
    done = subprocess.run(["grep", "-cE", grep_pattern()], input="Available KV cache memory: 1.0 GiB\nnoise\n",
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "1" and done.stderr == ""


# --------------------------------------------------------------------------------------------
# Failures


def engine_error(msg: str) -> str:
    return f"(EngineCore pid=2) ERROR 11-30 10:00:00 [core.py:1510] {msg}\n"


@pytest.mark.parametrize("msg, kind, phase, feasible", [
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
     "the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name).",
     FailureKind.DOES_NOT_FIT, Phase.KV, 0),
    ("ValueError: To serve at least one request with the model's max seq len (524288), (4.52 GiB KV cache is needed, "
     "which is larger than the available KV cache memory (2.27 GiB). Based on the available memory, the estimated "
     "maximum model length is 263168. Try increasing `gpu_memory_utilization`.", FailureKind.DOES_NOT_FIT, Phase.KV,
     263_168),
    # 0.8.x: "models's" and GB, no estimate sentence.
    ("ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GB KV cache is needed, "
     "which is larger than the available KV cache memory (10.50 GB). Try increasing `gpu_memory_utilization`.",
     FailureKind.DOES_NOT_FIT, Phase.KV, None),
    ("ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. Try "
     "increasing `gpu_memory_utilization`.", FailureKind.DOES_NOT_FIT, Phase.KV, 0),
    ("ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than desired GPU memory "
     "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
     FailureKind.STARTUP_MEMORY, Phase.BASELINE, None),
    ("ValueError: Free memory on device (10.5/79.19 GiB) on startup is less than desired GPU memory utilization "
     "(0.9, 71.27 GiB). Decrease GPU memory utilization.", FailureKind.STARTUP_MEMORY, Phase.BASELINE, None),
    ("AssertionError: Error in memory profiling. Initial free memory 70.0 GiB, current free memory 71.0 GiB. This "
     "happens when other processes sharing the same container release GPU memory.", FailureKind.CRASH, Phase.PROFILE,
     None),
    ("AssertionError: Workspace is locked but allocation from 'moe.py:12' requires 1.5 MiB", FailureKind.CRASH,
     Phase.CAPTURE, None),
    ("Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free memory for weights, "
     "increasing --tensor-parallel-size, or using --quantization. (original error: CUDA out of memory. Tried to "
     "allocate 1.96 GiB.)", FailureKind.OOM, Phase.LOAD, None),
    # Nothing printed before it says how far the boot got: the phase is not known (it was
    # "baseline" before issue 27, which the log does not say).
    ("RuntimeError: CUDA error: out of memory", FailureKind.OOM, None, None),
])
def test_failure_variants(msg: str, kind: FailureKind, phase: Phase | None, feasible: int | None) -> None:
    report = report_from_log_text(engine_error(msg), "x")
    f = report.failure
    assert f is not None and (f.kind, f.phase) == (kind, phase)
    assert f.message == msg[:400] or f.message.startswith(msg[:100])
    assert report.capacity.max_feasible_model_len == feasible
    expected = Verdict.FAIL if kind in (FailureKind.DOES_NOT_FIT, FailureKind.OOM, FailureKind.STARTUP_MEMORY) \
        else Verdict.UNKNOWN
    assert report.verdict is expected


def test_startup_error_figures() -> None:
    msg = ("ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than desired GPU memory "
           "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
           "processes.")
    text = f"(Worker_TP1 pid=41) ERROR 11-30 10:00:00 [multiproc_executor.py:953] {msg}\n"
    report = report_from_log_text(text, "x")
    r = report.ranks[0]
    assert (r.rank, r.free_at_start_bytes, r.device_total_bytes, r.requested_bytes) == (
        1, 11_274_289_152, 85_029_615_043, 76_525_579_796)  # 10.5, 79.19, 71.27 GiB
    assert report.failure.rank == 1 and report.capacity.physical_headroom_bytes == 11_274_289_152 - 76_525_579_796


def test_oom_phase_follows_the_boot() -> None:
    """GIVEN an OOM with no phase in its message
    THEN the phase is the last milestone printed before it."""
    text = log("Starting to load model /m...", "Model loading took 10.0 GiB memory and 1.0 seconds") + engine_error(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.")
    assert report_from_log_text(text, "x").failure.phase is Phase.PROFILE
    text = log("Starting to load model /m...") + engine_error("torch.OutOfMemoryError: CUDA out of memory.")
    assert report_from_log_text(text, "x").failure.phase is Phase.LOAD


def test_root_cause_beats_the_generic_tail() -> None:
    """GIVEN the generic "Engine core initialization failed" printed before the worker's own error
    THEN the failure is the specific one."""
    text = engine_error("RuntimeError: Engine core initialization failed. See root cause above.") + engine_error(
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.")
    assert report_from_log_text(text, "x").failure.kind is FailureKind.DOES_NOT_FIT


def test_dcp_refusal() -> None:
    msg = ("AssertionError: Decode Context Parallelism (DCP) requires attention implementations to return the softmax "
           "LSE during decode, but CPUMLAImpl does not.")
    f = report_from_log_text(f"(Worker_TP0_DCP0 pid=3) ERROR 12-02 10:00:00 [multiproc_executor.py:1] {msg}\n",
                             "x").failure
    assert f is not None and f.kind is FailureKind.REFUSED and f.rank == 0
