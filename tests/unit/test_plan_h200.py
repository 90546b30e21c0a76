"""`kvaudit plan` against real H200 boots (vLLM 0.26.0, Llama-3.2-1B published dimensions,
dummy weights; the reports committed under tests/benchmarks/results by tests/gpu/proof.py).

Each planned figure is compared with the report of the boot that was really made with the
edited flags, so these tests fail if the plan drifts from what the GPU did."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvaudit.engines.inputs import load_report
from kvaudit.errors import BadInputError
from kvaudit.ledger import kv_blocks_within
from kvaudit.plan import Edits, Knob, plan_report, solve
from kvaudit.report import parse_report_text
from kvaudit.schema import Owner, Verdict

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
MiB = 1 << 20
PAGE = 16 * 8 * 64 * 2 * 2  # Llama-3.2-1B, one layer's KV tensor per 16-token block: K and V, 8 heads × 64, bf16


def booted_kv(name: str) -> int:
    return json.loads((RESULTS / name).read_text())["ranks"][0]["owners"]["kv_cache"]


@pytest.fixture(scope="module")
def solve_base():
    return load_report(RESULTS / "h200-plan-solve-base.json")


def test_the_run_records_each_kv_tensors_block_bytes(solve_base):
    rank = solve_base.ranks[0]
    assert rank.kv_tensor_block_bytes == (PAGE,) * 16   # 16 layers, one tensor each
    assert sum(rank.kv_tensor_block_bytes) == solve_base.capacity.kv_bytes_per_block
    unrounded = rank.kv_available_bytes + rank.kv_segment_rounding_bytes
    assert rank.kv_available_bytes == kv_blocks_within(unrounded, rank.kv_tensor_block_bytes) * 16 * PAGE


def test_solved_length_is_what_the_h200_booted(solve_base):
    plan = solve(solve_base, Edits(gpu_memory_utilization=0.045), Knob.MAX_MODEL_LEN)
    assert plan.solution.value == 87_024
    # the boot at that length: the same KV to the byte, verdict ok, --verify passed
    answer = json.loads((RESULTS / "h200-plan-solve-answer.json").read_text())
    assert answer["config"]["max_model_len"] == 87_024
    assert plan.report.ranks[0].owners[Owner.KV_CACHE] == answer["ranks"][0]["owners"]["kv_cache"]
    assert answer["verdict"] == "ok" and answer["verify"]["ok"] is True
    # and 5 % more does not fit, in the plan and on the GPU
    above = json.loads((RESULTS / "h200-plan-solve-plus5.json").read_text())
    longer = plan_report(solve_base, Edits(gpu_memory_utilization=0.045, max_model_len=91_375))
    assert longer.report.verdict is Verdict.FAIL
    assert above["config"]["max_model_len"] == 91_375 and above["failure"]["kind"] == "does_not_fit"


def test_without_the_tensors_the_plan_misses_the_segment_rounding(solve_base):
    """The bytes-only plan answered 87,184, which vLLM refused on the H200 (87,040 at most):
    tests/benchmarks/results/before-fix/h200-plan-solve-answer-87184.json."""
    rank = dataclasses.replace(solve_base.ranks[0], kv_tensor_block_bytes=None, kv_segment_rounding_bytes=None)
    bytes_only = dataclasses.replace(solve_base, ranks=(rank,))
    plan = solve(bytes_only, Edits(gpu_memory_utilization=0.045), Knob.MAX_MODEL_LEN)
    assert plan.solution.value > 87_040
    refused = json.loads((RESULTS / "before-fix" / "h200-plan-solve-answer-87184.json").read_text())
    assert refused["failure"]["kind"] == "does_not_fit" and "87040" in refused["failure"]["message"]
    assert any("2 MiB per KV tensor" in note for note in plan.notes)


@pytest.mark.parametrize("edit, booted", [
    (Edits(gpu_memory_utilization=0.9), "h200-plan-gmu-0.90.json"),
    (Edits(max_model_len=16384), "h200-plan-max_model_len-16384.json"),
    (Edits(max_num_batched_tokens=4096), "h200-plan-max_num_batched_tokens-4096.json"),
    (Edits(cudagraph_capture_sizes=(1, 2, 4, 8, 16)), "h200-plan-cudagraph-sizes-le-16.json"),
])
def test_each_booted_edit_lies_within_the_stated_error(edit, booted):
    base = load_report(RESULTS / "h200-plan-base.json")
    plan = plan_report(base, edit)
    error = plan.report.ranks[0].owners[Owner.KV_CACHE] - booted_kv(booted)
    assert abs(error) <= plan.kv_error_bytes
    assert plan.report.verdict.value == json.loads((RESULTS / booted).read_text())["verdict"]


def test_torch_other_is_stated_as_error_on_cuda_only(solve_base):
    plan = plan_report(solve_base, Edits(gpu_memory_utilization=0.5))
    torch_other = solve_base.ranks[0].owners[Owner.TORCH_OTHER]
    figure = next(f for f in plan.ranks[0].figures if f.owner is Owner.TORCH_OTHER)
    assert figure.error_bytes == torch_other and plan.kv_error_bytes >= torch_other
    cpu = load_report(Path(__file__).parent / "data" / "run1.json")
    cpu_plan = plan_report(cpu, Edits(gpu_memory_utilization=0.2))
    assert next(f for f in cpu_plan.ranks[0].figures if f.owner is Owner.TORCH_OTHER).error_bytes == 0


@pytest.mark.parametrize("value", ["[]", "[0, 32768]", "[-1]", "[1.5]", '"32768"'])
def test_a_bad_tensor_list_is_refused_by_name(value):
    text = (RESULTS / "h200-plan-solve-base.json").read_text()
    bad = text.replace('"kv_tensor_block_bytes": [', f'"kv_tensor_block_bytes": {value}, "x": [', 1)
    with pytest.raises(BadInputError, match="kv_tensor_block_bytes"):
        parse_report_text(bad, "bad.json")


def test_an_fp8_edit_halves_each_tensors_block_and_refits(solve_base):
    plan = plan_report(solve_base, Edits(kv_cache_dtype="fp8"))
    rank = plan.report.ranks[0]
    assert rank.kv_tensor_block_bytes == (PAGE // 2,) * 16
    unrounded = rank.kv_available_bytes + rank.kv_segment_rounding_bytes
    assert rank.kv_available_bytes == kv_blocks_within(unrounded, (PAGE // 2,) * 16) * 8 * PAGE
    assert 0 <= rank.kv_segment_rounding_bytes < 16 * 2 * MiB
    # the sizing charge is the base's, so the unrounded budget is the base's too
    base = solve_base.ranks[0]
    assert unrounded == base.kv_available_bytes + base.kv_segment_rounding_bytes
