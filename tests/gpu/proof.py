"""H200 proofs that are tables rather than pass/fail tests (run through tests/gpu/session.sh):

    python3 tests/gpu/proof.py matrix OUT [MODEL …]   # issue 17: the installed vLLM release
    python3 tests/gpu/proof.py plan OUT                # issue 18: one --sweep boot and four edits
    python3 tests/gpu/proof.py plan-edits OUT BASE [EDIT …]  # issue 18: edits from a kept base report
    python3 tests/gpu/proof.py plan-solve OUT [BASE]   # issue 18: the solve, from plan's base boot
    python3 tests/gpu/proof.py table RESULTS           # here: the matrix and plan tables from the reports

`matrix` boots the embedded model (MTP, graphs on) and Llama-3.2-1B (published dimensions, dummy
weights) with `kvaudit run --gmu 0.98 --verify` on whatever vLLM is importable, and writes
OUT/h200-matrix-<release>.json (release × model × runner × verdict × over-commit × verify slack).

`plan` boots Llama-3.2-1B once with `--sweep`, plans four edited configs from that report
(`kvaudit plan`), boots each edit for real and compares KV (bound: max(2 %, 64 MiB), verdict
equal). `plan-solve` (a later device call on the same warm machine: a call has 600 s) solves the
longest max_model_len at a low GMU from that base report, boots the answer with `--verify` (it must
pass) and the answer + 5 % (it must not fit). Both write OUT/h200-plan.json, kept between calls in
WORK. Every boot's report and vLLM log land in OUT beside the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "gpu" / "models" / "llama-3.2-1b"
WORK = Path("/tmp/kvaudit-proof")
MiB = 1 << 20
KNOBS = {"--gmu": "0.98", "--max-model-len": "32768", "--max-num-seqs": "16",
         "--max-num-batched-tokens": "8192", "--cudagraph-sizes": "1,2,4,8,16,24,32,48,64"}
LLAMA = ["--model", str(MODEL), "--dummy-weights"]
EDITS = {
    "gmu 0.90": {"--gmu": "0.9"},
    "max_model_len 16384": {"--max-model-len": "16384"},
    "max_num_batched_tokens 4096": {"--max-num-batched-tokens": "4096"},
    "cudagraph sizes <= 16": {"--cudagraph-sizes": "1,2,4,8,16"},
}


def flags(knobs: dict[str, str]) -> list[str]:
    return [x for pair in knobs.items() for x in pair]


def boot(out: Path, name: str, *args: str, timeout: int = 300,
         engine_args: tuple[str, ...] = ()) -> tuple[int, dict | None, float, str]:
    """`kvaudit run ARGS … -- ENGINE_ARGS` with its report and vLLM log kept in OUT under NAME."""
    report_path = out / f"{name}.json"
    started = time.monotonic()
    command = [sys.executable, "-m", "kvaudit", "run", *args, "--timeout", str(timeout),
               "--log", str(out / f"{name}.log"), "-o", str(report_path), "-f", "json"]
    if engine_args:
        command += ["--", *engine_args]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 60)
        code, err = proc.returncode, proc.stderr.strip()[-600:]
    except subprocess.TimeoutExpired:
        code, err = 124, "timed out"
    wall = round(time.monotonic() - started, 1)
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    print(f"{name}: exit {code}, {wall} s{', ' + err.splitlines()[-1] if code and err else ''}", flush=True)
    return code, report, wall, err


def kv_cache(report: dict | None) -> int | None:
    if not report or not report.get("ranks"):
        return None
    return report["ranks"][0]["owners"].get("kv_cache")


def release() -> str:
    import vllm
    return vllm.__version__


# model → (kvaudit run arguments, vLLM engine arguments after `--`, seconds before the boot is stopped)
MATRIX_MODELS = {
    # vLLM 0.22.1 picks FlashInfer CUTLASS for the embedded model's unquantized MoE; its first-boot
    # JIT build outlasted 300 s on the H200, hence the long timeout and the Triton row beside it
    "embedded-mtp": (["--mtp", "1", "--gmu", "0.98", "--verify"], (), 900),
    "embedded-mtp-triton-moe": (["--mtp", "1", "--gmu", "0.98", "--verify"], ("--moe-backend", "triton"), 300),
    "llama-3.2-1b": ([*LLAMA, *flags(KNOBS), "--verify"], (), 300),
}


def report_figures(report: dict | None) -> dict:
    """What a matrix row says of one boot's report (all None when the boot left none)."""
    report = report or {}
    rank = (report.get("ranks") or [{}])[0]
    owners = rank.get("owners") or {}
    unallocated = owners.get("kv_unallocated")
    verify = report.get("verify") or {}
    return {"runner": (report.get("engine") or {}).get("model_runner"), "verdict": report.get("verdict"),
            "verdict_reason": None if report.get("verdict") == "ok" else report.get("verdict_reason"),
            "over_commit_bytes": None if unallocated is None else max(0, -unallocated),
            "verify_slack_bytes": verify.get("slack_bytes"), "verify_oom_count": verify.get("oom_count"),
            "kv_cache_bytes": owners.get("kv_cache"), "graph_pool_bytes": owners.get("graph_pool"),
            "device_total_bytes": rank.get("device_total_bytes")}


def edit_figures(predicted: dict, booted: dict | None) -> dict:
    """A planned edit against its real boot: KV cache bytes, the error and the bound, verdicts."""
    p, b = kv_cache(predicted), kv_cache(booted)
    return {"predicted_kv_cache_bytes": p, "booted_kv_cache_bytes": b,
            "error_bytes": None if p is None or b is None else p - b,
            "bound_bytes": None if b is None else bound(b),
            "within_bound": None if p is None or b is None else abs(p - b) <= bound(b),
            "stated_error_bytes": (predicted.get("plan") or {}).get("kv_error_bytes"),
            "verdict": [predicted.get("verdict"), (booted or {}).get("verdict")]}


def matrix(out: Path, *only: str) -> int:
    version = release()
    rows = []
    for model, (args, engine_args, timeout) in MATRIX_MODELS.items():
        if (only and model not in only) or (not only and model == "embedded-mtp-triton-moe"):
            continue
        timeout = int(os.environ.get("MATRIX_TIMEOUT", timeout))  # a device call's budget may be shorter
        code, report, wall, err = boot(out, f"h200-matrix-{version}-{model}", *args, timeout=timeout,
                                       engine_args=engine_args)
        rows.append({"release": version, "model": model, "exit": code, "wall_s": wall, **report_figures(report),
                     "error": err if code else None})
    (out / f"h200-matrix-{version}.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["exit"] == 0 and r["verdict"] == "ok" for r in rows) else 1


def plan(base: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "kvaudit", "plan", str(base), *args, "-f", "json"],
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr}


def bound(kv: int) -> int:
    return max(kv * 2 // 100, 64 * MiB)


def slug(edit: str) -> str:
    return edit.replace(" ", "-").replace("<=", "le")


def plan_proof(out: Path) -> int:
    code, base, wall, err = boot(out, "h200-plan-base", *LLAMA, *flags(KNOBS), "--sweep", "--verify")
    table: dict = {"vllm": release(), "base": {"command": "kvaudit run " + " ".join(flags(KNOBS)) +
                                                " --sweep --verify", "exit": code, "wall_s": wall,
                                                "verdict": (base or {}).get("verdict"),
                                                "kv_cache_bytes": kv_cache(base)}, "edits": []}
    if base is None:
        table["base"]["error"] = err
        (out / "h200-plan.json").write_text(json.dumps(table, indent=1) + "\n")
        return 1
    WORK.mkdir(exist_ok=True)
    (WORK / "h200-plan-base.json").write_text((out / "h200-plan-base.json").read_text())
    return plan_edits(out, WORK / "h200-plan-base.json", *EDITS, table=table)


def plan_edits(out: Path, base_path: Path | str, *names: str, table: dict | None = None) -> int:
    """Plan each named edit (default: all) from BASE_PATH, boot it for real and compare KV."""
    base_path = Path(base_path)
    table = table or {"vllm": release(), "base": {"report": base_path.name}, "edits": []}
    for name in names or EDITS:
        edit = EDITS[name]
        plan_exit, predicted = plan(base_path, *flags(edit))
        code, booted, wall, err = boot(out, f"h200-plan-{slug(name)}", *LLAMA, *flags({**KNOBS, **edit}))
        table["edits"].append({"edit": name, "flags": flags(edit), "plan_exit": plan_exit, "boot_exit": code,
                               "wall_s": wall, **edit_figures(predicted, booted)})
        (out / "h200-plan.json").write_text(json.dumps(table, indent=1) + "\n")
    WORK.mkdir(exist_ok=True)
    (WORK / "h200-plan.json").write_text(json.dumps(table, indent=1) + "\n")
    return 0 if all(e["within_bound"] and e["verdict"][0] == e["verdict"][1] for e in table["edits"]) else 1


def plan_solve(out: Path, base_path: Path | str = WORK / "h200-plan-base.json") -> int:
    """Solve the longest max_model_len at a low GMU from BASE_PATH (`boot`: a fresh `--sweep` boot
    at KNOBS first); boot the answer with --verify and the answer + 5 %."""
    if str(base_path) == "boot":
        boot(out, "h200-plan-solve-base", *LLAMA, *flags(KNOBS), "--sweep")
        base_path = out / "h200-plan-solve-base.json"
    base_path = Path(base_path)
    table_path = WORK / "h200-plan.json"
    table = json.loads(table_path.read_text()) if table_path.exists() else {"vllm": release()}
    # Solve at a GMU low enough that the answer lies inside the model's 131072-token context.
    for gmu in ("0.045", "0.04", "0.05", "0.035"):
        solve_exit, solved = plan(base_path, "--gmu", gmu, "--solve", "max-model-len")
        answer = ((solved.get("plan") or {}).get("solution") or {}).get("value")
        if answer and 16384 <= answer <= 120000:
            break
    solve = {"base": base_path.name, "gmu": gmu, "plan_exit": solve_exit, **solve_figures(solved, None, None)}
    if answer:
        knobs = {**KNOBS, "--gmu": gmu}
        code, at, wall, err = boot(out, "h200-plan-solve-answer", *LLAMA,
                                   *flags({**knobs, "--max-model-len": str(answer)}), "--verify")
        over = answer + answer * 5 // 100
        code_over, above, wall_over, err = boot(out, "h200-plan-solve-plus5", *LLAMA,
                                                *flags({**knobs, "--max-model-len": str(over)}))
        solve.update(solve_figures(solved, at, above))
        solve["at_answer"].update(exit=code, wall_s=wall)
        solve["at_answer_plus_5_percent"].update(exit=code_over, wall_s=wall_over)
    table["solve"] = solve
    (out / "h200-plan.json").write_text(json.dumps(table, indent=1) + "\n")
    at, above = solve.get("at_answer") or {}, solve.get("at_answer_plus_5_percent") or {}
    return 0 if at.get("verdict") == "ok" and at.get("verify_ok") and above.get("exit") else 1


def solve_figures(solved: dict, at: dict | None, above: dict | None) -> dict:
    """A solved max_model_len against its boots: the answer with --verify, the answer + 5 %
    (only the plan's figures while they are None)."""
    figures: dict = {"answer": ((solved.get("plan") or {}).get("solution") or {}).get("value"),
                     "predicted_kv_cache_bytes": kv_cache(solved)}
    if at is not None:
        verify = at.get("verify") or {}
        figures["at_answer"] = {"max_model_len": at["config"]["max_model_len"], "verdict": at.get("verdict"),
                                "kv_cache_bytes": kv_cache(at), "verify_ok": verify.get("ok"),
                                "verify_slack_bytes": verify.get("slack_bytes")}
    if above is not None:
        figures["at_answer_plus_5_percent"] = {"max_model_len": above["config"]["max_model_len"],
                                               "verdict": above.get("verdict"),
                                               "failure_kind": (above.get("failure") or {}).get("kind")}
    return figures


# --------------------------------------------------------------------------------------------
# Tables, built here from the committed reports (a device call that runs out of time may leave
# only the reports behind).

MATRIX_REPORTS = {
    # report (under RESULTS) → the command it came from, minus --log/-o
    "h200-matrix-0.22.1-embedded-mtp.json": "--mtp 1 --gmu 0.98 --verify",
    "h200-matrix-0.22.1-embedded-mtp-triton-moe.json": "--mtp 1 --gmu 0.98 --verify -- --moe-backend triton",
    "h200-matrix-0.22.1-llama-3.2-1b.json": "KNOBS --verify",
    "h200-matrix-0.24.0-embedded-mtp.json": "--mtp 1 --gmu 0.98 --verify",
    "h200-matrix-0.24.0-llama-3.2-1b.json": "KNOBS --verify",
    "h200-matrix-0.26.0-embedded-mtp.json": "--mtp 1 --gmu 0.98 --verify",
    "h200-plan-base.json": "KNOBS --verify --sweep",
    "h200-real-llama-3.1-8b.json": "real-scale KNOBS --verify",
    "h200-real-deepseek-v2-lite.json": "real-scale KNOBS --verify",
    "h200-real-deepseek-v3-2layer-mtp.json": "real-scale KNOBS --verify --mtp 1",
}


def matrix_row(path: Path, command: str) -> dict:
    report = json.loads(path.read_text())
    config = report.get("config") or {}
    model = Path(config.get("model") or "?").name
    moe_backend = (config.get("extra_args") or {}).get("moe_backend")
    if moe_backend:
        model += f" ({moe_backend} MoE)"
    return {"report": path.name, "release": report["engine"]["version"], "model": model, "command": command,
            **report_figures(report)}


def plan_rows(results: Path) -> list[dict]:
    base = results / "h200-plan-base.json"
    rows = []
    for name, edit in EDITS.items():
        booted_path = results / f"h200-plan-{slug(name)}.json"
        if not booted_path.exists():
            rows.append({"edit": name, "booted": False, "note": "not booted yet"})
            continue
        plan_exit, predicted = plan(base, *flags(edit))
        rows.append({"edit": name, "booted": True, "plan_exit": plan_exit,
                     **edit_figures(predicted, json.loads(booted_path.read_text()))})
    return rows


def solve_row(results: Path) -> dict | None:
    """The solve check from its three committed reports (base, answer with --verify, answer + 5 %)."""
    paths = [results / f"h200-plan-solve-{n}.json" for n in ("base", "answer", "plus5")]
    if not all(path.exists() for path in paths):
        return None
    at, above = (json.loads(path.read_text()) for path in paths[1:])
    gmu = str(at["config"]["gpu_memory_utilization"])
    plan_exit, solved = plan(paths[0], "--gmu", gmu, "--solve", "max-model-len")
    row = {"base": paths[0].name, "gmu": gmu, "plan_exit": plan_exit, **solve_figures(solved, at, above)}
    # the report keeps the verdict, not the process's exit status: a failed verdict is kvaudit's exit 1
    row["at_answer_plus_5_percent"]["exit"] = 1 if above["verdict"] == "fail" else 0
    return row


def tables(results: Path) -> int:
    rows = [matrix_row(results / name, cmd) for name, cmd in MATRIX_REPORTS.items() if (results / name).exists()]
    (results / "h200-matrix.json").write_text(json.dumps(rows, indent=1) + "\n")
    mib = lambda v: "—" if v is None else f"{v / MiB:,.1f} MiB"  # noqa: E731
    lines = ["| vLLM | runner | model | verdict | over-commit | verify slack (% of device) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        slack = r["verify_slack_bytes"]
        share = "" if slack is None else f" ({100 * slack / r['device_total_bytes']:.2f} %)"
        verdict = r["verdict"] if r["verdict"] == "ok" else f"{r['verdict']}: {r['verdict_reason']}"
        lines.append(f"| {r['release']} | {r['runner']} | {r['model']} | {verdict} | {mib(r['over_commit_bytes'])} "
                     f"| {mib(slack)}{share} |")
    (results / "h200-matrix.md").write_text("\n".join(lines) + "\n")
    prows = plan_rows(results)
    solved = solve_row(results)
    (results / "h200-plan.json").write_text(json.dumps({"edits": prows, "solve": solved}, indent=1) + "\n")
    plines = ["| edit | planned KV | booted KV | error | stated error | bound | verdict planned / booted |",
              "|---|---|---|---|---|---|---|"]
    for r in prows:
        if not r["booted"]:
            plines.append(f"| {r['edit']} | {r['note']} | | | | | |")
            continue
        plines.append(f"| {r['edit']} | {mib(r['predicted_kv_cache_bytes'])} | {mib(r['booted_kv_cache_bytes'])} | "
                      f"{r['error_bytes'] / MiB:+,.1f} MiB | ± {mib(r['stated_error_bytes'])} | {mib(r['bound_bytes'])} | "
                      f"{r['verdict'][0]} / {r['verdict'][1]} |")
    if solved:
        at, above = solved["at_answer"], solved["at_answer_plus_5_percent"]
        plines += ["", "| solve | planned | booted |", "|---|---|---|",
                   f"| `--gmu {solved['gmu']} --solve max-model-len` | {solved['answer']:,} tokens, "
                   f"{mib(solved['predicted_kv_cache_bytes'])} KV | {mib(at['kv_cache_bytes'])} KV; verdict "
                   f"{at['verdict']}, --verify {'passed' if at['verify_ok'] else 'FAILED'} (slack "
                   f"{mib(at['verify_slack_bytes'])}) |",
                   f"| answer + 5 % ({above['max_model_len']:,}) | does not fit | exit {above['exit']}, "
                   f"{above['verdict']}: {above['failure_kind']} |"]
    (results / "h200-plan.md").write_text("\n".join(plines) + "\n")
    print("\n".join(lines) + "\n\n" + "\n".join(plines))
    return 0


def main() -> int:
    what, out, *rest = sys.argv[1:]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return {"matrix": matrix, "plan": plan_proof, "plan-edits": plan_edits, "plan-solve": plan_solve,
            "table": tables}[what](out, *rest)


if __name__ == "__main__":
    sys.exit(main())
