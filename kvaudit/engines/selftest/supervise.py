"""Runs the selftest ranks (through the launcher, by the supervised-process runner of
engines/process.py) and tells what came back as a `BootRecord` (`SelftestOutcome`): the ranks'
journals with their planted sizes, verify over the repeats, the failure."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from kvaudit.assemble import BootRecord, report_of, verify_summary
from kvaudit.capacity import KvGeometry
from kvaudit.config import CPU_SELFTEST_REQUEST_BYTES, AuditConfig, cpu_default_gmu, cpu_gmu_note, node_gmu_share
from kvaudit.engines import measured_ranks
from kvaudit.engines.failures import Candidate, Evidence, decide_failure, rank_error_failure
from kvaudit.engines.isolation import installed_only_env
from kvaudit.engines.journal import read_journals
from kvaudit.engines.probes.host import node_meminfo
from kvaudit.engines.process import Finished, ProgressFn, StopSignals, run_supervised, workdir
from kvaudit.errors import UsageError
from kvaudit.ledger import requested_bytes
from kvaudit.schema import Engine, Environment, Failure, FailureKind, Owner, Report, Source, Verify
from kvaudit.units import fmt_gib

ACCURACY_OWNERS = {"weights": Owner.WEIGHTS, "persistent": Owner.PERSISTENT,
                   "activation_peak": Owner.ACTIVATION_PEAK, "graph_pool": Owner.GRAPH_POOL,
                   "non_torch": Owner.NON_TORCH}


@dataclass(frozen=True)
class SelftestOptions:
    device: str = "cuda"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    """None: CUDA_DEFAULT_GMU on cuda; on cpu config.cpu_default_gmu (a fraction of the host)."""
    verify: bool = False
    repeat: int = 1
    inject_warmup_failure: bool = False
    sizing: str = "kvaudit"
    """`kvaudit` (the fixed order) or `naive` (one profile pass before warmup: upstream vLLM's order)."""
    retain_graph_pool: bool = False
    """Keep the profiling graph pool alive through KV sizing (its pages stay retained)."""
    timeout_s: float = 900.0
    trace: bool = False
    """Record the allocator's history and attribute every block to an owner and site."""
    owners: tuple[Path, ...] = ()
    """Extra owner-rule files for the trace (tried before kvaudit's defaults)."""


CUDA_DEFAULT_GMU = 0.98
"""The selftest proves the sizing near the ceiling, where kvaudit is meant to be used."""


def default_gmu(opts: SelftestOptions) -> tuple[SelftestOptions, str | None]:
    """Options with the GMU filled in, and the report's note when it is the CPU default: 0.98
    of a host's memory would ask for most of the machine (15 GiB of 24) for a smoke run."""
    if opts.gpu_memory_utilization is not None:
        return opts, None
    if opts.device != "cpu":
        return replace(opts, gpu_memory_utilization=CUDA_DEFAULT_GMU), None
    from kvaudit.engines.probes.host import node_meminfo
    total, available = node_meminfo(0)
    gmu = cpu_default_gmu(total, available, opts.tensor_parallel_size, CPU_SELFTEST_REQUEST_BYTES)
    return (replace(opts, gpu_memory_utilization=gmu),
            cpu_gmu_note(gmu, total, available, opts.tensor_parallel_size, CPU_SELFTEST_REQUEST_BYTES))


def has_nvidia_gpu() -> bool:
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").exists()


def check_options(opts: SelftestOptions) -> None:
    """Refuse bad options before anything starts (UsageError, exit 2)."""
    if opts.device not in ("cuda", "cpu"):
        raise UsageError(f"--device must be cuda or cpu, got {opts.device!r}")
    if opts.sizing not in ("kvaudit", "naive"):
        raise UsageError(f"--sizing must be kvaudit or naive, got {opts.sizing!r}")
    if opts.trace and opts.device != "cuda":
        raise UsageError("--trace needs --device cuda: it reads PyTorch's CUDA allocator history")
    if opts.trace:
        from kvaudit.sites import load_rules
        load_rules(opts.owners)  # a bad rule file is a usage error now, not a dead rank later
    if opts.tensor_parallel_size < 1:
        raise UsageError(f"--tp must be at least 1, got {opts.tensor_parallel_size}")
    if opts.repeat < 1:
        raise UsageError(f"--repeat must be at least 1 (verify runs of the worst-case step), got {opts.repeat}")
    if not opts.timeout_s > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {opts.timeout_s}")
    gmu = opts.gpu_memory_utilization
    if gmu is not None and not 0.0 < gmu <= 1.0:
        raise UsageError(f"--gmu must be in (0, 1], a fraction of the device's memory, got {gmu}")
    if opts.device == "cuda" and not has_nvidia_gpu():
        raise UsageError("kvaudit selftest needs a CUDA GPU and this machine has none: run the CPU smoke with "
                         "--device cpu")
    if opts.device == "cpu" and gmu is not None:
        # as vLLM's CPUWorker refuses a request above the node's available memory: every rank asks for it
        total, available = node_meminfo(0)
        asked = math.ceil(total * gmu) * opts.tensor_parallel_size
        if asked > available:
            most = node_gmu_share(available, total, opts.tensor_parallel_size)
            raise UsageError(f"--gmu {gmu} asks {fmt_gib(asked)} of the host for {opts.tensor_parallel_size} rank(s), "
                             f"and {fmt_gib(available)} is available: pass --gmu {most} or less (or leave it out)")


def run_selftest(opts: SelftestOptions, on_progress: ProgressFn = lambda rank, event: None) -> Report:
    check_options(opts)
    opts, note = default_gmu(opts)
    with workdir("kvaudit-selftest-") as folder:  # the journals live in the report afterwards
        journal_dir = folder / "journal"
        spec = folder / "spec.json"
        spec.write_text(json.dumps({"device": opts.device, "world_size": opts.tensor_parallel_size,
                                    "gpu_memory_utilization": opts.gpu_memory_utilization, "verify": opts.verify,
                                    "repeat": opts.repeat, "inject_warmup_failure": opts.inject_warmup_failure,
                                    "sizing": opts.sizing, "retain_graph_pool": opts.retain_graph_pool,
                                    "trace": opts.trace, "owners": [str(p.resolve()) for p in opts.owners],
                                    "journal_dir": str(journal_dir)}))
        log_path = folder / "selftest.log"
        with StopSignals() as signals:
            finished = run_supervised("kvaudit.engines.selftest.launch", spec, log_path=log_path,
                                      journal_dir=journal_dir, on_progress=on_progress, timeout_s=opts.timeout_s,
                                      signals=signals, env=installed_only_env())
        log_text = log_path.read_text(encoding="utf-8", errors="replace")
        folded = [measured_ranks.fold(rank, events) for rank, events in read_journals(journal_dir).items()]
        outcome = SelftestOutcome(opts, folded, finished, log_tail=log_text[-3000:], note=note)
    return report_of(outcome)


def _planted(f: measured_ranks.RankEvents) -> dict[Owner, int]:
    planted = f.facts.get("planted") or {}
    return {owner: size for key, owner in ACCURACY_OWNERS.items()
            if isinstance(size := planted.get(key), int) and size > 0}


def _verify(folded: list[measured_ranks.RankEvents]) -> Verify | None:
    runs = {f.rank: f.facts.get("verify") for f in folded if f.facts.get("verify")}
    if not runs:
        return None
    per_rank, ooms, repeats = [], 0, 0
    for f in folded:
        results = runs.get(f.rank) or []
        repeats = max(repeats, len(results))
        ooms += sum(1 for r in results if r.get("oom"))
        peak = max((r["true_peak_bytes"] for r in results), default=None)
        total, gmu = f.get_int("device_total_bytes"), f.facts.get("gpu_memory_utilization")
        per_rank.append((f.rank, peak, requested_bytes(total, gmu) if total is not None and gmu is not None else None))
    return verify_summary(per_rank, error=f"{ooms} OOM in {repeats} repeats" if ooms else None, prompt_tokens=None,
                          decode_tokens=None, repeats=repeats, oom_count=ooms)


@dataclass(frozen=True)
class SelftestOutcome:
    """What the selftest ranks left behind, as a `kvaudit.assemble.BootSource`."""

    opts: SelftestOptions
    folded: list[measured_ranks.RankEvents]
    finished: Finished
    log_tail: str
    note: str | None = None
    """The CPU GMU note (default_gmu), first among the warnings."""

    def record(self) -> BootRecord:
        opts, folded, stop = self.opts, self.folded, self.finished.stop
        config = AuditConfig(model="planted-workload", tensor_parallel_size=opts.tensor_parallel_size,
                             decode_context_parallel_size=1, gpu_memory_utilization=opts.gpu_memory_utilization,
                             max_model_len=1, block_size=1, enforce_eager=opts.device != "cuda",
                             extra_args={"sizing": opts.sizing, "device": opts.device})
        candidates: list[Candidate[Failure]] = []
        if stop is not None:
            stopped = Failure(None, None, stop, f"selftest stopped ({stop.value})")
            candidates.append(Candidate(Evidence.STOPPED, stopped))
        candidates += [rank_error_failure(f.rank, e, measured_ranks.phase_named(e.get("phase")))
                       for f in folded for e in f.errors]
        last = self.log_tail.strip().splitlines()[-1] if self.log_tail.strip() else "no output"
        exited = Failure(None, None, FailureKind.CRASH,
                         f"selftest exited with status {self.finished.exit_code}: {last}")
        if self.finished.exit_code not in (0, None):
            candidates.append(Candidate(Evidence.EXIT_STATUS, exited))
        if not folded:
            candidates.append(Candidate(Evidence.NO_RECORDS, exited))
        chosen = decide_failure(candidates)
        failure = chosen.item if chosen is not None else None
        facts = folded[0].facts if folded else {}
        survivors = self.finished.survivors
        warnings = [self.note] if self.note else []
        if survivors:
            warnings.append(f"{len(survivors)} selftest processes survived SIGKILL: {survivors}")
        for f in folded:
            if f.facts.get("warmup_errors"):
                warnings.append(f"rank {f.rank}: warmup retried ({'; '.join(f.facts['warmup_errors'])}); "
                                f"counted once: {f.facts.get('warmup_calls')} calls, "
                                f"{f.facts.get('warmup_skipped_calls')} skipped by the guard")
        return BootRecord(
            source=Source.SELFTEST, config=config,
            ranks=tuple(replace(measured_ranks.measured_rank(f), planted=_planted(f)) for f in folded),
            engine=Engine(name="selftest", version=None, model_runner=None, attention_backend=None),
            environment=Environment(device_name=facts.get("device_name"), driver=facts.get("driver"),
                                    cuda=facts.get("cuda"), torch=facts.get("torch")),
            geometry=KvGeometry(block_size=1, bytes_per_block=folded[0].get_int("kv_bytes_per_block") or (2 << 20))
            if folded else None,
            verify=_verify(folded), failure=failure, warnings=tuple(warnings), serves_vllm=False, planted_sizes=True)
