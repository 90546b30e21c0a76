"""`-f prom` (kvaudit/render/prom.py): Prometheus text that prometheus-client's own parser reads
back to the report's figures, with hostile label values escaped, written atomically with -o."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from factories import DATA, REAL_REPORTS, real_json, write_json

from kvaudit.diff import diff_reports
from kvaudit.engines.inputs import load_report
from kvaudit.plan import Edits, plan_report
from kvaudit.printable import printable
from kvaudit.render.prom import samples
from kvaudit.schema import Owner, Verdict

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
RESULTS = REPO / "tests" / "benchmarks" / "results"
REPORTS = [DATA / f"{n}.json" for n in REAL_REPORTS] + [RESULTS / "h200-real-llama-3.1-8b-vllm0.33.0.json",
                                                        EXAMPLES / "h200-graphs.vllm.log"]
LINE = re.compile(r'^(# (HELP|TYPE) kvaudit_[a-z_]+ .*|kvaudit_[a-z_]+(\{.*\})? [-+0-9.e]+(inf)?)$')
"""A line of the output: a HELP or TYPE comment, or one sample: name, labels, value, no timestamp."""


def prom_of(cli, *args: str) -> str:
    result = cli(*args, "-f", "prom")
    assert result.code in (0, 1), result.stderr
    return result.stdout


def by_name(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in samples(text):
        out.setdefault(name, []).append((labels, value))
    return out


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.name)
def test_the_parser_reads_back_every_figure_of_the_report(cli, path):
    # GIVEN a report (or a log)  WHEN it is shown as prom and read back by prometheus-client
    report = load_report(path)
    text = prom_of(cli, "show", str(path))
    got = by_name(text)
    vllm = report.environment.vllm or report.engine.version or ""
    model = report.config.model.rstrip("/").rsplit("/", 1)[-1] if report.config.model else ""
    # THEN every sample carries the model and vLLM's version …
    assert all(labels["vllm_version"] == vllm and labels["model"] == model
               for series in got.values() for labels, _ in series)
    assert vllm  # the labels say something
    # … every known owner of every rank is there to the byte, and unknown ones are absent
    owners = {(labels["rank"], labels["owner"]): value for labels, value in got.get("kvaudit_owner_bytes", [])}
    expected = {(str(r.rank), o.value): float(r.owners[o]) for r in report.ranks for o in Owner
                if r.owners.get(o) is not None}
    assert owners == expected
    # … KV bytes and tokens, the verdict as a state set with exactly one state set
    assert [v for _, v in got.get("kvaudit_kv_available_bytes", [])] == \
        ([float(report.capacity.kv_available_bytes)] if report.capacity.kv_available_bytes is not None else [])
    assert [v for _, v in got["kvaudit_kv_tokens"]] == [float(report.capacity.kv_tokens)]
    verdicts = {labels["verdict"]: value for labels, value in got["kvaudit_verdict"]}
    assert verdicts == {v.value: float(v is report.verdict) for v in Verdict}
    # … and the text is nothing but HELP, TYPE and sample lines, all gauges, no timestamp
    assert all(LINE.match(line) for line in text.splitlines()), [bad for bad in text.splitlines() if not LINE.match(bad)]
    assert {line.split()[-1] for line in text.splitlines() if line.startswith("# TYPE")} == {"gauge"}


def test_requested_device_and_per_rank_kv_read_back(cli):
    report = load_report(DATA / "run2.json")
    got = by_name(prom_of(cli, "show", str(DATA / "run2.json")))
    for name, attr in (("kvaudit_requested_bytes", "requested_bytes"), ("kvaudit_device_total_bytes",
                                                                        "device_total_bytes"),
                       ("kvaudit_rank_kv_available_bytes", "kv_available_bytes")):
        assert {labels["rank"]: v for labels, v in got[name]} == \
            {str(r.rank): float(getattr(r, attr)) for r in report.ranks}
    assert got["kvaudit_binding_rank"][0][1] == float(report.capacity.binding_rank)
    assert got["kvaudit_verify_ok"][0][1] == 0.0  # run2's verify failed
    assert got["kvaudit_safe_kv_cache_memory_bytes"][0][1] == 2551136256.0
    info = got["kvaudit_info"][0][0]
    assert info["source"] == "run" and info["device"] == "CPU (NUMA node 0)" and info["tensor_parallel_size"] == "2"


HOSTILE_MODEL = 'tiny"} kvaudit_verdict{verdict="ok"} 1\n# TYPE x gauge\\ \x1b[2J,a="b"'


def test_hostile_label_values_are_escaped_and_read_back_verbatim(cli, tmp_path):
    # GIVEN a report whose model and device name try to close the label set and forge lines
    doc = real_json("run1")
    doc["config"]["model"] = "/models/" + HOSTILE_MODEL
    doc["environment"]["device_name"] = HOSTILE_MODEL
    text = prom_of(cli, "show", str(write_json(tmp_path / "hostile.json", doc)))
    # THEN no line is forged: every line is kvaudit's own, one verdict series holds
    assert all(LINE.match(line) for line in text.splitlines())
    got = by_name(text)
    assert sum(v for _, v in got["kvaudit_verdict"]) == 1.0
    # and the parser gives the strings back, control characters shown as escapes
    shown = printable(HOSTILE_MODEL)
    assert "\\x1b[2J" in shown
    assert {labels["model"] for series in got.values() for labels, _ in series} == {shown}
    assert got["kvaudit_info"][0][0]["device"] == shown


def test_a_lone_surrogate_becomes_its_escape(cli, tmp_path):
    # the report loader accepts "\ud800"; no UTF-8 text can hold it
    doc = real_json("run1")
    doc["config"]["model"] = "/models/m__LONE__"
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(doc).replace("__LONE__", "\\ud800"))
    text = prom_of(cli, "show", str(path))
    assert {labels["model"] for _, labels, _ in samples(text)} == {"m\\ud800"}


def test_a_diff_reads_back_its_deltas(cli):
    a, b = EXAMPLES / "cpu-batch512.json", EXAMPLES / "cpu-batch2048.json"
    diff = diff_reports(load_report(a), load_report(b), "cpu-batch512.json", "cpu-batch2048.json")
    got = by_name(prom_of(cli, "diff", str(a), str(b)))
    deltas = {(labels["rank"], labels["owner"]): v for labels, v in got["kvaudit_diff_owner_delta_bytes"]}
    assert deltas == {("binding" if d.rank is None else str(d.rank), d.owner.value): float(d.delta_bytes)
                      for d in diff.owners if d.delta_bytes is not None}
    assert got["kvaudit_diff_kv_available_delta_bytes"][0][1] == float(diff.capacity["kv_available_delta_bytes"])
    assert got["kvaudit_diff_comparable"][0][1] == 0.0
    assert {(labels["side"], labels["verdict"]) for labels, v in got["kvaudit_diff_verdict"] if v == 1.0} == \
        {("a", "ok"), ("b", "ok")}
    assert {labels["a"] for series in got.values() for labels, _ in series} == {"cpu-batch512.json"}


def test_a_plan_is_the_predicted_reports_metrics(cli):
    plan = plan_report(load_report(DATA / "run1.json"), Edits(gpu_memory_utilization=0.2))
    got = by_name(prom_of(cli, "plan", str(DATA / "run1.json"), "--gmu", "0.2"))
    assert got["kvaudit_info"][0][0]["source"] == "plan"
    assert got["kvaudit_kv_available_bytes"][0][1] == float(plan.report.capacity.kv_available_bytes)
    assert got["kvaudit_gpu_memory_utilization"][0][1] == 0.2


def test_o_replaces_the_file_atomically(cli, tmp_path):
    # GIVEN a textfile-collector file that a reader has open
    target = tmp_path / "kvaudit.prom"
    target.write_text("# the previous scrape's file\n" * 1000)
    before = os.stat(target).st_ino
    with open(target) as reader:
        # WHEN kvaudit writes the new metrics there
        result = cli("show", str(DATA / "run2.json"), "-f", "prom", "-o", str(target))
        # THEN the reader still reads the whole old file (no truncation under it) …
        assert reader.read() == "# the previous scrape's file\n" * 1000
    assert result.code == 0 and result.stdout == ""
    assert result.stderr_lines == [f"kvaudit: prom output written to {target}"]
    # … the name now holds the whole new file (a rename: a new inode), and no temporary is left
    assert os.stat(target).st_ino != before
    assert list(samples(target.read_text()))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kvaudit.prom"]
