"""kvaudit's own graph-pool figure: the pool reading on an allocator snapshot recorded on the
H200 (tests/gpu/record_pool_snapshot.py) and the estimate rules of GraphMeasurement."""

from __future__ import annotations

import json
from pathlib import Path

from kvaudit.engines.probes.snapshot import pool_totals
from kvaudit.ledger import measure_graphs

MiB = 1 << 20
SNAPSHOT = Path(__file__).parents[1] / "fixtures" / "snapshots" / "h200-pool-snapshot.json"


def test_pool_reading_matches_the_allocators_own_total_on_a_recorded_h200_snapshot():
    rec = json.loads(SNAPSHOT.read_text())
    reserved, allocated = pool_totals(rec["live"], rec["device"], rec["pool"])
    # the 48 MiB intermediate's segment (freed inside the capture, its pages then held the 32 MiB
    # output) and the 64 MiB output's: freed pages inside the pool included
    assert reserved == 48 * MiB + 64 * MiB
    assert reserved <= rec["pool_reserved_truth"]  # the allocator's total also grew its default pool
    assert allocated == rec["pool_allocated_truth"] == 96 * MiB  # the two live outputs
    assert pool_totals(rec["live"], rec["device"]) == (reserved, allocated)  # the only private pool
    assert pool_totals(rec["live"], rec["device"] + 1, rec["pool"]) == (0, 0)
    assert pool_totals(rec["released"], rec["device"]) == (0, 0)  # torn down: nothing retained


def test_estimate_is_pool_high_water_plus_driver_memory():
    g = measure_graphs(resident=(1000 * MiB, 2000 * MiB), start=(1100 * MiB, 2100 * MiB),
                       end=(1180 * MiB, 2226 * MiB), peak_reserved=1234 * MiB, pool=80 * MiB,
                       after=(1032 * MiB, 2078 * MiB))
    assert g.live_non_torch_bytes == 46 * MiB
    assert g.transient_bytes == 54 * MiB
    assert g.estimate_bytes == 126 * MiB
    assert g.residue_bytes == 32 * MiB and g.capture_reserve_bytes == 32 * MiB
    assert g.residue_non_torch_bytes == 46 * MiB  # driver memory the teardown did not give back


def test_a_retained_pool_with_live_blocks_is_charged_on_top_and_not_again_as_residue():
    g = measure_graphs(resident=(0, 0), start=(0, 0), end=(80 * MiB, 80 * MiB), peak_reserved=80 * MiB,
                       pool=80 * MiB, after=(64 * MiB, 64 * MiB), retained=(32 * MiB, 32 * MiB))
    assert g.estimate_bytes == 80 * MiB + 32 * MiB
    assert g.capture_reserve_bytes == 32 * MiB  # 64 MiB left, 32 of them the retained pool


def test_a_retained_pool_of_free_pages_holds_the_capture_again():
    g = measure_graphs(resident=(0, 0), start=(0, 0), end=(80 * MiB, 80 * MiB), peak_reserved=80 * MiB,
                       pool=80 * MiB, after=(80 * MiB, 80 * MiB), retained=(96 * MiB, 0))
    assert g.estimate_bytes == 96 * MiB
