"""Real pastes, round fourteen (stop 47): committed log files and public excerpts, each test naming
its source."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.diff import diff_reports
from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.boot_record import UNFINISHED, UNFINISHED_PAST_CAPTURE
from kvaudit.errors import BadInputError
from kvaudit.schema import FailureKind, KnobDifference, Owner, Phase, Verdict

_DATA = Path(__file__).parent / "data" / "round_fourteen"


def _text(name: str) -> str:
    return (_DATA / name).read_text(encoding="utf-8")


def test_the_api_server_dying_after_the_engine_started_is_the_boots_failure() -> None:
    """parallelworks/activate-rag-vllm's vllm.out (0.15.1, gpt-oss-120b TP2): the engine's init line,
    then the API server's traceback (`openai_harmony.HarmonyError`), no `Application startup
    complete`, the workers told to exit. Before, this read `ok` with the crash as a note."""
    report = report_from_log_text(_text("gpt_oss_harmony_after_engine.log"), "x")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.message.startswith("openai_harmony.HarmonyError: invalid tiktoken vocab file")
    assert report.verdict is not Verdict.OK
    assert not [w for w in report.warnings if w.startswith("after startup finished")]


def test_a_failure_after_the_server_came_up_stays_a_note() -> None:
    """The same file with the server's `Application startup complete.` before the traceback: the
    boot finished, and what failed after it is a note."""
    text = _text("gpt_oss_harmony_after_engine.log").replace(
        "Traceback (most recent call last):",
        "INFO:     Application startup complete.\n\x1b[0;36m(APIServer pid=21)\x1b[0;0m Traceback (most recent call last):", 1)
    report = report_from_log_text(text, "x")
    assert report.failure is None and report.verdict is Verdict.OK
    assert [w for w in report.warnings if w.startswith("after startup finished: openai_harmony.HarmonyError")]


def test_two_starts_of_the_server_in_one_file_are_read_as_the_last() -> None:
    """mrpid12org/imageworks's nohup.out (0.10.2): a start refused by the free-memory check (13.58
    GiB free), `vLLM server exited with status 1`, then a start that finished with 14.66 GiB free.
    Before, the first start's free memory was read as the second's (headroom -0.01 GiB for +1.07)."""
    report = report_from_log_text(_text("two_serve_starts.log"), "x")
    assert report.failure is None and report.verdict is Verdict.OK
    assert report.ranks[0].free_at_start_bytes == round(14.66 * 2**30)
    assert ("x: 2 starts of `vllm serve` (its version line); the report reads the last, from line 8 on: the "
            "earlier ones' figures and failures are not in it") in report.warnings


def test_one_start_gets_no_note_of_starts() -> None:
    second = "".join(_text("two_serve_starts.log").splitlines(keepends=True)[7:])
    report = report_from_log_text(second, "x")
    assert report.ranks[0].free_at_start_bytes == round(14.66 * 2**30)
    assert not [w for w in report.warnings if "starts of `vllm serve`" in w]


def test_the_workers_memory_summary_shows_the_capture_done() -> None:
    """kubesimplify's blog post (0.27.1, Qwen3-235B-A22B FP8, TP4): the excerpt ends on each rank's
    `Free memory on device … 0.32 GiB for CUDAGraph memory` line, which the worker prints after its
    capture: the warning must not say the capture is missing."""
    report = report_from_log_text(_text("graph_summary_then_end.log"), "x")
    assert UNFINISHED_PAST_CAPTURE in report.warnings
    assert UNFINISHED not in report.warnings


def test_a_start_that_prints_its_version_twice_is_one_start() -> None:
    """A start may print its version line and the logo's version line (0.1x logs each logo line):
    one process's run of them is one start."""
    lines = _text("two_serve_starts.log").splitlines(keepends=True)
    logo = "\x1b[1;36m(APIServer pid={pid})\x1b[0;0m INFO 09-30 18:28:54 [utils.py:325]  █ ▀▄▀ █  version 0.10.2\n"
    text = "".join([lines[0], logo.format(pid=941339), *lines[1:8], logo.format(pid=943457), *lines[8:]])
    report = report_from_log_text(text, "x")
    assert [w.split(";")[0] for w in report.warnings if "starts of `vllm serve`" in w] == [
        "x: 2 starts of `vllm serve` (its version line)"]
    assert report.ranks[0].free_at_start_bytes == round(14.66 * 2**30)


def test_an_estimate_vllm_did_not_charge_leaves_the_pool_to_the_capture() -> None:
    """sridhar1804/local-ai's logs/vllm.log (0.19.1, Phi-3-mini): `Estimated CUDA graph memory: 0.51
    GiB total`, then "In v0.19, CUDA graph memory profiling will be enabled by default … To try it
    now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1": not charged when KV was sized; the capture
    took 0.46 GiB. Before, the pool read 0.51 (the larger) with nothing said."""
    report = report_from_log_text(_text("estimate_not_charged_0191.log"), "x")
    rank = report.ranks[0]
    assert rank.graph_pool_estimate_bytes == round(0.51 * 2**30)  # the log's estimate, as the contract keeps it
    assert rank.owners[Owner.GRAPH_POOL] == rank.graph_pool_actual_bytes == round(0.46 * 2**30)
    assert ("rank 0: vLLM profiled 0.51 GiB of CUDA graph memory but did not charge it when it sized the KV cache "
            "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS off); capture took 0.46 GiB: those bytes were not "
            "budgeted") in report.warnings


def test_a_restart_that_states_nothing_yet_leaves_the_start_that_died() -> None:
    """Round fifteen, a `journalctl -u vllm-assistant` paste (0.15.1): the start dies at KV sizing
    (3.0 GiB needed, 1.87 available), systemd restarts the service, and the paste ends on the new
    start's banner. Read from the last start on, the report had nothing; it reads the one that died."""
    report = report_from_log_text(_text("journal_restart_after_death.log"), "x")
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT
    assert report.capacity.max_feasible_model_len == 10224
    assert ("x: 2 starts of `vllm serve` (its version line); the report reads start 1, lines 1–8, the last that "
            "states a memory figure or a failure: the later ones' lines state neither") in report.warnings


def test_records_shortened_to_level_and_colon_are_read() -> None:
    """Round fifteen, a deployment hand-off note (PP=2, a nightly): the traceback's records keep the
    process tag and `ERROR:` only (`(Worker_PP1 pid=297) ERROR: torch.AcceleratorError: …`). Before,
    no failure was read from them."""
    report = report_from_log_text(_text("level_colon_records.log"), "x")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.message == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert report.failure.rank == 1


def test_diff_compares_pipeline_parallel_sizes() -> None:
    """Round fifteen: a blog's PP=2 excerpt (`--pipeline-parallel-size 2`, Worker_PP0/PP1) against
    another setup: `kvaudit diff` named tp and max_model_len and never pp. Two logs that state two
    sizes are not comparable; a log that does not state it is listed as one-sided. A log whose engine line
    states 1 keeps that 1 (real pastes round nineteen: PP=2 against PP=1 was called comparable)."""
    pp2 = report_from_log_text(_text("pp2_blog_excerpt.log"), "a")
    pp4 = report_from_log_text(_text("pp2_blog_excerpt.log").replace("--pipeline-parallel-size 2",
                                                                      "--pipeline-parallel-size 4"), "b")
    assert pp2.config.extra_args["pipeline_parallel_size"] == 2
    assert pp4.config.extra_args["pipeline_parallel_size"] == 4
    both = diff_reports(pp2, pp4)
    assert KnobDifference("pipeline_parallel_size", 2, 4) in both.knob_differences and not both.comparable
    stated_one = report_from_log_text(_text("two_serve_starts.log"), "c")
    assert stated_one.config.extra_args["pipeline_parallel_size"] == 1
    assert KnobDifference("pipeline_parallel_size", 2, 1) in diff_reports(pp2, stated_one).knob_differences
    unstated = report_from_log_text("INFO 03-18 04:59:31 [kv_cache_utils.py:1087] GPU KV cache size: 81,536 "
                                    "tokens\n", "d")
    assert "pipeline_parallel_size" not in unstated.config.extra_args
    one = diff_reports(pp2, unstated)
    assert KnobDifference("pipeline_parallel_size", 2, None) in (one.one_sided_knobs or ())


def test_two_compose_services_are_two_vllms() -> None:
    """Round fifteen, a `docker compose logs` paste of two services (qwen3.5-9b started with 2.43 GiB
    of KV; qwen3.5-4b died with -8.59 GiB), both `EngineCore_DP0 pid=132` in their own containers:
    read as one rank, the report said "-8.59 GiB … = 39,072 tokens" and no failure."""
    report = report_from_log_text(_text("compose_two_services.log"), "x")
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT
    assert report.ranks[0].owners[Owner.WEIGHTS] == round(3.85 * 2**30)
    assert ("x: the lines of 2 docker compose services (qwen3.5-9b, qwen3.5-4b), each a vLLM of its own; the report "
            "reads qwen3.5-4b's, the first that states a failure: pass qwen3.5-9b's lines on their own "
            "(`docker compose logs qwen3.5-9b`)") in report.warnings


def test_one_boot_across_compose_services_is_not_split() -> None:
    """A headless node's workers under a service of their own name each rank's process apart: one boot."""
    text = _text("compose_two_services.log").replace("qwen3.5-4b  | (EngineCore_DP0 pid=132)",
                                                     "node-b      | (Worker_DP1 pid=77)")
    report = report_from_log_text(text, "x")
    assert not [w for w in report.warnings if "docker compose services" in w]


def test_grep_line_numbers_that_skip_are_separate_lines() -> None:
    """Round fifteen, `journalctl … | grep -n` (0.15.1): `9:Feb 26 … ValueError: Free memory on device
    …`, then `67:` and `70:` systemd lines, which were glued onto the failure's message."""
    failure = report_from_log_text(_text("grep_n_journal.log"), "x").failure
    assert failure is not None and failure.kind is FailureKind.STARTUP_MEMORY
    assert failure.message.endswith("Decrease GPU memory utilization or reduce GPU memory used by other processes.")


def test_ray_folding_a_bars_redraws_counts_no_workers() -> None:
    """Round fifteen, an AMD blog's Ray TP=2 boot (0.9.2, ROCm): `Capturing CUDA graphs: 51%|… 34/67
    […] [repeated 34x across cluster]` folds one bar's redraws; both workers' KV lines are in the
    log. The note said 34 more workers' figures were missing."""
    report = report_from_log_text(_text("ray_bar_redraws_folded.log"), "x")
    assert not [w for w in report.warnings if w.startswith("Ray folded lines")]
    assert len(report.ranks) == 2


def test_ray_folding_a_logged_line_still_counts_workers() -> None:
    text = _text("ray_bar_redraws_folded.log").replace(
        "Capturing CUDA graphs:  51%|█████     | 34/67 [00:10<00:09,  3.34it/s] [repeated 34x across cluster]",
        "(RayWorkerWrapper pid=304442) INFO 07-25 02:40:06 [pynccl.py:69] vLLM is using nccl==2.21.5 "
        "[repeated 34x across cluster]")
    report = report_from_log_text(text, "x")
    assert [w for w in report.warnings if w.startswith("Ray folded lines (`[repeated 34x")]


def test_a_containers_restart_is_a_start_of_its_own() -> None:
    """Review: in a container every start's API server is pid 1; two starts of one pid, each with
    its own version line, are two starts (the refused one's 13.58 GiB free was read)."""
    report = report_from_log_text(_text("review_docker_restart_pid1.log"), "x")
    assert report.ranks[0].free_at_start_bytes == round(14.66 * 2**30)
    assert [w for w in report.warnings if w.startswith("x: 2 starts of `vllm serve`")]


def test_vllm_034s_logo_marks_a_start() -> None:
    """Review: 0.34 prints its logo as one multi-line record, the version line unlogged."""
    report = report_from_log_text(_text("review_two_starts_034_logo.log"), "x")
    assert report.ranks[0].free_at_start_bytes == round(14.66 * 2**30)
    assert [w for w in report.warnings if w.startswith("x: 2 starts of `vllm serve`")]


def test_an_error_long_after_the_engine_started_is_no_boot_failure() -> None:
    """Review: with no line that says the server is up (an excerpt, `--uvicorn-log-level warning`),
    a request's template error 75 min after the engine's init line struck while the server served."""
    report = report_from_log_text(_text("review_excerpt_ok_boot_then_request_error.log"), "x")
    assert report.failure is None and report.verdict is Verdict.OK
    assert [w for w in report.warnings if w.startswith("after startup finished: jinja2.exceptions.TemplateError")]


def test_vllm_034s_server_line_says_it_is_up() -> None:
    """Review: 0.34's `Starting vLLM server on http://…` (entry.py) is the server up: a request's
    error 10 s after it (inside the minute the server may take to start) is no boot failure."""
    text = _text("review_034_started_then_request_error.log").replace("11:30:02", "10:42:31")
    assert "10:42:31" in text
    report = report_from_log_text(text, "x")
    assert report.failure is None
    assert [w for w in report.warnings if w.startswith("after startup finished: jinja2.exceptions.TemplateError")]


def test_an_nccl_watchdog_timeout_is_the_cause_of_the_deaths() -> None:
    """Round fifteen, vllm#6042 (V0): `Worker VllmWorkerProcess pid 1159 died, exit code: -6`, then
    torch's `[Rank 0] Watchdog caught collective operation timeout: … ALLREDUCE … ran for 600059
    milliseconds`: the hung collective is why the worker died (the watchdog's SIGABRT, -6)."""
    failure = report_from_log_text(_text("nccl_watchdog_worker_died.log"), "x").failure
    assert failure is not None and failure.kind is FailureKind.TIMEOUT
    assert "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE" in failure.message
    assert failure.message.endswith("a collective (NCCL) hung past its timeout and the watchdog took the process down")


def test_a_condensed_tracebacks_source_line_places_the_failure() -> None:
    """Round fourteen, a gfx906 fork's devlog (engine 0.28.0rc2): its traceback condensed to
    `vllm/v1/worker/gpu_worker.py:573 in determine_available_memory` / `-> self.model_runner.profile_run()`.
    A full traceback's `File "…", line N, in …` gave the profile; this gave no phase."""
    failure = report_from_log_text(_text("condensed_traceback.log"), "x").failure
    assert failure is not None and failure.phase is Phase.PROFILE
    assert failure.message == "RuntimeError: Worker failed with error 'Constraints violated (L['query_start_loc'].size()[0])'"


def test_tpu_inferences_hbm_statistics_are_read() -> None:
    """Round sixteen, tpu-inference#2803: `Memory statistics | total_hbm_limit_gb=94.75GiB |
    total_hbm_limit_cap_gb=80.53GiB | total_hbm_used_gb=16.58GiB | total_hbm_avail_gb=63.95GiB`:
    the limit, the request, what is used before KV and the KV budget. Before: no figure known."""
    report = report_from_log_text(_text("tpu_hbm_statistics.log"), "x")
    rank = report.ranks[0]
    assert rank.device_total_bytes == round(94.75 * 2**30) and rank.requested_bytes == round(80.53 * 2**30)
    assert rank.kv_available_bytes == round(63.95 * 2**30)
    assert report.capacity.kv_tokens == 465_664


def test_gaudi_blocks_are_128_tokens_where_no_size_is_given() -> None:
    """Round sixteen, Gaudi's vllm-fork docs (Llama-3.1-8B): `# HPU blocks: 4107` beside `64.17 GiB
    reserved for KV cache` (16 MiB a block: 128 tokens); read at vLLM's 16, the tokens were 65,712.
    Its `init_cache_engine took …` line ends the startup."""
    report = report_from_log_text(_text("gaudi_v0_blocks.log"), "x")
    assert report.capacity.kv_tokens == 4107 * 128
    assert report.ranks[0].kv_available_bytes == round(64.17 * 2**30)
    # its `gpu_memory_utilization=0.9` is a share of the free memory, not the device's: not the config's
    assert report.config.gpu_memory_utilization is None
    assert not [w for w in report.warnings if w.startswith("the log ends before startup finished")]


def test_a_traceback_of_another_programs_frames_is_no_vllm_log() -> None:
    """Round sixteen, sglang-jax#408: a traceback whose frames are all `sgl_jax/srt/…`, ending in a
    TPU out-of-memory error, was read as a vLLM crash; SGLang's other logs are refused already."""
    with pytest.raises(BadInputError, match=r"x: a traceback in sgl_jax's code \(`/home/gcpuser/.*/memory_pool.py`\), "
                                            r"with no line of vLLM's: kvaudit reads vLLM's logs"):
        report_from_log_text(_text("sglang_jax_traceback.log"), "x")
    # a user's own script's frames name no server: read (the review's torch OOM in a script of one's own)
    own = _text("sglang_jax_traceback.log").replace("sglang-jax/python/sgl_jax/srt", "myproject/app")
    assert report_from_log_text(own, "x").failure is not None
    # the same frames with one in vLLM's own code are a vLLM boot's
    text = _text("sglang_jax_traceback.log").replace("sglang-jax/python/sgl_jax/srt/mem_cache", "vllm/v1/worker", 1)
    assert report_from_log_text(text, "x").failure is not None


def test_the_xpu_workers_profile_lines_are_read() -> None:
    """Round sixteen, ALCF Aurora's vLLM page (Intel Data Center GPU Max): `total GPU memory: 65520.00
    MB` (MiB: a 64 GiB tile), `peak memory usage is 13552.69 MB`, `non-torch mem is 426.94 MB`. Before,
    only the weights were read; the review caught the peak's non-torch counted twice."""
    rank = report_from_log_text(_text("xpu_profile_lines.log"), "x").ranks[0]
    assert rank.device_total_bytes == 65520 * 2**20
    assert rank.owners[Owner.NON_TORCH] == round(426.94 * 2**20)
    # the line's peak holds the non-torch memory too (xpu_worker.py): weights + activation + non-torch = peak
    assert rank.owners[Owner.ACTIVATION_PEAK] == round(13552.69 * 2**20) - round(426.94 * 2**20) - round(12.5533 * 2**30)


def test_a_crash_before_the_watchdog_stays_the_cause() -> None:
    """Review: rank 1's illegal memory access hung the collective; rank 0's watchdog fired ten minutes
    later. The crash is the cause, the timeout its consequence."""
    failure = report_from_log_text(_text("review_nccl_watchdog_after_crash.log"), "x").failure
    assert failure is not None and failure.kind is FailureKind.CRASH and failure.rank == 1
    assert "illegal memory access" in failure.message


def test_a_log_against_a_run_lists_no_parallel_size_it_does_not_state() -> None:
    """Review: a log keeps pp/dp/pcp only above 1, a run's absent is 1: its silence against a run's 1
    is no one-sided knob (every log-against-run diff listed all three)."""
    from kvaudit.engines.inputs import load_report
    examples = Path(__file__).parents[2] / "configs" / "examples"
    result = diff_reports(load_report(examples / "cpu-batch512.vllm.log"), load_report(examples / "cpu-batch512.json"))
    sizes = {"pipeline_parallel_size", "data_parallel_size", "prefill_context_parallel_size"}
    assert not [k for k in (result.one_sided_knobs or ()) + result.knob_differences if k.knob in sizes]
