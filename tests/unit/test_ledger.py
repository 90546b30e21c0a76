"""Ledger: docs/design.md's owner formulas, balance, physical identity and KV sizing
(tests/unit/test_capacity.py has what the KV figure holds, the levers and the tolerances).

Every expectation is written out as arithmetic on the canonical boot of factories.py (numbers in
GiB, multiples of 1/4), not taken from the implementation.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from factories import (
    BOOT_ESTIMATE,
    BOOT_GMU,
    BOOT_OTHERS,
    BOOT_REQUESTED,
    BOOT_TOTAL,
    MiB,
    boot_phases,
    boot_rank,
    gib,
    owners_of,
    plain_rank,
    real_json,
    report,
    split_limited_boot_phases,
    write_json,
)

from kvaudit.engines.inputs import load_report
from kvaudit.errors import BadInputError
from kvaudit.ledger import (
    activation_peak,
    check_balance,
    growth_after_sizing,
    kv_blocks_within,
    kv_budget,
    kv_figure,
    naive_kv_available,
    owners_from_phases,
    rank_ledger,
    requested_bytes,
)
from kvaudit.schema import NON_KV_OWNERS, Owner, Phase

# The canonical boot's owners, from docs/design.md's formulas on the table in factories.py:
WEIGHTS = gib(10.5 - 0.5)                                   # A(load) − A(baseline)
PERSISTENT = gib((11.75 - 10.75) + ((17 - 15) - (15.5 - 14)))  # A(pers) − A(prof) + non-torch growth = 1 + 0.5
ACTIVATION = gib(13.75 - 11.75)                             # P(replay) − A(persistent)
GRAPH_ACTUAL = gib(1 + 0.25)                                # pool after capture + non-torch growth in capture
GRAPH_POOL = max(BOOT_ESTIMATE, GRAPH_ACTUAL)               # 1.5: the estimate is the larger
NON_TORCH = gib((2 + 0.25) - 1 - 0.5 - 0.25)                # (U−R)(capture) − others − persistent's − capture's
TORCH_OTHER = gib((15 + 1) - (1 + 10 + 1))                  # R(capture) − pool − weights − pers. torch − KV
NON_KV = WEIGHTS + PERSISTENT + ACTIVATION + GRAPH_POOL + NON_TORCH + TORCH_OTHER  # 19.5 GiB
KV_AVAILABLE = BOOT_REQUESTED - NON_KV                      # 70 − 19.5 = 50.5 GiB
KV_CACHE = gib(50)


def kv_figure_of(phases, **kw):
    """kvaudit's KV figure from the one budget function (no KV structures, no segments)."""
    return kv_figure(kv_budget(phases, **kw))


def ledger(**kw):
    phases = boot_phases(**{k: v for k, v in kw.items() if k in ("pool", "capture_nt", "upto", "graphs_nt")},
                         kv=kw.get("kv", KV_CACHE) or 0)
    return rank_ledger(phases, device_total_bytes=kw.get("total", BOOT_TOTAL),
                       gpu_memory_utilization=kw.get("gmu", BOOT_GMU), others_bytes=kw.get("others", BOOT_OTHERS),
                       graph_pool_estimate_bytes=kw.get("estimate", BOOT_ESTIMATE),
                       kv_cache_bytes=kw.get("kv", KV_CACHE))


# ------------------------------------------------------------------------------------------
# requested


@pytest.mark.parametrize("total, gmu, expected", [
    (BOOT_TOTAL, 0.875, gib(70)),     # exact in binary
    (10, 0.15, 2),                    # 1.5 → 2
    (3, 0.5, 2),                      # 1.5 → 2
    (1000, 0.25, 250),                # exact stays exact
    (gib(80), 1.0, gib(80)),
])
def test_requested_is_the_ceiling_of_total_times_gmu(total, gmu, expected):
    # GIVEN a device total and a utilization  WHEN the budget is computed  THEN it is ceil(total × gmu)
    assert requested_bytes(total, gmu) == expected


# ------------------------------------------------------------------------------------------
# owners


def test_owners_follow_the_design_formulas_on_a_complete_boot():
    # GIVEN the canonical boot through capture
    led = ledger()
    # THEN every owner is docs/design.md's formula, computed by hand above
    assert led.requested_bytes == gib(70)
    assert led.owners == {
        Owner.WEIGHTS: gib(10), Owner.PERSISTENT: gib(1.5), Owner.ACTIVATION_PEAK: gib(2),
        Owner.GRAPH_POOL: gib(1.5), Owner.NON_TORCH: gib(0.5), Owner.TORCH_OTHER: gib(4),
        Owner.KV_CACHE: gib(50), Owner.KV_UNALLOCATED: gib(70 - 19.5 - 50),
    }
    assert (WEIGHTS, PERSISTENT, ACTIVATION, NON_TORCH, TORCH_OTHER) == (gib(10), gib(1.5), gib(2), gib(0.5), gib(4))
    assert led.graph_pool_actual_bytes == gib(1.25)
    assert led.free_at_start_bytes == gib(80 - 2)  # total − U(baseline)


def test_torch_other_holds_what_no_phase_claims():
    # GIVEN runner buffers before load (0.5), bytes the first profile pass left (0.25) and the
    # allocator's cached slack from profile on (R − A = 14 − 10.75 = 3.25)
    led = ledger()
    # THEN torch_other is exactly their sum, and none of it hides in kv_unallocated
    assert led.owners[Owner.TORCH_OTHER] == gib(0.5 + 0.25 + 3.25)
    assert led.owners[Owner.KV_UNALLOCATED] == gib(0.5)


def test_non_torch_is_what_persistent_and_graph_pool_did_not_claim():
    # GIVEN 0.5 GiB CUDA context, +0.5 in persistent, +1.75 in capture (pool segments are torch)
    owners = ledger(capture_nt=gib(1.75)).owners
    # THEN non_torch stays the context; the capture growth goes to the graph pool
    assert owners[Owner.NON_TORCH] == gib(0.5)
    assert owners[Owner.GRAPH_POOL] == gib(1 + 1.75)


@pytest.mark.parametrize("peak_reserved, expected", [
    (gib(15 + 2.5), gib(2.5)),   # PR(replay) − R(persistent) = 2.5 > P − A = 2: the segments count
    (gib(15 + 1), gib(2)),       # the allocator reused cached segments: the allocated transient stands
    (None, gib(2)),              # not measured (older reports, CPU): DESIGN's P(replay) − A(persistent)
])
def test_activation_peak_budgets_the_reserved_transient_when_larger(peak_reserved, expected):
    phases = boot_phases()
    phases[Phase.REPLAY] = dataclasses.replace(phases[Phase.REPLAY], torch_peak_reserved_bytes=peak_reserved)
    led = rank_ledger(phases, device_total_bytes=BOOT_TOTAL, gpu_memory_utilization=BOOT_GMU,
                      others_bytes=BOOT_OTHERS, graph_pool_estimate_bytes=BOOT_ESTIMATE, kv_cache_bytes=KV_CACHE)
    assert led.owners[Owner.ACTIVATION_PEAK] == expected
    # the KV figure pays for it: 70 − (19.5 − 2 + activation)
    assert led.kv_available_bytes == BOOT_REQUESTED - (NON_KV - ACTIVATION + expected)
    assert sum(led.owners.values()) == BOOT_REQUESTED


def test_growth_after_sizing_names_the_owners_that_grew():
    # canonical boot: nothing grew after sizing (graph actual 1.25 stays under the 1.5 estimate)
    kw = dict(others_bytes=BOOT_OTHERS, graph_pool_estimate_bytes=BOOT_ESTIMATE, kv_cache_bytes=KV_CACHE,
              requested=BOOT_REQUESTED)
    assert growth_after_sizing(boot_phases(), **kw) == {}
    # the capture's pool at 1.75 GiB: actual 2.0 GiB, 0.5 above what sizing charged
    assert growth_after_sizing(boot_phases(pool=gib(1.75)), **kw) == {Owner.GRAPH_POOL: gib(0.5)}
    # 0.25 GiB of torch bytes outside the pool arrive with KV (KV structures): torch_other grows
    phases = boot_phases()
    for phase in (Phase.KV, Phase.CAPTURE):
        r = phases[phase]
        phases[phase] = dataclasses.replace(r, torch_reserved_bytes=r.torch_reserved_bytes + gib(0.25),
                                            device_used_bytes=r.device_used_bytes + gib(0.25))
    assert growth_after_sizing(phases, **kw) == {Owner.TORCH_OTHER: gib(0.25)}
    # 0.5 GiB the capture holds outside its pool (vLLM 0.33's graph managers' buffers) is graph
    # memory: actual 1.25 + 0.5 = 1.75, 0.25 above the estimate; torch_other does not grow
    phases = boot_phases()
    cap = phases[Phase.CAPTURE]
    phases[Phase.CAPTURE] = dataclasses.replace(cap, torch_reserved_bytes=cap.torch_reserved_bytes + gib(0.5),
                                                device_used_bytes=cap.device_used_bytes + gib(0.5))
    assert growth_after_sizing(phases, **kw) == {Owner.GRAPH_POOL: gib(0.25)}


@pytest.mark.parametrize("pool, capture_nt, estimate, expected_actual, expected_owner", [
    (gib(1), gib(0.25), gib(1.5), gib(1.25), gib(1.5)),      # estimate above actual: estimate held
    (gib(1.75), gib(0.25), gib(1.5), gib(2.0), gib(2.0)),    # actual above estimate: actual held
    (gib(1), gib(0), gib(1), gib(1), gib(1)),                # equal
    (0, 0, 0, 0, 0),                                         # eager: nothing
    (gib(1), gib(0.5), None, gib(1.5), gib(1.5)),            # no estimate: the actual
])
def test_graph_pool_holds_the_larger_of_estimate_and_actual(pool, capture_nt, estimate, expected_actual,
                                                            expected_owner):
    # GIVEN a capture whose pool and non-torch growth are known
    led = ledger(pool=pool, capture_nt=capture_nt, estimate=estimate)
    # THEN actual = pool bytes + capture's non-torch growth; the owner = max(estimate, actual)
    assert led.graph_pool_actual_bytes == expected_actual
    assert led.owners[Owner.GRAPH_POOL] == expected_owner


@pytest.mark.parametrize("kv, pool, capture_nt, estimate", [
    (gib(50), gib(1), gib(0.25), gib(1.5)),
    (gib(50.5), gib(1.75), gib(0.25), gib(1.5)),   # over budget: kv_unallocated negative
    (gib(12) + 12345, gib(0.5) + 7, 4096 * 3, gib(2) + 1),
    (1, 0, 0, 0),
])
def test_ledger_balances_exactly(kv, pool, capture_nt, estimate):
    # GIVEN any complete boot  WHEN its owners are summed
    led = ledger(kv=kv, pool=pool, capture_nt=capture_nt, estimate=estimate)
    # THEN six owners + torch_other + kv_cache + kv_unallocated == requested, to the byte
    assert None not in led.owners.values()
    assert sum(led.owners.values()) == led.requested_bytes == math.ceil(BOOT_TOTAL * BOOT_GMU)


@pytest.mark.parametrize("kv, pool, capture_nt, estimate, graphs_nt", [
    (gib(50), gib(1), gib(0.25), gib(1.5), 0),
    (gib(50.5), gib(1.75), gib(0.25), gib(1.5), 0),
    (gib(33) + 999, gib(0.25) + 3, 8192, gib(3), 0),
    (gib(50), gib(1), gib(0.25), gib(1.5), gib(0.25)),   # graph profiling left non-torch behind
    (gib(50), gib(1), gib(0.25), gib(0.125), gib(0.25)),
])
def test_physical_identity_matches_device_use(kv, pool, capture_nt, estimate, graphs_nt):
    # GIVEN a complete boot
    phases = boot_phases(kv=kv, pool=pool, capture_nt=capture_nt, graphs_nt=graphs_nt)
    led = ledger(kv=kv, pool=pool, capture_nt=capture_nt, estimate=estimate, graphs_nt=graphs_nt)
    assert sum(led.owners.values()) == led.requested_bytes
    o = led.owners
    # WHEN the transient peak and the unused graph reservation are taken out of the owners
    resident = (sum(o[x] for x in NON_KV_OWNERS) + o[Owner.KV_CACHE] - o[Owner.ACTIVATION_PEAK]
                - (o[Owner.GRAPH_POOL] - led.graph_pool_actual_bytes))
    # THEN what is left is exactly what the process holds on the device: U(last) − others
    assert resident == phases[Phase.CAPTURE].device_used_bytes - BOOT_OTHERS


def test_what_graph_profiling_leaves_behind_is_graph_memory():
    # GIVEN graph profiling leaves 0.25 GiB of non-torch memory that stays through capture
    led = ledger(graphs_nt=gib(0.25))
    # THEN the actual graph pool = 1 (pool) + 0.25 (capture growth) + 0.25 (profiling residue) and
    # non_torch stays the 0.5 GiB context
    assert led.graph_pool_actual_bytes == gib(1.5)
    assert led.owners[Owner.GRAPH_POOL] == gib(1.5) and led.owners[Owner.NON_TORCH] == gib(0.5)


def test_the_kv_figure_leaves_room_for_everything_resident_at_sizing():
    # GIVEN graph profiling left 0.25 GiB of non-torch memory, and vLLM's estimate is 0.125 GiB
    phases = boot_phases(graphs_nt=gib(0.25), upto=Phase.GRAPHS)
    kv = kv_figure_of(phases, requested=BOOT_REQUESTED, others_bytes=BOOT_OTHERS, graph_pool_estimate_bytes=gib(0.125))
    # THEN KV + what the process holds at sizing (U − others) + the transient peak fits the budget:
    # resident 17.25 − 1 = 16.25, transient 2  →  KV ≤ 70 − 18.25 = 51.75 GiB
    resident = phases[Phase.GRAPHS].device_used_bytes - BOOT_OTHERS
    assert kv + resident + ACTIVATION <= BOOT_REQUESTED


def test_the_canonical_physical_identity_by_hand():
    # 19.5 + 50 − 2 − (1.5 − 1.25) = 67.25 GiB  ==  U(capture) − others = (1 + 16 + 50 + 1.25) − 1
    assert NON_KV + KV_CACHE - ACTIVATION - (GRAPH_POOL - GRAPH_ACTUAL) == gib(67.25)
    assert boot_phases()[Phase.CAPTURE].device_used_bytes - BOOT_OTHERS == gib(67.25)


# ------------------------------------------------------------------------------------------
# sizing


def test_size_kv_is_requested_minus_the_non_kv_owners_at_sizing_time():
    # GIVEN phases up to graphs (vLLM asks for the KV figure there)
    phases = boot_phases(upto=Phase.GRAPHS)
    # THEN the figure is 70 − (10 + 1.5 + 2 + 1.5 (estimate) + 0.5 + 4) = 50.5 GiB
    assert kv_figure_of(phases, requested=BOOT_REQUESTED, others_bytes=BOOT_OTHERS,
                   graph_pool_estimate_bytes=BOOT_ESTIMATE) == gib(50.5) == KV_AVAILABLE


def test_size_kv_ignores_what_came_after_sizing():
    # GIVEN the full boot, kv and capture included  THEN sizing still reads only up to graphs
    assert kv_figure_of(boot_phases(), requested=BOOT_REQUESTED, others_bytes=BOOT_OTHERS,
                   graph_pool_estimate_bytes=BOOT_ESTIMATE) == gib(50.5)
    assert ledger().kv_available_bytes == gib(50.5)


def test_naive_kv_available_is_the_single_profile_figure():
    # naive = requested − (weights + P(profile) − A(load) + non-torch at profile + graph estimate)
    #       = 70 − (10 + (13.75 − 10.5) + (15.5 − 14 − 1) + 1.5) = 70 − 15.25 = 54.75 GiB
    phases = boot_phases()
    assert naive_kv_available(phases, requested=BOOT_REQUESTED, others_bytes=BOOT_OTHERS,
                              graph_pool_estimate_bytes=BOOT_ESTIMATE) == gib(54.75)


def test_over_allocation_is_naive_minus_kvaudits_figure():
    # GIVEN the canonical rank  WHEN capacity is computed
    cap = report([boot_rank()]).capacity
    # THEN over-allocation = 54.75 − 50.5 = 4.25 GiB (what warmup and the replay add)
    assert cap.naive_kv_available_bytes == gib(54.75)
    assert cap.over_allocation_bytes == gib(4.25)


# ------------------------------------------------------------------------------------------
# balance check


def test_check_balance_accepts_a_balanced_rank():
    check_balance(boot_rank())  # no exception is the assertion; the sum is re-checked here too
    assert sum(boot_rank().owners.values()) == BOOT_REQUESTED


def test_check_balance_raises_a_one_line_error_on_an_edited_rank():
    # GIVEN a rank whose kv_cache was edited by one byte
    rank = boot_rank(3)
    edited = dataclasses.replace(rank, owners={**rank.owners, Owner.KV_CACHE: rank.owners[Owner.KV_CACHE] + 1})
    # THEN the ledger does not balance, and says so in one line naming the rank and the excess
    with pytest.raises(BadInputError) as info:
        check_balance(edited)
    message = str(info.value)
    assert "\n" not in message and "rank 3" in message and "(+1)" in message


def test_loading_an_edited_real_report_fails_the_balance(tmp_path):
    # GIVEN a real report whose weights were edited by hand (+4096 bytes)
    data = real_json("run1")
    data["ranks"][0]["owners"]["weights"] += 4096
    path = write_json(tmp_path / "edited.json", data)
    # THEN loading it is bad input, one line, naming the rank and the excess
    with pytest.raises(BadInputError, match=r"rank 0: .*\(\+4096\)") as info:
        load_report(path)
    assert "\n" not in str(info.value)


def test_check_balance_skips_ranks_with_unknown_owners():
    rank = plain_rank(0, kv_available=None, owners=owners_of(weights=10, kv_cache=None))
    check_balance(rank)  # unknowns: nothing to prove
    assert rank.owners[Owner.KV_CACHE] is None


def test_check_balance_over_seven_owners_when_torch_other_is_absent():
    # GIVEN a report written without the torch_other extension: its bytes sit in kv_unallocated
    owners = owners_of(weights=10, persistent=1.5, activation_peak=2, graph_pool=1.5, non_torch=0.5,
                       kv_cache=50, kv_unallocated=4.5)
    assert owners[Owner.TORCH_OTHER] is None
    check_balance(plain_rank(0, kv_available=gib(50.5), owners=owners))  # 10+1.5+2+1.5+0.5+50+4.5 = 70
    # AND one byte off still fails
    owners[Owner.KV_UNALLOCATED] += 1
    with pytest.raises(BadInputError):
        check_balance(plain_rank(0, kv_available=gib(50.5), owners=owners))


# ------------------------------------------------------------------------------------------
# nulls propagate


def test_a_partial_boot_leaves_unknown_owners_null_never_zero():
    # GIVEN a rank that stopped after profile (no persistent, no replay, no KV)
    led = ledger(upto=Phase.PROFILE, kv=None)
    # THEN weights is known; every owner that needs a missing phase is None, not 0
    assert led.owners[Owner.WEIGHTS] == gib(10)
    for owner in (Owner.PERSISTENT, Owner.ACTIVATION_PEAK, Owner.KV_CACHE, Owner.KV_UNALLOCATED):
        assert led.owners[owner] is None, owner
    assert led.kv_available_bytes is None          # no replay: nothing to size from
    assert led.graph_pool_actual_bytes is None     # no capture


def test_unknown_others_make_non_torch_unknown_but_not_torch_other():
    led = ledger(others=None)
    assert led.owners[Owner.NON_TORCH] is None
    assert led.owners[Owner.KV_UNALLOCATED] is None
    assert led.owners[Owner.TORCH_OTHER] == gib(4)   # torch bytes do not depend on NVML
    assert led.naive_kv_available_bytes is None


def test_unknown_device_total_means_no_budget():
    led = ledger(total=None)
    assert led.requested_bytes is None and led.kv_available_bytes is None and led.free_at_start_bytes is None
    assert led.owners[Owner.KV_UNALLOCATED] is None
    assert led.owners[Owner.WEIGHTS] == gib(10)


def test_a_missing_measurement_in_one_phase_propagates():
    phases = boot_phases()
    phases[Phase.REPLAY] = dataclasses.replace(phases[Phase.REPLAY], torch_peak_allocated_bytes=None)
    owners = owners_from_phases(phases, others_bytes=BOOT_OTHERS, graph_pool_estimate_bytes=BOOT_ESTIMATE,
                                kv_cache_bytes=KV_CACHE, requested=BOOT_REQUESTED)
    assert owners[Owner.ACTIVATION_PEAK] is None
    assert owners[Owner.KV_UNALLOCATED] is None
    assert owners[Owner.WEIGHTS] == gib(10)


def test_unknown_capture_pool_bytes_leave_the_graph_actual_unknown():
    # GIVEN a capture phase whose pool bytes could not be read (U and R are known)
    phases = boot_phases()
    phases[Phase.CAPTURE] = dataclasses.replace(phases[Phase.CAPTURE], graph_pool_bytes=None)
    led = rank_ledger(phases, device_total_bytes=BOOT_TOTAL, gpu_memory_utilization=BOOT_GMU,
                      others_bytes=BOOT_OTHERS, graph_pool_estimate_bytes=BOOT_ESTIMATE, kv_cache_bytes=KV_CACHE)
    # THEN the actual is unknown (not 0 + 0.25 GiB of growth)
    assert led.graph_pool_actual_bytes is None


# ------------------------------------------------------------------------------------------
# whole blocks within the allocator's rounding


def test_kv_blocks_within_counts_each_tensors_allocator_rounding():
    # An 8B dense model on the H200: 32 tensors of 64 KiB per block; 123280 MiB of budget.
    pages = [64 * 1024] * 32
    budget = 123280 * MiB
    n = kv_blocks_within(budget, pages)
    segments = sum(-(-n * p // (2 * MiB)) * 2 * MiB for p in pages)
    assert segments <= budget
    assert sum(-(-(n + 1) * p // (2 * MiB)) * 2 * MiB for p in pages) > budget
    # 61640 blocks fit by bytes; at 61632 (a multiple of 32) every tensor is whole 2 MiB pages,
    # where vLLM's byte figure (61640) would have taken 32 × 0.25 MiB more than it has
    assert n == 61632
    assert kv_blocks_within(0, pages) == 0 and kv_blocks_within(budget, []) == 0


def test_kv_blocks_within_loses_nothing_when_tensors_are_whole_segments():
    assert kv_blocks_within(64 * MiB, [2 * MiB]) == 32
    assert kv_blocks_within(64 * MiB + 1, [2 * MiB]) == 32


def test_activation_peak_is_measured_from_what_the_replay_left_when_it_released_memory():
    # GIVEN host RSS (the CPU probe: allocated = reserved = RSS growth) that fell 10 MiB during the
    # replay, the heap returning pages to the system; its peak 650 MiB above the persistent reading
    mib = 1 << 20
    phases = boot_phases()
    persistent = phases[Phase.PERSISTENT].torch_allocated_bytes
    phases[Phase.REPLAY] = dataclasses.replace(
        phases[Phase.REPLAY], torch_allocated_bytes=persistent - 10 * mib, torch_reserved_bytes=persistent - 10 * mib,
        torch_peak_allocated_bytes=persistent + 650 * mib, torch_peak_reserved_bytes=persistent + 650 * mib)
    # THEN the transient is counted from the lower reading after the replay: KV sits on that state,
    # and a step reaching the same peak needs all 660 MiB above it
    assert activation_peak(phases) == 660 * mib
    # a replay that ends above where it started changes nothing: the base stays the persistent reading
    phases[Phase.REPLAY] = dataclasses.replace(phases[Phase.REPLAY], torch_allocated_bytes=persistent + 5 * mib,
                                               torch_reserved_bytes=persistent + 5 * mib)
    assert activation_peak(phases) == 650 * mib


def test_the_long_prefill_probe_is_charged_where_its_transient_is_larger():
    """vLLM 0.33 MRv2's profile pass runs without attention; kvaudit's long-prefill probe (one
    max_num_batched_tokens chunk over a max_model_len context) is charged beside the replay."""
    from kvaudit.ledger import StepTransients
    assert StepTransients().largest is None
    assert StepTransients(gib(0.5), None).largest == gib(0.5)
    assert StepTransients(None, gib(3)).largest == gib(3)
    assert StepTransients(gib(0.5), gib(3)).largest == gib(3)
    phases = boot_phases()
    kw = dict(device_total_bytes=BOOT_TOTAL, gpu_memory_utilization=BOOT_GMU, others_bytes=BOOT_OTHERS,
              graph_pool_estimate_bytes=BOOT_ESTIMATE, kv_cache_bytes=KV_CACHE)
    plain = rank_ledger(phases, **kw)
    probed = rank_ledger(phases, transients=StepTransients(None, gib(3)), **kw)
    assert plain.owners[Owner.ACTIVATION_PEAK] == ACTIVATION  # the replay's 2 GiB
    assert probed.owners[Owner.ACTIVATION_PEAK] == gib(3)
    assert probed.kv_available_bytes == plain.kv_available_bytes - gib(1)
    # smaller than the replay's transient: nothing changes
    assert rank_ledger(phases, transients=StepTransients(gib(1)), **kw).owners == plain.owners


def test_with_expandable_segments_the_probe_stands_for_the_replays_reserved_transient():
    """vLLM 0.34 (H100, DeepSeek-V3 dims + MTP, expandable segments): the profile pass reserved
    9,160 MiB for 4,969 allocated, the probe measured 6,182 and the full batch grew reserved by
    5,642. Under expandable segments a probed boot charges the replay's allocated transient and
    the probe, never the pass's reserved peak."""
    from kvaudit.ledger import StepTransients
    phases = split_limited_boot_phases()
    # the replay's own: 2 GiB allocated, 3 GiB reserved
    assert activation_peak(phases) == gib(3)
    probe = gib(2.5)
    assert activation_peak(phases, StepTransients(None, probe, expandable_segments=True)) == probe
    # a probe below the replay's allocated transient: the allocated one is charged
    assert activation_peak(phases, StepTransients(None, gib(1), expandable_segments=True)) == ACTIVATION
    # the capture's transient is charged where it is the largest, as before
    assert activation_peak(phases, StepTransients(gib(3.5), probe, expandable_segments=True)) == gib(3.5)


def test_the_default_allocator_and_an_unprobed_boot_keep_the_replays_reserved_transient():
    """With the default allocator serving fragments its cached blocks beyond any single step (the
    MTP model on the H200: 9,680 MiB reserved for 5,348 allocated), so nothing is lowered there;
    without the probe nothing measured the steps' reserved growth outside the split limit."""
    from kvaudit.ledger import StepTransients
    phases = split_limited_boot_phases()
    assert activation_peak(phases, StepTransients(None, gib(2.5))) == gib(3)
    assert activation_peak(phases, StepTransients(gib(0.5), None, expandable_segments=True)) == gib(3)
    assert activation_peak(phases, StepTransients(expandable_segments=True)) == gib(3)


@pytest.mark.parametrize("env,expected", [
    ({}, False),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, True),
    ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64, expandable_segments: True"}, True),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, False),
    ({"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6"}, False),
    ({"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"}, True),  # ROCm builds read this one
    # torch reads the first that is set, PYTORCH_ALLOC_CONF before the older names, and the last option
    ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:512", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, False),
    ({"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, True),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,expandable_segments:False"}, False),
    ({"MALLOC_ARENA_MAX": "2"}, False),
])
def test_expandable_segments_is_read_from_torchs_allocator_settings(env, expected):
    from kvaudit.ledger import expandable_segments
    assert expandable_segments(env) is expected
