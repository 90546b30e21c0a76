"""`--trace` attribution: rules → owner and site per block, aggregates per phase, site diffs.

The blocks are shaped like PyTorch's allocator snapshot (`torch.cuda.memory._snapshot()`
segments: pool id, blocks with state, size and Python frames innermost first).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.errors import BadInputError
from kvaudit.schema import Owner
from kvaudit.sites import (
    OTHER_SITES,
    UNATTRIBUTED,
    Site,
    aggregate,
    classify,
    frame_name,
    live_blocks,
    load_rules,
    parse_rules,
    site_deltas,
)

MiB = 1 << 20
SITE_PACKAGES = "/usr/lib/python3.12/site-packages"


def frame(path: str, name: str, line: int = 1) -> dict:
    return {"filename": f"{SITE_PACKAGES}/{path}", "name": name, "line": line}


TORCH = [frame("torch/nn/parameter.py", "__new__"), frame("torch/utils/_device.py", "__torch_function__")]
LOADER = [frame("vllm/model_executor/layers/linear.py", "create_weights"),
          frame("vllm/model_executor/models/deepseek_v2.py", "__init__"),
          frame("vllm/model_executor/model_loader/base_loader.py", "load_model"),
          frame("vllm/v1/worker/gpu_model_runner.py", "load_model")]
KV = [frame("vllm/v1/worker/gpu_model_runner.py", "_allocate_kv_cache_tensors"),
      frame("vllm/v1/worker/gpu_model_runner.py", "initialize_kv_cache_tensors"),
      frame("vllm/v1/worker/gpu_model_runner.py", "initialize_kv_cache")]
KV_STRUCT = [frame("vllm/v1/worker/block_table.py", "__init__"),
             frame("vllm/v1/worker/gpu_model_runner.py", "may_reinitialize_input_batch"),
             frame("vllm/v1/worker/gpu_model_runner.py", "initialize_kv_cache")]
WARMUP = [frame("flashinfer/autotuner.py", "choose_one"),
          frame("vllm/model_executor/warmup/kernel_warmup.py", "flashinfer_autotune"),
          frame("vllm/model_executor/warmup/kernel_warmup.py", "kernel_warmup")]
UNKNOWN = [frame("somelib/cache.py", "grow"), frame("somelib/api.py", "call")]


def seg(*blocks: tuple[int, list, str], pool: tuple[int, int] = (0, 0)) -> dict:
    return {"device": 0, "segment_pool_id": list(pool), "total_size": sum(b[0] for b in blocks),
            "blocks": [{"size": size, "state": state, "frames": frames} for size, frames, state in blocks]}


@pytest.fixture(scope="module")
def rules():
    return load_rules()


def test_the_first_matching_rule_names_owner_and_site(rules):
    # GIVEN a parameter created by a layer inside the model loader
    owner, site = classify(TORCH + LOADER, (0, 0), rules)
    # THEN it is a weight, named by the innermost frame outside torch: the layer that asked
    assert (owner, site) == (Owner.WEIGHTS.value, "weights:layers/linear:create_weights")


def test_kv_tensors_win_over_the_kv_structures_rule_that_also_matches(rules):
    assert classify(KV, (0, 0), rules) == (Owner.KV_CACHE.value, "kv cache tensors")
    owner, site = classify(KV_STRUCT, (0, 0), rules)
    assert owner == Owner.TORCH_OTHER.value and site == "kv structures:worker/block_table:__init__"


def test_kernel_warmup_frames_are_persistent(rules):
    owner, site = classify(TORCH + WARMUP, (0, 0), rules)
    assert owner == Owner.PERSISTENT.value and site == "warmup:flashinfer/autotuner:choose_one"


def test_a_private_pool_is_graph_memory_named_by_pool_id(rules):
    assert classify(LOADER, (1, 3), rules) == (Owner.GRAPH_POOL.value, "graph pool 1.3")


def test_unmatched_blocks_are_listed_as_such_never_guessed(rules):
    assert classify(TORCH + UNKNOWN, (0, 0), rules) == (UNATTRIBUTED, "somelib/cache:grow")
    assert classify([], (0, 0), rules) == (UNATTRIBUTED, "(allocated before tracing began)")


def test_user_rules_come_first(tmp_path: Path):
    extra = tmp_path / "mine.toml"
    extra.write_text('[[rule]]\nowner = "persistent"\nsite = "my cache"\nfile = "somelib/"\nfunction = "grow"\n')
    assert classify(UNKNOWN, (0, 0), load_rules((extra,))) == (Owner.PERSISTENT.value, "my cache")


@pytest.mark.parametrize("text, message", [
    ("[[rule]]\nowner = 'weight'\nsite = 's'\nfile = 'x'\n", "owner must be one of"),
    ("[[rule]]\nowner = 'weights'\nsite = ''\nfile = 'x'\n", "non-empty"),
    ("[[rule]]\nowner = 'weights'\nsite = 's'\nfile = '('\n", "bad pattern"),
    ("rule = 3\n", "array of tables"),
    ("[[rule]\n", "not valid TOML"),
])
def test_a_bad_rule_file_is_one_line_of_bad_input(text, message):
    with pytest.raises(BadInputError, match=message) as err:
        parse_rules(text, "mine.toml")
    assert "\n" not in str(err.value) and str(err.value).startswith("mine.toml")


def test_live_blocks_skip_free_and_pending_blocks():
    segments = [seg((64 * MiB, LOADER, "active_allocated"), (2 * MiB, [], "inactive"),
                    (8 * MiB, [], "active_pending_free"), (24 * MiB, KV, "active_allocated"))]
    assert [size for size, _, _ in live_blocks(segments)] == [64 * MiB, 24 * MiB]


def test_a_private_pool_counts_whole_segments_free_blocks_included():
    # GIVEN a graph pool whose graphs freed most of their blocks back into it (vLLM keeps outputs
    # as weak references): the pool still holds every page, and the ledger charges them
    segments = [seg((20 * MiB, [], "inactive"), (4 * MiB, KV, "active_allocated"), pool=(1, 2))]
    assert list(live_blocks(segments)) == [(24 * MiB, (1, 2), [])]


def test_aggregate_sums_per_site_largest_first(rules):
    segments = [seg((64 * MiB, LOADER, "active_allocated"), (32 * MiB, LOADER, "active_allocated"),
                    (4 * MiB, UNKNOWN, "active_allocated"), (100 * MiB, KV, "active_allocated"))]
    sites = aggregate("kv", live_blocks(segments), rules)
    assert sites == (Site("kv", "kv_cache", "kv cache tensors", 100 * MiB, 1),
                     Site("kv", "weights", "weights:layers/linear:create_weights", 96 * MiB, 2),
                     Site("kv", UNATTRIBUTED, "somelib/cache:grow", 4 * MiB, 1))


def test_aggregate_caps_the_sites_and_sums_the_rest_per_owner(rules):
    blocks = [((i + 1) * MiB, (0, 0), [frame(f"somelib/m{i}.py", "f")]) for i in range(30)]
    sites = aggregate("load", blocks, rules, cap=5)
    assert [s.bytes for s in sites[:5]] == [30 * MiB, 29 * MiB, 28 * MiB, 27 * MiB, 26 * MiB]
    assert sites[5] == Site("load", UNATTRIBUTED, OTHER_SITES, sum(range(1, 26)) * MiB, 25)
    assert sum(s.bytes for s in sites) == sum(range(1, 31)) * MiB


def test_site_deltas_compare_the_last_common_phase_sorted_by_size():
    a = [Site("load", "weights", "weights:a", 10, 1), Site("capture", "weights", "weights:a", 100, 1),
         Site("capture", "weights", "weights:b", 50, 1), Site("capture", "persistent", "warmup:x", 7, 1)]
    b = [Site("capture", "weights", "weights:a", 100 + 900, 1), Site("capture", "weights", "weights:c", 200, 1),
         Site("capture", "persistent", "warmup:x", 7, 1)]
    deltas = site_deltas(a, b, rank=0)
    assert {(d.phase, d.rank) for d in deltas} == {("capture", 0)}
    assert [(d.owner, d.site, d.delta_bytes) for d in deltas] == [
        ("weights", "weights:a", 900), ("weights", "weights:c", 200), ("weights", "weights:b", -50)]


def test_site_deltas_without_a_common_phase_are_empty():
    assert site_deltas([Site("load", "weights", "w", 1, 1)], [Site("kv", "weights", "w", 1, 1)], rank=0) == ()


def test_frame_names_are_short_and_findable():
    assert frame_name(frame("vllm/v1/worker/gpu_model_runner.py", "capture_model")) == \
        "worker/gpu_model_runner:capture_model"


def ev(action: str, addr: int, size: int, frames: list | None = None) -> dict:
    return {"action": action, "addr": addr, "size": size, "frames": frames or []}


STEP = [frame("kvaudit/engines/selftest/workload.py", "step")]


def test_the_transient_is_what_was_live_at_the_phases_peak(rules):
    from kvaudit.sites import peak_transient
    # GIVEN a phase that allocates 3 step buffers, frees one, allocates a bigger persistent block
    # after freeing the rest, and frees a block from before the phase
    events = [ev("alloc", 1, 64 * MiB, STEP), ev("alloc", 2, 64 * MiB, STEP), ev("alloc", 3, 32 * MiB, UNKNOWN),
              ev("free_requested", 1, 64 * MiB), ev("free_completed", 1, 64 * MiB),
              ev("alloc", 4, 16 * MiB, STEP),                                   # 2, 3, 4: 112 MiB
              ev("free_completed", 2, 64 * MiB), ev("free_completed", 4, 16 * MiB),
              ev("free_completed", 99, 8 * MiB), ev("alloc", 5, 40 * MiB, WARMUP)]
    sites = peak_transient("replay", events, rules)
    # THEN the first peak (160 MiB, after three allocs) is the high-water: blocks 1, 2 and 3
    assert sites == (Site("replay", "activation_peak", "selftest:step", 128 * MiB, 2, "peak"),
                     Site("replay", UNATTRIBUTED, "somelib/cache:grow", 32 * MiB, 1, "peak"))


def test_a_phase_that_only_frees_has_no_transient(rules):
    from kvaudit.sites import peak_transient
    assert peak_transient("kv", [ev("free_completed", 1, MiB)], rules) == ()


# ------------------------------------------------------------------------------------------
# recorded traces: live blocks of real H200 runs (KVAUDIT_TRACE_DUMP), torch 2.11


TRACES = Path(__file__).parent.parent / "fixtures" / "traces"


def recorded(run: str, phase: str, rules) -> dict[tuple[str, str], int]:
    import json
    blocks = [(b["size"], tuple(b["pool"]), b["frames"]) for b in
              json.loads((TRACES / run / f"rank0-{phase}.json").read_text())]
    return {(s.owner, s.site): s.bytes for s in aggregate(phase, blocks, rules)}


def test_recorded_selftest_every_planted_allocation_on_its_site(rules):
    # The H200 selftest planted 8 GiB of weights (load) and a 1.5 GiB warmup workspace, and at
    # capture its graph outputs (64 + 128 + 256 + 512 MiB) sit in one private pool
    assert recorded("h200-selftest", "load", rules)[("weights", "selftest:load")] == 8 << 30
    persistent = recorded("h200-selftest", "persistent", rules)
    assert persistent[("persistent", "selftest:kernel_warmup")] == 1536 * MiB
    capture = recorded("h200-selftest", "capture", rules)
    pools = {k: v for k, v in capture.items() if k[0] == "graph_pool"}
    assert sum(pools.values()) == 960 * MiB and len(pools) == 1
    # nothing the selftest made is left unattributed
    assert not [k for k in capture if k[0] == UNATTRIBUTED and k[1] != "(allocated before tracing began)"]


def test_recorded_vllm_boot_names_weights_kv_and_the_capture_buffer(rules):
    load = recorded("h200-vllm-0.26", "load", rules)
    weights = {site: b for (owner, site), b in load.items() if owner == "weights"}
    # the model's layers, by the code that created them
    assert "weights:layers/linear:create_weights" in weights
    assert "weights:fused_moe/unquantized_fused_moe_method:create_weights" in weights
    kv = recorded("h200-vllm-0.26", "kv", rules)
    assert kv[("kv_cache", "kv cache tensors")] > 100 << 30
    # the real capture's buffer outside the graph pool: made by torch.compile's generated code,
    # named by the layer that called it; one per capture session (profiling's and the real one)
    graphs, capture = recorded("h200-vllm-0.26", "graphs", rules), recorded("h200-vllm-0.26", "capture", rules)
    site = ("torch_other", "capture:attention/mla_attention:forward")
    assert graphs[site] == 32 * MiB and capture[site] == 64 * MiB
    # kvaudit's own sampler warmup before sizing is persistent memory, as the ledger charges it
    assert capture[("persistent", "sampler warmup:layers/utils:default_unquantized_gemm")] == 64 * MiB
