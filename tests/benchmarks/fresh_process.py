"""The probes' runner: each variant in a fresh interpreter, one JSON line each.

A probe script calls `each_in_fresh_process(__file__, names, timeout_s)` from its main; the runner
starts `python SCRIPT --child NAME` per name, which must print its result as the last line of
stdout, and prints that line with the child's wall time added (or why none came back)."""

from __future__ import annotations

import json
import subprocess
import sys
import time


def each_in_fresh_process(script: str, names: list[str], timeout_s: float) -> None:
    for name in names:
        start = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, script, "--child", name], capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            print(json.dumps({"variant": name, "timeout_s": timeout_s}), flush=True)
            continue
        out = proc.stdout.strip()
        record = (json.loads(out.splitlines()[-1]) if out else
                  {"variant": name, "rc": proc.returncode, "stderr": proc.stderr[-2000:]})
        record["process_wall_s"] = round(time.perf_counter() - start, 2)
        print(json.dumps(record), flush=True)
