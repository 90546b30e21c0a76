"""Real pastes, round twenty-two (the graph figures): a graph estimate far above the capture, vLLM's own
`--kv-cache-memory` suggestion that counts the estimate twice, the consumed figure less the weights, a weights
line no device of the log holds, an eager boot whose second rank prints no KV line, and a 0.31 profile peak; each
test names its source, the data are the excerpts (tests/unit/data/round_twenty_two/graphs_*: the first line of
each is where it came from)."""
from __future__ import annotations

import io
from pathlib import Path

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.knobs import knobs_from_engine_line
from kvaudit.render import Format, reporter
from kvaudit.render.frames import owners_wide
from kvaudit.schema import Owner, Phase, Verdict

_DATA = Path(__file__).parent / "data" / "round_twenty_two"
GiB = 2**30


def G(figure: float) -> int:
    """A figure as vLLM prints it (GiB to two decimals), in bytes, as the log engine reads it."""
    return round(figure * GiB)


def _report(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


def _table(report) -> str:
    out = io.StringIO()
    reporter(Format.TABLE, width=200, color=False).report(report, out)
    return " ".join(out.getvalue().split())


GB300 = "graphs_gb300_dep16_estimate_over_capture.log"
EAGER = "graphs_mrv2_tp2_eager_tp0_only_kv.log"
A100 = "graphs_a100_mrv2_usage_line_cut.log"


def test_a_graph_estimate_the_capture_left_unused_is_said_to_be_idle_budget() -> None:
    """arpera/srt-slurm's GB300 decode worker (DEP16, gmu 0.92): `CUDA graph pool memory: 8.57 GiB (actual),
    33.06 GiB (estimated), difference: 24.49 GiB (285.9%).` vLLM gave the KV cache the budget less the 33.06 GiB
    estimate (254.49 − 171.25 − 3.68 − 33.06 = 46.50). Before: verdict ok and not a word; only a capture larger
    than its estimate was noted."""
    report = _report(GB300)
    rank = report.ranks[0]
    assert (rank.graph_pool_estimate_bytes, rank.graph_pool_actual_bytes) == (G(33.06), G(8.57))
    assert rank.owners[Owner.GRAPH_POOL] == G(33.06)  # the charge: what vLLM held back from the KV cache
    idle = G(33.06) - G(8.57)
    assert idle + G(46.5) - 150 * 2**20 == 76_067_645_685
    assert ("note: rank 0: vLLM charged 33.06 GiB for CUDA graphs when it sized the KV cache, and the capture took 8.57 "
            "GiB: 24.49 GiB of the requested budget holds neither KV nor graphs (graph_pool is the charge); by "
            "vLLM's arithmetic the same gpu_memory_utilization sizes about 70.99 GiB of KV "
            "(--kv-cache-memory-bytes=76067645685, its 150 MiB buffer kept; not audited)") in report.warnings
    assert report.verdict is Verdict.OK  # the KV lines fit; the note says what the budget could have held


def test_vllms_suggestion_that_counts_the_estimate_twice_is_not_read_as_an_overcommit() -> None:
    """The same line: `36.74 GiB for peak activation, and 8.57 GiB for CUDAGraph memory. Replace
    gpu_memory_utilization config with --kv-cache-memory=40574291354 (37.79 GiB) to fit into requested memory`.
    The peak holds the 33.06 GiB estimate (peak_activation_memory = transient headroom + the estimate applied),
    and compile_or_warm_up_model adds the capture again (vllm#57936): 254.49 − 171.25 − 36.74 − 8.57 − 0.15 =
    37.79. Before: "8.71 GiB less than the flags' bytes above", as if the boot ran 8.7 GiB over its budget."""
    report = _report(GB300)
    rank = report.ranks[0]
    assert rank.vllm_peak_activation_bytes == G(36.74)
    assert rank.vllm_peak_activation_bytes - rank.owners[Owner.ACTIVATION_PEAK] == G(33.06)
    text = _table(report)
    assert ("vLLM's own suggestion: --kv-cache-memory=40574291354 (37.79 GiB), which counts the 33.06 GiB graph "
            "estimate twice (inside peak activation and again as CUDAGraph memory; vllm#57936): counted once, 70.85 "
            "GiB, 24.35 GiB more than the flags' bytes above") in text
    assert "8.71 GiB less" not in text


def test_the_consumed_figure_less_the_weights_is_non_torch_and_the_owners_reach_the_budget() -> None:
    """The same rank: `Actual usage is 171.25 GiB for consumed memory (weights + non-torch)` beside `Model
    loading took 168.89 GiB memory`. vLLM's consumed figure is total_consumed (weights + persistent torch +
    non-torch). Before: non_torch and persistent null, and the owners came to 252.13 of the 254.49 GiB
    requested."""
    report = _report(GB300)
    rank = report.ranks[0]
    assert rank.owners[Owner.NON_TORCH] == rank.vllm_consumed_bytes - rank.owners[Owner.WEIGHTS] == (
        G(171.25) - G(168.89))
    assert rank.owners[Owner.PERSISTENT] is None  # inside non_torch: vLLM does not split the two
    known = [rank.owners[o] for o in (Owner.WEIGHTS, Owner.ACTIVATION_PEAK, Owner.GRAPH_POOL, Owner.NON_TORCH,
                                      Owner.KV_CACHE)]
    assert sum(known) == rank.requested_bytes == G(254.49)
    assert ("note: non_torch is vLLM's consumed memory less the weights (rank 0: 171.25 GiB − 168.89 GiB = 2.36 GiB): "
            "persistent torch and non-torch memory together, which vLLM does not split (persistent left unknown)"
            ) in report.warnings


def test_weights_no_device_of_the_log_holds_are_another_runs_line() -> None:
    """The same test log's planted decoy: `(Worker_DP1_EP1 pid=3) … Model loading took 999.99 GiB memory` on a
    276.62 GiB GB300 (`Free memory on device (274.27/276.62 GiB)`). Before: rank 1's weights 999.99 GiB, no
    note."""
    report = _report(GB300)
    rank1 = next(r for r in report.ranks if r.rank == 1)
    assert rank1.owners[Owner.WEIGHTS] is None
    assert ("rank 1: the log states weights 999.99 GiB, more than any device in this log holds (276.62 GiB): a "
            "line from another run? weights left unknown") in report.warnings
    assert report.ranks[0].owners[Owner.WEIGHTS] == G(168.89)  # the one that fits is kept


def test_an_eager_boots_graph_estimate_is_0_on_every_rank() -> None:
    """An sm75 campaign log (vLLM 0.28.1rc1, MRv2, TP2, `enforce_eager=True`, `'cudagraph_mode':
    <CUDAGraphMode.NONE: 0>`): only Worker_TP0 prints `Available KV cache memory`; both print `Actual usage is
    1.71 GiB for consumed memory (weights + non-torch), 0.32 GiB for peak activation, and 0.0 GiB for CUDAGraph
    memory`. Before: rank 1's activation_peak and graph estimate unknown (rank 0's estimate 0 was inferred from
    its own lines)."""
    report = _report(EAGER)
    assert report.config.enforce_eager is True
    for rank in report.ranks:
        assert rank.graph_pool_estimate_bytes == 0
        assert rank.owners[Owner.ACTIVATION_PEAK] == rank.vllm_peak_activation_bytes == G(0.32)
        graphs = next(p for p in rank.phases if p.name is Phase.GRAPHS)
        assert graphs.detail == "estimate 0.00 GiB (enforce_eager / cudagraph_mode NONE: vLLM profiles no graphs)"
    rank1 = report.ranks[1]
    # weights + activation + non_torch (consumed − weights) + KV in use = the 21.11 GiB requested
    assert rank1.owners[Owner.WEIGHTS] + G(0.32) + rank1.owners[Owner.NON_TORCH] + G(19.08) == G(21.11)
    # no double count where the estimate is 0: vLLM's suggestion is its 150 MiB buffer under the flags
    assert "152.18 MiB less than the flags' bytes above" in _table(report)


def test_the_engine_lines_cudagraph_mode_none_is_read() -> None:
    """The same boot's engine line, `compilation_config={… 'cudagraph_mode': <CUDAGraphMode.NONE: 0>, …}`: no
    graphs are profiled or captured, with or without enforce_eager beside it."""
    line = next(t for t in (_DATA / EAGER).read_text(encoding="utf-8").splitlines() if "Initializing a V1" in t)
    assert knobs_from_engine_line(line.split("with config: ", 1)[1])["cudagraph_mode"] == "NONE"


def test_vllms_profile_peak_is_kept_and_shown_beside_the_consumed_figure() -> None:
    """A100 study notes (vLLM 0.31.0, MRv2, lines reordered by hand, the "Actual usage" line cut after its
    graph figure): `15.26 GiB for consumed memory (weights + non-torch), 1.44 GiB for peak activation, and 0.23
    GiB for CUDAGraph memory`. The estimate is not stated, so activation_peak stays unknown. Before: the 1.44
    GiB was in the profile phase's text alone, not in the table."""
    report = _report(A100)
    rank = report.ranks[0]
    assert rank.vllm_peak_activation_bytes == G(1.44)
    assert rank.owners[Owner.ACTIVATION_PEAK] is None and rank.graph_pool_estimate_bytes is None
    assert rank.owners[Owner.NON_TORCH] == G(15.26) - G(15.0)
    frame = owners_wide(report)
    assert dict(zip(frame.index, frame.rows))["peak (vLLM's: act+graph)"] == ("1.440",)
    assert "peak (vLLM's: act+graph) │ 1.440" in _table(report)
