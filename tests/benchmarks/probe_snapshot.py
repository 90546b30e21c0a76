"""Where does the first allocator snapshot of a traced process spend its seconds? (H200 only.)

`kvaudit selftest --trace` paid a fixed 3.9–5.2 s for the first `torch.cuda.memory._snapshot()` of
each process with allocator history on; later snapshots took under 1 ms. Each variant below runs
in a fresh process (the cost is once per process) and prints one JSON line of timings:

    off        the first snapshot with history never turned on, then a second
    history    history on (python stacks, "all"), 16 allocations, snapshots #1 and #2
    small      the same with max_entries=1000 instead of 1,000,000
    state      history in "state" mode (live blocks keep stacks, no event log)
    nostack    history on ("all") without stacks (context=None): is it the frames?
    warm-off   one snapshot before history is turned on, then history on and a snapshot
    profile    `history` under cProfile: the Python code the first snapshot runs
    thread     history on, a warm-up snapshot in a thread while the main thread computes
    gdb        `history`, with cuda-gdb attached 1.5 s into the first snapshot (native stack)
    tracer     `history`, the snapshots kvaudit takes (probes.allocator_snapshot; the fix: no
               torch._inductor import); reports whether inductor got imported

Run: python tests/benchmarks/probe_snapshot.py [VARIANT…] > results.jsonl
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

from fresh_process import each_in_fresh_process

VARIANTS = ("off", "history", "small", "state", "nostack", "warm-off", "profile", "thread", "gdb", "tracer")


def _enable(torch, mode: str = "all", max_entries: int = 1_000_000) -> None:
    torch.cuda.memory._record_memory_history(enabled=mode, context="state" if mode == "state" else "alloc",
                                             stacks="python", max_entries=max_entries)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return round(time.perf_counter() - start, 4)


def _work(torch, seconds: float) -> int:
    """GPU work with Python in the loop, for `seconds`: how many steps the main thread made."""
    a = torch.randn(2048, 2048, device="cuda")
    steps, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        (a @ a).sum().item()
        steps += 1
    return steps


def variant(name: str) -> dict:
    import torch
    torch.cuda.init()
    out: dict = {"variant": name, "torch": torch.__version__}
    snap = torch.cuda.memory._snapshot
    keep = []

    def alloc() -> None:
        keep.extend(torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(16))

    if name == "off":
        alloc()
        out["first_s"], out["second_s"] = _timed(snap), _timed(snap)
    elif name in ("history", "small", "state"):
        _enable(torch, "state" if name == "state" else "all", 1000 if name == "small" else 1_000_000)
        alloc()
        out["first_s"], out["second_s"] = _timed(snap), _timed(snap)
        s = snap()
        out["trace_events"] = sum(len(t) for t in s["device_traces"])
        out["frames"] = sum(len(e.get("frames") or ()) for t in s["device_traces"] for e in t)
    elif name == "nostack":
        torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=1_000_000)
        alloc()
        out["first_s"], out["second_s"] = _timed(snap), _timed(snap)
    elif name == "warm-off":
        out["before_history_s"] = _timed(snap)
        _enable(torch)
        alloc()
        out["first_s"], out["second_s"] = _timed(snap), _timed(snap)
    elif name == "profile":
        import cProfile
        import io
        import pstats
        _enable(torch)
        alloc()
        prof = cProfile.Profile()
        out["first_s"] = _timed(lambda: prof.runcall(snap))
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(15)
        out["profile"] = text.getvalue().splitlines()[-30:]
    elif name == "thread":
        _enable(torch)
        alloc()
        out["work_alone_steps"] = _work(torch, 3.0)
        took: dict = {}
        thread = threading.Thread(target=lambda: took.setdefault("s", _timed(snap)), daemon=True)
        start = time.perf_counter()
        thread.start()
        out["work_beside_snapshot_steps"] = _work(torch, 3.0)
        thread.join()
        out["thread_snapshot_s"] = took.get("s")
        out["wall_s"] = round(time.perf_counter() - start, 3)
        out["second_s"] = _timed(snap)
    elif name == "tracer":
        from kvaudit.engines.probes.snapshot import allocator_snapshot
        _enable(torch)
        alloc()
        out["first_s"], out["second_s"] = (_timed(lambda: allocator_snapshot(torch)),
                                           _timed(lambda: allocator_snapshot(torch)))
        out["inductor_imported"] = "torch._inductor" in sys.modules
    elif name == "gdb":
        _enable(torch)
        alloc()
        gdb = shutil.which("cuda-gdb")
        stacks: dict = {}

        def attach() -> None:
            time.sleep(1.5)
            proc = subprocess.run([gdb, "-p", str(os.getpid()), "-batch", "-ex", "thread apply all bt 25"],
                                  capture_output=True, text=True, timeout=120)
            stacks["bt"] = [ln for ln in proc.stdout.splitlines() if ln.startswith("#")][:80]
            stacks["err"] = proc.stderr[-500:]

        if gdb:
            threading.Thread(target=attach, daemon=True).start()
        out["first_s"] = _timed(snap)
        time.sleep(0.5)
        out.update(stacks or {"bt": None, "err": "no cuda-gdb"})
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        print(json.dumps(variant(argv[1])), flush=True)
        return 0
    each_in_fresh_process(__file__, argv or list(VARIANTS), timeout_s=100)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
