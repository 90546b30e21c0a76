"""The planted-allocation selftest on a real GPU: accuracy, tightness, retry, naive order."""

from __future__ import annotations

import pytest
from conftest import kvaudit, requires_cuda

pytestmark = [pytest.mark.gpu, requires_cuda]

MiB = 1 << 20


def tolerance(planted: int) -> int:
    """The accuracy goal: within max(0.5 %, 2 MiB) of the planted size."""
    return max(planted * 5 // 1000, 2 * MiB)


@pytest.fixture(scope="module")
def fixed(results_dir):
    code, report, err = kvaudit("selftest", "--gmu", "0.98", "--verify", "--repeat", "20",
                                "-o", str(results_dir / "selftest-fixed.json"), "-f", "json")
    assert report is not None, err
    return code, report


@pytest.fixture(scope="module")
def injected(results_dir):
    code, report, err = kvaudit("selftest", "--gmu", "0.98", "--verify", "--inject-warmup-failure",
                                "-o", str(results_dir / "selftest-inject.json"), "-f", "json")
    assert report is not None, err
    return code, report


@pytest.fixture(scope="module")
def retained(results_dir):
    code, report, err = kvaudit("selftest", "--gmu", "0.98", "--retain-graph-pool",
                                "-o", str(results_dir / "selftest-retained-pool.json"), "-f", "json")
    assert report is not None, err
    return code, report


@pytest.fixture(scope="module")
def naive(results_dir):
    code, report, err = kvaudit("selftest", "--gmu", "0.98", "--verify", "--repeat", "3", "--sizing", "naive",
                                "-o", str(results_dir / "selftest-naive.json"), "-f", "json")
    assert report is not None, err
    return code, report


def test_every_planted_owner_is_measured_within_tolerance(fixed):
    code, report = fixed
    assert code == 0, report["verdict_reason"]
    owners = {a["owner"] for a in report["accuracy"]}
    assert owners == {"weights", "persistent", "activation_peak", "graph_pool", "non_torch"}
    for a in report["accuracy"]:
        assert abs(a["measured_bytes"] - a["planted_bytes"]) <= tolerance(a["planted_bytes"]), a


def test_verify_twenty_repeats_no_oom_and_slack_within_one_percent(fixed):
    _, report = fixed
    v = report["verify"]
    rank = report["ranks"][0]
    assert v["repeats"] == 20 and v["oom_count"] == 0 and v["ok"]
    assert 0 <= v["slack_bytes"] <= rank["device_total_bytes"] // 100


def test_ledger_balances_and_profiling_pool_is_released(fixed):
    _, report = fixed
    rank = report["ranks"][0]
    assert sum(v for v in rank["owners"].values()) == rank["requested_bytes"]
    phases = {p["name"]: p for p in rank["phases"]}
    assert phases["graphs"]["graph_pool_bytes"] == 0          # temporary pool, freed after profiling
    assert phases["capture"]["graph_pool_bytes"] == 960 * MiB  # the real capture: the planted outputs


def test_retained_pool_is_charged_at_full_high_water(retained):
    """Profiling graphs kept alive through KV sizing keep every page of their pool: the real
    capture then adds its own on top. kvaudit charges the retained pool and the fresh high-water
    ("gross − retained" would have reserved only the growth and under-reserved by exactly the
    retained bytes), so the boot ends ok with no over-commit."""
    code, report = retained
    assert code == 0 and report["verdict"] == "ok", report.get("verdict_reason")
    rank = report["ranks"][0]
    phases = {p["name"]: p for p in rank["phases"]}
    assert phases["graphs"]["graph_pool_bytes"] == 960 * MiB         # retained into sizing
    assert phases["capture"]["graph_pool_bytes"] == 2 * 960 * MiB    # the real capture on top
    assert rank["graph_pool_estimate_bytes"] >= 2 * 960 * MiB
    assert rank["owners"]["kv_unallocated"] >= 0
    pool = next(a for a in report["accuracy"] if a["owner"] == "graph_pool")
    assert pool["planted_bytes"] == 2 * 960 * MiB                    # both captures
    assert abs(pool["measured_bytes"] - pool["planted_bytes"]) <= tolerance(pool["planted_bytes"])


def test_failed_warmup_is_retried_and_counted_once(injected):
    code, report = injected
    assert code == 0, report["verdict_reason"]
    persistent = next(a for a in report["accuracy"] if a["owner"] == "persistent")
    assert abs(persistent["measured_bytes"] - persistent["planted_bytes"]) <= tolerance(persistent["planted_bytes"])
    assert any("warmup retried" in w for w in report["warnings"])


def test_naive_order_over_allocates_by_what_warmup_keeps(naive, fixed):
    code, report = naive
    _, good = fixed
    over = report["ranks"][0]["kv_available_bytes"] - good["ranks"][0]["kv_available_bytes"]
    assert over >= 1536 * MiB - 16 * MiB  # at least the planted persistent workspace
    assert report["verdict"] == "fail" and code == 1
    assert report["ranks"][0]["owners"]["kv_unallocated"] < 0
