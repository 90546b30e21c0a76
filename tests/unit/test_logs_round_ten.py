"""Real pastes, round ten (stop 45): each test names the thread or form its log came from."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text

_LOADED = "(VllmWorker rank=0 pid=2480291) INFO 05-07 19:18:17 [loader.py:458] Loading weights took 3.07 seconds\n"


@pytest.mark.parametrize("line", [
    "./serve.sh: line 12: 48213 Killed                  vllm serve Qwen/Qwen3-32B --tensor-parallel-size 2",
    "/bin/sh: line 1:     7 Killed                  python3 -m vllm.entrypoints.openai.api_server --model m",
    "bash: line 1: 1234 Killed python x.py",
])
def test_a_shells_job_notice_of_a_killed_job_is_the_failure(line: str) -> None:
    """bash and sh name the job the kernel's SIGKILL ended: `SCRIPT: line N: PID Killed   COMMAND`."""
    report = report_from_log_text(_LOADED + line + "\n", "x")
    assert report.failure is not None and report.failure.kind.value == "crash"
    assert "the process was sent SIGKILL" in report.failure.message


@pytest.mark.parametrize("line", [
    "I read that line 3: 1234 Killed means the OOM killer",
    "serve.sh: line 12: 48213 Terminated              vllm serve m",
])
def test_a_sentence_or_another_signal_is_no_killed_failure(line: str) -> None:
    assert report_from_log_text(_LOADED + line + "\n", "x").failure is None


_DATA = Path(__file__).parent / "data" / "round_ten"


def _log(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


def test_an_oom_in_the_kv_tensors_allocation_is_in_the_kv_phase() -> None:
    """vllm#42147 (0.20.1): frames initialize_kv_cache_tensors → _allocate_kv_cache_tensors → torch.zeros."""
    failure = _log("kv_tensors_oom.log").failure
    assert failure is not None and (failure.kind.value, failure.phase.value if failure.phase else None) == ("oom", "kv")


def test_a_pasted_commands_kv_cache_dtype_is_read() -> None:
    """vllm#42147: `--kv-cache-dtype fp8` on the command line, its `non-default args` cut before it."""
    config = _log("kv_dtype_command.log").config
    assert (config.kv_cache_dtype, config.gpu_memory_utilization) == ("fp8", 0.6)


@pytest.mark.parametrize("prefix, model", [
    ("CUDA_VISIBLE_DEVICES=0,1 ", "Qwen/QwQ-32B-AWQ"),
    ("(base) root@287aa8679d31:/workdir# CUDA_VISIBLE_DEVICES=0,1 CUDA_LAUNCH_BLOCKING=1 ", "Qwen/QwQ-32B-AWQ"),
    ("env VLLM_USE_V1=0 ", "Qwen/QwQ-32B-AWQ"),
    ("then I set CUDA_VISIBLE_DEVICES=0,1 ", None),  # a person's sentence: no model of this boot
])
def test_a_serve_command_after_the_environment_it_sets_states_its_model(prefix: str, model: str | None) -> None:
    """vllm#15105: `CUDA_VISIBLE_DEVICES=0,1 … vllm serve Qwen_QwQ-32B-AWQ` had its flags read, not its model."""
    text = prefix + "vllm serve Qwen/QwQ-32B-AWQ --tensor-parallel-size 2\n" + _LOADED
    assert report_from_log_text(text, "x").config.model == model


def test_the_real_env_prefixed_command_states_its_model() -> None:
    config = _log("serve_env_prefix_namespace.log").config
    assert (config.model, config.tensor_parallel_size) == ("Qwen_QwQ-32B-AWQ", 2)


def test_v0s_args_namespace_line_states_the_knobs() -> None:
    """0.4–0.8's api_server `args: Namespace(…)`, defaults included, read up to the paste's cut."""
    text = ("INFO 03-19 07:26:22 [api_server.py:978] args: Namespace(subparser='serve', model_tag='Qwen_QwQ-32B-AWQ', "
            "config='', port=8000, allowed_origins=['*'], tensor_parallel_size=2, gpu_memory_utilization=0.95, "
            "max_model_len=30000, block_si\n" + _LOADED)
    config = report_from_log_text(text, "x").config
    assert (config.model, config.tensor_parallel_size, config.gpu_memory_utilization, config.max_model_len) == (
        "Qwen_QwQ-32B-AWQ", 2, 0.95, 30000)


@pytest.mark.parametrize("text, pairs", [
    ("Namespace(a='x, b=2', c=1, d='cut", {"a": "x, b=2", "c": 1}),  # a quoted comma; the cut ends it
    # an object's repr ends the reading: a `, key=` inside it is no knob (the review's reproducer)
    ("Namespace(tp=2, spec=Spec(model='draft/other', max_model_len=111), max_model_len=4096)", {"tp": 2}),
    # a string longer than a literal is read: the `tensor_parallel_size=8` in it is no knob
    ("Namespace(tensor_parallel_size=2, chat_template='" + "x" * 2100 + ", tensor_parallel_size=8', y=1)",
     {"tensor_parallel_size": 2}),
])
def test_namespace_pairs_read_only_plain_values_from_the_start(text: str, pairs: dict) -> None:
    from kvaudit.engines.logs.knobs import namespace_pairs
    assert namespace_pairs(text) == pairs


def test_a_quoted_namespace_is_no_config() -> None:
    """Only the api_server's record states the knobs, not an ERROR line that quotes one."""
    text = ("ERROR 03-19 07:26:22 [run.py:9] bad args: Namespace(model_tag='bench/model', tensor_parallel_size=8)\n"
            + _LOADED)
    config = report_from_log_text(text, "x").config
    assert (config.model, config.tensor_parallel_size) == (None, None)


@pytest.mark.parametrize("name, model", [
    ("starting_to_load.log", "Qwen_QwQ-32B-AWQ"),  # vllm#15105's first run
])
def test_the_model_a_worker_starts_to_load_is_the_model(name: str, model: str) -> None:
    assert _log(name).config.model == model


def test_a_config_line_model_wins_over_the_loading_line() -> None:
    text = ("INFO 12-19 22:58:41 llm_engine.py:226] Initializing an LLM engine (v0.6.1) with config: model='org/A', "
            "speculative_config=None, tokenizer='org/A', tensor_parallel_size=1\n"
            "INFO 12-19 22:58:42 model_runner.py:997] Starting to load model /models/a-local-copy...\n" + _LOADED)
    assert report_from_log_text(text, "x").config.model == "org/A"


def test_kv_bytes_then_a_cut_warns_that_startup_did_not_finish() -> None:
    """strixhalo PR 5: `Available KV cache memory: 18.38 GiB`, then the paste ends (no token count)."""
    report = _log("kv_bytes_then_cut.log")
    assert any(w.startswith("the log ends before startup finished") for w in report.warnings)


def test_v0s_concurrency_line_gives_the_block_size_the_default_would_miss() -> None:
    """dynamo#1202: `# cuda blocks: 6893` and `Maximum concurrency for 16384 tokens per request: 26.93x`:
    26.93 × 16,384 ÷ 6,893 = 64 tokens a block, not the default 16 (110,288 tokens read before)."""
    report = _log("v0_block_size_from_concurrency.log")
    assert report.capacity.kv_tokens == 6893 * 64
    assert "6,893 blocks × 64 tokens a block" in report.verdict_reason


@pytest.mark.parametrize("times, expected", [("26.93", 6893 * 64), ("6.73", 6893 * 16), ("9.99", 6893 * 16)])
def test_the_implied_block_size_is_taken_only_where_one_size_fits_the_rounding(times: str, expected: int) -> None:
    """6.73x is 16 (15.997); 9.99x fits no block size (23.7): the default stays."""
    text = ("INFO 05-26 15:31:27 executor_base.py:92] # cuda blocks: 6893, # CPU blocks: 1170\n"
            f"INFO 05-26 15:31:27 executor_base.py:95] Maximum concurrency for 16384 tokens per request: {times}x\n")
    assert report_from_log_text(text, "x").capacity.kv_tokens == expected


def test_ascends_current_kv_line_is_the_kv_cache_and_dp_is_bounded() -> None:
    """vllm-ascend#13439: `Current KV cache memory: 7.03 GiB.` per rank; workers _DP0, _DP1, _DP5."""
    report = _log("ascend_dp_kv_in_use.log")
    assert [r.rank for r in report.ranks] == [1, 5]
    assert [r.owners["kv_cache"] for r in report.ranks] == [round(7.03 * 2**30)] * 2
    assert any(w.startswith("data_parallel_size: ≥ 6, size not stated") for w in report.warnings)


def test_a_retyped_graph_estimate_without_total_is_read() -> None:
    """vllm#44740: a person retyped `Estimated CUDA graph memory: -10.33 GiB` (vLLM's line ends `GiB total`)."""
    report = _log("graph_estimate_retyped.log")
    assert report.ranks[0].graph_pool_estimate_bytes == round(-10.33 * 2**30)


def test_diff_lists_the_knobs_only_one_side_states() -> None:
    """A Llama-4 excerpt stating no knob against Triton's tp 4 one: comparable only as far as both state."""
    from kvaudit.diff import diff_reports
    from kvaudit.render.summary import ONE_SIDED, diff_summary
    diff = diff_reports(_log("llama4_load_no_knobs.log"), _log("llama4_triton_tp4.log"))
    assert diff.comparable is True and diff.knob_differences == ()
    assert [(k.knob, k.a, k.b) for k in diff.one_sided_knobs] == [
        ("model", None, "meta-llama/Llama-4-Scout-17B-16E"), ("tensor_parallel_size", None, 4),
        ("decode_context_parallel_size", None, 1), ("max_model_len", None, 4096)]
    line = next(x for x in diff_summary(diff) if x.startswith(ONE_SIDED))
    assert "tensor_parallel_size not stated → 4" in line


def test_diff_json_keeps_the_one_sided_knobs_and_omits_them_when_none() -> None:
    from kvaudit.diff import diff_reports
    from kvaudit.schema import to_jsonable
    from kvaudit.validate import diff_from_json
    diff = diff_reports(_log("llama4_load_no_knobs.log"), _log("llama4_triton_tp4.log"))
    data = to_jsonable(diff)
    assert diff_from_json(data).one_sided_knobs == diff.one_sided_knobs
    same = to_jsonable(diff_reports(_log("llama4_triton_tp4.log"), _log("llama4_triton_tp4.log")))
    assert "one_sided_knobs" not in same


def test_non_default_args_enable_chunked_prefill_is_kept() -> None:
    """club-3090#747: `'enable_chunked_prefill': True` in `non-default args` was kept neither in the config
    nor in extra_args."""
    assert _log("non_default_chunked_prefill.log").config.enable_chunked_prefill is True


@pytest.mark.parametrize("command", ["VLLM_ATTENTION_BACKEND=FLASHINFER vllm serve <model> \\",
                                     "vllm serve $MODEL_PATH --tensor-parallel-size 2", "vllm serve {model} -tp 2",
                                     "python -m vllm.entrypoints.openai.api_server --model <your-model>"])
def test_a_placeholder_is_no_model(command: str) -> None:
    """vllm#57475's reproduction (`vllm serve <model> \\`), a script's variable, a template's field."""
    assert report_from_log_text(command + "\n" + _LOADED, "x").config.model is None


def test_traceback_frames_under_a_path_style_file_tag_are_a_dead_boot() -> None:
    """llm-compressor#1919: `(EngineCore_DP0 pid=…) ERROR … [v1/engine/core.py:708]   File "…"` (newer vLLM
    names the file by its path): read like `[core.py:708]`, a traceback whose exception line is cut."""
    failure = _log("path_tag_frames.log").failure
    assert failure is not None and failure.kind.value == "crash"
    assert failure.message.startswith("traceback frames logged at ERROR")


def test_a_workers_error_tail_beats_shutdown_noise() -> None:
    """vllm#26431: the engine's `ValueError("type fp8e4nv not supported …")', please check the stack trace above
    for the root cause`, then another worker's `Exception ignored in: …` traceback at shutdown (was rank 5, cut)."""
    failure = _log("worker_error_tail_then_shutdown_noise.log").failure
    assert failure is not None and failure.kind.value == "crash" and failure.rank is None
    assert failure.message.startswith('ValueError("type fp8e4nv not supported in this architecture')


def test_a_serve_command_after_a_persons_line_is_a_record_of_its_own() -> None:
    """llama.cpp#11474: the command on the line after a sentence ending `:` joined it as its continuation, so its
    flags were read and its model not."""
    text = ("I start the server with:\n"
            "vllm serve deepseek-ai/DeepSeek-R1-Distill-Qwen-32B --tensor-parallel-size 2 --max-model-len 8192\n"
            + _LOADED)
    config = report_from_log_text(text, "x").config
    assert (config.model, config.tensor_parallel_size) == ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 2)


def test_the_schedulers_chunked_prefill_line_gives_max_num_batched_tokens() -> None:
    """`Chunked prefill is enabled with max_num_batched_tokens=2048.` (dennislee22/vLLM-benchmarking)."""
    assert _log("folded_147_columns.log").config.max_num_batched_tokens == 2048


@pytest.mark.parametrize("name", ["folded_147_columns.log", "folded_other_column.log"])
def test_a_config_line_cut_at_a_fixed_column_keeps_its_numbers_whole(name: str) -> None:
    """The engine config line broken once by the paste (after its model), then cut every 147 columns, once
    inside `…488,4|80,472…`: read as a space-wrapped text before, its capture list had `4, 80` for 480."""
    sizes = _log(name).config.cudagraph_capture_sizes
    assert sizes is not None and len(sizes) == 67 and sizes[:6] == (512, 504, 496, 488, 480, 472)


def test_two_runs_of_the_folded_paste_differ_in_gmu_only() -> None:
    """`kvaudit diff` of two such runs (gmu 0.25 and 0.5) called the capture lists different."""
    from kvaudit.diff import diff_reports
    diff = diff_reports(_log("folded_other_column.log"), _log("folded_147_columns.log"))
    assert "cudagraph_capture_sizes" not in [k.knob for k in diff.knob_differences]


def test_a_namespace_read_only_in_part_leaves_the_rest_unknown_not_default() -> None:
    """A Namespace lists every knob: one after a value it could not read is unknown, not tp 1 (the review's
    reproducer: `tensor_parallel_size=2` after a 2,100-character chat template)."""
    text = ("INFO 03-19 07:26:22 [api_server.py:978] args: Namespace(model_tag='Org/M', chat_template='"
            + "x" * 2100 + "', tensor_parallel_size=2)\n" + _LOADED)
    config = report_from_log_text(text, "x").config
    assert (config.model, config.tensor_parallel_size) == ("Org/M", None)


@pytest.mark.parametrize("line", ["Note: line 3: 1234 Killed means the OOM killer ran",
                                  "dmesg: line 1: 99 Killed process 1234 (python)"])
def test_a_sentence_shaped_like_a_job_notice_is_no_failure(line: str) -> None:
    assert report_from_log_text(_LOADED + line + "\n", "x").failure is None


def test_an_offline_v0_run_that_generated_finished_its_startup() -> None:
    """`Processed prompts: 100%` (LLM.generate's progress bar): V0's offline start has no finish line of its
    own, so a KV size then the bar warned that startup had not finished (the review's reproducer)."""
    report = _log("v0_offline_finished.log")
    assert not any(w.startswith("the log ends before startup finished") for w in report.warnings)


@pytest.mark.parametrize("line, model", [
    ("INFO 01-30 16:15:44 model_runner.py:997] Starting to load model <your-model>...", None),
    ("I kept seeing Starting to load model org/x... and nothing after", None),
    ("INFO 01-30 16:15:44 model_runner.py:997] Starting to load model org/x-1.5...", "org/x-1.5"),
])
def test_only_a_workers_own_loading_line_names_the_model(line: str, model: str | None) -> None:
    assert report_from_log_text(line + "\n" + _LOADED, "x").config.model == model


def test_a_redirected_serve_command_keeps_its_model() -> None:
    assert report_from_log_text("vllm serve Qwen/Qwen3-8B>serve.log\n" + _LOADED, "x").config.model == "Qwen/Qwen3-8B"


def test_a_ray_workers_own_rank_line_places_its_figures() -> None:
    """dennislee22/vLLM-benchmarking: `(RayWorkerWrapper pid=1384) … rank 0 in world size 2 is assigned as … TP
    rank 0`; it printed its figures after pid 374, so the order rule made it rank 1 and gave TP 0's 1.00 GiB graph
    pool to rank 1. pid 374's parallel_state line is not in the paste, but its torch.compile cache path is
    (`…/torch_compile_cache/86361584b2/rank_1_0/backbone`, read since real pastes round twenty-six): both ranks are
    stated, and no note says the order rule placed one."""
    report = _log("ray_stated_ranks.log")
    assert [(r.rank, r.owners.get("graph_pool")) for r in report.ranks] == [(0, 2**30), (1, None)]
    assert [w for w in report.warnings if w.startswith("Ray workers")] == []


def test_ray_workers_with_one_pid_on_two_nodes_are_two_ranks() -> None:
    """A gpt-oss-120b TP 4 boot over Ray (dennislee22/vLLM-benchmarking): `pid=345, ip=10.42.11.243` and `pid=345,
    ip=10.42.9.225` are two workers; read as one, TP 4 showed 3 ranks and one node's KV line on the other's rank.
    .243 and pid 1273 state ranks 1 and 0; .224 states rank 2 by its torch.compile cache path (`…/fa33f860b4/rank_2_0/
    backbone`, read since real pastes round twenty-six: the order rule gave it 3), and .225 takes the rank left, 3."""
    report = _log("ray_same_pid_two_nodes.log")
    assert [r.rank for r in report.ranks] == [0, 1, 2, 3]
    assert [r.owners.get("kv_cache") for r in report.ranks] == [None, round(45.32 * 2**30), None, round(45.32 * 2**30)]
    assert [r.owners.get("graph_pool") for r in report.ranks] == [None, None, round(1.88 * 2**30), None]


@pytest.mark.parametrize("closing", ["</strong>", "<\\/strong>"])
def test_figures_a_web_page_set_in_html_bold_are_read(closing: str) -> None:
    """A blog's page (its WordPress JSON escapes `/`): `Model loading took <strong>48.5 GiB<\\/strong> memory`."""
    text = (f"Model loading took <strong>48.5 GiB{closing} memory and <strong>10.090812 seconds{closing}<br />\n"
            f"Available KV cache memory: <strong>21.5 GiB{closing}\n")
    rank = report_from_log_text(text, "x").ranks[0]
    assert (rank.owners["weights"], rank.owners["kv_cache"]) == (round(48.5 * 2**30), round(21.5 * 2**30))


# Real pastes, round eleven: whole log files committed to repositories, and dead boots from issue threads.

def test_a_080_namespace_is_read_past_its_enum_values() -> None:
    """jayashan10/Deepseek-qwen-deployment's vllm_server.log (0.8.5): `config_format=<ConfigFormat.AUTO: 'auto'>`
    comes early in the Namespace; reading stopped there and lost every knob after it (gmu 0.9 among them)."""
    config = _log("namespace_080_enum.log").config
    assert (config.model, config.gpu_memory_utilization) == ("/opt/llm/deepseek-r1-14b", 0.9)


def test_rocms_triton_attention_backend_is_named() -> None:
    """amdgoose/arno_vllm_chat's log: `[rocm.py:463] Using Triton Attention backend.`"""
    text = "(EngineCore_DP0 pid=508942) INFO 03-08 08:22:34 [rocm.py:463] Using Triton Attention backend.\n" + _LOADED
    assert report_from_log_text(text, "x").engine.attention_backend == "Triton Attention"


def test_a_torch_distributed_ranks_traceback_frames_are_a_dead_boot_in_their_phase() -> None:
    """rl-swarm#314: `[rank0]:   File "…/llm_engine.py", line 434, in _initialize_kv_caches` … `initialize_cache`,
    the exception line cut: no failure was read, and "no rank's memory is known"."""
    failure = _log("rank0_frames_kv.log").failure
    assert failure is not None and (failure.kind.value, failure.phase.value if failure.phase else None) == (
        "crash", "kv")
    assert failure.message.startswith("traceback frames a torch.distributed rank printed ([rank0]:)")


@pytest.mark.parametrize("name", ["ray_run_workers_init_device.log", "nccl_model_parallel_group.log"])
def test_a_death_in_the_workers_device_and_group_setup_is_in_the_baseline_phase(name: str) -> None:
    """nccl#1657: `self._run_workers("init_device")` (a worker method called by its name); gpustack#835:
    frames `ensure_model_parallel_initialized` → `initialize_model_parallel` (NCCL's communicator setup)."""
    failure = _log(name).failure
    assert failure is not None and failure.phase is not None and failure.phase.value == "baseline"


def test_a_log_cut_before_any_kv_figure_warns_that_startup_did_not_finish() -> None:
    """The README: an excerpt that ends before startup finished is read as far as it goes, with a warning
    (round eleven: a log cut after `torch.compile`, before KV sizing, had none)."""
    report = report_from_log_text(_LOADED, "x")
    assert report.failure is None and report.verdict.value == "unknown"
    assert any(w.startswith("the log ends before startup finished") and "read as far as it goes" in w
               for w in report.warnings)


def test_a_ranks_frames_name_the_rank_and_a_users_own_frames_are_no_dead_boot() -> None:
    """The second review's reproducers: `[rank3]:  File "…/vllm/…"` in an untagged TP 4 log is rank 3's crash,
    not rank 0's; `[rank0]:  File "/home/u/train.py" … in load_model` is a user's script, not vLLM dying."""
    failure = _log("rank3_frames_tp4.log").failure
    assert failure is not None and (failure.kind.value, failure.rank) == ("crash", 3)
    assert _log("rank0_user_frames_no_marker.log").failure is None


def test_a_dying_ray_worker_that_stated_its_rank_is_that_rank() -> None:
    """The second review's reproducer: `pid=345, ip=10.0.0.3` states rank 2 and dies of OOM; the failure had no rank."""
    failure = _log("ray_ip_dies.log").failure
    assert failure is not None and (failure.kind.value, failure.rank) == ("oom", 2)


def test_a_ray_worker_that_states_two_ranks_is_ranked_by_order_again() -> None:
    """The second review's reproducer: one worker states rank 1, then (a second boot in the paste) rank 0: no
    stated rank is trusted, and the note says the ranks are kvaudit's order."""
    report = _log("ray_two_boots_one_worker.log")
    assert any(w.startswith("Ray workers") and "need not be vLLM's rank order" in w for w in report.warnings)
