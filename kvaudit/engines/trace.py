"""`--trace`: PyTorch's CUDA allocator state with Python stacks, aggregated at phase boundaries.

`AllocationTracer.start()` turns on the allocator's history with Python stacks (each live block
keeps the stack that allocated it). The sequencer calls `begin()` at the start of each phase,
which clears the event log, and `sites(phase)` at its end: one allocator snapshot, whose live
blocks give the phase's end state and whose events (this phase's alone) give the blocks live at
its peak — the transient. Both are attributed by `kvaudit.sites` rules; only aggregates go into
the journal.

Engines turn it on from the environment, so spawned vLLM workers follow the driver's flags:
KVAUDIT_TRACE=1 and KVAUDIT_OWNERS=FILE[:FILE…] (extra rule files). KVAUDIT_TRACE_DUMP=DIR also
writes each phase's live blocks (size, pool, frames; no addresses, no tensor data) as JSON, to
record real traces for the rule engine's tests.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kvaudit.engines.probes.snapshot import allocator_snapshot
from kvaudit.sites import aggregate, live_blocks, load_rules, peak_transient

TRACE_ENV = "KVAUDIT_TRACE"
OWNERS_ENV = "KVAUDIT_OWNERS"
DUMP_ENV = "KVAUDIT_TRACE_DUMP"


def trace_env(trace: bool, owners: tuple[Path, ...]) -> dict[str, str]:
    """What the driver puts in the environment of the processes it starts."""
    if not trace:
        return {}
    return {TRACE_ENV: "1", OWNERS_ENV: os.pathsep.join(str(p) for p in owners)}


class AllocationTracer:
    def __init__(self, device: Any, owners: tuple[Path, ...] = ()):
        import torch
        self.torch = torch
        self.device = device
        self.rules = load_rules(owners)

    @classmethod
    def from_env(cls, device: Any) -> AllocationTracer | None:
        if os.environ.get(TRACE_ENV) != "1":
            return None
        owners = tuple(Path(p) for p in os.environ.get(OWNERS_ENV, "").split(os.pathsep) if p)
        return cls(device, owners)

    MAX_EVENTS = 1_000_000
    """The event log of one phase; a phase with more allocations loses its oldest events."""

    QUIET_PHASES = ("load", "kv")
    """Phases recorded in "state" mode (live blocks keep their stacks, no event log): they allocate
    by the hundred (one tensor per parameter, per KV layer) and have no transient worth a peak, so
    an event log would only hold a stack per allocation for nothing. (Allocation itself costs
    nothing extra in either mode: 128 new 64 MiB segments took 8–14 ms on the H200 with or without
    history, tests/benchmarks/results/h200-probe-segments.jsonl.)"""

    def start(self) -> None:
        self.begin(None)

    def begin(self, phase: str | None) -> None:
        """A new phase: the event log restarts (live blocks keep their stacks)."""
        mode = "state" if phase in self.QUIET_PHASES else "all"
        context = "state" if mode == "state" else "alloc"  # stacks of live blocks; of allocs in the log
        self.torch.cuda.memory._record_memory_history(enabled=mode, context=context, stacks="python",
                                                      max_entries=self.MAX_EVENTS, device=self.device,
                                                      clear_history=True)

    def sites(self, phase: str) -> list[dict[str, Any]]:
        index = self.torch.device(self.device).index
        if index is None:
            index = self.torch.cuda.current_device()
        snapshot = allocator_snapshot(self.torch, self.device)
        segments = [s for s in snapshot["segments"] if s.get("device", index) == index]
        traces = snapshot.get("device_traces") or []
        events = traces[index] if index < len(traces) else []
        blocks = list(live_blocks(segments))
        self._dump(phase, blocks)
        sites = aggregate(phase, blocks, self.rules) + peak_transient(phase, events, self.rules)
        return [asdict(s) for s in sites]

    def _dump(self, phase: str, blocks: list) -> None:
        folder = os.environ.get(DUMP_ENV)
        if folder:
            path = Path(folder) / f"rank{self.torch.distributed.get_rank() if self._distributed() else 0}-{phase}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps([{"size": size, "pool": list(pool), "frames": frames}
                                        for size, pool, frames in blocks]), encoding="utf-8")

    def _distributed(self) -> bool:
        dist = self.torch.distributed
        return dist.is_available() and dist.is_initialized()
