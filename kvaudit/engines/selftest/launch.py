"""`python -m kvaudit.engines.selftest.launch SPEC.json`: one process per rank, like torchrun.

If a rank fails, the others are stopped after a grace period, so none waits forever in a
collective. The exit status is the first failing rank's (0 when all succeed)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

GRACE_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    world = int(spec["world_size"])
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
    procs = [subprocess.Popen([sys.executable, "-m", "kvaudit.engines.selftest.rank", argv[1], str(r)],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(world)]
    first_failure: int | None = None
    failed_at: float | None = None
    while any(p.poll() is None for p in procs):
        for p in procs:
            if p.returncode not in (None, 0) and first_failure is None:
                first_failure, failed_at = p.returncode, time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)
    codes = [p.returncode for p in procs]
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
