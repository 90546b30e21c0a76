"""At 80 columns (a default terminal): no help line is wider, no command summary or option name is
cut, the usage line names arguments as the help does, and the selftest's accuracy table keeps
every column whole."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from factories import boot_rank, report

from kvaudit.render import Format, reporter
from kvaudit.schema import AccuracyEntry, Owner, Source

COMMANDS = ("", "show", "diff", "ingest", "run", "selftest", "plan")


def help_text(command: str) -> str:
    args = [sys.executable, "-m", "kvaudit", *([command] if command else []), "--help"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_80_columns_and_shows_no_python_types_or_braces(command):
    text = help_text(command)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "{" not in text.splitlines()[0]  # typer's {REPORT} in the usage line
    assert "<list[" not in text


def test_the_command_list_is_not_cut():
    commands = help_text("").split("Commands:")[1]
    assert "..." not in commands
    assert [line.split()[0] for line in commands.strip().splitlines()] == list(COMMANDS[1:])


def test_run_help_keeps_the_pass_through_example_on_one_line():
    assert "    kvaudit run --tp 2 -- --enable-expert-parallel\n" in help_text("run")


def test_every_plan_option_says_what_it_does():
    text = help_text("plan")
    for option in ("--gmu", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--cudagraph-sizes",
                   "--kv-cache-dtype", "--enforce-eager / --no-enforce-eager"):
        line = next(line for line in text.splitlines() if line.strip().startswith(option))
        assert len(line.split(maxsplit=2)) == 3, line  # the option, its metavar and its help on one line


def test_the_selftest_accuracy_table_keeps_every_column_at_80():
    acc = tuple(AccuracyEntry(owner, 0, 201_326_592, 201_338_880) for owner in
                (Owner.WEIGHTS, Owner.PERSISTENT, Owner.ACTIVATION_PEAK, Owner.GRAPH_POOL, Owner.NON_TORCH))
    out = io.StringIO()
    reporter(Format.TABLE, width=80, color=False).report(report([boot_rank()], source=Source.SELFTEST,
                                                                accuracy=acc), out)
    table = out.getvalue().split("planted vs measured (GiB)")[1].split("\n\n")[0]
    assert "…" not in table
    assert "┃ rank ┃ planted ┃ measured ┃      error ┃ error %" in table
    assert "activation_peak" in table and "+12.00 KiB" in table
