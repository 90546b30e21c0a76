"""The boot's failure in its logs: the root cause among the failure facts (failures.decide_failure,
the one rule of every engine: the catalogue's priority, then the earliest, as for a run's own
log), the phase it struck in, the
rank that printed it, and failures after startup finished, which are notes, not the boot's. So is
a failure that a line vLLM's logger printed after it shows startup went on past (_got_past: a
person's words quoting an error, an earlier run's, a traceback vLLM went on from), and one before
the API server's stats line (scan.STATS: it struck while serving); a `#` comment or Markdown
heading is never vLLM's.

The phase: the one the message fixes (the KV check is always kv), else the furthest the log shows
the boot got before the failure: the milestones printed before it, the startup call a failing
method or a traceback frame names (`Error executing method 'initialize_cache'`, `in
capture_model`; torch's `in capture_end`, where nothing places the failure before the KV cache).
A boot moves through the phases in order, and Ray prints workers' lines late and
out of order, so the furthest phase shown is where it died; None when the log shows none.
"""

from __future__ import annotations

import bisect
import re
from typing import NamedTuple

from kvaudit.engines.failures import (
    BARE,
    ENGINE_CORE_FAILED,
    EXCEPTION_NAME,
    GENERIC,
    LOG_MESSAGE_CHARS,
    NCCL_WATCHDOG,
    TRACEBACK,
    Candidate,
    Evidence,
    decide_failure,
)
from kvaudit.engines.logs.facts import (
    FRAME,
    KERNEL_WARMUPS,
    KV_BLOCK_WORDS,
    KV_SETUP_CALL,
    LOADED_WEIGHTS,
    MRV2_WARMUP,
    SAMPLER_WARMUP,
    STARTUP_FRAME_TEXT,
    FactKind,
    FailureFact,
    frame_call,
)
from kvaudit.engines.logs.lines import (
    RECORD_TIME_RX,
    TAG_SEARCH_CHARS,
    Role,
    parse_line,
    person_heading,
    proc_tag,
    record_seconds,
)
from kvaudit.engines.logs.parse import ENV_REPORT, RAY_IP, FileScan
from kvaudit.engines.logs.ranks import Boot, Located, boot_layout, engine_first, parallel_sizes, rank_of_proc, untagged
from kvaudit.engines.logs.scan import (
    BOOT_DONE,
    FRAME_WINDOW,
    LOGGED_HEAD_CHARS,
    MAX_NEEDLE_LINES,
    SERVER_START,
    SERVER_UP,
    SERVING,
    STATS,
    STEP_DUMPS,
    first_logged,
    last_logged,
    logged,
)
from kvaudit.engines.logs.unwrap import bounds, next_span
from kvaudit.schema import PHASE_ORDER, Failure, FailureKind, Phase
from kvaudit.units import fmt_gib

_AFTER_KV_CAPTURE = ("Capturing cudagraphs for decoding", "Capturing the model for CUDA graphs",
                     "Capturing CUDA graph shapes")
"""V0's model_runner.py capture_model (0.5–0.10, and its older wording) and the progress bar of
V0's and V1's capture up to 0.10 (`Capturing CUDA graph shapes: 0%| 0/67`; Model Runner V2's
graph estimate before KV sizing says `Capturing CUDA graphs`): run only after the KV cache was
sized, so the capture whatever the excerpt shows before it (vllm-gfx906#22: ROCm, its blocks line
cut out of the paste, a kernel's shape check failing in the capture; vllm PR 21747)."""


LMCACHE_KV_REGISTERED = "LMCache INFO: GPU KV Cache Dimensions"
"""LMCache's gpu_connector line as its logger prints it, a rank's KV tensors registered with the connector."""


# First lines that show the boot entered a phase, for failures whose message does not say where.
_MILESTONES: tuple[tuple[Phase, tuple[str, ...]], ...] = (
    (Phase.LOAD, ("Starting to load model", "Loading model from scratch", "Initializing model took",
                  "Loading weights took", "Loading safetensors checkpoint shards",
                  # weight_utils.py's format line and V0 loader.py's start (real pastes round nineteen:
                  # `Loading weights onto GPU. This may take a few minutes...`, then `Killed`)
                  "Using model weights format", "Loading weights onto GPU",
                  "Loading drafter model")),  # gpu_model_runner.py load_model loads the drafter last
    # V1 compiles the model in its first forward, the profile pass (vllm#18390: `torch.compile takes
    # 142.00 s in total`, then the engine core's traceback, its load lines not in the paste)
    # …and a multimodal model's profile starts with its encoder cache (gpu_model_runner.py profile_run: `Encoder
    # cache will be initialized with a budget of …`; vllm-ascend#12095, a death right after it)
    # …and so do torch.compile's graphs of the first forward (compilation/backends.py: `Cache the graph of compile
    # range (1, 64) for later use`, `Compiling a graph for dynamic shape takes …`, `Directly load the compiled
    # graph(s) …`; real pastes round twenty-two: a DeepSeek-V4 worker dying right after them had no phase)
    # (V0's model_runner.py and vllm-ascend's model_runner_v1.py say `Loading model weights took 45.6571 GB` where
    # V1 says `Model loading took`: real pastes round twenty-two, vllm-ascend#5629, a Dynamo failure of the first
    # forward had no phase; vllm#9630, a V0 boot's profile run cut before its exception line, none either)
    (Phase.PROFILE, (*LOADED_WEIGHTS, "torch.compile takes",
                     "Dynamo bytecode transform time", "Encoder cache will be initialized", "Cache the graph of",
                     "Compiling a graph for", "Directly load the compiled graph")),
    (Phase.GRAPHS, ("Profiling CUDA graph memory", "Estimated CUDA graph memory")),  # V1 (gone in 0.34)
    # (LMCache's `GPU KV Cache Dimensions: [158][4372, 64, 132]` is printed from its register_kv_caches, which vLLM
    # calls once the KV tensors exist: real pastes round twenty-two, LMCache#3339, a worker's exception right after
    # it had no phase)
    (Phase.KV, ("Available KV cache memory", "KV cache size: ", "Auto set (", "Explicitly set (",
                "as specified by kv_cache_memory_bytes", "reserved for KV Cache is", "available_kv_cache_memory",
                *(f"#{words}" for words in KV_BLOCK_WORDS), LMCACHE_KV_REGISTERED)),
    (Phase.CAPTURE, _AFTER_KV_CAPTURE),
)
_KV_MARKS = dict(_MILESTONES)[Phase.KV]
_CAPTURE_MARKS = ("Capturing CUDA graphs", "Capturing cudagraphs", "Graph capturing finished",
                  "JIT kernel warmup starting", "Compile and warming up", "Warming up FlashInfer", "DeepGEMM warmup")
"""After the KV cache is sized (and counted only then: "… disabling torch.compile, CUDAGraphs, and
JIT kernel warmup" is printed at config time); V0's own capture lines are _AFTER_KV_CAPTURE's."""


_PROFILING_CAPTURE = ("Capturing CUDA graphs", "Graph capturing finished")
"""Model Runner V2's graph estimate is a capture (0.29 on; its only sign in 0.34, where V1's
estimate lines are gone): one of these after the profile and before KV is sizing's graphs phase."""


CAPTURE_BAR = re.compile(r"Capturing CUDA graphs? ?(?:shapes)?(?: \(([^)\r\n]{1,60})\))?:[^|\r\n]{0,40}\|"
                         r"[^|\r\n]{0,80}\| *(\d{1,6})/(\d{1,6})")
"""vLLM's capture bar (gpu_model_runner.py _capture_cudagraphs, drawn by the first rank only): `Capturing CUDA
graphs (mixed prefill-decode, PIECEWISE):  17%|█▋ | 6/35`, the mode, the graphs done and their count; up to 0.10
`Capturing CUDA graph shapes: … 34/67`.

Model Runner V2's bar for FULL graphs tells the real capture: its graph estimate before KV sizing captures a few
of them (cudagraph_utils._FULL_GRAPH_PROFILING_SAMPLES, before the bar is drawn: 2 in 0.34, 3 in later code), so
a bar over more is the real capture after KV (real pastes round seventeen: `(FULL):  57%|█████▋ | 20/35`, then
torch's allocator OOM, with nothing else of the boot in the paste). vLLM's debug switch
VLLM_DEBUG_GRAPH_MEMORY_ACCOUNTING=1 captures every graph in the estimate too: there the rule misplaces a death
in the estimate."""
PROFILING_FULL_SAMPLES = 3
"""The most FULL graphs the estimate's capture draws a bar over, in any release read so far."""


def _real_full_capture(text: str, pos: int) -> bool:
    return any(m.group(1) == "FULL" and int(m.group(3)) > PROFILING_FULL_SAMPLES
               for m in CAPTURE_BAR.finditer(text, 0, pos))


GRAPH_ADDRESSES = "cuda graph addresses"
"""custom_all_reduce.py capture()'s `Registering 11960 cuda graph addresses`, as a capture ends (vllm#18446: a TP8
boot's custom all-reduce failing right after it, read as a death in the profile)."""
_GRAPH_PROFILE = "Profiling CUDA graph memory"


def timeline_phase(text: str, pos: int) -> Phase | None:
    """The furthest phase a milestone printed before `pos` shows (None: no milestone)."""
    if _real_full_capture(text, pos):
        return Phase.CAPTURE
    if (at := text.rfind(GRAPH_ADDRESSES, 0, pos)) >= 0 and not (
            # from 0.21 the graph memory profile before KV sizing captures too: the milestones then decide
            text.rfind(_GRAPH_PROFILE, 0, at) >= 0 and not any(text.find(m, 0, at) >= 0 for m in _KV_MARKS)):
        return Phase.CAPTURE
    for name, marks in reversed(_MILESTONES):
        if any(text.find(m, 0, pos) >= 0 for m in marks):
            if name is Phase.KV and any(text.find(m, 0, pos) >= 0 for m in _CAPTURE_MARKS):
                return Phase.CAPTURE
            if name is Phase.PROFILE and any(text.find(m, 0, pos) >= 0 for m in _PROFILING_CAPTURE):
                return Phase.GRAPHS
            return name
    return None


def _furthest(*phases: Phase | None) -> Phase | None:
    known = [p for p in phases if p is not None]
    return max(known, key=PHASE_ORDER.index) if known else None


def _two_runs(by_file: dict[int, FileScan], during: list[Located], root: Located) -> list[str]:
    """A note where engine cores of one name but other pids each fail in one file: one boot has one engine core per
    name (`EngineCore_DP0`), so these are runs of their own pasted together (real pastes round twenty-two,
    vllm#33297: two CI runs two days apart, pid 972 and pid 738, each failing the free-memory check; the report
    read the first with no word of the second). The report reads the root cause's run; the note names the others.
    A V0 boot's workers share one name (`VllmWorkerProcess`) and are not engine cores."""
    pids: dict[str, dict[int, None]] = {}
    for f in during:
        tag = by_file[f.file].tags.get(f.pid) if f.pid is not None and f.file == root.file else None
        if f.pid is not None and tag is not None and proc_tag(tag).role is Role.ENGINE:
            pids.setdefault(tag, {}).setdefault(f.pid)
    name = by_file[root.file].tags.get(root.pid) if root.pid is not None else None
    if name is None or len(pids.get(name, ())) < 2:
        return []
    others = ", ".join(f"pid={pid}" for pid in pids[name] if pid != root.pid)
    return [f"{len(pids[name])} engine cores named {name} each fail (pid={root.pid}, {others}): runs of their own "
            f"pasted together (one boot has one {name}); the report reads pid={root.pid}'s failure, the others' are "
            f"not in it"]


class LogFailure(NamedTuple):
    failure: Failure | None
    """The boot's failure, root cause first."""
    feasible: int | None
    """The max feasible length its message states."""
    notes: list[str]
    """Failures after startup, before it but survived, in another program's process, …"""
    died_serving: Failure | None = None
    """An out-of-memory error after startup finished (capacity.kv_not_served: the KV figure left too little
    for serving)."""
    served: bool = False
    """A failure struck in a call only a started engine runs (_Marks.in_served_call): startup had finished,
    whatever lines a paste kept."""
    pid: int | None = None
    """The process that printed the failure's root cause."""


def log_failure(boot: Boot, world_size: int | None) -> LogFailure:
    """The boot's failure (root cause first), its max feasible length, post-boot notes, an OOM while serving."""
    facts = boot.engine.get(FactKind.FAILURE, [])
    by_file = {s.index: s for s in boot.scans}
    boot_done: dict[int, int] = {}
    served: dict[int, int] = {}
    during, after, survived, env_report = [], [], [], []
    in_call = False
    marks: dict[int, _Marks] = {}
    one_engine = not any(tag.role is Role.ENGINE and tag.dp for s in boot.scans
                         for tag in map(proc_tag, s.tags.values()))
    for f in facts:
        scan = by_file[f.file]
        if f.file not in boot_done:
            boot_done[f.file] = scan.serving_at
            served[f.file] = last_logged(scan.text, STATS)
            boot_done[f.file] = _server_up_at(scan.text, boot_done[f.file])
        line = scan.text[slice(*bounds(scan.text, f.pos))]
        if person_heading(line) and not logged(line):
            continue  # a `#` comment or a Markdown heading: a person's words (BuildKit's `#12 3.6 INFO …` is vLLM's)
        if _raised_by_env_report(scan.text, f.pos):
            env_report.append(f)
            continue
        if f.file not in marks:
            marks[f.file] = _Marks(scan.text)
        if f.pos >= boot_done[f.file] or f.pos < served[f.file] or _dumped_after(marks[f.file], f, one_engine):
            after.append(f)
        elif marks[f.file].in_served_call(f.pos):
            after.append(f)
            in_call = True
        elif _got_past(marks[f.file], f, one_engine):
            survived.append(f)
        else:
            during.append(f)
    # another program's process in the same stream (an RL trainer's driver: verl's `(TaskRunner pid=N)`
    # raising while loading its checkpoint, then vLLM's own `Engine core proc … died unexpectedly`; real
    # pastes round eighteen): its exception is not vLLM's failure where vLLM's own lines show one
    foreign_pids = {index: _foreign_pids(scan) for index, scan in by_file.items()} if during else {}
    foreign = [f for f in during if f.pid is not None and f.pid in foreign_pids[f.file]]
    if foreign and len(foreign) < len(during):
        during = [f for f in during if f not in foreign]
        notes_foreign = sorted({f"in another program's process ({by_file[f.file].tags[f.pid]} pid={f.pid}, which "
                                f"printed no vLLM record), not vLLM's failure: {f.value.message}" for f in foreign})
    else:
        notes_foreign = []
    notes_foreign += sorted({f"{ENV_REPORT}'s own error (the environment listing vLLM's bug template asks for), not "
                             f"the boot's: {f.value.message}" for f in env_report if f.value.priority < BARE})
    # torch's allocator warning (failures.Cause.needs_death) is a cause only beside lines that say no
    # more than that the boot died (an "initialization failed", a bare traceback): an exception that
    # names its own cause (the KV check, torch's OOM error, a crash) is the boot's, the warning a note
    warned = [f for f in during + after + survived if f.value.needs_death]
    during, after, survived = ([f for f in group if not f.value.needs_death] for group in (during, after, survived))
    died = [f for f in during if f.value.priority >= GENERIC and not f.value.launcher]
    if warned and during and len(died) == len(during):
        # per file, the last warning before its last death: the one the allocator did not recover from
        death = {d.file: max(e.pos for e in died if e.file == d.file) for d in died}
        before = [f for f in warned if f.file in death and f.pos < death[f.file]]
        during += [max((f for f in before if f.file == file), key=lambda f: f.pos)
                   for file in sorted({f.file for f in before})]
    # a traceback's header says "its exception line is not in the log": not where that file has one
    stated = {f.file for f in after if f.value.priority < BARE}
    notes = sorted({f"after startup finished: {_after_message(by_file[f.file].text, f)}" for f in after
                    if f.value.priority < BARE or f.file not in stated}
                   | {f"before startup finished, which it then did (not this boot's failure): {f.value.message}"
                      for f in survived if f.value.priority < GENERIC}) + notes_foreign
    if warned and not any(f.value.needs_death for f in during):
        first = min(warned, key=lambda f: (f.file, f.pos)).value.message.rstrip(".")
        times = f", {len(warned)} times in all" if len(warned) > 1 else ""
        notes.append(f"torch's allocator warned of out-of-memory ({first}{times}): no failure of the boot's, as "
                     f"the allocator frees its cache and retries after this warning, and no death in the log is "
                     f"left for it to explain")
    oom = next((f.value for f in after if f.value.kind is FailureKind.OOM), None)
    died_serving = Failure(phase=None, rank=oom.rank, kind=oom.kind, message=oom.message) if oom else None
    if not during:
        return LogFailure(None, None, notes, died_serving, in_call)
    # a frame in the engine core's KV setup says least of all: any other failure line says more (a deeper frame's
    # call, an exception), however early it comes
    setup = STARTUP_FRAME_TEXT.format(KV_SETUP_CALL)
    during = [f for f in during if f.value.message != setup] or during
    # a raise's echoed source line after the exception lines of its priority (FailureFact.echo), and a person's
    # sentence that names the error after them too (_prose)
    chosen = decide_failure(Candidate(Evidence.LOG_LINE, f, f.value.priority,
                                      (_prose(by_file[f.file].text, f), f.value.echo, f.file, f.pos))
                            for f in during)
    assert chosen is not None  # `during` is not empty
    root = chosen.item
    notes += _two_runs(by_file, during, root)
    if root.value.kind is FailureKind.WORKER_DIED:
        # a worker's death is how a hung collective ends (the NCCL watchdog's SIGABRT), and its line
        # comes first (real pastes round fifteen, vllm#6042: `… pid 1159 died, exit code: -6`, then
        # `Watchdog caught collective operation timeout … ran for 600059 milliseconds`)
        root = next((f for f in during if NCCL_WATCHDOG in f.value.message), root)
    no_kv_memory = _no_kv_memory(boot, root)
    value: FailureFact = no_kv_memory or _kv_check_cut(by_file[root.file], root) or root.value
    scan = by_file[root.file]
    hints = [f for f in boot.engine.get(FactKind.PHASE_HINT, []) if f.file == root.file
             and f.pos <= boot_done[root.file]]
    # The furthest phase shown anywhere before the boot finished: a traceback's frames and Ray's
    # late worker lines may come after the line that reports the failure. Where the failing process's
    # own frames name its calls, they say where it was, however far the others got (real pastes round
    # nineteen: a DP=2 boot's second engine's worker died in init_device while the first one's loaded).
    # Only a worker's: an engine core's frames span phases (its executor's calls), and a paste that
    # cut their inner ones would move the failure back.
    kv_at = _kv_sized_at(boot, root.file)
    warmups = [f for f in boot.engine.get(FactKind.WARMUP_FRAME, []) if f.file == root.file
               and f.pos <= boot_done[root.file]]
    hints += _sampler_hints(warmups, kv_at, scan.text)
    worker = root.pid is not None and root.pid in scan.tags and proc_tag(scan.tags[root.pid]).role is Role.WORKER
    own = [h.value for h in hints if worker and h.pid == root.pid]
    phase = value.phase or (_furthest(*own) if own else
                            _furthest(timeline_phase(scan.text, boot_done[root.file]), *(h.value for h in hints)))
    # A frame in torch's graph capture (capture_end): the capture, where the log shows the boot no
    # earlier than the KV cache (the profiling capture before sizing names profile_cudagraph_memory).
    if value.phase is None and phase in (None, Phase.KV) and any(
            f.file == root.file and f.pos <= boot_done[root.file]
            for f in boot.engine.get(FactKind.GRAPH_CAPTURE_FRAME, [])):
        phase = Phase.CAPTURE
    rank, tag = rank_of_proc(scan, root.pid, parallel_sizes(boot.scans, boot.engine))
    engines = boot_layout(boot.scans, boot.engine).for_ranks("dp") if tag.dp is None else 1  # known, or at least
    if engines > 1 and tag.provisional and root.pid not in scan.ray_stated:
        rank = None  # a worker not yet named (`Worker pid=…`) of one of several data-parallel engines
    elif root.pid is not None and root.pid in scan.ray_stated:
        rank = scan.ray_ranks[root.pid]  # the worker's own parallel_state line stated it
    elif root.pid is not None and root.pid in scan.ray_ranks:
        rank = None  # the order kvaudit numbered Ray's workers in is not vLLM's rank
    elif tag.ray or value.launcher:
        rank = None  # a launcher stops every process of the boot (failures.Cause.launcher)
    elif value.kind is FailureKind.WORKER_DIED and tag.role is not Role.WORKER and not tag.dp \
            and (died := _DIED_WORKER.search(value.message)) is not None:
        rank = int(died.group(1))  # the monitor names the worker that died by its rank (vllm PR 38895)
    elif value.kind is FailureKind.WORKER_DIED and (died := _DIED_V0_WORKER.search(value.message)) is not None:
        rank = scan.v0_ranks.get(int(died.group(1)))  # V0's monitor: a non-driver worker, by its pid
    elif root.pid is None and value.rank is not None:
        rank = value.rank  # torch.distributed's `[rank3]:` prefix on the frames
    elif rank is None and (world_size == 1 or (untagged(boot) and not _workers_record(boot, root))) and engines == 1:
        rank = 0  # one rank, unless several data-parallel engines each have theirs (which, the name does not say)
    feasible = None
    if value.kind is FailureKind.DOES_NOT_FIT:
        lens = [f.value for f in boot.engine.get(FactKind.MAX_FEASIBLE_LEN, []) if f.pos <= boot_done[f.file]]
        feasible = min(lens) if lens else (0 if no_kv_memory else None)  # not one token fits
        notes = [*notes, *_checks_disagree(boot, lens)]
    head = scan.text[root.pos:root.pos + 300]
    if (ip := RAY_IP.search(head)) is not None and head.rfind("pid=", max(0, ip.start() - 24), ip.start()) >= 0:
        # Ray's prefix names the failing worker's node (real pastes round twenty-one: no report said which node)
        notes = [*notes, f"the failure was printed by a Ray worker on the node at {ip.group(1)}"]
    cut = value.priority == GENERIC and not value.launcher and cut_before_exception(scan.text, root.pos)
    if cut:
        before = _other_programs_error(scan.text, root.pos)
        notes = [*notes, f"the traceback after `{value.message[:120]}` ends before its exception line: what "
                         f"failed is not in the log (the lines after it say)"
                 + (f"; the line before it is another program's error: `{before}`" if before else "")]
    step = _warmup_step(boot, root, rank, warmups, kv_at) if phase is Phase.CAPTURE else None
    if cut and value.phase is None and not hints and phase not in (None, Phase.CAPTURE):
        # Only the log's milestones place it, and the traceback that would name the failing call is cut (real
        # pastes round twenty-four b, vllm#17431: `torch.compile takes …`, then frames cut inside
        # EngineCore.__init__, whose start goes on to size the KV cache and capture; the cause was the KV check)
        step = _or_later(phase)
    if phase is None and not value.launcher and any(f.file == root.file and f.pos <= boot_done[root.file]
                                                    for f in boot.engine.get(FactKind.PHASE_FLOOR, [])):
        # a frame in the engine core's KV setup, which starts with the profile (facts.KV_SETUP_CALL), and nothing
        # that places the failure further
        phase, step = Phase.PROFILE, _or_later(Phase.PROFILE)
    return LogFailure(Failure(phase=phase, rank=rank, kind=value.kind, message=value.message, step=step), feasible,
                      notes, died_serving, in_call, root.pid)


def _checks_disagree(boot: Boot, lens: list[int]) -> list[str]:
    """A note where vLLM's KV check failed more than once with different figures: runs or ranks the log does not
    tell apart (real pastes round twenty-seven, a CI log's two `FAILED test…[param] - ValueError: To serve at least
    one request …` lines, 3.6 GiB / 33,664 tokens and 3.74 GiB / 34,944). The length offered is the shortest any
    of them states, which fits every one of them (each line's own pair: its available memory and its estimate);
    the first line's alone would over-commit a run with less memory than it."""
    available = sorted({f.value for f in boot.engine.get(FactKind.KV_AVAILABLE_AT_CHECK, [])})
    if len(set(lens)) < 2 and len(available) < 2:
        return []
    said = [f"{', '.join(fmt_gib(v) for v in available)} available" if len(available) > 1 else "",
            f"longest feasible {', '.join(f'{n:,}' for n in sorted(set(lens)))} tokens" if len(set(lens)) > 1 else ""]
    return [f"vLLM's KV check failed with different figures ({'; '.join(w for w in said if w)}): runs or ranks the "
            f"log does not tell apart; the smallest is read, which fits each"]


_KV_SIZED = (FactKind.KV_AVAILABLE, FactKind.KV_BLOCKS, FactKind.KV_FIXED, FactKind.KV_IN_USE)
"""A rank's lines that vLLM prints once its profile is over and the KV cache is being sized."""


_CAPTURE_DONE = (FactKind.GRAPH_CAPTURE, FactKind.GRAPH_ACTUAL)
"""A rank's lines once its graph capture finished (`Graph capturing finished in 22 secs, took 0.64 GiB`, the pool's
actual size): the capture comes after KV sizing (compile_or_warm_up_model; 0.34's extensible cache sizes after
it, and its sampler warmup still follows the capture), so they show the boot past sizing where a paste cut the KV
lines (real pastes round twenty-seven: the capture line, then a traceback in `_dummy_sampler_run`, read with no
phase)."""


def _kv_sized_at(boot: Boot, file: int) -> int | None:
    """Where a file first shows the KV cache sized (a rank's KV figure or block count, the engine's KV tokens or
    auto-fit) or a rank past it (_CAPTURE_DONE), or None."""
    found = [f.pos for kind in (FactKind.KV_TOKENS, FactKind.AUTOFIT) for f in boot.engine.get(kind, [])
             if f.file == file]
    found += [f.pos for r in boot.ranks.values() for kind in (*_KV_SIZED, *_CAPTURE_DONE)
              for f in r.facts.get(kind, []) if f.file == file]
    return min(found, default=None)


def _sampler_hints(warmups: list[Located], kv_at: int | None, text: str) -> list[Located]:
    """The phase each frame in the sampler run (facts.SAMPLER_WARMUP) names: the capture's (the warmup after the
    capture, in compile_or_warm_up_model) where a KV line comes before it, else the profile's (profile_run runs
    it before sizing) where the log shows the boot before it; none where the log starts in the traceback (vllm#17939:
    which run it was, nothing says). Real pastes round twenty-three: `GPU KV cache size: 75,152 tokens`, then
    `EngineCore failed to start.` and one frame in `_dummy_sampler_run`, read as a death in kv."""
    hints, shown = [], None
    for f in warmups:
        if f.value != SAMPLER_WARMUP:
            continue
        if kv_at is not None and kv_at < f.pos:
            phase = Phase.CAPTURE
        else:
            if shown is None:  # the earliest such frame: a milestone before it is before the later ones
                shown = timeline_phase(text, f.pos) is not None
            if not shown:
                continue
            phase = Phase.PROFILE
        hints.append(Located(FactKind.PHASE_HINT, phase, f.file, f.pos, f.pid, f.src))
    return hints


def _warmup_step(boot: Boot, root: Located, rank: int | None, warmups: list[Located],
                 kv_at: int | None) -> str | None:
    """Where in the capture phase a death after KV sizing struck, in words for Failure.step, from the failing
    process's frames (every process's where it printed none): the sampler warmup, a kernel warm-up (before the
    capture, as compile_or_warm_up_model runs them), or, where the failing rank's `Graph capturing finished` came
    before the failure, after the capture. None where nothing says more than the capture phase (a frame in
    capture_model, a death under the capture bar). Round twenty-two F3 and twenty-three F5: "boot failed in
    capture" for a sampler OOM after a finished capture, and for FlashInfer's autotune before any capture,
    while shrinking the capture sizes helps neither."""
    after = [f for f in warmups if kv_at is None or f.pos > kv_at]
    own = [f for f in after if root.pid is not None and f.pid == root.pid]
    names = dict.fromkeys(f.value for f in (own or after))
    captured = kv_at is not None and any(
        f.file == root.file and kv_at <= f.pos < root.pos and (f.pid == root.pid if rank not in boot.ranks else True)
        for r in ((boot.ranks[rank],) if rank in boot.ranks else boot.ranks.values())
        for kind in _CAPTURED for f in r.facts.get(kind, []))
    where = "after the graph capture finished" if captured else "after KV sizing"
    if SAMPLER_WARMUP in names:
        return f"{where}, in the sampler warmup (`{SAMPLER_WARMUP}`)"
    if MRV2_WARMUP in names:
        return f"{where}, in Model Runner V2's kernel warmup (`{MRV2_WARMUP}`)"
    # kernel_warmup, then the first of the warm-ups under it its frames name (FlashInfer's autotune, DeepGEMM's)
    kernels = [n for n in KERNEL_WARMUPS if n == "kernel_warmup" and n in names] + [
        n for n in names if n in KERNEL_WARMUPS and n != "kernel_warmup"][:1]
    if kernels:
        return f"{where}, in {' / '.join(f'`{n}`' for n in kernels)}" + (
            "" if captured else ", before the graph capture")
    return where if captured else None


_CAPTURED = (FactKind.GRAPH_CAPTURE, FactKind.GRAPH_ACTUAL, FactKind.GRAPH_USAGE)
"""A rank's lines once its graph capture finished: `Graph capturing finished in 5 secs, took 3.49 GiB`, `CUDA graph
pool memory: … (actual)`, the worker's `… for CUDAGraph memory` summary (after the KV lines: Model Runner V2's
estimate before sizing captures too)."""


def _raised_by_env_report(text: str, pos: int) -> bool:
    """Whether the failure line at `pos` is ENV_REPORT's own: an exception whose innermost frame (within the three
    lines above it) is that script's, or a traceback header whose outermost frame (the line below it) is. Real
    pastes round twenty-three (vllm#15457): the template's listing held collect_env.py's `ImportError: cannot import
    name '__version__' from 'vllm'`, read as the boot's crash on rank 0. Where the script's call reached into vLLM
    and vLLM raised, the exception's innermost frame is vLLM's, and the rule is silent about it."""
    start, end = bounds(text, pos)
    above = text[max(0, start - 1200):start]
    frame = above.rfind('File "')
    if frame >= 0 and above.count("\n", frame) <= 3:
        return _script(above, frame) == ENV_REPORT
    below = text[end:end + 600]
    frame = below.find('File "')
    return frame >= 0 and below.count("\n", 0, frame) <= 1 and _script(below, frame) == ENV_REPORT


def _script(text: str, frame: int) -> str:
    """The file name of the frame line `File "…"` at `frame`."""
    path = text[frame + 6:text.find('"', frame + 6)]
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def _foreign_pids(scan: FileScan) -> frozenset[int]:
    """Processes named by no vLLM role (lines.proc_tag: Role.OTHER, the name not vLLM's own) that printed
    no vLLM record, where others did: another program sharing the stream."""
    logged_pids = {p.line.pid for p in scan.lines if p.line.level is not None and p.line.pid is not None}
    return frozenset(pid for pid, name in scan.tags.items()
                     if logged_pids - {pid} and pid not in logged_pids and name
                     and "vllm" not in name.lower() and proc_tag(name).role is Role.OTHER)


_API_SERVER = ("(APIServer pid=", "[APIServer pid=", "api_server.py:", *SERVER_START)
"""Signs of `vllm serve`'s API server process, whose own start follows the engine's."""


def _server_up_at(text: str, serving_at: int) -> int:
    """Where startup finished for the failures: `serving_at` (scan.serving_from), except where that
    is the engine's BOOT_DONE in a log of `vllm serve` (an _API_SERVER sign before it): the server
    still builds its app after the engine starts (tokenizer, chat template, tool parsers), and a
    failure there is the boot's, so startup finishes at the first other SERVING line after it, else
    past the end (real pastes round fourteen: gpt-oss-120b on 0.15.1, `openai_harmony.HarmonyError` after
    the engine's init line, no `Application startup complete`, the workers told to exit)."""
    if not text.startswith(BOOT_DONE, serving_at) or not any(0 <= text.find(m, 0, serving_at) for m in _API_SERVER):
        return serving_at
    done = _seconds(text[bounds(text, serving_at)[0]:serving_at])
    if done is None:
        return serving_at  # no clock to tell the server's start from serving: as before
    found = [i for m in SERVING if m != BOOT_DONE and (i := text.find(m, serving_at)) >= 0]
    up = min(found) if found else len(text) + 1
    # a record stamped more than SERVER_START_S after the engine's line: the server was up by then
    for m in RECORD_TIME_RX.finditer(text, serving_at, up):
        if (t := _seconds(m.group(0))) is not None and t - done > SERVER_START_S:
            return bounds(text, m.start())[0]
    return up


_EXCEPTION_NAMED = re.compile(r"[A-Za-z_][\w.]{0,200}(?:Error|Exception): ")
"""An exception's name and its message on a line (`torch.OutOfMemoryError: …`, `ValueError: No available …`)."""


def _prose(text: str, f: Located) -> bool:
    """Whether a failure's line is a person's words that name the error (a page's title `Fixing the vLLM Error:
    'No available memory for the cache blocks'`, a paragraph quoting 「CUDA out of memory」) rather than the error
    as a program printed it: no vLLM record and no exception's name on it (real pastes round twenty: such a line
    above the exception it names had been the failure's message)."""
    start, end = bounds(text, f.pos)
    line = text[start:min(end, start + 4096)]
    return not logged(line) and _EXCEPTION_NAMED.search(line) is None


SERVER_START_S = 60
"""How long after the engine's init line the API server may take to build its app (seconds; the
round-fourteen crash came 5 s after it). A failure later than that, with no line saying the server
came up (`--uvicorn-log-level warning`, an excerpt), struck while it served (review: a request's
template error 75 min after a good start)."""


def _seconds(text: str) -> int | None:
    """The first vLLM record time in `text`, in seconds (lines.record_seconds)."""
    m = RECORD_TIME_RX.search(text)
    return None if m is None else record_seconds(m.group(0))


_EXCEPTION_LINE = re.compile(r"(?!Exception ignored in\b)(?:[A-Za-z_][\w.]{0,200}: |" + EXCEPTION_NAME + r":?\s*$)")
"""A traceback's last line, its exception: a dotted name and `: ` (`RuntimeError: …`,
`triton.runtime.errors.OutOfResources: …`, `torch._dynamo.exc.Unsupported: …`), or an exception's
name alone (`AssertionError`, `KeyboardInterrupt`), or with the colon of an empty message whose blank the paste
trimmed (`SystemExit:`, a worker's `raise SystemExit()` under vLLM's signal handler: round twenty-four b). Not
`Exception ignored in: …`, which heads a traceback, and not a sentence: its first word is followed by a space."""
_SAME_KIND = ("RayWorkerWrapper",)
"""Process names whose lines Ray may print under another worker of the same name (its dedup): an
exception line of any of them ends the traceback."""


def cut_before_exception(text: str, at: int) -> bool:
    """Whether the first traceback within FRAME_WINDOW after offset `at` (the report of a failure
    printed elsewhere: `EngineCore failed to start.`) shows frames and then the text ends with no
    exception line of that process: the paste cut the cause off (real pastes round twelve: four
    excerpts that end in the frames). A text that goes on past the window says nothing either way."""
    header = text.find(TRACEBACK, at, at + FRAME_WINDOW)
    if header < 0 or len(text) > header + FRAME_WINDOW:
        return False
    frames, exception = traceback_end(text, header)
    return frames and exception is None


def traceback_end(text: str, header: int) -> tuple[bool, str | None]:
    """(whether frames follow, the exception line) of the traceback whose header is at offset
    `header`, read from the lines of the header's process up to FRAME_WINDOW on."""
    first, last = bounds(text, header)
    head = parse_line(text[first:last], first)
    frames, stop, end = False, header + FRAME_WINDOW, last
    # each line however long: another process's args dump may stand between a traceback's lines
    while (span := next_span(text, end, limit=None)) is not None and span[0] < stop:
        start, end = span
        line = parse_line(text[start:min(end, start + TAG_SEARCH_CHARS + LOG_MESSAGE_CHARS)], start)
        same = line.pid == head.pid or (line.tag is not None and line.tag == head.tag and line.tag in _SAME_KIND)
        if not same or not line.msg or line.msg.startswith(TRACEBACK):
            continue
        if line.msg.startswith('File "'):
            frames = True
        elif _EXCEPTION_LINE.match(line.msg):
            return frames, line.msg[:LOG_MESSAGE_CHARS]
    return frames, None


def _after_message(text: str, f: Located) -> str:
    """A failure after startup finished, in words: a bare traceback's own exception line where the
    log holds one the catalogue does not read (V0's shutdown: `Exception ignored in: …`, then
    `KeyboardInterrupt: MQLLMEngine terminated`), not "the boot died"."""
    if f.value.priority == BARE and (line := traceback_end(text, f.pos)[1]) is not None:
        return f"a traceback ending in `{line}`"
    return f.value.message


STARTUP_FAILED = ("Engine core initialization failed", ENGINE_CORE_FAILED, "Engine process failed to start")
"""The front end's and the engine core's words for a startup that failed, whatever finished before."""


MAX_MARKS = 4096
"""Logged lines of one marker a file's _Marks keeps (a served log's `"POST /v1/` lines run to millions)."""

LLM_METHODS = ("generate", "chat", "encode", "embed", "classify", "score", "reward", "beam_search")
"""vllm/entrypoints/llm.py's `LLM` methods that run requests: an `LLM` object exists only once `LLM.__init__`
returned, that is once the engine finished starting (its KV cache, warmup and capture included)."""
_LLM_FRAME = re.compile(r'[/\\]entrypoints[/\\]llm\.py", line \d{1,7}, in (?:' + "|".join(LLM_METHODS)
                        + r"|_run_engine)\b")
"""A frame in vLLM's own `LLM.generate` (…, or `_run_engine`, which they call)."""
_HANDLER_FRAME = re.compile(r'[/\\]entrypoints[/\\][^"\n]{0,200}", line \d{1,7}, in create_(?:chat_completion'
                            r"|completion|embedding|responses|pooling|score|classify|transcription|translation)\b")
"""A frame in the OpenAI server's request handlers (entrypoints/openai/serving_*.py): a request being served."""
_LLM_OBJECT = re.compile(r"([\w.\[\]]{0,120})\Z")
_USER_CALL_NEEDLES = tuple(f".{m}(" for m in LLM_METHODS)


def served_calls(text: str) -> list[int]:
    """Where the text's traceback frames pass through a call that only a started engine runs (at most
    MAX_MARKS): vLLM's `LLM.generate` / `.chat` / `.encode` …, the user's own script calling one on an object
    named for it (`outputs = llm.generate(prompts, sampling_params)` under its frame line, the only lines a
    paste may keep: LMCache#3430), or an API request handler (`in create_chat_completion`). Real pastes round
    twenty-three: torch's OOM during `llm.generate` was read as the boot's death in the capture, the last
    startup phase before a gap in the paste."""
    found: list[int] = []
    for needle in _USER_CALL_NEEDLES:
        i = text.find(needle)
        while i >= 0 and len(found) < MAX_MARKS:
            start, end = bounds(text, i)
            obj = _LLM_OBJECT.search(text, max(start, i - 120), i)
            if obj is not None and "llm" in obj.group(1).lower() and start > 0 and \
                    _FRAME_LINE in text[bounds(text, start - 1)[0]:start]:
                found.append(start)
            i = text.find(needle, end)
    for needle, rx in (("entrypoints", _LLM_FRAME), (" in create_", _HANDLER_FRAME)):
        i = text.find(needle)
        while i >= 0 and len(found) < MAX_MARKS:
            start, end = bounds(text, i)
            if rx.search(text, start, end):
                found.append(start)
            i = text.find(needle, end)
    return sorted(found)


_FRAME_LINE = '", line '
"""What a traceback frame's line holds (`File "…", line 70, in main`)."""


def _all(text: str, needle: str) -> list[int]:
    """Where `needle` is in `text`, the first MAX_MARKS times."""
    found, i = [], text.find(needle)
    while i >= 0 and len(found) < MAX_MARKS:
        found.append(i)
        i = text.find(needle, i + len(needle))
    return found


def _between(positions: list[int], start: int, end: int) -> bool:
    """Whether a sorted list holds a position in [start, end)."""
    k = bisect.bisect_left(positions, start)
    return k < len(positions) and positions[k] < end


class _Marks:
    """Where one file's serving markers (on lines vLLM's logger printed) and startup-failure words are,
    each found once: a paste of many failure lines searched the rest of the file again for each of
    them (the second review of round eighteen: 1 MB of ERROR lines took 26 s)."""

    def __init__(self, text: str):
        self.text = text
        self._lines: dict[str, list[tuple[int, int, int | None]]] = {}
        self.last_failed = max(text.rfind(words) for words in STARTUP_FAILED)
        self._served: tuple[list[int], list[int], list[int]] | None = None

    def in_served_call(self, pos: int) -> bool:
        """Whether the failure at `pos` struck in a call that only a started engine runs (served_calls): the
        traceback it ends passes through one, or the next traceback within FRAME_WINDOW does with no startup
        failure's words between (the engine core logs the error, then the user's script prints its own
        traceback). Each file's calls, headers and failure words are found once (bisected per failure)."""
        if self._served is None:
            text = self.text
            self._served = (served_calls(text), _all(text, TRACEBACK),
                            sorted(i for words in STARTUP_FAILED for i in _all(text, words)))
        calls, headers, failed = self._served
        if not calls:
            return False
        k = bisect.bisect_right(headers, pos)
        if k and pos < headers[k - 1] + FRAME_WINDOW and _between(calls, headers[k - 1], self._end(headers, k - 1)):
            return True  # the traceback this failure is in (its header, its exception line) passes through one
        if k == len(headers) or headers[k] > pos + FRAME_WINDOW:
            return False
        j = bisect.bisect_left(calls, headers[k])
        return j < len(calls) and calls[j] < self._end(headers, k) and not _between(failed, pos, calls[j])

    @staticmethod
    def _end(headers: list[int], k: int) -> int:
        """Where the traceback whose header is headers[k] ends, at most: the next header, or FRAME_WINDOW on."""
        return min(headers[k + 1], headers[k] + FRAME_WINDOW) if k + 1 < len(headers) else headers[k] + FRAME_WINDOW

    def _logged(self, marker: str) -> list[tuple[int, int, int | None]]:
        """(where the marker is, its line's start, the line's pid) of each line vLLM's logger printed."""
        if marker not in self._lines:
            found, text = [], self.text
            i = text.find(marker)
            while i >= 0 and len(found) < MAX_MARKS:
                start, end = bounds(text, i)
                line = parse_line(text[start:min(end, start + LOGGED_HEAD_CHARS)], start)
                if line.level is not None:
                    found.append((i, start, line.pid))
                i = text.find(marker, max(end, i + 1))
            self._lines[marker] = found
        return self._lines[marker]

    def first_logged(self, marker: str, pos: int, pid: int | None = None) -> int | None:
        """scan.first_logged's answer: the first such line from `pos` on (of process `pid`, where given),
        among the next MAX_NEEDLE_LINES."""
        found = self._logged(marker)
        if len(found) == MAX_MARKS and pos > found[-1][0]:
            return first_logged(self.text, marker, pos, pid)  # past the lines kept: searched as before
        k = bisect.bisect_left(found, (pos, -1, None))
        return next((start for _, start, line_pid in found[k:k + MAX_NEEDLE_LINES]
                     if pid is None or line_pid == pid), None)


def _got_past(marks: _Marks, f: Located, one_engine: bool) -> bool:
    """The file shows, on a line vLLM's logger printed after the failure, that startup went on past
    it: the API server up (every engine started), or `init engine … took` from the process that
    printed the failure, or from the only engine; and no startup failure's words after that (a
    data-parallel engine dying while another finishes fails the boot). A marker a person quotes,
    with no record head, shows nothing."""
    ends = [marks.first_logged(marker, f.pos) for marker in SERVER_UP]
    done = marks.first_logged(BOOT_DONE, f.pos, pid=None if one_engine else f.pid)
    finished = min((p for p in (*ends, done) if p is not None), default=None)
    return finished is not None and marks.last_failed < finished


_LEVEL_WORD = re.compile(r"\b(?:ERROR|FATAL|WARN)\b")
OTHER_ERROR_CHARS = 300


def _other_programs_error(text: str, pos: int) -> str | None:
    """The line just before the record at `pos` (blank lines skipped, up to three lines back) where another program,
    no vLLM logger, printed an error: UCX's `ib_mlx5dv_md.c:1100 UCX  ERROR mlx5_7: ibv_modify_qp(…) failed to modify
    to RTR: No such device` before `EngineCore failed to start.` and a cut traceback (real pastes round twenty-two,
    aibrix#1433: the cause the issue names, not in the report). Said as what is near, not as the cause."""
    start = bounds(text, pos)[0]
    for _ in range(3):
        if start == 0:
            return None
        before = bounds(text, start - 1)[0]
        line = text[before:start].strip()
        start = before
        if not line:
            continue
        if logged(line):
            return None
        if _LEVEL_WORD.search(line, 0, LOGGED_HEAD_CHARS):
            return line[:OTHER_ERROR_CHARS]
    return None


def _dumped_after(marks: _Marks, f: Located, one_engine: bool) -> bool:
    """The engine dumped a failed model step after the failure (STEP_DUMPS, printed in the step's error path),
    with no `init engine … took` between them: it was serving then, and startup, not finished in between,
    had finished before the failure. Real pastes round twenty-two, ROCm/aiter#5192: `Worker proc VllmWorker-4
    died unexpectedly` while two requests ran, then the executor's shutdown and the dump, read as a death
    before startup finished that startup then got past."""
    pid = None if one_engine else f.pid
    dumps = [at for marker in STEP_DUMPS if (at := marks.first_logged(marker, f.pos, pid)) is not None]
    if not dumps:
        return False
    dump = min(dumps)
    done = marks.first_logged(BOOT_DONE, f.pos, pid)
    return done is None or done > dump


MULTIPROC_EXECUTOR = "multiproc_executor.py"
"""V1's multiprocess executor (vllm/v1/executor/multiproc_executor.py), whose WorkerProc logs a worker's
exception."""


def _workers_record(boot: Boot, root: Located) -> bool:
    """Whether an untagged failure's record is multiproc_executor.py's: V1's WorkerProc (`WorkerProc hit an
    exception.` and the traceback it logs), or the executor that runs them. On a GPU vLLM picks that executor by
    default only for a world of 2 ranks or more (ParallelConfig: `uni` for a world of 1), so the record names no
    rank, and an untagged log's "one process, rank 0" does not hold (real pastes round twenty-five, vllm#21661:
    `ERROR … [v1/executor/multiproc_executor.py:597] RuntimeError: NCCL error: unhandled cuda error` was "crash on
    rank 0", while the paste's one device is the NCCL lines' `[1]`). A log that states a world of 1 (the executor
    forced), or vLLM's CPU platform (which always runs it), keeps rank 0."""
    return (root.pid is None and root.src is not None and re.split(r"[/\\]", root.src)[-1] == MULTIPROC_EXECUTOR
            and str(engine_first(boot.engine, FactKind.PLATFORM)).lower() != "cpu")


_DIED_V0_WORKER = re.compile(r"\bWorker VllmWorkerProcess pid (\d{1,9}) died\b")
"""V0's WorkerMonitor (multiproc_worker_utils.py: "Worker %s pid %s died, exit code: %s"), over its workers
only: never the driver, rank 0 (real pastes round twenty-one: vllm#13389's `pid 354 died, exit code: -15` was
put on rank 0). The rank is the pid's where the log numbers it, else not known."""
_DIED_WORKER = re.compile(r"\bVllmWorker-(\d{1,6}) died\b")
"""multiproc_executor.py's monitor: "Worker proc VllmWorker-3 died unexpectedly", the process named
`VllmWorker-{rank}` (make_worker_process), the rank in its engine's world: the global rank where the
engine is the only one (no DP index)."""


KV_CHECKS = ("_check_enough_kv_cache_memory", "check_enough_kv_cache_memory", "raise_if_cache_size_invalid")
"""The KV check (kv_cache_utils.py, kv_cache_planning.py from 0.33; V0's worker.py raise_if_cache_size_invalid, which
vllm-ascend's V0 worker calls too): its raises are the ValueErrors that say the KV cache does not fit ("No available
memory for the cache blocks", "To serve at least one request with the model's max seq len …", V0's "The model's max
seq len (…) is larger than the maximum number of tokens that can be stored in KV cache"), besides V0's for an
attention-free model given blocks at all, a config no paste has shown."""
_RAISE_WINDOW = 2000
"""How far before an exception line its raising frame's header is looked for (the frame's source
lines and the records' prefixes between them)."""
_KV_CHECK_CALL = re.compile(r"(?:^|[\s\]:|])(?:[A-Za-z_]\w{0,80}\.){0,6}(" + "|".join(KV_CHECKS) + r")\(")
"""A traceback's source line that calls the KV check (`    check_enough_kv_cache_memory(vllm_config, …)`,
`    raise_if_cache_size_invalid(num_gpu_blocks,`), after the record's prefix."""


def _or_later(phase: Phase) -> str:
    """The step of a failure whose traceback is cut before the call that failed, placed no earlier than `phase`."""
    return f"in {phase.value} or later (its traceback is cut before the call that failed)"


def _kv_check_cut(scan: FileScan, root: Located) -> FailureFact | None:
    """The KV check's failure where a paste cut its words: a `ValueError` raised in the check whose words
    stop before they say which (`ValueError: To`, real pastes round nineteen: an 8× RTX 3090 TP8 boot, the
    issue's 250K context), or a traceback that shows only that the boot died and ends inside the check, its
    exception line cut (real pastes round twenty-nine: vllm#20726's frames down to `check_enough_kv_cache_memory(
    vllm_config, kv_cache_spec, available_memory)`, a Qwen2.5-7B on a 16 GB card; vllm-ascend#436's V0 worker down
    to `raise_if_cache_size_invalid(num_gpu_blocks,`): the KV cache does not fit, as each of the check's raises
    says. None otherwise."""
    value: FailureFact = root.value
    if value.kind is not FailureKind.CRASH:
        return None
    if value.message.startswith("ValueError"):
        frames = list(FRAME.finditer(scan.text, max(0, root.pos - _RAISE_WINDOW), root.pos))
        if not frames or frame_call(frames[-1]) not in KV_CHECKS:
            return None
        at, call = frames[-1].start(), frame_call(frames[-1])
        said = f"{value.message} (cut; raised in {call}, whose only errors say the KV cache does not fit)"
        if not _same_process(scan.text, at, root.pid):
            return None  # another process's frame, interleaved
    elif value.priority >= GENERIC and (last := _ends_in_kv_check(scan.text, root.pos, root.pid)) is not None:
        call = last[1]
        said = (f"the traceback ends in {call}, vLLM's KV check, whose errors say the KV cache does not fit "
                f"max_model_len or has no room at all; its exception line is not in the log: lower --max-model-len or "
                f"raise --gpu-memory-utilization")
    else:
        return None
    return FailureFact(FailureKind.DOES_NOT_FIT, Phase.KV, said, rank=value.rank, priority=0)


def _same_process(text: str, at: int, pid: int | None) -> bool:
    """Whether the line at offset `at` is the process `pid`'s (its prefix names it), where the pid is known."""
    return pid is None or f"pid={pid})" in text[text.rfind("\n", 0, at) + 1:at]


def _ends_in_kv_check(text: str, at: int, pid: int | None) -> tuple[int, str] | None:
    """Where a traceback ends inside vLLM's KV check, the offset of its last frame (or of the source line that calls
    the check) and the call: the traceback after the failure line `at` (of the same process `pid`), or where none
    follows it, the one before it (a front end's `See root cause above.` printed after the engine core's frames). Its
    last frame is in the check and the source line under it is the check's `raise`, or the source line under its
    last frame calls the check; and no exception line follows (the paste cut it). None otherwise."""
    stop = min(len(text), at + FRAME_WINDOW)
    frames = list(FRAME.finditer(text, at, stop))
    if frames:
        end = _kv_check_end(text, frames[-1], stop)
        return end if end is not None and _same_process(text, end[0], pid) else None
    frames = list(FRAME.finditer(text, max(0, at - FRAME_WINDOW), at))
    return _kv_check_end(text, frames[-1], at) if frames else None


def _kv_check_end(text: str, last: re.Match[str], stop: int) -> tuple[int, str] | None:
    """_ends_in_kv_check for the traceback whose last frame is `last`, read up to `stop`."""
    rest = text[last.end():stop].split("\n")[1:]  # the frame's source line, then whatever the paste kept
    source = rest[0] if rest else ""
    if any(_EXCEPTION_LINE.search(line) for line in rest[1:]):
        return None
    if frame_call(last) in KV_CHECKS:
        # the check's own raise, or a frame whose source line the paste cut (not a call into something else)
        return (last.start(), frame_call(last)) if _RAISE_STATEMENT.search(source) or not source.strip() else None
    if (call := _KV_CHECK_CALL.search(source)) is not None and not _EXCEPTION_LINE.search(source[:call.start(1)]):
        return text.index("\n", last.end()) + 1 + call.start(1), call.group(1)  # the source line's call
    return None


_RAISE_STATEMENT = re.compile(r"(?:^|[\s\]:|])raise [A-Za-z_][\w.]{0,80}\(")
"""A traceback's source line that raises (`    raise ValueError(`), after the record's prefix."""


def _no_kv_memory(boot: Boot, root: Located) -> FailureFact | None:
    """The KV check's failure where the log shows only that the boot died (`EngineCore failed to
    start`, a bare traceback) after a rank logged `Available KV cache memory` at or below zero: vLLM
    raises "No available memory for the cache blocks" whenever that figure is not positive
    (kv_cache_planning.py, kv_cache_utils.py before 0.33), so the excerpt lost only its exception
    line (vllm#23278: −2.14 GiB, then `EngineCore failed to start.`). None otherwise."""
    value: FailureFact = root.value
    if value.kind is not FailureKind.CRASH or value.priority < GENERIC:
        return None
    below = [f.value for r in boot.ranks.values() for f in r.facts.get(FactKind.KV_AVAILABLE, [])
             if f.file == root.file and f.pos < root.pos and f.value <= 0]
    if not below:
        return None
    return FailureFact(FailureKind.DOES_NOT_FIT, Phase.KV,
                       f"No available memory for the cache blocks: the available KV cache memory was "
                       f"{fmt_gib(min(below))} (the log has no exception line; vLLM raises this one "
                       f"whenever the figure is not positive)", priority=0)
