"""AuditCPUWorker: kvaudit's subclass of vLLM's CPUWorker. Pass it to vLLM as
`worker_cls="kvaudit.engines.vllm.worker_cpu.AuditCPUWorker"`.

The CPU backend has no kernel warmup and no graphs; its only warmup is the compile warm-up
(a profile pass under torch.compile, skipped with enforce_eager). Memory is host RSS against the
NUMA node, as vLLM's CPUWorker sizes it.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.worker.cpu_worker import CPUWorker

from kvaudit.engines.probes.host import HostProbe
from kvaudit.engines.sequence import PhaseHandle
from kvaudit.engines.vllm import adapter
from kvaudit.schema import Phase
from kvaudit.engines.vllm.audit import AuditMixin


class AuditCPUWorker(AuditMixin, CPUWorker):
    _kva_backend = "cpu"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._kva_start_journal()

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
            return

        def attempt() -> None:
            self.model_runner.warming_up_model()
        self._kva_guard.run(attempt)
        handle.note("CPU backend: no kernel warmup; vLLM's compile warm-up "
                    + ("is a no-op with enforce_eager" if self.model_config.enforce_eager else "ran"))

    def _kva_replay_and_graphs(self) -> tuple[int | None, int | None]:
        import os

        import psutil
        with self._kva_seq.phase(Phase.REPLAY):
            adapter.profile_run(self)
        with self._kva_seq.phase(Phase.GRAPHS) as handle:
            handle.note("CPU backend: no CUDA graphs")
        # vLLM's CPUWorker.determine_available_memory: requested − RSS (no activation term).
        vllm_available = int(self.requested_cpu_memory - psutil.Process(os.getpid()).memory_info().rss)
        return 0, vllm_available

    def compile_or_warm_up_model(self) -> Any:
        with self._kva_seq.phase(Phase.CAPTURE) as handle:
            result = super().compile_or_warm_up_model()
            handle.note("CPU backend: no graph capture")
        return result
