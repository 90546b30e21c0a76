"""The processes of `kvaudit run` boots, found from outside: what the signal and multi-node
stages check is gone afterwards."""

from __future__ import annotations

from pathlib import Path

JOURNAL_ENV = b"KVAUDIT_JOURNAL_DIR="


def processes_under(tmpdir: Path) -> list[tuple[int, str]]:
    """Live processes of the boots whose journal folder is under tmpdir (boot process, engine
    core, workers: all inherit the variable), with their command line."""
    marker = JOURNAL_ENV + str(tmpdir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if marker in environ and state != "Z":
            found.append((int(entry.name), cmd))
    return found
