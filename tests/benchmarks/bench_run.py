"""Overhead of `kvaudit run` over a plain `LLM(...)` boot of the same model and settings.

Runs both in the same session, in the order given (default: plain, kvaudit, kvaudit, plain, so
compile caches favour neither), and prints each wall time and the ratio of the means. Wall time
is from process start to a ready engine that has shut down again, for both.

    python tests/benchmarks/bench_run.py                      # embedded model, CPU defaults
    python tests/benchmarks/bench_run.py --gmu 0.9 --orders pkkp --json out.json
    python tests/benchmarks/bench_run.py --orders kssk         # the cost of --sweep: s / k
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAIN = r'''
import json, sys, time
if __name__ == "__main__":
    from kvaudit.config import config_from_json
    from kvaudit.engines.vllm.boot import cpu_defaults, bind_cpu_threads, engine_kwargs, shutdown
    from vllm import LLM
    from vllm.platforms import current_platform
    config = config_from_json(json.loads(sys.argv[1]))
    if current_platform.is_cpu():
        config = cpu_defaults(config)
        bind_cpu_threads(config.tensor_parallel_size or 1)
    kwargs = engine_kwargs(config, "auto")
    llm = LLM(**kwargs)
    shutdown(llm)
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gmu", type=float)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--enforce-eager", action="store_true", default=None)
    ap.add_argument("--orders", default="pkkp", help="p = plain LLM boot, k = kvaudit run, s = kvaudit run --sweep")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from kvaudit.config import build_run_config
    config = build_run_config(model=None, dummy_weights=False, preset=None, passthrough=[], mtp=None,
                              cudagraph_sizes=None, tensor_parallel_size=args.tp, gpu_memory_utilization=args.gmu,
                              enforce_eager=args.enforce_eager)
    env = dict(os.environ, VLLM_ENABLE_STARTUP_PLAN="0")
    walls: dict[str, list[float]] = {"p": [], "k": [], "s": []}
    tmp = Path(tempfile.mkdtemp(prefix="kvaudit-bench-"))
    for i, kind in enumerate(args.orders):
        if kind == "p":
            cmd = [sys.executable, "-c", PLAIN, json.dumps(config.to_json())]
        else:
            cmd = [sys.executable, "-m", "kvaudit", "run", "-f", "json", "-o", str(tmp / f"{kind}{i}.json")]
            if kind == "s":
                cmd += ["--sweep"]
            if args.gmu is not None:
                cmd += ["--gmu", str(args.gmu)]
            if args.tp != 1:
                cmd += ["--tp", str(args.tp)]
            if args.enforce_eager:
                cmd += ["--enforce-eager"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / f"{kind}{i}.log", "w"))
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 1):  # 1: kvaudit booted and reported a finding
            print(f"{kind} run {i} exited {proc.returncode}; see {tmp / f'{kind}{i}.log'}", file=sys.stderr)
            return 2
        walls[kind].append(wall)
        label = {"p": "plain LLM()", "k": "kvaudit run", "s": "run --sweep"}[kind]
        print(f"{label:12} #{i}: {wall:7.1f} s", flush=True)
    out: dict = {"orders": args.orders, "walls_s": walls, "config": config.to_json()}
    if walls["k"] and walls["p"]:
        out["ratio"] = statistics.mean(walls["k"]) / statistics.mean(walls["p"])
        print(f"kvaudit run / plain LLM boot = {out['ratio']:.3f}  (means of {len(walls['k'])} and "
              f"{len(walls['p'])} runs, order {args.orders})")
    if walls["s"] and walls["k"]:
        out["sweep_ratio"] = statistics.mean(walls["s"]) / statistics.mean(walls["k"])
        print(f"kvaudit run --sweep / kvaudit run = {out['sweep_ratio']:.3f}  (means of {len(walls['s'])} and "
              f"{len(walls['k'])} runs, order {args.orders})")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
