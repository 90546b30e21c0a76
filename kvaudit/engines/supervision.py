"""Running engine processes safely: each boot runs in a session of its own, its journals are
tailed for live progress, and when it ends (or times out, or the user presses Ctrl-C) every
process of that session is taken down. Shared by the vLLM and selftest engines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from kvaudit.schema import FailureKind

ProgressFn = Callable[[int, dict[str, Any]], None]


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


def stop_session(proc: subprocess.Popen, grace_s: float = 15.0) -> list[int]:
    """Take the boot process and everything it started down: SIGTERM, then SIGKILL. Returns
    the PIDs still alive afterwards (none, unless the kernel refused)."""
    sid = proc.pid
    if proc.poll() is None or session_members(sid):
        try:
            os.killpg(sid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and (proc.poll() is None or session_members(sid)):
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


def watch(proc: subprocess.Popen, tailer: JournalTailer, on_progress: ProgressFn, timeout_s: float,
          started: float) -> FailureKind | None:
    """Wait for the process, reporting journal lines; TIMEOUT or INTERRUPTED if it had to stop."""
    try:
        while proc.poll() is None:
            for rank, event in tailer.poll():
                on_progress(rank, event)
            if time.monotonic() - started > timeout_s:
                return FailureKind.TIMEOUT
            time.sleep(0.25)
    except KeyboardInterrupt:
        return FailureKind.INTERRUPTED
    return None
