"""The verify scenario's bracket on a rank (AuditMixin.kvaudit_verify_begin/end) with a fake probe:
its true peak is the peak reserved + non-torch, its torch figures are recorded, and with
KVAUDIT_VERIFY_CAP=1 the allocator is held to the budget less non-torch memory for the scenario
and let go at its end (the GPU experiment of issue 28 item 4, stage `load2-capped`); the logged line
counts the allocator's retries in the scenario (whether a cap bound)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from factories import GiB, MiB

from kvaudit.engines.journal import Journal
from kvaudit.engines.sequence import RankSequencer
from kvaudit.engines.vllm.audit import VERIFY_CAP_ENV, AuditMixin

TRUE_PEAK = 110 * GiB + 500 * MiB   # the scenario's peak reserved + the rank's non-torch bytes


class Probe:
    def __init__(self, retries: int | None = 3):
        self.reserved, self.allocated, self.peak, self.retries = 100 * GiB, 90 * GiB, 100 * GiB, retries

    def sync(self):
        pass

    def reset_peak(self):
        self.peak = self.reserved

    def settle(self):
        pass

    def read(self, pools=True):
        return SimpleNamespace(allocated_bytes=self.allocated, reserved_bytes=self.reserved,
                               peak_allocated_bytes=self.allocated + GiB, device_used_bytes=self.reserved + 500 * MiB,
                               graph_pool_bytes=0, free_bytes=0, peak_reserved_bytes=self.peak)

    def peak_reserved_bytes(self):
        return self.peak

    def alloc_retries(self):
        return self.retries


class Rank(AuditMixin):
    def __init__(self, retries: int | None = 3):
        self.rank, self._kva_requested = 0, 120 * GiB
        self._kva_seq = RankSequencer(Probe(retries), Journal(None))
        self.caps: list[int | None] = []

    def _kva_non_torch_now(self):
        return 500 * MiB

    def _kva_cap_allocator(self, cap_bytes):
        self.caps.append(cap_bytes)


def scenario(rank: Rank) -> dict:
    rank.kvaudit_verify_begin("batch")
    probe = rank._kva_seq.probe
    probe.peak = 110 * GiB   # what the scenario reserved at its highest
    if probe.retries is not None:
        probe.retries += 2    # twice the allocator found no room, gave its cache back and tried again
    return rank.kvaudit_verify_end()


@pytest.mark.parametrize("retries, ending", [(3, f"true peak {TRUE_PEAK}, allocator retries 2\n"),
                                             (None, f"true peak {TRUE_PEAK}\n")])   # a probe with no such count
def test_the_logged_line_counts_the_allocators_retries_in_the_scenario(capsys, monkeypatch, retries, ending):
    monkeypatch.delenv(VERIFY_CAP_ENV, raising=False)
    scenario(Rank(retries))
    line = capsys.readouterr().err
    assert line.startswith("kvaudit verify batch rank 0: torch allocated 96636764160 -> peak 97710505984")
    assert line.endswith(ending)


def test_a_scenarios_true_peak_is_its_peak_reserved_plus_non_torch_and_no_cap_by_default(monkeypatch):
    monkeypatch.delenv(VERIFY_CAP_ENV, raising=False)
    rank = Rank()
    result = scenario(rank)
    assert result["true_peak_bytes"] == TRUE_PEAK and result["requested_bytes"] == 120 * GiB
    assert (result["torch_allocated_start_bytes"], result["torch_peak_allocated_bytes"],
            result["torch_reserved_start_bytes"], result["torch_peak_reserved_bytes"]) == \
        (90 * GiB, 91 * GiB, 100 * GiB, 110 * GiB)
    # nothing held the allocator, so nothing lets it go
    assert rank.caps == []


@pytest.mark.parametrize("value, caps", [("1", [120 * GiB - 500 * MiB, None]), ("0", [])])
def test_the_cap_holds_the_allocator_to_the_budget_less_non_torch_for_the_scenario_only(monkeypatch, value, caps):
    monkeypatch.setenv(VERIFY_CAP_ENV, value)
    rank = Rank()
    scenario(rank)
    assert rank.caps == caps
    verify = [e for e in rank._kva_seq.journal.events if e.get("type") == "phase" and e["name"] == "verify"][0]
    assert ("allocator capped at" in verify["detail"]) is (value == "1")


def test_a_scenario_over_its_budget_inside_the_tolerance_says_so() -> None:
    """A newcomer read `batch -14.65 MiB … ok` as a contradiction: the outcome names the tolerance it passed inside."""
    import dataclasses
    from pathlib import Path

    from kvaudit.render.frames import verify_frame
    from kvaudit.report import parse_report_text
    path = Path(__file__).parents[1] / "benchmarks/results/cpu-verify-defaults-held-threshold-2026-12-06.json"
    report = parse_report_text(path.read_text(encoding="utf-8"), path.name)
    assert report.verify is not None and report.verify.scenarios
    first, *rest = report.verify.scenarios
    over = dataclasses.replace(first, slack_bytes=-(14 << 20))
    report = dataclasses.replace(report, verify=dataclasses.replace(report.verify, scenarios=(over, *rest)))
    frame = verify_frame(report)
    outcomes = [row[frame.columns.index("outcome")] for row in frame.rows]
    assert outcomes == ["ok, within 16.00 MiB", "ok", "ok"]
