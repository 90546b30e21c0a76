"""Running engine processes safely: each boot runs in a session of its own, its journals are
tailed for live progress, and when it ends (or times out, or Ctrl-C, SIGTERM or SIGHUP arrives)
every process of that session is taken down. Shared by the vLLM and selftest engines.

If kvaudit itself dies without a chance to clean up (SIGKILL), the boot process sees its stdin
pipe close (`LIFELINE`) and takes its own session down; the kernel also sends it SIGKILL then
(PR_SET_PDEATHSIG), in case its threads are stuck."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from kvaudit.schema import FailureKind

ProgressFn = Callable[[int, dict[str, Any]], None]

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


class JournalTailer:
    """Reads new lines of every rank's journal as they are appended."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.offsets: dict[Path, int] = {}

    def poll(self) -> list[tuple[int, dict[str, Any]]]:
        out = []
        for path in sorted(self.folder.glob("rank*.jsonl")):
            try:
                rank = int(path.stem[4:])
                with open(path, "rb") as fh:
                    fh.seek(self.offsets.get(path, 0))
                    chunk = fh.read()
            except (ValueError, OSError):
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            for line in complete.splitlines():
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(event, dict):
                    out.append((rank, event))
        return out


VLLM_STAGES = (
    # (a phrase vLLM 0.26–0.32 logs, the stage it starts): what the boot waits on before the
    # audit worker's first phase and between its phases
    ("Resolved architecture", "vLLM: resolving the model config"),
    ("Initializing a V1 LLM engine", "vLLM: starting the engine core"),
    ("Starting to load model", "vLLM: loading the model"),
    ("Loading weights took", "vLLM: model loaded"),
    ("Model loading took", "vLLM: model loaded"),
    ("init engine", "vLLM: engine ready"),
)
STAGE_BYTES = 1 << 16
"""The most of vLLM's log read per poll: a stage phrase is near a line's start; a long line (an
engine config dump) is not searched whole."""


class StageTailer:
    """The stage the boot is waiting on: the boot process's own journal (`boot.jsonl`: "stage"
    events) and a few phrases of vLLM's log, read as they are appended."""

    def __init__(self, log_path: Path, boot_journal: Path):
        self.log_path, self.boot_journal = log_path, boot_journal
        self.offsets = {log_path: 0, boot_journal: 0}
        self.stage: str | None = None

    def _new(self, path: Path) -> bytes:
        try:
            with open(path, "rb") as fh:
                fh.seek(self.offsets[path])
                chunk = fh.read(STAGE_BYTES)
        except OSError:
            return b""
        complete = chunk[: chunk.rfind(b"\n") + 1] if len(chunk) < STAGE_BYTES else chunk
        self.offsets[path] += len(complete)
        return complete

    def poll(self) -> str | None:
        """The new stage, or None when it did not change."""
        found = None
        text = self._new(self.log_path).decode("utf-8", "replace")
        for phrase, stage in VLLM_STAGES:
            at = text.rfind(phrase)
            if at >= 0 and (found is None or at > found[0]):
                found = (at, stage)
        stage = found[1] if found else None
        for line in self._new(self.boot_journal).splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and isinstance(event.get("stage"), str):
                stage = event["stage"]  # the boot process knows better than the log
        if stage is None or stage == self.stage:
            return None
        self.stage = stage
        return stage


def start_guard(sid: int) -> subprocess.Popen:
    """A small process outside the boot's session (and outside kvaudit's process group) that
    holds the read end of a pipe from kvaudit. EOF without "done" means kvaudit died without
    cleaning up (SIGKILL, a crash): the guard then kills every process of session `sid`.
    vLLM's own processes inherit no death signal, so this is what takes them down."""
    return subprocess.Popen([sys.executable, "-c", "import sys; from kvaudit.engines.supervision import guard; "
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


def session_members(sid: int) -> list[int]:
    """PIDs in session `sid` (the boot process started one): vLLM's engine core and workers."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
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


def watch(proc: subprocess.Popen, tailer: Any, on_progress: ProgressFn, timeout_s: float,
          started: float, signals: StopSignals | None = None,
          stages: StageTailer | None = None,
          should_stop: Callable[[], FailureKind | None] | None = None) -> FailureKind | None:
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
            if should_stop is not None and (kind := should_stop()) is not None:
                return kind
            if time.monotonic() - started > timeout_s:
                return FailureKind.TIMEOUT
            time.sleep(0.25)
    except KeyboardInterrupt:
        return FailureKind.INTERRUPTED
    return None
