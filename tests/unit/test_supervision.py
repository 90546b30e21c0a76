"""Stopping engine processes (kvaudit.engines.process), with plain sleeping processes in
place of vLLM: stop signals are deferred, a second one hurries the stop, and the guard takes a
session down when kvaudit dies without cleaning up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kvaudit.engines.journal import JournalTailer
from kvaudit.engines.process import StopSignals, release_guard, session_members, start_guard, stop_session, watch
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
