"""AuditWorker: kvaudit's subclass of vLLM's GPU Worker (CUDA). Pass it to vLLM as
`worker_cls="kvaudit.engines.vllm.worker_gpu.AuditWorker"`."""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.worker.gpu_worker import Worker

from kvaudit.engines.probes import CudaProbe, others_for_rank
from kvaudit.engines.sequence import PhaseHandle
from kvaudit.engines.trace import AllocationTracer
from kvaudit.engines.vllm import adapter
from kvaudit.engines.vllm.audit import AuditMixin, mark_deferred
from kvaudit.schema import Phase


class AuditWorker(AuditMixin, Worker):
    _kva_backend = "cuda"

    def __init__(self, *args: Any, **kwargs: Any):
        # Other processes' memory: the boot process read NVML before any vLLM process existed;
        # failing that, NVML now is right only before this process's CUDA context.
        local_rank = int(kwargs.get("local_rank", args[1] if len(args) > 1 else 0))
        self._kva_others = others_for_rank(local_rank, has_context=torch.cuda.is_initialized())
        super().__init__(*args, **kwargs)
        self._kva_start_journal()

    def _kva_make_probe(self) -> CudaProbe:
        return CudaProbe(self.device)

    def _kva_others_bytes(self) -> int | None:
        return self._kva_others

    def _kva_make_tracer(self) -> AllocationTracer | None:
        return AllocationTracer.from_env(self.device)

    def _kva_non_torch_now(self) -> int:
        reading = self._kva_seq.probe.read(pools=False)
        return reading.device_used_bytes - reading.reserved_bytes - (self._kva_others or 0)

    def _kva_persistent_warmup(self, handle: PhaseHandle) -> None:
        """vLLM's kernel_warmup, once, against the minimal KV cache graph profiling uses."""
        if not adapter.has_minimal_kv_cache(self):
            mark_deferred(self, handle, "kernel_warmup",
                          "this vLLM has no minimal KV cache for this runner; vLLM runs it after KV")
            return
        real = adapter.gpu_worker_module().kernel_warmup
        probe = self._kva_seq.probe

        def attempt() -> None:
            probe.settle()
            before = probe.read(pools=False).reserved_bytes
            with adapter.minimal_kv_cache(self):
                # What KV initialisation takes besides the cache (metadata builders, block
                # tables, input batch): it comes again with the real cache, so it is reserved.
                # Reserved, not allocated: the device holds the structures' segments, and the
                # allocator's rounding of the KV tensors (up to 2 MiB) lands here too, as it will
                # with the real cache (H200, vLLM 0.26: 36 MiB allocated, 39.2 MiB reserved).
                built = probe.read(pools=False).reserved_bytes
                self._kva_kv_structures = max(built - before - adapter.kv_cache_bytes(self), 0)
                real(self)
                if not adapter.uses_v2_runner(self):
                    try:
                        adapter.sampler_warmup(self)
                        self._kva_sampler_warmed = True
                    except Exception as exc:  # a measurement aid, not vLLM's own step: never fatal
                        self._kva_sampler_warmed = False
                        handle.note(f"sampler warmup under the minimal KV cache failed: {type(exc).__name__}")
        self._kva_guard.run(attempt)
        handle.note(f"kernel_warmup ran under the minimal KV cache (attempts: {self._kva_guard.attempts}); "
                    f"KV structures {self._kva_kv_structures} bytes reserved")
        if adapter.v2_warmup_kernels_deferred(self):
            mark_deferred(self, handle, "warmup_kernels", "MRv2 JIT warmup runs scheduler steps on the real KV cache")

    def _kva_replay_and_graphs(self) -> tuple[int | None, int | None]:
        """vLLM's own determine_available_memory is the replay: its profile_run (on top of the
        persistent pools) and its graph estimate, each bracketed as a phase by wrapping the
        runner's methods for this one call."""
        runner, seq = self.model_runner, self._kva_seq
        box: dict[str, int] = {}

        def replay(*args: Any, **kwargs: Any) -> Any:
            with seq.phase(Phase.REPLAY):
                return original_profile_run(*args, **kwargs)

        def graphs(*args: Any, **kwargs: Any) -> int:
            with seq.phase(Phase.GRAPHS) as handle:
                box["estimate"] = int(original_graphs(*args, **kwargs))
                handle.note(f"vLLM graph estimate {box['estimate']} bytes")
            return box["estimate"]

        with adapter.patched(runner, "profile_run", replay) as original_profile_run, \
                adapter.patched(runner, "profile_cudagraph_memory", graphs) as original_graphs:
            vllm_available = int(Worker.determine_available_memory(self))
        if Phase.GRAPHS not in seq.done:
            with seq.phase(Phase.GRAPHS) as handle:
                handle.note("no CUDA graphs (enforce_eager or cudagraph_mode NONE)")
            box["estimate"] = 0
        if box["estimate"] == 0 and adapter.graphs_enabled(self):
            seq.fact(graph_estimate_missing=True)
        return box["estimate"], vllm_available

    def compile_or_warm_up_model(self) -> Any:
        """vLLM's own warmup and capture; its kernel_warmup call is a no-op once kvaudit's ran,
        except for the steps that had to wait for KV, which run here and are flagged."""
        module = adapter.gpu_worker_module()
        real_warmup = module.kernel_warmup
        box: dict[str, int] = {}

        def guarded_warmup(worker: Any, *args: Any, **kwargs: Any) -> None:
            if self._kva_guard.done:
                zeroer = adapter.kv_block_zeroer(self)
                if zeroer is not None:
                    zeroer.warmup(self.model_runner.kv_cache_config.num_blocks)
                    self._kva_deferred.append("kv_block_zeroer")
                return
            self._kva_guard.run(lambda: real_warmup(worker, *args, **kwargs))

        def capture(*args: Any, **kwargs: Any) -> int:
            box["vllm_graph_bytes"] = int(original_capture(*args, **kwargs))
            return box["vllm_graph_bytes"]

        with self._kva_seq.phase(Phase.CAPTURE) as handle:
            with adapter.patched(module, "kernel_warmup", guarded_warmup), \
                    adapter.patched(self.model_runner, "capture_model", capture) as original_capture:
                result = super().compile_or_warm_up_model()
            handle.facts.update(vllm_graph_bytes=box.get("vllm_graph_bytes"),
                                deferred_steps=list(self._kva_deferred))
            if self._kva_deferred:
                handle.note("ran after KV, unbudgeted: " + ", ".join(self._kva_deferred))
        self._kva_seq.fact(deferred_steps=list(self._kva_deferred), warmup_skipped_calls=self._kva_guard.skipped_calls)
        return result
