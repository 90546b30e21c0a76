"""Real pastes, round twenty-two (22a and 22d): diffs of two logs of one machine. Each test names its source; the
data are the helpers' files (tests/unit/data/round_twenty_two), each with one `# source:` line on top."""
from __future__ import annotations

import json
from pathlib import Path

from kvaudit.diff import diff_reports, kv_split
from kvaudit.engines.inputs import load_report
from kvaudit.engines.logs import report_from_log_text
from kvaudit.render.frames import diff_binding
from kvaudit.render.html import waterfall_steps
from kvaudit.render.summary import diff_summary
from kvaudit.schema import BudgetTerm, Owner, SizingDelta, to_jsonable
from kvaudit.units import GiB
from kvaudit.validate import diff_from_json

_DATA = Path(__file__).parent / "data" / "round_twenty_two"
_RESULTS = Path(__file__).parents[1] / "benchmarks" / "results"
_V0_A = "03_vllm14184_v0_dev4676_qwen2vl7b_int8_config_a.log"
_V0_B = "03_vllm14184_v0_dev4927_qwen2vl7b_int8_config_b.log"
_CAPTURED = "01_v0271_mrv2_wsl_qwen05b_capture_suggestion_then_warmup_kernels_nvcc.log"
_NONE_CAPTURED = "08_v0271_mrv2_wsl_qwen05b_nbconvert_excerpt_ok_gmu092.log"


def _report(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


def _gib(figure: float) -> int:
    return round(figure * GiB)


def _wsl_pair():
    return diff_reports(_report(_CAPTURED), _report(_NONE_CAPTURED), "a.log", "b.log")


def test_one_version_change_is_listed_once() -> None:
    """vllm#14184 (Qwen2-VL-7B INT8, V0): the same config on two commits, `Initializing a V0 LLM engine
    (v0.1.dev4676+ge1b7aa6)` against `(v0.1.dev4927+geda5043)`. That one line fills engine.version and
    environment.vllm; the diff listed the change twice, as `engine.version` and as `vllm`."""
    diff = diff_reports(_report(_V0_A), _report(_V0_B), "a.log", "b.log")
    assert [(e.key, e.a, e.b) for e in diff.environment_differences] == [
        ("engine.version", "0.1.dev4676+ge1b7aa6", "0.1.dev4927+geda5043")]
    assert "environment: engine.version 0.1.dev4676+ge1b7aa6 → 0.1.dev4927+geda5043" in diff_summary(diff)


def test_a_capture_after_kv_sizing_moves_kv_by_nothing() -> None:
    """Round 22a F1: Qwen2.5-0.5B on one WSL2 RTX 4090, vLLM 0.27.1 MRv2, gmu 0.85 then 0.92. A: `Actual usage is
    1.49 GiB for consumed memory (weights + non-torch), 0.25 GiB for peak activation, and 0.37 GiB for CUDAGraph
    memory` … `18.65 GiB`; B: `1.23 GiB …, 0.31 GiB …, and 0.0 GiB …` … `20.52 GiB`. Neither charged a graph
    estimate (20.39 − 1.49 − 0.25 = 18.65). Before: dominant owner graph_pool, whose −0.37 GiB "moved KV by +0.37
    GiB", a split of +2.05 GiB for KV's +1.87."""
    diff = _wsl_pair()
    pool = next(d for d in diff.owners if d.rank is None and d.owner is Owner.GRAPH_POOL)
    assert (pool.a_bytes, pool.b_bytes) == (_gib(0.37), 0)  # the capture, as the owner ends
    assert diff.kv_sizing is not None
    sizing = {s.term: s for s in diff.kv_sizing}
    assert sizing["graph_pool"] == SizingDelta("graph_pool", 0, 0, 0, 0)  # what vLLM charged before sizing
    assert sizing["consumed"] == SizingDelta("consumed", _gib(1.49), _gib(1.23), _gib(1.23) - _gib(1.49),
                                             _gib(1.49) - _gib(1.23))
    assert sizing["weights"].part_of == "consumed" and sizing["weights"].delta_bytes == 0  # 0.93 GiB both sides
    # non_torch, each side's consumed figure less its weights (0.93 GiB both), moved KV most of the owners
    assert diff.dominant_owner is Owner.NON_TORCH
    # the split adds up: budget +1.68, consumed +0.26, activation −0.06, graph 0, and −0.01 GiB of the figures'
    # rounding make KV's +1.87
    split = kv_split(diff)
    assert split is not None and split.unknown == ()
    assert [(s.term, s.kv_delta_bytes) for s in split.terms] == [
        ("requested", 23_697_482_056 - 21_893_595_791), ("consumed", _gib(1.49) - _gib(1.23)),
        ("activation_peak", _gib(0.25) - _gib(0.31)), ("graph_pool", 0)]
    assert split.kv_delta_bytes == _gib(20.52) - _gib(18.65)
    assert split.rest_bytes == -10_737_420  # −0.01 GiB
    assert sum(s.kv_delta_bytes or 0 for s in split.terms) + split.rest_bytes == split.kv_delta_bytes
    (line,) = [line for line in diff_summary(diff) if line.startswith("dominant owner")]
    assert line == (
        "dominant owner: non_torch; KV's +1.87 GiB is mostly the budget's: device × gpu_memory_utilization "
        "moved +1.68 GiB, vLLM's consumed figure (weights + persistent + non_torch) -0.26 GiB (weights unchanged) "
        "moved KV by +0.26 GiB, and activation_peak's +0.06 GiB by -0.06 GiB; the rest, -0.01 GiB, is KV sizing's own "
        "(KV structures, whole blocks and segments) or, in a log, its figures' rounding to 0.01 GiB; graph_pool's "
        "-0.37 GiB moved KV by nothing: vLLM charged no graph estimate before sizing on either side, and the capture "
        "comes after KV is sized")


def test_the_consumed_figure_and_the_budget_have_rows_beside_the_owners() -> None:
    """The same pair: each report keeps vLLM's consumed figure (`vllm_consumed_bytes`); the diff's table had no row
    for it, nor for the budget that moved most of KV. The graph pool's charge, 0 → 0, is shown beside its capture."""
    table = diff_binding(_wsl_pair())
    rows = {label: list(cells) for label, cells in table.iterrows()}
    assert rows["graph_pool"] == ["0.370", "0.000", "-0.370"]
    assert rows["requested"] == ["20.390", "22.070", "+1.680"]
    assert rows["consumed (vLLM's: w+p+n)"] == ["1.490", "1.230", "-0.260"]
    assert rows["graph_pool charged (estimate)"] == ["0.000", "0.000", "+0.000"]


def test_the_waterfall_has_no_bar_for_a_capture_after_sizing() -> None:
    """The same pair on the HTML page: before, a green graph_pool bar of +0.37 GiB and a 'rest' of +1.56 GiB that
    held the budget; now the budget, the consumed figure and the activation peak, and −0.01 GiB of rounding."""
    steps, notes = waterfall_steps(_wsl_pair())
    assert [(s.key, s.delta_bytes) for s in steps] == [
        ("consumed", _gib(1.49) - _gib(1.23)), ("activation_peak", _gib(0.25) - _gib(0.31)),
        ("budget", 23_697_482_056 - 21_893_595_791), ("rest", -10_737_420)]
    assert notes == []


def test_the_split_is_in_the_diffs_json_and_read_back() -> None:
    """`kv_sizing` is an extension of kvaudit.diff/1: written, read back the same; every older key is kept."""
    diff = _wsl_pair()
    data = json.loads(json.dumps(to_jsonable(diff)))
    assert data["dominant_owner"] == "non_torch"
    assert data["capacity"]["consumed_delta_bytes"] == _gib(1.23) - _gib(1.49)
    assert {"term": "graph_pool", "a_bytes": 0, "b_bytes": 0, "delta_bytes": 0, "kv_delta_bytes": 0,
            "part_of": None} in data["kv_sizing"]
    read_back = diff_from_json(data)
    assert read_back.kv_sizing == diff.kv_sizing and read_back.dominant_owner is Owner.NON_TORCH
    assert diff_summary(read_back) == diff_summary(diff)


def test_a_runs_owners_move_kv_by_what_its_kv_budget_charged() -> None:
    """The same rule on two runs (H100, vLLM 0.34.0, the 2-layer DeepSeek-V3 MTP model, with and without expandable
    segments): each `kv_budget` holds what sizing charged an owner. torch_other ends 27.7 MB lower but was charged
    18.5 MB lower; the graph pool is charged its estimate (0.65 → 0.63 GiB), not the capture after KV."""
    a = load_report(_RESULTS / "h100-load-deepseek-v3-2layer-mtp-vllm0.34.0-expandable.json")
    b = load_report(_RESULTS / "h100-load-deepseek-v3-2layer-mtp-vllm0.34.0-capped.json")
    diff = diff_reports(a, b)
    assert diff.kv_sizing is not None
    sizing = {s.term: s for s in diff.kv_sizing}
    for owner in (Owner.TORCH_OTHER, Owner.GRAPH_POOL):
        charged = [-next(t.bytes for t in r.binding().kv_budget if t.term is BudgetTerm(owner.value)) for r in (a, b)]
        assert (sizing[owner.value].a_bytes, sizing[owner.value].b_bytes) == tuple(charged)
    assert sizing["torch_other"].kv_delta_bytes == 2_119_591_424 - 2_138_072_576
    assert (sizing["graph_pool"].a_bytes, sizing["graph_pool"].b_bytes) == (700_448_768, 675_282_944)
    assert [(r.binding().owners[Owner.GRAPH_POOL]) for r in (a, b)] == [704_643_072, 679_477_248]  # the captures
