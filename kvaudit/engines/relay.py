"""Journals without a shared file system: the supervisor's side, pure Python (no torch, no vllm).

Each rank's journal is one sequence of events. On the node the supervisor runs on, a rank
appends it to `JOURNAL_DIR/rankN.jsonl` (the fast path). A rank on another node cannot: its
events travel through the torch.distributed store that vLLM's own distributed start-up
already runs (the TCPStore every rank connects to, hosted by global rank 0 at vLLM's
`distributed_init_method` or `--master-addr:--master-port`), and global rank 0, on the
supervisor's node, copies them into `JOURNAL_DIR/relay/rankN.jsonl`
(`kvaudit.engines.vllm.transport`). Both files hold the same sequence, so this module merges
them by position; either may be ahead.

Besides a rank's own events, its relay file can end with a marker the rank could not write:
`died` (the rank's node saw its process end: exit code or signal) or `lost` (its heartbeat in
the store stopped for LOST_AFTER_S: its node or network is gone).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kvaudit.engines.sequence import read_journal

RELAY_DIR = "relay"
"""Below the journal folder: the relay's copy of each remote rank's journal."""
KEY_PREFIX = "kvaudit/journal/"
"""Every key kvaudit writes to vLLM's store starts with this (vLLM's own keys do not)."""
LOST_ENV = "KVAUDIT_LOST_AFTER_S"
LOST_AFTER_S = 20.0
"""A rank whose heartbeat in the store has not moved for this long is reported lost."""
STOP_EVENTS = ("died", "lost")
"""Markers that end a rank's journal from outside it; the supervisor stops the boot on them."""


def count_key(rank: int) -> str:
    return f"{KEY_PREFIX}n/{rank}"


def event_key(rank: int, index: int) -> str:
    return f"{KEY_PREFIX}e/{rank}/{index}"


def beat_key(rank: int) -> str:
    return f"{KEY_PREFIX}beat/{rank}"


DONE_KEY = f"{KEY_PREFIX}done"
"""Set by global rank 0 once the supervisor has every record: the other nodes may stop."""


def lost_after_s() -> float:
    try:
        return max(float(os.environ.get(LOST_ENV, LOST_AFTER_S)), 1.0)
    except ValueError:
        return LOST_AFTER_S


def encode(event: dict[str, Any]) -> bytes:
    return json.dumps(event, default=str).encode()


def decode(raw: bytes) -> dict[str, Any] | None:
    try:
        event = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return event if isinstance(event, dict) else None


def _rank_of(path: Path) -> int | None:
    stem = path.name.removesuffix(".jsonl")
    if not stem.startswith("rank"):
        return None
    try:
        return int(stem[4:])
    except ValueError:
        return None


def rank_journals(journal_dir: Path) -> dict[int, tuple[list[dict[str, Any]], str]]:
    """Per rank: its journal events and where they came from (`file` or `relay`): the longer of
    the two copies (the same sequence; the relay's may end with a died/lost marker)."""
    out: dict[int, tuple[list[dict[str, Any]], str]] = {}
    markers: dict[int, dict[str, Any]] = {}
    for source, folder in (("file", journal_dir), ("relay", journal_dir / RELAY_DIR)):
        for path in sorted(folder.glob("rank*.jsonl")):
            rank = _rank_of(path)
            if rank is None:
                continue
            events = [e for e in read_journal(path) if e.get("type") not in STOP_EVENTS]
            if (marker := stop_marker(read_journal(path))) is not None:
                markers.setdefault(rank, marker)
            if rank not in out or len(events) > len(out[rank][0]):
                out[rank] = (events, source)
    for rank, marker in markers.items():  # not part of the rank's own sequence: kept whichever copy won
        out[rank][0].append(marker)
    return out


def stop_marker(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The died/lost marker that ends a rank's journal, if any."""
    return next((e for e in reversed(events) if e.get("type") in STOP_EVENTS), None)


class RankTailer:
    """Live progress from both copies of every rank's journal: each event once, in order."""

    def __init__(self, journal_dir: Path):
        self.folders = (journal_dir, journal_dir / RELAY_DIR)
        self.offsets: dict[Path, int] = {}
        self.seen: dict[Path, int] = {}
        self.delivered: dict[int, int] = {}
        self.stopped: dict[int, dict[str, Any]] = {}
        """Ranks whose journal ended with a died/lost marker, and the marker."""

    def poll(self) -> list[tuple[int, dict[str, Any]]]:
        out = []
        for folder in self.folders:
            for path in sorted(folder.glob("rank*.jsonl")):
                rank = _rank_of(path)
                if rank is None:
                    continue
                try:
                    with open(path, "rb") as fh:
                        fh.seek(self.offsets.get(path, 0))
                        chunk = fh.read()
                except OSError:
                    continue
                complete = chunk[: chunk.rfind(b"\n") + 1]
                self.offsets[path] = self.offsets.get(path, 0) + len(complete)
                for line in complete.splitlines():
                    event = decode(line)
                    if event is None:
                        continue
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
