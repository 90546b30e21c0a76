"""Real pastes, round seventeen (stop 48): the newest public logs (vLLM 0.27–0.31, forks) and whole
log files committed to repositories (0.9–0.23), each test naming its source. The data are the
smallest excerpts of the real files that show each finding (tests/unit/data/round_seventeen)."""
from __future__ import annotations

from pathlib import Path

from kvaudit.diff import diff_reports
from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.boot_record import UNFINISHED
from kvaudit.schema import FailureKind, KnobDifference, Phase, Verdict

_DATA = Path(__file__).parent / "data" / "round_seventeen"


def _report(name: str, text: str | None = None):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8") if text is None else text, name)


def test_torchs_allocator_oom_before_a_dead_boot_is_its_cause_in_the_capture() -> None:
    """A gemma-4 write-up (GMU 0.75 block): MRv2's FULL capture bar at 20/35, torch's allocator
    warning `memory allocation failed with OOM on device 0 …`, then `Engine core initialization
    failed`. Before, a crash with no phase: the warning was no cause, and the bar no phase. The
    graph estimate before KV captures three FULL graphs at most, so a bar over 35 is the real capture."""
    report = _report("torch_alloc_oom_in_full_capture.log")
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase, report.failure.rank) == (FailureKind.OOM, Phase.CAPTURE, 0)
    assert report.failure.message == ("memory allocation failed with OOM on device 0 while trying to allocate "
                                      "2097152 bytes (free: 2031616, total: 23661248512)")
    assert report.ranks[0].device_total_bytes == 23661248512
    assert report.verdict is Verdict.FAIL
    # a bar over three FULL graphs at most (a later estimate samples three): which capture, not known
    three = _report("x", (_DATA / "torch_alloc_oom_in_full_capture.log").read_text().replace("20/35", "1/3"))
    assert three.failure is not None and three.failure.phase is None


def test_torchs_allocator_oom_alone_is_a_note_not_a_death() -> None:
    """An article's T4 line (gemma-4 26B, vLLM 0.30.0), pasted alone. Before, `not a vLLM log` (exit
    2). The allocator frees its cache and retries after this warning, so alone it shows no death."""
    report = _report("torch_alloc_oom_alone.log")
    assert report.failure is None and report.verdict is Verdict.UNKNOWN
    assert report.ranks[0].device_total_bytes == 15636037632
    assert ("torch's allocator warned of out-of-memory (memory allocation failed with OOM on device 0 while trying "
            "to allocate 253755392 bytes (free: 191627264, total: 15636037632)): no failure of the boot's, as the "
            "allocator frees its cache and retries after this warning, and no death in the log is left for it to "
            "explain") in report.warnings


def test_torchs_allocator_oom_with_no_death_after_it_is_no_failure() -> None:
    """A 95 GiB card's notes (hybrid MoE, kv_cache_memory_bytes 5 GiB, the boot served): the AutoTuner's
    allocator warning at graph capture, and no death in the excerpt. The boot's weights are read from
    `Model loading took 81.8 GiB memory`, which states no time (before, the weights were unknown)."""
    report = _report("torch_alloc_oom_then_served.log")
    assert report.failure is None and report.verdict is Verdict.OK
    assert report.ranks[0].owners["weights"] == round(81.8 * 2**30)
    assert _report("model_loading_no_seconds.log").ranks[0].owners["weights"] == round(81.8 * 2**30)


def test_torchs_allocator_oom_gives_way_to_an_exception_that_names_its_cause() -> None:
    """The warning before a death whose own line names the cause (the KV check here) is a note, once
    however often it came: it is the cause only beside lines that say no more than that the boot died
    (the review of this round: the KV check was read as an OOM)."""
    warn = "[rank0]:[W922 05:15:28] " + (_DATA / "torch_alloc_oom_alone.log").read_text().rstrip("\n") + "\n"
    check = ("(EngineCore pid=7) ERROR 10-02 11:02:49 [core.py:1100] ValueError: To serve at least one request with "
             "the model's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the available KV "
             "cache memory (2.77 GiB). Based on the available memory, the estimated maximum model length is 22704.\n")
    report = _report("x", warn + warn + check)
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT
    assert report.capacity.max_feasible_model_len == 22704
    assert [w for w in report.warnings if w.startswith("torch's allocator warned")][0].count("2 times in all") == 1


def test_a_command_that_names_vllm_by_its_path_states_the_model() -> None:
    """A TP4 Kimi-Linear write-up: `/home/…/vllm_env/bin/vllm serve moonshotai/Kimi-Linear-48B-A3B-Instruct \\`.
    Before, TP 4 was read from the command and the model not."""
    report = _report("serve_by_path.log")
    assert report.config.model == "moonshotai/Kimi-Linear-48B-A3B-Instruct"
    assert report.config.tensor_parallel_size == 4
    # a sentence that names a path before `vllm serve` states no model (as before)
    assert _report("x", "I ran /usr/bin/vllm serve foo/bar and it died\n" + (
        _DATA / "model_loading_no_seconds.log").read_text()).config.model is None


def test_a_forks_long_version_is_read_whole() -> None:
    """A GLM fork's banner: `version 0.26.1rc0+glm53.flash.nvfp4.luke.clean.r1.vllme75bcfd.b12x58a046f`
    (61 characters after `0.26`); before, its last character was cut."""
    report = _report("long_fork_version.log")
    assert report.engine.version == "0.26.1rc0+glm53.flash.nvfp4.luke.clean.r1.vllme75bcfd.b12x58a046f"


def test_speculative_decoding_metrics_show_the_boot_served() -> None:
    """The same fork (TP3/EP3, DFlash depth 7): a worker's memory line, then the API server's
    `SpecDecoding metrics` for drafts it ran. Before, "the log ends before startup finished"."""
    report = _report("spec_metrics_served.log")
    assert not [w for w in report.warnings if w.startswith(UNFINISHED.split(":")[0])]


def test_a_sentence_quoting_the_startup_line_is_no_sign_the_server_came_up() -> None:
    """An RTX PRO 6000 write-up: the "Actual usage" lines, then "… `Application startup complete` had
    still not been printed …". Before, the quote hid the warning that the log ends before startup."""
    report = _report("startup_complete_in_prose.log")
    assert [w for w in report.warnings if w.startswith(UNFINISHED.split(":")[0])]


def test_a_failure_after_the_kv_size_line_keeps_the_fit() -> None:
    """A WSL write-up (0.27.1): `GPU KV cache size: 1,629,520 tokens`, then the warmup's JIT build
    failing (`Could not find nvcc`). vLLM prints the size line only once every rank passed the KV
    check at the final max_model_len (2048), so the length fits; before, the fit was unknown."""
    report = _report("kv_fits_then_warmup_crash.log")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.capacity.max_model_len_fits is True
    assert report.verdict is Verdict.UNKNOWN  # a crash says nothing of memory: as before


def test_chunked_prefill_is_read_from_the_scheduler_and_the_engine_line() -> None:
    """zjpzhao/vllm-qwen3vl-cu118-t4 (0.11.0): logs/verify_qwen3vl_ptxas118.log states chunked
    prefill on (`Chunked prefill is enabled with max_num_batched_tokens=8192.`, and
    `chunked_prefill_enabled=True` on the engine line), verify_qwen3vl_cutlass.log off (`non-default
    args`). Before, only the args were read, and the diff called the pair comparable as far as
    both state their knobs."""
    on = _report("chunked_prefill_scheduler_line.log")
    assert (on.config.enable_chunked_prefill, on.config.max_num_batched_tokens) == (True, 8192)
    engine_only = (_DATA / "chunked_prefill_scheduler_line.log").read_text().split("\n", 1)[1]
    assert _report("x", engine_only).config.enable_chunked_prefill is True
    off = _report("chunked_prefill_off_args.log")
    assert off.config.enable_chunked_prefill is False
    diff = diff_reports(on, off)
    assert not diff.comparable
    assert [d.knob for d in diff.knob_differences] == ["enable_chunked_prefill"]


def test_two_more_attention_backend_lines() -> None:
    """fpolica91/triton-example's ROCm log (0.16.0): `Using Sparse MLA backend.`; dennislee22's
    gpt-oss-120b log (0.10.1.1): `Using Triton backend on V1 engine.`. Before, neither was read."""
    assert _report("rocm_sparse_mla_backend.log").engine.attention_backend == "Sparse MLA"
    assert _report("v1_triton_backend.log").engine.attention_backend == "Triton"


def test_a_model_name_split_by_a_wrap_is_taken_from_model_tag() -> None:
    """dennislee22/vLLM-benchmarking (0.10.1.1), two logs' `non-default args` folded inside the model's
    name (`'model': 'Qwe` / `n2-7B-Instruct'`), `'model_tag': 'Qwen2-7B-Instruct'` whole on the line
    before. Before, `Qwe n2-7B-Instruct` against `Qwen 2-7B-Instruct`: "NOT comparable: model"."""
    a, b = _report("args_model_split_by_wrap_a.log"), _report("args_model_split_by_wrap_b.log")
    assert a.config.model == b.config.model == "Qwen2-7B-Instruct"
    assert "model" not in [d.knob for d in diff_reports(a, b).knob_differences]


def test_engine_config_keys_after_a_persons_elision_are_read() -> None:
    """A mocked-driver write-up (0.30.0): the engine line shortened by hand, `… max_seq_len=2048, ...
    tensor_parallel_size=1, ... kv_cache_dtype=auto, …`. Before, kv_cache_dtype was not read."""
    report = _report("engine_line_with_elisions.log")
    assert (report.config.kv_cache_dtype, report.config.max_model_len) == ("auto", 2048)


def test_lines_picked_out_of_order_say_nothing_of_the_graph_estimate() -> None:
    """An A100 write-up (0.31.0, MRv2): its "Actual usage" line (17:00:41) pasted before its
    `Available KV cache memory` line (17:00:33). Before, a graph estimate of 0 was inferred from
    the advisory missing after the KV line, with a warning that 0.23 GiB of capture went unbudgeted;
    the paste shows no line after the KV line, so the estimate, and the activation, are not known."""
    report = _report("reordered_usage_then_kv.log")
    rank = report.ranks[0]
    assert rank.graph_pool_estimate_bytes is None and rank.owners.get("activation_peak") is None
    assert rank.graph_pool_actual_bytes == round(0.23 * 2**30)
    assert not [w for w in report.warnings if "reserved no CUDA graph memory" in w]
    # in the order vLLM prints them, the same two lines still show the estimate was 0
    usage, kv = (_DATA / "reordered_usage_then_kv.log").read_text().splitlines()
    in_order = _report("x", f"{kv}\n{usage}\n")
    assert in_order.ranks[0].graph_pool_estimate_bytes == 0


def test_workers_named_with_no_rank_take_the_rank_their_own_line_states() -> None:
    """vatsasree/MedQA_Agent's vllm.log (0.23.0, TP4): `(Worker pid=N)` workers, each with its own
    `world_size=4 rank=R local_rank=R …` line, failing the free-memory check on cuda:0 to cuda:3.
    Before, every figure was rank 0's, and the physical headroom (-18.50 GiB) was not the tightest
    rank's (cuda:3: 53.76 - 72.84 = -19.08 GiB)."""
    report = _report("unnamed_workers_world_rank.log")
    assert [(r.rank, r.free_at_start_bytes) for r in report.ranks] == [
        (0, round(54.34 * 2**30)), (3, round(53.76 * 2**30))]
    assert report.capacity.physical_headroom_bytes == round(53.76 * 2**30) - round(72.84 * 2**30)
    assert report.failure is not None and report.failure.rank == 0
    # two workers that claim one rank (two boots pasted together): no rank is taken from the lines
    text = (_DATA / "unnamed_workers_world_rank.log").read_text().replace("rank=3 local_rank=3", "rank=0 local_rank=0")
    assert [r.rank for r in _report("x", text).ranks] == [0]


def test_a_quantization_both_logs_state_is_compared() -> None:
    """kolyangg/mlops-assignment (0.10.2, bf16: the engine line's `quantization=None`) against
    NnamdiOdozi/mlops-assignment (0.22.1: `'quantization': 'fp8'`, `quantization=fp8`). The weights
    halve (56.93 → 29.08 GiB); before, the diff did not say why. A side that states none is not
    compared (`kvaudit run` leaves it to vLLM and the checkpoint)."""
    a, b = _report("bf16_engine_line.log"), _report("fp8_args_and_engine_line.log")
    assert (a.config.extra_args["quantization"], b.config.extra_args["quantization"]) == (None, "fp8")
    diff = diff_reports(a, b)
    assert KnobDifference("quantization", None, "fp8") in diff.knob_differences and not diff.comparable
    silent = _report("x", (_DATA / "model_loading_no_seconds.log").read_text())
    assert "quantization" not in silent.config.extra_args
    one_sided = diff_reports(silent, b)
    assert KnobDifference("quantization", None, "fp8") in (one_sided.one_sided_knobs or ())
    assert "quantization" not in [d.knob for d in one_sided.knob_differences]


def test_one_attention_backend_in_two_spellings_is_no_environment_difference() -> None:
    """The same pair's backend lines: 0.10.2's `Using Flash Attention backend on V1 engine.`, 0.22.1's
    `Using FLASH_ATTN attention backend out of potential backends: …`. Before, an environment
    difference `Flash Attention → FLASH_ATTN`."""
    old = ("(EngineCore_DP0 pid=1289229) INFO 06-16 14:13:28 [cuda.py:362] Using Flash Attention backend on V1 "
           "engine.\n")
    new = ("(EngineCore pid=203) INFO 06-18 09:16:28 [cuda.py:378] Using FLASH_ATTN attention backend out of "
           "potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].\n")
    a = _report("a", old + (_DATA / "bf16_engine_line.log").read_text())
    b = _report("b", new + (_DATA / "fp8_args_and_engine_line.log").read_text())
    assert (a.engine.attention_backend, b.engine.attention_backend) == ("Flash Attention", "FLASH_ATTN")
    assert "engine.attention_backend" not in [d.key for d in diff_reports(a, b).environment_differences]
    c = _report("c", new.replace("FLASH_ATTN attention", "FLASHINFER attention") + (
        _DATA / "fp8_args_and_engine_line.log").read_text())
    assert "engine.attention_backend" in [d.key for d in diff_reports(a, c).environment_differences]


def test_a_budget_neither_log_states_is_named_where_kv_moved_more_than_the_owners() -> None:
    """dennislee22/vLLM-benchmarking (0.10.1.1): Qwen2-7B TP2 at gmu 0.5 on two A100 80GB, then on two
    A100 40GB; neither log names its device. KV fell 20.80 GiB, the graph pool rose 0.35 GiB, and the
    note named only owners as the rest; the budget (device × gmu) is the cause. The pool is no owner of the change
    (round 22a): 0.10's capture comes after KV is sized, and neither log states an estimate charged before."""
    from kvaudit.render.summary import diff_summary
    from kvaudit.schema import to_jsonable
    from kvaudit.validate import diff_from_json

    diff = diff_reports(_report("a100_80gb_gmu05.log"), _report("a100_40gb_gmu05.log"))
    assert diff.capacity["requested_delta_bytes"] is None
    assert diff.dominant_owner is None
    line = next(s for s in diff_summary(diff) if s.startswith("dominant owner"))
    assert line == ("dominant owner: —; no owner both sides know moved KV's -20.80 GiB: it is in owners not known on "
                    "both sides (activation_peak, graph_pool's estimate, non_torch) or the budget (requested: device "
                    "× gpu_memory_utilization), not known on both sides")
    # read back from its JSON the same; a diff written before the extensions (kv_sizing, the budget), which named the
    # pool, names no budget
    data = to_jsonable(diff)
    assert next(s for s in diff_summary(diff_from_json(data)) if s.startswith("dominant")) == line
    del data["capacity"]["requested_delta_bytes"], data["kv_sizing"]
    data["dominant_owner"] = "graph_pool"
    older = next(s for s in diff_summary(diff_from_json(data)) if s.startswith("dominant"))
    assert older == ("dominant owner: graph_pool; it moved +0.35 GiB of KV's -20.80 GiB: the rest is in owners not "
                     "known on both sides (persistent, activation_peak, non_torch, torch_other)")


def test_review_cases_of_the_new_rules() -> None:
    """The round's review: a pooling model's config turns chunked prefill off again after the
    scheduler's line (`…; disabling both.`); `gptq` typed and `gptq_marlin` resolved are one checkpoint
    format; 0.8–0.10's `Triton` backend is TRITON_ATTN; an OOM allocating the KV cache keeps no "fits";
    a ^C's `KeyboardInterrupt` outranks the allocator's warning before it."""
    from kvaudit.diff import _backend, _quantization
    pooling = ("INFO 07-31 16:21:30 [scheduler.py:205] Chunked prefill is enabled with max_num_batched_tokens=16384.\n"
               "INFO 07-31 16:21:30 [config.py:4821] Only \"last\" pooling supports chunked prefill and prefix caching; "
               "disabling both.\n"
               "(EngineCore_DP0 pid=1) INFO 07-31 16:21:49 [gpu_worker.py:298] Available KV cache memory: 8.21 GiB\n")
    assert _report("x", pooling).config.enable_chunked_prefill is False
    assert _quantization("gptq_marlin") == _quantization("gptq") and _backend("Triton") == _backend("TRITON_ATTN")
    oom_in_kv = ((_DATA / "kv_fits_then_warmup_crash.log").read_text().replace(
        "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.65 GiB."))
    report = _report("x", oom_in_kv)
    assert report.failure is not None and report.failure.kind is FailureKind.OOM
    assert report.capacity.max_model_len_fits is None
    ctrl_c = ("(EngineCore_DP0 pid=4250) INFO 09-22 05:15:20 [kv_cache_utils.py:1087] GPU KV cache size: 29,184 tokens\n"
              "[rank0]:[W922 05:15:28] memory allocation failed with OOM on device 0 while trying to allocate 2097152 "
              "bytes (free: 2031616, total: 23661248512)\n"
              "^CTraceback (most recent call last):\n  File \"/usr/local/bin/vllm\", line 10, in <module>\n"
              "    sys.exit(main())\nKeyboardInterrupt\n")
    stopped = _report("x", ctrl_c)
    assert stopped.failure is not None and stopped.failure.kind is FailureKind.INTERRUPTED


def test_the_last_allocator_warning_before_the_death_is_the_cause() -> None:
    """The second review: of several warnings before a death that names no cause, the last one before
    it is the one the allocator did not recover from; a warning after the death is no cause."""
    warn = "[rank0]:[W922 05:15:28] memory allocation failed with OOM on device 0 while trying to allocate {} bytes " \
           "(free: 2031616, total: 23661248512)\n"
    died = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    report = _report("x", warn.format(1048576) + warn.format(2097152) + died + warn.format(4194304))
    assert report.failure is not None and report.failure.kind is FailureKind.OOM
    assert "allocate 2097152 bytes" in report.failure.message
