"""One boot's logs as a `BootRecord`: the ranks with their stated owners, the config, the
failure, and what the logs state outright (the KV size line, vLLM's own check); the engine
(model runner, attention backend), the environment and the notes the assembly passes on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kvaudit.config import AuditConfig
from kvaudit.engines.failures import ENGINE_CORE_FAILED
from kvaudit.engines.logs import extensible
from kvaudit.engines.logs.facts import RANK_KINDS, FactKind
from kvaudit.engines.logs.failure_timeline import CAPTURE_BAR, log_failure, timeline_phase
from kvaudit.engines.logs.lines import LEVELS, RECORD_TIME, Role, proc_tag
from kvaudit.engines.logs.logged_config import build_config
from kvaudit.engines.logs.owners import stated_rank
from kvaudit.engines.logs.parse import V0_WORKER, FileScan
from kvaudit.engines.logs.ranks import (
    KV_KINDS,
    Boot,
    RankFacts,
    command_conflicts,
    command_disagreements,
    engine_config,
    engine_first,
    engine_last,
    gather,
    give_autofit_figure,
    give_check_figures_to_rank_0,
    no_worker_named,
    untagged,
)
from kvaudit.record import BootRecord, Stated
from kvaudit.schema import PHASE_ORDER, Engine, Environment, Failure, FailureKind, Phase, RankReport, Source
from kvaudit.units import GiB, MiB, fmt_gib


def _v1_process(name: str) -> bool:
    """A process name only V1 gives: its engine core (`EngineCore_DP0`), its workers (`Worker_TP1`, `Worker`)."""
    return name.startswith(("EngineCore", "Worker_")) or name == "Worker"


def _runner(boot: Boot) -> str | None:
    explicit = boot.engine.get(FactKind.MODEL_RUNNER)
    if explicit:
        return explicit[-1].value
    if not boot.engine.get(FactKind.ENGINE_CONFIG) and not any(
            _v1_process(name) for s in boot.scans for name in s.tags.values()):
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


def _generation(boot: Boot) -> str | None:
    """V0 or V1: the engine line's words (`Initializing a V1 LLM engine`; V0's `an LLM engine`, `a V0 LLM engine`),
    0.8–0.10's `backend on V1 engine`, else the processes' names (V0's VllmWorkerProcess, V1's EngineCore and
    Worker_*) or a model runner named (V1 and V2 are V1's). Real pastes round twenty-one: "works on V0, fails on V1"
    pairs whose diff said nothing differed."""
    stated = boot.engine.get(FactKind.GENERATION)
    if stated:
        return stated[-1].value
    names = {name for s in boot.scans for name in s.tags.values()}
    if any(name.startswith(V0_WORKER) for name in names):
        return "V0"
    if any(_v1_process(name) or name.startswith("VllmWorker rank=") for name in names) or any(
            f.value for f in boot.engine.get(FactKind.MODEL_RUNNER, [])):
        return "V1"  # (0.8's multiproc workers: `VllmWorker rank=6`)
    if any((f.src or "").endswith("gpu_model_runner.py") for r in boot.ranks.values()
           for f in r.facts.get(FactKind.WEIGHTS, ())):
        return "V1"  # V1's runner loads the weights (V0's model_runner.py and worker.py)
    if any(ENGINE_CORE_FAILED in f.value.message for f in boot.engine.get(FactKind.FAILURE, ())) or any(
            _V1_FRAME.search(s.text) for s in boot.scans):
        return "V1"  # real pastes round twenty-four (vllm#17431): an unprefixed V1 traceback
    if any(_V0_FRAME.search(s.text) for s in boot.scans):
        return "V0"  # real pastes round thirty-three: MQLLMEngine's and V0's multiprocessing executor's frames
    if any(_v1_record(s.text) for s in boot.scans):
        return "V1"  # real pastes round thirty-five: a V1 process's record, or one logged from V1's package
    return None


_V1_FRAME = re.compile(r'File "[^"\n]{0,300}[/\\]vllm[/\\]v1[/\\]')
"""A traceback frame in V1's code (`File "…/site-packages/vllm/v1/engine/core.py", line 387`): V1 ran."""
_TAGGED_RECORD = re.compile(r"\(([A-Za-z][\w.\-]{0,60}) pid=\d{1,10}\)[ \t]+(?:" + LEVELS + r")\s+" + RECORD_TIME)
_V1_LOGGER = re.compile(r"(?:" + LEVELS + r")\s+" + RECORD_TIME + r"(?:[.,]\d{1,9})?\s+\[v1/")


def _v1_record(text: str) -> bool:
    """A record of a process only V1 runs (_v1_process: its engine core `(EngineCore_0 pid=…)`, `(EngineCore_DP0
    pid=…)`; its workers `(Worker_TP1 pid=…)`) with its record head after the tag, or a record logged from V1's
    package (`[v1/engine/utils.py:1143]`, a logger's path as DEBUG logging prints it): real pastes round thirty-five,
    V1 pastes cut before any figure. A name in prose (`Engine core proc EngineCore_DP0 died`) has no head after it."""
    return _V1_LOGGER.search(text) is not None or any(_v1_process(m.group(1)) for m in _TAGGED_RECORD.finditer(text))


_V0_FRAME = re.compile(r'File "[^"\n]{0,300}[/\\]vllm[/\\](?:engine[/\\]multiprocessing[/\\][^"\n]{0,100}'
                       r'|executor[/\\]mp_distributed_executor\.py)", line \d{1,7}(?!\d|, in <module>)')
"""A traceback frame in code only V0 runs: its multiprocessing front end (MQLLMEngine, `vllm/engine/multiprocessing/`)
or its multiprocessing executor (`vllm/executor/mp_distributed_executor.py`; V1's is `vllm/v1/executor/`), not at
module level: 0.8–0.10's API server imports the front end's package under V1 too (a frame `in <module>`). Others of
`vllm/engine/` and `vllm/worker/` ran under V1 too (0.8's LLMEngine dispatch, its WorkerWrapperBase)."""


def _env(boot: Boot) -> dict[str, str]:
    """vLLM's variables the log sets, less those the pasted commands disagree on (_env_disagreements)."""
    env = {name: value for name, value in (f.value for f in boot.engine.get(FactKind.ENV, []))}
    return {name: value for name, value in env.items() if name not in _commands_disagree(boot)}


def _commands_disagree(boot: Boot) -> dict[str, list[str | None]]:
    """The VLLM_* variables two or more pasted command lines set differently (one of them not at all), each with
    its values in the order the lines come: which command the log is of is not known, so none is taken (real
    pastes round twenty-four b, vllm#17431: a "success case" `VLLM_USE_V1=0 python -m vllm…` and an "error case"
    without it above a V1 engine's traceback, read as `VLLM_USE_V1=0`), as for a flag (ranks.command_conflicts)."""
    commands = [dict(f.value) for f in boot.engine.get(FactKind.COMMAND_ENV, [])]
    if len(commands) < 2:
        return {}
    names = dict.fromkeys(n for c in commands for n in c if n.startswith("VLLM_"))
    values = {n: list(dict.fromkeys(c.get(n) for c in commands)) for n in names}
    return {n: v for n, v in values.items() if len(v) > 1}


def _env_disagreements(boot: Boot) -> list[str]:
    return [f"the pasted commands set {name} differently ({', '.join('unset' if v is None else v for v in values)}): "
            f"which command this log is of is not known, so it is not taken from them"
            for name, values in _commands_disagree(boot).items()]


def _kv_tokens(boot: Boot) -> int | None:
    """The least of the KV size lines: one per engine from 0.9 (the least engine binds), and
    before that one per worker from the one engine process, printed before vLLM gave every worker
    the fewest blocks (0.8 kv_cache_utils.unify_kv_cache_configs; vllm#16570, TP 4: 25,520,
    25,408, 25,408 and 25,920 tokens, so 25,408 serve)."""
    tokens = [f.value[1] for f in boot.engine.get(FactKind.KV_TOKENS, [])]
    return min(tokens) if tokens else None


DEFAULT_BLOCK_SIZE = 16
"""vLLM's block size when none is given (CacheConfig.block_size on CUDA, V0 and V1; some attention
backends pick their own, e.g. FlashMLA 64)."""


@dataclass(frozen=True)
class _DerivedTokens:
    tokens: int
    stated_block_size: bool
    note: str


def _tokens_from_blocks(boot: Boot, block_size: int | None) -> _DerivedTokens | None:
    """KV tokens from the block count when the log states no token count: blocks × block size
    (vLLM's own V0 check, `raise_if_cache_size_invalid`, compares that product with max_model_len)."""
    per_rank = [b for r in boot.ranks.values() if (b := r.last(FactKind.KV_BLOCKS)) is not None]
    total = engine_last(boot.engine, FactKind.KV_BLOCKS_TOTAL)
    if per_rank:
        blocks, what = min(per_rank), "blocks"
    elif total is not None:
        blocks, what = total, "blocks (vLLM's num_gpu_blocks, summed over data-parallel engines)"
    else:
        return None
    implied = None if block_size else _implied_block_size(boot, blocks)
    platform = engine_last(boot.engine, FactKind.PLATFORM_BLOCK_SIZE)
    size = block_size or implied or platform or DEFAULT_BLOCK_SIZE
    basis = ("the block size in the log" if block_size
             else "the block size the log's maximum concurrency implies: concurrency × max_model_len ÷ blocks"
             if implied else "the platform's default block size (its block count names the device); the log "
             "states none" if platform else "vLLM's default block size; the log states none")
    return _DerivedTokens(blocks * size, bool(block_size or implied),
                          f"tokens derived from the block count, as the log states no token count: {blocks:,} {what} × "
                          f"{size} tokens a block ({basis})")


BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""The block sizes vLLM's attention backends use (CacheConfig.block_size's choices, FlashMLA's 64)."""


def _implied_block_size(boot: Boot, blocks: int) -> int | None:
    """The block size V0's `Maximum concurrency for N tokens per request: X.XXx` implies, where it
    prints it beside the block count (executor_base.py: X = blocks × block size ÷ N; dynamo#1202:
    6,893 blocks and 26.93x at 16,384 is 64, not the default 16). X is printed to 0.01, so a size is
    taken only where exactly one of BLOCK_SIZES lies within that rounding."""
    concurrency = engine_last(boot.engine, FactKind.MAX_CONCURRENCY)
    if concurrency is None or not concurrency[0] or blocks <= 0:
        return None
    length, times = concurrency
    slack = 0.005 * length / blocks + 1e-9
    near = [b for b in BLOCK_SIZES if abs(b - times * length / blocks) <= slack]
    if not near and abs(length - times * length / blocks) <= slack:
        # one block a request, as long as max_model_len (IBM Spyre: `# cpu blocks: 512` and 512.00x at
        # 1152 tokens; real pastes round eighteen)
        return length
    return near[0] if len(near) == 1 else None


def graph_bytes_per_size(ranks: dict[int, RankFacts]) -> int | None:
    """Bytes one capture size costs: one graph per mode (V1 DEBUG per-mode lines); the least rank."""
    per_rank = []
    for r in ranks.values():
        modes = {mode: size for mode, size in r.all(FactKind.GRAPH_PER_SIZE)}
        if modes:
            per_rank.append(sum(modes.values()))
    return min(per_rank) if per_rank else None


@dataclass(frozen=True)
class LogBoot:
    """The logs of one boot, as a `kvaudit.assemble.BootSource`."""

    scans: tuple[FileScan, ...]

    def record(self) -> BootRecord:
        boot = gather(self.scans)
        config, sizes = build_config(boot)
        world = sizes.world()
        failure, feasible, notes, died_serving, in_call, failed_pid = log_failure(boot, world)
        notes += engines_side_by_side(boot, failed_pid, notes)
        finished = in_call or any(s.startup_finished for s in self.scans)
        if world == 1 or untagged(boot) or no_worker_named(boot):
            give_check_figures_to_rank_0(boot)
        if untagged(boot):
            _smallest_kv_last(boot)
        fixed_notes = _fixed_by_arguments(boot, config)
        notes += fixed_notes
        notes += give_autofit_figure(boot, world)
        runner = _runner(boot)
        # the graph estimate profiled, not charged: the variable at 0, or before 0.19 its default
        # ("In v0.19, CUDA graph memory profiling will be enabled by default …", FactKind.ADVISORY_DISABLED)
        disabled = _env(boot).get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS") == "0" or any(
            r.has(FactKind.ADVISORY_DISABLED) for r in boot.ranks.values()) or bool(
            boot.engine.get(FactKind.ADVISORY_DISABLED))
        rank_notes: list[str] = []
        version = engine_first(boot.engine, FactKind.VERSION) or engine_first(boot.engine, FactKind.IMAGE_VERSION)
        after_warmup = extensible.sized_after_warmup(boot.ranks, version, disabled, config.gpu_memory_utilization)
        per_block = extensible.bytes_per_block(boot.ranks)
        # no CUDA graphs, so no graph estimate, on any rank of the engine: enforce_eager sets cudagraph_mode NONE
        graphs_off = config.enforce_eager is True or engine_config(boot.engine).get("cudagraph_mode") == "NONE"
        totals = [f.value for r in boot.ranks.values() for f in r.facts.get(FactKind.DEVICE_TOTAL, ())]
        ranks = tuple(stated_rank(rank, boot.ranks[rank], gmu=config.gpu_memory_utilization, runner=runner,
                                  estimates_disabled=disabled, failure=failure, notes=rank_notes,
                                  tp_size=config.tensor_parallel_size,
                                  dcp_size=config.decode_context_parallel_size, after_warmup=after_warmup,
                                  kv_bytes_per_block=per_block.get(rank), graphs_off=graphs_off,
                                  largest_device=max(totals, default=None))
                      for rank in sorted(boot.ranks))
        backends = boot.engine.get(FactKind.ATTENTION_BACKEND, [])
        first_backend = min(backends, key=lambda f: (f.file, f.pos)).value if backends else None
        warnings = list(dict.fromkeys([n for s in self.scans for n in s.notes]
                                      + [f.value for f in boot.engine.get(FactKind.NOTE, [])] + list(sizes.notes)
                                      + rank_notes + notes))
        tokens = _kv_tokens(boot)
        warnings += _others_at_oom(failure, tuple(r.report for r in ranks))
        if any(name == V0_WORKER for s in boot.scans for name in s.tags.values()):
            warnings.append(f"V0 worker processes ({V0_WORKER}) name no rank: ranks 1, 2, … are given in the order "
                            f"of their pids, rank 0 is the driver (untagged lines)")
        if boot.ranks and untagged(boot):
            # (a line that names a process without a figure on it, or torch's `[rank1]:` prefix, says more)
            if not any(s.names for s in boot.scans) and set(boot.ranks) == {0}:
                warnings.append("the log names no process (no `(Worker_TP0 pid=…)` prefixes): its figures are taken "
                                "as one rank, rank 0")
            warnings += _folded_ranks(boot)
        warnings += (_ray_notes(boot) + command_conflicts(boot.engine) + _env_disagreements(boot)
                     + command_disagreements(boot.engine, config))
        derived = _tokens_from_blocks(boot, config.block_size) if tokens is None else None
        fits = _passed_kv_check(boot, failure, config, finished)
        kv_sized = (tokens, derived) != (None, None) or fits or any(  # a KV size stated, even with no tokens
            f.value > 0 for r in boot.ranks.values() for kind in (FactKind.KV_AVAILABLE, FactKind.KV_FIXED)
            for f in r.facts.get(kind, ()))
        if failure is None and not finished:
            cut = _capture_cut(boot) if kv_sized else None
            warnings.append(unfinished_in_capture(cut) if cut else (
                (UNFINISHED_PAST_CAPTURE if _captured_after_kv(boot) else UNFINISHED) if kv_sized
                else unfinished_before_kv(self.scans)))
        if derived is not None and fits is None and failure is None and config.max_model_len is not None:
            # a shorter product is only a finding when the block size is known
            fits = True if derived.tokens >= config.max_model_len else (False if derived.stated_block_size else None)
        return BootRecord(
            source=Source.LOG, config=config, ranks=ranks,
            engine=Engine(name="vllm", version=version, model_runner=runner, attention_backend=first_backend,
                          kv_cache_sizing=extensible.kv_sizing(boot.ranks, version, disabled, after_warmup,
                                                               fixed=bool(fixed_notes)),
                          generation=_generation(boot)),
            environment=Environment(vllm=version, env=_env(boot),
                                    platform=engine_first(boot.engine, FactKind.PLATFORM)),
            failure=failure, died_serving=died_serving, warnings=tuple(warnings),
            stated=Stated(kv_tokens=tokens if derived is None else derived.tokens, max_feasible_model_len=feasible,
                          max_model_len_fits=fits, kv_needed_bytes=_kv_needed(boot, failure),
                          kv_tokens_note=derived.note if derived is not None else None),
            graph_bytes_per_size=graph_bytes_per_size(boot.ranks))


_MEMORY_FIGURES = RANK_KINDS - {FactKind.LOAD_SECONDS, FactKind.PROFILE_SECONDS, FactKind.COMPILE}


def engines_side_by_side(boot: Boot, failed_pid: int | None, notes: Sequence[str]) -> list[str]:
    """A note where one file holds engine cores of one name (`EngineCore_DP0`) under several pids whose lines
    interleave: one boot has one engine core of a name, so these are vLLMs of their own running at once (an RL
    trainer's rollout engines, one per GPU, as docker compose services are: parse._one_compose_service), read
    here as one boot; which one failed, and whose lines the figures come from. Real pastes round twenty-three: a
    verl rollout log, four single-GPU engines (pids 39535, 39539, 39544, 39549), one of which died, read as one
    rank 0 with no word of the others. Engines that fail each are failure_timeline._two_runs' note already."""
    by_file = {s.index: s for s in boot.scans}
    spans: dict[tuple[int, str], dict[int, list[int]]] = {}
    located = [f for fs in boot.engine.values() for f in fs] + [
        f for r in boot.ranks.values() for fs in r.facts.values() for f in fs]
    for f in located:
        name = by_file[f.file].tags.get(f.pid) if f.pid is not None else None
        if name is None or proc_tag(name).role is not Role.ENGINE:
            continue
        span = spans.setdefault((f.file, name), {}).setdefault(f.pid, [f.pos, f.pos])
        span[0], span[1] = min(span[0], f.pos), max(span[1], f.pos)
    out = []
    for (file, name), pids in spans.items():
        ordered = sorted(pids.items(), key=lambda item: item[1][0])
        ends = [end for _, (_, end) in ordered]
        if len(pids) < 2 or not any(start < max(ends[:k]) for k, (_, (start, _)) in enumerate(ordered) if k) \
                or any(f" engine cores named {name} each fail " in n for n in notes):
            continue
        figures = dict.fromkeys(f"pid={f.pid}" for f in sorted(
            (f for r in boot.ranks.values() for fs in r.facts.values() for f in fs if f.file == file
             and f.pid in pids and f.kind in _MEMORY_FIGURES), key=lambda f: f.pos))
        out.append(f"{len(pids)} engine cores named {name} print side by side "
                   f"({', '.join(f'pid={pid}' for pid, _ in ordered)}): each a vLLM of its own (one boot has one "
                   f"{name}), as an RL trainer's rollout engines are"
                   + (f"; pid={failed_pid} failed" if failed_pid in pids else "")
                   + (f"; the report reads them as one boot, its figures from {', '.join(figures)}" if figures
                      else "; the report reads them as one boot")
                   + ": pass one engine's lines to read it alone")
    return out


UNFINISHED_HEAD = ("the log ends before startup finished (no `init engine (profile, create kv cache, warmup model) "
                   "took` or server line)")
UNFINISHED = (f"{UNFINISHED_HEAD}: the warmup and graph capture (on a TPU, the precompilation) that follow KV "
              f"sizing are not in it, and a boot can still fail there")
"""A log cut after its KV lines (gpustack#1897: the KV fit, then the boot ran out of memory past
the paste's end): its verdict says what the KV lines say, and this says what they cannot."""
UNFINISHED_BEFORE_KV = f"{UNFINISHED_HEAD}: it is read as far as it goes, and what startup did after it is not known"
"""A log that ends, no failure in it, with no KV size read (a paste of a boot's start, or of lines
from its middle; the README's promise: an excerpt that ends early is read as far as it goes, with a
warning)."""
UNFINISHED_PAST_CAPTURE = (f"{UNFINISHED_HEAD}: it shows the CUDA graph capture after KV sizing finished, not the "
                           f"rest of startup")
"""The same, where the capture after the KV lines is in the log (vllm PR 57047: `Graph capturing
finished in 6 secs, took 0.22 GiB`, then the paste ends)."""
_SHARDS = re.compile(r"Loading (?:safetensors|pt) checkpoint shards: +\d{1,3}% Completed \| (\d{1,6})/(\d{1,6})")


def unfinished_before_kv(scans: Sequence[FileScan]) -> str:
    """UNFINISHED_BEFORE_KV, with the furthest phase the log's milestones reach and, in the load, the last shard
    count (real pastes round twenty-one: a pod killed at `6/62` shards, a stall after `Model loading took`, read as
    "not enough facts" with no word of where they stopped)."""
    reached = [(PHASE_ORDER.index(p), p, s) for s in scans if (p := timeline_phase(s.text, len(s.text))) is not None]
    if not reached:
        return UNFINISHED_BEFORE_KV
    _, phase, scan = max(reached, key=lambda r: r[0])
    where = f"the furthest phase its lines reach: {phase.value}"
    if phase is Phase.LOAD and (shards := list(_SHARDS.finditer(scan.text[-(1 << 16):]))):
        done, total = shards[-1].group(1), shards[-1].group(2)
        if done != total:
            where += f", at {done}/{total} checkpoint shards"
    return f"{UNFINISHED_BEFORE_KV} ({where})"


_OTHER_PROCESS = re.compile(r"\bProcess (\d{1,9}) has (\d{1,7}(?:\.\d{1,3})?) (GiB|MiB) memory in use")
"""torch's out-of-memory message lists every other process on the device (CUDACachingAllocator.cpp:
`Process 3179876 has 1.62 GiB memory in use.`); its own is `this process has …`, where the driver's pid is the
caller's (in a container's PID namespace it is not, and the boot is listed too: _the_boot_listed)."""


_OWN_CLAUSE = "this process has"
_BY_PYTORCH = re.compile(r"Of the allocated memory (\d{1,7}(?:\.\d{1,3})?) (GiB|MiB) is allocated by PyTorch"
                         r"(?:, with \d{1,7}(?:\.\d{1,3})? (?:GiB|MiB) allocated in private pools"
                         r" \(e\.g\., CUDA Graphs\))?"
                         r"(?:, and (\d{1,7}(?:\.\d{1,3})?) (GiB|MiB) is reserved by PyTorch but unallocated)?")


def _the_boot_listed(message: str, held: dict[int, int]) -> tuple[int, int, int] | None:
    """(pid, PyTorch's reserved bytes, how many listed processes hold that much) of the listed process that is
    the boot itself, where torch's message has no `this process has` clause (torch prints that clause only where an
    NVML process's pid is the caller's getpid(); in a container with its own PID namespace the driver's host pids
    never are): of the listed processes holding at least what PyTorch reserved in the caller (allocated, plus
    "reserved by PyTorch but unallocated" where the message says it), the one holding least: the caller holds that
    and its CUDA context, and nothing else holds the caller's allocations.
    Real pastes round twenty-three: verl's engine, pid 39535 in its container, listed as `Process 113443 has
    78.33 GiB` beside 74.24 GiB allocated by PyTorch, was counted as another process. Round thirty-four
    (VLMEvalKit): `Process 250179 has 19.19 GiB … Process 259318 has 4.36 GiB` beside 3.82 GiB allocated and
    102.20 MiB reserved: the caller is 259318 (3.92 GiB through PyTorch), not the largest."""
    if _OWN_CLAUSE in message or (m := _BY_PYTORCH.search(message)) is None:
        return None
    allocated = round(float(m.group(1)) * (GiB if m.group(2) == "GiB" else MiB))
    unallocated = round(float(m.group(3)) * (GiB if m.group(4) == "GiB" else MiB)) if m.group(3) else 0
    holding = [(used, pid) for pid, used in held.items() if used >= allocated + unallocated]
    return (min(holding)[1], allocated + unallocated, len(holding)) if holding else None


def _others_at_oom(failure: Failure | None, ranks: tuple[RankReport, ...]) -> list[str]:
    """What other processes held on the device when torch ran out of memory, and whether the boot's request and
    theirs together passed the device (real pastes round twenty-one, vllm#8731: three processes of 1.62 GiB each
    on GPU 0 beside a 35.60 GiB request on a 39.56 GiB device; the report said nothing of them)."""
    if failure is None or failure.kind is not FailureKind.OOM:
        return []
    held = {int(m.group(1)): round(float(m.group(2)) * (GiB if m.group(3) == "GiB" else MiB))
            for m in _OTHER_PROCESS.finditer(failure.message)}
    if not held:
        return []
    listed = _the_boot_listed(failure.message, held)
    itself = ""
    if listed is not None:
        pid, reserved, holding = listed
        itself = (f" (Process {pid}, {fmt_gib(held.pop(pid))}, is the boot itself: the message has no `this process "
                  f"has`, as in a container's PID namespace, and it holds "
                  + (f"least of the {holding} that hold " if holding > 1 else "")
                  + f"the {fmt_gib(reserved)} PyTorch reserved)")
        if not held:
            return [f"torch's out-of-memory message names no other process on the device{itself}"]
    others = sum(held.values())
    note = (f"torch's out-of-memory message names {len(held)} other process{'es' if len(held) > 1 else ''} on the "
            f"device holding {fmt_gib(others)}{itself}")
    rank = next((r for r in ranks if r.rank == (failure.rank or 0)), None)
    if rank is not None and rank.device_total_bytes and rank.requested_bytes:
        over = rank.requested_bytes + others - rank.device_total_bytes
        if over > 0:
            note += (f": with the boot's request ({fmt_gib(rank.requested_bytes)}) they pass the device "
                     f"({fmt_gib(rank.device_total_bytes)}) by {fmt_gib(over)}; lower gpu_memory_utilization or "
                     f"move them")
    return [note]


def unfinished_in_capture(cut: str) -> str:
    return (f"{UNFINISHED_HEAD}: it ends during the CUDA graph capture after KV sizing, its last bar at {cut} with "
            f"no `Graph capturing finished`: the boot was still capturing, or hung there, and can still fail there")


def _kv_sized_at(boot: Boot, *rank_kinds: FactKind) -> dict[int, int]:
    """Each file's first line that sizes the KV cache: the engine's KV tokens or auto-fit, or a rank's fact of
    `rank_kinds`."""
    sized = [(f.file, f.pos) for kind in (FactKind.KV_TOKENS, FactKind.AUTOFIT) for f in boot.engine.get(kind, [])]
    sized += [(f.file, f.pos) for r in boot.ranks.values() for kind in rank_kinds for f in r.facts.get(kind, [])]
    first: dict[int, int] = {}
    for file, pos in sized:
        first[file] = min(pos, first.get(file, pos))
    return first


def _capture_cut(boot: Boot) -> str | None:
    """Where a file's last capture bar after its KV size stopped short of its count with nothing after it saying
    the capture finished (`6/35 graphs, mixed prefill-decode, PIECEWISE`), or None. Real pastes round twenty-one:
    a boot whose paste ends at 6/35 while a wrapper still polls for the server, read as ok with a warning that
    the capture was not in the log."""
    first = _kv_sized_at(boot, FactKind.KV_BLOCKS, FactKind.KV_AVAILABLE)
    for scan in boot.scans:
        start = first.get(scan.index)
        at = scan.text.rfind("Capturing CUDA graph") if start is not None else -1
        if at < 0 or at < start or scan.text.find("Graph capturing finished", at) >= 0:
            continue
        m = CAPTURE_BAR.match(scan.text, at, at + 240)
        if m and int(m.group(2)) < int(m.group(3)):
            return f"{m.group(2)}/{m.group(3)} graphs" + (f" ({m.group(1)})" if m.group(1) else "")
    return None


def _captured_after_kv(boot: Boot) -> bool:
    """Whether a file shows the graph capture finished (facts.GRAPH_CAPTURE, or GRAPH_USAGE: the
    worker's `Free memory on device … for CUDAGraph memory` summary, printed after its capture) after
    its KV size, block count or auto-fit (Model Runner V2 prints the capture line for its graph
    estimate before KV sizing too). Real pastes round fourteen: four ranks' summaries, then the end."""
    first = _kv_sized_at(boot, FactKind.KV_BLOCKS)
    return any(f.file in first and f.pos > first[f.file] for r in boot.ranks.values()
               for kind in (FactKind.GRAPH_CAPTURE, FactKind.GRAPH_USAGE) for f in r.facts.get(kind, [])) or any(
        _bars_finished(scan.text, first[scan.index]) for scan in boot.scans if scan.index in first)


_PROFILED_MODES = re.compile(r"Profiling CUDA graph memory: ((?:[A-Z_]{1,20}=\d{1,6}[^,\r\n]{0,40},? ?){1,4})")


def _bars_finished(text: str, start: int) -> bool:
    """Whether the capture bars after offset `start` (the KV size) all reached their count: the last bar of each mode
    drawn (`Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35`), every mode the graph profile named
    (`Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)`) among them. Real pastes round
    twenty-seven (vllm PR 29335): both bars at n/n and the paste's end, said to end before the capture."""
    last: dict[str, tuple[int, int]] = {}
    for m in CAPTURE_BAR.finditer(text, start):
        mode = (m.group(1) or "").rsplit(",", 1)[-1].strip()
        last[mode] = (int(m.group(2)), int(m.group(3)))
    if not last or any(done < count for done, count in last.values()):
        return False
    profiled = _PROFILED_MODES.search(text, 0, start)
    named = ({part.split("=", 1)[0].strip() for part in profiled.group(1).split(",") if "=" in part}
             if profiled else set())
    return named <= set(last)


KV_LINE_WORDS = "Available KV cache memory"
KV_LINE_SEARCH = 600
"""How far into a figure's line its words are looked for (a record's prefix and head come first)."""


def _fixed_by_arguments(boot: Boot, config: AuditConfig) -> list[str]:
    """`kv_cache_memory_bytes` in the arguments vLLM printed fixes every rank's KV cache at that size, and vLLM
    skips its memory profile: said where no rank's line states the cache (vllm#49878: `'kv_cache_memory_bytes':
    52613349376` and no KV line, its sizing read as vLLM's profile). A figure is not given to a rank from the
    arguments: the log does not show the boot got that far."""
    fixed = config.extra_args.get("kv_cache_memory_bytes")
    if not isinstance(fixed, int) or isinstance(fixed, bool) or fixed <= 0 or any(
            r.has(*KV_KINDS) for r in boot.ranks.values()):
        return []
    return [f"kv_cache_memory_bytes {fixed} in the arguments fixes each rank's KV cache at {fmt_gib(fixed)}: vLLM "
            f"skips its memory profile, and gpu_memory_utilization does not size the cache"]


def _smallest_kv_last(boot: Boot) -> None:
    """A log that names no process and states `Available KV cache memory` several times, differently, holds
    several ranks' lines (_folded_ranks): the smallest is the one the cache is sized by (vLLM unifies every
    worker's block count to the least), so it is the one read (real pastes round twenty: Dynamo's re-emitted
    lines, 16.83 GiB ×7 and 17.30 GiB once; the last had been read, right only where it was the least)."""
    for r in boot.ranks.values():
        figures = r.facts.get(FactKind.KV_AVAILABLE)
        if figures and len({f.value for f in figures}) > 1:
            figures.sort(key=lambda f: -f.value)  # stable: r.last() is the least, r.first() the largest


def _folded_ranks(boot: Boot) -> list[str]:
    """Where a log that names no process states one rank's KV figure more than once, each different: the
    lines of several ranks (each worker prints its own), read as one; the report keeps the least (real
    pastes round nineteen: `Available KV cache memory: 0.24 GiB`, then `-1.42 GiB`, a TP2 paste)."""
    texts = {scan.index: scan.text for scan in boot.scans}
    figures = [f.value for r in boot.ranks.values() for f in r.facts.get(FactKind.KV_AVAILABLE, ())
               if texts[f.file].find(KV_LINE_WORDS, f.pos, f.pos + KV_LINE_SEARCH) >= 0]
    if len(set(figures)) < 2:
        return []
    shown = ", ".join(fmt_gib(f) for f in dict.fromkeys(figures))
    return [f"`Available KV cache memory` is stated {len(figures)} times with different figures ({shown}) in a log "
            f"that names no process: likely several ranks' lines, read as one rank (its least figure, the one vLLM "
            f"sizes every rank's cache by)"]


def _ray_notes(boot: Boot) -> list[str]:
    """What Ray's prefixes leave unsaid: which rank an actor is, and the lines it folded."""
    notes = []
    ray = sorted({rank for s in boot.scans for pid, rank in s.ray_ranks.items() if pid not in s.ray_stated})
    if ray:
        numbers = f"{', '.join(map(str, ray[:8]))}{' …' if len(ray) > 8 else ''}"
        notes.append(f"Ray workers `(RayWorkerWrapper pid=…, ip=…)` name no rank: their figures are given to "
                     f"{'ranks' if len(ray) > 1 else 'rank'} {numbers} in the order the workers first print one, "
                     f"which need not be vLLM's rank order")
    folded = boot.engine.get(FactKind.RAY_FOLDED, [])
    if folded:
        most = max(f.value for f in folded)
        # one count per folded memory line: two lines folded 8x each are 16 workers' lines, not 8
        figures = {(g.file, g.pos) for r in boot.ranks.values() for gs in r.facts.values() for g in gs
                   if g.kind in RANK_KINDS}
        with_figures = [f.value for f in folded if (f.file, f.pos) in figures]
        shown = ", ".join(f"{n}x" for n in with_figures[:8]) + (f" … ({len(with_figures)} lines)"
                                                                if len(with_figures) > 8 else "")
        # Ray's log deduplication counts repeats of a line's shape from any process of the cluster, the
        # printing one too (real pastes round eighteen: 11x in a world of 2, 1100x from one actor)
        notes.append(f"Ray folded lines (`[repeated {most}x across cluster]`): each such line stands for that many "
                     f"more lines of its shape, from other workers or the same one again; Ray folds lines that "
                     f"differ only in their numbers, so the folded lines' figures are not in the log and no rank is "
                     f"given them"
                     + (f" (memory lines folded: {shown})" if with_figures else ""))
    return notes


def _kv_needed(boot: Boot, failure: Failure | None) -> int | None:
    """What one request at max_model_len needs, as vLLM's failed KV check states it."""
    if failure is None or failure.kind is not FailureKind.DOES_NOT_FIT:
        return None
    return engine_first(boot.engine, FactKind.KV_NEEDED)


_AFTER_KV_CHECK = (Phase.KV, Phase.CAPTURE)
"""Where a failure other than the check's own may come after the check passed: its KV size line then
still says the length fits (real pastes round seventeen: a kernel's JIT build failing in the warmup
after `GPU KV cache size: 1,629,520 tokens` does not undo the fit)."""


def _passed_kv_check(boot: Boot, failure: Failure | None, config: AuditConfig, finished: bool) -> bool | None:
    """vLLM prints the KV size line only after every rank passed `_check_enough_kv_cache_memory`
    at the final max_model_len, so a boot that printed it and did not fail fits; a boot whose
    check said how much one request needs failed it. A boot that finished starting passed the check
    too (V1's, or V0's raise_if_cache_size_invalid), whatever of its lines a paste kept."""
    if failure is not None and failure.kind is FailureKind.DOES_NOT_FIT and _kv_needed(boot, failure) is not None:
        return False
    if config.max_model_len is None:
        # a finished start passed the check at the length it served, which the excerpt does not state (real pastes
        # round twenty-four: a paste from `non-default args` to the API server's routes read as "not enough facts")
        return True if failure is None and finished else None
    if failure is not None and (failure.kind is FailureKind.DOES_NOT_FIT or failure.phase not in _AFTER_KV_CHECK
                                or (failure.kind is FailureKind.OOM and failure.phase is Phase.KV)):
        # the check's own failure, one before it, one whose place is not known, or an OOM allocating the
        # cache itself (the length would "fit" a cache that never existed)
        return None
    if boot.engine.get(FactKind.KV_TOKENS) or boot.engine.get(FactKind.AUTOFIT):
        return True  # auto-fit chose the length that every worker's KV holds (and the check then passed)
    # V0 0.6.4 printed the concurrency without a KV size line: at least one request fits when it is ≥ 1.
    concurrency = engine_last(boot.engine, FactKind.MAX_CONCURRENCY)
    if concurrency is not None and concurrency[1] >= 1:
        return True
    # a finished start that printed no KV line (vllm#15664, V0 0.8.3: the capture, `init engine … took`, the
    # API server; real pastes round twenty): vLLM refuses a length its cache cannot hold before that
    return True if failure is None and finished else None
