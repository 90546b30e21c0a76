"""Issue 27, class by class, on lines as vLLM prints them (the vLLM function is named beside each):
a failed start-up is never `ok`; the parallel layout from what the prefixes and a pasted command
say; wrapped and quoted errors rejoined whole; more wordings into owners; and two of issue 26's
newcomer stumbles (a `fold`ed paste, `ingest` given a report).
"""

from __future__ import annotations

import textwrap

import pytest

from kvaudit.engines.logs import report_from_log_text, report_from_logs
from kvaudit.errors import BadInputError
from kvaudit.schema import FailureKind, Owner, Phase, Verdict

GiB = 1 << 30


def G(text: str) -> int:
    return round(float(text) * GiB)


def tagged(proc: str, msg: str, level: str = "INFO", src: str = "gpu_worker.py:1") -> str:
    """vllm/logger.py _FORMAT, a pid per process name."""
    return f"({proc} pid={100 + sum(map(ord, proc))}) {level} 09-30 12:00:00 [{src}] {msg}\n"


# A boot that looks healthy up to KV sizing (0.32/0.33 templates).
HEALTHY_KV = (tagged("EngineCore", "Model loading took 7.5 GiB memory and 12.3 seconds", src="gpu_model_runner.py:1")
              + tagged("EngineCore", "Available KV cache memory: 60.5 GiB")
              + tagged("EngineCore", "GPU KV cache size: 495,616 tokens, Maximum concurrency for 32,768 tokens per "
                       "request: 15.13x", src="kv_cache_utils.py:1"))


# --------------------------------------------------------------------------------------------
# 1. A failed start-up is never OK

@pytest.mark.parametrize("tail, kind, phase", [
    # v1/engine/core.py run_engine_core: logger.exception("EngineCore failed to start.")
    (tagged("EngineCore", "EngineCore failed to start.", "ERROR", "core.py:1584"), FailureKind.CRASH, Phase.KV),
    # v1/engine/utils.py wait_for_engine_startup, in the API server
    (tagged("APIServer", "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
            "{}", "ERROR", "launcher.py:1"), FailureKind.CRASH, Phase.KV),
    # V0 engine/multiprocessing/engine.py: the MQLLMEngine wrapper
    ("RuntimeError: Engine process failed to start. See stack trace for the root cause.\n", FailureKind.CRASH,
     Phase.KV),
    # a traceback with its exception line
    (tagged("EngineCore", "Traceback (most recent call last):", "ERROR", "core.py:1584")
     + tagged("EngineCore", "torch.AcceleratorError: CUDA error: an illegal memory access was encountered", "ERROR",
              "core.py:1584"), FailureKind.CRASH, Phase.KV),
    # a traceback cut before its last line
    (tagged("EngineCore", "Traceback (most recent call last):", "ERROR", "core.py:1584")
     + tagged("EngineCore", '  File "/x/vllm/v1/engine/core.py", line 1482, in run_engine_core', "ERROR",
              "core.py:1584"), FailureKind.CRASH, Phase.KV),
    # v1/executor/multiproc_executor.py MultiprocWorkerMonitor (0.33 wording, with the exit code)
    (tagged("EngineCore", "Worker proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor.",
            "ERROR", "multiproc_executor.py:380"), FailureKind.WORKER_DIED, Phase.KV),
    # v1/executor/ray_executor_v2.py
    (tagged("EngineCore", "RayWorkerProc rank=1 died unexpectedly, shutting down executor.", "ERROR",
            "ray_executor_v2.py:523"), FailureKind.WORKER_DIED, Phase.KV),
    # v1/engine/core_client.py: the client sees the engine core go
    (tagged("APIServer", "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup", "ERROR",
            "core_client.py:840"), FailureKind.WORKER_DIED, Phase.KV),
    # capture (V2 capture_model) ran out of memory
    (tagged("EngineCore", "Capturing CUDA graphs (FULL): 12/51", src="model_runner.py:1")
     + tagged("EngineCore", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "ERROR",
              "core.py:1584"), FailureKind.OOM, Phase.CAPTURE),
])
def test_a_dead_boot_after_healthy_kv_lines_is_never_ok(tail: str, kind: FailureKind, phase: Phase) -> None:
    report = report_from_log_text(HEALTHY_KV + tail, "x")
    assert report.verdict is not Verdict.OK
    assert (report.failure.kind, report.failure.phase) == (kind, phase)
    assert report.verdict_reason.startswith(("boot failed in ", "audit incomplete in "))


@pytest.mark.parametrize("method, phase", [("determine_num_available_blocks", Phase.PROFILE),
                                           ("initialize_cache", Phase.KV), ("initialize_from_config", Phase.KV),
                                           ("load_model", Phase.LOAD), ("compile_or_warm_up_model", Phase.CAPTURE)])
def test_the_failing_method_names_the_phase(method: str, phase: Phase) -> None:
    # V0 worker/worker_base.py execute_method: "Error executing method %r. This might cause deadlock in
    # distributed execution." (V1 before 0.9 too); only the loading milestone before it.
    text = ("INFO 03-27 10:29:01 model_runner.py:680] Starting to load model /m...\n"
            f"ERROR 03-27 10:29:13 worker_base.py:620] Error executing method '{method}'. This might cause deadlock "
            f"in distributed execution.\n")
    report = report_from_log_text(text, "x")
    assert (report.failure.kind, report.failure.phase) == (FailureKind.CRASH, max(Phase.LOAD, phase, key=list(Phase).index))


def test_a_traceback_frame_names_the_phase() -> None:
    # v1/executor/multiproc_executor.py worker_busy_loop, then gpu_worker.py compile_or_warm_up_model
    text = (tagged("Worker_TP1", "WorkerProc hit an exception.", "ERROR", "multiproc_executor.py:949")
            + tagged("Worker_TP1", "Traceback (most recent call last):", "ERROR", "multiproc_executor.py:949")
            + tagged("Worker_TP1", '  File "/x/vllm/v1/worker/gpu_worker.py", line 588, in compile_or_warm_up_model',
                     "ERROR", "multiproc_executor.py:949"))
    f = report_from_log_text(text, "x").failure
    assert (f.kind, f.phase, f.rank) == (FailureKind.CRASH, Phase.CAPTURE, 1)


def test_a_failure_after_the_server_came_up_is_a_note() -> None:
    text = (HEALTHY_KV + tagged("EngineCore", "init engine (profile, create kv cache, warmup model) took 52.31 s",
                                src="core.py:406")
            + tagged("APIServer", "Application startup complete.", src="launcher.py:1")
            + tagged("EngineCore", "EngineCore encountered a fatal error.", "ERROR", "core.py:720")
            + tagged("EngineCore", "Traceback (most recent call last):", "ERROR", "core.py:720"))
    report = report_from_log_text(text, "x")
    assert report.failure is None and report.verdict is Verdict.OK
    assert any(w.startswith("after startup finished: ") for w in report.warnings)


def test_no_milestone_means_no_phase() -> None:
    text = "ERROR 07-04 17:35:16 [multiproc_executor.py:140] Worker proc VllmWorker-1 died unexpectedly, shutting down executor.\n"
    f = report_from_log_text(text, "x").failure
    assert (f.kind, f.phase) == (FailureKind.WORKER_DIED, None)


# --------------------------------------------------------------------------------------------
# 2. The parallel layout from what the prefixes say

KV = "Available KV cache memory: 4.0 GiB"


def test_worker_tp0_alone_means_tp_at_least_two() -> None:
    report = report_from_log_text(tagged("Worker_TP0", KV), "x")
    assert report.config.tensor_parallel_size is None and [r.rank for r in report.ranks] == [0]
    assert any(w.startswith("tensor_parallel_size: ≥ 2, size not stated") for w in report.warnings)


def test_all_tp_ranks_named_give_the_size() -> None:
    report = report_from_log_text(tagged("Worker_TP0", KV) + tagged("Worker_TP1", KV) + tagged("Worker_TP2", KV), "x")
    assert report.config.tensor_parallel_size == 3 and not any("≥" in w for w in report.warnings)


def test_dp_tp_ep_names_map_to_their_global_rank() -> None:
    # multiproc_executor.py names Worker_DP3_TP0_EP12; parallel_state.py's EP group spans dp × tp, so
    # EP 12 on DP 3 means TP = 4 and global rank (3 × 1 + 0) × 4 + 0 = 12.
    report = report_from_log_text(tagged("Worker_DP3_TP0_EP12", KV), "x")
    assert [r.rank for r in report.ranks] == [12] and report.config.tensor_parallel_size == 4
    assert report.ranks[0].tp_rank == 0


def test_ray_prefixes_nested_and_plain() -> None:
    # Ray Serve → EngineCore → Ray's actor → vLLM's own tag: the last one printed the line
    text = ("(ServeReplica:app:LLMServer pid=28488) (EngineCore pid=29087) (RayWorkerProc pid=29271) (Worker_TP1 "
            f"pid=29271) INFO 08-19 18:00:26 [gpu_worker.py:1] {KV}\n"
            f"(RayWorkerWrapper pid=4418, ip=192.168.200.191) INFO 08-02 01:57:11 model_runner.py:692] Loading model "
            f"weights took 28.8984 GB\n")
    report = report_from_log_text(text, "x")
    by_rank = {r.rank: r for r in report.ranks}
    assert by_rank[1].owners[Owner.KV_CACHE] == G("4.0")
    ray = [r for r in report.ranks if r.owners[Owner.WEIGHTS] == G("28.8984")]
    assert len(ray) == 1 and ray[0].rank != 1
    assert any("name no rank" in w for w in report.warnings)


def test_a_folded_ray_line_stands_for_more_workers_whose_figures_are_not_invented() -> None:
    # Ray's log deduplication folds lines that differ only in their numbers
    text = ("(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] model weights take "
            "20.64GiB; non_torch_memory takes 0.28GiB; PyTorch activation peak memory takes 1.52GiB; the rest of the "
            "memory reserved for KV Cache is 21.20GiB. [repeated 30x across cluster]\n")
    report = report_from_log_text(text, "x")
    assert len(report.ranks) == 1 and report.ranks[0].owners[Owner.WEIGHTS] == G("20.64")
    note = next(w for w in report.warnings if "across cluster" in w)
    assert "[repeated 30x across cluster]" in note and "not in the log" in note


@pytest.mark.parametrize("command, tp, pp", [
    ("$ vllm serve deepseek-ai/DeepSeek-V3 -tp=8 -pp=4 --max-model-len 32768", 8, 4),
    ("python -m vllm.entrypoints.openai.api_server --model m --tensor-parallel-size 2 \\\n"
     "  --pipeline-parallel-size 2 --gpu-memory-utilization 0.95", 2, 2),
    ("vllm serve m -tp 4", 4, 1),  # no -pp: vLLM's default, kept (diff compares it)
])
def test_a_pasted_command_states_the_sizes(command: str, tp: int, pp: int) -> None:
    report = report_from_log_text(command + "\n" + tagged("Worker_TP0", KV), "x")
    assert report.config.tensor_parallel_size == tp
    assert report.config.extra_args.get("pipeline_parallel_size") == pp


def test_the_engine_line_beats_a_command_and_flags_inside_log_records_are_no_command() -> None:
    text = ("vllm serve m -tp 4\n" + tagged("EngineCore", "Initializing a V1 LLM engine (v0.33.0) with config: "
                                              "model='m', tensor_parallel_size=2, pipeline_parallel_size=1",
                                              src="core.py:121")
            + tagged("Worker_TP0", "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                     "--gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8981 without CUDA graph "
                     "memory profiling."))
    report = report_from_log_text(text, "x")
    assert report.config.tensor_parallel_size == 2 and report.config.gpu_memory_utilization == 0.9


# --------------------------------------------------------------------------------------------
# 3. Wrapped and quoted errors rejoined whole

# kv_cache_planning.py _check_enough_kv_cache_memory, raised in the engine core (0.33 wording).
ERROR = ("ValueError: To serve at least one request with the model's max seq len (262144), (24.0 GiB KV cache is "
         "needed, which is larger than the available KV cache memory (3.18 GiB). Based on the available memory, the "
         "estimated maximum model length is 34736. Try increasing `gpu_memory_utilization` (which also controls CPU "
         "memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See "
         "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
RECORD = "ERROR 08-12 10:00:00 [core.py:1010] " + ERROR


def _styles(width: int) -> dict[str, str]:
    wrapped = textwrap.wrap(RECORD, width, break_long_words=False)  # a word longer than a line stays whole
    return {
        "wrapped at spaces": "\n".join(wrapped),
        "folded mid-word": "\n".join(RECORD[i:i + width] for i in range(0, len(RECORD), width)),
        "quote bars ▎": "\n".join("▎ " + line for line in wrapped),
        "a terminal pane │": "\n".join(f"│ {line} │" for line in wrapped),
        "mail quotes >": "\n".join("> " + line for line in wrapped),
        "a bullet": "- " + "\n  ".join(wrapped),
        "a bullet, flat": "• " + "\n".join(wrapped),
        "an indented fence": "    ```\n" + "\n".join("    " + line for line in wrapped) + "\n    ```",
        "its own lines": RECORD.replace(" Based on", "\nBased on").replace(" Try increasing", "\nTry increasing"),
    }


@pytest.mark.parametrize("width", [60, 62, 69, 80, 94, 100, 105, 120, 143, 191])
def test_a_wrapped_does_not_fit_error_is_read_whole(width: int) -> None:
    for style, text in _styles(width).items():
        report = report_from_log_text(text, "x")
        cap = report.capacity
        assert (report.failure.kind, report.failure.message, report.config.max_model_len, cap.kv_needed_bytes,
                cap.max_feasible_model_len) == (FailureKind.DOES_NOT_FIT, ERROR, 262144, G("24.0"), 34736), style
        assert "lower --max-model-len to 34736" in report.verdict_reason, style


# --------------------------------------------------------------------------------------------
# 4. More wordings into owners

def test_older_v1_profile_line_gives_activation_and_non_torch() -> None:
    # utils.py MemoryProfilingResult.__repr__ in 0.9–0.11: non_kv = weights + torch peak + non-torch
    text = ("(EngineCore_DP0 pid=1) DEBUG 09-28 21:12:43 [v1/worker/gpu_worker.py:297] Memory profiling takes 14.40 "
            "seconds. Total non KV cache memory: 10.22GiB; torch peak memory increase: 1.40GiB; non-torch forward "
            "increase memory: 0.02GiB; weights memory: 8.80GiB.\n")
    o = report_from_log_text(text, "x").ranks[0].owners
    assert (o[Owner.WEIGHTS], o[Owner.ACTIVATION_PEAK], o[Owner.NON_TORCH]) == (G("8.80"), G("1.40"), G("0.02"))


def test_npu_profile_and_free_memory_lines() -> None:
    # vllm-ascend worker.py: its MemoryProfilingResult.__repr__ and determine_available_memory's
    # f"Available memory: {available_kv_cache_memory}, total memory: {total_npu_memory}"
    text = (tagged("Worker_TP0", "Total npu memory: 61.27 GiB; Total non KV cache memory: 3.2 GiB; torch peak memory "
                   "increase: 0.5 GiB; non-torch forward increase memory: 0.4 GiB.", "DEBUG", "worker.py:1")
            + tagged("Worker_TP0", "Available memory: 53000000000, total memory: 65788161556", src="worker.py:1"))
    rank = report_from_log_text(text, "x").ranks[0]
    assert (rank.device_total_bytes, rank.kv_available_bytes) == (65788161556, 53000000000)
    assert (rank.owners[Owner.ACTIVATION_PEAK], rank.owners[Owner.NON_TORCH]) == (G("0.5"), G("0.4"))


def test_the_memory_profiling_results_table() -> None:
    # worker.py in 0.6.5 (vllm#10511), tab-separated
    fields = ["Memory profiling results:", "duration\t0.75 seconds", "total_gpu_memory\t79.22GiB",
              "gpu_memory_utilization\t0.90", "the current vLLM instance can use\t71.29GiB",
              "model weights take\t14.96GiB", "non_torch_memory\t1.79GiB", "PyTorch activation peak memory\t1.26GiB",
              "available_kv_cache_memory\t53.29GiB"]
    text = "".join(f"INFO 12-13 19:54:18 worker.py:243] {f}\n" for f in fields)
    report = report_from_log_text(text, "x")
    rank = report.ranks[0]
    assert (rank.device_total_bytes, rank.requested_bytes, rank.kv_available_bytes) == (G("79.22"), G("71.29"),
                                                                                         G("53.29"))
    o = rank.owners
    assert (o[Owner.WEIGHTS], o[Owner.NON_TORCH], o[Owner.ACTIVATION_PEAK]) == (G("14.96"), G("1.79"), G("1.26"))


def test_only_blocks_known_gives_tokens_and_the_verdict_says_how() -> None:
    # v1/metrics/loggers.py log_engine_initialized; kv_cache_utils.py without "per request"
    text = (tagged("APIServer", "non-default args: {'max_model_len': 8192}", src="utils.py:1")
            + tagged("APIServer", "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 14834",
                     src="loggers.py:142"))
    report = report_from_log_text(text, "x")
    assert report.capacity.kv_tokens == 14834 * 16 and report.verdict is Verdict.OK
    assert "tokens derived from the block count" in report.verdict_reason and "14,834" in report.verdict_reason
    # kv_cache_utils.py in 0.7 (vllm#12569), with "Maximum concurrency …" as some builds print it
    text = ("INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381\n"
            "INFO 01-30 03:19:14 kv_cache_utils.py:398] Maximum concurrency for 2048 tokens: 10.79x\n")
    report = report_from_log_text(text, "x")
    assert (report.config.max_model_len, report.capacity.kv_tokens) == (2048, 1381 * 16)


def test_weights_in_megabytes_and_on_gaudi() -> None:
    # V0 0.3 model_runner.py: f"Loading model weights took {usage / float(2**20):.2f} MB"
    rank = report_from_log_text("INFO 02-29 19:21:45 model_runner.py:90] Loading model weights took 244.61 MB\n",
                                "x").ranks[0]
    assert rank.owners[Owner.WEIGHTS] == round(244.61 * 2**20)
    # HabanaAI vllm-fork hpu_model_runner.py load_model
    text = ("INFO 10-23 04:16:19 hpu_model_runner.py:692] Loading model weights took in total 7.481 GiB of device memory "
            "(7.486 GiB/94.62 GiB used) and 1.2 GiB of host memory (3.4 GiB/1007 GiB used)\n")
    rank = report_from_log_text(text, "x").ranks[0]
    assert (rank.owners[Owner.WEIGHTS], rank.device_total_bytes) == (G("7.481"), G("94.62"))


# --------------------------------------------------------------------------------------------
# Issue 26's newcomer list: a `fold`ed paste, and `ingest` of a report

def test_a_folded_paste_is_read_joined_and_the_cut_lines_named() -> None:
    log = ("INFO 05-19 02:17:43 [gpu_worker.py:462] Available KV cache memory: 111.99 GiB\n"
           "INFO 05-19 02:17:43 [kv_cache_utils.py:1710] GPU KV cache size: 229,344 tokens\n"
           "INFO 05-19 02:17:43 [kv_cache_utils.py:1711] Maximum concurrency for 16,384 tokens per request: 14.00x\n")
    folded = "\n".join(line[i:i + 60] for line in log.splitlines() for i in range(0, len(line), 60)) + "\n"
    assert "V cache size" not in folded  # `fold -w 60` cut the words the scan looks for
    report = report_from_log_text(folded, "paste.txt")
    assert (report.capacity.kv_tokens, report.config.max_model_len, report.verdict) == (229344, 16384, Verdict.OK)
    note = next(w for w in report.warnings if "column 60" in w)
    assert note.startswith("paste.txt: lines 1, 3, 5 (3 in all) stop at column 60 and go on in the next line")
    # without the joining, the KV size line was lost and the verdict fell to "not enough facts"


def test_ingest_of_a_report_says_what_ingest_reads(tmp_path) -> None:
    report = tmp_path / "a.json"
    report.write_text('{"schema": "kvaudit.report/1", "ranks": []}', encoding="utf-8")
    with pytest.raises(BadInputError, match=r"a kvaudit report \(kvaudit\.report/1\), not a log: `kvaudit ingest` reads "
                                            r"vLLM startup logs; `kvaudit show`, `kvaudit diff` and `kvaudit plan` read "
                                            r"reports"):
        report_from_logs([(report.read_text(encoding="utf-8"), "a.json")])
    with pytest.raises(BadInputError, match=r"^x: not a vLLM log: no vLLM log lines found \(looked for `\(Worker_TP0"):
        report_from_logs([("hello\n", "x")])
