"""Pathological inputs vs the same bytes as ordinary lines (issue 15, item 3), at full size.

    python tests/benchmarks/bench_hostile.py [--mb 4]
    python tests/benchmarks/bench_hostile.py --inputs [--gib 2]

`--inputs` reads hostile files as `kvaudit` does (input_text.read_text), each in its own process, and
prints its wall time and peak RSS (issue 32, items 3 and 4): a sparse file of the cap's size with
one emoji at its end, an ASCII log with one wide character at its end (a text that widened as it
grew was copied whole then), a file over the cap, endless standard input (/dev/zero), and gzip
files of many one-byte members. Exits 1 when a peak passes twice the input plus a constant, a
refusal takes a second, or one-byte members expand slower than 50 MB/s.

Each case is timed against its baseline: a log of the same size made of ordinary vLLM lines (the
bench_ingest generator), or, for CR-only line ends, the same lines ended by `\\n`; the table
renderer's 4 MB string against the same report with that many bytes of ordinary warning lines;
fact lines each from its own provisionally named worker against the same lines from one worker.
Prints the ratio per case and exits 1 when one is above the goal (2×). Not part of pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "unit"))

from bench_ingest import generate  # noqa: E402
from test_logs_linear import DATA, hostile_logs, many_pids  # noqa: E402

from kvaudit.engines.inputs import load_report  # noqa: E402
from kvaudit.engines.logs import report_from_log_text  # noqa: E402
from kvaudit.errors import BadInputError  # noqa: E402
from kvaudit.input_text import read_text  # noqa: E402
from kvaudit.render.table import TableReporter  # noqa: E402

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


READ = ("import re, sys, time; from pathlib import Path\n"
        "from kvaudit.errors import BadInputError; from kvaudit.input_text import read_text\n"
        "start = time.perf_counter()\n"
        "try:\n    said = f'{len(read_text(sys.argv[1])):,} characters'\n"
        "except BadInputError as exc:\n    said = f'refused: {exc}'\n"
        "print(time.perf_counter() - start, "
        "re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text()).group(1), said)\n")
"""read_text in a fresh process; it prints the seconds read_text took, its own peak RSS (VmHWM, kB:
this process's alone, where ru_maxrss would carry the forking parent's over) and what it read."""
CONSTANT_MB = 150
"""What reading costs besides the text: the interpreter, kvaudit's imports, a few chunks."""
GZIP_GOAL_MB_S = 50


def _read_in_process(path: str, stdin: str | None = None, runs: int = 3) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, what it said) of read_text(path), each run in a fresh process:
    the fastest run's seconds (the machine may be shared), the largest peak."""
    best, peak, said = float("inf"), 0.0, ""
    for _ in range(runs):
        with open(stdin or os.devnull, "rb") as fh:
            out = subprocess.run([sys.executable, "-c", READ, path], stdin=fh, capture_output=True, text=True,
                                 check=True).stdout
        seconds, peak_kb, said = out.strip().split(" ", 2)
        best, peak = min(best, float(seconds)), max(peak, int(peak_kb) / 1024)
    return best, peak, said


def inputs(gib: float) -> int:
    size = int(gib * (1 << 30)) - 4096
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        def sparse(name: str, total: int, tail: bytes) -> Path:
            path = Path(tmp) / name
            with open(path, "wb") as fh:
                fh.truncate(total - len(tail))
                fh.seek(total - len(tail))
                fh.write(tail)
            return path

        def ascii_log(name: str, total: int, tail: bytes) -> Path:
            path = Path(tmp) / name
            line = b"INFO 12-04 10:00:00 [gpu_worker.py:298] ordinary line of a long log\n"
            with open(path, "wb") as fh:
                block = line * ((1 << 20) // len(line))
                for _ in range(total // len(block)):
                    fh.write(block)
                fh.write(tail)
            return path

        emoji = "INFO one emoji at the end \U0001F680\n".encode()
        cases = [
            ("sparse, the cap's size, one emoji at the end", sparse("sparse.log", size, emoji), None, size),
            ("ASCII log, one wide character at the end",
             ascii_log("ascii.log", size // 4, "INFO █\n".encode()), None, size // 4),
            ("a file over the cap (refused before reading)", sparse("over.log", (3 << 30), b"x"), None, 0),
            ("standard input from /dev/zero (refused at the cap)", Path("-"), "/dev/zero", 0),
        ]
        for name, path, stdin, input_bytes in cases:
            seconds, rss, out = _read_in_process(str(path), stdin)
            bound = 2 * input_bytes / 1e6 + CONSTANT_MB
            ok = rss <= bound and (input_bytes or seconds < (5 if stdin else 1))
            failed += [] if ok else [name]
            print(f"{name:52} {seconds:7.2f} s  peak {rss:8.1f} MB (bound {bound:8.1f})  {out[:60]}")
        member = gzip.compress(b"x", mtime=0)
        text = (Path(__file__).parents[1] / "fixtures" / "logs" / "gpu-0.32-v1-tp2-ok.log").read_bytes() * 120
        for name, data in (("gzip, 2.5 M identical one-byte members", member * 2_500_000),
                           ("gzip, a log one byte a member", b"".join(gzip.compress(bytes([c]), mtime=0) for c in text))):
            path = Path(tmp) / "members.gz"
            path.write_bytes(data)
            seconds, rss, out = _read_in_process(str(path))
            rate = len(data) / 1e6 / seconds
            failed += [] if rate >= GZIP_GOAL_MB_S else [name]
            print(f"{name:52} {seconds:7.2f} s  {rate:7.1f} MB/s of {len(data) / 1e6:.1f} MB (goal >= "
                  f"{GZIP_GOAL_MB_S})  peak {rss:.1f} MB")
    print("all within their goals" if not failed else f"over their goals: {failed}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--inputs", action="store_true", help="read hostile input files (issue 32)")
    ap.add_argument("--gib", type=float, default=2.0, help="with --inputs: the size of the large files")
    args = ap.parse_args(argv)
    if args.inputs:
        return inputs(args.gib)
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
