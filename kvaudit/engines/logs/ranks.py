"""Who printed what: each fact of one boot's logs given to the global rank that printed it.

A worker's pid maps to its last name (`Worker_TP3`), and the name to its global rank. vLLM prints
some figures once (V1 "Model loading took" and "Available KV cache memory" on the local first
rank only): they land on that rank and no other, so the other ranks keep `null` there. With the
`uni` executor (GPU, world size 1) the worker runs inside EngineCore, so EngineCore lines are
rank 0's when a file has no worker process; the same holds for untagged lines (V0 ran its driver
worker in the main process).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvaudit.engines.logs.facts import LOADED_WEIGHTS, RANK_KINDS, Fact, FactKind
from kvaudit.engines.logs.knobs import NAMESPACE, knobs_from_engine_line, non_default_args
from kvaudit.engines.logs.layout import ARGS_NAMESPACE, ENGINE_LINE, Layout, layout
from kvaudit.engines.logs.layout import KEYS as LAYOUT_KEYS
from kvaudit.engines.logs.lines import ProcTag, Role, proc_tag
from kvaudit.engines.logs.parse import FileScan
from kvaudit.errors import BadInputError
from kvaudit.printable import one_line
from kvaudit.units import fmt_gib


@dataclass(frozen=True)
class Located:
    """A fact with where it was printed."""

    kind: FactKind
    value: Any
    file: int
    pos: int
    pid: int | None
    src: str | None


TORCH_RANK = re.compile(r"\[rank(\d{1,6})\]:")
"""torch.distributed's prefix on a rank's own output (c10's logging, torchrun): the global rank."""


@dataclass
class RankFacts:
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
class ParallelSizes:
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


def boot_layout(scans: Sequence[FileScan], engine: dict[FactKind, list[Located]]) -> Layout:
    """The boot's parallel layout (layout.py): the engine line, then `non-default args`, then a
    pasted command line, then the worker names of every file."""
    args_text = engine_first(engine, FactKind.NON_DEFAULT_ARGS)
    args_name = ARGS_NAMESPACE if args_text is not None and args_text.startswith(NAMESPACE) else "non-default args"
    stated = [(ENGINE_LINE, engine_config(engine)),
              (args_name, non_default_args(args_text) if args_text is not None else {}),
              ("vLLM's rank assignment lines (parallel_state)", _assigned_sizes(engine)),
              ("vLLM's KV size line (`… by the cp_world_size`)", _cp_sizes(engine)),
              ("a pasted command line", command_args(engine))]
    return layout((name for s in scans for name in s.names), stated, engine_ran_a_rank=_engine_ran_a_rank(scans),
                  v0_workers=max((len(s.v0_ranks) for s in scans), default=0))


def _assigned_sizes(engine: dict[FactKind, list[Located]]) -> dict[str, int]:
    """The sizes parallel_state's lines pin down: each group at least its highest rank seen plus one,
    all of them exactly that where those fill the world (ExternalDP × DP × PP × PCP × TP ranks);
    none where they do not, or where the lines give different worlds."""
    facts = engine.get(FactKind.PARALLEL_RANKS, [])
    worlds = {f.value[0] for f in facts}
    if len(worlds) != 1:
        return {}
    least = {dim: 1 + max((f.value[1].get(dim, 0) for f in facts), default=0) for dim in ("dp", "pp", "pcp", "tp")}
    if least["dp"] * least["pp"] * least["pcp"] * least["tp"] != worlds.pop():
        return {}
    return {LAYOUT_KEYS[dim]: size for dim, size in least.items()}


def _cp_sizes(engine: dict[FactKind, list[Located]]) -> dict[str, int]:
    """The context-parallel sizes the KV size line multiplied its tokens by; none where lines differ."""
    worlds = {f.value for f in engine.get(FactKind.CP_WORLD, [])}
    if len(worlds) != 1:
        return {}
    pcp, dcp = worlds.pop()
    return {"prefill_context_parallel_size": pcp, "decode_context_parallel_size": dcp}


def _engine_ran_a_rank(scans: Sequence[FileScan]) -> bool:
    """An EngineCore process printed a figure of a rank's own (weights, available KV, a graph
    capture): the uni executor, whose worker runs inside it. The engine core prints the KV size in
    tokens, the concurrency and a failure at any parallel size, so those alone say nothing."""
    return any(p.line.pid in s.tags and proc_tag(s.tags[p.line.pid]).role is Role.ENGINE
               and any(f.kind in RANK_KINDS for f in p.facts) for s in scans for p in s.lines)


def command_args(engine: dict[FactKind, list[Located]]) -> dict[str, Any]:
    """The flags of the pasted command lines; a flag they give different values is left out: which
    command the log is of is not known (vllm#10533: two servers on one GPU, `--gpu-memory-utilization
    0.75` and `0.20`, the second failing; the first was taken)."""
    return {key: values[0] for key, values in _command_values(engine).items() if len(values) == 1}


def command_conflicts(engine: dict[FactKind, list[Located]]) -> list[str]:
    """What the report says of each flag command_args leaves out."""
    return [f"the pasted commands give {key} different values ({', '.join(map(str, values))}): which command "
            f"this log is of is not known, so it is not taken from them"
            for key, values in _command_values(engine).items() if len(values) > 1]


COMMAND_CHECKED = ("max_model_len", "tensor_parallel_size", "gpu_memory_utilization", "kv_cache_dtype")
"""The knobs whose pasted value is checked against what vLLM's own lines show."""


def command_disagreements(engine: dict[FactKind, list[Located]], config: Any) -> list[str]:
    """Where the one pasted command gives a knob a value vLLM's lines show it did not run with: the
    command may be of another run, or edited after it (real pastes round nineteen: `--max-model-len
    128000` above `Maximum concurrency for 100,000 tokens per request`)."""
    notes = []
    for key, typed in command_args(engine).items():
        ran = getattr(config, key, None) if key in COMMAND_CHECKED else None
        if ran is not None and type(ran) is type(typed) and ran != typed:
            notes.append(f"the pasted command gives {key} {typed}, and vLLM's lines show {ran}: the log's is "
                         f"kept (the command may be of another run)")
    return notes


def _command_values(engine: dict[FactKind, list[Located]]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for f in engine.get(FactKind.COMMAND_ARG, ()):
        key, value = f.value
        if value not in (values := out.setdefault(key, [])):
            values.append(value)
    return out


def parallel_sizes(scans: Sequence[FileScan], engine: dict[FactKind, list[Located]]) -> ParallelSizes:
    return _sizes(boot_layout(scans, engine))


def _sizes(boot: Layout) -> ParallelSizes:
    return ParallelSizes(tp=boot.for_ranks("tp"), pp=boot.for_ranks("pp"), pcp=boot.for_ranks("pcp"))


def rank_of_proc(scan: FileScan, pid: int | None, sizes: ParallelSizes) -> tuple[int | None, ProcTag]:
    """The global rank whose figures a process prints (None for engine-level processes)."""
    tag = proc_tag(scan.tags[pid]) if pid is not None and pid in scan.tags else ProcTag(Role.OTHER)
    if pid is not None and pid in scan.v0_ranks:
        return scan.v0_ranks[pid], tag
    if pid is not None and pid in scan.ray_ranks:
        return scan.ray_ranks[pid], tag
    if tag.ray:
        return None, tag  # a Ray worker that printed no figure of its own: its rank is not known
    if tag.role is Role.WORKER:
        return sizes.global_rank(tag), tag
    return None, tag


def engine_rank(tag: ProcTag, sizes: ParallelSizes) -> int:
    """The worker that lives inside an engine process (uni executor) or a V0 driver."""
    return (tag.dp or 0) * sizes.pp * sizes.pcp * sizes.tp


# --------------------------------------------------------------------------------------------
# The boot


@dataclass(frozen=True)
class Boot:
    ranks: dict[int, RankFacts]
    engine: dict[FactKind, list[Located]]
    scans: tuple[FileScan, ...]


def gather(scans: Sequence[FileScan]) -> Boot:
    located = [Located(f.kind, f.value, s.index, p.line.pos, p.line.pid, p.line.src)
               for s in scans for p in s.lines for f in p.facts]
    engine: dict[FactKind, list[Located]] = defaultdict(list)
    for fact in located:
        if fact.kind not in RANK_KINDS:
            engine[fact.kind].append(fact)
    layout = boot_layout(scans, engine)
    sizes = _sizes(layout)
    by_file = {s.index: s for s in scans}
    ranks: dict[int, RankFacts] = {}
    orphans: list[tuple[Located, int, ProcTag]] = []
    for fact in located:
        if fact.kind not in RANK_KINDS:
            continue
        rank, tag = rank_of_proc(by_file[fact.file], fact.pid, sizes)
        if rank is None:
            orphans.append((fact, engine_rank(tag, sizes), tag))
            continue
        ranks.setdefault(rank, RankFacts(tag)).facts[fact.kind].append(fact)
    worker_ranks = {s.index: {rank_of_proc(s, pid, sizes)[0] for pid, name in s.tags.items()
                              if proc_tag(name).role is Role.WORKER}
                    for s in scans}
    # torch's own prefix on what a torch.distributed rank prints (`[rank1]:[W826 …] memory allocation failed
    # with OOM on device 1 … total: 33687928832)`): the global rank it names (real pastes round twenty: it
    # had gone to rank 0)
    torch_ranks = {(s.index, p.line.pos): int(m.group(1)) for s in scans for p in s.lines
                   if p.facts and p.line.pid is None and (m := TORCH_RANK.match(p.line.msg))}
    if torch_ranks and (world := layout.world()) is not None:
        # a rank past the engine's world is another program's (a trainer's torchrun ranks), not vLLM's
        torch_ranks = {at: rank for at, rank in torch_ranks.items() if rank < world}
    for fact, rank, tag in orphans:
        if (at := (fact.file, fact.pos)) in torch_ranks:
            ranks.setdefault(torch_ranks[at], RankFacts(tag)).facts[fact.kind].append(fact)
            continue
        # Per-rank figures on an engine or untagged line: the uni executor's (or V0 driver's) worker,
        # unless a worker process of that file is that rank.
        if rank in worker_ranks[fact.file]:
            continue
        ranks.setdefault(rank, RankFacts(tag)).facts[fact.kind].append(fact)
    return Boot(ranks, engine, tuple(scans))


def check_one_boot(scans: Sequence[FileScan]) -> None:
    """The files make one report only when they are one boot (one file per node): a BadInputError
    when one file holds two runs (_check_one_run), or two files print different engine configs or
    figures for the same rank, as the logs of two runs do. The message names the first file that
    clashes with one before it, and the earliest of those it clashes with.

    Linear in the number of files (when each file was compared with every file before it, an
    ingest of 16,000 one-rank files took 168 s on the 2-core machine; now 9 s): while no two files
    clash, every file that printed a key printed the value the first one did, and every rank's
    figures come from one file, so a new file is compared with those first values and rank owners
    only."""
    seen: list[tuple[FileScan, dict[str, Any], set[int]]] = []
    # config key → the value every file so far printed for it, and the first such file's index in seen
    agreed: dict[str, tuple[Any, int]] = {}
    # rank → the index in seen of the file that printed its figures
    printed_by: dict[int, int] = {}
    for scan in scans:
        boot = gather([scan])
        _check_one_run(scan, boot.engine)
        config = engine_config(boot.engine)
        version = engine_first(boot.engine, FactKind.VERSION)
        if version is not None:
            config["vllm version"] = version
        ranks = {rank for rank, r in boot.ranks.items() if any(r.facts.values())}
        clashes = [agreed[k][1] for k in config if k in agreed and config[k] != agreed[k][0]]
        clashes += [printed_by[rank] for rank in ranks if rank in printed_by]
        if clashes:
            other, other_config, other_ranks = seen[min(clashes)]
            if other.text == scan.text:
                raise BadInputError(f"{other.where} and {scan.where} are the same log, given twice: pass it once")
            differ = [k for k in config if k in other_config and config[k] != other_config[k]]
            if differ:
                why = f"{differ[0]} {other_config[differ[0]]} in one, {config[differ[0]]} in the other"
            else:
                why = f"both print rank {min(ranks & other_ranks)}'s figures"
            raise BadInputError(f"{other.where} and {scan.where} are logs of two different engine runs ({why}): "
                                f"ingest each on its own, or compare them with kvaudit diff")
        for key, value in config.items():
            agreed.setdefault(key, (value, len(seen)))
        for rank in ranks:
            printed_by[rank] = len(seen)
        seen.append((scan, config, ranks))


def _check_one_run(scan: FileScan, engine: dict[FactKind, list[Located]]) -> None:
    """A BadInputError when one file prints two engine configs (or vLLM versions, or served
    lengths) that differ, as two boots' logs appended into one file do. The same config printed
    twice (a restart) is one run: the last figures win."""
    configs = [knobs_from_engine_line(x.value) for x in engine.get(FactKind.ENGINE_CONFIG, ())]
    configs += [{"vllm version": x.value} for x in engine.get(FactKind.VERSION, ())]
    # the length a boot serves (`Maximum concurrency for N tokens`) is the one its KV check tests:
    # two lengths are two runs (vllm#25350: 100,000 served, then a run at 221,000 that failed). Not
    # compared with the engine config's: auto-fit serves less than the config asked for.
    configs += [{"served length": x.value[0]} for x in engine.get(FactKind.MAX_CONCURRENCY, ()) if x.value[0]]
    configs += [{"served length": x.value} for x in engine.get(FactKind.CHECKED_MODEL_LEN, ())]
    first: dict[str, Any] = {}
    for config in configs:
        for key, value in config.items():
            if first.setdefault(key, value) != value:
                a, b = (one_line(str(v))[:80] for v in (first[key], value))
                runs = _served_runs(scan) if key == "served length" else []
                if len(runs) > 2:
                    how_many = RUN_COUNTS.get(len(runs), str(len(runs)))
                    lengths = ", then ".join("one the log does not state" if n is None else str(n) for n in runs)
                    raise BadInputError(f"{scan.where}: the logs of {how_many} engine runs in one file (served length "
                                        f"{lengths}): split it and ingest each run on its own, or compare them "
                                        f"with kvaudit diff")
                raise BadInputError(f"{scan.where}: the logs of two engine runs in one file ({key} {a}, then {b}): "
                                    f"split it and ingest each run on its own, or compare them with kvaudit diff")


RUN_COUNTS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def _served_runs(scan: FileScan) -> list[int | None]:
    """Each engine run of a file that shows two served lengths, in order: the length it serves, or None where the
    log does not state it. A run starts at the file's start and at an untagged load line (facts.LOADED_WEIGHTS) after a
    served length: one boot prints its served length after its weights are loaded (real pastes round twenty-five,
    vllm#10517: three runs of one model at 20000, 29000 and 35000, the third cut before its length, refused as "two
    engine runs"). Not a tagged one: a data-parallel engine's worker may finish loading after another engine's
    served length, in one boot; nor an untagged one that follows another with no served length between: V0's
    workers each print it in one boot, untagged where a paste dropped their tags."""
    runs: list[int | None] = []
    for parsed in scan.lines:
        for fact in parsed.facts:
            if fact.kind is FactKind.WEIGHTS and parsed.line.pid is None and any(
                    w in parsed.line.msg for w in LOADED_WEIGHTS) and (not runs or runs[-1] is not None):
                runs.append(None)
            elif (length := _served_length(fact)) is not None:
                if not runs:
                    runs.append(length)
                elif runs[-1] is None:
                    runs[-1] = length
    return runs


def _served_length(fact: Fact) -> int | None:
    if fact.kind is FactKind.MAX_CONCURRENCY:
        return fact.value[0] or None
    return fact.value if fact.kind is FactKind.CHECKED_MODEL_LEN else None


def engine_first(engine: dict[FactKind, list[Located]], kind: FactKind) -> Any:
    values = engine.get(kind)
    return values[0].value if values else None


def engine_last(engine: dict[FactKind, list[Located]], kind: FactKind) -> Any:
    values = engine.get(kind)
    return values[-1].value if values else None


def engine_config(engine: dict[FactKind, list[Located]]) -> dict[str, Any]:
    line = engine_first(engine, FactKind.ENGINE_CONFIG)
    return knobs_from_engine_line(line) if line is not None else {}



def untagged(boot: Boot) -> bool:
    """No line names its process (an excerpt, or V0's single process): one rank, rank 0."""
    return not any(s.tags for s in boot.scans)


def no_worker_named(boot: Boot) -> bool:
    """No file names a worker process (a paste of engine-core lines alone)."""
    return not any(proc_tag(n).role is Role.WORKER for s in boot.scans for n in s.names)


AUTOFIT_ROUNDING = 2 ** 30 // 100
"""vLLM prints the auto-fit figure in GiB to two decimals: a rank's figure this close is the same."""
KV_KINDS = (FactKind.KV_FIXED, FactKind.KV_AVAILABLE, FactKind.KV_IN_USE)
"""The facts that state a rank's KV figure, the first known of them its available KV
(owners.stated_rank)."""


def _kv_figures(r: RankFacts) -> list[int]:
    """Every KV figure a rank states: KV_KINDS', and 0.34's extended cache (auto-fit fits to that)."""
    figures = [v for k in KV_KINDS if (v := r.last(k)) is not None]
    extended = r.last(FactKind.KV_EXTENDED)
    return figures + ([extended[1]] if extended is not None else [])


def _named_by_engine(boot: Boot, rank: int) -> RankFacts:
    """A rank's facts, made for it where only an engine-level line names its figure."""
    return boot.ranks.setdefault(rank, RankFacts(ProcTag(Role.ENGINE)))


def give_autofit_figure(boot: Boot, world: int | None) -> list[str]:
    """The KV memory vLLM's auto-fit names (its limiting worker's, no rank named) where no rank's
    own figure is it: to the one rank of a multi-rank boot without a figure of its own, or to rank 0
    of a one-rank log that states none; else a note (vllm PR 29431, pipeline parallel 2: stage 0's
    36.20 GiB in the log, stage 1's 29.72 GiB named only by auto-fit). Several engines' figures that
    differ (data parallel: each fits its own) name no rank and are left alone."""
    figures = boot.engine.get(FactKind.AUTOFIT_KV)
    if not figures or len({f.value for f in figures}) > 1:
        return []
    fitted = figures[0]
    stated = {rank: min(v) for rank, r in boot.ranks.items() if (v := _kv_figures(r))}
    if any(abs(v - fitted.value) <= AUTOFIT_ROUNDING for v in stated.values()):
        return []
    if stated and fitted.value > min(stated.values()):
        return []  # a rank's own figure is less: it binds
    if world == 1 or (world is None and not stated and (untagged(boot) or no_worker_named(boot))):
        if not stated:
            _named_by_engine(boot, 0).facts[FactKind.KV_AVAILABLE].append(fitted)
        return []  # one rank: the figure is its own, or its own figure stands
    without = [rank for rank in range(world) if rank not in stated] if world is not None else []
    if stated and len(without) == 1:
        _named_by_engine(boot, without[0]).facts[FactKind.KV_AVAILABLE].append(fitted)
        return [f"rank {without[0]}'s KV figure is the one vLLM's auto-fit names (its limiting worker's, no rank "
                f"named): {fmt_gib(fitted.value)}; the log states none of its own for it"]
    if stated:
        return [f"vLLM's auto-fit sized max_model_len against {fmt_gib(fitted.value)} of KV memory, its limiting "
                f"worker's, less than any rank's figure in the log: a rank whose KV line is not in it binds, and "
                f"the KV capacity shown is not the boot's"]
    return [f"vLLM's auto-fit sized max_model_len against {fmt_gib(fitted.value)} of KV memory, its limiting "
            f"worker's; the log names no rank for it"]


def give_check_figures_to_rank_0(boot: Boot) -> None:
    """The KV check runs in the engine core and names no rank; with one rank, its "available KV
    cache memory" is rank 0's (when rank 0 printed none of its own). Where no worker is named the
    size may be unknown, and the figure is still read as rank 0's: vLLM checks the workers in rank
    order and stops at the first that is short, and the workers of one boot hold alike."""
    check = boot.engine.get(FactKind.KV_AVAILABLE_AT_CHECK)
    if not check:
        return
    rank = _named_by_engine(boot, 0)
    if not rank.has(*KV_KINDS):
        rank.facts[FactKind.KV_AVAILABLE].extend(check)
