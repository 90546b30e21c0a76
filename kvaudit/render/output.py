"""Writing an output file (`-o PATH`) without harming what is already there.

A regular file (or a new one) is replaced atomically: the text goes to a temporary file created
with O_EXCL under an unpredictable name in the same folder, then renamed over the target, so a
run that dies while writing leaves the old file or none, never half, and no name an attacker
could plant a symlink at in advance. Anything else is written in place: a device (`/dev/null`,
`/dev/full`), a FIFO, `/dev/stdout`. A symlink is written through: its target is replaced, the
link stays.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from kvaudit.errors import UsageError

IN_PLACE_ROOTS = ("/dev/", "/proc/")
"""Paths under these name streams (`/dev/stdout` → `/proc/self/fd/1`), whatever they point at."""


def write_output(path: Path | str, text: str) -> None:
    """Write `text` (UTF-8) to `path`. OSError for what the system refuses; UsageError for a
    path that cannot be an output file."""
    if str(path) in ("", "."):  # typer turns `-o ""` into Path("."), the current folder
        raise UsageError("-o needs a file name, got an empty path")
    data = text.encode("utf-8")
    target = Path(os.path.abspath(path))
    try:
        info = os.stat(target)  # follows a symlink
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise UsageError(f"-o {path}: is a directory; name a file")
    if str(target).startswith(IN_PLACE_ROOTS) or (info is not None and not stat.S_ISREG(info.st_mode)):
        _write_in_place(target, data)
        return
    _replace_atomically(Path(os.path.realpath(target)), data, info)


def _write_in_place(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC if not path.exists() else os.O_WRONLY, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _replace_atomically(target: Path, data: bytes, existing: os.stat_result | None) -> None:
    # mkstemp: O_CREAT | O_EXCL, a random name, never follows a planted symlink
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        # mkstemp creates 0600; keep the mode the file had, or what the umask gives a new one
        if existing is not None:
            mode = stat.S_IMODE(existing.st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
