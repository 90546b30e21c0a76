"""Boots more than one module reads: each runs once per session (the CI's time is the boots')."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tp2_ends() -> dict[str, Future]:
    """The two boots of `kvaudit run --tp 2 --mtp 1 --max-model-len 1024` that run to their end, each watched
    from outside (boot_processes.watch_tp2_boot) in a temp dir of its own: `success`, whose report
    test_run_cpu.py reads and what it left test_signals_cpu.py checks, and `failure`, a budget below the boot's
    own non-KV memory (boot_processes.BELOW_THE_BOOT) that fails in the KV check once the workers and their
    shared memory are up (test_signals_cpu.py). Started together, once a session: each spends a third of its
    time in vLLM's import, in one process, then another (one after the other they took 77-83 s each of the
    CI's 2-core EPYC, 150-163 s in all; together 129-148 s). Neither test asserts a time; the success's
    default GMU reads the node's free memory at its start, when the other boot has not grown."""
    pytest.importorskip("vllm")
    from boot_processes import BELOW_THE_BOOT, watch_tp2_boot
    from node_budget import gmu_for
    with ThreadPoolExecutor(2) as pool:
        return {"success": pool.submit(watch_tp2_boot, "success", None),
                "failure": pool.submit(watch_tp2_boot, "failure", None, ("--gmu", gmu_for(BELOW_THE_BOOT)))}


@pytest.fixture(scope="session")
def tp2_boot(tp2_ends):
    """The `success` boot of tp2_ends (test_run_cpu.py reads its report)."""
    return tp2_ends["success"].result()


@dataclass(frozen=True)
class Refused:
    proc: subprocess.CompletedProcess
    folder: Path
    """The run's own folder (its -o lies there, or it is the run's TMPDIR)."""


REFUSED_AFTER_THE_IMPORT: dict[str, Callable[[Path], tuple[list[str], dict[str, str]]]] = {
    # test_refusals_cpu.py: vLLM refuses the configuration; --trace is refused once vLLM's platform is known
    "kv_cache_dtype": lambda folder: (["-f", "json", "--kv-cache-dtype", "bogus"], {}),
    "trace": lambda folder: (["-f", "json", "--trace"], {}),
    # test_dcp_cpu.py: DCP 2 with attention that returns no LSE, refused before the engine
    "dcp": lambda folder: (["--tp", "2", "--dcp", "2", "-f", "json", "-o", str(folder / "r.json")], {}),
    # test_multinode_cpu.py: the Ray executor on the CPU backend
    "ray": lambda folder: (["--tp", "2", "--", "--distributed-executor-backend", "ray"], {"TMPDIR": str(folder)}),
}
"""`kvaudit run`s refused after vLLM's import, none of which boots: each spends its ~15-20 s importing vLLM,
mostly on one core (one after another they took ~70 s of the CI's 2-core EPYC), so they are started together,
once a session, and each test asserts its own."""


@pytest.fixture(scope="session")
def refused(tmp_path_factory) -> dict[str, Refused]:
    pytest.importorskip("vllm")
    folders = {name: tmp_path_factory.mktemp(f"refused-{name}") for name in REFUSED_AFTER_THE_IMPORT}
    procs = {}
    for name, how in REFUSED_AFTER_THE_IMPORT.items():
        args, env = how(folders[name])
        procs[name] = subprocess.Popen([sys.executable, "-m", "kvaudit", "run", *args], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    from boot_processes import communicate_all
    return {name: Refused(subprocess.CompletedProcess(procs[name].args, *result), folders[name])
            for name, result in communicate_all(procs).items()}
