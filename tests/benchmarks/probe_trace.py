"""Where does a traced selftest rank spend the seconds an untraced one does not? (H200 only.)

bench_trace measured `kvaudit selftest --trace` at ~2× the untraced wall even after the first
snapshot stopped importing torch._inductor. This runs one selftest rank in-process-per-mode
(`python -X importtime -m cProfile -m kvaudit.engines.selftest.rank SPEC 0`), traced and
untraced, and prints one JSON line per mode:

    wall_s         the rank process, start to exit
    timeline       per phase: seconds inside the phase, and seconds from its start event to its
                   record (the phase, the probe's settle and, when traced, `tracer.sites`)
    top_cumulative the 25 functions with the most cumulative time (cProfile)
    top_imports    the 15 slowest imports (-X importtime, cumulative µs)
    compiler_modules_imported  how many torch._inductor / torch._dynamo modules were imported

Run: python tests/benchmarks/probe_trace.py [--out DIR] > probe-trace.jsonl
"""

from __future__ import annotations

import argparse
import io
import json
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(mode: str, out: Path, device: str = "cuda") -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"probe-trace-{mode}-"))
    (work / "journal").mkdir()
    spec = work / "spec.json"
    spec.write_text(json.dumps({"device": device, "world_size": 1, "gpu_memory_utilization": 0.98,
                                "verify": False, "repeat": 1, "sizing": "kvaudit", "trace": mode == "traced",
                                "owners": [], "journal_dir": str(work / "journal")}))
    prof = out / f"probe-trace-{mode}.prof"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "cProfile", "-o", str(prof),
                           "-m", "kvaudit.engines.selftest.rank", str(spec), "0"],
                          capture_output=True, text=True, env=None)
    wall = time.perf_counter() - start
    result: dict = {"mode": mode, "rc": proc.returncode, "wall_s": round(wall, 2)}
    if proc.returncode != 0:
        result["stderr_tail"] = proc.stderr[-2000:]
        return result
    events = [json.loads(line) for line in (work / "journal" / "rank0.jsonl").read_text().splitlines() if line]
    started: dict[str, float] = {}
    timeline = []
    first = events[0]["t"]
    for e in events:
        if e.get("type") == "start":
            started[e["phase"]] = e["t"]
        elif e.get("type") == "phase":
            timeline.append({"phase": e["name"], "at_s": round(started.get(e["name"], e["t"]) - first, 2),
                             "inside_s": e.get("seconds"),
                             "start_to_record_s": round(e["t"] - started.get(e["name"], e["t"]), 3),
                             "sites": len(e.get("sites") or ())})
    result["timeline"] = timeline
    text = io.StringIO()
    stats = pstats.Stats(str(prof), stream=text)
    rows = []
    for (file, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():
        rows.append((cumtime, tottime, calls, f"{Path(file).name}:{line}:{func}"))
    rows.sort(reverse=True)
    result["top_cumulative"] = [f"{c:.3f}s cum {t:.3f}s own {n}x {name}" for c, t, n, name in rows[:25]]
    own = sorted(rows, key=lambda r: r[1], reverse=True)
    result["top_own"] = [f"{t:.3f}s own {n}x {name}" for _c, t, n, name in own[:15]]
    imports = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            parts = [p.strip() for p in line[len("import time:"):].split("|")]
            if parts[1].isdigit():
                imports.append((int(parts[1]), parts[2]))
    imports.sort(reverse=True)
    result["top_imports"] = [f"{us / 1e6:.3f}s {name}" for us, name in imports[:15]]
    result["compiler_modules_imported"] = sum(name.strip().startswith(("torch._inductor", "torch._dynamo"))
                                              for _us, name in imports)
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--device", default="cuda", help="cpu: only to check the script (no trace)")
    parser.add_argument("modes", nargs="*", default=["untraced", "traced"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for mode in args.modes:
        print(json.dumps(run(mode, args.out, args.device)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
