"""GPU tests: skipped without CUDA. They run on the H200 through the device tool; each boot
writes its report (and vLLM's log) to $KVAUDIT_GPU_RESULTS when set, as committed evidence."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def has_cuda() -> bool:
    if not (Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi")):
        return False
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def has_vllm() -> bool:
    try:
        import importlib.util
        return importlib.util.find_spec("vllm") is not None
    except Exception:
        return False


requires_cuda = pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")
requires_vllm = pytest.mark.skipif(not (has_cuda() and has_vllm()), reason="needs a CUDA GPU and vLLM")


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory) -> Path:
    folder = os.environ.get("KVAUDIT_GPU_RESULTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("gpu-results")
    path.mkdir(parents=True, exist_ok=True)
    return path


def kvaudit(*args: str, timeout: float = 900) -> tuple[int, dict | None, str]:
    """Run the CLI as a user would; return (exit code, report JSON from -o, stderr)."""
    out = None
    if "-o" in args:
        out = Path(args[args.index("-o") + 1])
    proc = subprocess.run([sys.executable, "-m", "kvaudit", *args], capture_output=True, text=True, timeout=timeout)
    report = json.loads(out.read_text()) if out is not None and out.exists() else None
    return proc.returncode, report, proc.stderr + proc.stdout[-4000:]
