"""The audit worker: vLLM's own Worker (or CPUWorker) with the fixed profiling order.

    init_device             → baseline
    load_model              → load
    determine_available_memory:
        profile_run         → profile
        persistent warmup   → persistent (once, guarded, under the minimal KV cache)
        vLLM's own sizing   → replay (its profile_run) and graphs (its graph estimate)
        returns kvaudit's KV figure, from the ledger, to vLLM
    initialize_from_config  → kv (vLLM allocates what kvaudit returned)
    compile_or_warm_up_model→ capture (vLLM's later kernel_warmup call is a no-op)

Every phase is journaled; `kvaudit_record` returns the journal through collective_rpc.
The mixin holds what GPU and CPU share; `worker_gpu` and `worker_cpu` hold the rest.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from kvaudit.engines import gc_sections
from kvaudit.engines.measured_ranks import phase_records
from kvaudit.engines.sequence import STOPPED, PhaseHandle, RankSequencer, WarmupGuard, exception_line, interrupted
from kvaudit.engines.vllm import adapter, transport
from kvaudit.ledger import StepTransients, budget_term, kv_budget, kv_figure, requested_bytes
from kvaudit.schema import VERIFY_TORCH_KEYS, BudgetTerm, Phase, PhaseStatus


class AuditMixin:
    """Shared by AuditWorker (GPU) and AuditCPUWorker. Attributes are prefixed `_kva_`, RPC
    methods `kvaudit_`, so nothing collides with vLLM's own names."""

    _kva_backend = "gpu"

    # -- subclass hooks -------------------------------------------------------------------
    def _kva_make_probe(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _kva_others_bytes(self) -> int | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _kva_persistent_warmup(self, handle: PhaseHandle) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _kva_replay_and_graphs(self) -> tuple[int | None, int | None]:  # pragma: no cover - abstract
        """Run the replay and graphs phases; return (graph estimate, vLLM's own KV figure)."""
        raise NotImplementedError

    def _kva_non_torch_now(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _kva_cap_allocator(self, cap_bytes: int | None) -> None:
        """Hold the allocator's reserved memory to cap_bytes (None: no cap), where the backend has
        a caching allocator to hold (CUDA); the host heap has none."""

    def _kva_kv_tensor_pages(self) -> list[int] | None:
        """Bytes per block of each KV tensor vLLM will allocate, where the allocator rounds
        tensors (CUDA); None where it does not (host RSS)."""
        return None

    def _kva_make_tracer(self) -> Any:
        """An AllocationTracer when `--trace` asked for one and the backend has allocator history."""
        return None

    # -- phases ---------------------------------------------------------------------------
    def _kva_start_journal(self) -> None:
        self._kva_journal = transport.RankJournal(self.rank)
        self._kva_relay: transport.Relay | None = None
        self._kva_deferred: list[str] = []
        self._kva_guard = WarmupGuard(agree=adapter.agree_any)
        self._kva_seq: RankSequencer | None = None
        self._kva_kv_structures = 0
        """Bytes KV initialisation allocates besides the cache, measured under the minimal KV
        cache before sizing; kvaudit reserves them (they arrive with the real cache)."""
        self._kva_probe_transient: int | None = None
        """The long-prefill probe's transient (GPU, MRv2 from 0.33), charged beside the replay's."""
        self._kva_expandable = False
        """The worker's allocator runs expandable segments (worker_gpu reads it: CUDA only)."""
        self._kva_graphs: Any = None
        """kvaudit's graph measurement (ledger.GraphMeasurement), or None without graphs."""
        self._kva_journal.write({"type": "start", "phase": Phase.BASELINE.value, "rank": self.rank})

    def init_device(self) -> None:
        start = time.perf_counter()
        try:
            if adapter.extensible_kv_cache_on(self):
                raise RuntimeError("vLLM's extensible KV cache is on (it sizes the KV cache itself after warmup), "
                                   "so kvaudit cannot audit its own order: pass --no-enable-extensible-kv-cache "
                                   "after --")
            super().init_device()
            gmu = adapter.requested_gmu(self.cache_config)
        except STOPPED as exc:  # the boot is being stopped (sequence.STOPPED)
            self._kva_journal.write({"type": "phase", "name": Phase.BASELINE.value, "status": "interrupted",
                                     "seconds": round(time.perf_counter() - start, 3), "detail": interrupted(exc)})
            raise
        except BaseException as exc:
            self._kva_journal.write({"type": "phase", "name": Phase.BASELINE.value, "status": "failed",
                                     "seconds": round(time.perf_counter() - start, 3), "detail": exception_line(exc)})
            self._kva_journal.write({"type": "error", "phase": Phase.BASELINE.value, "error": type(exc).__name__,
                                     "message": exception_line(exc)})
            raise
        # vLLM's distributed start-up ran: journals of other nodes travel through its store
        self._kva_relay = transport.attach(self, self._kva_journal)
        if self._kva_relay is not None:
            self._kva_journal.on_error = self._kva_relay.final
        probe = self._kva_make_probe()
        facts = probe.facts()
        self._kva_total = facts.total_bytes
        self._kva_gmu = gmu
        self._kva_requested = requested_bytes(self._kva_total, self._kva_gmu)
        self._kva_journal.write({
            "type": "rank", "rank": self.rank, **adapter.parallel_ranks(self), "backend": self._kva_backend,
            "device_total_bytes": facts.total_bytes, "device_name": facts.device_name, "driver": facts.driver,
            "cuda": facts.cuda, "others_bytes": self._kva_others_bytes(), "gpu_memory_utilization": self._kva_gmu,
            "requested_bytes": self._kva_requested, "vllm_requested_bytes": self._kva_vllm_requested(),
            "model_runner": adapter.model_runner_name(self), "pid": os.getpid(), **transport.node_identity(self),
        })
        tracer = self._kva_make_tracer()
        if tracer is not None:
            tracer.start()
        self._kva_seq = RankSequencer(probe, self._kva_journal, tracer)
        probe.settle()
        reading = probe.read()
        self._kva_journal.write({
            "type": "phase", "name": Phase.BASELINE.value, "status": "ok",
            "seconds": round(time.perf_counter() - start, 3), "detail": None,
            "torch_allocated_bytes": reading.allocated_bytes, "torch_reserved_bytes": reading.reserved_bytes,
            "torch_peak_allocated_bytes": reading.peak_allocated_bytes, "device_used_bytes": reading.device_used_bytes,
            "torch_peak_reserved_bytes": reading.peak_reserved_bytes,
            "graph_pool_bytes": reading.graph_pool_bytes, "free_bytes": reading.free_bytes,
            **({"sites": tracer.sites(Phase.BASELINE.value)} if tracer is not None else {})})

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        with self._kva_seq.phase(Phase.LOAD):
            super().load_model(*args, **kwargs)

    def determine_available_memory(self) -> int:
        import torch
        seq = self._kva_seq
        with torch.inference_mode():  # as vLLM's own determine_available_memory
            # One gc section over the profile pass and the persistent warmup (engines/gc_sections.py): their
            # settles walk only the objects made since it opened. It closes before the replay, whose collections
            # stay full: an object the section kept and a later full collection freed could otherwise leave the
            # replay's reading and every later one, and no term would charge it. Its check note goes on the
            # persistent phase's record.
            with contextlib.ExitStack() as section:
                notes: list[str] = []
                section.enter_context(gc_sections.section("profile pass and persistent warmup", notes.append,
                                                          self._kva_allocated_reader()))
                with seq.phase(Phase.PROFILE):
                    adapter.profile_run(self)
                with seq.phase(Phase.PERSISTENT) as handle:
                    self._kva_persistent_warmup(handle)
                    section.close()
                    for note in notes:
                        handle.note(note)
            estimate, vllm_available = self._kva_replay_and_graphs()
            if os.environ.get(SWEEP_ENV) == "1":
                self._kva_sweep()
        graphs = self._kva_graphs
        pages = self._kva_kv_tensor_pages()
        # One pure function takes the budget down to the KV figure (ledger.kv_budget): the owners as
        # sizing charges them, the KV structures (they come with the real cache), the segment
        # rounding; what the real capture keeps outside its pool is in the graph estimate
        # (GraphMeasurement.estimate_bytes). Where a phase could not be read vLLM's figure stands.
        budget = kv_budget(phase_records(self._kva_journal.events), requested=self._kva_requested,
                           others_bytes=self._kva_others_bytes(), graph_pool_estimate_bytes=estimate,
                           transients=StepTransients(graphs.transient_bytes if graphs else None,
                                                      self._kva_probe_transient, self._kva_expandable),
                           kv_structures_bytes=self._kva_kv_structures, kv_tensor_block_bytes=pages,
                           fallback_bytes=vllm_available if vllm_available is not None else 0)
        assert budget is not None  # a fallback was given
        available = kv_figure(budget)
        rounding = budget_term(budget, BudgetTerm.SEGMENT_ROUNDING)
        seq.fact(graph_pool_estimate_bytes=estimate, kv_available_bytes=available,
                 kv_structures_bytes=self._kva_kv_structures,
                 kv_segment_rounding_bytes=-rounding if rounding is not None else None,
                 kv_tensor_block_bytes=pages or None,
                 kv_budget=[{"term": t.term.value, "bytes": t.bytes} for t in budget],
                 vllm_kv_available_bytes=vllm_available, deferred_steps=list(self._kva_deferred),
                 warmup_attempts=self._kva_guard.attempts, warmup_errors=list(self._kva_guard.errors),
                 kv_cache_spec_dtype=self._kva_spec_dtype(), compile_cache=adapter.compile_cache(),
                 **(adapter.kv_geometry_estimate(self) or {}))
        # vLLM's "Actual usage" line reports this as the KV cache in use: make it true.
        self.available_kv_cache_memory_bytes = available
        return available

    def _kva_sweep(self) -> None:
        """`kvaudit run --sweep`: the activation peak at fewer tokens, for `kvaudit plan`. Each
        pass is the runner's own profile pass (adapter.profile_run) with its max_num_tokens
        lowered for that one call, measured as the replay is: peak over the readings just
        before it. It runs after the replay and graph phases and before KV is sized, which
        reads only phase records, so the sizing does not see it."""
        runner = self.model_runner
        top = int(self.scheduler_config.max_num_batched_tokens)
        if not isinstance(getattr(runner, "max_num_tokens", None), int):
            self._kva_seq.fact(sweep_error="this runner has no max_num_tokens to lower: no sweep")
            return
        probe = self._kva_seq.probe
        points = []
        for tokens in sweep_token_counts(top):
            probe.settle()
            before = probe.read(pools=False)
            probe.reset_peak()
            start = time.perf_counter()
            with adapter.patched(runner, "max_num_tokens", tokens):
                adapter.profile_run(self)
            probe.sync()
            after = probe.read(pools=False)
            peak = max(after.peak_allocated_bytes - before.allocated_bytes,
                       (after.peak_reserved_bytes or after.peak_allocated_bytes) - before.reserved_bytes, 0)
            points.append({"tokens": tokens, "activation_peak_bytes": int(peak),
                           "seconds": round(time.perf_counter() - start, 3)})
        probe.settle()
        self._kva_seq.fact(sweep=points)

    def _kva_spec_dtype(self) -> str | None:
        """The dtype of vLLM's KV cache spec (one for all layers, or None), for `plan --kv-cache-dtype`."""
        try:
            dtypes = {str(getattr(spec, "dtype", None)) for spec in self.get_kv_cache_spec().values()}
        except Exception:
            return None
        return dtypes.pop() if len(dtypes) == 1 and "None" not in dtypes else None

    def _kva_allocated_reader(self) -> Callable[[], int] | None:
        """What a checked gc section reads to say how much device memory the objects its collections
        missed held (the GPU worker: torch's allocated bytes); None where there is none."""
        return None

    def initialize_from_config(self, kv_cache_config: Any) -> None:
        with self._kva_seq.phase(Phase.KV) as handle:
            super().initialize_from_config(kv_cache_config)
            kv_bytes = adapter.kv_cache_bytes(self)
            handle.facts.update(kv_cache_bytes=kv_bytes)
        self._kva_seq.fact(kv_cache_bytes=kv_bytes, attention_backend=adapter.attention_backend(self),
                           **(adapter.kv_geometry(kv_cache_config, kv_bytes) or {}))

    # -- RPC ------------------------------------------------------------------------------
    def kvaudit_record(self) -> list[dict[str, Any]]:
        """This rank's journal events (plain dicts), for collective_rpc."""
        return list(self._kva_journal.events)

    def kvaudit_release(self) -> None:
        """The supervisor has every record: stop the heartbeat; rank 0 tells the other nodes
        (kvaudit on a node other than the head stops its vLLM workers then)."""
        self._kva_journal.release()
        if self._kva_relay is not None:
            try:
                self._kva_relay.pull()
                self._kva_relay.stream.set_done()
            except Exception:
                pass
            self._kva_relay.stop()

    def kvaudit_verify_begin(self, scenario: str | None = None) -> None:
        """A verify scenario starts (engines/vllm/verify.py): a verify phase of its own, with the
        peak statistics reset, so each scenario's true peak is its own."""
        self._kva_verify = self._kva_seq.phase(Phase.VERIFY, settle=False)
        handle = self._kva_verify.__enter__()
        self._kva_verify_scenario = scenario
        self._kva_verify_start = self._kva_seq.probe.read(pools=False)
        self._kva_verify_retries = self._kva_seq.probe.alloc_retries()
        if scenario:
            handle.note(f"scenario {scenario}")
        self._kva_verify_capped = os.environ.get(VERIFY_CAP_ENV) == "1"
        if self._kva_verify_capped:
            cap = self._kva_requested - self._kva_non_torch_now()
            self._kva_cap_allocator(cap)
            handle.note(f"allocator capped at {cap} bytes (the budget less non-torch memory)")

    def kvaudit_verify_end(self, error: str | None = None) -> dict[str, Any]:
        """The scenario's true peak on this rank: peak reserved since it began + non-torch now."""
        probe = self._kva_seq.probe
        probe.sync()
        peak_reserved = probe.peak_reserved_bytes()
        peak = peak_reserved + self._kva_non_torch_now()
        start = getattr(self, "_kva_verify_start", None)
        torch_figures: dict[str, int] = {}
        if start is not None:  # how much of the peak was allocated, how much the allocator's cache
            peak_allocated = probe.read(pools=False).peak_allocated_bytes
            torch_figures = dict(zip(VERIFY_TORCH_KEYS, (start.allocated_bytes, peak_allocated, start.reserved_bytes,
                                                         peak_reserved), strict=True))
            retries, before = probe.alloc_retries(), self._kva_verify_retries  # set with the start
            # a retry: the allocator found no room, gave its cache back and tried again (under a cap: the cap bound)
            retried = f", allocator retries {retries - before}" if retries is not None and before is not None else ""
            print(f"kvaudit verify {getattr(self, '_kva_verify_scenario', None)} rank {self.rank}: torch allocated "
                  f"{start.allocated_bytes} -> peak {torch_figures['torch_peak_allocated_bytes']}, reserved "
                  f"{start.reserved_bytes} -> peak {peak_reserved}, true peak {peak}{retried}", file=sys.stderr,
                  flush=True)
        peaks = getattr(self, "_kva_verify_peaks", {})
        scenario = getattr(self, "_kva_verify_scenario", None)
        if scenario:
            peaks[scenario] = peak
            self._kva_verify_peaks = peaks
        self._kva_seq.fact(verify_true_peak_bytes=peak, **({"verify_scenario_peaks": dict(peaks)} if peaks else {}))
        if getattr(self, "_kva_verify_capped", False):
            self._kva_cap_allocator(None)
        self._kva_verify.__exit__(None, None, None)
        return {"rank": self.rank, "true_peak_bytes": peak, "requested_bytes": self._kva_requested, **torch_figures}

    def _kva_vllm_requested(self) -> int | None:
        value = getattr(self, "requested_memory", None) or getattr(self, "requested_cpu_memory", None)
        return int(value) if value is not None else None


VERIFY_CAP_ENV = "KVAUDIT_VERIFY_CAP"
"""Set to 1 (an experiment, issue 28 item 4): each verify scenario runs with the allocator held to
the budget, as on a device whose other memory is taken, so what it reserved beyond the budget is
what it could not give back (an out-of-memory error) rather than cache it kept because it could."""

SWEEP_ENV = "KVAUDIT_SWEEP"
"""Set to 1 by the supervisor for `kvaudit run --sweep`; the workers inherit it."""


def sweep_token_counts(max_num_batched_tokens: int) -> list[int]:
    """An eighth, a quarter, a half and all of max_num_batched_tokens (distinct, at least 1)."""
    top = max(int(max_num_batched_tokens), 1)
    return sorted({max(top // 8, 1), max(top // 4, 1), max(top // 2, 1), top})


def mark_deferred(worker: AuditMixin, handle: PhaseHandle, step: str, why: str) -> None:
    worker._kva_deferred.append(step)
    handle.note(f"{step} deferred: {why}")
    if handle.status is PhaseStatus.OK:
        handle.status = PhaseStatus.DEFERRED
