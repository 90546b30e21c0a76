"""One selftest rank: `python -m kvaudit.engines.selftest.rank SPEC.json RANK`.

The same fixed order, sequencer, probes, warmup guard and ledger as the vLLM engine, driven over
the planted workload. With `sizing = "naive"` the KV cache is sized the way a single profile
pass before warmup sizes it (upstream vLLM's order); everything else is identical, so the verify step
shows what that over-allocation does at runtime.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvaudit.engines.journal import Journal
from kvaudit.engines.measured_ranks import phase_records
from kvaudit.engines.probes.cuda import CudaProbe
from kvaudit.engines.probes.host import HostProbe
from kvaudit.engines.probes.nvml import nvml_device_used
from kvaudit.engines.selftest.workload import Planted, Workload
from kvaudit.engines.sequence import RankSequencer, WarmupGuard
from kvaudit.ledger import GraphMeasurement, kv_budget, kv_figure, measure_graphs, naive_kv_available, requested_bytes
from kvaudit.schema import Phase

PROFILE_TOKENS = 512


def _across_ranks(torch: Any, device: Any, world: int, op: str) -> Callable[[int], int]:
    """An integer reduced over every rank (op: a torch.distributed.ReduceOp name); alone, itself."""
    def reduce(value: int) -> int:
        if world == 1:
            return value
        import torch.distributed as dist
        t = torch.tensor([value], dtype=torch.int64, device=device)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        return int(t.item())
    return reduce


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    rank, world = int(argv[2]), int(spec["world_size"])
    cuda = spec["device"] == "cuda"
    journal = Journal(Path(spec["journal_dir"]) / f"rank{rank}.jsonl")
    journal.write({"type": "start", "phase": Phase.BASELINE.value, "rank": rank})
    others = nvml_device_used(rank) if cuda else None  # before this process has a CUDA context
    try:
        import torch
        import torch.distributed as dist
        if cuda:
            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA device is visible to torch")
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
        if world > 1:
            dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
        planted = Planted.for_device("cuda" if cuda else "cpu")
        workload = Workload(planted, device, group=dist.group.WORLD if world > 1 else None,
                            inject_warmup_failure=bool(spec.get("inject_warmup_failure")))
        workload.preload()
        probe = CudaProbe(device) if cuda else HostProbe()
    except BaseException as exc:
        journal.write({"type": "error", "phase": Phase.BASELINE.value, "error": type(exc).__name__,
                       "message": f"{type(exc).__name__}: {exc}"})
        raise
    if not cuda:
        others = probe.others_bytes
    facts = probe.facts()
    gmu = float(spec["gpu_memory_utilization"])
    requested = requested_bytes(facts.total_bytes, gmu)
    journal.write({"type": "rank", "rank": rank, "tp_rank": rank, "dcp_rank": 0, "backend": spec["device"],
                   "device_total_bytes": facts.total_bytes, "device_name": facts.device_name,
                   "driver": facts.driver, "cuda": facts.cuda, "torch": torch.__version__,
                   "others_bytes": others, "gpu_memory_utilization": gmu, "requested_bytes": requested,
                   "pid": os.getpid(), "planted": {"weights": planted.weights, "persistent": planted.persistent,
                                                   "activation_peak": planted.activation,
                                                   "non_torch": planted.non_torch,
                                                   # retained: the profiling graphs stay, the real capture adds its own
                                                   "graph_pool": planted.graph_pool
                                                   * (2 if spec.get("retain_graph_pool") else 1)}})
    tracer = None
    if spec.get("trace") and cuda:
        from kvaudit.engines.trace import AllocationTracer
        tracer = AllocationTracer(device, tuple(Path(p) for p in spec.get("owners") or ()))
        tracer.start()
    seq = RankSequencer(probe, journal, tracer)
    any_failed = _across_ranks(torch, device, world, "MAX")
    guard = WarmupGuard(agree=lambda failed: bool(any_failed(int(failed))))
    try:
        run_sequence(seq, guard, workload, probe, spec, requested=requested, others=others,
                     # vLLM's engine allocates the fewest blocks any rank has room for, on every rank
                     fewest=_across_ranks(torch, device, world, "MIN"))
    finally:
        workload.close()
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()
    return 0


def run_sequence(seq: RankSequencer, guard: WarmupGuard, workload: Workload, probe: Any, spec: dict[str, Any], *,
                 requested: int, others: int | None, fewest: Callable[[int], int]) -> None:
    with seq.phase(Phase.BASELINE):
        pass
    with seq.phase(Phase.LOAD):
        workload.load()
    with seq.phase(Phase.PROFILE):
        workload.step(PROFILE_TOKENS)
    with seq.phase(Phase.PERSISTENT) as handle:
        guard.run(workload.kernel_warmup)
        handle.note(f"kernel warmup attempts: {guard.attempts}"
                    + (f" ({'; '.join(guard.errors)})" if guard.errors else ""))
    with seq.phase(Phase.REPLAY):
        workload.step(PROFILE_TOKENS)
    with seq.phase(Phase.GRAPHS) as handle:
        graphs = profile_graphs(workload, probe, retain=bool(spec.get("retain_graph_pool")))
        estimate, retained = graphs.estimate_bytes, graphs.retained_pool_bytes
        handle.facts.update(graphs.facts())
        handle.note(f"estimate {estimate} bytes; {retained} bytes retained by the pool after the graphs were freed "
                    f"({graphs.retained_live_bytes} of them still in use)")
    phases = phase_records(seq.journal.events)
    budget = kv_budget(phases, requested=requested, others_bytes=others, graph_pool_estimate_bytes=estimate)
    kvaudit_kv = kv_figure(budget) if budget is not None else None
    naive_kv = naive_kv_available(phases, requested=requested, others_bytes=others, graph_pool_estimate_bytes=estimate)
    available = naive_kv if spec.get("sizing") == "naive" else kvaudit_kv
    seq.fact(graph_pool_estimate_bytes=estimate, graph_pool_retained_bytes=retained, kv_available_bytes=available,
             kvaudit_kv_available_bytes=kvaudit_kv, naive_kv_available_bytes=naive_kv, sizing=spec.get("sizing"))
    block = workload.planted.kv_block
    blocks = fewest(max(available or 0, 0) // block)
    with seq.phase(Phase.KV):
        kv_bytes = workload.allocate_kv(blocks * block)
    seq.fact(kv_cache_bytes=kv_bytes, kv_blocks=kv_bytes // block, kv_bytes_per_block=block, block_size=1)
    with seq.phase(Phase.CAPTURE) as handle:
        guard.run(workload.kernel_warmup)  # vLLM's own later call: a no-op after success
        workload.capture_graphs()
        handle.note(f"warmup calls skipped by the guard: {guard.skipped_calls}")
    seq.fact(warmup_attempts=guard.attempts, warmup_skipped_calls=guard.skipped_calls,
             warmup_errors=list(guard.errors), warmup_calls=workload.warmup_calls)
    if spec.get("verify"):
        verify(seq, workload, probe, requested=requested, others=others, repeats=int(spec.get("repeat", 1)))


def profile_graphs(workload: Workload, probe: Any, *, retain: bool) -> GraphMeasurement:
    """The profiling capture, measured the way the vLLM engine measures its own: the pool's
    segments at the end of capture, the graphs' driver memory, what is left after teardown."""
    pair = lambda r: (r.reserved_bytes, r.device_used_bytes)  # noqa: E731
    probe.settle()
    start = pair(probe.read(pools=False))
    probe.reset_peak()
    workload.capture_graphs()
    probe.sync()
    end = probe.read()
    peak = probe.peak_reserved_bytes()
    workload.drop_graphs(retain=retain)
    probe.settle()
    after = pair(probe.read(pools=False))
    retained = probe.pool_segments() if isinstance(probe, CudaProbe) else (0, 0)
    return measure_graphs(resident=start, start=start, end=pair(end), peak_reserved=peak,
                          pool=end.graph_pool_bytes, after=after, retained=retained)


def verify(seq: RankSequencer, workload: Workload, probe: Any, *, requested: int, others: int | None,
           repeats: int) -> None:
    """Replay every graph and run the worst-case step on top of the sized KV cache, `repeats`
    times; each repeat records its true peak (peak reserved + non-torch) and whether it OOMed."""
    import torch
    results = []
    for i in range(repeats):
        oom = False
        with seq.phase(Phase.VERIFY, settle=False) as handle:
            try:
                workload.replay_graphs()
                workload.step(PROFILE_TOKENS)
            except torch.cuda.OutOfMemoryError as exc:
                oom = True
                handle.note(f"OOM: {str(exc).splitlines()[0]}")
            probe.sync()
            now = probe.read(pools=False)
            non_torch = now.device_used_bytes - now.reserved_bytes - (others or 0)
            if isinstance(probe, HostProbe):
                non_torch = probe.baseline_rss
            peak = probe.peak_reserved_bytes() + non_torch
            handle.facts.update(true_peak_bytes=peak, oom=oom)
        results.append({"repeat": i, "true_peak_bytes": peak, "slack_bytes": requested - peak, "oom": oom})
    seq.fact(verify=results)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
