"""The CUDA allocator's snapshot, without importing torch's compiler stack as a side effect, and
the per-pool totals of its segments (CUDA graph pools are private pools)."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class _InductorStandIn(types.ModuleType):
    """torch._inductor while an allocator snapshot runs in a process that never imported it. It
    has no `codecache`, so torch's symbolizer skips the mapping; any other attribute (another
    thread reaching for inductor in that instant) imports the real module, which also replaces
    this one on torch, and comes from it."""

    def __getattr__(self, name: str) -> Any:
        if name == "codecache":
            raise AttributeError(name)
        return getattr(importlib.import_module("torch._inductor"), name)


def allocator_snapshot(torch: Any, device: Any = None) -> dict[str, Any]:
    """torch.cuda.memory._snapshot(), without importing torch's compiler stack as a side effect.

    With allocator history on, a snapshot symbolizes the stacks of live blocks, and to name the
    source lines of inductor-generated code torch's symbolizer asks `hasattr(torch, "_inductor")`
    (torch/csrc/profiler/python/combined_traceback.cpp). torch answers that lazy attribute by
    importing torch._inductor and torch._dynamo: 3.2–6.2 s on the H200 image (it compiles them
    from source), paid by the first snapshot that has stacks to symbolize in any process that
    has not imported them. Such a process has run no inductor code, so no stack can hold any: for
    the length of the call a stand-in without `codecache` answers the question, and torch skips
    the mapping it would have found empty."""
    if "torch._inductor" in sys.modules or "_inductor" in vars(torch):
        return torch.cuda.memory._snapshot(device)
    stand_in = _InductorStandIn("torch._inductor")
    torch._inductor = stand_in
    try:
        return torch.cuda.memory._snapshot(device)
    finally:
        if vars(torch).get("_inductor") is stand_in:
            del torch._inductor


def pool_totals(segments: list[dict[str, Any]], device: int, pool: Any = None) -> tuple[int, int]:
    """(reserved, allocated) bytes of the allocator segments (a snapshot's `segments`) of one
    private pool on one device, or of every private pool when `pool` is None; pool (0, 0) is the
    default pool. Reserved counts the pages a pool holds free (a live pool never returns them);
    allocated, the blocks still in use."""
    want = tuple(pool) if pool is not None else None
    reserved = allocated = 0
    for seg in segments:
        if seg.get("device") not in (None, device):
            continue
        seg_pool = tuple(seg.get("segment_pool_id") or (0, 0))
        if seg_pool == (0, 0) or (want is not None and seg_pool != want):
            continue
        reserved += int(seg.get("total_size") or 0)
        allocated += int(seg.get("allocated_size") or 0)
    return reserved, allocated
