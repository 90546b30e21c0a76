"""Real pastes, round twenty-one (stop 51): boots that died in native code or stopped mid-capture, Ray's and
Ascend's own failure lines, crashes while serving; each test names its source, the data are the excerpts
(tests/unit/data/round_twenty_one; the two `kv_then_*` files are the KV lines of vllm#17242 with one line of a
crash report after them, as a shell or UCX prints it)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.diff import diff_reports
from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.boot_record import UNFINISHED, UNFINISHED_BEFORE_KV, unfinished_in_capture
from kvaudit.schema import EnvDifference, FailureKind, Phase, Verdict

_DATA = Path(__file__).parent / "data" / "round_twenty_one"


def _report(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


def test_a_native_backtrace_after_the_kv_lines_is_a_crash_not_ok() -> None:
    """vllm#17242 (DeepSeek TP16 on Ray, 0.8.4): seven workers' `GPU KV cache size` lines, then a worker's
    numbered native frames (`14 0x0000000000004493 ???()  /usr/lib/x86_64-linux-gnu/libffi.so.8:0`). Before: ok,
    no failure, `ingest` exit 0."""
    report = _report("ray_tp16_kv_then_native_frames.log")
    assert report.verdict is Verdict.UNKNOWN
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.phase is Phase.KV


@pytest.mark.parametrize(("name", "words", "signal"), [
    ("kv_then_shell_segfault.log", "Segmentation fault (core dumped)", "the process ended on SIGSEGV"),
    ("kv_then_ucx_caught_signal.log", "Caught signal 11 (Segmentation fault", "Caught signal 11"),
])
def test_the_shells_and_ucxs_crash_reports_end_the_boot(name: str, words: str, signal: str) -> None:
    """The shell's `Segmentation fault (core dumped)` and UCX's `Caught signal 11 (Segmentation fault: …)` after
    the KV lines: each read ok before (only `Killed` and faulthandler's `Fatal Python error` were known)."""
    report = _report(name)
    assert report.verdict is Verdict.UNKNOWN
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.phase is Phase.KV and words in report.failure.message
    assert signal in report.failure.message


def test_rays_signal_handler_names_the_crash_and_the_frames_its_phase() -> None:
    """vllm#17770 (DeepSeek-R1 TP16 on Ray, 0.8.4): `*** SIGSEGV received at time=1746566409 on cpu 131 ***`,
    then faulthandler's dump through capture_model. The message was faulthandler's least telling frame."""
    report = _report("ray_tp16_sigsegv_in_capture.log")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.phase is Phase.CAPTURE
    assert report.failure.message.startswith("*** SIGSEGV received at time=1746566409 on cpu 131 ***")


def test_a_log_that_ends_inside_the_capture_says_where() -> None:
    """baidu/vLLM-Kunlun#330: the KV lines, then the capture bar up to `6/35` while a wrapper still polls the
    server. The warning said the capture was not in the log."""
    report = _report("kv_then_capture_bar_cut.log")
    assert report.verdict is Verdict.OK  # the KV lines fit; the warning says what they cannot
    assert unfinished_in_capture("6/35 graphs (mixed prefill-decode, PIECEWISE)") in report.warnings
    assert UNFINISHED not in report.warnings


def test_ascends_capture_failure_is_the_boots_in_capture_on_its_rank() -> None:
    """vllm-ascend#3389 (Qwen3-VL-235B, TP16): `(Worker_TP11 …) ERROR … ACLgraph sizes capture fail:
    RuntimeError:`, then an HCCL socket timeout. Before: no failure at all (verdict unknown, failure null)."""
    report = _report("ascend_aclgraph_capture_fail.log")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert (report.failure.phase, report.failure.rank) == (Phase.CAPTURE, 11)
    assert report.failure.message.startswith("ACLgraph sizes capture fail")


def test_rays_memory_monitor_is_host_memory_not_a_device_oom() -> None:
    """vllm#15102 (DeepSeek-V3 on 16 H20, Ray): `ray.exceptions.OutOfMemoryError: Task was killed due to the
    node running low on memory.` Before: a device OOM."""
    report = _report("ray_host_memory_monitor.log")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert "the node's host memory (RAM) ran low, not a device's" in report.failure.message


def test_a_workers_crash_in_a_served_step_is_no_startup_failure() -> None:
    """vllm-ascend#5399 (DeepSeek-V3.2, DP4×TP4+EP on two nodes): `WorkerProc hit an exception.` through
    worker_busy_loop → execute_model(scheduler_output, …) → `RuntimeError: bIndex is out of range: 3068`, then
    the engine core's `EngineCore encountered a fatal error.` Before: the boot's failure on rank 13, beside a
    warning that it came after startup."""
    report = _report("ascend_dp_worker_crash_while_serving.log")
    assert report.failure is None
    assert "after startup finished: RuntimeError: bIndex is out of range: 3068" in report.warnings
    assert "after startup finished: WorkerProc hit an exception." in report.warnings


def test_a_v0_boot_against_a_v1_boot_is_an_engine_difference() -> None:
    """vllm#18446 (Qwen3-235B, 8 A100s, one build): works on V0 (`VllmWorkerProcess` workers), fails on V1
    (`VllmWorker rank=N`). The diff said nothing differed."""
    a, b = _report("v0_tp8_works.log"), _report("v1_tp8_custom_allreduce_fails.log")
    assert (a.engine.generation, b.engine.generation) == ("V0", "V1")
    diff = diff_reports(a, b)
    assert EnvDifference("engine.generation", "V0", "V1") in diff.environment_differences


def test_vllms_cuda_check_after_the_graph_addresses_is_a_death_in_capture() -> None:
    """The same V1 boot: `[custom_all_reduce.py:195] Registering 11960 cuda graph addresses` (the capture's end),
    then `Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:432 'invalid argument'` from every worker.
    Before: a death in the profile, its cause "not in the log"."""
    report = _report("v1_tp8_custom_allreduce_fails.log")
    assert report.failure is not None and report.failure.phase is Phase.CAPTURE
    assert report.failure.message.startswith("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:432")


def test_the_cp_world_line_states_the_dcp_size() -> None:
    """vllm#40585 (Qwen3.5 with DCP 4 on vllm-ascend): `Multiplying the GPU KV cache size by the cp_world_size 4
    (pcp_world_size 1 * dcp_world_size 4).` Before: `decode_context_parallel_size: null`, "≥ 2, size not stated"."""
    report = _report("dcp4_cp_world_line.log")
    assert report.config.decode_context_parallel_size == 4
    assert not any("decode_context_parallel_size: ≥" in w for w in report.warnings)
    # the tokens vLLM prints are the group's, each rank holding a quarter of every sequence
    assert report.verdict_reason == ("fits: 44.77 GiB KV on rank 0 holds 4,638,720 tokens across its DCP group of 4; "
                                     "max_model_len 262144 is within them")


@pytest.mark.parametrize(("name", "method", "tokens", "model"), [
    ("eagle3_json_spec_config_heading.log", "eagle3", 3, "/models/gpt-oss-120b"),
    ("mtp_dotted_spec_config.log", "mtp", 3, None),  # its flags alone, under a `### Configuration` heading
])
def test_a_pasted_commands_speculative_config_is_read(name: str, method: str, tokens: int, model: str | None) -> None:
    """vllm#26328 (`--speculative-config '{"model": …, "num_speculative_tokens": 3, "method":"eagle3", …}'`
    under a heading `vllm serve command:`) and vllm#50781 (`--speculative-config.method mtp`,
    `--speculative-config.num_speculative_tokens 3`): neither was read, and the heading's `command:` was taken
    for a second served model, so the model was dropped as conflicting."""
    report = _report(name)
    assert (report.config.speculative_method, report.config.num_speculative_tokens, report.config.model) == (
        method, tokens, model)


def test_v0s_monitor_names_a_worker_not_rank_0_and_its_signal() -> None:
    """vllm#13389 (V0 in compose): `Worker VllmWorkerProcess pid 354 died, exit code: -15`. V0's monitor watches
    the non-driver workers only, so the rank is not 0 (was 0), and −15 is SIGTERM: a stop, not a cause."""
    report = _report("v0_worker_died_sigterm.log")
    assert report.failure is not None and report.failure.kind is FailureKind.WORKER_DIED
    assert report.failure.rank is None
    assert report.failure.message.endswith("ended by SIGTERM, sent to stop it: look for the cause before this line")


def test_a_death_after_the_encoder_cache_line_is_in_the_profile() -> None:
    """vllm-ascend#12095 (Qwen3.5-27B): `Encoder cache will be initialized with a budget of …` (profile_run's
    first line for a multimodal model), then `EngineCore failed to start.` Before: no phase."""
    report = _report("encoder_cache_then_engine_failed.log")
    assert report.failure is not None and report.failure.phase is Phase.PROFILE


def test_the_concurrency_line_alone_says_the_length_fits() -> None:
    """vllm#14286 (Llama-3.1-8B int8, V1): `Maximum concurrency for 65,536 tokens per request: 1.46x`, then the
    capture, with no KV size line: one max-length request fits (vLLM's X = KV tokens ÷ max_model_len). It was
    looked for only after a KV line: unknown, no length."""
    report = _report("concurrency_line_alone.log")
    assert report.config.max_model_len == 65_536
    assert report.capacity.max_model_len_fits is True and report.verdict is Verdict.OK


def test_other_processes_in_torchs_oom_message_are_said_with_the_over_commit() -> None:
    """vllm#8731 (Qwen-32B TP4 with a 7B draft, V0): torch's OOM on GPU 0 names `Process 3179876 has 1.62 GiB
    memory in use` three times (the other workers' contexts) beside a 35.60 GiB request on a 39.56 GiB device.
    The report said nothing of them."""
    report = _report("v0_spec_oom_other_processes.log")
    assert report.failure is not None and report.failure.kind is FailureKind.OOM
    assert ("torch's out-of-memory message names 3 other processes on the device holding 4.86 GiB: with the "
            "boot's request (35.60 GiB) they pass the device (39.56 GiB) by 0.90 GiB; lower gpu_memory_utilization "
            "or move them") in report.warnings


@pytest.mark.parametrize(("name", "note"), [
    # tenstorrent/tt-xla#5727 (gemma-4-31B): `Hybrid KV cache manager is disabled for this hybrid model, …`
    ("hybrid_kv_manager_off.log", "vLLM's hybrid KV cache manager is off for this hybrid model: every layer, "
                                  "sliding-window or Mamba ones too, holds full-length KV, so the cache holds fewer "
                                  "tokens than the same memory would with it on"),
    # vllm#27620 (granite-4.0-micro, --enable-lora): `Using PunicaWrapperGPU.`, then a crash
    ("lora_punica_then_crash.log", "LoRA is on (vLLM's Punica wrapper): the adapters' slots are allocated with the "
                                   "model, inside the weights figure"),
    # QwenLM/Qwen3-VL#1267 (Qwen2.5-VL): `Encoder cache will be initialized with a budget of 98304 tokens, and
    # profiled with 1 video items of the maximum feature size.`
    ("video_encoder_budget.log", "the profile ran the multimodal encoder on 1 video item(s) of the largest size (an "
                                 "encoder cache budget of 98304 tokens): its outputs are in the activation peak"),
])
def test_what_else_shapes_startup_memory_is_said(name: str, note: str) -> None:
    """Real pastes round twenty-one (multimodal, LoRA, hybrid models): none of these lines was read."""
    assert note in _report(name).warnings


def test_a_log_that_stops_before_kv_says_how_far_it_got() -> None:
    """vllm#28923 (Kimi-K2 on MI300X, TP4, Kubernetes): the pod was killed while loading, the log's last line
    `Loading safetensors checkpoint shards:  10% Completed | 6/62`. The warning said only that what startup did
    after the log is not known."""
    report = _report("k8s_killed_during_load_shards.log")
    assert report.failure is None and report.verdict is Verdict.UNKNOWN
    assert f"{UNFINISHED_BEFORE_KV} (the furthest phase its lines reach: load, at 6/62 checkpoint shards)" in (
        report.warnings)


def test_a_native_frame_keeps_its_own_words() -> None:
    """The review of round twenty-one: the frame's message had become a bare traceback's, which the file lacks."""
    report = _report("ray_tp16_kv_then_native_frames.log")
    assert report.failure is not None
    assert report.failure.message.endswith("a frame of a native backtrace (UCX's): the process crashed in native code")


WARMUP_OOM = """\
(EngineCore pid=100) INFO 08-01 10:00:26 [kv_cache_utils.py:1000] GPU KV cache size: 291,264 tokens
(Worker pid=200) ERROR 08-01 10:00:30 [multiproc_executor.py:800] WorkerProc hit an exception.
(Worker pid=200) ERROR 08-01 10:00:30 [multiproc_executor.py:800] Traceback (most recent call last):
(Worker pid=200) ERROR 08-01 10:00:30 [multiproc_executor.py:800]   File "/v/gpu_worker.py", line 500, in \
compile_or_warm_up_model
(Worker pid=200) ERROR 08-01 10:00:30 [multiproc_executor.py:800]     self.execute_model(scheduler_output)
(Worker pid=200) ERROR 08-01 10:00:30 [multiproc_executor.py:800]   File "/v/gpu_worker.py", line 600, in execute_model
(Worker pid=200) ERROR 08-01 10:00:30 [multiproc_executor.py:800]     output = self.model_runner.execute_model(scheduler_output)
(Worker pid=200) ERROR 08-01 10:00:30 [multiproc_executor.py:800] torch.OutOfMemoryError: CUDA out of memory. \
Tried to allocate 2.00 GiB.
(EngineCore pid=100) ERROR 08-01 10:00:31 [core.py:900] EngineCore failed to start.
"""


def test_a_model_step_under_startups_warmup_is_startup() -> None:
    """The review of round twenty-one: Model Runner V2's warmup calls the worker's execute_model(scheduler_output)
    during startup, so that frame under compile_or_warm_up_model is no sign of a serving engine (this excerpt
    read ok, its OOM a note after startup)."""
    report = report_from_log_text(WARMUP_OOM, "warmup.log")
    assert report.verdict is Verdict.FAIL
    assert report.failure is not None and report.failure.kind is FailureKind.OOM


def test_rays_sigterm_report_is_no_crash() -> None:
    """Ray's handler reports the SIGTERM it stops a worker with as well: `*** SIGTERM received at time=…`."""
    text = ("INFO 08-01 10:00:26 [kv_cache_utils.py:1000] GPU KV cache size: 291,264 tokens\n"
            "(RayWorkerWrapper pid=3) *** SIGTERM received at time=1746566409 on cpu 1 ***\n")
    assert report_from_log_text(text, "sigterm.log").failure is None


@pytest.mark.parametrize(("text", "method", "dcp"), [
    # the engine line's `speculative_config=None` is what ran, whatever a pasted command asked
    ("$ vllm serve Qwen/Qwen3-8B --speculative-config '{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}'\n"
     "INFO 08-01 10:00:00 [core.py:70] Initializing a V1 LLM engine (v0.10.0) with config: model='Qwen/Qwen3-8B', "
     "speculative_config=None, tensor_parallel_size=1, max_seq_len=32768\n", None, 1),
    # a dotted field with no value before the next flag gives no method
    ("vllm serve Qwen/Qwen3-8B --speculative-config.method --tensor-parallel-size 2\n", None, 1),
    # 0.11–0.12's DCP-only wording
    ("(EngineCore_DP0 pid=1) INFO 10-01 10:00:26 [kv_cache_utils.py:1100] Multiplying the GPU KV cache size by the "
     "dcp_world_size 4.\n(Worker_TP0_DCP0 pid=3) INFO 10-01 10:00:25 [gpu_worker.py:330] Available KV cache memory: "
     "44.77 GiB\n", None, 4),
])
def test_the_reviews_speculative_and_dcp_cases(text: str, method: str | None, dcp: int) -> None:
    config = report_from_log_text(text, "case.log").config
    assert (config.speculative_method, config.decode_context_parallel_size) == (method, dcp)


def test_the_linker_missing_libcuda_is_the_cause() -> None:
    """QwenLM/Qwen3-VL#1267 (Qwen2.5-VL): `/usr/bin/ld: cannot find -lcuda`, `collect2: error: ld returned 1 exit
    status`, then `EngineCore failed to start.` The cause was said not to be in the log."""
    report = _report("video_encoder_budget.log")
    assert report.failure is not None and report.failure.phase is Phase.PROFILE
    assert report.failure.message.startswith("/usr/bin/ld: cannot find -lcuda")
    assert report.failure.message.endswith("the linker found no libcuda.so while Triton built a kernel's launcher "
                                           "(install the driver's libcuda, or point TRITON_LIBCUDA_PATH at it)")


def test_a_ray_workers_failure_names_its_node() -> None:
    """vllm#37974 (Kimi-K2.5 on 64 H100s, Ray TP8×PP8): `(RayWorkerWrapper pid=29113, ip=10.45.7.181) ERROR …
    Error executing method 'initialize_from_config'`. No report said which node failed."""
    report = _report("ray_pp_worker_error_node.log")
    assert report.failure is not None
    assert "the failure was printed by a Ray worker on the node at 10.45.7.181" in report.warnings


@pytest.mark.parametrize(("line", "extra"), [
    ("vllm serve deepseek-ai/DeepSeek-V3 -tp 8 -pp 2 --max-num-seqs 1 --dtype half", {"dtype": "half"}),
    ("vllm serve deepseek-ai/DeepSeek-R1 --data-parallel-size 8 --enable-expert-parallel", {"enable_expert_parallel": True}),
    ("vllm serve Qwen/Qwen3-30B-A3B -tp 2 -ep", {"enable_expert_parallel": True}),
])
def test_a_pasted_commands_dtype_and_expert_parallelism_are_read(line: str, extra: dict) -> None:
    """vllm#14726 (`--dtype half`) and the multi-node round's `--enable-expert-parallel` / `-ep`: read from `non-default
    args` only, so a paste with the command and no such line lost them."""
    config = report_from_log_text(line + "\nINFO 08-01 10:00:26 [kv_cache_utils.py:1000] GPU KV cache size: 291,264 "
                                         "tokens\n", "cmd.log").config
    assert {k: config.extra_args.get(k) for k in extra} == extra
