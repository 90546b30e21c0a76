"""vLLM 0.34 startup logs, built line by line from the logger calls of vLLM 0.34.0's source (each
template names the function that prints it, with its file and line as vLLM prints them). No real
0.34 log was public when these were written: they pin the formats of what 0.34 changed.

0.34 sizes the KV cache after warmup and graph capture by default (the extensible KV cache,
v1/worker/extensible_kv_cache.py): "Available KV cache memory" is then the address range vLLM
reserves (GMU 1.0 when not given, no graph estimate), each rank states what it measured room for
after warmup ("Memory after warmup: … N KV cache blocks (S GiB) fit …"), the engine takes the
ranks' minimum ("GPU KV cache size", printed after capture now) and every rank commits it
("Extended KV cache to N blocks (X GiB)."). The auto-fit reduction has a new wording too, and a
page the driver cannot map is "GPU driver error 2: out of memory".
"""

from __future__ import annotations

from test_logs_v033 import G, format_gib, line  # vLLM's logger format and its format_gib

from kvaudit.engines.logs import report_from_log_text
from kvaudit.schema import FailureKind, KvSizing, Owner, Verdict
from kvaudit.units import fmt_gib

GiB = 1 << 30
MiB = 1 << 20


# One TP=2 boot of Llama-3.1-8B on two H200s, no --gpu-memory-utilization (1.0 with the extensible
# KV cache: config/cache.py resolved_gpu_memory_utilization), the figures agreeing as vLLM's code has them.
RANKS = ("Worker_TP0", "Worker_TP1")
TOTAL = round(139.8 * GiB)
FREE = round(139.2 * GiB)
REQUESTED = TOTAL                                    # utils.py request_memory: ceil(total × 1.0)
WEIGHTS = round(7.5 * GiB)
CONSUMED = round(9.0 * GiB)
TRANSIENT = round(2.25 * GiB)
TENTATIVE = REQUESTED - (CONSUMED + TRANSIENT)       # gpu_worker.py determine_available_memory, no graph term
GRAPHS = round(0.70 * GiB)
BLOCK = 1 * MiB                                      # 32 layers × 4 KV heads (TP2) × 128 × 2 B × K,V × 16 tokens
PEAK = {"Worker_TP0": round(2.5 * GiB), "Worker_TP1": round(2.6 * GiB)}   # the sizing warmup's allocated peak
GROWTH = round(2.8 * GiB)                            # torch's reservation growth in it
FREE_AFTER = {"Worker_TP0": round(121.0 * GiB), "Worker_TP1": round(120.9 * GiB)}
COMMITTED = 2 * BLOCK                                # what warmup left committed (min_committed_blocks)


def measured_blocks(proc: str) -> int:
    """extensible_kv_cache.py measure_kv_cache_bytes, then blocks_within."""
    non_kv_used = FREE - FREE_AFTER[proc] - COMMITTED
    headroom = FREE_AFTER[proc] + COMMITTED
    margin = max(1 * GiB, int(PEAK[proc] * 0.75))
    available = min(REQUESTED - non_kv_used, headroom - margin) - max(PEAK[proc], GROWTH)
    return available // BLOCK


FINAL = min(measured_blocks(p) for p in RANKS)       # kv_cache_planning.py finalize_extensible_kv_cache


def v034_boot(extended: bool = True, gmu_line: bool = False) -> str:
    out = [
        line("APIServer", "startup.py", 96, "non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B', 'model': "
             "'meta-llama/Llama-3.1-8B', 'tensor_parallel_size': 2, 'max_model_len': 32768}"),
        line("EngineCore", "core.py", 153, "Initializing a V1 LLM engine (v0.34.0) with config: "
             "model='meta-llama/Llama-3.1-8B', speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B', "
             "max_seq_len=32768, tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1, "
             "decode_context_parallel_size=1, enforce_eager=False, kv_cache_dtype=auto"),
    ]
    for proc in RANKS:
        # v1/worker/gpu/model_runner.py load_model (MRv2 is the only runner: no "Using V2 Model Runner").
        out.append(line(proc, "model_runner.py", 441, f"Model loading took {format_gib(WEIGHTS)} GiB memory and "
                        f"6.188402 seconds"))
    # gpu_worker.py determine_available_memory (info_once): the extensible cache's reserved range.
    out.append(line(RANKS[0], "gpu_worker.py", 795, f"Available KV cache memory: {format_gib(TENTATIVE)} GiB"))
    for proc in RANKS:
        non_kv = CONSUMED + TRANSIENT + GRAPHS
        to_requested = REQUESTED - non_kv - 150 * MiB
        to_gpu = FREE - non_kv - 150 * MiB
        out += [
            # gpu/model_runner.py capture_model: one capture only (no profiling capture when extensible).
            line(proc, "model_runner.py", 1216, f"Graph capturing finished in 2 secs, took {GRAPHS / GiB:.2f} GiB"),
            # gpu_worker.py _compile_or_warm_up_model: no pool comparison (the estimate is 0), the usage line.
            line(proc, "gpu_worker.py", 1175, f"Free memory on device ({format_gib(FREE)}/{format_gib(TOTAL)} GiB) on "
                 f"startup. Desired GPU memory utilization is (1.0, {format_gib(REQUESTED)} GiB). Actual usage is "
                 f"{format_gib(CONSUMED)} GiB for consumed memory (weights + non-torch), {format_gib(TRANSIENT)} GiB "
                 f"for peak activation, and {format_gib(GRAPHS)} GiB for CUDAGraph memory. Replace "
                 f"gpu_memory_utilization config with `--kv-cache-memory={to_requested}` ({format_gib(to_requested)} "
                 f"GiB) to fit into requested memory, or `--kv-cache-memory={to_gpu}` ({format_gib(to_gpu)} GiB) to "
                 f"fully utilize gpu memory. Current kv cache memory in use is {format_gib(TENTATIVE)} GiB."),
        ]
    if gmu_line:  # extensible_kv_cache.py measure_kv_cache_blocks, warning_once (an explicit GMU in (0.7, 1))
        out.append(line(RANKS[0], "extensible_kv_cache.py", 662, "gpu_memory_utilization=0.9 caps this instance at "
                        "125.82 GiB, keeping 12.41 GiB of free device memory out of the KV cache. The extensible KV "
                        "cache is sized from the memory measured after warmup and CUDA graph capture, so vLLM's own use "
                        "needs no headroom below 1.0.", "WARNING"))
    for proc in RANKS:
        blocks = measured_blocks(proc)
        kept = max(PEAK[proc], GROWTH)
        out.append(line(proc, "extensible_kv_cache.py", 693, f"Memory after warmup: {format_gib(FREE_AFTER[proc])} GiB "
                        f"free, {format_gib(COMMITTED)} GiB committed to the KV cache, {format_gib(kept)} GiB kept for "
                        f"transient activations ({format_gib(PEAK[proc])} GiB allocated at peak, {format_gib(GROWTH)} "
                        f"GiB of torch reservation growth); {blocks} KV cache blocks ({format_gib(blocks * BLOCK)} GiB) "
                        f"fit within the requested {format_gib(REQUESTED)} GiB. Torch may reserve up to 20.1 GiB."))
    if not extended:
        return "".join(out)
    # v1/core/kv_cache_utils.py update_kv_cache_capacity, after finalize_extensible_kv_cache.
    out.append(line("EngineCore", "kv_cache_utils.py", 1168, f"GPU KV cache size: {FINAL * 16:,} tokens, Maximum "
                    f"concurrency for 32,768 tokens per request: {FINAL * 16 / 32768:.2f}x"))
    for proc in RANKS:
        # extensible_kv_cache.py extend_kv_cache: physical bytes, rounded up to the 2 MiB granule per segment.
        physical = 32 * -(-(FINAL * BLOCK // 32) // (2 * MiB)) * 2 * MiB
        out.append(line(proc, "extensible_kv_cache.py", 536, f"Extended KV cache to {FINAL} blocks "
                        f"({physical / GiB:.2f} GiB)."))
    out.append(line("EngineCore", "core.py", 451, "init engine (profile, create kv cache, warmup model) took 42.17 s "
                    "(compilation: 21.13 s)"))
    return "".join(out)


def per_block() -> float:
    """The bytes per block the ranks' measurement lines give, from the most precise one (the most
    blocks: S GiB is to two decimals): both ranks' blocks are the same size (extensible.bytes_per_block)."""
    blocks = max(measured_blocks(p) for p in RANKS)
    return G(format_gib(blocks * BLOCK)) / blocks


def test_an_extensible_boot_reads_the_cache_vllm_extended_to_not_the_range_it_reserved() -> None:
    report = report_from_log_text(v034_boot(), "v034.log")
    assert (report.engine.version, report.engine.model_runner) == ("0.34.0", "V2")
    assert report.verdict is Verdict.OK
    assert measured_blocks("Worker_TP1") < measured_blocks("Worker_TP0")  # rank 1 binds: the minimum is its
    assert report.capacity.kv_tokens == FINAL * 16
    kv = round(FINAL * per_block())
    assert abs(kv - FINAL * BLOCK) <= 6 * MiB            # two decimals of GiB, not the 2.6 GiB larger range
    for rank, proc in zip(report.ranks, RANKS):
        # every rank was extended to the same blocks: the same bytes, not two roundings of them
        assert rank.owners[Owner.KV_CACHE] == rank.kv_available_bytes == rank.vllm_kv_available_bytes == kv
        assert rank.kv_blocks == FINAL
        # the sizing kept the warmup's transients free: the larger of its peak and torch's growth
        assert rank.owners[Owner.ACTIVATION_PEAK] == G(format_gib(max(PEAK[proc], GROWTH)))
        # no graph estimate by design (the pool was measured after capture): none is inferred
        assert rank.graph_pool_estimate_bytes is None and rank.graph_pool_actual_bytes == G("0.7")
        # vLLM's --kv-cache-memory suggestion is computed at GMU 1.0 against the total in this mode: left out
        assert rank.vllm_suggested_kv_cache_memory_bytes is None
    assert report.capacity.binding_rank == 0  # a tie: the lower rank
    notes = [n for n in report.warnings if "extensible KV cache" in n]
    assert notes == [f"vLLM sized the KV cache after warmup and graph capture (vLLM 0.34's extensible KV cache): "
                     f"rank 0 was extended to {FINAL:,} blocks ({fmt_gib(kv)}), its KV figure here; 'Available KV "
                     f"cache memory' {format_gib(TENTATIVE)} GiB was the address range it reserved, not the cache; "
                     f"vLLM's --kv-cache-memory suggestion (computed at GMU 1.0 against the device's total) is left "
                     f"out"]
    assert not any("not budgeted" in n for n in report.warnings)


def test_an_extensible_log_cut_before_the_extension_reads_each_ranks_measurement() -> None:
    report = report_from_log_text(v034_boot(extended=False), "v034-cut.log")
    for rank, proc in zip(report.ranks, RANKS):
        assert rank.owners[Owner.KV_CACHE] == round(measured_blocks(proc) * per_block())
        assert rank.kv_blocks == measured_blocks(proc)
    assert any("the log ends before the cache was extended" in n for n in report.warnings)


def test_an_extensible_boot_that_died_before_sizing_has_no_kv_figure() -> None:
    """A KV page the driver cannot map while the sizing warmup runs: the log has the reserved range
    and the "Actual usage" line (GMU 1.0, the whole device), no sizing line. The reserved range is no
    cache: no KV figure, no flags, no inferred graph estimate (was: 128.55 GiB KV and flags that do
    not fit)."""
    log = v034_boot(extended=False)
    log = "".join(x for x in log.splitlines(keepends=True) if "Memory after warmup" not in x) \
        + "RuntimeError: GPU driver error 2: out of memory\n"
    report = report_from_log_text(log, "v034-died.log")
    assert report.verdict is Verdict.FAIL and report.failure.kind is FailureKind.OOM
    assert report.engine.kv_cache_sizing is KvSizing.AFTER_WARMUP
    for rank in report.ranks:
        assert rank.owners[Owner.KV_CACHE] is None and rank.kv_available_bytes is None
        assert rank.graph_pool_estimate_bytes is None
    assert report.capacity.safe_serve_flags == ()
    assert not any("not budgeted" in n for n in report.warnings)
    assert (f"vLLM sized the KV cache after warmup and graph capture (vLLM 0.34's extensible KV cache), and the log "
            f"ends before it did (rank 0): 'Available KV cache memory' {format_gib(TENTATIVE)} GiB was the address "
            f"range it reserved, not the cache; no KV figure") in report.warnings


def test_the_flags_from_an_extensible_log_pass_vllms_start_up_check() -> None:
    """The flags pin the KV bytes, which turns the extensible cache off in vllm serve; its start-up
    check then needs requested ≤ free, which the boot's GMU 1.0 fails (139.8 > 139.2 GiB)."""
    report = report_from_log_text(v034_boot(), "v034.log")
    flags = dict(f.split("=", 1) for f in report.capacity.safe_serve_flags)
    ceiling = int(G(format_gib(FREE)) / G(format_gib(TOTAL)) * 10_000) / 10_000
    assert float(flags["--gpu-memory-utilization"]) == ceiling < 1.0
    assert int(flags["--kv-cache-memory-bytes"]) <= report.capacity.kv_available_bytes


def test_vllms_warning_that_a_gmu_caps_the_extensible_cache_is_a_note() -> None:
    report = report_from_log_text(v034_boot(gmu_line=True), "v034-gmu.log")
    assert ("gpu_memory_utilization 0.9 capped the extensible KV cache at 125.82 GiB and kept 12.41 GiB of free "
            "memory out of it (vLLM's warning)") in report.warnings


def test_the_new_auto_fit_wording_gives_the_served_length() -> None:
    """kv_cache_planning.py _auto_fit_max_model_len, 0.34 (estimate-based sizing): the reduction is
    "--max-model-len auto reduced max_model_len from %d to %d (%s)." (was "Auto-fit max_model_len:
    reduced from …"); the tentative fit of the extensible cache keeps the old wording and says so."""
    log = (line("EngineCore", "core.py", 153, "Initializing a V1 LLM engine (v0.34.0) with config: "
                "model='m', max_seq_len=-1, tensor_parallel_size=1")
           + line("Worker_TP0", "gpu_worker.py", 795, "Available KV cache memory: 82.5 GiB")
           + line("EngineCore", "kv_cache_planning.py", 1494, "--max-model-len auto reduced max_model_len from 131072 "
                  "to 98304 (82.5 GiB GPU available for the KV cache)."))
    report = report_from_log_text(log, "autofit.log")
    assert report.config.max_model_len == 98304
    assert "max_model_len was auto-fit: reduced from 131072 to 98304" in report.warnings
    tentative = report_from_log_text(log.replace(
        "--max-model-len auto reduced max_model_len from 131072 to 98304 (82.5 GiB GPU available for the KV cache).",
        "Auto-fit max_model_len: reduced from 131072 to 98304 to fit in available KV cache memory (82.5 GiB GPU); "
        "the final length is set after CUDA graph capture and warmup"), "tentative.log")
    assert ("max_model_len was auto-fit: reduced from 131072 to 98304 (tentatively: the length is set again after "
            "graph capture and warmup)") in tentative.warnings


def test_a_kv_page_the_driver_cannot_map_is_an_out_of_memory() -> None:
    """utils/vmm_driver.py _check: "GPU driver error %d: %s" (2: out of memory), committing the
    extensible cache's pages."""
    log = v034_boot(extended=False) + "RuntimeError: GPU driver error 2: out of memory\n"
    report = report_from_log_text(log, "v034-oom.log")
    assert report.verdict is Verdict.FAIL
    assert report.failure is not None and report.failure.kind is FailureKind.OOM


def test_the_report_says_who_sized_the_kv_cache_and_a_diff_with_an_earlier_release_names_the_change(
        tmp_path) -> None:
    """engine.kv_cache_sizing (a report extension): after_warmup where the ranks state the extensible
    cache's sizing, profile for a release before 0.34, unknown for a 0.34 excerpt that shows neither;
    it survives the JSON round trip, and `kvaudit diff` lists it among the environment's changes."""
    from test_logs_v033 import v033_boot

    from kvaudit.diff import diff_reports
    from kvaudit.report import parse_report_text
    from kvaudit.schema import dumps
    after = report_from_log_text(v034_boot(), "v034.log")
    before = report_from_log_text(v033_boot(), "v033.log")
    assert after.engine.kv_cache_sizing is KvSizing.AFTER_WARMUP
    assert before.engine.kv_cache_sizing is KvSizing.PROFILE
    # a 0.34 excerpt that shows neither the sizing lines nor the reservation's signs: unknown
    excerpt = "".join(x for x in v034_boot().splitlines(keepends=True)
                      if "Available KV cache memory" in x or "Model loading took" in x or "LLM engine" in x)
    assert report_from_log_text(excerpt, "v034-excerpt.log").engine.kv_cache_sizing is None
    path = tmp_path / "after.json"
    path.write_text(dumps(after), encoding="utf-8")
    assert '"kv_cache_sizing": "after_warmup"' in path.read_text(encoding="utf-8")
    assert parse_report_text(path.read_text(encoding="utf-8"), str(path)).engine.kv_cache_sizing \
        is KvSizing.AFTER_WARMUP
    diff = diff_reports(before, after)
    assert [(e.key, e.a, e.b) for e in diff.environment_differences
            if e.key == "engine.kv_cache_sizing"] == [("engine.kv_cache_sizing", "profile", "after_warmup")]


def test_a_plan_of_a_log_that_asked_vllm_to_size_the_cache_itself_pins_the_bytes_instead() -> None:
    """`--enable-extensible-kv-cache` among the boot's own arguments: `kvaudit run` refuses it, a plan
    from such a log drops it (its flags pin the KV bytes, which turns it off in vllm serve) and says so."""
    from kvaudit.plan import plan_report
    from kvaudit.plan_schema import Edits
    log = v034_boot().replace("'max_model_len': 32768}", "'max_model_len': 32768, 'enable_extensible_kv_cache': True}")
    measured = report_from_log_text(log, "v034-asked.log")
    assert measured.config.extra_args == {"enable_extensible_kv_cache": True, "pipeline_parallel_size": 1,
                                          "data_parallel_size": 1, "prefill_context_parallel_size": 1}
    plan = plan_report(measured, Edits(gpu_memory_utilization=0.9))
    assert "enable_extensible_kv_cache" not in plan.report.config.extra_args
    assert any("turns that off in vllm serve" in n for n in plan.notes)


def test_an_oom_in_model_runner_v2s_profiling_capture_is_in_the_graphs_phase() -> None:
    """V1's "Profiling CUDA graph memory" / "Estimated CUDA graph memory" lines, the graphs phase's
    milestones, are gone in 0.34: MRv2's estimate is a capture, whose bar after the profile and
    before KV places a failure there (was: profile)."""
    from kvaudit.schema import Phase
    log = (line("Worker_TP0", "model_runner.py", 441, "Model loading took 15.0 GiB memory and 6.188402 seconds")
           + "Capturing CUDA graphs (PIECEWISE):  40%|████      | 4/10 [00:01<00:01,  3.91it/s]\n"
           + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
             "139.81 GiB of which 1.05 GiB is free.\n")
    report = report_from_log_text(log, "v034-graphs-oom.log")
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.OOM, Phase.GRAPHS)


def test_a_plan_of_an_extensible_log_is_held_to_the_start_up_check_its_pinned_bytes_bring() -> None:
    """The measured budget (GMU 1.0) was only the extensible cache's cap, above the memory free at
    start; the plan's flags pin the KV bytes, so vLLM checks the planned budget against free memory.
    Planned from each rank's free memory at the highest GMU that passes: an edit that keeps the
    GMU is no refusal at start (it was), and a lower GMU gives up what it takes from that budget
    (the measured 1.0 × total, 0.6 GiB above free, had been taken off too)."""
    from kvaudit.ledger import requested_bytes
    from kvaudit.plan import plan_report
    from kvaudit.plan_schema import Edits
    measured = report_from_log_text(v034_boot(), "v034.log")
    ceiling = int(G(format_gib(FREE)) / G(format_gib(TOTAL)) * 10_000) / 10_000
    longer = plan_report(measured, Edits(max_model_len=65536))
    assert longer.report.verdict is Verdict.OK
    assert longer.report.config.gpu_memory_utilization == ceiling
    assert longer.report.capacity.kv_available_bytes == measured.capacity.kv_available_bytes
    assert any(n.startswith("vLLM sized the measured boot's KV cache after warmup") for n in longer.notes)
    lower = plan_report(measured, Edits(gpu_memory_utilization=0.9))
    rank = measured.binding()
    expected = measured.capacity.kv_available_bytes + requested_bytes(rank.device_total_bytes, 0.9) \
        - rank.free_at_start_bytes
    assert abs(lower.report.capacity.kv_available_bytes - expected) < BLOCK  # whole blocks
