"""configs/examples: the reports and logs a user is told to try `kvaudit show` and `kvaudit diff`
on. They are real H200 vLLM 0.26.0 output (see configs/examples/README.md); these tests keep them
loadable, renderable in every format, and their diff meaningful.

That `show` and `diff` import neither torch nor vllm is test_offline_imports.py's job (it runs both
commands, on reports and on a raw log); it is not repeated here.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from kvaudit.report import load_report
from kvaudit.schema import Owner, Source, Verdict, dumps

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
RESULTS = REPO / "tests" / "benchmarks" / "results"

FILES = sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".json", ".log"))
REPORTS = [f for f in FILES if f.endswith(".json")]
PAIRS = [("h200-eager.json", "h200-graphs.json"), ("h200-eager.vllm.log", "h200-graphs.vllm.log")]
FORMATS = ("table", "json", "csv", "markdown")
OWNERS = [o.value for o in Owner]
DIFF_KEYS = {"schema", "comparable", "knob_differences", "environment_differences", "owners", "dominant_owner",
             "capacity", "verdict"}

# Where each example came from: a run name in h200-vllm-run.json, or a log in the results folder.
SOURCES = {
    # the pair comes from one commit (7bc06e4), kept under "before" in the results
    "h200-eager.json": ("h200-vllm-run.json", "eager"),
    "h200-graphs.json": ("h200-vllm-run.json", "graphs_before_reserve"),
    "h200-eager.vllm.log": ("h200-vllm-eager-7bc06e4.log", None),
    "h200-graphs.vllm.log": ("h200-vllm-graphs-before-reserve.log", None),
}


def example(name: str) -> Path:
    return EXAMPLES / name


def contained(small: Any, big: Any, where: str = "") -> None:
    """Every key and value of `small` is in `big` (lists element by element): the renderer may add
    keys, never drop or change one."""
    if isinstance(small, dict):
        assert isinstance(big, dict), where
        for key, value in small.items():
            assert key in big, f"{where}.{key} dropped"
            contained(value, big[key], f"{where}.{key}")
    elif isinstance(small, list):
        assert isinstance(big, list) and len(big) == len(small), where
        for i, (s, b) in enumerate(zip(small, big)):
            contained(s, b, f"{where}[{i}]")
    else:
        assert small == big, f"{where}: {small!r} became {big!r}"


# ------------------------------------------------------------------------------------------
# The files themselves


def test_the_examples_are_the_documented_ones():
    # every example has a recorded origin and the README names it (no stray or undocumented file)
    assert set(FILES) == set(SOURCES)
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for name in FILES:
        assert f"`{name}`" in readme, f"README.md does not describe {name}"
    for a, b in PAIRS:
        assert f"kvaudit diff configs/examples/{a} configs/examples/{b}" in readme


@pytest.mark.parametrize("name", FILES)
def test_examples_are_the_recorded_h200_runs_unchanged(name):
    # real output, not edited: byte-identical to the evidence they were taken from
    source, key = SOURCES[name]
    if key is None:
        assert example(name).read_bytes() == (RESULTS / source).read_bytes()
    else:
        recorded = json.loads((RESULTS / source).read_text(encoding="utf-8"))["before"][key]["report"]
        assert json.loads(example(name).read_text(encoding="utf-8")) == recorded


@pytest.mark.parametrize("name", FILES)
def test_every_example_loads_as_a_one_rank_h200_report(name):
    report = load_report(example(name))
    assert report.schema == "kvaudit.report/1"
    assert report.source is (Source.RUN if name.endswith(".json") else Source.LOG)
    assert report.engine.version == "0.26.0" and report.engine.model_runner == "V1"
    assert report.config.gpu_memory_utilization == 0.9 and report.config.max_model_len == 4096
    assert report.config.enforce_eager is (True if "eager" in name else (None if name.endswith(".json") else False))
    assert [r.rank for r in report.ranks] == [0]
    rank = report.ranks[0]
    assert set(rank.owners) == set(Owner)
    # the figures are there: weights loaded, KV allocated, a binding rank with its capacity
    assert rank.owners[Owner.WEIGHTS] > 0 and rank.owners[Owner.KV_CACHE] > 100 * (1 << 30)
    assert (rank.owners[Owner.GRAPH_POOL] == 0) == ("eager" in name)
    assert report.capacity.binding_rank == 0 and report.capacity.kv_available_bytes > 0
    assert report.capacity.kv_tokens > 0 and report.capacity.max_model_len_fits is True
    assert report.failure is None


@pytest.mark.parametrize("name", REPORTS)
def test_a_run_report_balances_exactly(name):
    # DESIGN.md: all owners known → they add up to the requested bytes, to the byte
    rank = load_report(example(name)).ranks[0]
    assert None not in rank.owners.values()
    assert sum(rank.owners.values()) == rank.requested_bytes
    # that kvaudit commit flags the post-KV over-commit: negative kv_unallocated, verdict fail
    assert rank.owners[Owner.KV_UNALLOCATED] < 0
    assert load_report(example(name)).verdict is Verdict.FAIL


# ------------------------------------------------------------------------------------------
# show, every format


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", FILES)
def test_show_renders_every_example_in_every_format(cli, name, fmt):
    report = load_report(example(name))
    result = cli("show", str(example(name)), "-f", fmt, "--width", "120")
    # show renders; the audit's exit code belongs to `kvaudit run` (test_render pins it), so a
    # FAIL verdict still exits 0, and nothing is said on stderr
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    rank = report.ranks[0]
    if fmt == "json":
        shown = json.loads(out)
        assert shown["schema"] == "kvaudit.report/1"
        assert shown == json.loads(dumps(report))
        if name.endswith(".json"):
            contained(json.loads(example(name).read_text(encoding="utf-8")), shown)
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert [(r["rank"], r["owner"]) for r in rows] == [("0", o) for o in OWNERS]
        for row in rows:
            expected = rank.owners[Owner(row["owner"])]
            assert row["bytes"] == ("" if expected is None else str(expected))
    elif fmt == "markdown":
        assert "| owner (GiB) | rank 0 |" in out
        for owner in OWNERS:
            assert f"| {owner} |" in out
        assert "vllm 0.26.0" in out
    else:
        assert "rank 0" in out and "vllm 0.26.0" in out
        for owner in OWNERS:
            assert owner in out
    if fmt != "json" and fmt != "csv":
        # the verdict is shown, whatever it is
        assert ("FAIL" in out) == (report.verdict is Verdict.FAIL)
        assert "KV available" in out


# ------------------------------------------------------------------------------------------
# diff of each pair: eager → CUDA graphs on the same machine and kvaudit commit


@pytest.fixture(params=PAIRS, ids=["reports", "logs"])
def pair(request) -> tuple[Path, Path]:
    a, b = request.param
    return example(a), example(b)


def diff_json(cli, a: Path, b: Path) -> dict:
    result = cli("diff", str(a), str(b), "-f", "json")
    assert result.code == 0, result.stderr   # no gate asked for: a difference is not a finding
    return json.loads(result.stdout)


def test_diff_of_the_pair_has_the_design_keys(cli, pair):
    a, b = pair
    diff = diff_json(cli, a, b)
    assert DIFF_KEYS <= set(diff)
    assert diff["schema"] == "kvaudit.diff/1"
    assert set(diff["capacity"]) >= {"a", "b", "kv_available_delta_bytes"}
    assert set(diff["verdict"]) == {"a", "b"}
    for row in diff["owners"]:
        assert set(row) >= {"owner", "rank", "a_bytes", "b_bytes", "delta_bytes"}
    for row in diff["knob_differences"]:
        assert set(row) >= {"knob", "a", "b"}
    for row in diff["environment_differences"]:
        assert set(row) >= {"key", "a", "b"}


def test_diff_of_the_pair_has_binding_and_per_rank_rows_with_the_reports_figures(cli, pair):
    a, b = pair
    ra, rb = load_report(a), load_report(b)
    diff = diff_json(cli, a, b)
    by_rank: dict[Any, dict[str, dict]] = {}
    for row in diff["owners"]:
        assert row["owner"] not in by_rank.setdefault(row["rank"], {}), f"duplicate row {row}"
        by_rank[row["rank"]][row["owner"]] = row
    # one block for the binding rank (rank null) and one per rank, each with every owner
    assert set(by_rank) == {None, 0}
    for rows in by_rank.values():
        assert list(rows) == OWNERS
    for owner in Owner:
        row = by_rank[0][owner.value]
        assert (row["a_bytes"], row["b_bytes"]) == (ra.ranks[0].owners[owner], rb.ranks[0].owners[owner])
        if row["a_bytes"] is None or row["b_bytes"] is None:
            assert row["delta_bytes"] is None       # unknown stays unknown, never 0
        else:
            assert row["delta_bytes"] == row["b_bytes"] - row["a_bytes"]
        assert by_rank[None][owner.value] == {**row, "rank": None}   # one rank: it is the binding rank
    # turning graphs on grows the graph pool from nothing and takes it out of the KV cache
    assert by_rank[0]["graph_pool"]["a_bytes"] == 0 and by_rank[0]["graph_pool"]["delta_bytes"] > 0
    assert by_rank[0]["kv_cache"]["delta_bytes"] < 0


def test_diff_of_the_pair_names_graph_pool_the_dominant_owner(cli, pair):
    a, b = pair
    diff = diff_json(cli, a, b)
    assert diff["dominant_owner"] in OWNERS
    assert diff["dominant_owner"] not in ("kv_cache", "kv_unallocated")
    assert diff["dominant_owner"] == "graph_pool"
    # it is the binding-rank row that moved most among the known non-KV owners
    moved = {r["owner"]: abs(r["delta_bytes"]) for r in diff["owners"]
             if r["rank"] is None and r["delta_bytes"] is not None and r["owner"] not in ("kv_cache", "kv_unallocated")}
    assert diff["dominant_owner"] == max(moved, key=moved.get)


def test_diff_of_the_pair_reports_the_knob_not_the_environment(cli, pair):
    a, b = pair
    diff = diff_json(cli, a, b)
    knobs = {k["knob"]: (k["a"], k["b"]) for k in diff["knob_differences"]}
    assert knobs["enforce_eager"][0] is True and knobs["enforce_eager"][1] is not True
    assert diff["comparable"] is False
    # same machine, same vLLM, same environment
    assert diff["environment_differences"] == []


def test_diff_of_the_pair_capacity_and_verdicts(cli, pair):
    a, b = pair
    ra, rb = load_report(a), load_report(b)
    diff = diff_json(cli, a, b)
    cap = diff["capacity"]
    assert cap["a"]["kv_available_bytes"] == ra.capacity.kv_available_bytes
    assert cap["b"]["kv_available_bytes"] == rb.capacity.kv_available_bytes
    assert cap["kv_available_delta_bytes"] == rb.capacity.kv_available_bytes - ra.capacity.kv_available_bytes < 0
    assert diff["verdict"] == {"a": ra.verdict.value, "b": rb.verdict.value}


def test_diff_reversed_negates_the_deltas(cli, pair):
    a, b = pair
    forward, backward = diff_json(cli, a, b), diff_json(cli, b, a)
    assert backward["dominant_owner"] == forward["dominant_owner"]
    assert backward["capacity"]["kv_available_delta_bytes"] == -forward["capacity"]["kv_available_delta_bytes"]
    fw = {(r["rank"], r["owner"]): r["delta_bytes"] for r in forward["owners"]}
    bw = {(r["rank"], r["owner"]): r["delta_bytes"] for r in backward["owners"]}
    assert fw.keys() == bw.keys()
    assert all(bw[k] == (None if fw[k] is None else -fw[k]) for k in fw)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "json"])
def test_diff_of_the_pair_renders_in_every_format(cli, pair, fmt):
    a, b = pair
    result = cli("diff", str(a), str(b), "-f", fmt, "--width", "120")
    assert result.code == 0, result.stderr
    assert "graph_pool" in result.stdout and "kv_cache" in result.stdout
    # the knob difference is said once, on stderr, as a warning (not an error)
    assert [line for line in result.stderr_lines if line] == [
        line for line in result.stderr_lines if line.startswith("kvaudit: warning:") and "enforce_eager" in line]
    assert len([line for line in result.stderr_lines if line]) == 1


def test_the_kv_drop_gate_trips_on_the_pair(cli, pair):
    # graphs cost 0.08–0.16 GiB of KV: a 64 MiB gate is a finding (1), a 1 GiB gate passes (0)
    a, b = pair
    tripped = cli("diff", str(a), str(b), "-f", "json", "--fail-on-kv-drop", "64MiB")
    assert tripped.code == 1
    assert "graph_pool" in tripped.stderr
    assert json.loads(tripped.stdout)["schema"] == "kvaudit.diff/1"   # the diff is still written
    assert cli("diff", str(a), str(b), "--fail-on-kv-drop", "1GiB").code == 0
