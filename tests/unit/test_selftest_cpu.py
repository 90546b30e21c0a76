"""`kvaudit selftest --device cpu --tp 2 --verify`: the multi-rank path (two processes, gloo) as a
user runs it, on this machine's CPU. The H200 proves the numbers; this proves the per-rank plumbing:
one record per rank, every rank allocating the binding rank's block count, verify on every rank."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    """The one selftest run of this module, as a user runs it: the `kvaudit` command, from a folder that holds a
    `kvaudit/` package which fails on import (test_a_kvaudit_folder_… below reads that from this run: a second
    selftest for it took ~21 s of the CI on the 2-core EPYC)."""
    here = tmp_path_factory.mktemp("selftest")
    (here / "kvaudit").mkdir()
    (here / "kvaudit" / "__init__.py").write_text('raise ImportError("the folder in the current directory")\n')
    out = here / "tp2.json"
    kvaudit = Path(sys.executable).with_name("kvaudit")
    # GMU is a fraction of the NUMA node's memory: 0.1 leaves each rank ~0.5-1 GiB of KV here
    proc = subprocess.run([str(kvaudit), "selftest", "--device", "cpu", "--tp", "2",
                           "--gmu", "0.1", "--verify", "-o", str(out), "-f", "json"],
                          cwd=here, capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, report, proc.stdout, proc.stderr


def test_two_ranks_run_the_fixed_order_and_verify(tp2):
    code, report, _, err = tp2
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
    _, report, _, _ = tp2
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
    (["--device", "cpu", "--gmu", "1.5"], "--gmu must be in (0, 1], a fraction of the device's memory, got 1.5"),
    (["--device", "cpu", "--gmu", "-1"], "--gmu must be in (0, 1], a fraction of the device's memory, got -1.0"),
    (["--device", "cpu", "--gmu", "0"], "--gmu must be in (0, 1]"),
    (["--device", "cpu", "--repeat", "0"], "--repeat must be at least 1"),
    (["--device", "cpu", "--tp", "0"], "--tp must be at least 1, got 0"),
    (["--device", "cpu", "--gmu", "1.0"], "of the host for 1 rank(s), and"),  # no host has all its memory free
])
def test_bad_options_are_one_line_before_any_rank_starts(cli, args, message):
    result = cli("selftest", *args)
    assert result.code == 2 and result.stdout == ""
    assert len(result.stderr_lines) == 1 and message in result.stderr_lines[0]  # no "starting the ranks" first


def test_selftest_on_cuda_without_a_gpu_is_a_usage_error(cli, monkeypatch):
    from kvaudit.engines.selftest import supervise
    monkeypatch.setattr(supervise, "has_nvidia_gpu", lambda: False)
    result = cli("selftest")
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines == ["kvaudit: error: kvaudit selftest needs a CUDA GPU and this machine has none: run "
                                   "the CPU smoke with --device cpu"]


def test_a_kvaudit_folder_in_the_current_directory_is_not_imported_by_the_ranks(tp2):
    """The children run with PYTHONSAFEPATH (engines/isolation.py): the installed package is used,
    not a `kvaudit/` folder where the user stands (the tp2 run stands in one)."""
    code, report, stdout, err = tp2
    assert code == 0, err[-2000:]
    assert "the folder in the current directory" not in err
    assert json.loads(stdout) == report and report["verdict"] == "ok"
