"""The per-rank journal: append-only JSON lines, one file per rank (`rank{N}.jsonl`), and the
one reader of that format, whether it reads a whole file after the fact or tails new lines while
the rank runs. The boot process's own `boot.jsonl` has the same format.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

JOURNAL_ENV = "KVAUDIT_JOURNAL_DIR"


class Journal:
    """Append-only JSON lines; each line is flushed as it is written so a rank that dies keeps
    every line it finished."""

    def __init__(self, path: Path | None):
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._fh = open(path, "a", encoding="utf-8", buffering=1) if path is not None else None

    @classmethod
    def for_rank(cls, rank: int) -> Journal:
        folder = os.environ.get(JOURNAL_ENV)
        return cls(Path(folder) / f"rank{rank}.jsonl" if folder else None)

    def write(self, event: dict[str, Any]) -> None:
        event = {"t": round(time.time(), 3), **event}
        self.events.append(event)
        if self._fh is not None:
            self._fh.write(json.dumps(event, default=str) + "\n")
            self._fh.flush()


def parse_events(lines: bytes | str) -> list[dict[str, Any]]:
    """The events of journal lines: a line that is not a JSON object (a torn last line, garbage)
    is skipped."""
    events = []
    for line in lines.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def journal_rank(path: Path) -> int | None:
    """The rank a journal file belongs to (`rank3.jsonl` → 3); None for any other file."""
    try:
        return int(path.stem[4:]) if path.stem.startswith("rank") else None
    except ValueError:
        return None


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a journal; a torn last line (the rank died mid-write) is skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return parse_events(text)


def read_journals(folder: Path) -> dict[int, list[dict[str, Any]]]:
    """Every rank's journal in a folder, by rank."""
    out = {}
    for path in sorted(folder.glob("rank*.jsonl")):
        rank = journal_rank(path)
        if rank is not None:
            out[rank] = read_journal(path)
    return out


class Tail:
    """New complete lines of one file as they are appended, at most `limit` bytes per read (a
    read that fills the limit is taken whole: the caller only looks for phrases in it)."""

    def __init__(self, path: Path, limit: int | None = None):
        self.path, self.limit = path, limit
        self.offset = 0

    def read(self) -> bytes:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read() if self.limit is None else fh.read(self.limit)
        except OSError:
            return b""
        complete = chunk if self.limit is not None and len(chunk) >= self.limit else chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        return complete


class JournalTailer:
    """Reads new lines of every rank's journal as they are appended."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.tails: dict[Path, Tail] = {}

    def poll(self) -> list[tuple[int, dict[str, Any]]]:
        out = []
        for path in sorted(self.folder.glob("rank*.jsonl")):
            rank = journal_rank(path)
            if rank is None:
                continue
            tail = self.tails.setdefault(path, Tail(path))
            out.extend((rank, event) for event in parse_events(tail.read()))
        return out
