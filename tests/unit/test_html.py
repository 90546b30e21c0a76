"""`-f html` (kvaudit/render/html.py): one self-contained page per verb, every report string
rendered as data, the bars and the waterfall built from the right numbers. How the page looks and
that it loads cleanly is checked in a real browser by tests/browser/test_html_browser.py."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from factories import DATA, real_json, write_json

from kvaudit.diff import diff_reports
from kvaudit.engines.inputs import load_report
from kvaudit.plan import Edits, plan_report
from kvaudit.render.charts import drawable
from kvaudit.render.html import waterfall_steps
from kvaudit.schema import Owner
from kvaudit.units import fmt_gib3

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
RESULTS = REPO / "tests" / "benchmarks" / "results"

HTML_TAGS = {"html", "head", "meta", "title", "style", "body", "main", "footer", "h1", "h2", "div", "p", "span",
             "code", "table", "thead", "tbody", "tr", "th", "td", "figure", "figcaption"}
SVG_TAGS = {"svg", "metadata", "defs", "g", "path", "text", "use", "clippath", "rect", "style", "tspan", "line",
            "polyline", "polygon", "circle", "ellipse", "rdf:rdf", "cc:work", "dc:type", "dc:format", "dc:creator",
            "cc:agent", "dc:title", "dc:date"}
HOSTILE = "</title><script>alert(1)</script><img src=x onerror=alert(2)>\"'&amp;"


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of the title, as a browser parses them."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self._in_title = False
        self.title = ""
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_title = tag == "title"

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self._in_title = False

    def handle_data(self, data):
        self.texts.append(data)
        if self._in_title:
            self.title += data


def assert_self_contained(page: str) -> Tags:
    """Only known tags; no script, no event handler, no reference outside the page."""
    assert page.startswith("<!DOCTYPE html>\n")
    parsed = Tags(page)
    names = {t for t, _ in parsed.tags}
    assert names <= HTML_TAGS | SVG_TAGS, names - HTML_TAGS - SVG_TAGS
    assert "script" not in names and "link" not in names and "img" not in names
    for tag, attrs in parsed.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            assert name not in ("src", "srcset", "action", "formaction", "background"), (tag, name)
            if name.endswith("href"):
                assert value is not None and value.startswith("#"), (tag, name, value)  # markers of the SVG itself
            assert "url(" not in (value or "").replace("url(#", ""), (tag, name, value)
    csp = [a for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and csp[0]["content"].startswith("default-src 'none'")
    return parsed


def html_of(cli, *args: str) -> str:
    result = cli(*args, "-f", "html")
    assert result.code in (0, 1), result.stderr
    return result.stdout


VERBS = {
    "show-report": ("show", str(DATA / "run2.json")),
    "show-log": ("show", str(EXAMPLES / "h200-graphs.vllm.log")),
    "show-cpu-log": ("show", str(EXAMPLES / "cpu-batch512.vllm.log")),
    "diff": ("diff", str(EXAMPLES / "cpu-batch512.json"), str(EXAMPLES / "cpu-batch2048.json")),
    "diff-logs": ("diff", str(EXAMPLES / "h200-eager.vllm.log"), str(EXAMPLES / "h200-graphs.vllm.log")),
    "plan": ("plan", str(DATA / "run1.json"), "--gmu", "0.2", "--max-num-batched-tokens", "256"),
    "plan-solve": ("plan", str(EXAMPLES / "h200-graphs.vllm.log"), "--solve", "max-model-len"),
}


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_writes_one_self_contained_page_to_o(cli, tmp_path, verb):
    # GIVEN a verb and -f html -o FILE  WHEN it runs
    page = tmp_path / "page.html"
    result = cli(*VERBS[verb], "-f", "html", "-o", str(page))
    # THEN the page is in the file, nothing on stdout, one line on stderr saying where
    assert result.code in (0, 1), result.stderr
    assert result.stdout == ""
    assert result.stderr_lines[-1] == f"kvaudit: html output written to {page}"
    assert_self_contained(page.read_text(encoding="utf-8"))


def test_without_o_the_page_is_stdout(cli):
    result = cli("show", str(DATA / "run1.json"), "-f", "html")
    assert result.code == 0 and result.stderr == ""
    parsed = assert_self_contained(result.stdout)
    assert parsed.title.startswith("kvaudit run · vllm 0.32.0")


def test_show_o_keeps_the_report_json_for_the_other_formats(cli, tmp_path):
    # a log shown as a table with -o: the report JSON in the file (as ingest -o), the table on stdout
    out = tmp_path / "r.json"
    result = cli("show", str(EXAMPLES / "h200-graphs.vllm.log"), "-o", str(out), "--width", "100")
    assert result.code == 0 and "owner (GiB)" in result.stdout
    assert json.loads(out.read_text())["schema"] == "kvaudit.report/1"
    assert result.stderr_lines == [f"kvaudit: report written to {out}"]


def test_diff_and_plan_o_keep_their_json_for_the_other_formats(cli, tmp_path):
    diff, plan = tmp_path / "d.json", tmp_path / "p.json"
    a, b = str(EXAMPLES / "cpu-batch512.json"), str(EXAMPLES / "cpu-batch2048.json")
    assert cli("diff", a, b, "-o", str(diff)).code == 0
    assert json.loads(diff.read_text())["schema"] == "kvaudit.diff/1"
    assert cli("plan", str(DATA / "run1.json"), "--gmu", "0.2", "-o", str(plan), "-f", "csv").code == 0
    assert json.loads(plan.read_text())["plan"]["schema"] == "kvaudit.plan/1"


def hostile_report(tmp_path: Path) -> Path:
    doc = real_json("run2")
    doc["config"]["model"] = "/models/tiny" + HOSTILE.replace("/", "")
    doc["environment"]["device_name"] = HOSTILE
    doc["verdict_reason"] = HOSTILE
    doc["warnings"] = [HOSTILE, "note: " + HOSTILE]
    doc["environment"]["env"] = {"VLLM_X": HOSTILE}
    return write_json(tmp_path / "hostile.json", doc)


def test_report_strings_are_text_never_markup(cli, tmp_path):
    # GIVEN a report whose device name, verdict reason, warnings and environment are markup, in a
    # file whose name is markup too (the diff's side names come from file names)
    path = hostile_report(tmp_path)
    named = tmp_path / "<b onclick=x>&amp;\"b'.json"
    named.write_bytes(path.read_bytes())
    # WHEN it is shown and diffed as html
    for args, shown in ((("show", str(path)), HOSTILE),
                        (("diff", str(DATA / "run2.json"), str(path)), HOSTILE),  # the environment differs
                        (("diff", str(path), str(named)), named.name)):
        page = html_of(cli, *args)
        # THEN the page is still only kvaudit's own markup, and the strings read back verbatim
        parsed = assert_self_contained(page)
        assert shown in "".join(parsed.texts), args
    assert HOSTILE in Tags(html_of(cli, "show", str(path))).title  # the headline ends with the device name


def test_control_characters_in_strings_are_shown_escaped(cli, tmp_path):
    doc = real_json("run1")
    doc["warnings"] = ["\x1b]0;pwned\x07 \u202eevil"]
    page = html_of(cli, "show", str(write_json(tmp_path / "esc.json", doc)))
    assert "\x1b" not in page and "\u202e" not in page
    assert "\\x1b]0;pwned\\x07 \\u202eevil" in page


def test_a_lone_surrogate_in_a_report_is_written_as_its_escape(cli, tmp_path):
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(real_json("run1")).replace('"warnings": []', '"warnings": ["m\\ud800"]'))
    page = html_of(cli, "show", str(path))  # the CLI's stdout is strict UTF-8
    assert "m\\ud800" in page


def test_the_bars_are_the_known_positive_owners_of_each_rank(real_reports):
    import io
    import re

    from kvaudit.render.html import HtmlReporter
    for name, report in real_reports.items():
        out = io.StringIO()
        HtmlReporter().report(report, out)
        ids = re.findall(r'id="(kv-[^"]*)"', out.getvalue())
        expected = []
        for d in drawable(report.ranks):
            if (d.rank.device_total_bytes or 0) > 0:
                expected.append(f"kv-device-{d.index}")
            expected += [f"kv-bar-{d.index}-{o.value}" for o in Owner
                         if (v := d.rank.owners.get(o)) is not None and v > 0]
            if (d.rank.requested_bytes or 0) > 0:
                expected.append(f"kv-requested-{d.index}")
        assert sorted(ids) == sorted(expected) and len(ids) == len(set(ids)), name
        assert len([i for i in ids if i.startswith("kv-bar-")]) >= 4, name


DIFF_PAIRS = [(DATA / "run1.json", DATA / "run2.json"), (EXAMPLES / "cpu-batch512.json", EXAMPLES / "cpu-batch2048.json"),
              (RESULTS / "h200-real-llama-3.1-8b.json", RESULTS / "h200-real-llama-3.1-8b-vllm0.33.0.json"),
              (EXAMPLES / "h200-eager.vllm.log", EXAMPLES / "h200-graphs.vllm.log")]


@pytest.mark.parametrize("a, b", DIFF_PAIRS, ids=lambda p: p.name)
def test_the_waterfall_walks_from_a_kv_to_b_kv_exactly(a, b):
    # GIVEN two reports  WHEN the waterfall's steps are made
    ra, rb = load_report(a), load_report(b)
    diff = diff_reports(ra, rb, "a", "b")
    steps, _ = waterfall_steps(diff)
    # THEN they add up, to the byte, from A's KV to B's
    assert ra.capacity.kv_available_bytes + sum(s.delta_bytes for s in steps) == rb.capacity.kv_available_bytes
    by_key = {s.key: s.delta_bytes for s in steps}
    # each charge that grew took its growth from KV, as KV sizing charged it (the graph pool its estimate, not its
    # capture after KV: real pastes round 22a), and the budget step is the change of requested; a term one side
    # does not know, or that did not move, draws no step (it is in the rest)
    assert diff.kv_sizing is not None
    for s in diff.kv_sizing:
        if s.part_of is None:
            assert by_key.get("budget" if s.term == "requested" else s.term) == (s.kv_delta_bytes or None)
    ba, bb = ra.binding(), rb.binding()
    if ba.requested_bytes != bb.requested_bytes:
        assert by_key["budget"] == bb.requested_bytes - ba.requested_bytes


def test_a_diff_without_kv_bytes_says_why_there_is_no_waterfall(cli):
    page = html_of(cli, "diff", str(EXAMPLES / "cpu-batch512.json"), str(EXAMPLES / "cpu-batch512.vllm.log"))
    assert "No waterfall: cpu-batch512.vllm.log states no KV bytes" in page
    assert 'id="kv-wf-' not in page


def test_the_diff_page_lists_knob_and_environment_differences(cli):
    page = html_of(cli, "diff", str(EXAMPLES / "cpu-batch512.json"), str(EXAMPLES / "cpu-batch2048.json"))
    assert "<tr><td class=\"word\">max_num_batched_tokens</td><td class=\"text\">512</td><td class=\"text\">2048</td></tr>" in page
    ids = [i for i in __import__("re").findall(r'id="(kv-wf-[^"]*)"', page)]
    assert ids[0] == "kv-wf-start" and ids[-1] == "kv-wf-end" and "kv-wf-torch_other" in ids


def test_the_plan_page_has_the_planned_vs_measured_table(cli):
    measured = load_report(DATA / "run1.json")
    plan = plan_report(measured, Edits(gpu_memory_utilization=0.2, max_num_batched_tokens=256))
    page = html_of(cli, "plan", str(DATA / "run1.json"), "--gmu", "0.2", "--max-num-batched-tokens", "256")
    assert_self_contained(page)
    table = page[page.index("<h2>Planned vs measured</h2>"):]
    table = table[:table.index("</table>")]
    for rank in plan.ranks:
        was = next(r for r in measured.ranks if r.rank == rank.rank)
        for f in rank.figures:
            row = (f'<td class="num">{rank.rank}</td><td class="word">{f.owner.value}</td>'
                   f'<td class="num">{fmt_gib3(was.owners.get(f.owner))}</td><td class="num">{fmt_gib3(f.bytes)}</td>')
            assert row in table, row
        assert (f'<td class="word">kv_available</td><td class="num">{fmt_gib3(was.kv_available_bytes)}</td>'
                f'<td class="num">{fmt_gib3(rank.kv_available_bytes)}</td>') in table
    assert "scaled" in table and "proportional to batched tokens" in table


def test_without_matplotlib_html_is_a_usage_error_before_any_boot(cli, monkeypatch):
    # GIVEN no matplotlib, and a boot that must not start
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    import kvaudit.config

    def no_boot(**_):
        raise AssertionError("run booted although -f html cannot be drawn")
    monkeypatch.setattr(kvaudit.config, "build_run_config", no_boot)
    # WHEN run or show is asked for html  THEN one line naming the install, exit 2
    for args in (("run", "-f", "html"), ("selftest", "-f", "html"), ("show", str(DATA / "run1.json"), "-f", "html")):
        result = cli(*args)
        assert result.code == 2, (args, result.stderr)
        assert result.stderr_lines == ["kvaudit: error: -f html draws its charts with matplotlib, which is not "
                                       "installed here: pip install 'kvaudit[html]' (or pip install matplotlib)"]
        assert result.stdout == ""


def test_the_other_formats_import_neither_matplotlib_nor_prometheus_client():
    # the offline verbs stay light (issue 31): the two libraries are imported for their format only
    probe = ("import sys\nfrom kvaudit.cli import main\nsys.argv = ['kvaudit', *sys.argv[1:]]\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'prometheus_client'}), "
             "file=sys.stderr)\n")
    seen = {}
    for fmt in ("table", "json", "csv", "markdown", "html", "prom"):
        done = subprocess.run([sys.executable, "-c", probe, "show", str(DATA / "run2.json"), "-f", fmt],
                              capture_output=True, text=True, timeout=120, cwd=REPO)
        seen[fmt] = done.stderr.strip().splitlines()[-1]
    assert seen == {"table": "[]", "json": "[]", "csv": "[]", "markdown": "[]", "html": "['matplotlib']",
                    "prom": "['prometheus_client']"}


EXAMPLE_PAGES = {
    "show-tp2.html": ("show", str(DATA / "run2.json")),
    "show-h200-llama-3.1-8b.html": ("show", str(RESULTS / "h200-load-llama-3.1-8b-vllm0.33.0.json")),
    "diff-cpu-batch512-2048.html": ("diff", str(EXAMPLES / "cpu-batch512.json"), str(EXAMPLES / "cpu-batch2048.json")),
    "plan-run1.html": ("plan", str(DATA / "run1.json"), "--gmu", "0.2", "--max-num-batched-tokens", "256"),
}


@pytest.mark.parametrize("name", list(EXAMPLE_PAGES))
def test_the_committed_example_pages_are_what_kvaudit_writes_today(cli, name):
    # the charts are compared by the ids of what they draw (matplotlib's SVG varies by release);
    # configs/examples/README.md has the commands, run-cpu.html came from a boot
    import re

    from test_render import _charts_as_ids
    committed = (EXAMPLES / name).read_text(encoding="utf-8")
    fresh = html_of(cli, *EXAMPLE_PAGES[name])
    footer = re.compile(r"<footer>.*?</footer>")
    assert footer.sub("", _charts_as_ids(fresh)) == footer.sub("", _charts_as_ids(committed))


def test_the_committed_run_page_is_a_run():
    page = (EXAMPLES / "run-cpu.html").read_text(encoding="utf-8")
    assert_self_contained(page)
    assert "<h1>kvaudit run · vllm 0.32.0" in page and 'id="kv-bar-0-kv_cache"' in page
