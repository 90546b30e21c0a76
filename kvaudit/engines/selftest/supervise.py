"""Runs the selftest ranks (through the launcher, in a session of their own) and builds the
report: owners from the ledger, accuracy from the planted sizes, verify over the repeats."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from kvaudit.capacity import KvGeometry, verify_error
from kvaudit.config import CPU_SELFTEST_REQUEST_BYTES, AuditConfig, cpu_default_gmu, cpu_gmu_note
from kvaudit.engines import records
from kvaudit.engines.sequence import read_journal
from kvaudit.engines.supervision import (
    JournalTailer, ProgressFn, StopSignals, release_guard, start_guard, stop_session, watch,
)
from kvaudit.errors import AuditIncompleteError, UsageError
from kvaudit.report import build_report, rank_report
from kvaudit.schema import (
    PHASE_ORDER, AccuracyEntry, Engine, Environment, Failure, FailureKind, Owner, Phase, RankReport, Report,
    Source, Verify, VerifyRank,
)

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
    """`kvaudit` (the fixed order) or `naive` (one profile pass before warmup: the seed bug)."""
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
    from kvaudit.engines.probes import node_meminfo
    total, available = node_meminfo(0)
    gmu = cpu_default_gmu(total, available, opts.tensor_parallel_size, CPU_SELFTEST_REQUEST_BYTES)
    return (replace(opts, gpu_memory_utilization=gmu),
            cpu_gmu_note(gmu, total, available, opts.tensor_parallel_size, CPU_SELFTEST_REQUEST_BYTES))


def has_nvidia_gpu() -> bool:
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").exists()


def run_selftest(opts: SelftestOptions, on_progress: ProgressFn = lambda rank, event: None) -> Report:
    if opts.device not in ("cuda", "cpu"):
        raise UsageError(f"--device must be cuda or cpu, got {opts.device!r}")
    if opts.sizing not in ("kvaudit", "naive"):
        raise UsageError(f"--sizing must be kvaudit or naive, got {opts.sizing!r}")
    if opts.trace and opts.device != "cuda":
        raise UsageError("--trace needs --device cuda: it reads PyTorch's CUDA allocator history")
    if opts.trace:
        from kvaudit.sites import load_rules
        load_rules(opts.owners)  # a bad rule file is a usage error now, not a dead rank later
    if opts.device == "cuda" and not has_nvidia_gpu():
        raise AuditIncompleteError("kvaudit selftest needs a CUDA GPU and this machine has none: "
                                   "run the CPU smoke with --device cpu")
    opts, note = default_gmu(opts)
    workdir = Path(tempfile.mkdtemp(prefix="kvaudit-selftest-"))
    try:
        journal_dir = workdir / "journal"
        journal_dir.mkdir()
        spec = workdir / "spec.json"
        spec.write_text(json.dumps({"device": opts.device, "world_size": opts.tensor_parallel_size,
                                    "gpu_memory_utilization": opts.gpu_memory_utilization, "verify": opts.verify,
                                    "repeat": opts.repeat, "inject_warmup_failure": opts.inject_warmup_failure,
                                    "sizing": opts.sizing, "retain_graph_pool": opts.retain_graph_pool,
                                    "trace": opts.trace, "owners": [str(p.resolve()) for p in opts.owners],
                                    "journal_dir": str(journal_dir)}))
        log_path = workdir / "selftest.log"
        started = time.monotonic()
        with open(log_path, "wb") as log, StopSignals() as signals:
            proc = subprocess.Popen([sys.executable, "-m", "kvaudit.engines.selftest.launch", str(spec)],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            guard = start_guard(proc.pid)
            try:
                stop = watch(proc, JournalTailer(journal_dir), on_progress, opts.timeout_s, started, signals)
            finally:
                survivors = stop_session(proc, signals=signals)
                release_guard(guard)
        log_text = log_path.read_text(encoding="utf-8", errors="replace")
        folded = [records.fold(int(p.stem[4:]), read_journal(p)) for p in sorted(journal_dir.glob("rank*.jsonl"))]
        report = assemble(opts, folded, stop=stop, exit_code=proc.returncode, log_tail=log_text[-3000:],
                          survivors=survivors)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # the journals live in the report now
    return replace(report, warnings=((note,) if note else ()) + report.warnings)


def _rank(f: records.RankEvents) -> RankReport:
    return rank_report(
        f.rank, [f.phases[p] for p in PHASE_ORDER if p in f.phases], tp_rank=f.get_int("tp_rank"),
        dcp_rank=f.get_int("dcp_rank"), device_total_bytes=f.get_int("device_total_bytes"),
        gpu_memory_utilization=f.facts.get("gpu_memory_utilization"), others_bytes=f.get_int("others_bytes"),
        graph_pool_estimate_bytes=f.get_int("graph_pool_estimate_bytes"), kv_cache_bytes=f.get_int("kv_cache_bytes"),
        kv_available_bytes=f.get_int("kv_available_bytes"), kv_blocks=f.get_int("kv_blocks"),
        sites=f.site_records())


def accuracy(f: records.RankEvents, rank: RankReport) -> list[AccuracyEntry]:
    """Planted vs measured, where "measured" is what kvaudit measured of the planted thing:

    - non_torch: the owner minus non-torch at baseline (the CUDA context, cuBLAS and NCCL are
      measured and reported, not planted);
    - activation_peak: the allocated transient P(replay) − A(persistent); the owner also charges
      the allocator's segment rounding of it, which the workload did not ask for;
    - graph_pool: the pool's segments at the real capture; the owner also charges the driver
      memory of the graphs (non-torch growth), which the workload did not plant.
    """
    planted = f.facts.get("planted") or {}
    phases = {p.name: p for p in rank.phases}

    def get(phase: Phase, attr: str) -> int | None:
        rec = phases.get(phase)
        return None if rec is None else getattr(rec, attr)

    def minus(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else a - b

    base_nt = minus(minus(get(Phase.BASELINE, "device_used_bytes"), get(Phase.BASELINE, "torch_reserved_bytes")),
                    rank.others_bytes or 0)
    measured = {
        Owner.WEIGHTS: rank.owners.get(Owner.WEIGHTS),
        Owner.PERSISTENT: rank.owners.get(Owner.PERSISTENT),
        Owner.ACTIVATION_PEAK: minus(get(Phase.REPLAY, "torch_peak_allocated_bytes"),
                                     get(Phase.PERSISTENT, "torch_allocated_bytes")),
        Owner.GRAPH_POOL: get(Phase.CAPTURE, "graph_pool_bytes"),
        Owner.NON_TORCH: minus(rank.owners.get(Owner.NON_TORCH), base_nt),
    }
    out = []
    for key, owner in ACCURACY_OWNERS.items():
        size = planted.get(key)
        if isinstance(size, int) and size > 0:
            out.append(AccuracyEntry(owner=owner, rank=rank.rank, planted_bytes=size, measured_bytes=measured[owner]))
    return out


def _verify(folded: list[records.RankEvents], ranks: list[RankReport]) -> Verify | None:
    runs = {f.rank: f.facts.get("verify") for f in folded if f.facts.get("verify")}
    if not runs:
        return None
    per_rank, ooms, repeats = [], 0, 0
    for rank in ranks:
        results = runs.get(rank.rank) or []
        repeats = max(repeats, len(results))
        ooms += sum(1 for r in results if r.get("oom"))
        peak = max((r["true_peak_bytes"] for r in results), default=None)
        per_rank.append(VerifyRank(rank=rank.rank, true_peak_bytes=peak,
                                   slack_bytes=(rank.requested_bytes - peak) if peak is not None
                                   and rank.requested_bytes is not None else None))
    slacks = [r.slack_bytes for r in per_rank if r.slack_bytes is not None]
    peaks = [r.true_peak_bytes for r in per_rank if r.true_peak_bytes is not None]
    error = f"{ooms} OOM in {repeats} repeats" if ooms else verify_error(slacks)
    return Verify(ok=error is None, prompt_tokens=None, true_peak_bytes=max(peaks) if peaks else None,
                  slack_bytes=min(slacks) if slacks else None, error=error, repeats=repeats, oom_count=ooms,
                  ranks=tuple(per_rank))


def assemble(opts: SelftestOptions, folded: list[records.RankEvents], *, stop: FailureKind | None,
             exit_code: int | None, log_tail: str, survivors: list[int]) -> Report:
    ranks = [_rank(f) for f in folded]
    config = AuditConfig(model="planted-workload", tensor_parallel_size=opts.tensor_parallel_size,
                         decode_context_parallel_size=1, gpu_memory_utilization=opts.gpu_memory_utilization,
                         max_model_len=1, block_size=1, enforce_eager=opts.device != "cuda",
                         extra_args={"sizing": opts.sizing, "device": opts.device})
    failure = None
    errors = [(f.rank, e) for f in folded for e in f.errors]
    if stop is not None:
        failure = Failure(None, None, stop, f"selftest stopped ({stop.value})")
    elif errors:
        rank, e = errors[0]
        kind = FailureKind.NO_DEVICE if "no CUDA device" in str(e.get("message")) else (
            FailureKind.OOM if "OutOfMemory" in str(e.get("error")) else FailureKind.CRASH)
        failure = Failure(_phase(e.get("phase")), rank, kind, str(e.get("message")))
    elif exit_code not in (0, None) or not folded:
        last = log_tail.strip().splitlines()[-1] if log_tail.strip() else "no output"
        failure = Failure(None, None, FailureKind.CRASH, f"selftest exited with status {exit_code}: {last}")
    facts = folded[0].facts if folded else {}
    warnings = [f"{len(survivors)} selftest processes survived SIGKILL: {survivors}"] if survivors else []
    entries = [entry for f, r in zip(folded, ranks) for entry in accuracy(f, r)]
    for f in folded:
        if f.facts.get("warmup_errors"):
            warnings.append(f"rank {f.rank}: warmup retried ({'; '.join(f.facts['warmup_errors'])}); "
                            f"counted once: {f.facts.get('warmup_calls')} calls, "
                            f"{f.facts.get('warmup_skipped_calls')} skipped by the guard")
    return build_report(
        source=Source.SELFTEST, config=config, ranks=ranks,
        engine=Engine(name="selftest", version=None, model_runner=None, attention_backend=None),
        environment=Environment(device_name=facts.get("device_name"), driver=facts.get("driver"),
                                cuda=facts.get("cuda"), torch=facts.get("torch")),
        geometry=KvGeometry(block_size=1, bytes_per_block=f.get_int("kv_bytes_per_block") or (2 << 20))
        if folded and (f := folded[0]) else None,
        verify=_verify(folded, ranks), failure=failure, accuracy=entries, warnings=warnings)


def _phase(value: object) -> Phase | None:
    try:
        return Phase(value)
    except ValueError:
        return None
