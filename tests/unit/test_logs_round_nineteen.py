"""Real pastes, round nineteen (stop 49): the tool's own users' logs (huge checkpoints, TP8/EP/DP, recent
releases) and pairs of one model under two configs, each test naming its source; the data are the
smallest excerpts of them that show each finding (tests/unit/data/round_nineteen)."""
from __future__ import annotations

from pathlib import Path

from kvaudit.diff import diff_reports
from kvaudit.engines.logs import report_from_log_text
from kvaudit.schema import FailureKind, KnobDifference, Owner, Phase, Verdict

_DATA = Path(__file__).parent / "data" / "round_nineteen"
GiB = 1 << 30


def _report(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


def test_a_kv_check_error_cut_after_its_first_word_is_still_the_kv_check() -> None:
    """wtdcode/vllm-backport#15 (8× RTX 3090, TP8, a 250K context): the traceback ends `raise ValueError(`
    in `_check_enough_kv_cache_memory`, then `ValueError: To`, cut. That function raises only the two
    errors that say the KV cache does not fit. Before, a crash of unknown cause (verdict unknown)."""
    report = _report("kv_check_cut.log")
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.DOES_NOT_FIT, Phase.KV)
    assert report.failure.message.startswith("ValueError: To (cut; raised in _check_enough_kv_cache_memory")
    assert report.verdict is Verdict.FAIL


def test_a_value_error_raised_elsewhere_stays_a_crash() -> None:
    text = (_DATA / "kv_check_cut.log").read_text(encoding="utf-8").replace(
        "in _check_enough_kv_cache_memory", "in _verify_quantization")
    report = report_from_log_text(text, "x")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH


def test_a_capture_measured_below_zero_is_no_graph_pool() -> None:
    """vllm PR 25683's own description (DP ≥ 5, 0.11 dev): `Graph capturing finished in 79 secs, took -9.96
    GiB` and `-9.96 GiB for CUDAGraph memory`, vLLM's measurement of free memory that something else freed.
    Before, graph_pool −9.96 GiB, the owners 9.96 GiB short, no word of it."""
    report = _report("negative_graph_capture.log")
    (rank,) = report.ranks
    assert rank.owners[Owner.GRAPH_POOL] is None
    assert rank.graph_pool_actual_bytes == -round(9.96 * GiB)  # the log's own figure, as the contract keeps it
    assert any(w.startswith(f"rank {rank.rank}: vLLM measured its CUDA graph capture as -9.96 GiB, below zero")
               and w.endswith("graph_pool is unknown") for w in report.warnings)


def test_a_graph_estimate_below_zero_is_said_to_oversize_the_kv_cache() -> None:
    """vllm#44740 (GB10, 0.26.0, MTP): `Estimated CUDA graph memory: -20.50 GiB total`, which vLLM subtracts
    from what it leaves the KV cache: 20.50 GiB too much KV (the issue's OOM). The pool is the capture's."""
    report = _report("negative_graph_estimate.log")
    (rank,) = report.ranks
    assert rank.owners[Owner.GRAPH_POOL] == round(0.73 * GiB)
    assert any("CUDA graph estimate is -20.50 GiB, below zero" in w and "sized 20.50 GiB past its budget" in w
               for w in report.warnings)


def test_ascends_acl_graph_pool_line_gives_the_estimate() -> None:
    """vllm-ascend#10700 (GLM-5.1, DP × TP × EP): `[vllm-ascend] - ACL graph pool memory: 0.44 GiB (actual),
    0.59 GiB (estimated)`, the CUDA line's twin. Before, no estimate."""
    report = _report("ascend_acl_graph_pool.log")
    by_rank = {r.rank: r for r in report.ranks}
    assert by_rank[0].graph_pool_estimate_bytes == round(0.59 * GiB)
    assert by_rank[0].graph_pool_actual_bytes == round(0.44 * GiB)
    assert by_rank[3].graph_pool_estimate_bytes == round(0.6 * GiB)


def test_a_v0_worker_that_states_no_figure_still_holds_its_rank() -> None:
    """vllm#15340 (DeepSeek-R1 GGUF, V0, 4 GPUs): workers 273, 275 and 277, 275 printing only its
    profiling time. The ranks follow the pids: 277 is rank 3. Before, rank 2."""
    report = _report("v0_worker_without_figures.log")
    assert sorted(r.rank for r in report.ranks) == [0, 1, 3]


def test_the_profiling_passs_minimal_cache_is_no_kv_figure() -> None:
    """MiniMax-M2.5#30 (Ray, two nodes): `Overriding num_gpu_blocks=0 with num_gpu_blocks_override=256`
    beside `Profiling CUDA graph memory`: vLLM's graph profiling sizes a throwaway cache of a few blocks
    that way (gpu_model_runner.py sets num_gpu_blocks_override to min_blocks for it): no KV figure."""
    report = _report("profiling_blocks_override.log")
    assert report.capacity.kv_tokens is None
    assert all(r.owners[Owner.KV_CACHE] is None for r in report.ranks)


def test_a_second_data_parallel_engines_worker_dying_in_init_device_is_placed_there() -> None:
    """llm-d-planner's results (0.19.0, DP=2 on one GPU): the second engine's worker dies in `init_device`
    (`AssertionError: DP adjusted local rank 1 is out of bounds.`) while the first one's loads 14.99 GiB.
    Before, phase profile and rank 0 (the other engine's). `data_parallel_size=1` on the engine line is each
    engine's own (config/parallel.py reconfigure_for_independent_dp_rank); `non-default args` kept the 2
    that was typed, and EngineCore_DP1 shows it."""
    text = (_DATA / "dp2_second_engine_worker_init_device.log").read_text(encoding="utf-8")
    report = _report("dp2_second_engine_worker_init_device.log")
    assert report.failure is not None
    assert (report.failure.phase, report.failure.rank) == (Phase.BASELINE, None)
    assert report.config.extra_args["data_parallel_size"] == 2
    assert not any("data_parallel_size 1" in w for w in report.warnings)
    # without the typed size, the engine line's 1 is no deployment's size: at least 2 (the names), not known
    untyped = report_from_log_text(text.replace("'data_parallel_size': 2, ", ""), "x")
    assert "data_parallel_size" not in untyped.config.extra_args
    assert untyped.failure is not None and untyped.failure.rank is None
    assert ("data_parallel_size 1 (the engine config line) is below what the process names show (≥ 2): not known"
            in untyped.warnings)


def test_two_logs_in_different_dtypes_are_not_comparable() -> None:
    """llm-d-planner's results (0.19.0, Llama-3 8B): `--dtype float16` against `float32`; the weights double.
    Before, comparable, with no knob named."""
    diff = diff_reports(_report("dtype_pair_a.log"), _report("dtype_pair_b.log"))
    assert KnobDifference("dtype", "float16", "float32") in diff.knob_differences and not diff.comparable


def test_a_pp2_log_against_a_pp1_log_is_not_comparable() -> None:
    """llm-d-planner's results (0.19.0, Llama-3.1-8B): the TP=1 log's engine line states
    `pipeline_parallel_size=1`, the other's 2. Before, the 1 was not kept and the pair was comparable."""
    diff = diff_reports(_report("pp1_engine_line.log"), _report("pp2_engine_line.log"))
    assert KnobDifference("pipeline_parallel_size", 1, 2) in diff.knob_differences and not diff.comparable


def test_a_request_answered_503_while_vllm_loads_is_no_sign_it_served() -> None:
    """Freshair129/Private-Runtime-Platform's evidence log (Xinference over vLLM 0.30.0): Xinference's own
    front end answers `"POST /v1/chat/completions HTTP/1.1" 503` while the engine loads, with its
    `ModelNotReadyError` tracebacks. Before, the 503 counted as serving: the later tracebacks read "after
    startup finished", though the engine's `init engine … took` came minutes later."""
    report = _report("front_end_503_while_loading.log")
    assert not any(w.startswith("after startup finished") for w in report.warnings)
    assert any(w.startswith("before startup finished, which it then did") for w in report.warnings)
    served = (_DATA / "front_end_503_while_loading.log").read_text(encoding="utf-8").replace('HTTP/1.1" 503', 'HTTP/1.1" 200')
    assert any(w.startswith("after startup finished") for w in report_from_log_text(served, "x").warnings)


def test_a_pasted_commands_length_vllm_did_not_run_is_said_and_the_logs_kept() -> None:
    """QwenLM/Qwen3-VL#1684 (Qwen3-VL-235B, TP8 + EP, 0.11.0): the pasted `vllm serve … --max-model-len
    128000` above vLLM's `Maximum concurrency for 100,000 tokens per request`. The log's length is kept,
    and now the disagreement is said (before, silently)."""
    report = _report("command_len_not_the_runs.log")
    assert report.config.max_model_len == 100_000 and report.config.tensor_parallel_size == 8
    assert ("the pasted command gives max_model_len 128000, and vLLM's lines show 100000: the log's is kept (the "
            "command may be of another run)") in report.warnings


def test_a_log_flattened_onto_one_line_after_a_persons_words_is_read_record_by_record() -> None:
    """Issue-wiki mirrors of vllm#38498 (Step-3.5-Flash-FP8, ROCm, TP8 + EP) and vllm#24943 (Qwen3-Next-80B,
    TP8) store the issue's text on one line: `### Your current environment ### 🐛 Describe the bug … vllm serve
    … (Worker_TP1_EP1 pid=96931) ERROR … WorkerProc hit an exception. (Worker pid=96931) …`. Two or more
    tagged records after a person's words are a flattened log, not a sentence quoting one: each is split off,
    the first included. Before, the first record was lost: no failure at all (#38498), or rank 4 (#24943)."""
    for name in ("flattened_mirror_step35_tp8.log", "flattened_mirror_qwen3next_tp8.log"):
        report = _report(name)
        assert report.failure is not None and report.failure.kind is FailureKind.CRASH, name
        assert report.failure.rank == 1 and report.config.tensor_parallel_size == 8, name


def test_a_capture_past_the_estimate_vllm_charged_is_said_to_be_past_the_budget() -> None:
    """A log viewer's export (vLLM 0.20, Qwen3.6 NVFP4): `CUDA graph pool memory: 0.67 GiB (actual), 0.45 GiB
    (estimated)`: the KV cache was sized with 0.45 GiB charged, so 0.22 GiB is held past the budget. Before,
    ok with no word of it. graph_pool is the capture's."""
    report = _report("graph_pool_past_its_estimate.log")
    (rank,) = report.ranks
    assert rank.owners[Owner.GRAPH_POOL] == round(0.67 * GiB)
    assert (f"rank {rank.rank}: the CUDA graph capture took 0.67 GiB, 0.22 GiB more than the 0.45 GiB vLLM charged "
            f"for it when it sized the KV cache: that much is held past the budget (graph_pool is the capture's)"
            in report.warnings)


def test_vllms_consumed_figure_is_kept_beside_the_owners_it_does_not_split() -> None:
    """A Model Runner V2 startup study (TP2, a DeepSeek-V4 fork): `Actual usage is 82.69 GiB for consumed
    memory (weights + non-torch)`: vLLM's total_consumed, weights + persistent torch + non-torch, which the
    log does not split. Before, it was in no field, and rank 1's owners came to 10 GiB of a 92.63 GiB budget."""
    report = _report("consumed_unsplit.log")
    rank = next(r for r in report.ranks if r.vllm_consumed_bytes is not None)
    assert rank.rank == 1 and rank.vllm_consumed_bytes == round(82.69 * GiB)  # Worker_TP1's line
    assert rank.owners[Owner.WEIGHTS] is None and rank.owners[Owner.NON_TORCH] is None  # not split: not guessed
    from kvaudit.render.frames import owners_wide
    assert "consumed (vLLM's: w+p+n)" in owners_wide(report).index


def test_one_ranks_kv_stated_twice_differently_in_an_untagged_paste_is_said_to_fold_ranks() -> None:
    """Notes of a TP2 run on two DGX Spark (no process prefixes): `Available KV cache memory: 0.24 GiB`, then
    `-1.42 GiB`, each worker's own. Read as one rank (there is no name to tell them apart), now with a word."""
    report = _report("untagged_two_ranks_kv.log")
    assert report.verdict is Verdict.FAIL
    assert ("`Available KV cache memory` is stated 2 times with different figures (0.24 GiB, -1.42 GiB) in a log "
            "that names no process: likely several ranks' lines, read as one rank (its least figure, the one vLLM "
            "sizes every rank's cache by)") in report.warnings


def test_a_diff_of_two_logs_says_how_far_vllms_consumed_figure_moved() -> None:
    """Freshair129/Private-Runtime-Platform's evidence logs (one model and GPU, vLLM 0.29.0 → 0.30.0): KV +1.26
    GiB, of which activation_peak explains −0.56; the consumed figure (weights + persistent + non-torch, which
    neither log splits) went 8.59 → 7.89 GiB. Before, the diff named no figure for the rest; then it named it as
    the rest "in owners not known on both sides", though with it the split is whole (round 22a): +0.70 + 0.56."""
    import json

    from kvaudit.render.summary import diff_summary
    from kvaudit.schema import to_jsonable
    from kvaudit.validate import diff_from_json
    diff = diff_reports(_report("consumed_pair_a.log"), _report("consumed_pair_b.log"))
    assert diff.capacity["consumed_delta_bytes"] == round(7.89 * GiB) - round(8.59 * GiB)
    read_back = diff_from_json(json.loads(json.dumps(to_jsonable(diff))))
    assert read_back.capacity["consumed_delta_bytes"] == diff.capacity["consumed_delta_bytes"]
    # each side's non_torch is its consumed figure less the weights (7.64 GiB on both; round twenty-two), so the
    # −0.70 GiB is an owner's now, the one that moved KV most (activation_peak moved −0.56 GiB)
    binding = {d.owner: d.delta_bytes for d in diff.owners if d.rank is None}
    assert binding[Owner.NON_TORCH] == diff.capacity["consumed_delta_bytes"]
    assert binding[Owner.ACTIVATION_PEAK] == -round(0.56 * GiB)
    assert diff.dominant_owner is Owner.NON_TORCH
    assert "dominant owner: non_torch" in diff_summary(diff)


def test_a_short_prefix_before_two_tagged_records_is_still_the_lines_own() -> None:
    """Under PROSE_LEAD characters before the first head is a prefix (a viewer's, a journal's): the first
    record keeps it, as before this round, and the records joined after it are split off."""
    from kvaudit.engines.logs.lines import split_joined_records
    prefix = "Dec 06 10:00:00 gpu-node-7 vllm-serve[48213]: "
    first = "(Worker_TP0 pid=3) INFO 11-30 10:00:00 [gpu_worker.py:1] Available KV cache memory: 4.0 GiB"
    second = "(Worker_TP1 pid=4) INFO 11-30 10:00:00 [gpu_worker.py:1] Available KV cache memory: 3.0 GiB"
    text, split = split_joined_records(f"{prefix}{first} {second}\n")
    assert (split, text.splitlines()) == (1, [prefix + first, second])


def test_a_capture_within_the_figures_precision_of_its_estimate_is_not_called_past_it() -> None:
    """The figures are printed to 0.01 GiB: a capture less than that past the estimate says nothing."""
    text = (_DATA / "graph_pool_past_its_estimate.log").read_text(encoding="utf-8").replace(
        "memory: 0.67 GiB (actual)", "memory: 0.454 GiB (actual)")
    assert not any("more than the" in w for w in report_from_log_text(text, "x").warnings)


def test_a_kv_figure_derived_from_a_block_count_is_no_second_kv_line() -> None:
    """V0 without process names: `the rest of the memory reserved for KV Cache is 0.02GiB`, then `# CUDA
    blocks: 0` (a figure of 0 kvaudit derives): one rank's lines, not two ranks' folded."""
    report = report_from_log_text(
        "INFO 03-22 18:53:23 [worker.py:267] model weights take 18.38GiB; non_torch_memory takes 0.15GiB; PyTorch "
        "activation peak memory takes 0.31GiB; the rest of the memory reserved for KV Cache is 0.02GiB.\n"
        "INFO 03-22 18:53:24 [executor_base.py:110] # CUDA blocks: 0, # CPU blocks: 2048\n", "x")
    assert report.verdict is Verdict.FAIL
    assert not any("with different figures" in w for w in report.warnings)


def test_a_failed_model_step_is_a_failure_while_serving() -> None:
    """A mirror of vllm#36598 (Qwen3.5-9B, RTX 5090): `ERROR … [dump_input.py:79] Dumping scheduler output for
    model execution: … Traceback …`, a Triton out-of-memory on the first request. vLLM dumps the scheduler's
    output only when a step it planned fails (core.py log_error_detail): the engine was serving. Before, the
    boot's death. A start that finished fits at the length it serves (round twenty-four)."""
    report = _report("step_dump_first_request.log")
    assert report.failure is None and report.verdict is Verdict.OK
    lines = ("ERROR 03-09 21:56:25 [dump_input.py:79] Dumping scheduler output for model execution: SchedulerOutput(…)",
             "ERROR 03-09 21:56:25 [core.py:1] Traceback (most recent call last):",
             'ERROR 03-09 21:56:25 [core.py:1]   File "x.py", line 1, in step',
             "ERROR 03-09 21:56:25 [core.py:1] triton.runtime.errors.OutOfResources: out of resource: shared memory")
    served = report_from_log_text("\n".join(lines) + "\n", "x")
    assert served.failure is None and served.warnings == (
        "after startup finished: a traceback ending in `triton.runtime.errors.OutOfResources: out of resource: "
        "shared memory`",)


def test_killed_while_v0_loads_the_weights_is_a_death_in_load() -> None:
    """A blog's dual RTX 4090 TP2 boot (V0 lines): `[loader.py:402] Loading weights onto GPU. This may take a
    few minutes...`, then `Killed`. Before, the phase was not known."""
    report = _report("killed_loading_weights.log")
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.CRASH, Phase.LOAD)


def test_a_persons_words_in_another_script_do_not_continue_vllms_message() -> None:
    """A Korean write-up on velog.io: `🚫 ValueError: No available memory for the cache blocks.` (vLLM's
    message, its last sentence not pasted), then the author's paragraphs in Hangul, read into the message
    as its rest. Before, a 581-character failure message with the page's prose and table in it."""
    report = _report("korean_writeup_kv_error.log")
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT
    assert report.failure.message.startswith("ValueError: No available memory for the cache blocks.")
    assert not any("\uac00" <= ch <= "\ud7af" for ch in report.failure.message)
