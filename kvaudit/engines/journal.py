"""The per-rank journal: append-only JSON lines, one file per rank (`rank{N}.jsonl`), and the
one reader of that format, whether it reads a whole file after the fact or tails new lines while
the rank runs. The boot process's own `boot.jsonl` has the same format.

A rank on another node cannot write the supervisor's folder: its journal arrives as a second
copy, `relay/rank{N}.jsonl`, copied from vLLM's distributed store by global rank 0
(engines/vllm/transport.py). Both copies hold the same sequence, either may be ahead, so the
readers here merge them by position. A relayed copy can also end with a marker the rank could
not write itself (STOP_EVENTS): `died` (its node saw its process end) or `lost` (its heartbeat
in the store stopped).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

JOURNAL_ENV = "KVAUDIT_JOURNAL_DIR"
RELAY_DIR = "relay"
"""Below the journal folder: the relay's copy of each remote rank's journal."""
STOP_EVENTS = ("died", "lost")
"""Markers that end a rank's journal from outside it; the supervisor stops the boot on them."""


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


def _copies(folder: Path) -> Iterator[tuple[str, int, Path]]:
    """(`file` or `relay`, rank, path) of every rank journal in a folder and its relay copies."""
    for source, where in (("file", folder), ("relay", folder / RELAY_DIR)):
        for path in sorted(where.glob("rank*.jsonl")):
            rank = journal_rank(path)
            if rank is not None:
                yield source, rank, path


def stop_marker(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The died/lost marker that ends a rank's journal, if any."""
    return next((e for e in reversed(events) if e.get("type") in STOP_EVENTS), None)


def read_journals(folder: Path, sources: dict[int, str] | None = None) -> dict[int, list[dict[str, Any]]]:
    """Every rank's journal in a folder, by rank: the longer of its two copies (this node's file,
    the relay's), then the died/lost marker either copy ends with. `sources` gets which copy
    each rank's events came from (`file` or `relay`)."""
    out: dict[int, list[dict[str, Any]]] = {}
    where: dict[int, str] = {}
    markers: dict[int, dict[str, Any]] = {}
    for source, rank, path in _copies(folder):
        events = read_journal(path)
        if (marker := stop_marker(events)) is not None:
            markers.setdefault(rank, marker)
        own = [e for e in events if e.get("type") not in STOP_EVENTS]
        if rank not in out or len(own) > len(out[rank]):
            out[rank], where[rank] = own, source
    for rank, marker in markers.items():  # not part of the rank's own sequence: kept whichever copy won
        out[rank].append(marker)
    if sources is not None:
        sources.update(where)
    return dict(sorted(out.items()))


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
    """Reads new lines of every rank's journal as they are appended: each event once, in order,
    from whichever copy (this node's file, the relay's) has it first; a died/lost marker once."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.tails: dict[Path, Tail] = {}
        self.seen: dict[Path, int] = {}
        self.delivered: dict[int, int] = {}
        self.stopped: dict[int, dict[str, Any]] = {}
        """Ranks whose journal ended with a died/lost marker, and the marker."""

    def poll(self) -> list[tuple[int, dict[str, Any]]]:
        out = []
        for _, rank, path in _copies(self.folder):
            tail = self.tails.setdefault(path, Tail(path))
            for event in parse_events(tail.read()):
                if event.get("type") in STOP_EVENTS:  # a marker from outside the rank: once, at any index
                    if rank not in self.stopped:
                        self.stopped[rank] = event
                        out.append((rank, event))
                    continue
                index = self.seen.get(path, 0)
                self.seen[path] = index + 1
                if index < self.delivered.get(rank, 0):
                    continue  # the other copy delivered it already
                self.delivered[rank] = index + 1
                out.append((rank, event))
        return out
