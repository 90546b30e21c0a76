"""The processes of `kvaudit run` boots, found from outside: what the signal and multi-node
stages check is gone afterwards."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

JOURNAL_ENV = b"KVAUDIT_JOURNAL_DIR="


def communicate_all(procs: dict, timeout: float = 300) -> dict:
    """Each started process's (exit code, stdout, stderr), waited for in turn (they ran together); any left
    running when one fails to finish is killed."""
    done = {}
    try:
        for key, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=timeout)
            done[key] = (proc.returncode, stdout, stderr)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def processes_under(tmpdir: Path) -> list[tuple[int, str]]:
    """Live processes of the boots whose journal folder is under tmpdir (boot process, engine
    core, workers: all inherit the variable), with their command line."""
    marker = JOURNAL_ENV + str(tmpdir).encode()
    found = []
    # the environment first, the rest only for a match: the watchers below call this every 0.1 s, beside the
    # boots, and reading three files of every process took 6.5 ms a call (2.0 ms this way, 2-core EPYC)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if marker not in fh.read():
                    continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if state != b"Z":
            found.append((int(name), cmd))
    return found


SHM = Path("/dev/shm")
DEEP_TMPDIR = 72
"""A temp dir this long leaves no room under it for vLLM's IPC socket names (107 characters in all,
process.socket_base): as a batch job's deep TMPDIR, where the boot died before rank 0 journaled (stop
51's xdist run: pytest's temp paths one level deeper)."""
TP2_SUCCESS = ("--tp", "2", "--mtp", "1", "--max-model-len", "1024")
"""The TP2 boots that run to their end (tests/vllm/conftest.py's tp2_ends). max_model_len 1024: the length plays
no part in the tests that read it, and the CPU prefill probe's dense attention over the default 4096 took ~10 s
of a boot (the CI's time, 2-core AMD EPYC)."""

BELOW_THE_BOOT = 256 << 20
"""A budget below what a worker of the embedded model holds before KV on any CPU (its baseline RSS
alone is ~0.6 GiB, with AMX tiles too: configs/examples/cpu-batch512.json), so the boot fails in the
KV check once its workers are up. A fixed GMU is a fraction of the node: 0.03 was 0.71 GiB on the
EPYC's 23.54 GiB node, more than an AMX_MLA boot's ~0.65 GiB non-KV (chunked prefill: no 4096-token
attention), so it would have fit."""


def vllm_processes(tmpdir: Path) -> list[int]:
    """Processes of boots whose temporary folder is under tmpdir: the boot process, vLLM's
    engine core and workers all inherit the journal variable that names it."""
    return [pid for pid, _ in processes_under(tmpdir)]


def shared_memory_mapped(pids: list[int]) -> set[str]:
    """The /dev/shm files these processes map now, read from outside (not kvaudit's own scan)."""
    found = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            if "/dev/shm/" not in line:
                continue
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/dev/shm/") and not parts[5].endswith("(deleted)"):
                found.add(parts[5])
    return found


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def boot_env(tmpdir: Path) -> dict[str, str]:
    # torch's compile cache is torch's, shared by every boot, and kvaudit leaves it where torch
    # puts it by default (the temp dir): keep it out of the folder these tests list.
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(Path(tempfile.gettempdir()) / "torchinductor_kvaudit_tests")
    return dict(os.environ, TMPDIR=str(tmpdir), TORCHINDUCTOR_CACHE_DIR=cache)


@dataclass(frozen=True)
class Watched:
    """A `kvaudit run --tp 2` boot watched from outside until it ended, and what it left."""

    returncode: int
    stdout: str
    stderr: str
    report: dict | None
    mapped: set[str]
    """Every /dev/shm file the boot's processes mapped while it ran."""
    gone_s: float | None
    """Seconds from the stop signal to no vLLM process left (None: no signal)."""
    left: list[int]
    tmp_before: list[str]
    tmp_after: list[str]
    deep_tmpdir: bool
    summary: str


def watch_tp2_boot(end: str, cpu_shm: bool | None, args: tuple[str, ...] = ()) -> Watched:
    """`kvaudit run` of TP2 (TP2_SUCCESS and `args`) in a temp dir of its own, watched from outside: `end` is
    "success" or "failure" (it runs to its end), or a signal's name, sent to kvaudit once the boot's shared
    memory is mapped (vLLM's message queues, and the CPU communicator's where `cpu_shm`); a signalled boot runs
    under a deep temp dir (DEEP_TMPDIR). Then up to 20 s for the guard to take down and remove what is left."""
    signalled = end.startswith("SIG")
    if signalled:
        base = Path(tempfile.mkdtemp(prefix="kvs", dir="/tmp"))
        tmpdir = base / ("t" + "-" * max(0, DEEP_TMPDIR - len(str(base)) - 2))
        tmpdir.mkdir()
    else:  # a short temp dir: vLLM's IPC sockets fit in the work folder (process.boot_env)
        base = tmpdir = Path(tempfile.mkdtemp(prefix="kvs", dir="/tmp"))
    out_dir = Path(tempfile.mkdtemp(prefix="kvs-out"))
    try:
        out = out_dir / "report.json"
        shm_before, tmp_before = listing(SHM), listing(tmpdir)
        proc = subprocess.Popen([sys.executable, "-m", "kvaudit", "run", *TP2_SUCCESS, *args, "-o", str(out),
                                 "-f", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=boot_env(tmpdir))
        mapped: set[str] = set()
        deadline = time.monotonic() + 300
        sent = None
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the boot neither ended nor mapped its shared memory"
            mapped |= shared_memory_mapped(vllm_processes(tmpdir))
            if signalled and any("cpushm" in p for p in mapped) == cpu_shm and any("psm_" in p for p in mapped):
                sent = time.monotonic()
                proc.send_signal(getattr(signal, end))
                break
            time.sleep(0.1)
        gone_s = None
        while proc.poll() is None or (sent is not None and gone_s is None and time.monotonic() - sent < 30):
            mapped |= shared_memory_mapped(pids := vllm_processes(tmpdir))
            if sent is not None and gone_s is None and not pids:
                gone_s = time.monotonic() - sent
            time.sleep(0.1)
        stdout, stderr = proc.communicate(timeout=60)
        # after SIGKILL the guard takes the boot down (5 s grace) and removes what it left
        limit = time.monotonic() + 20
        while (vllm_processes(tmpdir) or listing(tmpdir) != tmp_before or mapped & set(map(str, SHM.iterdir()))) \
                and time.monotonic() < limit:
            time.sleep(0.1)
        tmp_after = listing(tmpdir)
        took = f"{time.monotonic() - sent:.1f} s after the signal" if sent is not None else "at its end"
        summary = (f"{end}: exit {proc.returncode}; vLLM gone {gone_s} s after the signal; mapped {sorted(mapped)}\n"
                   f"  /dev/shm before {shm_before}\n  /dev/shm after ({took}) {listing(SHM)}\n"
                   f"  temp dir before {tmp_before}, after {tmp_after}")
        return Watched(proc.returncode, stdout, stderr, json.loads(out.read_text()) if out.exists() else None,
                       mapped, gone_s, vllm_processes(tmpdir), tmp_before, tmp_after,
                       len(str(tmpdir)) >= DEEP_TMPDIR, summary)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
