"""The supervised engine process, the one runner both boot engines (vllm, selftest) use: each
boot runs in a session of its own, its journals are tailed for live progress, and when it ends
(or times out, or Ctrl-C, SIGTERM or SIGHUP arrives) every process of that session is taken down.

If kvaudit itself dies without a chance to clean up (SIGKILL), the boot process sees its stdin
pipe close (`LIFELINE`) and takes its own session down; the kernel also sends it SIGKILL then
(PR_SET_PDEATHSIG), in case its threads are stuck."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator, Mapping, Protocol

from kvaudit.engines.journal import JournalTailer
from kvaudit.schema import FailureKind

ProgressFn = Callable[[int, dict[str, Any]], None]
"""Live progress: (rank, one of its journal events), or (-1, a {"type": "stage"} event)."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What `timeout`, systemd, Kubernetes, CI runners and a closed terminal send: each stops the
boot the way Ctrl-C does, and the partial report is still written."""

GRACE_S = 5.0
"""SIGTERM's grace before SIGKILL: vLLM's engine core and workers shut down well inside it, and
grace plus the kill stay inside the 10 s a service manager allows."""


class StopSignals:
    """While active (a context manager, in the main thread), SIGINT, SIGTERM and SIGHUP only
    record that a stop was asked for: the supervisor stops the boot and still writes the report.
    A second signal hurries the stop (SIGKILL at once); it never skips the report."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._saved: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return bool(self.received)

    @property
    def hurry(self) -> bool:
        return len(self.received) > 1

    @property
    def name(self) -> str | None:
        """The first signal's name ("SIGTERM"), or None."""
        return signal.Signals(self.received[0]).name if self.received else None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._saved.items():
            signal.signal(sig, previous)
        self._saved.clear()


def start_guard(sid: int) -> subprocess.Popen:
    """A small process outside the boot's session (and outside kvaudit's process group) that
    holds the read end of a pipe from kvaudit. EOF without "done" means kvaudit died without
    cleaning up (SIGKILL, a crash): the guard then kills every process of session `sid`.
    vLLM's own processes inherit no death signal, so this is what takes them down."""
    return subprocess.Popen([sys.executable, "-c", "import sys; from kvaudit.engines.process import guard; "
                             "guard(int(sys.argv[1]))", str(sid)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def release_guard(guard_proc: subprocess.Popen) -> None:
    """kvaudit stopped the session itself: tell the guard so, and let it go."""
    try:
        assert guard_proc.stdin is not None
        guard_proc.stdin.write(b"done")
        guard_proc.stdin.close()
    except (OSError, ValueError):
        pass
    try:
        guard_proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        guard_proc.kill()


def guard(sid: int) -> None:
    """The guard's body (see start_guard)."""
    for sig in STOP_SIGNALS:  # a terminal's Ctrl-C or hang-up is kvaudit's to handle, not ours
        signal.signal(sig, signal.SIG_IGN)
    last = b""
    while chunk := os.read(0, 64):
        last = (last + chunk)[-4:]
    if last == b"done":
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        members = session_members(sid)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: [state, ppid, pgrp, session, …]; None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def session_members(sid: int) -> list[int]:
    """PIDs in session `sid` (the boot process started one): vLLM's engine core and workers."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = proc_stat(int(entry.name))
        if fields is not None and len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def stop_session(proc: subprocess.Popen, grace_s: float = GRACE_S, signals: StopSignals | None = None) -> list[int]:
    """Take the boot process and everything it started down: SIGTERM, then SIGKILL after the
    grace (at once when a second stop signal arrives). Returns the PIDs still alive afterwards
    (none, unless the kernel refused)."""
    sid = proc.pid
    if proc.poll() is None or session_members(sid):
        try:
            os.killpg(sid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while (time.monotonic() < deadline and not (signals is not None and signals.hurry)
               and (proc.poll() is None or session_members(sid))):
            time.sleep(0.2)
        if proc.poll() is None or session_members(sid):
            try:
                os.killpg(sid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in session_members(sid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    time.sleep(0.2)
    return session_members(sid)


class Stages(Protocol):
    """Where a boot is before its ranks journal anything (engines.vllm.stages.StageTailer)."""

    def poll(self) -> str | None: ...


StopCheck = Callable[[JournalTailer], FailureKind | None]
"""Asked at each poll, with the journals read so far: a reason to stop the boot (a rank on
another node died: engines.vllm.supervise.stop_when_gone), or None."""


def watch(proc: subprocess.Popen, tailer: JournalTailer, on_progress: ProgressFn, timeout_s: float,
          started: float, signals: StopSignals | None = None,
          stages: Stages | None = None, should_stop: StopCheck | None = None) -> FailureKind | None:
    """Wait for the process, reporting journal lines (and stages, as rank -1 "stage" events);
    TIMEOUT or INTERRUPTED if it had to stop, or what `should_stop` returned (a rank on another
    node died)."""
    try:
        while proc.poll() is None:
            if signals is not None and signals.requested:
                return FailureKind.INTERRUPTED
            if stages is not None and (stage := stages.poll()) is not None:
                on_progress(-1, {"type": "stage", "stage": stage})
            for rank, event in tailer.poll():
                on_progress(rank, event)
            if should_stop is not None and (kind := should_stop(tailer)) is not None:
                return kind
            if time.monotonic() - started > timeout_s:
                return FailureKind.TIMEOUT
            time.sleep(0.25)
    except KeyboardInterrupt:
        return FailureKind.INTERRUPTED
    return None


# ------------------------------------------------------------------------------------------------
# The runner


@contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    """A temporary folder with an empty `journal/` in it, removed afterwards whatever happens
    (the journals live in the report by then)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        (folder / "journal").mkdir()
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class Finished:
    """How a supervised process ended."""

    stop: FailureKind | None
    """TIMEOUT or INTERRUPTED when the supervisor had to stop it (or what `should_stop` said);
    None when it ended by itself."""
    exit_code: int | None
    survivors: list[int]
    """PIDs of its session still alive after SIGKILL (none, unless the kernel refused)."""
    elapsed_s: float


def run_supervised(module: str, spec: Path, *, log_path: Path, journal_dir: Path, on_progress: ProgressFn,
                   timeout_s: float, signals: StopSignals, env: Mapping[str, str] | None = None,
                   stages: Stages | None = None, name: str | None = None,
                   should_stop: StopCheck | None = None) -> Finished:
    """`python -m MODULE SPEC` in a session of its own, its output into `log_path`: progress from
    the rank journals in `journal_dir` (and `stages`) while it runs, the timeout and the stop
    signals enforced (and `should_stop`), every process of the session taken down afterwards, and
    the journal lines that arrived meanwhile reported. `name` ("vLLM") announces a stop the
    supervisor made."""
    tailer = JournalTailer(journal_dir)
    started = time.monotonic()
    stop: FailureKind | None = None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", module, str(spec)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=dict(env) if env is not None else None)
        guard_proc = start_guard(proc.pid)
        try:
            stop = watch(proc, tailer, on_progress, timeout_s, started, signals, stages, should_stop)
        finally:
            if stop is not None and name is not None:  # a process that ended by itself cleaned up already
                on_progress(-1, {"type": "stage", "stage": f"stopping {name} ({signals.name or stop.value})"})
            survivors = stop_session(proc, signals=signals)
            release_guard(guard_proc)
    for rank, event in tailer.poll():
        on_progress(rank, event)
    return Finished(stop=stop, exit_code=proc.returncode, survivors=survivors, elapsed_s=time.monotonic() - started)
