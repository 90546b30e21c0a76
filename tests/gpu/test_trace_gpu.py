"""`--trace` on a real GPU: every planted selftest allocation lands on its owner and its planted
site, and a traced vLLM boot breaks weights, persistent and the graph pool down by site."""

from __future__ import annotations

import os

import pytest
from conftest import kvaudit, requires_cuda, requires_vllm

pytestmark = [pytest.mark.gpu]

PLANTED_SITES = {
    # owner: (phase, at, site) where the planted allocation is live and named
    "weights": ("load", "end", "selftest:load"),
    "persistent": ("persistent", "end", "selftest:kernel_warmup"),
    "activation_peak": ("replay", "peak", "selftest:step"),
}


def site_bytes(rank: dict, *, phase: str, at: str, owner: str, site: str | None = None) -> int:
    return sum(s["bytes"] for s in rank["sites"] if s["phase"] == phase and s["at"] == at and s["owner"] == owner
               and (site is None or s["site"] == site))


@pytest.fixture(scope="module")
def traced(results_dir):
    os.environ["KVAUDIT_TRACE_DUMP"] = str(results_dir / "trace-dump")
    try:
        code, report, err = kvaudit("selftest", "--gmu", "0.98", "--trace",
                                    "-o", str(results_dir / "selftest-trace.json"), "-f", "json")
    finally:
        del os.environ["KVAUDIT_TRACE_DUMP"]
    assert report is not None, err
    return code, report


@requires_cuda
def test_every_planted_allocation_is_attributed_to_its_owner_and_site(traced):
    code, report = traced
    assert code == 0, report["verdict_reason"]
    rank = report["ranks"][0]
    planted = {a["owner"]: a["planted_bytes"] for a in report["accuracy"]}
    for owner, (phase, at, site) in PLANTED_SITES.items():
        # 100 %: the planted bytes are all under their site (the transient's site also holds the
        # step's small matmul buffers, which are activation too)
        got = site_bytes(rank, phase=phase, at=at, owner=owner, site=site)
        if owner == "activation_peak":
            assert planted[owner] <= got < planted[owner] * 1.01, (owner, got, planted[owner])
        else:
            assert got == planted[owner], (owner, got, planted[owner])
    # the graph outputs: every block of the private pool at the end of capture
    assert site_bytes(rank, phase="capture", at="end", owner="graph_pool") == planted["graph_pool"]
    # the KV cache: the bytes the selftest allocated
    assert site_bytes(rank, phase="kv", at="end", owner="kv_cache", site="selftest:allocate_kv") == \
        rank["owners"]["kv_cache"]


@requires_vllm
def test_a_traced_vllm_boot_breaks_owners_down_by_site(results_dir):
    os.environ["KVAUDIT_TRACE_DUMP"] = str(results_dir / "trace-dump-vllm")
    try:
        code, report, err = kvaudit("run", "--gmu", "0.9", "--trace", "--timeout", "500",
                                    "--log", str(results_dir / "h200-vllm-trace.log"),
                                    "-o", str(results_dir / "h200-vllm-trace.json"), "-f", "json", timeout=620)
    finally:
        del os.environ["KVAUDIT_TRACE_DUMP"]
    assert report is not None, err
    rank = report["ranks"][0]
    assert rank["sites"], "no sites recorded"
    # every weight byte the loader made is under a weights site, named by the layer code
    weights = site_bytes(rank, phase="load", at="end", owner="weights")
    assert abs(weights - rank["owners"]["weights"]) <= 2 << 20, (weights, rank["owners"]["weights"])
    capture = next(p for p in rank["phases"] if p["name"] == "capture")
    assert site_bytes(rank, phase="capture", at="end", owner="graph_pool") == capture["graph_pool_bytes"] > 0
    # the KV tensors' blocks: vLLM's bytes, rounded up by the allocator to whole 2 MiB pages
    kv = site_bytes(rank, phase="kv", at="end", owner="kv_cache")
    tensors = sum(s["blocks"] for s in rank["sites"] if s["phase"] == "kv" and s["owner"] == "kv_cache")
    assert rank["owners"]["kv_cache"] <= kv < rank["owners"]["kv_cache"] + tensors * (2 << 20)
    # the budget held: the capture reserve covered what the real capture kept outside the pool
    assert code == 0, report["verdict_reason"]
