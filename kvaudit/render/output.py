"""Output files (`-o PATH`, `run --log PATH`): checked before any work, written the way a shell's
`>` writes, and never by an open that can block.

`check_output` refuses at once, as a usage error naming the fix, what cannot take the file: an
empty name, a directory, a FIFO, device or socket (a FIFO with no reader would block the open
forever, after a 40-second boot), a missing or unwritable directory, a name longer than the file
system allows, a read-only file, and an input of the same command (`ingest X.log -o X.log`).
`-` is standard output.

`write_output` writes an existing file through, as `>` does: same inode, so its owner, mode and
hard links stay, and a symlink's target is written. A new file is written under a temporary name
of fixed length (`.kvaudit-XXXXXXXX.tmp`, created with O_EXCL, so no planted symlink is followed
and a 255-byte output name still fits) and renamed into place, so a run that dies while writing
leaves no half file.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from kvaudit.errors import UsageError

STDOUT = "-"
"""`-o -`: the report on standard output."""
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def is_stdout(path: Path | str | None) -> bool:
    return path is not None and str(path) == STDOUT


def check_output(path: Path | str, *, flag: str = "-o", inputs: Iterable[Path | str] = (),
                 stdout_ok: bool = True) -> None:
    """Refuse (UsageError) an output path that cannot take a file as a shell's `>` would, or that
    is one of `inputs`; see the module's docstring."""
    name = str(path)
    if name in ("", "."):  # typer turns `-o ""` into Path("."), the current folder, so the two look alike
        raise UsageError(f"{flag} needs a file name, got the current folder (or an empty path)")
    if name == STDOUT:
        if stdout_ok:
            return
        raise UsageError(f"{flag} needs a file name: standard output (-) carries the report")
    try:
        info = os.stat(path)  # follows a symlink: its target is what gets written
    except FileNotFoundError:
        info = None
    except NotADirectoryError:
        raise UsageError(f"{flag} {name}: a part of the path is a file, not a directory") from None
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise UsageError(f"{flag} {name}: {exc.strerror or exc}") from None
        info = None  # _check_new says which part is too long
    if info is None:
        _check_new(path, flag)
        return
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{flag} {name}: is a directory; name a file")
    kind = next((what for test, what in _KINDS if test(info.st_mode)), None)
    if kind is not None:
        raise UsageError(f"{flag} {name}: {kind}, not a file: name a regular file"
                         + (", or -o - for standard output" if stdout_ok else ""))
    for source in inputs:
        if str(source) != STDOUT and _same_file(info, source):
            raise UsageError(f"{flag} {name} is the input {source} itself: name another file")
    if not stat.S_IMODE(info.st_mode) & 0o222 or not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {name}: read-only (mode {stat.S_IMODE(info.st_mode):04o}); name another file")


def _same_file(info: os.stat_result, other: Path | str) -> bool:
    try:
        theirs = os.stat(other)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (theirs.st_dev, theirs.st_ino)


def _check_new(path: Path | str, flag: str) -> None:
    """A file to create: its folder (a dangling symlink's target's) exists and takes it."""
    target = Path(os.path.abspath(path))
    try:
        target = Path(os.path.realpath(path))
    except OSError:
        pass
    folder = target.parent
    try:
        info = os.stat(folder)
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: the folder {folder} does not exist; create it or name another") from None
    except OSError as exc:
        raise UsageError(f"{flag} {path}: the folder {folder}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{flag} {path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: the folder {folder} is not writable; name another file")
    try:
        most = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        most = 255
    if len(os.fsencode(target.name)) > most:
        raise UsageError(f"{flag} {path}: the file name is longer than the {most} bytes its file system allows")


def write_output(path: Path | str, text: str, *, flag: str = "-o", inputs: Iterable[Path | str] = (),
                 replace: bool = False) -> None:
    """Write `text` (UTF-8) to `path` (`-`: standard output). UsageError for a path that cannot be
    an output file (checked again: a boot takes minutes); OSError for what the system refuses.
    An existing file is written through, as the shell's `>` does (inode, owner, mode and links
    kept); `replace`: replaced by a whole new file instead, atomically, with the old one's mode
    (a Prometheus textfile, which a collector may read at any moment)."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    check_output(path, flag=flag, inputs=inputs)
    data = text.encode("utf-8")
    target = Path(os.path.realpath(path))
    if not os.path.exists(path):
        _create(target, data)
    elif replace:
        _create(target, data, mode=stat.S_IMODE(os.stat(target).st_mode))
    else:
        _write_through(path, data, flag)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_through(path: Path | str, data: bytes, flag: str) -> None:
    # O_NONBLOCK: should a FIFO have taken the file's place since the check, the open fails at
    # once instead of waiting for a reader
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{flag} {path}: not a regular file any more; name a file")
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _create(target: Path, data: bytes, mode: int | None = None) -> None:
    # mkstemp: O_CREAT | O_EXCL, a random name, never follows a planted symlink
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".kvaudit-", suffix=".tmp")
    try:
        if mode is None:
            umask = os.umask(0)  # mkstemp creates 0600; a new file gets what the umask gives, as with `>`
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        _write_all(fd, data)
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


def check_paths(outputs: Iterable[tuple[str, Path | str | None]], inputs: Iterable[tuple[str, Path | str | None]],
                stdout_flags: Iterable[str] = ("-o",)) -> None:
    """Every path a command will read or write, checked before any work (a boot): each input as
    `report.check_input` does, each output as `check_output` does, none the same file as an
    input or as another output. Pairs are (flag, path); a None path is not given."""
    from kvaudit.input_text import check_input
    given_inputs = [(flag, path) for flag, path in inputs if path is not None]
    given_outputs = [(flag, path) for flag, path in outputs if path is not None]
    for flag, path in given_inputs:
        check_input(path, flag)
    stdout_ok = set(stdout_flags)
    for i, (flag, path) in enumerate(given_outputs):
        others = [p for f, p in given_outputs if f != flag]
        check_output(path, flag=flag, inputs=[p for _, p in given_inputs] + others, stdout_ok=flag in stdout_ok)
        for other_flag, other in given_outputs[i + 1:]:
            if str(path) != STDOUT and os.path.realpath(path) == os.path.realpath(other):
                raise UsageError(f"{flag} and {other_flag} name the same file, {path}: name two files")


def model_config(model: str | None) -> Path | None:
    """The config.json kvaudit reads of a local model folder (preflight, the boot), when there is one."""
    if model is None:
        return None
    path = Path(model).expanduser() / "config.json"
    return path if os.path.lexists(path) else None
