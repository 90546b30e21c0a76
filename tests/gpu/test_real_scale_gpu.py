"""Real published dimensions on one H200 (dummy weights), GMU 0.98, `--verify`: kvaudit's KV must
be safe and tight on whichever runner the installed vLLM picks. Each boot writes its report and
vLLM's log to $KVAUDIT_GPU_RESULTS (named with the vLLM release, except 0.26.0's, kept under their
first names). Stages: `bash tests/gpu/session.sh real1` (the 8B and the 16B MLA+MoE models), `real2`
(the MTP model and the retained-pool selftest), `real033a` / `real033b` (the same on vLLM 0.33)."""

from __future__ import annotations

import pytest
from conftest import HERE, kvaudit, requires_vllm

pytestmark = [pytest.mark.gpu, requires_vllm]

MiB = 1 << 20
TOLERANCE = 16 * MiB
KNOBS = ("--dummy-weights", "--gmu", "0.98", "--max-model-len", "32768", "--max-num-seqs", "16",
         "--max-num-batched-tokens", "8192", "--cudagraph-sizes", "1,2,4,8,16,24,32,48,64", "--verify")


def release() -> tuple[int, int, int]:
    import vllm

    from kvaudit.engines.vllm.adapter import release as parse
    return parse(vllm.__version__) or (0, 0, 0)


def result_name(model: str) -> str:
    import vllm
    return f"h200-real-{model}" if vllm.__version__ == "0.26.0" else f"h200-real-{model}-vllm{vllm.__version__}"


def boot(results_dir, model: str, *extra: str, timeout: float = 290):
    name = result_name(model)
    code, report, err = kvaudit("run", "--model", str(HERE / "models" / model), *KNOBS, *extra,
                                "--timeout", str(timeout), "--log", str(results_dir / f"{name}.log"),
                                "-o", str(results_dir / f"{name}.json"), "-f", "json", timeout=timeout + 60)
    assert report is not None, err
    return code, report


@pytest.fixture(scope="module")
def llama8b(results_dir):
    return boot(results_dir, "llama-3.1-8b")


@pytest.fixture(scope="module")
def v2lite(results_dir):
    return boot(results_dir, "deepseek-v2-lite")


@pytest.fixture(scope="module")
def v3mtp(results_dir):
    return boot(results_dir, "deepseek-v3-2layer-mtp", "--mtp", "1")


def check_exact(code: int, report: dict, runner: str) -> dict:
    """ok, inside the budget to the over-commit tolerance, verify without OOM, and verify's
    slack at the true peak at most 1 % of the device: safe and tight."""
    assert code == 0 and report["verdict"] == "ok", report.get("verdict_reason")
    assert report["engine"]["model_runner"] == runner
    rank = report["ranks"][0]
    assert rank["owners"]["weights"] >= 8 << 30
    assert rank["owners"]["kv_unallocated"] >= -TOLERANCE
    assert sum(rank["owners"].values()) == rank["requested_bytes"]
    verify = report["verify"]
    assert verify["error"] is None and verify["oom_count"] == 0, verify
    assert -TOLERANCE <= verify["slack_bytes"] <= rank["device_total_bytes"] // 100, verify
    assert rank["graph_pool_estimate_bytes"] > 0 and rank["vllm_graph_estimate_bytes"] is not None
    if release() >= (0, 29, 0):  # MRv2 estimates its graphs itself from 0.29 on
        assert rank["vllm_graph_estimate_bytes"] > 0
    if release() >= (0, 32, 0):  # vLLM's own --kv-cache-memory suggestion, beside kvaudit's safe bytes
        assert rank["vllm_suggested_kv_cache_memory_bytes"] is not None
    return rank


def test_dense_8b_on_model_runner_v2(llama8b):
    rank = check_exact(*llama8b, "V2")
    if release() < (0, 29, 0):
        assert rank["vllm_graph_estimate_bytes"] == 0  # vLLM 0.26's MRv2 estimates nothing


def test_mla_moe_16b_on_model_runner_v2(v2lite):
    rank = check_exact(*v2lite, "V2")
    if release() < (0, 29, 0):
        assert rank["vllm_graph_estimate_bytes"] == 0


def test_mla_moe_mtp_over_40_gib(v3mtp):
    # V1 on 0.26; Model Runner V2 is the default for every model from 0.29 on
    rank = check_exact(*v3mtp, "V2" if release() >= (0, 29, 0) else "V1")
    assert rank["owners"]["weights"] >= 40 << 30
    if release() < (0, 29, 0):  # kvaudit measures the pool instead of trusting vLLM's extrapolated estimate
        assert rank["graph_pool_estimate_bytes"] < rank["vllm_graph_estimate_bytes"]
