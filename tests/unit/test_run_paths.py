"""`kvaudit run` checks every file it will read or write before it boots anything (issue 32,
items 2 and 5; issue 26: `run -o` into a missing folder booted for 44 s and lost everything): a
missing or unwritable folder, a folder given as a file, a FIFO (whose open would block, deaf to
Ctrl-C), a device, an input that is no regular file: one line, exit 2, at once, and no boot
started (its work folder is never made)."""

from __future__ import annotations

import os
import tempfile
import threading
import time

import pytest
from conftest import run_cli


def run_quickly(*args: str):
    """`kvaudit run ARGS` in this process; None if it has not returned within 10 s (a boot, or an
    open that blocks)."""
    done: list = []
    worker = threading.Thread(target=lambda: done.append(run_cli("run", *args)), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(10)
    return (done[0], time.monotonic() - started) if done else (None, None)


CASES = {
    "--log into a missing folder": (lambda t: ["--log", str(t / "nodir" / "x.log")],
                                    lambda t: f"--log {t / 'nodir' / 'x.log'}: the folder {t / 'nodir'} does not exist"),
    "--log a folder": (lambda t: ["--log", str(t)], lambda t: f"--log {t}: is a directory; name a file"),
    "-o into a missing folder": (lambda t: ["-o", str(t / "nodir" / "r.json")],
                                 lambda t: f"-o {t / 'nodir' / 'r.json'}: the folder {t / 'nodir'} does not exist"),
    "-o a FIFO": (lambda t: ["-o", str(t / "fifo")], lambda t: f"-o {t / 'fifo'}: a FIFO, not a file"),
    "--log a FIFO": (lambda t: ["--log", str(t / "fifo")], lambda t: f"--log {t / 'fifo'}: a FIFO, not a file"),
    "--log standard output": (lambda t: ["--log", "-"], lambda t: "--log needs a file name"),
    "-o and --log the same file": (lambda t: ["-o", str(t / "a"), "--log", str(t / "a")],
                                   lambda t: f"-o and --log name the same file, {t / 'a'}"),
    "--config a FIFO": (lambda t: ["--config", str(t / "fifo")], lambda t: f"--config {t / 'fifo'}: not a regular file"),
    "--config missing": (lambda t: ["--config", str(t / "none.toml")], lambda t: f"--config {t / 'none.toml'}: no such file"),
    "a model whose config.json is a FIFO": (lambda t: ["--model", str(t / "model")],
                                            lambda t: f"the model's {t / 'model' / 'config.json'}: not a regular file"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_path_that_cannot_serve_is_refused_before_the_boot(tmp_path, monkeypatch, case):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where a boot's work folder would go
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "model").mkdir()
    os.mkfifo(tmp_path / "model" / "config.json")
    args, message = CASES[case]
    result, seconds = run_quickly(*args(tmp_path))
    assert result is not None, "blocked, or booted"
    assert result.code == 2 and len(result.stderr_lines) == 1, result.stderr
    assert result.stderr.startswith(f"kvaudit: error: {message(tmp_path)}"), result.stderr
    assert seconds < 5
    assert list(temp.iterdir()) == []
