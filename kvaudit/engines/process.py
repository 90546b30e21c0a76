"""The supervised engine process, the one runner both boot engines (vllm, selftest) use: each
boot runs in a session of its own, its journals are tailed for live progress, and when it ends
(or times out, or Ctrl-C, SIGTERM or SIGHUP arrives) every process of that session is taken down
(SIGTERM, a grace, then SIGKILL) and what it left behind is removed.

Nothing of a boot outlives it: its temporary folder is kvaudit's work folder (`boot_env`), which
goes whole, and what it creates elsewhere (vLLM's shared memory in /dev/shm, IPC sockets) is
recorded in the journal as it appears and removed at the end (engines/leftovers.py). If kvaudit
itself dies without a chance to clean up (SIGKILL), a guard process outside the boot's session
sees its pipe from kvaudit close, stops the session the same way and removes the same things,
the work folder included."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from kvaudit.engines import leftovers
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


SCAN_S = 0.25
"""How often the guard looks for what the boot's processes create (engines/leftovers.py)."""


def spawn_guard(folder: Path | None = None, sockets: str | None = None) -> subprocess.Popen:
    """A small process outside the boot's session (and outside kvaudit's process group) that
    holds the read end of a pipe from kvaudit; `guard_session` then names the session to guard.
    While the boot runs it records, in `folder`'s journal, what the session's processes create
    outside `folder` (leftovers.Recorder; what was there before the guard started is never the
    boot's, so the boot starts after it is ready). EOF without "done" means kvaudit died without
    cleaning up (SIGKILL, a crash): the guard then stops the session (SIGTERM, GRACE_S, SIGKILL),
    removes what was recorded and `folder` itself. vLLM's own processes inherit no death signal,
    so this is what takes them down. `sockets`: where the boot's IPC sockets go (`socket_base`; the
    temp dir where not given)."""
    args = [str(folder), sockets or tempfile.gettempdir()] if folder is not None else []
    # -P: the installed kvaudit, never a `kvaudit/` folder in the current directory (as the boot's
    # PYTHONSAFEPATH); a guard that cannot start answers EOF, and the wait below ends at once
    proc = subprocess.Popen([sys.executable, "-P", "-c", "import sys; from kvaudit.engines.process import guard; "
                             "guard(*sys.argv[1:])", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)  # its listing of /dev/shm is done
    if ready:
        proc.stdout.readline()
    proc.stdout.close()
    return proc


def guard_session(guard_proc: subprocess.Popen, sid: int) -> None:
    """Tell the guard which session to guard (the boot process's PID: it leads its session)."""
    try:
        assert guard_proc.stdin is not None
        guard_proc.stdin.write(f"{sid}\n".encode())
        guard_proc.stdin.flush()
    except (OSError, ValueError):
        pass


def start_guard(sid: int, folder: Path | None = None) -> subprocess.Popen:
    """spawn_guard, then guard_session(sid): for a session that exists already."""
    guard_proc = spawn_guard(folder)
    guard_session(guard_proc, sid)
    return guard_proc


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


def record_file(folder: Path) -> Path:
    """Where a boot's created paths are recorded: its journal folder."""
    return folder / "journal" / leftovers.RECORD_FILE


def guard(folder: str | None = None, tmp: str | None = None) -> None:
    """The guard's body (see spawn_guard): reads the session id, then waits for "done" or EOF."""
    for sig in STOP_SIGNALS:  # a terminal's Ctrl-C or hang-up is kvaudit's to handle, not ours
        signal.signal(sig, signal.SIG_IGN)
    recorder = None
    if folder is not None:
        recorder = leftovers.Recorder(record_file(Path(folder)), socket_roots=[tmp] if tmp else [], skip=[folder])
    os.write(1, b"ready\n")
    os.close(1)
    received = b""
    session: int | None = None
    while True:
        ready, _, _ = select.select([0], [], [], SCAN_S)
        if ready:
            chunk = os.read(0, 64)
            if not chunk:
                break
            received += chunk
            if session is None and b"\n" in received:
                line, received = received.split(b"\n", 1)
                session = int(line)
            received = received[-4:]
        elif recorder is not None and session is not None:
            recorder.scan(session_members(session))
    if received == b"done":
        return
    if session is not None:
        sid = session
        tick = (lambda: recorder.scan(session_members(sid))) if recorder is not None else None
        terminate_session(sid, lambda: bool(session_members(sid)), tick=tick)
    if folder is not None:
        assert recorder is not None
        leftovers.remove(recorder.seen.values())
        shutil.rmtree(folder, ignore_errors=True)


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


def terminate_session(sid: int, alive: Callable[[], bool], grace_s: float = GRACE_S,
                      hurry: Callable[[], bool] = lambda: False, tick: Callable[[], object] | None = None) -> None:
    """SIGTERM to every process of session `sid`, SIGKILL to what is left after the grace (or as
    soon as `hurry()`); `tick` runs before each signal and while waiting (the guard records what
    the processes hold until they are gone)."""
    if not alive():
        return
    if tick is not None:
        tick()
    try:
        os.killpg(sid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not hurry() and alive():
        if tick is not None:
            tick()
        time.sleep(0.1 if tick is None else 0.05)
    if not alive():
        return
    if tick is not None:
        tick()
    try:
        os.killpg(sid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for _ in range(100):  # a member outside the process group (its own setpgid) too
        members = session_members(sid)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def stop_session(proc: subprocess.Popen, grace_s: float = GRACE_S, signals: StopSignals | None = None) -> list[int]:
    """Take the boot process and everything it started down: SIGTERM, then SIGKILL after the
    grace (at once when a second stop signal arrives). Returns the PIDs still alive afterwards
    (none, unless the kernel refused)."""
    sid = proc.pid
    terminate_session(sid, lambda: proc.poll() is None or bool(session_members(sid)), grace_s,
                      hurry=lambda: signals is not None and signals.hurry)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    if session_members(sid):  # one may still be on its way out
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
            try:  # back at once when the process ends, at the latest after a quarter second
                proc.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                pass
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


SOCKET_PATH_MAX = 107
"""The longest path a Unix socket can be bound to on Linux (sun_path is 108 bytes with its NUL)."""
IPC_NAME_CHARS = 37
"""What vLLM adds to VLLM_RPC_BASE_PATH for an IPC socket: `/` and a uuid4 (network_utils.py
get_open_zmq_ipc_path)."""


SOCKET_FALLBACK = "/tmp"
"""Where vLLM's IPC sockets go when neither the work folder nor the temp dir has room for one."""


def socket_base(folder: Path, env: Mapping[str, str]) -> str | None:
    """Where vLLM's IPC sockets go if not in the work folder (None: there, with everything else of the
    boot): the user's VLLM_RPC_BASE_PATH; else, where the work folder's path leaves no room for a
    socket's name, the real temp dir, or /tmp where that is too long as well (a deep TMPDIR, as a batch
    job's scratch folder can be: vLLM's sockets could not be bound under it, and the boot died before its
    first rank journaled)."""
    if "VLLM_RPC_BASE_PATH" in env:
        return env["VLLM_RPC_BASE_PATH"]
    if _socket_fits(str(folder)):
        return None
    tmp = tempfile.gettempdir()
    if not _socket_fits(tmp) and os.access(SOCKET_FALLBACK, os.W_OK | os.X_OK):
        return SOCKET_FALLBACK
    return tmp  # (with no /tmp either, vLLM's own error says the path is too long)


def _socket_fits(base: str) -> bool:
    return len(base) + IPC_NAME_CHARS <= SOCKET_PATH_MAX


def boot_env(folder: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The boot's environment: its temporary folder is the work folder, so whatever vLLM, torch
    or the compiler put in "the temp dir" (vLLM's file store, IPC sockets, build files) goes with
    it. Two things keep their usual place: torch's compile cache (TORCHINDUCTOR_CACHE_DIR, pinned
    to torch's own default under the real temp dir, cache_dir_utils.default_cache_dir, so boots
    keep sharing it) and, when the work folder's path is too long for a socket, vLLM's IPC
    sockets (VLLM_RPC_BASE_PATH: `socket_base`; they are recorded and removed, leftovers.py).
    A variable the user set is left as set."""
    out = dict(os.environ if env is None else env)
    if "TORCHINDUCTOR_CACHE_DIR" not in out:
        out["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "torchinductor_" + _user())
    if (sockets := socket_base(folder, out)) is not None:
        out["VLLM_RPC_BASE_PATH"] = sockets
    out["TMPDIR"] = str(folder)
    return out


def _user() -> str:
    """The user name as torch writes it into its cache folder's name (cache_dir_utils)."""
    import getpass
    import re
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = f"uid_{os.getuid()}"
    return re.sub(r'[\\/:*?"<>|]', "_", name)


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
    removed: tuple[str, ...] = ()
    """What the boot created outside its work folder and left behind, removed afterwards
    (vLLM's shared memory in /dev/shm, IPC sockets): engines/leftovers.py."""


def run_supervised(module: str, spec: Path, *, log_path: Path, journal_dir: Path, on_progress: ProgressFn,
                   timeout_s: float, signals: StopSignals, env: Mapping[str, str] | None = None,
                   stages: Stages | None = None, name: str | None = None,
                   should_stop: StopCheck | None = None) -> Finished:
    """`python -m MODULE SPEC` in a session of its own, its output into `log_path`: progress from
    the rank journals in `journal_dir` (and `stages`) while it runs, the timeout and the stop
    signals enforced (and `should_stop`), every process of the session taken down afterwards, what
    it left behind removed, and the journal lines that arrived meanwhile reported. `journal_dir` is
    the `journal/` of a work folder (`workdir`), which is also the boot's temporary folder
    (`boot_env`). `name` ("vLLM") announces a stop the supervisor made."""
    folder = journal_dir.parent
    tailer = JournalTailer(journal_dir)
    started = time.monotonic()
    stop: FailureKind | None = None
    # created or truncated as `>` does, and opened so that it cannot block (the CLI refused a FIFO
    # before the boot; should one have taken its place since, the open fails at once)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    with open(fd, "wb") as log:
        boot = boot_env(folder, env)
        guard_proc = spawn_guard(folder, boot.get("VLLM_RPC_BASE_PATH"))
        proc = subprocess.Popen([sys.executable, "-m", module, str(spec)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=boot)
        guard_session(guard_proc, proc.pid)
        try:
            stop = watch(proc, tailer, on_progress, timeout_s, started, signals, stages, should_stop)
        finally:
            if stop is not None and name is not None:  # a process that ended by itself cleaned up already
                on_progress(-1, {"type": "stage", "stage": f"stopping {name} ({signals.name or stop.value})"})
            survivors = stop_session(proc, signals=signals)
            release_guard(guard_proc)  # it recorded what the session held until the end
            record = record_file(folder)
            removed = tuple(leftovers.remove(leftovers.recorded(record), record))
    for rank, event in tailer.poll():
        on_progress(rank, event)
    if removed and name is not None:
        on_progress(-1, {"type": "stage", "stage": f"removed what {name} left behind: {', '.join(removed)}"})
    return Finished(stop=stop, exit_code=proc.returncode, survivors=survivors, elapsed_s=time.monotonic() - started,
                    removed=removed)
