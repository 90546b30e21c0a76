"""Pasted commands as vLLM's own parser reads them (a paste-reading gap left open in stop 43):
FlexibleArgumentParser turns `_` in a `--` flag's name into `-` (`--max_model_len 8192`), argparse
takes a prefix that names one flag alone (`--gpu-memory-util 0.9`), and sizes take vLLM's
human-readable suffixes (`--max-model-len 32k`). tests/vllm/test_serve_config_vllm.py checks the same
lines against vLLM's real parser.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.facts import FLAG_PREFIXES, FactKind, command_flag, facts_from_message


def command_args(line: str) -> dict[str, float | int | bool]:
    """The knobs a line's flags set (its model: test_a_pasted_serve_command_states_its_model…)."""
    return dict(f.value for f in facts_from_message(line) if f.kind is FactKind.COMMAND_ARG and f.value[0] != "model")


@pytest.mark.parametrize("line, args", [
    ("python -m vllm.entrypoints.openai.api_server --model m --tensor_parallel_size 2 --gpu_memory_utilization 0.85 "
     "--max_model_len 8192", {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.85, "max_model_len": 8192}),
    ("vllm serve m --gpu-memory-util 0.9 --max-model 4096 --tensor-parallel 4", {
        "gpu_memory_utilization": 0.9, "max_model_len": 4096, "tensor_parallel_size": 4}),
    ("vllm serve m --max-model-len 32k --block_size=32", {"max_model_len": 32_000, "block_size": 32}),
    ("vllm serve m --max-model-len 32K", {"max_model_len": 32_768}),
    ("vllm serve m --decode_context_parallel_size 2 --pipeline-parallel 2 --data_parallel_size 2", {
        "decode_context_parallel_size": 2, "pipeline_parallel_size": 2, "data_parallel_size": 2}),
    ("vllm serve m --enforce_eager", {"enforce_eager": True}),
    ("vllm serve m --no_enforce_eager", {"enforce_eager": False}),
    # not this knob: a prefix too short to name it alone, another flag it is a prefix of, vLLM's refusals
    ("vllm serve m --gp 0.9 --max 4096 --tensor 2", {}),
    ("vllm serve m --data-parallel-size-local 2 --data-parallel 2 --max-model-length 4096", {}),
    ("vllm serve m --max-model-len 1.5K --gpu-memory-utilization 0.9k", {}),
])
def test_a_pasted_flag_is_read_as_vllms_parser_reads_it(line: str, args: dict[str, float | int | bool]) -> None:
    assert command_args(line) == args


@pytest.mark.parametrize("flag", sorted(FLAG_PREFIXES))
def test_every_prefix_from_the_shortest_to_the_whole_name_sets_the_flags_knob(flag: str) -> None:
    shortest = FLAG_PREFIXES[flag]
    knob = command_flag(flag)
    assert knob is not None and flag.startswith(shortest)
    assert all(command_flag(flag[:n]) == knob for n in range(len(shortest), len(flag) + 1))
    assert command_flag(shortest[:-1]) is None
    assert command_flag("--" + flag[2:].replace("-", "_")) == knob  # `--max_model_len`


def test_a_log_whose_command_uses_vllms_other_spellings_states_its_knobs() -> None:
    text = ("$ vllm serve org/m --tensor_parallel_size 2 --gpu-memory-util 0.95 --max-model-len 16k\n"
            "(Worker_TP0 pid=1) INFO 05-01 10:00:00 [gpu_worker.py:100] Available KV cache memory: 10.00 GiB\n"
            "(Worker_TP1 pid=2) INFO 05-01 10:00:00 [gpu_worker.py:100] Available KV cache memory: 10.00 GiB\n")
    config = report_from_log_text(text, "x").config
    assert (config.tensor_parallel_size, config.gpu_memory_utilization, config.max_model_len) == (2, 0.95, 16_000)


# --------------------------------------------------------------------------------------------
# Records a log viewer ran together on one line (modal-examples#1318; fixture 135)

_JOINED = ("Aug 04  00:35:11.716 | ERROR 08-04 07:35:11 [core.py:515] EngineCore failed to start. "
           "ERROR 08-04 07:35:11 [core.py:515] Traceback (most recent call last): "
           "ERROR 08-04 07:35:11 [core.py:515]   File \"/x/vllm/v1/engine/core.py\", line 83, in __init__ "
           "(EngineCore_DP0 pid=7) ERROR 08-04 07:35:11 [core.py:515] ValueError: boom\n")


def test_records_joined_on_one_line_are_split_at_each_head_after_the_lines_first() -> None:
    from kvaudit.engines.logs.lines import split_joined_records
    text, split = split_joined_records(_JOINED)
    assert split == 3
    assert text.splitlines() == [
        "Aug 04  00:35:11.716 | ERROR 08-04 07:35:11 [core.py:515] EngineCore failed to start.",
        "ERROR 08-04 07:35:11 [core.py:515] Traceback (most recent call last):",
        "ERROR 08-04 07:35:11 [core.py:515]   File \"/x/vllm/v1/engine/core.py\", line 83, in __init__",
        "(EngineCore_DP0 pid=7) ERROR 08-04 07:35:11 [core.py:515] ValueError: boom"]


@pytest.mark.parametrize("line", [
    # a container prefix and a process tag before one record: the blank after the tag is no record's start
    "vllm-service  | (EngineCore pid=183) INFO 09-11 21:21:56 [gpu_worker.py:560] Available KV cache memory: 1 GiB",
    "2024-09-13T22:25:38,258 [INFO ] W-9000 MODEL_LOG - (VllmWorkerProcess pid=27) INFO 09-13 22:25:38 "
    "model_runner.py:1008] Loading model weights took 7.5122 GB",
    # a person's words that quote two records after more than a prefix's length: no record's line
    "x " * 201 + "ERROR 08-04 07:35:11 [core.py:515] EngineCore failed to start. ERROR 08-04 07:35:12 [core.py:9] x",
])
def test_a_line_of_one_record_or_a_sentence_quoting_records_is_not_split(line: str) -> None:
    from kvaudit.engines.logs.lines import split_joined_records
    assert split_joined_records(line + "\n") == (line + "\n", 0)


def test_joined_records_are_read_one_by_one_and_the_report_says_they_were_split() -> None:
    report = report_from_log_text(_JOINED, "modal.log")
    assert report.failure is not None and report.failure.message == "ValueError: boom"  # the last record's cause
    assert any("3 vLLM records ran on after another record on the same line" in w for w in report.warnings)


# --------------------------------------------------------------------------------------------
# A failure the boot got past: quoted by a person, printed before the log shows startup finished,
# or before the API server's stats line (real pastes, round eight)

_FINISHED = ("(EngineCore pid=59) INFO 05-07 04:54:30 [kv_cache_utils.py:1733] GPU KV cache size: 120,000 tokens\n"
             "(EngineCore pid=59) INFO 05-07 04:54:30 [kv_cache_utils.py:1734] Maximum concurrency for 32,768 tokens "
             "per request: 3.66x\n"
             "(EngineCore pid=59) INFO 05-07 04:54:33 [core.py:299] init engine (profile, create kv cache, warmup "
             "model) took 163.91 s (compilation: 54.58 s)\n")


@pytest.mark.parametrize("before, note", [
    # club-3090#93's lines after a person's sentence quoting an earlier run's errors (the generic
    # "failed to start" names no cause, so no note repeats it)
    ('Before the fix this config ended with "EngineCore failed to start."; now it boots:\n', None),
    ("With 0.95 I got torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB, so I lowered it:\n",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    # a traceback vLLM printed and went on from (an optional import), bare as stderr prints it
    ("Traceback (most recent call last):\n  File \"/x/site.py\", line 3, in <module>\nModuleNotFoundError: No module "
     "named 'flash_attn_extra'\n", "ModuleNotFoundError: No module named 'flash_attn_extra'"),
])
def test_a_failure_before_the_line_that_shows_startup_finished_is_not_the_boots(before: str, note: str | None) -> None:
    report = report_from_log_text(before + _FINISHED, "x")
    assert report.failure is None and report.verdict.value == "ok"
    notes = [w for w in report.warnings if w.startswith("before startup finished, which it then did")]
    assert [note in n for n in notes] == ([] if note is None else [True])


@pytest.mark.parametrize("comment", [
    '\ufeff# source: vllm#26612 — the KV line, then the engine core "EngineCore failed to start."\n',
    "## Error: CUDA out of memory on the second GPU\n",
])
def test_a_comment_or_heading_that_quotes_a_failure_is_never_the_failure(comment: str) -> None:
    ok = report_from_log_text(comment + _FINISHED, "x")
    assert ok.failure is None and ok.verdict.value == "ok" and not any(comment[3:12] in w for w in ok.warnings)
    dead = report_from_log_text(
        comment + "(Worker pid=19) INFO 10-11 10:42:14 [gpu_worker.py:298] Available KV cache memory: 13.69 GiB\n"
        "(EngineCore_DP0 pid=17) ERROR 10-11 10:42:14 [core.py:708] EngineCore failed to start.\n", "x")
    assert dead.failure is not None and dead.failure.message == "EngineCore failed to start."


def test_a_worker_that_died_before_the_servers_stats_line_died_while_serving() -> None:
    """vllm#23582: the worker died, and 5 s later the API server logged 46 requests running."""
    died = ("(EngineCore_0 pid=271) ERROR 08-25 12:24:19 [multiproc_executor.py:146] Worker proc VllmWorker-1 died "
            "unexpectedly, shutting down executor.\n")
    stats = ("(APIServer pid=1) INFO 08-25 12:24:24 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
             "Avg generation throughput: 7599.4 tokens/s, Running: 46 reqs, Waiting: 0 reqs\n")
    serving = report_from_log_text(died + stats, "x")
    assert serving.failure is None
    assert any(w.startswith("after startup finished: Worker proc VllmWorker-1 died") for w in serving.warnings)
    # without the stats line after it, the death ends the boot
    assert report_from_log_text(died, "x").failure.kind.value == "worker_died"


@pytest.mark.parametrize("before", [
    '(venv312) PS C:\\Users\\User\\vllm_0.25> $Env:VLLM_NCCL_SO_PATH="C:\\nccl-windows\\build\\bin\\nccl.dll"\n',
    "| 38%   42C    P8             29W /  230W |   24058MiB /  24576MiB |      0%      Default |\n",
    "ValueError: an earlier run's error, quoted\n",
])
def test_the_version_banner_is_read_after_a_pasted_line_that_other_passes_look_for(before: str) -> None:
    """vllm-windows#72, club-3090 PR 92 + gpustack#4660: a paste's own first lines hid the version."""
    for banner, version in (
            ("(APIServer pid=22388) INFO 07-15 20:57:43 [api_utils.py:345]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.25.0\n",
             "0.25.0"),
            ("(APIServer pid=57) INFO 02-25 09:58:54 [api_server.py:1351] vLLM API server version 0.13.0\n", "0.13.0")):
        assert report_from_log_text(before + banner, "x").engine.version == version


@pytest.mark.parametrize("line", [
    "TimeoutError: Timed out waiting for engines to send initial message on input socket.",  # vllm PR 35616
    "(APIServer pid=1) ERROR 12-05 10:00:00 [core_client.py:795] TimeoutError: Timed out waiting for engine core "
    "processes to start. This is often caused by slow weight loading for large models. Waited 600s",  # 0.34
])
def test_the_front_end_giving_up_on_the_engines_is_a_timeout(line: str) -> None:
    report = report_from_log_text(line + "\n", "x")
    assert report.failure is not None and report.failure.kind.value == "timeout"
    assert report.failure.message.startswith("TimeoutError: Timed out waiting for engine")


def test_the_v0_engine_line_of_0_7_to_0_10_states_the_version_and_the_knobs() -> None:
    """vllm#12529: `Initializing a V0 LLM engine (vX) with config: …` was not read at all."""
    report = report_from_log_text(
        "INFO 03-12 14:55:27 [llm_engine.py:235] Initializing a V0 LLM engine (v0.7.4.dev390+gdebd6bbf) with config: "
        "model='models/llama3.1-8B-INT8', max_seq_len=65536, tensor_parallel_size=2, enforce_eager=True, seed=None\n",
        "x")
    assert (report.engine.version, report.engine.model_runner) == ("0.7.4.dev390+gdebd6bbf", None)
    assert (report.config.model, report.config.max_model_len, report.config.tensor_parallel_size,
            report.config.enforce_eager) == ("models/llama3.1-8B-INT8", 65536, 2, True)


@pytest.mark.parametrize("text, kind, message", [
    # gpustack#2723: the frame, the raise's source line a traceback echoes, then the exception line
    ('  File "/x/vllm/v1/engine/utils.py", line 750, in wait_for_engine_startup\n'
     '    raise RuntimeError("Engine core initialization failed. "\n'
     "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n",
     "crash", "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"),
    # the exception line cut off: the source line still names the KV check
    ('  File "/x/vllm/v1/core/kv_cache_utils.py", line 700, in check_enough_kv_cache_memory\n'
     '    raise ValueError("No available memory for the cache blocks. "\n',
     "does_not_fit", 'raise ValueError("No available memory for the cache blocks. "'),
])
def test_the_raises_source_line_yields_to_its_exception_line(text: str, kind: str, message: str) -> None:
    report = report_from_log_text(text, "x")
    assert report.failure is not None and report.failure.kind.value == kind
    assert report.failure.message.endswith(message)


@pytest.mark.parametrize("lines, phase", [
    # vllm#17822 (journalctl): the last source line calls initialize_from_config, the frame under it cut
    (['May 08 09:32:47 t3090 start.sh[3065331]: ERROR 05-08 09:32:47 [core.py:400]   File "/x/vllm/v1/engine/core.py", '
      "line 158, in _initialize_kv_caches",
      "May 08 09:32:47 t3090 start.sh[3065331]: ERROR 05-08 09:32:47 [core.py:400]     "
      "self.model_executor.initialize_from_config(kv_cache_configs)"], "kv"),
    # modal-examples#1318: the profile's call, bare as stderr prints a traceback
    (["Traceback (most recent call last):", '  File "/x/vllm/v1/engine/core.py", line 141, in _initialize_kv_caches',
      "    available_gpu_memory = self.model_executor.determine_available_memory()"], "profile"),
    # vllm#16343: the model's layers being made (model construction, in load_model)
    (['ERROR 04-09 05:39:54 [core.py:390]   File "/x/vllm/model_executor/models/llama.py", line 321, in __init__',
      "ERROR 04-09 05:39:54 [core.py:390]     self.start_layer, self.end_layer, self.layers = make_layers("], "load"),
    # a person's sentence that names the method is no source line
    (["Traceback (most recent call last):", "it fails after we call self.model_executor.load_model( here"], None),
])
def test_a_startup_call_in_a_tracebacks_source_line_places_the_failure(lines: list[str], phase: str | None) -> None:
    report = report_from_log_text("\n".join(lines) + "\n", "x")
    assert report.failure is not None
    assert (report.failure.phase.value if report.failure.phase else None) == phase


def test_engine_args_spread_over_lines_state_the_sizes() -> None:
    """vllm#27067: `EngineArgs(` with one keyword a line (a Python call, as `LLM(` is read)."""
    report = report_from_log_text(
        "engine_args = EngineArgs(\n    model=model_name,\n    pipeline_parallel_size=4,\n    tensor_parallel_size=1,\n"
        "    max_num_batched_tokens=max_model_length,\n)\n"
        "(EngineCore_DP0 pid=200073) (Worker_PP3 pid=200085) ERROR 10-17 02:19:27 [multiproc_executor.py:654] "
        "WorkerProc hit an exception.\n", "x")
    assert report.config.extra_args.get("pipeline_parallel_size") == 4 and report.config.tensor_parallel_size == 1
    assert not any("size not stated" in w for w in report.warnings)


def test_a_pipeline_parallel_logs_binding_note_says_the_least_kv_need_not_bind_and_counts_the_silent_stage() -> None:
    """vllm#25650: four stages, PP3's KV line cut. vLLM binds on the stage with the fewest blocks (its KV
    over its layers, vllm PR 34080), which the log does not state."""
    from kvaudit.render.summary import binding_note
    lines = [f"(Worker_PP{r} pid={100 + r}) INFO 09-25 00:15:14 [gpu_worker.py:298] Available KV cache memory: {g} GiB"
             for r, g in ((2, "18.22"), (0, "18.02"), (1, "18.25"))]
    lines.append("(Worker_PP3 pid=103) INFO 09-25 00:15:12 [monitor.py:34] torch.compile takes 2.15 s in total")
    note = binding_note(report_from_log_text("\n".join(lines) + "\n", "x"))
    assert note is not None and note.startswith("* the binding rank (0): it has the least KV of the ranks that state "
                                                "it (1 states none); with pipeline parallelism vLLM takes the stage "
                                                "with the fewest blocks")
    tp_only = report_from_log_text("\n".join(line.replace("_PP", "_TP") for line in lines) + "\n", "x")
    assert binding_note(tp_only) == ("* the binding rank (0): it has the least KV of the ranks that state it (1 states "
                                     "none), and every rank of its engine allocates its block count")


def _assigned(rank: int, world: int, dp: int = 0, pp: int = 0, tp: int = 0) -> str:
    return (f"(Worker pid={100 + rank}) INFO 03-18 04:59:31 [parallel_state.py:1715] rank {rank} in world size {world} "
            f"is assigned as DP rank {dp}, PP rank {pp}, PCP rank 0, TP rank {tp}, EP rank {rank}, EPLB rank N/A\n")


@pytest.mark.parametrize("lines, tp, pp", [
    ([_assigned(1, 2, tp=1), _assigned(0, 2)], 2, 1),  # vllm PR 37505 (Ascend, TP 2 + EP)
    ([_assigned(0, 1)], 1, 1),  # gpustack#3182: world size 1
    ([_assigned(3, 4, pp=1, tp=1)], 2, 2),  # the highest ranks fill the world
    ([_assigned(1, 8, tp=1)], None, None),  # TP ≥ 2 in a world of 8: the rest is not known
])
def test_vllms_rank_assignment_lines_give_the_sizes_where_they_fill_the_world(lines: list[str], tp: int | None,
                                                                              pp: int | None) -> None:
    report = report_from_log_text("".join(lines), "x")
    assert report.config.tensor_parallel_size == tp
    assert report.config.extra_args.get("pipeline_parallel_size") == pp  # 1 too, where known (diff compares it)


@pytest.mark.parametrize("engine, rank", [("EngineCore", 3), ("EngineCore_DP0", 3), ("EngineCore_DP1", None)])
def test_the_worker_the_monitor_says_died_is_the_failures_rank(engine: str, rank: int | None) -> None:
    """vllm PR 38895: `Worker proc VllmWorker-3 died unexpectedly` (the process named by its rank in the
    engine's world); a second data-parallel engine's workers are not numbered from 0 in the boot's ranks."""
    report = report_from_log_text(
        "(Worker_TP3_DCP1 pid=500680) INFO 04-03 16:43:52 [kernel_warmup.py:69] Warming up FlashInfer attention.\n"
        f"({engine} pid=500414) ERROR 04-03 16:43:52 [multiproc_executor.py:273] Worker proc VllmWorker-3 died "
        "unexpectedly, shutting down executor.\n", "x")
    assert report.failure is not None and report.failure.kind.value == "worker_died"
    assert report.failure.rank == rank


_ROUND_NINE = Path(__file__).parent / "data" / "round_nine"


@pytest.mark.parametrize("name, kind, verdict", [
    # one data-parallel engine dies while the other finishes: the front end's words fail the boot
    ("dp_one_engine_dies.log", "oom", "fail"),
    # the person quotes a line the boot never printed, after the log: no record head, no finish
    ("quoted_serving_marker_after.log", "oom", "fail"),
    # BuildKit's `#12 3.612 ERROR …` lines are vLLM's records, not comments
    ("buildkit_hash_prefix.log", "does_not_fit", "fail"),
    # a stated cause echoed in a raise's source line stays the cause (not the KV guess of a bare traceback)
    ("raise_line_kv_guess.log", "crash", "unknown"),
])
def test_a_dead_boot_stays_dead_whatever_finished_or_was_quoted_after_it(name: str, kind: str, verdict: str) -> None:
    """Constructed by the review of round nine from real shapes (each a regression it found)."""
    report = report_from_log_text((_ROUND_NINE / name).read_text(encoding="utf-8"), name)
    assert report.failure is not None and report.failure.kind.value == kind
    assert report.verdict.value == verdict


def test_a_joined_record_keeps_its_whole_chain_of_process_tags() -> None:
    from kvaudit.engines.logs.lines import split_joined_records
    line = ("(EngineCore_DP0 pid=17) (Worker_TP0 pid=30) INFO 10-11 10:42:10 [gpu_worker.py:298] Available KV cache "
            "memory: 13.69 GiB (EngineCore_DP1 pid=18) (Worker_TP1 pid=31) INFO 10-11 10:42:10 [gpu_worker.py:298] "
            "Available KV cache memory: 12.00 GiB\n")
    text, split = split_joined_records(line)
    assert split == 1 and text.splitlines()[1].startswith("(EngineCore_DP1 pid=18) (Worker_TP1 pid=31) INFO")


def test_the_fast_scan_reads_a_prelude_line_that_straddles_the_window_as_the_slow_one_does() -> None:
    """The review's fuzzer: an early hit, one line across COMMAND_WINDOW, then V0's engine line on it."""
    from kvaudit.engines.logs.scan import COMMAND_WINDOW, scan, scan_exhaustive
    text = ("ValueError: an early line\n" + "x" * COMMAND_WINDOW + " INFO 01-01 00:00:00 llm_engine.py:1] Initializing an "
            "LLM engine (v0.5.4) with config: model='m', max_seq_len=4096\n")
    assert scan(text).segments == scan_exhaustive(text).segments
    assert report_from_log_text(text, "x").engine.version == "0.5.4"


@pytest.mark.parametrize("line", ["Killed", "Killed "])
def test_the_shells_killed_notice_is_the_failure(line: str) -> None:
    """ArcticInference#37: `Killed` right after the weights loaded (no vLLM line says why)."""
    report = report_from_log_text("(VllmWorker rank=0 pid=2480291) INFO 05-07 19:18:17 [loader.py:458] Loading weights "
                                  f"took 3.07 seconds\n{line}\n", "x")
    assert report.failure is not None and report.failure.kind.value == "crash"
    assert "the process was sent SIGKILL" in report.failure.message


@pytest.mark.parametrize("line", ["The process got Killed by something", "Killed processes: 3, all fine"])
def test_a_sentence_with_the_word_killed_is_no_failure(line: str) -> None:
    assert report_from_log_text("INFO 05-07 19:18:17 [loader.py:458] Loading weights took 3.07 seconds\n"
                                f"{line}\n", "x").failure is None


_CAPTURE = "INFO 12-19 22:58:41 model_runner.py:1535] Graph capturing finished in 14 secs, took 0.21 GiB\n"


@pytest.mark.parametrize("command, model, tp", [
    ("vllm serve meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B-Instruct", 1),  # vllm PR 11349
    ("$ vllm serve Qwen/Qwen3-8B -tp 2 --max-model-len 4096", "Qwen/Qwen3-8B", 2),
    ("user@host:~$ python -m vllm.entrypoints.openai.api_server --model /models/q --tensor-parallel-size 4",
     "/models/q", 4),
    ("I ran vllm serve meta-llama/X and it crashed", None, None),  # a person's sentence names no model of this boot
])
def test_a_pasted_serve_command_states_its_model_and_vllms_default_sizes(command: str, model: str | None,
                                                                          tp: int | None) -> None:
    config = report_from_log_text(command + "\n" + _CAPTURE, "x").config
    assert (config.model, config.tensor_parallel_size) == (model, tp)


def test_two_pasted_serve_commands_with_and_without_tp_are_not_comparable() -> None:
    """vllm PR 11349's pair: `vllm serve M` (TP 1 by default) against `vllm serve M -tp 2`."""
    from kvaudit.diff import diff_reports
    a = report_from_log_text("vllm serve meta-llama/Llama-3.2-1B-Instruct\n" + _CAPTURE, "a")
    b = report_from_log_text("vllm serve meta-llama/Llama-3.2-1B-Instruct -tp 2\n" + _CAPTURE, "b")
    assert diff_reports(a, b).comparable is False
