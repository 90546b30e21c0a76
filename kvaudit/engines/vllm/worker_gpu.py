"""AuditWorker: kvaudit's subclass of vLLM's GPU Worker (CUDA). Pass it to vLLM as
`worker_cls="kvaudit.engines.vllm.worker_gpu.AuditWorker"`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch
from vllm.v1.worker.gpu_worker import Worker

from kvaudit.engines import gc_sections
from kvaudit.engines.probes.cuda import CudaProbe
from kvaudit.engines.probes.nvml import others_for_rank
from kvaudit.engines.sequence import PhaseHandle
from kvaudit.engines.trace import AllocationTracer
from kvaudit.engines.vllm import adapter
from kvaudit.engines.vllm.audit import AuditMixin, mark_deferred
from kvaudit.ledger import GraphMeasurement, expandable_segments, kv_structures_bytes, measure_graphs
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

    def _kva_kv_tensor_pages(self) -> list[int] | None:
        return adapter.kv_tensor_block_bytes(self)

    def _kva_non_torch_now(self) -> int:
        reading = self._kva_seq.probe.read(pools=False)
        return reading.device_used_bytes - reading.reserved_bytes - (self._kva_others or 0)

    def _kva_allocated_reader(self) -> Callable[[], int]:
        return torch.cuda.memory_allocated

    def _kva_cap_allocator(self, cap_bytes: int | None) -> None:
        total = self._kva_total
        fraction = 1.0 if cap_bytes is None else min(max(cap_bytes, 0) / total, 1.0)
        torch.cuda.set_per_process_memory_fraction(fraction, self.device)

    def _kva_persistent_warmup(self, handle: PhaseHandle) -> None:
        """vLLM's kernel_warmup, once, under a minimal KV cache of the real spec; with it the
        runner's own warmup steps that need KV (MRv2: warmup_kernels' prefill and decode steps;
        the sampler warmup where vLLM runs it after capture: V1, and MRv2 from 0.34), so what they
        keep is measured before sizing."""
        if not adapter.has_minimal_kv_cache(self):
            mark_deferred(self, handle, "kernel_warmup",
                          "this vLLM has no minimal KV cache for this runner; vLLM runs it after KV")
            return
        real = adapter.gpu_worker_module().kernel_warmup
        probe = self._kva_seq.probe
        steps: list[str] = []

        def attempt() -> None:
            steps.clear()
            probe.settle()
            read = probe.read(pools=False)
            before = (read.reserved_bytes, read.allocated_bytes)
            # MRv2: enough blocks for warmup_kernels to schedule every sequence, as after KV
            blocks = adapter.warmup_blocks(self.model_runner) if adapter.uses_v2_runner(self) else None
            with adapter.minimal_kv_cache(self, blocks):
                # What KV initialisation takes besides the cache: ledger.kv_structures_bytes
                read = probe.read(pools=False)
                self._kva_kv_structures = kv_structures_bytes(before, (read.reserved_bytes, read.allocated_bytes),
                                                              adapter.kv_cache_bytes(self))
                real(self)
                steps.append("kernel_warmup")
                if adapter.v2_scheduler_warmup(self):
                    steps.append("warmup_kernels")
                if adapter.sampler_warmed_after_capture(self):
                    try:
                        adapter.sampler_warmup(self)
                        steps.append("sampler")
                    except Exception as exc:  # a measurement aid, not vLLM's own step: never fatal
                        handle.note(f"sampler warmup under the minimal KV cache failed: {type(exc).__name__}")
        self._kva_guard.run(attempt)
        handle.note(f"{', '.join(steps)} ran under the minimal KV cache (attempts: {self._kva_guard.attempts}); "
                    f"KV structures {self._kva_kv_structures} bytes reserved")

    def _kva_measure_graphs(self, phase_start: tuple[int, int] | None = None,
                            note: Callable[[str], None] | None = None) -> GraphMeasurement:
        """kvaudit's own graph-pool figure: the runner's capture_model (every configured size, the
        speculator's graphs too) into a temporary private pool under a minimal KV cache, read
        from the allocator's segments of that pool, then everything torn down and the device
        checked back to where it was (what is left is reported, never hidden)."""
        probe = self._kva_seq.probe
        pair = lambda r: (r.reserved_bytes, r.device_used_bytes)  # noqa: E731
        with gc_sections.section("graph measurement", note, self._kva_allocated_reader()):
            probe.settle()
            resident = pair(probe.read(pools=False))
            pools_before = probe.pool_segments()
            with adapter.temporary_graph_pool() as pool:
                with adapter.minimal_kv_cache(self):
                    probe.settle()
                    start = pair(probe.read(pools=False))
                    probe.reset_peak()
                    adapter.capture_all_graphs(self)
                    probe.sync()
                    end = pair(probe.read(pools=False))
                    peak = probe.peak_reserved_bytes()
                    pool_bytes = probe.pool_segments(pool)[0]
            probe.settle()
            after = pair(probe.read(pools=False))
        # only the private pools this session left: one that existed before is in `resident` too
        pools_after = probe.pool_segments()
        retained = (max(pools_after[0] - pools_before[0], 0), max(pools_after[1] - pools_before[1], 0))
        return measure_graphs(resident=resident, start=start, end=end, peak_reserved=peak, pool=pool_bytes,
                              after=after, retained=retained, phase_start=phase_start)

    def _kva_long_prefill(self, handle: PhaseHandle) -> dict[str, Any]:
        """kvaudit's long-prefill probe (adapter.long_prefill_step) under a minimal KV cache, each
        step's transient measured from the cache's own state, so the KV structures it builds are
        not charged as activation: the steps vLLM's profile pass leaves out (no attention), whose
        peak a max_model_len prompt reaches after KV (vLLM 0.33 on the H200: 34 MiB above the
        replay's peak on Llama-3.1-8B, about 0.5 GiB with MLA). The steps are the last chunk of the
        longest prompt and, where a shorter query is still a prefill, that query over the longest
        context and over the chunk's (adapter.long_prefill_steps; combined_prefill_transient). An
        error is noted, not raised: the audit goes on without it. {} where this vLLM cannot run
        the step before KV."""
        shape = adapter.long_prefill_shape(self)
        if shape is None:
            return {}
        query, context = shape
        probe = self._kva_seq.probe
        out: dict[str, Any] = {"query_tokens": query, "context_tokens": context, "error": None}
        start = time.perf_counter()
        with gc_sections.section("long-prefill probe", handle.note, self._kva_allocated_reader()):
            try:
                probe.settle()
                with adapter.minimal_kv_cache(self, adapter.warmup_blocks(self.model_runner)):
                    steps = adapter.long_prefill_steps(self, query, context)
                    transients: dict[str, int] = {}
                    for name, (step_query, step_context) in steps.items():
                        try:
                            probe.settle()
                            before = probe.read(pools=False)
                            probe.reset_peak()
                            adapter.long_prefill_step(self, step_query, step_context)
                            probe.sync()
                            after = probe.read(pools=False)
                        except Exception as exc:  # noqa: BLE001 - the last chunk's figure stands alone
                            if name == "last_chunk":
                                raise
                            handle.note(f"long-prefill probe step {name} failed ({type(exc).__name__}: "
                                        f"{str(exc).splitlines()[0] if str(exc) else ''}"[:300] + ")")
                            continue
                        transients[name] = int(max(after.peak_allocated_bytes - before.allocated_bytes,
                                                   (after.peak_reserved_bytes or 0) - before.reserved_bytes, 0))
                out["steps"] = {name: {"query_tokens": q, "context_tokens": c, "transient_bytes": transients.get(name)}
                                for name, (q, c) in steps.items()}
                out["transient_bytes"] = adapter.combined_prefill_transient(transients)
                handle.note("long-prefill probe, attention included: " + "; ".join(
                    f"{name} {q}-token step over {c} tokens of context {transients.get(name)} bytes"
                    for name, (q, c) in steps.items()) + f": transient {out['transient_bytes']} bytes "
                    f"({time.perf_counter() - start:.1f} s)")
            except Exception as exc:  # noqa: BLE001 - reported in the record and as a note
                out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400]
                handle.note(f"long-prefill probe failed ({out['error']}): the activation peak lacks attention")
            probe.settle()
        out["seconds"] = round(time.perf_counter() - start, 3)
        return out

    def _kva_replay_and_graphs(self) -> tuple[int | None, int | None]:
        """vLLM's own determine_available_memory is the replay: its profile_run (on top of the
        persistent pools) brackets the replay phase; its graph estimate call brackets the graphs
        phase, where kvaudit records vLLM's estimate and then measures the pool itself. vLLM gets
        its own estimate back, so its KV figure stays its own for comparison."""
        runner, seq = self.model_runner, self._kva_seq
        box: dict[str, Any] = {}

        def replay(*args: Any, **kwargs: Any) -> Any:
            with seq.phase(Phase.REPLAY):
                return original_profile_run(*args, **kwargs)

        def graphs(*args: Any, **kwargs: Any) -> int:
            with seq.phase(Phase.GRAPHS) as handle:
                probe = seq.probe
                before = probe.read(pools=False)  # before vLLM's own profiling capture
                started = time.perf_counter()
                vllm_estimate = int(original_graphs(*args, **kwargs))
                estimated = time.perf_counter()
                measured = self._kva_measure_graphs((before.reserved_bytes, before.device_used_bytes), handle.note) \
                    if adapter.graphs_enabled(self) else None
                vllm_seconds, measure_seconds = estimated - started, time.perf_counter() - estimated
                box["prefill_probe"] = self._kva_long_prefill(handle)
                box.update(vllm=vllm_estimate, measured=measured)
                handle.facts.update(vllm_graph_estimate_bytes=vllm_estimate, **(measured.facts() if measured else {}))
                # each step's seconds, for the overhead work (the probe's are in its own note)
                handle.note(f"vLLM graph estimate {vllm_estimate} bytes ({vllm_seconds:.1f} s)"
                            + (f"; kvaudit measured {measured.estimate_bytes} bytes in {measure_seconds:.1f} s "
                               f"(pool {measured.pool_bytes}, "
                               f"held by the capture {measured.session_torch_bytes}, "
                               f"driver {measured.live_non_torch_bytes}, graph profiling's resident driver residue "
                               f"{measured.profiling_residue_non_torch_bytes}, transient {measured.transient_bytes}, "
                               f"left after teardown {measured.residue_bytes} torch + "
                               f"{measured.residue_non_torch_bytes} non-torch)" if measured else ""))
            return vllm_estimate

        with adapter.patched(runner, "profile_run", replay) as original_profile_run, \
                adapter.patched(runner, "profile_cudagraph_memory", graphs) as original_graphs, \
                adapter.startup_plan_off(self, {}):
            vllm_available = int(Worker.determine_available_memory(self))
        if Phase.GRAPHS not in seq.done:  # vLLM made no graph estimate
            with seq.phase(Phase.GRAPHS) as handle:
                if adapter.graphs_enabled(self):
                    # 0.34 skips its estimate with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0, and still
                    # captures after KV: the pool is measured all the same
                    started = time.perf_counter()
                    measured = self._kva_measure_graphs(note=handle.note)
                    box.update(vllm=0, measured=measured)
                    handle.facts.update(vllm_graph_estimate_bytes=0, **measured.facts())
                    handle.note(f"vLLM made no graph estimate (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0) but "
                                f"captures graphs; kvaudit measured {measured.estimate_bytes} bytes in "
                                f"{time.perf_counter() - started:.1f} s")
                else:
                    handle.note("no CUDA graphs (enforce_eager or cudagraph_mode NONE)")
                box["prefill_probe"] = self._kva_long_prefill(handle)
        probe_out = box.get("prefill_probe") or {}
        if probe_out:
            seq.fact(prefill_probe=probe_out, prefill_probe_transient_bytes=probe_out.get("transient_bytes"))
            self._kva_probe_transient = probe_out.get("transient_bytes")
        # the allocator this process runs, as torch read its environment at start (the report's
        # recomputation uses this fact, not the supervisor's environment: a Ray worker has its own)
        self._kva_expandable = expandable_segments(os.environ)
        seq.fact(allocator_expandable_segments=self._kva_expandable)
        measured = box.get("measured")
        self._kva_graphs = measured
        seq.fact(vllm_graph_estimate_bytes=box.get("vllm", 0), **(measured.facts() if measured else {}))
        return (measured.estimate_bytes if measured else 0), vllm_available

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

        plan: dict[str, int] = {}
        with self._kva_seq.phase(Phase.CAPTURE) as handle:
            with adapter.patched(module, "kernel_warmup", guarded_warmup), \
                    adapter.patched(self.model_runner, "capture_model", capture) as original_capture, \
                    adapter.startup_plan_off(self, plan):
                result = super().compile_or_warm_up_model()
            handle.facts.update(vllm_graph_bytes=box.get("vllm_graph_bytes"),
                                deferred_steps=list(self._kva_deferred))
            if "vllm_suggested_kv_cache_memory_bytes" in plan:
                self._kva_seq.fact(**plan)
            if self._kva_deferred:
                handle.note("ran after KV, unbudgeted: " + ", ".join(self._kva_deferred))
        self._kva_seq.fact(deferred_steps=list(self._kva_deferred), warmup_skipped_calls=self._kva_guard.skipped_calls)
        return result
