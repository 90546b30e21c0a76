"""MRv2's minimal KV cache teardown (adapter._v2_teardown on vLLM 0.26, and vLLM's own helper plus the
speculator's graph managers from 0.29 on), checked on a stand-in
runner that holds what 0.26's GPUModelRunner.initialize_kv_cache creates: after the teardown
nothing of it is referenced, so its memory can go back (the H200 boots check the bytes)."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
cudagraph_utils = pytest.importorskip("vllm.v1.worker.gpu.cudagraph_utils")

from kvaudit.engines.vllm import adapter  # noqa: E402


class Layer:
    def __init__(self, kv):
        self.kv_cache = kv
        self.impl = SimpleNamespace(_k_scale_cache=kv[:1], _v_scale_cache=kv[:1])


def test_teardown_releases_everything_the_minimal_cache_created():
    kv = torch.zeros(1024)
    watched = weakref.ref(kv.untyped_storage())
    manager = cudagraph_utils.CudaGraphManager.__new__(cudagraph_utils.CudaGraphManager)
    speculator = SimpleNamespace(prefill_cudagraph_manager=manager, decode_cudagraph_manager=manager, keep=1)
    runner = SimpleNamespace(
        kv_caches=[kv], attn_groups=[["group"]], kv_cache_config=object(), cudagraph_manager=manager,
        block_tables=object(), pcp_manager=object(), kv_block_zeroer=object(), speculator=speculator,
        kv_connector=object(), cache_config=SimpleNamespace(num_gpu_blocks=33),
        compilation_config=SimpleNamespace(static_forward_context={"model.layers.0.attn": Layer(kv)}))
    del kv
    adapter._v2_teardown(runner)
    gc.collect()
    assert watched() is None  # no view of the KV tensor survives: not the runner's, not a layer's
    assert runner.kv_caches == [] and runner.attn_groups == [] and not hasattr(runner, "kv_cache_config")
    assert runner.cudagraph_manager is None and runner.block_tables is None and runner.pcp_manager is None
    assert runner.kv_block_zeroer is None and runner.cache_config.num_gpu_blocks is None
    assert speculator.prefill_cudagraph_manager is None and speculator.decode_cudagraph_manager is None
    assert speculator.keep == 1
    from vllm.v1.worker.gpu.kv_connector import NO_OP_KV_CONNECTOR
    assert runner.kv_connector is NO_OP_KV_CONNECTOR


def test_warmup_blocks_cover_graph_capture_and_every_warmup_sequence():
    runner = SimpleNamespace(max_num_reqs=16, compilation_config=SimpleNamespace(max_cudagraph_capture_size=64))
    assert adapter.warmup_blocks(runner) == 2 * 16 + 1
    runner = SimpleNamespace(max_num_reqs=256, compilation_config=SimpleNamespace(max_cudagraph_capture_size=None))
    assert adapter.warmup_blocks(runner) == 513


def test_teardown_through_vllms_own_helper_drops_the_speculators_graph_managers():
    """0.29 on: vLLM's _teardown_profiling_state leaves the speculator's graph managers, whose
    graphs keep a profiling pool alive (566 MiB on the H200, vLLM 0.33 with MTP); kvaudit drops
    them as vLLM's own profile_cudagraph_memory does, and keeps what is not a graph manager."""
    manager = cudagraph_utils.CudaGraphManager.__new__(cudagraph_utils.CudaGraphManager)
    watched = weakref.ref(manager)
    speculator = SimpleNamespace(cudagraph_manager=manager, keep=1)
    runner = SimpleNamespace(speculator=speculator)
    called = []
    helper = SimpleNamespace(CudaGraphManager=cudagraph_utils.CudaGraphManager,
                             _teardown_profiling_state=lambda r: called.append(r))
    del manager
    adapter._v2_teardown_with_vllm(runner, helper)
    gc.collect()
    assert called == [runner] and speculator.cudagraph_manager is None and speculator.keep == 1
    assert watched() is None


def test_the_speculators_managers_are_dropped_even_when_vllms_teardown_raises():
    manager = cudagraph_utils.CudaGraphManager.__new__(cudagraph_utils.CudaGraphManager)
    speculator = SimpleNamespace(cudagraph_manager=manager)

    def fails(runner):
        raise RuntimeError("teardown failed")

    helper = SimpleNamespace(CudaGraphManager=cudagraph_utils.CudaGraphManager, _teardown_profiling_state=fails)
    with pytest.raises(RuntimeError, match="teardown failed"):
        adapter._v2_teardown_with_vllm(SimpleNamespace(speculator=speculator), helper)
    assert speculator.cudagraph_manager is None
