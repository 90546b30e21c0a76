"""Stopping engine processes (kvaudit.engines.process), with plain sleeping processes in
place of vLLM: stop signals are deferred, a second one hurries the stop, and the guard takes a
session down when kvaudit dies without cleaning up, and removes what it left behind
(kvaudit.engines.leftovers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from kvaudit.engines import leftovers
from kvaudit.engines.journal import JournalTailer
from kvaudit.engines.process import (
    GRACE_S,
    SCAN_S,
    StopSignals,
    boot_env,
    guard_session,
    release_guard,
    session_members,
    spawn_guard,
    start_guard,
    stop_session,
    watch,
)
from kvaudit.schema import FailureKind

STUBBORN = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); time.sleep(60)")
"""A boot process and one child, both deaf to SIGTERM (as a vLLM worker stuck in a kernel is)."""


def stubborn_session() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(session_members(proc.pid)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_is_recorded_not_fatal(sig):
    with StopSignals() as signals:
        os.kill(os.getpid(), sig)
        time.sleep(0.05)
        assert signals.requested and signals.name == sig.name and not signals.hurry
    assert signal.getsignal(sig) is not signals._handle  # restored afterwards


def test_watch_stops_when_a_signal_arrives(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        with StopSignals() as signals:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
            stop = watch(proc, JournalTailer(tmp_path), lambda r, e: None, 60, time.monotonic(), signals)
        assert stop is FailureKind.INTERRUPTED
    finally:
        stop_session(proc)


def test_a_second_signal_hurries_the_stop_and_raises_nothing():
    proc = stubborn_session()
    with StopSignals() as signals:
        os.kill(os.getpid(), signal.SIGTERM)  # the first: the stop begins
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # a second Ctrl-C
        started = time.monotonic()
        survivors = stop_session(proc, grace_s=30, signals=signals)
        took = time.monotonic() - started
    assert survivors == [] and session_members(proc.pid) == []
    assert took < 5  # SIGKILL at the second signal, not after the 30 s grace


def test_the_grace_is_inside_ten_seconds():
    proc = stubborn_session()
    started = time.monotonic()
    assert stop_session(proc) == []
    assert time.monotonic() - started < 10


def test_the_guard_kills_the_session_when_kvaudit_dies():
    proc = stubborn_session()
    guard = start_guard(proc.pid)
    guard.stdin.close()  # what the kernel does to kvaudit's end when kvaudit is SIGKILLed
    guard.wait(timeout=10)
    deadline = time.monotonic() + 10
    while session_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session_members(proc.pid) == []
    proc.wait(timeout=5)


def test_the_guard_leaves_a_released_session_alone():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    guard = start_guard(proc.pid)
    release_guard(guard)
    assert guard.returncode == 0
    assert session_members(proc.pid) == [proc.pid]
    stop_session(proc)


LEAVER = """import mmap, os, signal, socket, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # deaf, as a worker stuck in a kernel is: SIGKILL it is
shm, old, sock_path = sys.argv[1:4]
fd = os.open(shm, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
held = [mmap.mmap(fd, 4096)]
fd2 = os.open(old, os.O_RDWR)
held.append(mmap.mmap(fd2, 4096))
s = socket.socket(socket.AF_UNIX)
s.bind(sock_path)
s.listen()
open(sys.argv[4], "w").close()
time.sleep(60)
"""
"""A boot that creates a shared-memory file and an IPC socket, maps a shared-memory file that was
there before it, and ignores SIGTERM: what a SIGKILLed vLLM worker leaves behind."""


def leaving_boot(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tag = f"kvaudit-test-{os.getpid()}-{time.monotonic_ns()}"
    shm, old = f"/dev/shm/{tag}-new", f"/dev/shm/{tag}-old"
    with open(old, "wb") as fh:
        fh.write(b"\0" * 4096)
    folder = tmp_path / "kvaudit-run-x"
    (folder / "journal").mkdir(parents=True)
    sock, ready = tmp_path / "ipc-socket", tmp_path / "ready"
    guard = spawn_guard(folder)  # before the boot, as run_supervised does
    proc = subprocess.Popen([sys.executable, "-c", LEAVER, shm, old, str(sock), str(ready)], start_new_session=True)
    guard_session(guard, proc.pid)
    deadline = time.monotonic() + 10
    while not ready.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(3 * SCAN_S)  # the guard has looked at least once since
    return proc, guard, folder, Path(shm), Path(old), sock


def test_the_guard_records_what_the_boot_creates_and_removes_it_when_kvaudit_dies(tmp_path, monkeypatch):
    proc, guard, folder, shm, old, sock = leaving_boot(tmp_path, monkeypatch)
    try:
        recorded = {c.path for c in leftovers.recorded(folder / "journal" / leftovers.RECORD_FILE)}
        assert recorded == {str(shm), str(sock)}  # not the file that was there before
        started = time.monotonic()
        guard.stdin.close()  # kvaudit SIGKILLed
        guard.wait(timeout=20)
        took = time.monotonic() - started
        assert session_members(proc.pid) == []
        assert GRACE_S <= took < GRACE_S + 5  # SIGTERM, the grace, then SIGKILL
        assert not shm.exists() and not sock.exists() and not folder.exists()
        assert old.exists()
        proc.wait(timeout=5)
    finally:
        stop_session(proc, grace_s=0)
        for path in (shm, old):
            path.unlink(missing_ok=True)


def test_kvaudit_removes_what_the_guard_recorded_once_it_stopped_the_boot(tmp_path, monkeypatch):
    proc, guard, folder, shm, old, sock = leaving_boot(tmp_path, monkeypatch)
    try:
        stop_session(proc, grace_s=0.5)
        release_guard(guard)
        assert guard.returncode == 0 and folder.exists()  # the work folder is kvaudit's to remove then
        record = folder / "journal" / leftovers.RECORD_FILE
        assert sorted(leftovers.remove(leftovers.recorded(record), record)) == sorted([str(shm), str(sock)])
        assert not shm.exists() and not sock.exists() and old.exists()
        assert leftovers.remove(leftovers.recorded(record)) == []  # once
    finally:
        for path in (shm, old):
            path.unlink(missing_ok=True)


def test_a_recorded_name_now_holding_another_file_is_left_alone(tmp_path):
    # GIVEN a record of psm_x as the file whose inode `recorded` has, and psm_x now another file
    recorded = tmp_path / "the-recorded-file"
    recorded.write_text("the boot's, gone from that name since")
    path = tmp_path / "psm_x"
    path.write_text("someone else's, under the same name")
    info = recorded.stat()
    assert info.st_ino != path.stat().st_ino
    # WHEN the leftovers are removed THEN psm_x stays
    assert leftovers.remove([leftovers.Created(str(path), info.st_dev, info.st_ino)]) == []
    assert path.read_text() == "someone else's, under the same name"


def test_the_boot_gets_the_work_folder_as_its_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    # a short work folder (boot_env reads the path only): pytest's tmp_path here is ~70 characters,
    # too long for a socket under it, so the short case is not built on it
    short = Path("/tmp/kvaudit-run-abcdefgh")
    env = boot_env(short)
    assert env["TMPDIR"] == str(short)
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path) + "/torchinductor_")  # torch's default, kept
    assert len(str(short)) + 37 <= 107 and "VLLM_RPC_BASE_PATH" not in env  # vLLM's sockets go in the work folder
    long = tmp_path / ("x" * 80)
    assert boot_env(long)["VLLM_RPC_BASE_PATH"] == str(tmp_path)  # no room for a socket path there
    # a temp dir too long for a socket as well (a batch job's deep TMPDIR): /tmp, and the guard watches it
    deep = tmp_path / ("y" * 90)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert len(str(deep)) + 37 > 107 and boot_env(deep / "kvaudit-run-abcdefgh")["VLLM_RPC_BASE_PATH"] == "/tmp"
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", "/run/sockets")  # the user's is theirs
    assert boot_env(deep / "kvaudit-run-abcdefgh")["VLLM_RPC_BASE_PATH"] == "/run/sockets"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("VLLM_RPC_BASE_PATH")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere")
    assert boot_env(short)["TORCHINDUCTOR_CACHE_DIR"] == "/elsewhere"


def test_the_guard_imports_the_installed_kvaudit_not_a_folder_here(tmp_path, monkeypatch):
    # GIVEN a `kvaudit/` folder in the current directory that breaks any import of it
    (tmp_path / "kvaudit").mkdir()
    (tmp_path / "kvaudit" / "__init__.py").write_text("raise ImportError('the wrong kvaudit')\n")
    monkeypatch.chdir(tmp_path)
    proc = stubborn_session()
    started = time.monotonic()
    guard = start_guard(proc.pid)
    # THEN it starts at once and still guards: kvaudit's death takes the session down
    assert time.monotonic() - started < 10 and guard.poll() is None
    guard.stdin.close()
    guard.wait(timeout=20)
    assert session_members(proc.pid) == []
    proc.wait(timeout=5)
