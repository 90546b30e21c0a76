"""Every string from an input is rendered as data (issue 32, item 6): no newline, carriage return
or table delimiter from a report starts a line or a cell, in the table, markdown or CSV; and a
rank whose number is null is never "rank None" (item 10)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest
from factories import DATA

from kvaudit.diff import diff_reports
from kvaudit.engines.inputs import load_report
from kvaudit.render import Format, frames, reporter

FORGED = "verdict: ok — fits"
HOSTILE = {
    "model": f"/models/tiny\n{FORGED}\r\n| forged | row |",
    "warning": f"a | b\n| x | y |\n{FORGED}",
    "note": "note: <script>alert(1)</script> **bold** `code` [link](http://x) \\| _it_",
    "site": "torch/<module>\n| cell |",
}


def hostile_report(tmp_path):
    """run1 with the strings a hostile report could hold, and rank 1's number null."""
    data = json.loads((DATA / "run2.json").read_text())
    data["config"]["model"] = HOSTILE["model"]
    data["warnings"] = [HOSTILE["warning"], HOSTILE["note"]]
    data["environment"]["device_name"] = "GPU\rverdict: ok"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(data))
    report = load_report(path)
    return dataclasses.replace(report, ranks=(report.ranks[0], dataclasses.replace(report.ranks[1], rank=None)),
                               capacity=dataclasses.replace(report.capacity, binding_rank=0))


def render(report, fmt: Format) -> str:
    out = io.StringIO()
    reporter(fmt, width=100, color=False).report(report, out)
    return out.getvalue()


@pytest.mark.parametrize("fmt", [Format.TABLE, Format.MARKDOWN], ids=str)
def test_a_newline_in_a_report_string_starts_no_line(tmp_path, fmt):
    text = render(hostile_report(tmp_path), fmt)
    lines = text.splitlines()
    assert "\r" not in text
    assert not any(line.lstrip("-*| \\").startswith(("verdict: ok", "forged")) for line in lines), text
    # the true verdict is the last line, and the only one that starts with one
    assert lines[-1].strip("*").startswith("FAIL: ")
    assert "\\x0averdict: ok" in text.replace("\\\\", "\\")  # shown escaped, where it was


def test_a_markdown_table_gets_no_row_or_cell_from_a_report(tmp_path):
    report = hostile_report(tmp_path)
    text = render(report, Format.MARKDOWN)
    rows = [line for line in text.splitlines() if line.startswith("|")]
    # the owner table: a header, its rule and one row per owner and budget line, three cells each
    assert len(rows) == 2 + len(frames.owners_wide(report).index)
    for row in rows:
        cells = [c for c in row.replace("\\\\", "").replace("\\|", "").split("|")][1:-1]
        assert len(cells) == 3, row


def test_markdown_shows_markup_and_html_from_a_report_as_text(tmp_path):
    text = render(hostile_report(tmp_path), Format.MARKDOWN)
    line = next(line for line in text.splitlines() if "alert(1)" in line)
    assert line == ("- note: \\<script\\>alert(1)\\</script\\> \\*\\*bold\\*\\* \\`code\\` \\[link\\](http://x) "
                    "\\\\\\| \\_it\\_")


def test_a_pasteable_value_with_backticks_stays_one_code_span():
    from kvaudit.render.markdown_text import code
    assert code("--model=a`b") == "``--model=a`b``"
    assert code("`x``") == "``` `x`` ```"


def test_csv_rows_are_one_line_each(tmp_path):
    text = render(hostile_report(tmp_path), Format.CSV)
    rows = list(csv.reader(io.StringIO(text)))
    assert len(text.splitlines()) == len(rows)  # no quoted field spans lines
    assert {row[0] for row in rows[1:]} == {"0", ""}  # the null rank is empty, not "None"


def test_a_null_rank_is_never_rank_none(tmp_path):
    report = hostile_report(tmp_path)
    for fmt in (Format.TABLE, Format.MARKDOWN, Format.CSV, Format.JSON):
        assert "None" not in render(report, fmt)
    table = render(report, Format.TABLE)
    assert "ranks[1]" in table  # named by where its entry is, in the owner table and the bars
    diff = diff_reports(report, report, "a.json", "b.json")
    out = io.StringIO()
    reporter(Format.TABLE, width=100, color=False).diff(diff, out)
    assert "None" not in out.getvalue()


def test_two_null_ranks_stay_two_columns(tmp_path):
    report = hostile_report(tmp_path)
    both = dataclasses.replace(report, ranks=tuple(dataclasses.replace(r, rank=None) for r in report.ranks),
                               capacity=dataclasses.replace(report.capacity, binding_rank=None))
    header = next(line for line in render(both, Format.TABLE).splitlines() if line.startswith("owner (GiB)"))
    assert "ranks[0]" in header and "ranks[1]" in header
