"""The verify scenario's bracket on a rank (AuditMixin.kvaudit_verify_begin/end) with a fake probe:
its true peak is the peak reserved + non-torch, its torch figures are recorded, and with
KVAUDIT_VERIFY_CAP=1 the allocator is held to the budget less non-torch memory for the scenario
and let go at its end (the GPU experiment of issue 28 item 4, stage `load2-capped`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from factories import GiB, MiB

from kvaudit.engines.journal import Journal
from kvaudit.engines.sequence import RankSequencer
from kvaudit.engines.vllm.audit import VERIFY_CAP_ENV, AuditMixin


class Probe:
    def __init__(self):
        self.reserved, self.allocated, self.peak = 100 * GiB, 90 * GiB, 100 * GiB

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


class Rank(AuditMixin):
    def __init__(self):
        self.rank, self._kva_requested = 0, 120 * GiB
        self._kva_seq = RankSequencer(Probe(), Journal(None))
        self.caps: list[int | None] = []

    def _kva_non_torch_now(self):
        return 500 * MiB

    def _kva_cap_allocator(self, cap_bytes):
        self.caps.append(cap_bytes)


def scenario(rank: Rank) -> dict:
    rank.kvaudit_verify_begin("batch")
    rank._kva_seq.probe.peak = 110 * GiB   # what the scenario reserved at its highest
    return rank.kvaudit_verify_end()


def test_a_scenarios_true_peak_is_its_peak_reserved_plus_non_torch_and_no_cap_by_default(monkeypatch):
    monkeypatch.delenv(VERIFY_CAP_ENV, raising=False)
    rank = Rank()
    result = scenario(rank)
    assert result["true_peak_bytes"] == 110 * GiB + 500 * MiB and result["requested_bytes"] == 120 * GiB
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
