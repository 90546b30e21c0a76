"""`kvaudit selftest --device cpu --tp 2 --verify`: the multi-rank path (two processes, gloo) as a
user runs it, on this machine's CPU. The H200 proves the numbers; this proves the per-rank plumbing:
one record per rank, the binding rank, every rank sized to the smaller one, verify per rank."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    out = tmp_path_factory.mktemp("selftest") / "tp2.json"
    proc = subprocess.run([sys.executable, "-m", "kvaudit", "selftest", "--device", "cpu", "--tp", "2",
                           "--gmu", "0.2", "--verify", "-o", str(out), "-f", "json"],
                          capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, report, proc.stderr


def test_two_ranks_run_the_fixed_order_and_verify(tp2):
    code, report, err = tp2
    assert code == 0, err
    assert report["source"] == "selftest" and report["verdict"] == "ok"
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for rank in report["ranks"]:
        assert [p["name"] for p in rank["phases"]][:8] == ["baseline", "load", "profile", "persistent", "replay",
                                                         "graphs", "kv", "capture"]
        assert all(p["status"] == "ok" for p in rank["phases"])
    verify = report["verify"]
    assert verify["ok"] is True and verify["oom_count"] == 0
    assert [r["rank"] for r in verify["ranks"]] == [0, 1]
    assert all(r["slack_bytes"] >= 0 for r in verify["ranks"])


def test_every_rank_balances_and_allocates_the_binding_ranks_blocks(tp2):
    _, report, _ = tp2
    avail = {r["rank"]: r["kv_available_bytes"] for r in report["ranks"]}
    assert report["capacity"]["binding_rank"] == min(avail, key=lambda k: (avail[k], k))
    bpb = report["capacity"]["kv_bytes_per_block"]
    for rank in report["ranks"]:
        owners = rank["owners"]
        assert all(v is not None for v in owners.values())
        assert sum(owners.values()) == rank["requested_bytes"]
        # every rank allocates the binding rank's block count, as vLLM's engine does (the
        # kv_cache owner itself is RSS growth on the CPU backend: a new thread stack lands in it)
        assert rank["kv_blocks"] == min(avail.values()) // bpb
        assert owners["kv_cache"] >= rank["kv_blocks"] * bpb
        assert owners["weights"] > 0 and owners["persistent"] > 0 and owners["graph_pool"] == 0
