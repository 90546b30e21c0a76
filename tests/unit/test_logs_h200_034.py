"""Real vLLM 0.34.0 start-up logs from the H200 (2026-12-05, Llama-3.1-8B real dimensions, dummy
weights, max_model_len 32768, 16 sequences, graphs 1–64), copied as fixtures from
tests/benchmarks/results/ (issue #25 item 5; the constructed 0.34 lines are in test_logs_v034.py):

- `gpu-0.34-v2-h200-llama-8b-extensible.log`: plain vLLM with its defaults, so 0.34's extensible KV
  cache sized the cache after warmup and capture (h200-vllm-own-llama-3.1-8b-vllm0.34.0.log);
- `gpu-0.34-v2-h200-llama-8b-kv-bytes.log`: plain vLLM with kvaudit's safe flags, the KV bytes
  pinned, so vLLM skipped profiling (h200-user-path-llama-3.1-8b-vllm0.34.0.log).

Expected bytes are vLLM's printed GiB × 2**30, rounded; each test quotes its lines."""

from __future__ import annotations

import pytest
from test_logs_h200_033 import FIXTURES, gib  # the fixtures' folder; vLLM's printed GiB → bytes

from kvaudit.engines.logs import report_from_log_text
from kvaudit.input_text import read_text
from kvaudit.render.summary import capacity_lines
from kvaudit.schema import KvSizing, Owner, Report, Verdict


def read(name: str) -> Report:
    return report_from_log_text(read_text(FIXTURES / name), name)


@pytest.fixture(scope="module")
def extensible() -> Report:
    return read("gpu-0.34-v2-h200-llama-8b-extensible.log")


@pytest.fixture(scope="module")
def kv_bytes() -> Report:
    return read("gpu-0.34-v2-h200-llama-8b-kv-bytes.log")


def test_the_engine_and_who_sized_the_cache(extensible: Report, kv_bytes: Report) -> None:
    # "Initializing a V1 LLM engine (v0.34.0)", gpu/model_runner.py lines, "Extended KV cache to …"
    assert (extensible.engine.version, extensible.engine.model_runner, extensible.engine.attention_backend) == \
        ("0.34.0", "V2", "FLASH_ATTN")
    assert extensible.engine.kv_cache_sizing is KvSizing.AFTER_WARMUP
    # the user's --kv-cache-memory-bytes sized it: neither vLLM's profile nor its extension (`fixed`, since stop 50)
    assert kv_bytes.engine.version == "0.34.0" and kv_bytes.engine.kv_cache_sizing is KvSizing.FIXED


def test_the_extended_cache_is_the_kv_figure_not_the_reserved_range(extensible: Report) -> None:
    # "Available KV cache memory: 123.86 GiB" (the reserved address range), then
    # "Memory after warmup: … 1.18 GiB kept for transient activations (0.84 GiB allocated at peak, …);
    #  15576 KV cache blocks (121.69 GiB) fit within the requested 139.8 GiB."
    # "Extended KV cache to 15576 blocks (121.69 GiB)." "GPU KV cache size: 996,864 tokens"
    r = extensible.ranks[0]
    assert r.owners[Owner.KV_CACHE] == r.kv_available_bytes == gib(121.69)
    assert r.kv_blocks == 15_576
    assert extensible.capacity.kv_tokens == 996_864
    assert r.owners[Owner.WEIGHTS] == gib(15.0)  # "Model loading took 15.0 GiB memory"
    assert r.owners[Owner.ACTIVATION_PEAK] == gib(1.18)  # what the sizing kept free
    assert r.owners[Owner.GRAPH_POOL] == gib(0.10)  # "Graph capturing finished in 2 secs, took 0.10 GiB"
    assert extensible.verdict is Verdict.OK


def test_flags_from_the_extensible_log_carry_the_gmu_vllms_start_up_check_passes(extensible: Report) -> None:
    # "Free memory on device (139.1/139.8 GiB) on startup. Desired GPU memory utilization is (1.0, 139.8 GiB)":
    # at GMU 1.0 a boot with the KV bytes pinned is refused; 139.1 / 139.8 rounds down to 0.9949
    assert extensible.capacity.safe_serve_flags == (
        f"--kv-cache-memory-bytes={gib(121.69)}", "--gpu-memory-utilization=0.9949", "--max-model-len=32768")
    assert any("extended to 15,576 blocks (121.69 GiB)" in w for w in extensible.warnings)


def test_with_the_kv_bytes_pinned_the_one_capture_is_the_real_one(kv_bytes: Report) -> None:
    # "Initial free memory 139.1 GiB, reserved 120.53 GiB memory for KV Cache as specified by
    #  kv_cache_memory_bytes config and skipped memory profiling", then the only
    # "Graph capturing finished in 3 secs, took 0.10 GiB": MRv2 ran no profiling capture, so that is
    # the real pool, not an estimate
    r = kv_bytes.ranks[0]
    assert r.owners[Owner.KV_CACHE] == gib(120.53)
    assert kv_bytes.capacity.kv_tokens == 987_392
    assert (r.graph_pool_estimate_bytes, r.graph_pool_actual_bytes) == (None, gib(0.10))
    assert r.owners[Owner.GRAPH_POOL] == gib(0.10)
    assert kv_bytes.capacity.safe_serve_flags == ()  # vLLM skipped profiling: no budget to audit
    assert any("fixed by kv_cache_memory_bytes" in w for w in kv_bytes.warnings)


def test_the_negative_headroom_of_an_extensible_boot_says_the_gmu_was_a_cap(extensible: Report) -> None:
    # free at start 139.1 GiB − GMU 1.0 × 139.8 GiB: below 0, yet vLLM started, since the extensible
    # cache is sized on the memory free after warmup ("Memory after warmup: 123.82 GiB free")
    assert extensible.capacity.physical_headroom_bytes < 0
    headroom = dict(capacity_lines(extensible))["physical headroom"]
    assert headroom.startswith("-0.70 GiB (the GMU was only a cap: vLLM sized its extensible KV cache")
