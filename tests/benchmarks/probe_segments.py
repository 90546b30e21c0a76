"""Why does a traced selftest's load phase take 5 s instead of 0.1 s? (H200 only.)

The traced selftest on the H200 spent 5.1 s in `load` (128 new 64 MiB segments, allocator history
in "state" mode) against 0.1 s untraced. Each variant below runs in a fresh process, does what
the selftest does before its load, then times 128 allocations of 64 MiB (each a new segment)
one by one, frees them, empties the cache and times 128 more; one JSON line per variant:

    off          history never on
    state        history "state", python stacks (the tracer's load mode), nothing before
    all          history "all", python stacks
    nostack      history "all", no stacks
    cpp          history "state", stacks "all" (python + C++)
    tracer       AllocationTracer as the selftest drives it: start, baseline snapshot, begin(load)
    tracer-nosnap  the same without the baseline snapshot
    state-snap   history "state", one raw snapshot first (no stand-in)
    reuse        history "state": 128 allocations that the cache already holds (no new segment)

Run: python tests/benchmarks/probe_segments.py [VARIANT…] > probe-segments.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from fresh_process import each_in_fresh_process

VARIANTS = ("off", "state", "all", "nostack", "cpp", "tracer", "tracer-nosnap", "state-snap", "reuse")
MiB = 1 << 20


def _round(times: list[float]) -> dict:
    return {"first_ms": round(times[0] * 1e3, 2), "median_ms": round(statistics.median(times) * 1e3, 2),
            "max_ms": round(max(times) * 1e3, 2), "total_s": round(sum(times), 3)}


def _allocate(torch, n: int) -> tuple[list, list[float]]:
    keep, times = [], []
    for _ in range(n):
        start = time.perf_counter()
        t = torch.empty(32 * MiB, dtype=torch.bfloat16, device="cuda")
        t.fill_(0.01)
        times.append(time.perf_counter() - start)
        keep.append(t)
    torch.cuda.synchronize()
    return keep, times


def variant(name: str) -> dict:
    import torch
    torch.cuda.init()
    torch.ones(8, device="cuda").mul_(1.0)  # the selftest's preload: kernels loaded before history
    torch.cuda.synchronize()
    out: dict = {"variant": name}
    hist = torch.cuda.memory._record_memory_history
    setup = time.perf_counter()
    if name == "state":
        hist(enabled="state", context="state", stacks="python")
    elif name == "all":
        hist(enabled="all", context="alloc", stacks="python")
    elif name == "nostack":
        hist(enabled="all", context=None)
    elif name == "cpp":
        hist(enabled="state", context="state", stacks="all")
    elif name in ("tracer", "tracer-nosnap"):
        from kvaudit.engines.trace import AllocationTracer
        tracer = AllocationTracer(torch.device("cuda", 0))
        tracer.start()
        tracer.begin("baseline")
        if name == "tracer":
            tracer.sites("baseline")
        tracer.begin("load")
    elif name == "state-snap":
        hist(enabled="state", context="state", stacks="python")
        torch.cuda.memory._snapshot()
    elif name == "reuse":
        keep, _ = _allocate(torch, 128)
        del keep  # the cache keeps the 128 segments
        hist(enabled="state", context="state", stacks="python")
    out["setup_s"] = round(time.perf_counter() - setup, 3)
    out["inductor_imported_by_setup"] = "torch._inductor" in sys.modules
    keep, times = _allocate(torch, 128)
    out["round1"] = _round(times)
    del keep
    torch.cuda.empty_cache()
    keep, times = _allocate(torch, 128)
    out["round2"] = _round(times)
    out["inductor_imported"] = "torch._inductor" in sys.modules
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        print(json.dumps(variant(argv[1])), flush=True)
        return 0
    each_in_fresh_process(__file__, argv or list(VARIANTS), timeout_s=300)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
