"""Cold start of `kvaudit diff` (or `show`) vs importing its heavy dependencies alone (pandas, rich, typer).

    python tests/benchmarks/bench_cli.py [--verb diff|show] [--repeat 7] [--a REPORT] [--b REPORT] [--json PATH]

Each repetition starts two fresh interpreters, alternately: `python -m kvaudit diff A B` (stdout to
/dev/null; by default the two example CPU reports, configs/examples/cpu-batch512.json and cpu-batch2048.json) and
`python -c 'import pandas, rich, typer'`, the floor any command built on them pays. One untimed run
of each comes first (bytecode caches, page cache), then the timed ones. Prints the medians and
their ratio against the goal (diff <= 1.5x the imports) and exits 0 either way; `--json` writes
the figures and the machine. Before timing, one `python -X importtime` run of the same diff checks
what is measured: neither torch nor vllm may be imported (docs/design.md: offline commands run
anywhere) and the command must exit 0 or 1. Not part of the pytest run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL = 1.5
HEAVY = ("torch", "vllm")
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
BASELINE = "import pandas, rich, typer"


def diff_command(a: Path, b: Path, verb: str = "diff") -> list[str]:
    """`kvaudit diff A B`, or `kvaudit show A`."""
    return [sys.executable, "-m", "kvaudit", verb, str(a), *([str(b)] if verb == "diff" else [])]


def baseline_command() -> list[str]:
    return [sys.executable, "-c", BASELINE]


def time_once(cmd: list[str]) -> float:
    """Wall time of one fresh interpreter; stdout discarded, a failure (exit > 1) stops the bench."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):   # 0 fits / 1 a finding; 2 and 3 mean the command itself failed
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr.strip()[-2000:]}")
    return elapsed


def import_profile(cmd: list[str]) -> tuple[list[str], list[tuple[str, float]]]:
    """Run `cmd` once under -X importtime: (heavy packages it imported, seconds spent importing
    each top-level package's own modules, largest first)."""
    done = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr.strip()[-2000:]}")
    packages: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or line.rstrip().endswith("imported package"):
            continue
        own, _, name = line[len("import time:"):].split("|")
        top = name.strip().split(".")[0]
        packages[top] = packages.get(top, 0.0) + int(own) / 1e6
    heavy = sorted(p for p in packages if p in HEAVY)
    return heavy, sorted(packages.items(), key=lambda kv: -kv[1])


def machine() -> dict:
    cpu = platform.processor() or ""
    try:   # platform.processor() is often empty on Linux: the model name says more
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"machine": platform.machine(), "processor": platform.processor(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="timed repetitions of each side")
    ap.add_argument("--a", type=Path, default=EXAMPLES / "cpu-batch512.json", help="first report of the diff")
    ap.add_argument("--b", type=Path, default=EXAMPLES / "cpu-batch2048.json", help="second report of the diff")
    ap.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the figures here")
    ap.add_argument("--verb", choices=("diff", "show"), default="diff", help="time `kvaudit show A` instead")
    args = ap.parse_args(argv)
    diff_cmd, base_cmd = diff_command(args.a, args.b, args.verb), baseline_command()

    heavy, packages = import_profile(diff_cmd)
    assert heavy == [], f"`kvaudit {args.verb}` imported {', '.join(heavy)}: the timing would not be of an offline command"

    time_once(diff_cmd)   # untimed: bytecode and page cache, for both sides
    time_once(base_cmd)
    diff_s, base_s = [], []
    for _ in range(args.repeat):
        # Alternate, so that cache warmth and machine noise hit both sides alike.
        diff_s.append(time_once(diff_cmd))
        base_s.append(time_once(base_cmd))
    diff_med, base_med = statistics.median(diff_s), statistics.median(base_s)
    ratio = diff_med / base_med
    met = ratio <= GOAL

    m = machine()
    print(f"machine: {m['machine']} {m['cpu']} {m['cpu_count']} cores, Python {m['python']}")
    what = f"{args.a.name} vs {args.b.name}" if args.verb == "diff" else args.a.name
    print(f"{args.verb}: {what}; torch/vllm imported: none; "
          f"import time by package (own modules): {', '.join(f'{name} {s:.3f} s' for name, s in packages[:5])}")
    print(f"kvaudit {args.verb} (cold):            median {diff_med:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in diff_s)})")
    print(f"import pandas, rich, typer:     median {base_med:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in base_s)})")
    print(f"ratio {args.verb}/imports: {ratio:.3f} (goal <= {GOAL}): {'met' if met else 'NOT met'}")

    if args.json is not None:
        args.json.write_text(json.dumps({
            "machine": m,
            "verb": args.verb,
            "diff_command": ["python", *diff_cmd[1:4], *(p.name for p in ([args.a, args.b] if args.verb == "diff"
                                                                            else [args.a]))],
            "baseline_command": ["python", "-c", BASELINE],
            "repeat": args.repeat,
            "diff_seconds": diff_s, "baseline_seconds": base_s,
            "diff_median_seconds": diff_med, "baseline_median_seconds": base_med,
            "ratio": ratio, "goal": GOAL, "goal_met": met,
            "heavy_imports": heavy,
            "import_seconds_by_package": dict(packages[:10]),
        }, indent=2) + "\n", encoding="utf-8")
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
