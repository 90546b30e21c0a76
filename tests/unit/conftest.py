"""Shared fixtures of the pure unit tests: the real example reports, an in-process CLI runner
and golden files compared at a pinned width.

Goldens: `KVAUDIT_UPDATE_GOLDEN=1 pytest tests/unit` rewrites them from the current output;
read the diff before committing it.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # factories, whatever pytest's import mode

from factories import DATA, REAL_REPORTS  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()


import typer.main  # noqa: E402

_REAL_GET_COMMAND = typer.main.get_command
_COMMANDS: dict[int, object] = {}


def _cached_get_command(typer_app):
    """typer rebuilds the click command from the function signatures on every call (~40 ms);
    it is the same command each time, so the tests build it once per app."""
    if id(typer_app) not in _COMMANDS:
        _COMMANDS[id(typer_app)] = _REAL_GET_COMMAND(typer_app)
    return _COMMANDS[id(typer_app)]


def run_cli(*args: str) -> CliResult:
    """`kvaudit ARGS` in this process, through the console entry point (kvaudit.cli.main), which
    turns every error into one line and an exit code.

    stdout is a strict UTF-8 stream, as a real one is: text that cannot be encoded fails here
    as it would in a terminal or a pipe."""
    from kvaudit import cli

    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="backslashreplace", write_through=True)
    saved = sys.argv
    sys.argv = ["kvaudit", *args]
    code: int | str | None = 0
    typer.main.get_command = _cached_get_command
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as exc:
                code = exc.code
            except Exception:  # escaped main(): what the interpreter would do, a traceback and 1
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = saved
        typer.main.get_command = _REAL_GET_COMMAND
    out.flush()
    err.flush()
    return CliResult(code=code if isinstance(code, int) else (0 if code is None else 1),
                     stdout=out_bytes.getvalue().decode("utf-8", errors="replace"),
                     stderr=err_bytes.getvalue().decode("utf-8", errors="replace"))


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(params=REAL_REPORTS)
def real_report_path(request) -> Path:
    return DATA / f"{request.param}.json"


@pytest.fixture(scope="session")
def real_reports():
    from kvaudit.engines.inputs import load_report
    return {name: load_report(DATA / f"{name}.json") for name in REAL_REPORTS}


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("KVAUDIT_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"no golden {path}: run with KVAUDIT_UPDATE_GOLDEN=1 and read what it wrote"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"output differs from {path} (KVAUDIT_UPDATE_GOLDEN=1 rewrites it)"


@pytest.fixture
def golden():
    return check_golden
