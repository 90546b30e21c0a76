"""`kvaudit selftest --device cpu --tp 2 --verify`: the multi-rank path (two processes, gloo) as a
user runs it, on this machine's CPU. The H200 proves the numbers; this proves the per-rank plumbing:
one record per rank, every rank allocating the binding rank's block count, verify on every rank."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    out = tmp_path_factory.mktemp("selftest") / "tp2.json"
    # GMU is a fraction of the NUMA node's memory: 0.1 leaves each rank ~0.5-1 GiB of KV here
    proc = subprocess.run([sys.executable, "-m", "kvaudit", "selftest", "--device", "cpu", "--tp", "2",
                           "--gmu", "0.1", "--verify", "-o", str(out), "-f", "json"],
                          capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, report, proc.stderr


def test_two_ranks_run_the_fixed_order_and_verify(tp2):
    code, report, err = tp2
    assert code == 0, err
    assert report["source"] == "selftest" and report["verdict"] == "ok"
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for rank in report["ranks"]:
        assert [p["name"] for p in rank["phases"]] == ["baseline", "load", "profile", "persistent", "replay",
                                                       "graphs", "kv", "capture", "verify"]
        assert all(p["status"] == "ok" for p in rank["phases"])
        assert rank["owners"]["kv_cache"] > 0 and rank["owners"]["persistent"] > 0
    verify = report["verify"]
    assert verify["ok"] is True and verify["oom_count"] == 0 and verify["repeats"] == 1
    assert [r["rank"] for r in verify["ranks"]] == [0, 1]
    assert all(r["true_peak_bytes"] > 0 for r in verify["ranks"])


def test_every_rank_allocates_the_binding_ranks_block_count(tp2):
    _, report, _ = tp2
    bpb = report["capacity"]["kv_bytes_per_block"]
    own = {r["rank"]: r["kv_available_bytes"] // bpb for r in report["ranks"]}  # what each rank alone could hold
    for rank in report["ranks"]:
        # as vLLM's engine does: the fewest blocks any rank has room for, on every rank
        assert rank["kv_blocks"] == min(own.values()), (own, rank["kv_blocks"])
        assert rank["owners"]["kv_cache"] == rank["kv_blocks"] * bpb


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "--device must be cuda or cpu, got 'tpu'"),
    (["--device", "cpu", "--sizing", "eager"], "--sizing must be kvaudit or naive, got 'eager'"),
    (["--device", "cpu", "--trace"], "--trace needs --device cuda"),
])
def test_bad_options_are_one_line_before_any_rank_starts(cli, args, message):
    result = cli("selftest", *args)
    assert result.code == 2 and result.stdout == ""
    assert len(result.stderr_lines) == 1 and message in result.stderr_lines[0]  # no "starting the ranks" first
