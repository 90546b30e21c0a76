"""`kvaudit run` with real vLLM on a real GPU: graphs, eager, MTP at GMU 0.98 with verify, and a
dense Llama through Model Runner V2. Reports and vLLM logs go to $KVAUDIT_GPU_RESULTS."""

from __future__ import annotations

import pytest
from conftest import HERE, kvaudit, requires_vllm

pytestmark = [pytest.mark.gpu, requires_vllm]

SIX = ("weights", "persistent", "activation_peak", "graph_pool", "non_torch", "kv_cache")


def boot(results_dir, name: str, *args: str, timeout: float = 600):
    code, report, err = kvaudit("run", *args, "--timeout", str(timeout), "--log", str(results_dir / f"{name}.log"),
                                "-o", str(results_dir / f"{name}.json"), "-f", "json", timeout=timeout + 120)
    assert report is not None, err
    return code, report


@pytest.fixture(scope="module")
def graphs(results_dir):
    return boot(results_dir, "h200-vllm-graphs", "--gmu", "0.9")


@pytest.fixture(scope="module")
def eager(results_dir):
    return boot(results_dir, "h200-vllm-eager", "--gmu", "0.9", "--enforce-eager")


@pytest.fixture(scope="module")
def mtp(results_dir):
    return boot(results_dir, "h200-vllm-mtp-gmu098-verify", "--mtp", "1", "--gmu", "0.98", "--verify")


@pytest.fixture(scope="module")
def llama(results_dir):
    return boot(results_dir, "h200-vllm-llama-v2", "--model", str(HERE / "models" / "tiny-llama"),
                "--dummy-weights", "--gmu", "0.9", "--max-model-len", "4096")


def check_boot(code, report):
    """Booted inside its budget, all six owners measured, the ledger balances, vLLM allocated
    kvaudit's figure."""
    rank = report["ranks"][0]
    assert code == 0, report.get("verdict_reason")
    for owner in SIX:
        assert rank["owners"][owner] is not None, owner
    assert sum(rank["owners"].values()) == rank["requested_bytes"]
    # vLLM allocated kvaudit's figure, floored to whole blocks.
    bpb = report["capacity"]["kv_bytes_per_block"]
    assert rank["owners"]["kv_cache"] == rank["kv_available_bytes"] // bpb * bpb
    names = [p["name"] for p in rank["phases"]]
    assert names[:8] == ["baseline", "load", "profile", "persistent", "replay", "graphs", "kv", "capture"]
    return rank


def test_graphs_boot_measures_all_six_owners(graphs):
    rank = check_boot(*graphs)
    assert rank["owners"]["graph_pool"] > 0 and rank["graph_pool_actual_bytes"] is not None


def test_eager_boot_has_no_graph_pool(eager):
    rank = check_boot(*eager)
    assert rank["owners"]["graph_pool"] < 64 << 20


def test_mtp_at_gmu_098_verifies_without_oom(mtp):
    code, report = mtp
    check_boot(code, report)
    assert report["verify"] is not None and report["verify"]["error"] is None, report["verify"]
    assert report["verify"]["oom_count"] == 0


def test_llama_boots_through_model_runner_v2(llama):
    code, report = llama
    assert report["engine"]["model_runner"] == "V2"
    rank = check_boot(code, report)
    # vLLM 0.26's MRv2 estimates no graph memory; kvaudit measured the pool itself
    assert rank["vllm_graph_estimate_bytes"] == 0 and rank["graph_pool_estimate_bytes"] > 0
