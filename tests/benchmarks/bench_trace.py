"""Overhead of `--trace`: wall time of a traced `kvaudit selftest` against an untraced one, in the
same run, interleaved (untraced, traced, traced, untraced, ...); goal ≤ 1.3×.

    python tests/benchmarks/bench_trace.py [--pairs 2] [--json PATH]

Needs a CUDA GPU (the selftest's planted workload); prints the medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL = 1.3


def selftest(traced: bool, out: Path) -> float:
    args = [sys.executable, "-m", "kvaudit", "selftest", "--gmu", "0.98", "-f", "json", "-o", str(out)]
    if traced:
        args.append("--trace")
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"selftest {'traced' if traced else 'untraced'} exited {proc.returncode}: "
                         f"{proc.stderr.strip()[-500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2, help="untraced/traced pairs (order alternates)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"untraced": [], "traced": []}
    order = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            for traced in ((False, True) if i % 2 == 0 else (True, False)):
                name = "traced" if traced else "untraced"
                elapsed = selftest(traced, Path(tmp) / f"{name}{i}.json")
                times[name].append(elapsed)
                order.append(f"{name} {elapsed:.1f} s")
                print(f"{name:>9} #{len(order)}: {elapsed:6.1f} s", flush=True)
    u, t = statistics.median(times["untraced"]), statistics.median(times["traced"])
    ratio = t / u
    print(f"traced / untraced selftest wall = {ratio:.3f} (medians {t:.1f} s / {u:.1f} s; goal <= {GOAL}: "
          f"{'met' if ratio <= GOAL else 'NOT met'})")
    if args.json:
        import torch
        args.json.write_text(json.dumps({
            "machine": {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                        "python": platform.python_version()},
            "runs": order, "untraced_median_s": u, "traced_median_s": t, "ratio": ratio, "goal": GOAL}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
