"""Overhead of `kvaudit run` over a plain `LLM(...)` boot of the same model and settings.

Runs both in the same session, in the order given (default: plain, kvaudit, kvaudit, plain, so
compile caches favour neither), after one untimed boot of each kind (`--no-warm` skips it: a first
boot that compiles the model cold takes minutes and would decide the ratio alone), and prints each
wall time, each kvaudit boot's seconds per phase (from its report) and the ratio of the means. Wall
time is from process start to a ready engine that has shut down again, for both. `--cudagraph-sizes
default` leaves vLLM's own capture sizes (up to 512 on a GPU) in place.

    python tests/benchmarks/bench_run.py                      # embedded model, CPU defaults
    python tests/benchmarks/bench_run.py --gmu 0.9 --orders pkkp --json out.json
    python tests/benchmarks/bench_run.py --model tests/gpu/models/deepseek-v3-2layer-mtp --dummy-weights \
        --mtp 1 --gmu 0.98 --max-model-len 32768 --max-num-seqs 16 --max-num-batched-tokens 8192 \
        --cudagraph-sizes 1,2,4,8,16,24,32,48,64 --orders pkkp      # a real-dimension model (H200)
    python tests/benchmarks/bench_run.py --orders kssk         # the cost of --sweep: s / k
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
        config, _ = cpu_defaults(config)
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
    ap.add_argument("--model", help="a model directory (config.json); default: the embedded model")
    ap.add_argument("--dummy-weights", action="store_true")
    ap.add_argument("--mtp", type=int)
    ap.add_argument("--max-model-len", type=int)
    ap.add_argument("--max-num-seqs", type=int)
    ap.add_argument("--max-num-batched-tokens", type=int)
    ap.add_argument("--cudagraph-sizes")
    ap.add_argument("--orders", default="pkkp", help="p = plain LLM boot, k = kvaudit run, s = kvaudit run --sweep")
    ap.add_argument("--no-warm", dest="warm", action="store_false",
                    help="no untimed boot of each kind first (the compile caches may then be cold)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.cudagraph_sizes == "default":
        args.cudagraph_sizes = None
    from kvaudit.config import build_run_config
    config = build_run_config(model=args.model, dummy_weights=args.dummy_weights, preset=None, passthrough=[],
                              mtp=args.mtp, cudagraph_sizes=args.cudagraph_sizes, tensor_parallel_size=args.tp,
                              gpu_memory_utilization=args.gmu, enforce_eager=args.enforce_eager,
                              max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                              max_num_batched_tokens=args.max_num_batched_tokens)
    env = dict(os.environ, VLLM_ENABLE_STARTUP_PLAN="0")
    walls: dict[str, list[float]] = {"p": [], "k": [], "s": []}
    stages: list[dict[str, float]] = []
    boots: list[dict] = []  # every boot, warm-up ones included: kind, wall, KV, compile cache
    tmp = Path(tempfile.mkdtemp(prefix="kvaudit-bench-"))
    warm = "".join(dict.fromkeys(args.orders)) if args.warm else ""
    for i, kind in enumerate(warm + args.orders):
        timed = i >= len(warm)
        if kind == "p":
            cmd = [sys.executable, "-c", PLAIN, json.dumps(config.to_json())]
        else:
            cmd = [sys.executable, "-m", "kvaudit", "run", "-f", "json", "-o", str(tmp / f"{kind}{i}.json")]
            if kind == "s":
                cmd += ["--sweep"]
            for flag, value in (("--model", args.model), ("--gmu", args.gmu), ("--mtp", args.mtp),
                                ("--max-model-len", args.max_model_len), ("--max-num-seqs", args.max_num_seqs),
                                ("--max-num-batched-tokens", args.max_num_batched_tokens),
                                ("--cudagraph-sizes", args.cudagraph_sizes)):
                if value is not None:
                    cmd += [flag, str(value)]
            if args.tp != 1:
                cmd += ["--tp", str(args.tp)]
            if args.enforce_eager:
                cmd += ["--enforce-eager"]
            if args.dummy_weights:
                cmd += ["--dummy-weights"]
        start = time.perf_counter()
        with open(tmp / f"{kind}{i}.log", "w") as log:
            proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 1):  # 1: kvaudit booted and reported a finding
            print(f"{kind} run {i} exited {proc.returncode}; see {tmp / f'{kind}{i}.log'}", file=sys.stderr)
            return 2  # the folder stays for that log
        label = {"p": "plain LLM()", "k": "kvaudit run", "s": "run --sweep"}[kind]
        phases = _phase_seconds(tmp / f"{kind}{i}.json") if kind != "p" else {}
        # each audited boot's KV: a shortcut under test (KVAUDIT_GC_SECTIONS) must leave it to the block
        kv = _kv_tokens(tmp / f"{kind}{i}.json") if kind != "p" else None
        # and whether vLLM compiled the model in it or loaded it from its cache (a cold first boot can size
        # other KV than the warm ones: docs/evidence.md), the untimed warm-up boots included
        cache = _compile_cache(tmp / f"{kind}{i}.json") if kind != "p" else None
        boots.append({"kind": kind, "timed": timed, "wall_s": round(wall, 1), "kv_tokens": kv, "compile_cache": cache})
        if timed:
            walls[kind].append(wall)
            if phases:
                stages.append({"kind": kind, "kv_tokens": kv, **phases})
        print(f"{label:12} #{i}: {wall:7.1f} s" + ("" if timed else "  (warm-up, not timed)")
              + (("  phases: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items())) if phases else "")
              + (f"  KV {kv:,} tokens" if kv is not None else "")
              + (f"  compile cache {cache}" if cache is not None else ""), flush=True)
    out: dict = {"orders": args.orders, "warm": bool(warm), "walls_s": walls, "phase_seconds": stages,
                 "boots": boots, "config": config.to_json()}
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
    shutil.rmtree(tmp, ignore_errors=True)  # every run succeeded: its reports and logs are in the figures
    return 0


def _phase_seconds(report: Path) -> dict[str, float]:
    """Rank 0's seconds per phase in a kvaudit report ({} when there is none)."""
    try:
        ranks = json.loads(report.read_text(encoding="utf-8")).get("ranks") or []
    except (OSError, ValueError):
        return {}
    return {p["name"]: float(p["seconds"]) for p in (ranks[0].get("phases") or []) if ranks
            and p.get("seconds") is not None}


def _compile_cache(report: Path) -> str | None:
    """Rank 0's compile_cache in a kvaudit report (miss / hit / partial; None where it is not recorded)."""
    try:
        ranks = json.loads(report.read_text(encoding="utf-8")).get("ranks") or []
    except (OSError, ValueError):
        return None
    return ranks[0].get("compile_cache") if ranks else None


def _kv_tokens(report: Path) -> int | None:
    """The report's KV tokens (None when there is no report or no figure)."""
    try:
        tokens = (json.loads(report.read_text(encoding="utf-8")).get("capacity") or {}).get("kv_tokens")
    except (OSError, ValueError):
        return None
    return tokens if isinstance(tokens, int) else None


if __name__ == "__main__":
    sys.exit(main())
