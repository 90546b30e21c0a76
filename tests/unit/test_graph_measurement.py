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
    assert g.residue_bytes == 32 * MiB  # kept after the teardown: resident when KV is sized
    assert g.residue_non_torch_bytes == 46 * MiB  # driver memory the teardown did not give back


def test_vllm_033_mrv2_the_capture_holds_buffers_outside_its_pool_and_profiling_leaves_driver_memory():
    """The H200 figures of Llama-3.1-8B on vLLM 0.33.0 (tests/benchmarks/results/
    h200-real-llama-3.1-8b-vllm0.33.0.json and its vLLM log): the pool was 24 MiB, the graphs'
    driver memory 4 MiB; the capture held about 60 MiB in all (vLLM's own log line for kvaudit's
    capture: "took 0.06 GiB"; 33 MiB of it live buffers outside the pool), and the graphs phase
    left 48 MiB of driver memory resident (44 of it from vLLM's own profiling capture). The real
    capture after KV added 58 MiB of torch memory and no driver memory: charging the pool and the
    driver memory alone (28 MiB, less than the 48 MiB already resident) left the boot 57.7 MiB
    over its budget."""
    phase_start = (15420 * MiB, 16176 * MiB)
    resident = (15420 * MiB, 16220 * MiB)  # vLLM's profiling left 44 MiB outside torch
    start = (15486 * MiB, 16286 * MiB)  # the minimal cache
    end = (15546 * MiB, 16350 * MiB)  # + 60 MiB held, + 4 MiB driver
    after = (15420 * MiB, 16224 * MiB)
    g = measure_graphs(resident=resident, start=start, end=end, peak_reserved=15552 * MiB, pool=24 * MiB,
                       after=after, phase_start=phase_start)
    assert g.session_torch_bytes == 60 * MiB and g.live_non_torch_bytes == 4 * MiB
    assert g.profiling_residue_non_torch_bytes == 48 * MiB
    assert g.transient_bytes == 6 * MiB
    # held 60 + the 48 MiB of driver memory resident at sizing, which the real capture reuses
    assert g.estimate_bytes == 108 * MiB


def test_a_retained_pool_with_live_blocks_is_charged_on_top_and_not_again_as_residue():
    g = measure_graphs(resident=(0, 0), start=(0, 0), end=(80 * MiB, 80 * MiB), peak_reserved=80 * MiB,
                       pool=80 * MiB, after=(64 * MiB, 64 * MiB), retained=(32 * MiB, 32 * MiB))
    assert g.estimate_bytes == 80 * MiB + 32 * MiB
    assert g.residue_bytes == 64 * MiB  # 32 of them the retained pool, resident at sizing


def test_a_retained_pool_of_free_pages_holds_the_capture_again():
    g = measure_graphs(resident=(0, 0), start=(0, 0), end=(80 * MiB, 80 * MiB), peak_reserved=80 * MiB,
                       pool=80 * MiB, after=(80 * MiB, 80 * MiB), retained=(96 * MiB, 0))
    assert g.estimate_bytes == 96 * MiB


def test_kv_structures_are_at_least_what_was_allocated():
    from kvaudit.ledger import kv_structures_bytes
    kv = 4 * MiB  # the minimal KV cache's tensors
    # H200, vLLM 0.26 (a cold boot): 36 MiB allocated beside the cache, 39.2 MiB reserved: the segments count
    assert kv_structures_bytes((1000 * MiB, 900 * MiB), (1000 * MiB + kv + 40141 * 1024, 900 * MiB + kv + 36 * MiB),
                               kv) == 40141 * 1024
    # H100, vLLM 0.26, DeepSeek-V3 dims with MTP, the warm boot: the allocator's cache held the minimal cache and its
    # structures, so nothing more was reserved; the real cache's structures then reserved 76.01 MiB for 75,499,008
    # bytes allocated, and the boot ended 75.39 MiB over. The allocated bytes are kept back now.
    warm_before, warm_built = (56058970112, 53593412096), (56058970112, 53593412096 + kv + 75499008)
    assert kv_structures_bytes(warm_before, warm_built, kv) == 75499008
    # nothing built beside the cache (or the cache landed in reserved memory already there): nothing kept back
    assert kv_structures_bytes((100 * MiB, 50 * MiB), (100 * MiB, 50 * MiB + kv), kv) == 0
