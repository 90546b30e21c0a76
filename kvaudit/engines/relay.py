"""Journals without a shared file system: what kvaudit keeps in vLLM's distributed store, pure
Python (no torch, no vllm).

Each rank's journal is one sequence of events. On the node the supervisor runs on, a rank
appends it to `JOURNAL_DIR/rankN.jsonl` (the fast path). A rank on another node cannot: its
events travel through the torch.distributed store that vLLM's own distributed start-up
already runs (the TCPStore every rank connects to, hosted by global rank 0 at vLLM's
`distributed_init_method` or `--master-addr:--master-port`), and global rank 0, on the
supervisor's node, copies them into `JOURNAL_DIR/relay/rankN.jsonl`
(`kvaudit.engines.vllm.transport`). The supervisor merges the two copies
(`kvaudit.engines.journal`: read_journals, JournalTailer). This module names the keys and the
bytes of an event in the store, and how long a silent heartbeat means `lost`.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

KEY_PREFIX = "kvaudit/journal/"
"""Every key kvaudit writes to vLLM's store starts with this (vLLM's own keys do not)."""
LOST_ENV = "KVAUDIT_LOST_AFTER_S"
LOST_AFTER_S = 20.0
"""A rank whose heartbeat in the store has not moved for this long is reported lost."""


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


class Poller:
    """A daemon thread running the subclass's `_run` loop (which waits on `_stop` between its
    looks) from `start()` until `stop()`: node 0's relay and node K's watcher."""

    thread_name = "kvaudit-poller"

    def __init__(self) -> None:
        self._stop = threading.Event()

    def start(self):  # -> the subclass, for `Relay(…).start()`
        threading.Thread(target=self._run, daemon=True, name=self.thread_name).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        raise NotImplementedError
