"""vLLM 0.27–0.33 startup logs, built line by line from the logger calls of vLLM 0.33.0's source
(each template below names the function that prints it). Real 0.33 logs from the H200 come later
as fixtures; these pin the formats now: the 0.33 file names (v1/core/kv_cache_planning.py), the
persistent/transient split of the profile (0.28+: `total consumed`, and the transient peak as
what is left of the non-KV total), Model Runner V2's graph estimate (0.29+: the profiling capture,
then the advisory and the pool comparison) and the "Actual usage" line with vLLM's own
`--kv-cache-memory` suggestion, which the report keeps (`vllm_suggested_kv_cache_memory_bytes`).
"""

from __future__ import annotations

from kvaudit.engines.logs import report_from_log_text
from kvaudit.schema import FailureKind, Owner, Phase, Verdict

GiB = 1 << 30


def format_gib(b: int) -> str:
    """vllm/utils/mem_utils.py format_gib: f"{round(b / GiB_bytes, 2)}"."""
    return f"{round(b / GiB, 2)}"


def G(text: str) -> int:
    return round(float(text) * GiB)


def line(proc: str, file: str, lineno: int, msg: str, level: str = "INFO") -> str:
    """vllm/logger.py _FORMAT: "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s
    [%(fileinfo)s:%(lineno)d] %(message)s", date "%m-%d %H:%M:%S"."""
    pid = {"APIServer": 100, "EngineCore": 200, "Worker_TP0": 300, "Worker_TP1": 301}[proc]
    return f"({proc} pid={pid}) {level} 09-30 12:00:00 [{file}:{lineno}] {msg}\n"


# The figures of one rank of a TP=2 boot on an H200, chosen so that the lines agree with each other.
TOTAL = round(139.8 * GiB)
FREE = round(139.2 * GiB)
GMU = 0.9
REQUESTED = -(-TOTAL * 9 // 10)                     # utils.py request_memory: ceil(total × util)
WEIGHTS = round(7.5 * GiB)
CONSUMED = round(9.0 * GiB)                          # weights + persistent torch + non-torch
TRANSIENT = round(2.25 * GiB)                        # transient_peak_headroom
GRAPH_ESTIMATE = round(0.75 * GiB)                  # V2's profile_cudagraph_memory
GRAPH_ACTUAL = round(0.70 * GiB)                    # capture_model's return
AVAILABLE = REQUESTED - (CONSUMED + TRANSIENT) - GRAPH_ESTIMATE


def v033_boot(ranks: tuple[str, ...] = ("Worker_TP0", "Worker_TP1")) -> str:
    out = [
        # entrypoints/utils.py log_non_default_args; v1/engine/core.py EngineCore.__init__.
        line("APIServer", "utils.py", 250, "non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B', 'model': "
             "'meta-llama/Llama-3.1-8B', 'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.9, "
             "'max_model_len': 32768}"),
        line("EngineCore", "core.py", 121, "Initializing a V1 LLM engine (v0.33.0) with config: "
             "model='meta-llama/Llama-3.1-8B', speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B', "
             "max_seq_len=32768, tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1, "
             "decode_context_parallel_size=1, enforce_eager=False, kv_cache_dtype=auto"),
    ]
    for proc in ranks:
        out += [
            # gpu_worker.py init_device (V2 is the default since 0.29).
            line(proc, "gpu_worker.py", 513, "Using V2 Model Runner"),
            # v1/worker/gpu/model_runner.py load_model: "Model loading took %s GiB memory and %.6f seconds".
            line(proc, "model_runner.py", 429, f"Model loading took {format_gib(WEIGHTS)} GiB memory and 12.345678 "
                 f"seconds"),
            # gpu_worker.py determine_available_memory: logger.debug(profile_result), i.e.
            # utils/mem_utils.py MemoryProfilingResult.__repr__.
            line(proc, "gpu_worker.py", 771, f"Memory profiling takes 3.21 seconds. Total non KV cache memory: "
                 f"{format_gib(CONSUMED + TRANSIENT)}GiB; torch peak memory increase: 3.1GiB; total consumed "
                 f"(from mem_get_info): {format_gib(CONSUMED)}GiB; weights memory: {format_gib(WEIGHTS)}GiB.",
                 "DEBUG"),
            # gpu/model_runner.py capture_model(profile_only=True), inside profile_cudagraph_memory:
            # "Graph capturing finished in %.0f secs, took %.2f GiB" (the first of two).
            line(proc, "model_runner.py", 1163, f"Graph capturing finished in 3 secs, took "
                 f"{GRAPH_ESTIMATE / GiB:.2f} GiB"),
        ]
    # gpu_worker.py determine_available_memory: info_once (the local first rank only).
    out.append(line(ranks[0], "gpu_worker.py", 772, f"Available KV cache memory: {format_gib(AVAILABLE)} GiB"))
    for proc in ranks:
        util = GMU
        delta = GRAPH_ESTIMATE / TOTAL
        # gpu_worker.py determine_available_memory, when the estimate is > 0.
        out.append(line(proc, "gpu_worker.py", 787, "CUDA graph memory profiling is enabled (default since v0.21.0). "
                        f"The current --gpu-memory-utilization={util:.4f} is equivalent to "
                        f"--gpu-memory-utilization={round(util - delta, 4):.4f} without CUDA graph memory profiling. "
                        f"To maintain the same effective KV cache size as before, increase --gpu-memory-utilization "
                        f"to {min(round(util + delta, 4), 1.0):.4f}. To disable, set "
                        f"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."))
    # v1/core/kv_cache_utils.py update_kv_cache_capacity (info_once), engine core.
    out.append(line("EngineCore", "kv_cache_utils.py", 1147, "GPU KV cache size: 1,093,104 tokens, Maximum "
                    "concurrency for 32,768 tokens per request: 33.36x"))
    for proc in ranks:
        peak = TRANSIENT + GRAPH_ESTIMATE
        non_kv = CONSUMED + peak + GRAPH_ACTUAL
        to_requested = REQUESTED - non_kv - 150 * (1 << 20)
        to_gpu = FREE - non_kv - 150 * (1 << 20)
        out += [
            # gpu/model_runner.py capture_model: the real capture.
            line(proc, "model_runner.py", 1163, f"Graph capturing finished in 4 secs, took {GRAPH_ACTUAL / GiB:.2f} GiB"),
            # gpu_worker.py compile_or_warm_up_model: the pool comparison, then the "Actual usage" msg.
            line(proc, "gpu_worker.py", 1003, f"CUDA graph pool memory: {round(GRAPH_ACTUAL / GiB, 2)} GiB (actual), "
                 f"{round(GRAPH_ESTIMATE / GiB, 2)} GiB (estimated), difference: "
                 f"{round(abs(GRAPH_ACTUAL - GRAPH_ESTIMATE) / GiB, 2)} GiB "
                 f"({100 * abs(GRAPH_ACTUAL - GRAPH_ESTIMATE) / GRAPH_ACTUAL:.1f}%)."),
            line(proc, "gpu_worker.py", 1066, f"Free memory on device ({format_gib(FREE)}/{format_gib(TOTAL)} GiB) on "
                 f"startup. Desired GPU memory utilization is ({GMU}, {format_gib(REQUESTED)} GiB). Actual usage is "
                 f"{format_gib(CONSUMED)} GiB for consumed memory (weights + non-torch), {format_gib(peak)} GiB for "
                 f"peak activation, and {format_gib(GRAPH_ACTUAL)} GiB for CUDAGraph memory. Replace "
                 f"gpu_memory_utilization config with `--kv-cache-memory={to_requested}` ({format_gib(to_requested)} "
                 f"GiB) to fit into requested memory, or `--kv-cache-memory={to_gpu}` ({format_gib(to_gpu)} GiB) to "
                 f"fully utilize gpu memory. Current kv cache memory in use is {format_gib(AVAILABLE)} GiB."),
        ]
    out += [
        # v1/engine/core.py _initialize_kv_caches (info_once).
        line("EngineCore", "core.py", 406, "init engine (profile, create kv cache, warmup model) took 52.31 s "
             "(compilation: 12.00 s)"),
        # v1/metrics/loggers.py log_engine_initialized.
        line("APIServer", "loggers.py", 275, "Engine 000: vllm cache_config_info with initialization after "
             "num_gpu_blocks is: 68319"),
    ]
    return "".join(out)


def suggestion() -> int:
    return REQUESTED - (CONSUMED + TRANSIENT + GRAPH_ESTIMATE + GRAPH_ACTUAL) - 150 * (1 << 20)


def test_a_033_boot_gives_every_rank_its_owners_and_vllms_own_suggestion() -> None:
    report = report_from_log_text(v033_boot(), "v033.log")
    assert (report.engine.version, report.engine.model_runner) == ("0.33.0", "V2")
    assert report.config.tensor_parallel_size == 2 and report.verdict is Verdict.OK
    assert report.capacity.kv_tokens == 1_093_104
    for rank in report.ranks:
        o = rank.owners
        # Actual usage: consumed 9.0, peak 3.0 = transient 2.25 + the applied estimate 0.75.
        assert o[Owner.ACTIVATION_PEAK] == G(format_gib(TRANSIENT + GRAPH_ESTIMATE)) - G("0.75")
        # the pool is charged the larger of the estimate (the pool line's "(estimated)") and the capture
        assert (rank.graph_pool_estimate_bytes, rank.graph_pool_actual_bytes) == (G("0.75"), G("0.7"))
        assert o[Owner.GRAPH_POOL] == G("0.75") and o[Owner.WEIGHTS] == G("7.5")
        assert o[Owner.KV_CACHE] == G(format_gib(AVAILABLE))
        assert rank.vllm_suggested_kv_cache_memory_bytes == suggestion()
        assert (rank.device_total_bytes, rank.requested_bytes) == (G("139.8"), G(format_gib(REQUESTED)))


def test_the_suggestion_is_in_the_json_report(cli, tmp_path) -> None:
    log = tmp_path / "v033.log"
    log.write_text(v033_boot(), encoding="utf-8")
    result = cli("ingest", str(log), "-f", "json")
    assert result.code == 0
    import json
    ranks = json.loads(result.stdout)["ranks"]
    assert [r["vllm_suggested_kv_cache_memory_bytes"] for r in ranks] == [suggestion(), suggestion()]


def test_the_033_profile_line_alone_gives_the_transient_peak() -> None:
    # 0.28+: memory_profiling's non_kv_cache_memory = total_consumed + transient_peak_headroom
    text = line("Worker_TP0", "gpu_worker.py", 771, "Memory profiling takes 3.21 seconds. Total non KV cache memory: "
                "11.25GiB; torch peak memory increase: 3.1GiB; total consumed (from mem_get_info): 9.0GiB; weights "
                "memory: 7.5GiB.", "DEBUG")
    rank = report_from_log_text(text, "x").ranks[0]
    assert rank.owners[Owner.ACTIVATION_PEAK] == G("11.25") - G("9.0")
    # total consumed less the weights: persistent torch and non-torch, unsplit
    assert rank.owners[Owner.WEIGHTS] == G("7.5") and rank.owners[Owner.NON_TORCH] == G("9.0") - G("7.5")


def test_a_033_does_not_fit_names_the_new_file_and_the_whole_message() -> None:
    # v1/core/kv_cache_planning.py _check_enough_kv_cache_memory (0.33), raised in the engine core.
    msg = ("ValueError: To serve at least one request with the model's max seq len (131072), (16.0 GiB KV cache is "
           "needed, which is larger than the available KV cache memory (10.74 GiB). Based on the available memory, "
           "the estimated maximum model length is 87824. Try increasing `gpu_memory_utilization` (which also controls "
           "CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See "
           "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    text = (line("Worker_TP0", "gpu_worker.py", 772, "Available KV cache memory: 10.74 GiB")
            + line("EngineCore", "core.py", 1584, "EngineCore failed to start.", "ERROR")
            + line("EngineCore", "core.py", 1584, "Traceback (most recent call last):", "ERROR")
            + line("EngineCore", "core.py", 1584, '  File "/usr/lib/python3.12/site-packages/vllm/v1/core/'
                   'kv_cache_planning.py", line 77, in _check_enough_kv_cache_memory', "ERROR")
            + line("EngineCore", "core.py", 1584, msg, "ERROR"))
    report = report_from_log_text(text, "x")
    f = report.failure
    assert (f.kind, f.phase, f.message) == (FailureKind.DOES_NOT_FIT, Phase.KV, msg)
    assert report.verdict is Verdict.FAIL and report.capacity.max_feasible_model_len == 87824
    assert report.verdict_reason.startswith("does not fit: max_model_len 131072 needs 16.00 GiB KV, 10.74 GiB available "
                                            "on rank 0: lower --max-model-len to 87824")


def test_033_auto_fit_and_the_no_token_error() -> None:
    # kv_cache_planning.py _auto_fit_max_model_len: "Auto-fit max_model_len: reduced from %d to %d to
    # fit in available KV cache memory (%s)", %s = f"{format_gib(mem)} GiB {device}".
    text = (line("EngineCore", "kv_cache_planning.py", 1404, "Auto-fit max_model_len: reduced from 131072 to 86016 to "
                 "fit in available KV cache memory (10.74 GiB GPU)")
            + line("EngineCore", "kv_cache_utils.py", 1147, "GPU KV cache size: 86,016 tokens, Maximum concurrency for "
                   "86,016 tokens per request: 1.00x"))
    report = report_from_log_text(text, "x")
    assert report.config.max_model_len == 86016 and report.verdict is Verdict.OK
    assert any("reduced from 131072 to 86016" in w for w in report.warnings)
    text = line("EngineCore", "core.py", 1584, "ValueError: Cannot auto-fit max_model_len: not enough GPU memory "
                "available to serve even a single token. Try increasing `gpu_memory_utilization`.", "ERROR")
    report = report_from_log_text(text, "x")
    assert (report.failure.kind, report.capacity.max_feasible_model_len) == (FailureKind.DOES_NOT_FIT, 0)


def test_0_10_wordings_of_the_actual_usage_line() -> None:
    # gpu_worker.py compile_or_warm_up_model in 0.10: no "(X GiB)" after each suggestion, the KV in
    # use in bytes, and the older four-owner middle sentence.
    text = line("Worker_TP0", "gpu_worker.py", 391, "Free memory on device (43.93/44.42 GiB) on startup. Desired GPU "
                "memory utilization is (0.9, 39.98 GiB). Actual usage is 27.72 GiB for weight, 1.4 GiB for peak "
                "activation, 0.21 GiB for non-torch memory, and 3.45 GiB for CUDAGraph memory. Replace "
                "gpu_memory_utilization config with `--kv-cache-memory=7564378828` to fit into requested memory, or "
                "`--kv-cache-memory=11809093120` to fully utilize gpu memory. Current kv cache memory in use is "
                "11423138508 bytes.")
    rank = report_from_log_text(text, "x").ranks[0]
    assert rank.vllm_suggested_kv_cache_memory_bytes == 7564378828 and rank.owners[Owner.KV_CACHE] == 11423138508
    assert (rank.owners[Owner.WEIGHTS], rank.owners[Owner.NON_TORCH]) == (G("27.72"), G("0.21"))


def test_show_and_diff_read_033_logs(cli, tmp_path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(v033_boot(), encoding="utf-8")
    # the same boot with 1.5 GiB more weights: vLLM's KV figure 1.5 GiB smaller
    b.write_text(v033_boot().replace("Model loading took 7.5 GiB", "Model loading took 9.0 GiB")
                 .replace(f"Available KV cache memory: {format_gib(AVAILABLE)} GiB",
                          f"Available KV cache memory: {format_gib(AVAILABLE - round(1.5 * GiB))} GiB"), encoding="utf-8")
    assert cli("show", str(a), "--width", "120").code == 0
    result = cli("diff", str(a), str(b), "-f", "json")
    assert result.code == 0
    import json
    diff = json.loads(result.stdout)
    weights = next(d for d in diff["owners"] if d["rank"] is None and d["owner"] == "weights")
    assert weights["delta_bytes"] == G("9.0") - G("7.5") and diff["dominant_owner"] == "weights"
