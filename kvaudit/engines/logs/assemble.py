"""Facts of one boot's logs → ranks, config, failure → a `Report` (through `build_report`).

Who gets a fact: the process that printed it. A worker's pid maps to its last name (`Worker_TP3`),
and the name to its global rank. vLLM prints some figures once (V1 "Model loading took" and
"Available KV cache memory" on the local first rank only): they land on that rank and no other,
so the other ranks keep `null` there. With the `uni` executor (GPU, world size 1) the worker runs
inside EngineCore, so EngineCore lines are rank 0's when a file has no worker process; the same
holds for untagged lines (V0 ran its driver worker in the main process).

Owners a log can show (docs/vllm-startup.md §5.7): weights, graph_pool, kv_cache, activation_peak (new
wording: {peak} − the applied graph estimate; old wording: {peak}), non_torch (old wording only).
`persistent` and `torch_other` are never logged; `kv_unallocated` needs all of them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from kvaudit.config import MODELLED_KEYS, AuditConfig
from kvaudit.errors import BadInputError
from kvaudit.engines.logs.facts import RANK_KINDS, FactKind, FailureFact, GraphEstimate
from kvaudit.engines.logs.knobs import knobs_from_args, knobs_from_engine_line, non_default_args
from kvaudit.engines.logs.lines import ProcTag, Role, proc_tag
from kvaudit.engines.logs.parse import V0_WORKER, FileScan
from kvaudit.ledger import requested_bytes as request_memory
from kvaudit.report import build_report
from kvaudit.schema import (
    NON_KV_OWNERS, Engine, Environment, Failure, FailureKind, Owner, Phase, PhaseRecord, PhaseStatus, RankReport,
    Report, Source,
)
from kvaudit.units import fmt_gib

BOOT_DONE = "init engine (profile, create kv cache, warmup model) took"
"""v1/engine/core.py `_initialize_kv_caches`' last line: after it, a failure is not the boot's."""

# First lines that show the boot entered a phase, for failures whose message does not say where.
_MILESTONES: tuple[tuple[Phase, tuple[str, ...]], ...] = (
    (Phase.LOAD, ("Starting to load model", "Loading model from scratch", "Initializing model took",
                  "Loading weights took", "Loading safetensors checkpoint shards")),
    (Phase.PROFILE, ("Model loading took",)),
    (Phase.GRAPHS, ("Profiling CUDA graph memory", "Estimated CUDA graph memory")),
    (Phase.KV, ("Available KV cache memory", "KV cache size: ", "Auto set (", "Explicitly set (")),
)
_CAPTURE_MARKS = ("Capturing CUDA graphs", "Graph capturing finished", "JIT kernel warmup", "autotune",
                  "Compile and warming up", "Warming up FlashInfer", "DeepGEMM warmup")
_BEFORE_ALLOCATION = (Phase.BASELINE, Phase.LOAD, Phase.PROFILE, Phase.GRAPHS, Phase.KV)


@dataclass(frozen=True)
class Located:
    """A fact with where it was printed."""

    kind: FactKind
    value: Any
    file: int
    pos: int
    pid: int | None
    src: str | None


@dataclass
class _Rank:
    """Facts gathered for one global rank (a builder: frozen records come out of it)."""

    tag: ProcTag
    facts: dict[FactKind, list[Located]] = field(default_factory=lambda: defaultdict(list))

    def all(self, kind: FactKind) -> list[Any]:
        return [f.value for f in self.facts.get(kind, ())]

    def first(self, kind: FactKind) -> Any:
        values = self.facts.get(kind)
        return values[0].value if values else None

    def last(self, kind: FactKind) -> Any:
        values = self.facts.get(kind)
        return values[-1].value if values else None

    def has(self, *kinds: FactKind) -> bool:
        return any(self.facts.get(k) for k in kinds)


# --------------------------------------------------------------------------------------------
# Processes → ranks


@dataclass(frozen=True)
class _Sizes:
    tp: int
    pp: int
    pcp: int

    def global_rank(self, tag: ProcTag) -> int:
        # vLLM's rank layout (distributed/parallel_state.py): ranks reshape as (dp, pp, pcp, tp),
        # TP innermost; DCP reuses the TP ranks and adds none.
        if tag.tp is None and tag.pp is None and tag.pcp is None and tag.global_rank is not None:
            return tag.global_rank
        dp, pp, pcp, tp = tag.dp or 0, tag.pp or 0, tag.pcp or 0, tag.tp or 0
        return ((dp * self.pp + pp) * self.pcp + pcp) * self.tp + tp


def _sizes(scans: Sequence[FileScan], config: dict[str, Any]) -> _Sizes:
    tags = [proc_tag(t) for s in scans for t in s.tags.values()]

    def size(key: str, attr: str) -> int:
        if isinstance(config.get(key), int) and config[key] > 0:
            return config[key]
        seen = [getattr(t, attr) for t in tags if getattr(t, attr) is not None]
        return max(seen) + 1 if seen else 1

    return _Sizes(tp=size("tensor_parallel_size", "tp"), pp=size("pipeline_parallel_size", "pp"),
                  pcp=size("prefill_context_parallel_size", "pcp"))


def _rank_of_proc(scan: FileScan, pid: int | None, sizes: _Sizes) -> tuple[int | None, ProcTag]:
    """The global rank whose figures a process prints (None for engine-level processes)."""
    tag = proc_tag(scan.tags[pid]) if pid is not None and pid in scan.tags else ProcTag(Role.OTHER)
    if pid is not None and pid in scan.v0_ranks:
        return scan.v0_ranks[pid], tag
    if tag.role is Role.WORKER:
        return sizes.global_rank(tag), tag
    return None, tag


def _engine_rank(tag: ProcTag, sizes: _Sizes) -> int:
    """The worker that lives inside an engine process (uni executor) or a V0 driver."""
    return (tag.dp or 0) * sizes.pp * sizes.pcp * sizes.tp


# --------------------------------------------------------------------------------------------
# The boot


@dataclass(frozen=True)
class Boot:
    ranks: dict[int, _Rank]
    engine: dict[FactKind, list[Located]]
    scans: tuple[FileScan, ...]


def gather(scans: Sequence[FileScan]) -> Boot:
    located = [Located(f.kind, f.value, s.index, p.line.pos, p.line.pid, p.line.src)
               for s in scans for p in s.lines for f in p.facts]
    engine: dict[FactKind, list[Located]] = defaultdict(list)
    for fact in located:
        if fact.kind not in RANK_KINDS:
            engine[fact.kind].append(fact)
    sizes = _sizes(scans, _engine_config(engine))
    by_file = {s.index: s for s in scans}
    ranks: dict[int, _Rank] = {}
    orphans: list[tuple[Located, int, ProcTag]] = []
    for fact in located:
        if fact.kind not in RANK_KINDS:
            continue
        rank, tag = _rank_of_proc(by_file[fact.file], fact.pid, sizes)
        if rank is None:
            orphans.append((fact, _engine_rank(tag, sizes), tag))
            continue
        ranks.setdefault(rank, _Rank(tag)).facts[fact.kind].append(fact)
    worker_ranks = {s.index: {_rank_of_proc(s, pid, sizes)[0] for pid, name in s.tags.items()
                              if proc_tag(name).role is Role.WORKER}
                    for s in scans}
    for fact, rank, tag in orphans:
        # Per-rank figures on an engine or untagged line: the uni executor's (or V0 driver's) worker,
        # unless a worker process of that file is that rank.
        if rank in worker_ranks[fact.file]:
            continue
        ranks.setdefault(rank, _Rank(tag)).facts[fact.kind].append(fact)
    return Boot(ranks, engine, tuple(scans))


def check_one_boot(scans: Sequence[FileScan]) -> None:
    """Several files make one report only when they are parts of one boot (one file per node): a
    BadInputError when two of them print different engine configs or figures for the same rank,
    as the logs of two runs do."""
    seen: list[tuple[FileScan, dict[str, Any], set[int]]] = []
    for scan in scans:
        boot = gather([scan])
        config = _engine_config(boot.engine)
        version = _first(boot.engine, FactKind.VERSION)
        if version is not None:
            config["vllm version"] = version
        ranks = {rank for rank, r in boot.ranks.items() if any(r.facts.values())}
        for other, other_config, other_ranks in seen:
            why = None
            differ = [k for k in config if k in other_config and config[k] != other_config[k]]
            if differ:
                why = f"{differ[0]} {other_config[differ[0]]} in one, {config[differ[0]]} in the other"
            elif both := sorted(ranks & other_ranks):
                why = f"both print rank {both[0]}'s figures"
            if why:
                raise BadInputError(f"{other.where} and {scan.where} are logs of two different engine runs ({why}): "
                                    f"ingest each on its own, or compare them with kvaudit diff")
        seen.append((scan, config, ranks))


def _first(engine: dict[FactKind, list[Located]], kind: FactKind) -> Any:
    values = engine.get(kind)
    return values[0].value if values else None


def _last(engine: dict[FactKind, list[Located]], kind: FactKind) -> Any:
    values = engine.get(kind)
    return values[-1].value if values else None


def _engine_config(engine: dict[FactKind, list[Located]]) -> dict[str, Any]:
    line = _first(engine, FactKind.ENGINE_CONFIG)
    return knobs_from_engine_line(line) if line is not None else {}


# --------------------------------------------------------------------------------------------
# Config


def build_config(boot: Boot) -> AuditConfig:
    engine = boot.engine
    args_text = _first(engine, FactKind.NON_DEFAULT_ARGS)
    known, extra = knobs_from_args(non_default_args(args_text)) if args_text is not None else ({}, {})
    resolved = _engine_config(engine)
    # The engine line shows what vLLM resolved (defaults filled in, capture sizes expanded), so it
    # wins over what the user typed; gpu_memory_utilization is not on it.
    merged = {**known, **resolved}
    if "gpu_memory_utilization" not in merged:
        printed = [f.value for f in engine.get(FactKind.GMU, []) if 0 < f.value <= 1]
        merged["gpu_memory_utilization"] = printed[0] if printed else None
    merged["max_model_len"] = _served_length(engine) or merged.get("max_model_len")
    tags = [proc_tag(t) for s in boot.scans for t in s.tags.values()]
    workers = [t for t in tags if t.role is Role.WORKER and not t.provisional]
    if "tensor_parallel_size" not in merged:
        tps = [t.tp for t in workers if t.tp is not None]
        merged["tensor_parallel_size"] = (max(tps) + 1 if tps else 1) if workers or _uni(tags) else None
    if "decode_context_parallel_size" not in merged:
        dcps = [t.dcp for t in workers if t.dcp is not None]
        merged["decode_context_parallel_size"] = (max(dcps) + 1 if dcps else 1) if workers or _uni(tags) else None
    fields = {k: merged.get(k) for k in MODELLED_KEYS}
    for key in ("pipeline_parallel_size", "data_parallel_size", "prefill_context_parallel_size"):
        if key in merged and key not in extra and merged[key] != 1:
            extra[key] = merged[key]
    return AuditConfig(**fields, extra_args=extra)


def _uni(tags: Iterable[ProcTag]) -> bool:
    """An EngineCore and no worker process: the uni executor, world size 1."""
    tags = list(tags)
    return any(t.role is Role.ENGINE for t in tags) and not any(t.role is Role.WORKER for t in tags)


def _served_length(engine: dict[FactKind, list[Located]]) -> int | None:
    """The max_model_len vLLM checked or served: after auto-fit, not the -1 that asked for it."""
    if (c := _last(engine, FactKind.MAX_CONCURRENCY)) is not None:
        return c[0] or None
    if (n := _first(engine, FactKind.CHECKED_MODEL_LEN)) is not None:
        return n
    if (a := _last(engine, FactKind.AUTOFIT)) is not None:
        return a[1]
    return None


# --------------------------------------------------------------------------------------------
# Failure


def _timeline_phase(text: str, pos: int) -> Phase:
    """The phase the boot was in at `pos`: the last milestone printed before it."""
    phase, at = Phase.BASELINE, -1
    for name, marks in _MILESTONES:
        hits = [i for m in marks if (i := text.find(m, 0, pos)) >= 0]
        if hits and min(hits) > at:
            phase, at = name, min(hits)
    if phase is Phase.KV:
        hits = [i for m in _CAPTURE_MARKS if (i := text.find(m, at, pos)) >= 0]
        if hits:
            phase = Phase.CAPTURE
    return phase


def find_failure(boot: Boot, world_size: int | None) -> tuple[Failure | None, int | None, list[str]]:
    """The boot's failure (root cause first), its max feasible length, and post-boot notes."""
    facts = boot.engine.get(FactKind.FAILURE, [])
    by_file = {s.index: s for s in boot.scans}
    boot_done: dict[int, int] = {}
    during, after = [], []
    for f in facts:
        scan = by_file[f.file]
        if f.file not in boot_done:
            done = scan.text.find(BOOT_DONE)
            boot_done[f.file] = done if done >= 0 else len(scan.text) + 1
        (after if f.pos > boot_done[f.file] else during).append(f)
    notes = sorted({f"after startup finished: {f.value.message}" for f in after})
    if not during:
        return None, None, notes
    root = min(during, key=lambda f: (f.value.priority, f.file, f.pos))
    value: FailureFact = root.value
    scan = by_file[root.file]
    phase = value.phase or _timeline_phase(scan.text, root.pos)
    rank, tag = _rank_of_proc(scan, root.pid, _sizes(boot.scans, _engine_config(boot.engine)))
    if rank is None and (world_size == 1 or _untagged(boot)):
        rank = 0
    feasible = None
    if value.kind is FailureKind.DOES_NOT_FIT:
        lens = [f.value for f in boot.engine.get(FactKind.MAX_FEASIBLE_LEN, []) if f.pos <= boot_done[f.file]]
        feasible = lens[0] if lens else None
    return Failure(phase=phase, rank=rank, kind=value.kind, message=value.message), feasible, notes


# --------------------------------------------------------------------------------------------
# One rank's report


@dataclass(frozen=True)
class _Graphs:
    estimate: int | None
    actual: int | None
    retained: int | None
    inferred_zero: bool
    """The estimate is 0 because vLLM printed none of the lines it prints when it is > 0."""
    profile_capture: tuple[float, int] | None
    real_capture: tuple[float, int] | None


_ESTIMATE_ORDER = ("mrv2", "pool", "estimated")


def _graphs(r: _Rank, total: int | None, runner: str | None, estimates_disabled: bool) -> _Graphs:
    captures = r.all(FactKind.GRAPH_CAPTURE)
    # V2 prints "Graph capturing finished" for the profiling capture and again for the real one
    # (gpu/model_runner.py capture_model); V1 prints it once, for the real capture.
    if runner == "V2":
        profile_capture = captures[0] if captures else None
        real_capture = captures[-1] if len(captures) >= 2 else None
    else:
        profile_capture, real_capture = None, (captures[-1] if captures else None)
    estimates: list[GraphEstimate] = r.all(FactKind.GRAPH_ESTIMATE)
    estimate = next((e.bytes for source in _ESTIMATE_ORDER for e in reversed(estimates) if e.source == source), None)
    if estimate is None and total is not None:
        if (adv := r.last(FactKind.ADVISORY)) is not None and adv[0] >= adv[1]:
            estimate = round((adv[0] - adv[1]) * total)
        elif (dis := r.last(FactKind.ADVISORY_DISABLED)) is not None and dis[0] <= dis[1] < 1.0:
            estimate = round((dis[1] - dis[0]) * total)  # "suggested" is only an estimate below the 1.0 cap
    if estimate is None and profile_capture is not None:
        estimate = profile_capture[1]  # V2 captures for real while profiling: that capture is its estimate
    inferred_zero = False
    if (estimate is None and r.has(FactKind.PEAK_WITH_GRAPHS)
            and not r.has(FactKind.ADVISORY, FactKind.ADVISORY_DISABLED, FactKind.GRAPH_ESTIMATE)
            and not estimates_disabled):
        # gpu_worker.py prints the advisory and "CUDA graph pool memory" exactly when the estimate
        # is > 0, both before "Actual usage": a rank that printed the latter and neither of the
        # former estimated 0 (MRv2 before #53682, or no graphs at all).
        estimate, inferred_zero = 0, True
    actual = r.last(FactKind.GRAPH_ACTUAL)
    if actual is None:
        actual = r.last(FactKind.GRAPH_USAGE)
    if actual is None and real_capture is not None:
        actual = real_capture[1]
    return _Graphs(estimate, actual, r.last(FactKind.GRAPH_RETAINED), inferred_zero, profile_capture, real_capture)


def _known_max(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _activation(r: _Rank, graphs: _Graphs, estimates_disabled: bool) -> tuple[int | None, str | None]:
    """activation_peak and, when the figure cannot be trusted, why."""
    peak = r.last(FactKind.PEAK_WITH_GRAPHS)
    if peak is not None:
        # New wording: peak_activation_memory = transient_peak_headroom + cg_applied, where
        # cg_applied is the estimate unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (gpu_worker.py).
        applied = 0 if estimates_disabled else graphs.estimate
        if applied is None:
            return None, None
        if peak - applied < 0:
            return None, (f"peak activation {fmt_gib(peak)} is below the graph estimate {fmt_gib(applied)}; "
                          f"activation_peak left unknown")
        return peak - applied, None
    return r.last(FactKind.PEAK), None


def rank_report(rank: int, r: _Rank, *, gmu: float | None, runner: str | None, estimates_disabled: bool,
                failure: Failure | None, notes: list[str], tp_size: int | None = None,
                dcp_size: int | None = None) -> RankReport:
    total = r.last(FactKind.DEVICE_TOTAL)
    requested = r.last(FactKind.REQUESTED)
    if requested is None and total is not None and gmu is not None:
        requested = request_memory(total, gmu)
    graphs = _graphs(r, total, runner, estimates_disabled)
    activation, why = _activation(r, graphs, estimates_disabled)
    if why:
        notes.append(f"rank {rank}: {why}")
    kv_available = _first_known(r.last(FactKind.KV_FIXED), r.last(FactKind.KV_AVAILABLE), r.last(FactKind.KV_IN_USE))
    allocated = failure is None or failure.phase not in _BEFORE_ALLOCATION
    kv_cache = (_first_known(r.last(FactKind.KV_IN_USE), r.last(FactKind.KV_FIXED), r.last(FactKind.KV_AVAILABLE))
                if allocated else None)
    owners: dict[Owner, int | None] = {o: None for o in Owner}
    owners[Owner.WEIGHTS] = r.first(FactKind.WEIGHTS)
    owners[Owner.GRAPH_POOL] = _known_max(graphs.estimate, graphs.actual)
    owners[Owner.ACTIVATION_PEAK] = activation
    owners[Owner.NON_TORCH] = r.last(FactKind.NON_TORCH)
    owners[Owner.KV_CACHE] = kv_cache
    charged = [owners[o] for o in NON_KV_OWNERS if o is not Owner.TORCH_OTHER] + [kv_cache]
    if requested is not None and None not in charged:
        owners[Owner.KV_UNALLOCATED] = requested - sum(charged)  # type: ignore[arg-type]
    b12x = r.last(FactKind.B12X_TRANSIENT)
    if b12x is not None:
        notes.append(f"rank {rank}: the profile peak includes {b12x / 2**20:.2f} MiB of B12X sparse DCP transient "
                     f"memory (fork line); it is part of activation_peak")
    if graphs.retained is not None:
        notes.append(f"rank {rank}: graph profiling retained {fmt_gib(graphs.retained)} (fork line); graph_pool "
                     f"counts the full {fmt_gib(graphs.estimate)} captured, nothing is subtracted")
    if graphs.inferred_zero and graphs.actual:
        notes.append(f"rank {rank}: vLLM reserved no CUDA graph memory before sizing the KV cache (estimate 0), but "
                     f"capture took {fmt_gib(graphs.actual)}: those bytes were not budgeted")
    tag = r.tag
    # A name without _TP is a TP=1 worker, or an old / provisional one that names the global rank;
    # without _DCP the DCP rank is 0 only when there is no DCP.
    tp_rank = tag.tp if tag.tp is not None else (rank % tp_size if tp_size else None)
    dcp_rank = tag.dcp if tag.dcp is not None else (0 if dcp_size == 1 else None)
    return RankReport(
        rank=rank, tp_rank=tp_rank, dcp_rank=dcp_rank,
        device_total_bytes=total, requested_bytes=requested, others_bytes=None, owners=owners,
        graph_pool_estimate_bytes=graphs.estimate, graph_pool_actual_bytes=graphs.actual,
        kv_available_bytes=kv_available, phases=_phases(rank, r, graphs, failure), kv_blocks=r.last(FactKind.KV_BLOCKS),
        free_at_start_bytes=r.first(FactKind.FREE_AT_START), graph_pool_retained_bytes=graphs.retained)


def _first_known(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


def _phases(rank: int, r: _Rank, graphs: _Graphs, failure: Failure | None) -> tuple[PhaseRecord, ...]:
    """What the log says of each phase, as text: the bytes are in the owners."""
    details: dict[Phase, list[str]] = defaultdict(list)
    seconds: dict[Phase, float] = {}
    if (w := r.first(FactKind.WEIGHTS)) is not None:
        details[Phase.LOAD].append(f"weights {fmt_gib(w)}")
    if (s := r.first(FactKind.LOAD_SECONDS)) is not None:
        seconds[Phase.LOAD] = s
    if (s := r.last(FactKind.PROFILE_SECONDS)) is not None:
        seconds[Phase.PROFILE] = s
    for kind, label in ((FactKind.CONSUMED, "consumed (weights + persistent torch + non-torch)"),
                        (FactKind.PEAK_WITH_GRAPHS, "peak activation incl. the applied graph estimate"),
                        (FactKind.PEAK, "peak activation"),
                        (FactKind.TORCH_PEAK_INCREASE, "torch peak increase"),
                        (FactKind.NON_KV_TOTAL, "total non-KV"),
                        (FactKind.NON_KV_RSS, "non-KV usage (process RSS)")):
        if (v := r.last(kind)) is not None:
            details[Phase.PROFILE].append(f"{label} {fmt_gib(v)}")
    if (v := r.last(FactKind.B12X_TRANSIENT)) is not None:
        details[Phase.PROFILE].append(f"includes {v / 2**20:.2f} MiB of B12X sparse DCP transient memory")
    if graphs.estimate is not None:
        details[Phase.GRAPHS].append(f"estimate {fmt_gib(graphs.estimate)}"
                                     + (" (inferred: no estimate line)" if graphs.inferred_zero else ""))
    if graphs.profile_capture is not None:
        seconds[Phase.GRAPHS] = graphs.profile_capture[0]
        details[Phase.GRAPHS].append(f"profiling capture took {fmt_gib(graphs.profile_capture[1])}")
    if graphs.retained is not None:
        details[Phase.GRAPHS].append(f"retained {fmt_gib(graphs.retained)}")
    for kind, label in ((FactKind.KV_FIXED, "fixed"), (FactKind.KV_AVAILABLE, "available"),
                        (FactKind.KV_IN_USE, "in use"),
                        (FactKind.KV_SUGGESTION, "vLLM's --kv-cache-memory suggestion")):
        if (v := r.last(kind)) is not None:
            details[Phase.KV].append(f"{label} {fmt_gib(v)}")
    if graphs.real_capture is not None:
        seconds[Phase.CAPTURE] = graphs.real_capture[0]
        details[Phase.CAPTURE].append(f"capture took {fmt_gib(graphs.real_capture[1])}")
    if graphs.actual is not None and graphs.real_capture is None:
        details[Phase.CAPTURE].append(f"graph pool {fmt_gib(graphs.actual)}")
    failed = failure.phase if failure is not None and failure.rank == rank else None
    phases = []
    for phase in Phase:
        if phase in details or phase in seconds or phase is failed:
            phases.append(PhaseRecord(name=phase, status=PhaseStatus.FAILED if phase is failed else PhaseStatus.OK,
                                      seconds=seconds.get(phase), detail="; ".join(details[phase]) or None))
    return tuple(phases)


# --------------------------------------------------------------------------------------------
# The report


def _runner(boot: Boot) -> str | None:
    explicit = boot.engine.get(FactKind.MODEL_RUNNER)
    if explicit:
        return explicit[-1].value
    v1_names = any(name.startswith(("EngineCore", "Worker_")) or name == "Worker"
                   for s in boot.scans for name in s.tags.values())
    if not boot.engine.get(FactKind.ENGINE_CONFIG) and not v1_names:
        return None  # V0 also logged from a model_runner.py: file names say nothing there
    # The weights and capture lines come from the runner's own file: V1 gpu_model_runner.py (and
    # cpu_model_runner.py, a subclass), V2 gpu/model_runner.py.
    for r in boot.ranks.values():
        for kind in (FactKind.WEIGHTS, FactKind.GRAPH_CAPTURE):
            for f in r.facts.get(kind, ()):
                name = (f.src or "").rsplit("/", 1)[-1]
                if name in ("gpu_model_runner.py", "cpu_model_runner.py"):
                    return "V1"
                if name == "model_runner.py":
                    return "V2"
    return None


def _env(boot: Boot) -> dict[str, str]:
    return {name: value for name, value in (f.value for f in boot.engine.get(FactKind.ENV, []))}


def _kv_tokens(boot: Boot) -> int | None:
    """One KV size line per engine (info_once): the last per process, the least over engines."""
    last: dict[tuple[int, int | None], int] = {}
    for f in boot.engine.get(FactKind.KV_TOKENS, []):
        last[(f.file, f.pid)] = f.value[1]
    return min(last.values()) if last else None


def _graph_bytes_per_size(ranks: dict[int, _Rank]) -> int | None:
    """Bytes one capture size costs: one graph per mode (V1 DEBUG per-mode lines); the least rank."""
    per_rank = []
    for r in ranks.values():
        modes = {mode: size for mode, size in r.all(FactKind.GRAPH_PER_SIZE)}
        if modes:
            per_rank.append(sum(modes.values()))
    return min(per_rank) if per_rank else None


def assemble(scans: Sequence[FileScan]) -> Report:
    boot = gather(scans)
    config = build_config(boot)
    world = None
    if config.tensor_parallel_size is not None:
        extra = config.extra_args
        world = config.tensor_parallel_size * int(extra.get("pipeline_parallel_size") or 1) * int(
            extra.get("prefill_context_parallel_size") or 1)
    failure, feasible, notes = find_failure(boot, world)
    if world == 1 or _untagged(boot):
        _give_check_figures_to_rank_0(boot)
    runner = _runner(boot)
    disabled = _env(boot).get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS") == "0"
    rank_notes: list[str] = []
    ranks = [rank_report(rank, boot.ranks[rank], gmu=config.gpu_memory_utilization, runner=runner,
                         estimates_disabled=disabled, failure=failure, notes=rank_notes,
                         tp_size=config.tensor_parallel_size, dcp_size=config.decode_context_parallel_size)
             for rank in sorted(boot.ranks)]
    version = _first(boot.engine, FactKind.VERSION)
    backends = boot.engine.get(FactKind.ATTENTION_BACKEND, [])
    first_backend = min(backends, key=lambda f: (f.file, f.pos)).value if backends else None
    warnings = list(dict.fromkeys([f.value for f in boot.engine.get(FactKind.NOTE, [])] + rank_notes + notes))
    if any(name == V0_WORKER for s in boot.scans for name in s.tags.values()):
        warnings.append(f"V0 worker processes ({V0_WORKER}) name no rank: ranks 1, 2, … are given in the order of "
                        f"their pids, rank 0 is the driver (untagged lines)")
    if boot.ranks and _untagged(boot):
        warnings.append("the log names no process (no `(Worker_TP0 pid=…)` prefixes): its figures are taken as "
                        "one rank, rank 0")
    report = build_report(
        source=Source.LOG, config=config, ranks=ranks,
        engine=Engine(name="vllm", version=version, model_runner=runner, attention_backend=first_backend),
        environment=Environment(vllm=version, env=_env(boot)), failure=failure, warnings=warnings,
        known_kv_tokens=_kv_tokens(boot), known_max_feasible_model_len=feasible,
        known_max_model_len_fits=_passed_kv_check(boot, failure, config),
        known_kv_needed_bytes=_kv_needed(boot, failure),
        graph_bytes_per_size=_graph_bytes_per_size(boot.ranks))
    return report


def _untagged(boot: Boot) -> bool:
    """No line names its process (an excerpt, or V0's single process): one rank, rank 0."""
    return not any(s.tags for s in boot.scans)


def _give_check_figures_to_rank_0(boot: Boot) -> None:
    """The KV check runs in the engine core and names no rank; with one rank, its "available KV
    cache memory" is rank 0's (when rank 0 printed none of its own)."""
    check = boot.engine.get(FactKind.KV_AVAILABLE_AT_CHECK)
    if not check:
        return
    rank = boot.ranks.setdefault(0, _Rank(ProcTag(Role.ENGINE)))
    if not rank.has(FactKind.KV_AVAILABLE, FactKind.KV_FIXED, FactKind.KV_IN_USE):
        rank.facts[FactKind.KV_AVAILABLE].extend(check)


def _kv_needed(boot: Boot, failure: Failure | None) -> int | None:
    """What one request at max_model_len needs, as vLLM's failed KV check states it."""
    if failure is None or failure.kind is not FailureKind.DOES_NOT_FIT:
        return None
    return _first(boot.engine, FactKind.KV_NEEDED)


def _passed_kv_check(boot: Boot, failure: Failure | None, config: AuditConfig) -> bool | None:
    """vLLM prints the KV size line only after every rank passed `_check_enough_kv_cache_memory`
    at the final max_model_len, so a boot that printed it and did not fail fits; a boot whose
    check said how much one request needs failed it."""
    if failure is not None and failure.kind is FailureKind.DOES_NOT_FIT and _kv_needed(boot, failure) is not None:
        return False
    if failure is not None or config.max_model_len is None:
        return None
    if boot.engine.get(FactKind.KV_TOKENS):
        return True
    # V0 0.6.4 printed the concurrency without a KV size line: at least one request fits when it is ≥ 1.
    concurrency = _last(boot.engine, FactKind.MAX_CONCURRENCY)
    return True if concurrency is not None and concurrency[1] >= 1 else None
