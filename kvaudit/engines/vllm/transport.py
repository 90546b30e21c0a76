"""Journals without a shared file system: the worker's side (see kvaudit.engines.relay and
kvaudit.engines.journal).

`RankJournal` is the journal every audit worker writes. It appends to the local file when the
supervisor's journal folder exists on this node (the fast path), and once vLLM's distributed
start-up has run it also publishes every event, the ones before included, to the
torch.distributed store vLLM started (global rank 0 hosts it), with a heartbeat. Global rank 0,
on the supervisor's node, runs the `Relay`: it copies the other ranks' events into the
supervisor's journal folder as they arrive and marks a rank `lost` when its heartbeat stops.
Nothing here may raise into vLLM: a store that cannot be reached turns the channel off.

Node identity (`node_identity`) goes into each rank's first record: host, IP, node rank and the
local device, so a report can say on which node a rank ran.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from kvaudit.engines import relay
from kvaudit.engines.journal import JOURNAL_ENV, RELAY_DIR, STOP_EVENTS, Journal

STORE_TIMEOUT_S = 10.0
BEAT_S = 1.0
RELAY_POLL_S = 0.5


def journal_folder() -> Path | None:
    """The supervisor's journal folder, where it exists and can be written on this node."""
    folder = os.environ.get(JOURNAL_ENV)
    if not folder:
        return None
    path = Path(folder)
    return path if path.is_dir() and os.access(path, os.W_OK) else None


def store_address(worker: Any) -> tuple[str, int] | None:
    """Where vLLM's distributed store listens: --master-addr/--master-port with --nnodes > 1
    (vLLM's multi-node mp executor), else the tcp:// distributed_init_method (the Ray executor,
    a DP group); None for a file:// store (one node: the file fast path covers it)."""
    parallel = getattr(worker, "parallel_config", None)
    if parallel is not None and int(getattr(parallel, "nnodes", 1) or 1) > 1:
        return str(parallel.master_addr), int(parallel.master_port)
    method = str(getattr(worker, "distributed_init_method", "") or "")
    if method.startswith("tcp://"):
        host, _, port = method.removeprefix("tcp://").rpartition(":")
        if host and port.isdigit():
            return host.strip("[]"), int(port)
    return None


def connect(address: tuple[str, int], timeout_s: float = STORE_TIMEOUT_S) -> Any:
    """A client of the store vLLM's rank 0 hosts (torch's public TCPStore API)."""
    import torch.distributed as dist
    return dist.TCPStore(address[0], address[1], is_master=False, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)


class StoreStream:
    """One rank's journal in the store: `n/RANK` counts events, `e/RANK/I` holds event I.
    Writers reserve an index with add() and then set it, so the node's own supervisor can
    append a `died` marker to a rank's stream too."""

    def __init__(self, store: Any):
        self.store = store
        self.lock = threading.Lock()

    def append(self, rank: int, event: dict[str, Any]) -> None:
        with self.lock:
            index = self.store.add(relay.count_key(rank), 1) - 1
            self.store.set(relay.event_key(rank, index), relay.encode(event))

    def beat(self, rank: int) -> None:
        with self.lock:
            self.store.add(relay.beat_key(rank), 1)

    def count(self, rank: int) -> int:
        with self.lock:
            return int(self.store.add(relay.count_key(rank), 0))

    def beats(self, rank: int) -> int:
        with self.lock:
            return int(self.store.add(relay.beat_key(rank), 0))

    def get(self, rank: int, index: int) -> dict[str, Any] | None:
        key = relay.event_key(rank, index)
        with self.lock:
            if not self.store.check([key]):
                return None
            return relay.decode(self.store.get(key))

    def done(self) -> bool:
        with self.lock:
            return bool(self.store.check([relay.DONE_KEY]))

    def set_done(self) -> None:
        with self.lock:
            self.store.set(relay.DONE_KEY, b"1")


class RankJournal(Journal):
    """The audit worker's journal: the local file where there is one, the store once attached."""

    def __init__(self, rank: int):
        folder = journal_folder()
        super().__init__(folder / f"rank{rank}.jsonl" if folder is not None else None)
        self.rank = rank
        self.stream: StoreStream | None = None
        self.published = 0
        self.channel_error: str | None = None
        self.on_error: Any = None
        """Called after an error event is written (rank 0: the relay's last pull)."""
        self._stop = threading.Event()

    def attach(self, stream: StoreStream) -> None:
        """Publish every event so far, then each new one as it is written; beat until released."""
        self.stream = stream
        self._publish()
        threading.Thread(target=self._beat, daemon=True, name="kvaudit-journal-beat").start()

    def write(self, event: dict[str, Any]) -> None:
        super().write(event)
        if self.stream is not None:
            self._publish()
        if event.get("type") == "error" and self.on_error is not None:
            try:
                self.on_error()
            except Exception:
                pass

    def release(self) -> None:
        """The supervisor has this rank's record: stop the heartbeat (a rank that stops now is not lost)."""
        self.write({"type": "released"})
        self._stop.set()

    def _publish(self) -> None:
        stream = self.stream
        if stream is None:
            return
        try:
            while self.published < len(self.events):
                stream.append(self.rank, self.events[self.published])
                self.published += 1
        except Exception as exc:  # the store is gone (its host died): the file, where any, goes on
            self.channel_error = f"{type(exc).__name__}: {exc}"[:300]
            self.stream = None

    def _beat(self) -> None:
        while not self._stop.is_set():
            stream = self.stream
            if stream is None:
                return
            try:
                stream.beat(self.rank)
            except Exception:
                self.stream = None
                return
            self._stop.wait(BEAT_S)


class Relay(relay.Poller):
    """On global rank 0: copies every other rank's journal from the store into the supervisor's
    journal folder (`relay/rankN.jsonl`) and marks ranks whose heartbeat stopped as `lost`."""

    HOLE_S = 5.0
    """An index reserved but never set (its writer died between the two calls) is skipped after this."""
    thread_name = "kvaudit-journal-relay"

    def __init__(self, stream: StoreStream, folder: Path, ranks: list[int]):
        super().__init__()
        self.stream, self.ranks = stream, ranks
        self.folder = folder / RELAY_DIR
        self.folder.mkdir(exist_ok=True)
        self.next = {r: 0 for r in ranks}
        self.holes: dict[int, float] = {}
        self.beats = {r: -1 for r in ranks}
        self.moved = {r: time.monotonic() for r in ranks}
        self.ended: set[int] = set()
        self.lost_after = relay.lost_after_s()
        self.lock = threading.Lock()

    def _run(self) -> None:
        while not self._stop.wait(RELAY_POLL_S):
            try:
                self.pull()
            except Exception:
                return  # the store went down with this process's distributed state

    def pull(self) -> None:
        """One pass: new events of every rank, then the heartbeats."""
        with self.lock:
            now = time.monotonic()
            for rank in self.ranks:
                self._copy(rank, now)
                if rank in self.ended:
                    continue
                beats = self.stream.beats(rank)
                if beats != self.beats[rank]:
                    self.beats[rank], self.moved[rank] = beats, now
                elif now - self.moved[rank] > self.lost_after:
                    self.ended.add(rank)
                    self._write(rank, {"t": round(time.time(), 3), "type": "lost", "rank": rank,
                                       "silent_s": round(now - self.moved[rank], 1)})

    def final(self, wait_s: float = 1.0) -> None:
        """This rank is failing: give the other ranks' last events (a `died` marker from their
        node) a moment to arrive, and copy them before this process, and the store, go down."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.pull()
            except Exception:
                return
            if time.monotonic() >= deadline:
                return
            time.sleep(0.25)

    def _copy(self, rank: int, now: float) -> None:
        count = self.stream.count(rank)
        while self.next[rank] < count:
            event = self.stream.get(rank, self.next[rank])
            if event is None:
                first = self.holes.setdefault(rank, now)
                if now - first < self.HOLE_S:
                    return
                self.next[rank] += 1  # a writer died between reserving this index and setting it
                self.holes.pop(rank, None)
                continue
            self.holes.pop(rank, None)
            self.next[rank] += 1
            if event.get("type") in ("released", *STOP_EVENTS):
                self.ended.add(rank)
            self._write(rank, event)

    def _write(self, rank: int, event: dict[str, Any]) -> None:
        with open(self.folder / f"rank{rank}.jsonl", "ab") as fh:
            fh.write(relay.encode(event) + b"\n")


def node_identity(worker: Any) -> dict[str, Any]:
    """Where this rank runs: host name, the IP vLLM uses for it, vLLM's node rank (mp
    multi-node) and the local device index (CUDA device; NUMA node on the CPU backend)."""
    parallel = getattr(worker, "parallel_config", None)
    nnodes = int(getattr(parallel, "nnodes", 1) or 1) if parallel is not None else 1
    try:
        from vllm.utils.network_utils import get_ip
        ip = get_ip()
    except Exception:
        ip = None
    device = getattr(worker, "device", None)
    index = getattr(device, "index", None)
    if index is None and getattr(worker, "_kva_backend", None) == "cpu":
        index = getattr(getattr(worker, "_kva_probe", None), "node", None)
    local_rank = getattr(worker, "local_rank", None)
    return {"host": socket.gethostname(), "node_ip": ip,
            "node_rank": int(parallel.node_rank) if nnodes > 1 else None,
            "local_rank": int(local_rank) if isinstance(local_rank, int) else None,
            "device_index": int(index) if isinstance(index, int) else None}


def attach(worker: Any, journal: RankJournal) -> Relay | None:
    """After vLLM's distributed start-up: rank 0 with the supervisor's folder relays; every other
    rank publishes. Returns the relay (rank 0) or None. Never raises."""
    address = store_address(worker)
    if address is None:
        return None
    try:
        stream = StoreStream(connect(address))
    except Exception as exc:
        journal.channel_error = f"{type(exc).__name__}: {exc}"[:300]
        return None
    world = int(getattr(worker.parallel_config, "world_size", 1) or 1)
    if worker.rank == 0:
        folder = journal_folder()
        if folder is None:
            return None
        return Relay(stream, folder, [r for r in range(world) if r != 0]).start()
    journal.attach(stream)
    return None

