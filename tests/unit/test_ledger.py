"""Ledger and capacity: docs/design.md's owner formulas, balance, physical identity, KV sizing,
capacity on the binding rank, levers and the overcommit tolerance.

Every expectation is written out as arithmetic on the canonical boot of factories.py (numbers in
GiB, multiples of 1/4), not taken from the implementation.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from factories import (
    BOOT_ESTIMATE, BOOT_GMU, BOOT_OTHERS, BOOT_REQUESTED, BOOT_TOTAL, GEOMETRY, MiB, boot_phases, boot_rank, config,
    gib, owners_of, plain_rank, real_json, report, write_json,
)
from kvaudit.errors import BadInputError
from kvaudit.ledger import (
    OVERCOMMIT_TOLERANCE_BYTES, KvGeometry, capacity, check_balance, growth_after_sizing, naive_kv_available,
    owners_from_phases, rank_ledger, requested_bytes, size_kv,
)
from kvaudit.engines.inputs import load_report
from kvaudit.schema import NON_KV_OWNERS, Owner, Phase, Verdict, Verify

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
    cap = phases[Phase.CAPTURE]
    phases[Phase.CAPTURE] = dataclasses.replace(cap, torch_reserved_bytes=cap.torch_reserved_bytes + gib(0.25),
                                                device_used_bytes=cap.device_used_bytes + gib(0.25))
    assert growth_after_sizing(phases, **kw) == {Owner.TORCH_OTHER: gib(0.25)}


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
    kv = size_kv(phases, requested=BOOT_REQUESTED, others_bytes=BOOT_OTHERS, graph_pool_estimate_bytes=gib(0.125))
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
    assert size_kv(phases, requested=BOOT_REQUESTED, others_bytes=BOOT_OTHERS,
                   graph_pool_estimate_bytes=BOOT_ESTIMATE) == gib(50.5) == KV_AVAILABLE


def test_size_kv_ignores_what_came_after_sizing():
    # GIVEN the full boot, kv and capture included  THEN sizing still reads only up to graphs
    assert size_kv(boot_phases(), requested=BOOT_REQUESTED, others_bytes=BOOT_OTHERS,
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
# capacity


def cap_rank(rank, kv_available, **kw):
    # requested 70, non-KV 19.5 on every rank unless told: owners only matter for the levers
    kw.setdefault("owners", owners_of(weights=10, persistent=1.5, activation_peak=2, graph_pool=1.5, non_torch=0.5,
                                      torch_other=4))
    return plain_rank(rank, kv_available=kv_available, **kw)


def test_the_binding_rank_has_the_least_kv_and_ties_go_to_the_lower_rank():
    ranks = [cap_rank(0, gib(50.5)), cap_rank(2, gib(49.5)), cap_rank(1, gib(49.5)), cap_rank(3, None)]
    cap = capacity(ranks, config(), GEOMETRY)
    assert cap.binding_rank == 1
    assert cap.kv_available_bytes == gib(49.5)


@pytest.mark.parametrize("dcp, tokens", [
    (1, (gib(50.5) // (2 * MiB)) * 16),        # 25856 blocks × 16 tokens = 413,696
    (2, (gib(50.5) // (2 * MiB)) * 16 * 2),    # DCP: the same blocks hold twice the tokens
])
def test_kv_tokens_are_blocks_times_block_size_times_dcp(dcp, tokens):
    geometry = KvGeometry(block_size=16, bytes_per_block=2 * MiB, dcp=dcp)
    cap = capacity([cap_rank(0, gib(50.5))], config(decode_context_parallel_size=dcp, tensor_parallel_size=2), geometry)
    assert cap.kv_tokens == tokens
    assert tokens in (413_696, 827_392)
    assert cap.tokens_per_block == 16 * dcp and cap.block_size == 16 and cap.kv_bytes_per_block == 2 * MiB


@pytest.mark.parametrize("length, dcp, blocks", [
    (131072, 1, 8192),     # 131072 / 16
    (131073, 1, 8193),     # one token more: one block more
    (131072, 2, 4096),     # cdiv(131072, 2) = 65536 → 4096 blocks
    (1001, 2, 32),         # cdiv(1001, 2) = 501 → cdiv(501, 16) = 32
    (1025, 2, 33),         # 513 → 33
    (1, 4, 1),
])
def test_kv_needed_is_cdiv_of_cdiv_times_bytes_per_block(length, dcp, blocks):
    geometry = KvGeometry(block_size=16, bytes_per_block=2 * MiB, dcp=dcp)
    assert geometry.needed_bytes(length) == blocks * 2 * MiB
    cap = capacity([cap_rank(0, gib(50.5))], config(max_model_len=length, tensor_parallel_size=4,
                                                    decode_context_parallel_size=dcp), geometry)
    assert cap.kv_needed_bytes == blocks * 2 * MiB


@pytest.mark.parametrize("available_blocks, needed_blocks, fits", [
    (8193, 8192, True),    # one block left over: the null block
    (8192, 8192, False),   # exactly enough blocks, but vLLM keeps one back
    (8192, 8191, True),
])
def test_max_model_len_fits_keeps_one_null_block(available_blocks, needed_blocks, fits):
    length = needed_blocks * 16
    cap = capacity([cap_rank(0, available_blocks * 2 * MiB + 123)], config(max_model_len=length), GEOMETRY)
    assert cap.max_model_len_fits is fits
    # the feasible length is (blocks − 1) × tokens per block
    assert cap.max_feasible_model_len == (available_blocks - 1) * 16


def test_max_feasible_model_len_agrees_with_fits():
    # GIVEN 50.5 GiB = 25856 blocks  THEN 25855 × 16 = 413,680 tokens fit and one more does not
    rank = cap_rank(0, gib(50.5))
    assert capacity([rank], config(max_model_len=413_680), GEOMETRY).max_model_len_fits is True
    assert capacity([rank], config(max_model_len=413_681), GEOMETRY).max_model_len_fits is False
    assert capacity([rank], config(max_model_len=413_681), GEOMETRY).max_feasible_model_len == 413_680


def test_gmu_needed_is_the_worst_rank_rounded_up_to_four_decimals():
    # rank 0: non-KV 19.5 GiB; rank 1: non-KV 20.5 GiB (1 GiB less KV available)
    ranks = [cap_rank(0, gib(50.5)), cap_rank(1, gib(49.5))]
    cap = capacity(ranks, config(max_model_len=131072), GEOMETRY)   # needs 16 GiB
    # (20.5 + 16 + 2/1024 (null block)) / 80 = 0.45627... → 0.4563
    assert cap.gmu_needed == 0.4563
    assert (gib(20.5) + gib(16) + 2 * MiB) / gib(80) == pytest.approx(0.456274414)


def test_physical_headroom_is_the_tightest_rank():
    ranks = [cap_rank(0, gib(50.5), free_at_start=gib(78)), cap_rank(1, gib(50.5), free_at_start=gib(75))]
    assert capacity(ranks, config(), GEOMETRY).physical_headroom_bytes == gib(75 - 70)
    ranks.append(cap_rank(2, gib(50.5), free_at_start=None))
    assert capacity(ranks, config(), GEOMETRY).physical_headroom_bytes is None


def test_without_geometry_the_log_facts_decide():
    cap = capacity([cap_rank(0, gib(1))], config(max_model_len=200_000), None, known_kv_tokens=140_000,
                   known_max_feasible_model_len=131_968)
    assert cap.kv_tokens == 140_000 and cap.max_feasible_model_len == 131_968
    assert cap.max_model_len_fits is False
    assert cap.kv_needed_bytes is None and cap.gmu_needed is None


def test_a_config_that_fits_has_no_levers_and_whole_block_serve_flags():
    cap = capacity([cap_rank(0, gib(50.5) + 12345)], config(max_model_len=131072), GEOMETRY)
    assert cap.max_model_len_fits is True
    assert cap.levers == ()
    # 50.5 GiB + 12345 B → 25856 whole blocks of 2 MiB = 50.5 GiB
    assert cap.safe_serve_flags == (f"--kv-cache-memory-bytes={gib(50.5)}", "--gpu-memory-utilization=0.875",
                                    "--max-model-len=131072")


BIG = config(max_model_len=1_048_576, max_num_batched_tokens=8192, cudagraph_capture_sizes=(1, 2, 4, 8, 16),
             enforce_eager=False)


def test_levers_of_a_config_that_does_not_fit():
    # GIVEN 50.5 GiB KV (25856 blocks), 8 GiB headroom, and 1M tokens asked (65536 blocks = 128 GiB)
    cap = capacity([cap_rank(0, gib(50.5))], BIG, GEOMETRY, graph_bytes_per_size=256 * MiB)
    assert cap.max_model_len_fits is False
    assert cap.gmu_needed == 1.8438     # (19.5 + 128 + 2/1024) / 80 = 1.84377…
    levers = {lv.name: lv for lv in cap.levers}
    assert list(levers) == ["max_model_len", "gpu_memory_utilization", "cudagraph_capture_sizes", "enforce_eager",
                            "max_num_batched_tokens"]

    # max_model_len: down to the feasible 25855 × 16 = 413,680; frees (65536 − 25855) blocks
    lv = levers["max_model_len"]
    assert lv.flag == "--max-model-len=413680"
    assert lv.frees_bytes == (65536 - 25855) * 2 * MiB
    assert lv.frees_tokens == 1_048_576 - 413_680

    # GMU: capped by the physical ceiling floor((70 + 8) / 80, 4 decimals) = 0.975 → 78 GiB, frees 8 GiB
    lv = levers["gpu_memory_utilization"]
    assert lv.flag == "--gpu-memory-utilization=0.975"
    assert lv.frees_bytes == math.ceil(gib(80) * 0.975) - gib(70) == gib(8)
    assert lv.frees_tokens == (gib(8) // (2 * MiB)) * 16
    assert "at most 8.00 GiB" in lv.note and "1.8438 would be needed, above the physical ceiling 0.975" in lv.note

    # cudagraph sizes: the shortfall (77.5 GiB) is more than all but one size frees: keep the smallest
    lv = levers["cudagraph_capture_sizes"]
    assert lv.flag == "--cudagraph-capture-sizes 1"
    assert lv.frees_bytes == 4 * 256 * MiB and lv.frees_tokens == 512 * 16

    # enforce_eager: the whole graph pool owner of the binding rank
    lv = levers["enforce_eager"]
    assert lv.flag == "--enforce-eager" and lv.frees_bytes == gib(1.5) and lv.frees_tokens == 768 * 16

    # max_num_batched_tokens: halved, frees half the activation peak (2 GiB − 2 GiB × 4096 // 8192)
    lv = levers["max_num_batched_tokens"]
    assert lv.flag == "--max-num-batched-tokens=4096" and lv.frees_bytes == gib(1) and lv.frees_tokens == 512 * 16


def test_safe_flags_shorten_the_context_when_gmu_cannot_reach():
    cap = capacity([cap_rank(0, gib(50.5))], BIG, GEOMETRY)
    assert cap.safe_serve_flags == (f"--kv-cache-memory-bytes={gib(50.5)}", "--gpu-memory-utilization=0.875",
                                    "--max-model-len=413680")


def test_gmu_lever_and_safe_flags_when_the_needed_gmu_is_within_the_ceiling():
    # GIVEN 52 GiB needed (26624 blocks × 16 = 425,984 tokens) and 50.5 GiB available
    cfg = config(max_model_len=425_984)
    cap = capacity([cap_rank(0, gib(50.5))], cfg, GEOMETRY)
    # (19.5 + 52 + 2/1024) / 80 = 0.89377… → 0.8938, below the 0.975 ceiling
    assert cap.gmu_needed == 0.8938
    lever = next(lv for lv in cap.levers if lv.name == "gpu_memory_utilization")
    freed = math.ceil(gib(80) * 0.8938) - gib(70)
    assert lever.flag == "--gpu-memory-utilization=0.8938" and lever.frees_bytes == freed
    assert "would be needed" not in lever.note
    # the safe flags use that GMU and keep the length: KV grows by what the GMU frees, in whole blocks
    kv = (gib(50.5) + freed) // (2 * MiB) * 2 * MiB
    assert cap.safe_serve_flags == (f"--kv-cache-memory-bytes={kv}", "--gpu-memory-utilization=0.8938",
                                    "--max-model-len=425984")
    assert GEOMETRY.needed_bytes(425_984) + 2 * MiB <= kv


def test_cudagraph_lever_drops_only_as_many_sizes_as_the_shortfall_needs():
    # GIVEN a shortfall of 300 MiB: needed 52010 MiB (26005 blocks) + null block − 51712 MiB available
    cfg = dataclasses.replace(BIG, max_model_len=26005 * 16)
    cap = capacity([cap_rank(0, gib(50.5))], cfg, GEOMETRY, graph_bytes_per_size=256 * MiB)
    lever = next(lv for lv in cap.levers if lv.name == "cudagraph_capture_sizes")
    # cdiv(300, 256) = 2 sizes go: the two largest
    assert lever.flag == "--cudagraph-capture-sizes 1 2 4"
    assert lever.frees_bytes == 512 * MiB and lever.frees_tokens == 256 * 16


@pytest.mark.parametrize("change, absent", [
    (dict(graph_bytes_per_size=None), "cudagraph_capture_sizes"),         # per-size bytes unknown
    (dict(cfg=dataclasses.replace(BIG, cudagraph_capture_sizes=(8,))), "cudagraph_capture_sizes"),
    (dict(cfg=dataclasses.replace(BIG, enforce_eager=True)), "enforce_eager"),
    (dict(cfg=dataclasses.replace(BIG, max_num_batched_tokens=None)), "max_num_batched_tokens"),
    (dict(free=gib(70)), "gpu_memory_utilization"),                      # no physical headroom
])
def test_levers_that_cannot_be_computed_are_left_out(change, absent):
    cfg = change.get("cfg", BIG)
    ranks = [cap_rank(0, gib(50.5), free_at_start=change.get("free", gib(78)))]
    cap = capacity(ranks, cfg, GEOMETRY, graph_bytes_per_size=change.get("graph_bytes_per_size", 256 * MiB))
    names = [lv.name for lv in cap.levers]
    assert absent not in names
    assert "max_model_len" in names


# ------------------------------------------------------------------------------------------
# overcommit


def test_overcommit_beyond_the_tolerance_fails_the_verdict():
    # GIVEN the graph pool above its estimate: actual 1.75 + 0.25 = 2.0 GiB vs 1.5, KV sized at 50.5
    rank = boot_rank(kv=gib(50.5), pool=gib(1.75))
    assert rank.owners[Owner.KV_UNALLOCATED] == gib(70 - (19.5 - 1.5 + 2.0) - 50.5)  # −0.5 GiB
    rep = report([rank], cfg=config(max_model_len=4096))
    # THEN the verdict fails and names the excess; levers are offered although max_model_len fits
    assert rep.capacity.max_model_len_fits is True
    assert rep.verdict is Verdict.FAIL
    # the reason names the owner that grew after sizing (graph_pool: 1.5 estimate → 2.0 actual) and
    # the flag that fixes it: KV less the overcommit, in whole blocks: 50.5 − 0.5 = 50 GiB
    assert rep.verdict_reason == ("rank 0 used 512.00 MiB more than it requested after KV was sized "
                                  f"(graph_pool +512.00 MiB): pass --kv-cache-memory-bytes={gib(50)}")
    assert rep.capacity.levers
    assert gib(0.5) > OVERCOMMIT_TOLERANCE_BYTES


def test_overcommit_within_the_tolerance_is_only_a_warning():
    # GIVEN KV allocated 8 MiB beyond the budget (tolerance 16 MiB)
    rank = boot_rank(kv=gib(50.5) + 8 * MiB)
    assert rank.owners[Owner.KV_UNALLOCATED] == -8 * MiB
    rep = report([rank], cfg=config(max_model_len=4096))
    assert rep.verdict is Verdict.OK
    assert rep.capacity.levers == ()
    assert any("8.00 MiB more than it requested" in w and "16.00 MiB tolerance" in w for w in rep.warnings)


def test_overcommit_exactly_at_the_tolerance_is_still_a_warning():
    rep = report([boot_rank(kv=gib(50.5) + OVERCOMMIT_TOLERANCE_BYTES)], cfg=config(max_model_len=4096))
    assert rep.verdict is Verdict.OK and rep.warnings
    rep = report([boot_rank(kv=gib(50.5) + OVERCOMMIT_TOLERANCE_BYTES + 1)], cfg=config(max_model_len=4096))
    assert rep.verdict is Verdict.FAIL


def test_safe_flags_take_the_overcommit_off_the_kv_figure():
    rank = boot_rank(kv=gib(50.5) + 20 * MiB)
    cap = report([rank], cfg=config(max_model_len=4096)).capacity
    kv = (gib(50.5) - 20 * MiB) // (2 * MiB) * 2 * MiB
    assert cap.safe_serve_flags[0] == f"--kv-cache-memory-bytes={kv}"


def test_safe_flags_always_describe_a_boot_that_fits():
    # GIVEN KV available for exactly max_model_len + the null block, and a 20 MiB overcommit
    length = (gib(50.5) // (2 * MiB) - 1) * 16           # 413,680: fits with nothing to spare
    rank = boot_rank(kv=gib(50.5) + 20 * MiB)
    cap = report([rank], cfg=config(max_model_len=length)).capacity
    assert cap.max_model_len_fits is True
    flags = dict(f.removeprefix("--").split("=") for f in cap.safe_serve_flags)
    kv, flag_length = int(flags["kv-cache-memory-bytes"]), int(flags["max-model-len"])
    # THEN the flags describe a cache that holds one request of the flagged length (+ the null block)
    assert GEOMETRY.needed_bytes(flag_length) + GEOMETRY.bytes_per_block <= kv


def test_safe_flags_leave_room_for_a_verify_that_went_over_budget():
    verify = Verify(ok=False, prompt_tokens=4092, true_peak_bytes=BOOT_REQUESTED + 40 * MiB, slack_bytes=-40 * MiB,
                    error="true peak above the requested budget")
    rep = report([boot_rank()], cfg=config(max_model_len=4096), verify=verify)
    assert rep.verdict is Verdict.FAIL
    flags = dict(f.removeprefix("--").split("=") for f in rep.capacity.safe_serve_flags)
    # THEN the flagged cache is the audited KV less the 40 MiB verify went over, in whole blocks
    assert int(flags["kv-cache-memory-bytes"]) == (gib(50.5) - 40 * MiB) // (2 * MiB) * (2 * MiB)


def test_the_real_reports_balance_and_their_capacity_recomputes(real_reports):
    # GIVEN the real reports  THEN each rank balances over its known owners and the binding rank is
    # the one with the least KV available
    for name, rep in real_reports.items():
        for rank in rep.ranks:
            check_balance(rank)
        sized = [r for r in rep.ranks if r.kv_available_bytes is not None]
        assert rep.capacity.binding_rank == min(sized, key=lambda r: (r.kv_available_bytes, r.rank)).rank, name
        # run1: 6884101325 B // 294912 B per block = 23342 blocks × 128 tokens
    run1 = real_reports["run1"].capacity
    assert run1.kv_tokens == (6884101325 // 294912) * 128 == 2_987_776
    assert run1.max_feasible_model_len == (6884101325 // 294912 - 1) * 128


def test_the_real_does_not_fit_report_agrees_with_vllms_estimate(real_reports):
    # vLLM's own error said "the estimated maximum model length is 131968"
    cap = real_reports["run5"].capacity
    assert cap.max_model_len_fits is False
    assert cap.max_feasible_model_len == 131_968 == (304377201 // 294912 - 1) * 128
    # 160000 tokens = 1250 blocks × 294912 B
    assert cap.kv_needed_bytes == 1250 * 294912
    # its safe flags take the GMU route: a whole-block cache that holds 1250 blocks + the null block
    flags = dict(f.removeprefix("--").split("=") for f in cap.safe_serve_flags)
    assert int(flags["kv-cache-memory-bytes"]) % 294912 == 0
    assert int(flags["kv-cache-memory-bytes"]) >= (1250 + 1) * 294912
    assert flags["max-model-len"] == "160000" and float(flags["gpu-memory-utilization"]) == cap.gmu_needed


# ------------------------------------------------------------------------------------------
# the capture reserve (what graph profiling left outside the pool comes again with the real capture)


def test_verify_holds_up_to_the_overcommit_tolerance():
    from kvaudit.ledger import OVERCOMMIT_TOLERANCE_BYTES, verify_holds
    assert verify_holds([5 * MiB, 0])
    assert verify_holds([-OVERCOMMIT_TOLERANCE_BYTES, 1])
    assert not verify_holds([-OVERCOMMIT_TOLERANCE_BYTES - 1, 1])
    assert not verify_holds([])  # no measurement holds nothing


def test_kv_blocks_within_counts_each_tensors_allocator_rounding():
    from kvaudit.ledger import kv_blocks_within
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
    from kvaudit.ledger import kv_blocks_within
    assert kv_blocks_within(64 * MiB, [2 * MiB]) == 32
    assert kv_blocks_within(64 * MiB + 1, [2 * MiB]) == 32


def test_no_max_model_len_lever_when_not_even_one_request_fits():
    # GIVEN one block of KV: the feasible length is 0, so shortening the context cannot help
    cap = capacity([cap_rank(0, 2 * MiB)], BIG, GEOMETRY, graph_bytes_per_size=256 * MiB)
    assert cap.max_feasible_model_len == 0
    assert "max_model_len" not in {lv.name for lv in cap.levers}
    assert not any("--max-model-len=0" in f for f in cap.safe_serve_flags)
