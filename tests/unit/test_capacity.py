"""Capacity: what the KV figure holds on the binding rank, whether max_model_len fits, the levers,
the safe serve flags, and the over-commit and verify tolerances.

Every expectation is written out as arithmetic on the canonical boot of factories.py (numbers in
GiB, multiples of 1/4), not taken from the implementation.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from factories import BOOT_REQUESTED, GEOMETRY, MiB, boot_rank, config, gib, owners_of, plain_rank, report

from kvaudit.capacity import OVERCOMMIT_TOLERANCE_BYTES, KvGeometry, capacity, verify_holds
from kvaudit.ledger import check_balance
from kvaudit.schema import Owner, Source, Verdict, Verify

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


def test_the_flags_lower_a_gmu_above_free_memory_only_where_it_was_the_extensible_caches_cap():
    """vLLM 0.34's extensible KV cache: the GMU is only a cap (1.0 by default, above what is free);
    the flags pin the KV bytes, which turns that cache off, and vLLM's start-up check then needs the
    GMU within the memory free at start: the highest that passes (free 78 of 80 GiB: 0.975). A boot
    sized otherwise keeps its own GMU: vLLM checked it, and its free memory was read earlier."""
    total = gib(80)
    rank = cap_rank(0, gib(50.5), total=total, requested=total, free_at_start=gib(78))
    capped = capacity([rank], config(gpu_memory_utilization=1.0), GEOMETRY, budget_was_a_cap=True)
    assert "--gpu-memory-utilization=0.975" in capped.safe_serve_flags
    kept = capacity([rank], config(gpu_memory_utilization=1.0), GEOMETRY)
    assert "--gpu-memory-utilization=1.0" in kept.safe_serve_flags


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


def test_the_gmu_lever_turns_the_extensible_kv_cache_off_where_serve_sizes_after_warmup():
    """vLLM 0.34's serve sizes the KV cache after warmup by default, where the GMU is only a cap:
    the lever's figure is sizing from the profile's, so its flag turns the extensible cache off."""
    cap = capacity([cap_rank(0, gib(50.5))], config(max_model_len=425_984), GEOMETRY, serve_sizes_after_warmup=True)
    lever = next(lv for lv in cap.levers if lv.name == "gpu_memory_utilization")
    assert lever.flag == "--gpu-memory-utilization=0.8938 --no-enable-extensible-kv-cache"
    assert lever.note.endswith("; vLLM 0.34 sizes the KV cache after warmup unless told not to")


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


def test_a_plans_overcommit_is_worded_as_a_prediction_not_as_what_a_boot_did():
    # GIVEN the same over-commits as above, predicted by `kvaudit plan` (nothing was booted)
    over = report([boot_rank(kv=gib(50.5), pool=gib(1.75))], cfg=config(max_model_len=4096), source=Source.PLAN)
    small = report([boot_rank(kv=gib(50.5) + 8 * MiB)], cfg=config(max_model_len=4096), source=Source.PLAN)
    # THEN the verdict and the note say what a rank would use; the figures and the fix are a boot's
    assert over.verdict is Verdict.FAIL
    assert over.verdict_reason == ("rank 0 would use 512.00 MiB more than it requests after KV is sized "
                                   f"(graph_pool +512.00 MiB): pass --kv-cache-memory-bytes={gib(50)}")
    assert small.verdict is Verdict.OK
    assert [w for w in small.warnings if "more than it" in w] == [
        "note: a rank would use 8.00 MiB more than it requests after KV is sized (within the 16.00 MiB tolerance)"]


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
# verify


def test_verify_holds_up_to_the_overcommit_tolerance():
    assert verify_holds([5 * MiB, 0])
    assert verify_holds([-OVERCOMMIT_TOLERANCE_BYTES, 1])
    assert not verify_holds([-OVERCOMMIT_TOLERANCE_BYTES - 1, 1])
    assert not verify_holds([])  # no measurement holds nothing


def test_no_max_model_len_lever_when_not_even_one_request_fits():
    # GIVEN one block of KV: the feasible length is 0, so shortening the context cannot help
    cap = capacity([cap_rank(0, 2 * MiB)], BIG, GEOMETRY, graph_bytes_per_size=256 * MiB)
    assert cap.max_feasible_model_len == 0
    assert "max_model_len" not in {lv.name for lv in cap.levers}
    assert not any("--max-model-len=0" in f for f in cap.safe_serve_flags)
