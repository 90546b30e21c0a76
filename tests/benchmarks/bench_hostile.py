"""Pathological inputs vs the same bytes as ordinary lines (issue 15, item 3), at full size.

    python tests/benchmarks/bench_hostile.py [--mb 4]

Each case is timed against its baseline: a log of the same size made of ordinary vLLM lines (the
bench_ingest generator), or, for CR-only line ends, the same lines ended by `\\n`; the table
renderer's 4 MB string against the same report with that many bytes of ordinary warning lines;
fact lines each from its own provisionally named worker against the same lines from one worker.
Prints the ratio per case and exits 1 when one is above the goal (2×). Not part of pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "unit"))

from bench_ingest import generate  # noqa: E402
from test_logs_linear import DATA, hostile_logs, many_pids  # noqa: E402

from kvaudit.engines.logs import report_from_log_text  # noqa: E402
from kvaudit.errors import BadInputError  # noqa: E402
from kvaudit.render.table import TableReporter  # noqa: E402
from kvaudit.engines.inputs import load_report  # noqa: E402
from kvaudit.report import read_text  # noqa: E402

GOAL = 2.0


def _seconds(fn) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _ingest(text: str):
    def run() -> None:
        try:
            report_from_log_text(text, "x.log")
        except BadInputError:
            pass
    return run


def _render(report):
    return lambda: TableReporter(width=100).report(report, io.StringIO())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=4.0)
    args = ap.parse_args(argv)
    size = int(args.mb * 1e6)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ordinary.log"
        generate(path, max(int(args.mb), 1))
        ordinary = read_text(path)[:size]
    base = _seconds(_ingest(ordinary))
    worst = 0.0
    rows = []
    for name, text in hostile_logs(size).items():
        baseline = _seconds(_ingest(text.replace("\r", "\n"))) if "\r" in text else base
        rows.append((name, _seconds(_ingest(text)), baseline))
    hostile, baseline = many_pids(size)
    rows.append(("every fact line its own provisional pid", _seconds(_ingest(hostile)), _seconds(_ingest(baseline))))
    report = load_report(DATA / "run1.json")
    one = dataclasses.replace(report, warnings=("x " * (size // 2),))
    many = dataclasses.replace(report, warnings=tuple(["ordinary warning text " * 4] * (size // 88)))
    rows.append(("table renderer, one 4 MB string", _seconds(_render(one)), _seconds(_render(many))))
    for name, seconds, baseline in rows:
        ratio = seconds / baseline
        worst = max(worst, ratio)
        print(f"{name:48} {seconds:8.3f} s  baseline {baseline:8.3f} s  ratio {ratio:5.2f}")
    print(f"worst ratio {worst:.2f} (goal <= {GOAL})")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
