"""What a boot creates outside its work folder, found while it runs and removed when it ends.

vLLM keeps state in files that outlive a killed process: its shared-memory message queues
(`/dev/shm/psm_*`, Python's `SharedMemory`, vllm/distributed/device_communicators/
shm_broadcast.py `MessageQueue`), the CPU communicator's `/dev/shm/vllm_dist_*-cpushm_*`
(cpu_communicator.py `_CPUSHMDistributed`), and ZMQ's IPC sockets (`ipc://` under
`VLLM_RPC_BASE_PATH`, network_utils.py `get_open_zmq_ipc_path`). The boot's temporary folder is
kvaudit's work folder (engines/process.py `boot_env`), so everything vLLM, torch and the compiler
put in "the temp dir" goes with it; what lands elsewhere is found here.

`Recorder.scan` looks at what the boot's processes hold (mapped files, open files, bound Unix
sockets) and appends each new path under the watched roots to a journal file, with its device
and inode, as it appears. `remove` deletes those of them still there that are the same file (an
unrelated file that took the name since is left alone). Nothing is guessed from names, and a file
that existed before the boot started is never recorded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

SHM_ROOT = "/dev/shm"
"""Where POSIX shared memory lives on Linux (shm_open, Python's SharedMemory)."""
RECORD_FILE = "created.jsonl"
"""In the boot's journal folder: one `{"type": "created", "path", "dev", "ino"}` line per path,
written as the path appears; `{"type": "removed", "paths"}` when they are gone."""


@dataclass(frozen=True)
class Created:
    """A file the boot created: its path, and the device and inode that make it this file."""

    path: str
    dev: int
    ino: int


def _maps(pid: int) -> Iterator[str]:
    try:
        text = Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith(" (deleted)"):
            yield parts[5]


def _fd_targets(pid: int) -> Iterator[str]:
    """What the process's descriptors point at: paths, or `socket:[INODE]`."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        try:
            yield os.readlink(f"{folder}/{name}")
        except OSError:
            continue


def _unix_socket_paths() -> dict[str, str]:
    """`socket:[INODE]` → the path it is bound to, for every bound Unix socket of this namespace."""
    try:
        lines = Path("/proc/net/unix").read_text(errors="replace").splitlines()[1:]
    except OSError:
        return {}
    out = {}
    for line in lines:
        parts = line.split(None, 7)
        if len(parts) == 8 and parts[7].startswith("/"):
            out[f"socket:[{parts[6]}]"] = parts[7]
    return out


def held_paths(pids: Iterable[int]) -> tuple[set[str], set[str]]:
    """(files, sockets): every path the processes map or hold open, and every path they have
    bound a Unix socket to."""
    files: set[str] = set()
    bound: set[str] = set()
    sockets: dict[str, str] | None = None
    for pid in pids:
        files.update(_maps(pid))
        for target in _fd_targets(pid):
            if target.startswith("/"):
                files.add(target)
            elif target.startswith("socket:["):
                if sockets is None:
                    sockets = _unix_socket_paths()
                if (path := sockets.get(target)) is not None:
                    bound.add(path)
    return files, bound


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path.startswith(root.rstrip("/") + "/") for root in roots)


class Recorder:
    """Appends to `record`, each once and as they appear, the files the boot's processes hold
    directly in `shm` (shared memory) and the Unix sockets they bind under `socket_roots` (where
    vLLM's IPC sockets go), but nothing under `skip` (the work folder, which goes whole). Other
    files they hold (torch's compile cache, the model) are not the boot's to remove."""

    def __init__(self, record: Path, *, shm: str = SHM_ROOT, socket_roots: Iterable[str] = (),
                 skip: Iterable[str] = ()):
        self.record = record
        self.shm = os.path.realpath(shm)
        self.socket_roots = tuple(os.path.realpath(r) for r in socket_roots)
        self.skip = tuple(os.path.realpath(s) for s in skip)
        self.seen: dict[str, Created] = {}
        # what is in shared memory before the boot is not the boot's
        self.before = {(c.dev, c.ino) for c in _listing(self.shm)}

    def _wanted(self, path: str, socket: bool) -> bool:
        if path in self.seen or _under(path, self.skip):
            return False
        if socket:
            return _under(path, self.socket_roots)
        return os.path.dirname(path) == self.shm

    def scan(self, pids: Iterable[int]) -> list[Created]:
        """Record what the processes hold now that was not recorded yet; returns the new ones."""
        files, sockets = held_paths(pids)
        new = []
        for path, socket in sorted([(f, False) for f in files] + [(s, True) for s in sockets]):
            if not self._wanted(path, socket):
                continue
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in self.before:
                continue
            created = Created(path, info.st_dev, info.st_ino)
            self.seen[path] = created
            new.append(created)
        if new:
            _append(self.record, [{"type": "created", "path": c.path, "dev": c.dev, "ino": c.ino} for c in new])
        return new


def _listing(root: str) -> Iterator[Created]:
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        yield Created(entry.path, info.st_dev, info.st_ino)


def _append(record: Path, events: list[dict]) -> None:
    try:
        with open(record, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(e) + "\n" for e in events))
    except OSError:
        pass  # the work folder is gone: the boot is over and kvaudit cleaned up already


def recorded(record: Path) -> list[Created]:
    """The paths a record file names, in the order they appeared."""
    try:
        lines = record.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out: dict[str, Created] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if isinstance(event, dict) and event.get("type") == "created":
            path, dev, ino = event.get("path"), event.get("dev"), event.get("ino")
            if isinstance(path, str) and isinstance(dev, int) and isinstance(ino, int):
                out.setdefault(path, Created(path, dev, ino))
    return list(out.values())


def remove(created: Iterable[Created], record: Path | None = None) -> list[str]:
    """Delete each recorded path that is still the file that was recorded; returns what was
    deleted (and notes it in `record`). Call it once the boot's processes are gone."""
    removed = []
    for c in created:
        try:
            info = os.lstat(c.path)
            if (info.st_dev, info.st_ino) != (c.dev, c.ino):
                continue
            os.unlink(c.path)
        except OSError:
            continue
        removed.append(c.path)
    if removed and record is not None:
        _append(record, [{"type": "removed", "paths": removed}])
    return removed
