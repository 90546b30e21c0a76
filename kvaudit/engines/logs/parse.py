"""One log file → its fact-bearing lines and the final name of every process in it."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kvaudit.engines.failures import BARE, GENERIC, LAUNCHER_STOPS, LOG_MESSAGE_CHARS, handled
from kvaudit.engines.logs.facts import (
    COMMAND_KINDS,
    ERROR_LEVELS,
    PLATFORM_LINE,
    RANK_KINDS,
    Fact,
    FactKind,
    FailureFact,
    concurrency,
    error_frame_facts,
    facts_from_message,
)
from kvaudit.engines.logs.layout import worker_names
from kvaudit.engines.logs.lines import (
    LEVELS,
    RECORD_TIME,
    RECORD_TIME_RX,
    TAG_SEARCH_CHARS,
    LogLine,
    Role,
    has_prefix,
    looks_like_vllm,
    parse_line,
    person_heading,
    proc_tag,
    record_seconds,
    split_joined_records,
    tag_of,
)
from kvaudit.engines.logs.scan import (
    EXCERPT_CHARS,
    FOLLOWERS,
    LOGGED_HEAD_CHARS,
    LOGO_MARK,
    SERVER_START,
    Candidates,
    next_line_of,
    scan,
    scan_exhaustive,
    segment_hits,
    serving_from,
)
from kvaudit.engines.logs.unwrap import (
    FRAME,
    Cuts,
    bounds,
    fenced_block_starts,
    fixed_column_cuts,
    joined,
    line_start,
    prev_span,
    record_at,
    without_quotations,
)
from kvaudit.errors import BadInputError
from kvaudit.printable import clipped, one_line
from kvaudit.schema import FailureKind

V0_WORKER = "VllmWorkerProcess"
"""V0's multiprocessing workers (vllm/executor/multiproc_worker_utils.py): ranks 1… of the boot. The
name carries no rank; workers start in rank order, so their pids, sorted, stand for ranks 1, 2, …"""
RENAME_HOPS = 64
"""How many later lines of a provisionally named worker to read to learn its final name."""
RENAME_SEARCH_CHARS = 64 << 20
"""How much text all those searches may cover together, per file: a log whose every fact line has
its own provisionally named pid must not be searched to its end once per pid."""


@dataclass(frozen=True)
class ParsedLine:
    line: LogLine
    facts: tuple[Fact, ...]


@dataclass(frozen=True)
class FileScan:
    index: int
    """Position of the file among the logs of one boot (one file per node, usually)."""
    where: str
    text: str
    lines: tuple[ParsedLine, ...]
    """Candidate lines that state at least one fact, in text order."""
    tags: Mapping[int, str]
    """pid → the last name that process was seen with (workers are renamed during boot)."""
    is_vllm: bool
    v0_ranks: Mapping[int, int] = field(default_factory=dict)
    """pid → rank of V0's `VllmWorkerProcess` workers: their pids in order are ranks 1, 2, … (the
    name carries no rank; the driver, rank 0, prints untagged)."""
    ray_ranks: Mapping[int, int] = field(default_factory=dict)
    """pid → rank of Ray workers whose lines carry no vLLM name (`(RayWorkerWrapper pid=…, ip=…)`
    alone): in the order they first print a figure of their own, from 1 under V0 (its driver, rank 0, runs in
    the engine's process) and from 0 under V1 (every worker is a Ray actor). Not vLLM's rank order,
    which the log does not state: the report says so), or the rank a worker's own parallel_state line
    or torch.compile cache path states (ray_stated, _ray_claim); and the rank of a worker named with no rank
    (`(Worker pid=N)`) whose own `world_size=… rank=…` line states it."""
    ray_stated: frozenset[int] = frozenset()
    """The pids in ray_ranks whose rank their own line states."""
    notes: tuple[str, ...] = ()
    """What the reader should know about the file itself (lines cut at a fixed column)."""
    cut_runs: tuple[tuple[int, int], ...] = ()
    """Runs of lines the paste cut at a fixed column (unwrap.fixed_column_cuts)."""
    names: frozenset[str] = frozenset()
    """Every process name the file shows: its memory lines' and, in a small file, every worker's
    (layout.worker_names): the parallel layout is read from them."""
    mentions: tuple[int, ...] = ()
    """In a file that is no log for want of a log line (_mentions_only): the 1-based numbers of the first
    lines that name vLLM's wordings only inside a sentence's quotes or in a command."""
    illustrations: tuple[int, ...] = ()
    """In a file that is no log: the 1-based numbers of the first lines that show a record with `…` for its time
    (_ILLUSTRATION), as a document's example does."""

    @functools.cached_property
    def serving_at(self) -> int:
        """Where the file shows the boot had finished (scan.serving_from), else past its end:
        looked for only when a failure needs it."""
        return serving_from(self.text, self.cut_runs)

    @property
    def startup_finished(self) -> bool:
        """Whether the file shows the boot finished (a SERVING line)."""
        return self.serving_at <= len(self.text)


MAX_FACT_LINES = 100_000
"""Lines that may state a memory figure, per file. One boot's startup states a few hundred (a few
thousand with vLLM's per-graph DEBUG lines); each is read as a record (up to MAX_RECORD_LINES
lines either side looked at when it has no prefix), so a file of nothing else, built to be slow,
is refused here instead of read at ~80 µs a line."""


def parse_file(text: str, where: str, index: int = 0, *, exhaustive: bool = False) -> FileScan:
    split = 0
    if len(text) <= EXCERPT_CHARS:  # a paste (a whole log file keeps one record a line)
        text, split = split_joined_records(text)
        text = _yaml_command_lists(text)
    text, service = _one_compose_service(where, text)
    text, restart = _last_server_start(where, text)
    text, apart = _one_of_runs_days_apart(where, text)
    cuts = fixed_column_cuts(text)
    cands: Candidates = scan_exhaustive(text) if exhaustive else scan(text)
    cands = _with_cut_runs(text, cands, cuts)
    if len(cands.segments) + len(cands.concurrency) > MAX_FACT_LINES:
        raise BadInputError(f"{where}: more than {MAX_FACT_LINES:,} lines state memory figures, where one vLLM "
                            f"startup states a few hundred: pass the startup log of one boot")
    parsed: dict[int, ParsedLine] = {}
    covered: set[int] = set()
    seen_vllm = False
    said: list[Said] = []
    for start, end in sorted(set(cands.segments + ((cands.backend,) if cands.backend else ()))):
        if start in covered:
            continue
        line, facts = _read_record(text, start, end, covered, cuts.width)
        seen_vllm = seen_vllm or line.is_vllm
        if line.is_vllm or facts:
            said.append(Said(start, end, line.is_vllm or any(f.kind not in COMMAND_KINDS for f in facts)))
        if facts and line.pos not in parsed:
            parsed[line.pos] = ParsedLine(line, facts)
    for start, end in cands.concurrency:
        line, facts = _read_record(text, start, end, covered, cuts.width)
        facts = facts or tuple(concurrency(line.msg))
        if not facts:
            continue
        said.append(Said(start, end, any(f.kind not in COMMAND_KINDS for f in facts)))
        if line.pos in parsed:  # joined to the line before it: add what that record lacks
            known = parsed[line.pos]
            extra = tuple(f for f in facts if f not in known.facts)
            parsed[line.pos] = ParsedLine(known.line, known.facts + extra)
        else:
            parsed[line.pos] = ParsedLine(line, facts)
    serving_at = _add_closing_error(text, parsed, cuts)
    lines = tuple(_with_logged_message(text, parsed[k], parsed) for k in sorted(parsed))
    is_vllm = seen_vllm or looks_like_vllm(text) or bool(lines)
    if is_vllm and not seen_vllm and (other := _other_programs_traceback(text)) is not None:
        raise BadInputError(f"{where}: a traceback in {other[0]}'s code (`{other[1]}`), with no line of vLLM's: "
                            f"kvaudit reads vLLM's logs")
    if is_vllm and not seen_vllm and (stop := _launcher_only(text, lines)) is not None:
        raise BadInputError(f"{where}: no vLLM log line, only a launcher's stop of vLLM ({stop}): the file holds "
                            f"the launcher's lines, not vLLM's output: pass vLLM's own log (the container's, the "
                            f"service's)")
    mentions: tuple[int, ...] = ()
    if is_vllm:
        said += [Said(*bounds(text, pos), True) for pos in parsed if pos not in covered]  # the closing ERROR record
        if (quoted := _mentions_only(text, said, cuts.width)) is not None:
            is_vllm, mentions = False, quoted
        elif _environment_listing_only(text, lines):
            raise BadInputError(f"{where}: vLLM's environment listing ({ENV_REPORT}'s `{ENV_LISTING}...`) and no "
                                f"line of a boot's log: pass the boot's log with it")
        elif not seen_vllm and (two := _errors_of_two_runs(text, lines)) is not None:
            raise BadInputError(f"{where}: no vLLM log line, only two different errors, each quoted in a fenced block "
                                f"of its own ({two}), as a write-up quotes its runs: pass the log of one run")
    tags = _final_tags(text, lines)
    v0 = _v0_workers(text, tags)
    printers = dict.fromkeys(p.line.pid for p in lines if any(f.kind in RANK_KINDS for f in p.facts))
    ray = [pid for pid in printers if pid is not None and proc_tag(tags[pid]).ray]
    ray_ranks, ray_stated = _ray_ranks(ray, lines, 0 if ray and _is_v1(text) else 1)
    unnamed = _unnamed_worker_ranks(printers, tags, lines)
    ray_ranks, ray_stated = {**ray_ranks, **unnamed}, ray_stated | frozenset(unnamed)
    file_scan = FileScan(index, where, text, lines, tags, is_vllm, {pid: rank for rank, pid in enumerate(v0, 1)},
                         ray_ranks, ray_stated,
                         service + restart + _split_note(where, split) + _cut_notes(where, cuts)
                         + _time_goes_back(where, text, lines) + apart,
                         cuts.runs,
                         frozenset(tags.values()) | frozenset(worker_names(text)), mentions,
                         illustrations=() if is_vllm else _illustrations(text))
    if serving_at is not None:
        file_scan.__dict__["serving_at"] = serving_at  # the cached property's value, read once already
    return file_scan


RAY_IP = re.compile(r"\bip=([\w.:\-]{1,64})[)\]]")
TIME_BACK_S = 300
"""How far back a record's time may go before the file is said to hold two boots: Ray prints its
workers' lines a little late (its folded `[repeated Nx across cluster]` lines minutes late, with
the first one's time: those are not looked at), and clocks of two nodes differ by seconds."""


def _time_goes_back(where: str, text: str, lines: tuple[ParsedLine, ...]) -> tuple[str, ...]:
    """A note where the records that state facts go back in time by more than TIME_BACK_S (vLLM's
    `MM-DD HH:MM:SS`, the year's turn aside): two boots wrote into one file at once, or two files
    were joined, and the figures and the failure may mix them (real pastes round thirteen: a death
    at 14:47:42, then a graph capture at 14:10:42 and a startup that finished)."""
    latest: dict[str, tuple[int, str]] = {}  # per node: a Ray node's clock may differ, or its zone
    for p in lines:
        if any(f.kind is FactKind.RAY_FOLDED for f in p.facts):
            continue  # Ray prints a folded line late, with the first one's time
        head = text[p.line.pos:min(p.line.pos + TAG_SEARCH_CHARS, len(text))]
        m = RECORD_TIME_RX.search(head)
        if m is None or (t := record_seconds(m.group(0))) is None:
            continue
        node = ip.group(1) if (ip := RAY_IP.search(head, 0, m.start())) else ""
        last = latest.get(node)
        if last is not None and t < last[0] - TIME_BACK_S and not (m.group(0).startswith("01-")
                                                                    and last[1].startswith("12-")):
            return (f"{where}: the records go back in time, from {last[1]} to {m.group(0)}: two boots may have "
                    f"written into this file at once, or two logs were joined, and its figures and failure may mix "
                    f"them",)
        if last is None or t > last[0]:
            latest[node] = (t, m.group(0))
    return ()


RUNS_APART_S = 24 * 3600
"""How far forward the records' time may jump in a paste before the records on either side are two runs' (when no
process prints on both sides): a boot takes minutes, an hour where it downloads its weights; a jump of a day is a
later run pasted below an earlier one."""
_DATED_HEAD = re.compile(r"\b(?:" + LEVELS + r")\s+(" + RECORD_TIME + ")")


def _one_of_runs_days_apart(where: str, text: str) -> tuple[str, tuple[str, ...]]:
    """The text of one run, and a note, where a paste's records jump forward by more than RUNS_APART_S and no process
    prints records on both sides: two runs pasted one below the other (real pastes round twenty-four, vllm-ascend DP
    notes: "error msg 1", a V0 `VllmWorkerProcess pid=176029` dying in load_model on 04-17, then "error msg 2", a V1
    run's `EngineCore_1 pid=382867` and `VllmWorker rank=6 pid=384550` on 04-22; the report read run 1's failure
    with run 2's layout and said nothing of run 2). As for restarts (_last_server_start), the later run is read
    where its lines state a figure or a failure, else the earlier, and the figures of the two never mix. The
    smallest rule that is safe: a boot's records never jump a day and its processes print throughout, while a restart
    in one container reuses its pids (`APIServer pid=1`) and is _last_server_start's, and a boot that runs past
    midnight moves on by minutes. Records with no pid on one side say nothing of processes: left as they are. One
    pass over the record heads (pastes only)."""
    if len(text) > EXCERPT_CHARS:
        return text, ()
    before: set[int] = set()
    after: set[int] = set()
    last: tuple[int, str] | None = None
    jump: tuple[str, str, int] | None = None
    for m in _DATED_HEAD.finditer(text):
        t = record_seconds(m.group(1))
        begin = text.rfind("\n", max(0, m.start() - TAG_SEARCH_CHARS), m.start()) + 1
        if t is None or (begin == 0 and m.start() > TAG_SEARCH_CHARS):
            continue
        tag = tag_of(text[begin:m.start()])
        if jump is None and last is not None and t > last[0] + RUNS_APART_S:
            jump = (last[1], m.group(1), begin)
        if tag is not None:
            (before if jump is None else after).add(tag[1])
        if jump is None and (last is None or t > last[0]):
            last = (t, m.group(1))
    if jump is None or not before or not after or before & after:
        return text, ()
    first, second, at = jump
    line = line_number(text, at)
    runs = (f"{where}: two runs pasted together: records up to {first} (pid {_pids(before)}) and, from line {line}, "
            f"records of {second} (pid {_pids(after)}), a day or more later, no process in both: ")
    if _states_anything(text[at:]):
        return text[at:], (runs + "the report reads the later one; the earlier one's figures and failure are not "
                                  "in it",)
    return text[:at], (runs + "the report reads the earlier one, as the later one's lines state no figure or "
                              "failure",)


def line_number(text: str, pos: int) -> int:
    """The 1-based number of the line that holds `pos`, as a message names it."""
    return text.count("\n", 0, pos) + 1


def _pids(pids: set[int]) -> str:
    shown = sorted(pids)
    return ", ".join(str(pid % 2**32) for pid in shown[:4]) + (" …" if len(shown) > 4 else "")


def _ray_ranks(ray: list[int], lines: tuple[ParsedLine, ...], first: int) -> tuple[dict[int, int], frozenset[int]]:
    """pid → rank of the Ray workers that print figures: the global rank a worker's own lines state (_ray_claim),
    else the next rank not stated, in the order the workers first print a figure, from `first`
    (FileScan.ray_ranks)."""
    stated = _stated_ranks(set(ray), lines, _ray_claim)
    free = (r for r in itertools.count(first) if r not in stated.values())
    return {pid: stated[pid] if pid in stated else next(free) for pid in ray}, frozenset(stated)


def _ray_claim(f: Fact) -> int | None:
    """The global rank a Ray worker's fact states: its parallel_state line's (`rank 0 in world size 4 is assigned as
    …`), or its torch.compile cache path's `rank_1_0` (real pastes round twenty-six, vllm#36861: a Ray excerpt
    rarely holds the parallel_state line and almost always a cache path a worker). The path's rank is the one within
    the worker's DP engine: the global rank only in DP engine 0, as the engines' world size is not in the path."""
    if f.kind is FactKind.PARALLEL_RANKS:
        return int(f.value[2])
    if f.kind is FactKind.COMPILE_RANK and f.value[1] == 0:
        return int(f.value[0])
    return None


def _world_rank_claim(f: Fact) -> int | None:
    return int(f.value[1]) if f.kind is FactKind.WORLD_RANK else None


def _unnamed_worker_ranks(printers: Mapping[int | None, None], tags: Mapping[int, str],
                          lines: tuple[ParsedLine, ...]) -> dict[int, int]:
    """pid → rank of the workers whose name states no rank (`(Worker pid=60651)`, vLLM 0.23) and whose own
    `world_size=4 rank=3 local_rank=3 …` line does; none where two workers claim one rank or one two
    (a paste of several boots)."""
    named = {pid for pid in printers if pid is not None and pid in tags and _rankless_worker(tags[pid])}
    return _stated_ranks(named, lines, _world_rank_claim)


def _stated_ranks(pids: set[int], lines: tuple[ParsedLine, ...],
                  claim: Callable[[Fact], int | None]) -> dict[int, int]:
    """pid → the rank the process's own lines state (`claim`: the rank a fact states, or None); none where a process
    states two ranks, by one line or two of different kinds, or two state one: a paste of several boots, none is
    trusted."""
    claims: dict[int, set[int]] = {}
    for p in lines:
        if p.line.pid in pids:
            for f in p.facts:
                if (rank := claim(f)) is not None:
                    claims.setdefault(p.line.pid, set()).add(rank)
    stated = {pid: min(ranks) for pid, ranks in claims.items()}
    if any(len(ranks) > 1 for ranks in claims.values()) or len(set(stated.values())) != len(stated):
        return {}
    return stated


def _rankless_worker(name: str) -> bool:
    tag = proc_tag(name)
    return (tag.role is Role.WORKER and not tag.ray and tag.global_rank is None
            and all(getattr(tag, dim) is None for dim in ("tp", "pp", "dp", "pcp", "dcp", "ep")))


MAX_CUT_RUNS = 4096
"""Runs of cut lines read as records of their own, per file (each costs a record's reading)."""


def _with_cut_runs(text: str, cands: Candidates, cuts: Cuts) -> Candidates:
    """The candidates and each run of lines cut at a fixed column whose words, joined, hold what
    the scan looks for (`…GPU KV cache s` + `ize: …`) though no line of it alone did."""
    if not cuts.runs:
        return cands
    known = {start for start, _ in cands.segments + cands.concurrency}
    extra, followers = [], []
    for start, end in cuts.runs[:MAX_CUT_RUNS]:
        first_end = text.find("\n", start, end)
        first = (start, end if first_end < 0 else first_end)
        if start in known:
            continue
        whole = text[start:end].replace("\n", "")
        if any(f in whole for f in FOLLOWERS):
            followers.append(first)  # read as the line after a KV size line is (parse_file)
        elif segment_hits(whole):
            extra.append(first)
    if not extra and not followers:
        return cands
    return dataclasses.replace(cands, segments=tuple(sorted(cands.segments + tuple(extra))),
                               concurrency=tuple(sorted(cands.concurrency + tuple(followers))))


CLOSING_ERROR = (" … (an ERROR record ends the log: the boot logged an error here; what it went on to say is not "
                 "in the log)")
_MARKUP_LINE = re.compile(r"\s*(?:`{3,}|~{3,}|</?(?:details|summary|pre|code)>)\s*")
"""A line of a post's markup around a pasted log: a Markdown fence, an HTML `<details>` tag."""
CLOSING_LINES = 8
"""Markup lines looked past at the log's end."""


def _add_closing_error(text: str, parsed: dict[int, ParsedLine], cuts: Cuts) -> int | None:
    """The log's last line (past a post's closing fence or `</details>`), where it is an ERROR record
    that states no failure kvaudit knows and the log has not shown startup finished: a crash whose
    cause is not shown, at the lowest priority (any stated cause wins). People paste up to the
    error they ask about, and a search result or terminal cuts it (vllm#5248: `# GPU blocks: 507`,
    then `ERROR 06-12 08:12:23 worker_base.py:145] Error execut`). facts.CUT_ERROR_RECORD catches
    the record cut before its `[file.py:N]` closes; this, one cut after. Returns where the log shows
    startup finished (scan.serving_from) when it had to look, else None."""
    end = _content_end(text, len(text))
    for _ in range(CLOSING_LINES):
        if end == 0:
            return None
        start, _ = bounds(text, end - 1)
        if not _MARKUP_LINE.fullmatch(text, start, end):
            break
        end = _content_end(text, start)
    else:
        return None
    known = parsed.get(start)
    if known is not None and any(f.kind is FactKind.FAILURE for f in known.facts):
        return None
    line = parse_line(_record_head(text, start, end), start)
    said = line.msg.strip()
    if line.level not in ERROR_LEVELS or not said:
        return None
    serving_at = serving_from(text, cuts.runs)
    if serving_at > start:
        fact = Fact(FactKind.FAILURE, FailureFact(FailureKind.CRASH, None, said[:LOG_MESSAGE_CHARS] + CLOSING_ERROR,
                                                  priority=BARE))
        parsed[start] = ParsedLine(line, (known.facts if known is not None else ()) + (fact,))
    return serving_at


def _record_head(text: str, start: int, end: int) -> str:
    """A line's prefix and as much of its message as a failure quotes (its length costs nothing)."""
    return text[start:min(end, start + LOG_MESSAGE_CHARS + TAG_SEARCH_CHARS)]


def _content_end(text: str, end: int) -> int:
    """Where the text before `end` stops being whitespace, read a block at a time (a file of blank
    lines is looked through at C's speed, not a character a step)."""
    while end > 0:
        block = text[max(end - 4096, 0):end]
        stripped = block.rstrip()
        if stripped:
            return end - len(block) + len(stripped)
        end -= len(block)
    return 0


LOGGED_WITH = " (logged with the traceback that follows; the exception line itself is not in the log)"


def _with_logged_message(text: str, p: ParsedLine, parsed: Mapping[int, ParsedLine]) -> ParsedLine:
    """A bare traceback header given the message logged just before it: `logger.exception(e)` (V0's
    engine.py run_mp_engine) prints the exception's text as an ERROR record, then the traceback as
    records of the same process and source line (vllm-gfx906#22: `ERROR … [engine.py:458] size_k
    must divisible by BLOCK_SIZE_K`, then `ERROR … [engine.py:458] Traceback …`, the paste cut
    before the exception line). That text says why the boot died; the header alone does not."""
    bare = [f for f in p.facts if f.kind is FactKind.FAILURE and f.value.priority == BARE]
    if not bare or p.line.level not in ERROR_LEVELS or not p.line.msg.lstrip().startswith("Traceback"):
        return p
    end = p.line.pos  # the line right before it: one line break back, no blank line between
    if end >= 2 and text.startswith("\r\n", end - 2):
        end -= 2
    elif end >= 1 and text[end - 1] in "\r\n":
        end -= 1
    else:
        return p
    if end == 0:
        return p
    start = line_start(text, end)  # the line that ends there (empty: a blank line)
    before = parse_line(_record_head(text, start, end), start)
    said = before.msg.strip()
    if (before.level not in ERROR_LEVELS or (before.pid, before.src) != (p.line.pid, p.line.src) or not said
            or said.startswith(("Traceback", "File ")) or start in parsed):
        return p
    logged = dataclasses.replace(bare[0].value, message=said[:LOG_MESSAGE_CHARS] + LOGGED_WITH)
    return ParsedLine(p.line, tuple(Fact(f.kind, logged) if f is bare[0] else f for f in p.facts))


def _last_server_start(where: str, text: str) -> tuple[str, tuple[str, ...]]:
    """The text from the last start of `vllm serve` on, and a note, where the file holds more than
    one (logged SERVER_START lines; one process's two different markers within _START_LINES are one
    start): a script or a container that starts the server again after it died appends each start
    to one file, and the figures of the starts must not mix (real
    pastes round fourteen: a start refused at 18:29 by the free-memory check, 13.58 GiB free, then
    one at 18:36 that finished with 14.66 GiB free; the first's figure was read as the second's)."""
    found: dict[int, tuple[int | None, str, str | None]] = {}
    versions = tuple(m for m in SERVER_START if m != LOGO_MARK)
    for needle in (_VERSION_NEEDLE, LOGO_MARK):  # one pass each over the text (two of the phrases share one)
        i = text.find(needle)
        while i >= 0:
            start, end = bounds(text, i)
            marker = LOGO_MARK if needle == LOGO_MARK else next((m for m in versions if m in text[start:end]), None)
            line = parse_line(text[start:min(end, start + LOGGED_HEAD_CHARS)], start)
            if line.level is None and marker == LOGO_MARK:
                line = _logo_head(text, start) or line
            if marker is not None and line.level is not None:
                service = _service(m) if (m := _COMPOSE.match(text, start, end)) else None
                found[start] = (line.pid, marker, service)
            i = text.find(needle, end)
    # one start may print two of the markers (a version line and the logo, a few lines apart); a
    # container's restart prints the same one again, as the same pid (1); two compose services'
    # servers (one boot's DP ranks, external load balancing) start side by side, not one after another
    ordered = sorted(found.items())
    starts = [(at, pid) for n, (at, (pid, marker, service)) in enumerate(ordered)
              if n == 0 or service == ordered[n - 1][1][2] and (
                  pid is None or pid != ordered[n - 1][1][0] or marker == ordered[n - 1][1][1]
                  or text.count("\n", ordered[n - 1][0], at) > _START_LINES)]
    if len(starts) < 2:
        return text, ()
    edges = [at for at, _ in starts] + [len(text)]
    # the last start that states a figure or a failure: a restart the paste ends in (systemd's, seconds
    # after the death, its banner the last lines: round fifteen) has not got to either yet
    newest = range(len(starts) - 1, max(len(starts) - 1 - MAX_STARTS_READ, 0), -1)
    chosen = next((n for n in newest if _states_anything(text[edges[n]:edges[n + 1]])),
                  len(starts) - 1 - MAX_STARTS_READ if len(starts) > MAX_STARTS_READ else 0)
    at, end = edges[chosen], edges[chosen + 1]
    first, last = line_number(text, at), text.count("\n", 0, end) + (end == len(text))
    if chosen == len(starts) - 1:
        return text[at:], (f"{where}: {len(starts)} starts of `vllm serve` (its version line); the report reads "
                           f"the last, from line {first} on: the earlier ones' figures and failures are not in it",)
    earlier = ", and the earlier ones' figures and failures are not in it" if chosen else ""
    return text[at:end], (f"{where}: {len(starts)} starts of `vllm serve` (its version line); the report reads start "
                          f"{chosen + 1}, lines {first}–{last}, the last that states a memory figure or a failure: "
                          f"the later ones' lines state neither{earlier}",)


_COMPOSE_PREFIX = r"(?:\x1b\[[\d;]{0,16}m)?([A-Za-z0-9][\w.\-]{0,63}) +\|(?:\x1b\[[\d;]{0,16}m)? "
_KUBECTL_PREFIX = r"[ \t]{0,8}\[pod/([a-z0-9][a-z0-9.\-]{0,252})(?:/[a-z0-9][a-z0-9\-]{0,62})?\] "
"""`kubectl logs --prefix`' prefix, `[pod/NAME/CONTAINER] ` (a paste may indent it): each pod is a vLLM of its own as
each compose service is (real pastes round twenty-two, a GKE reference architecture's two replicas of one Deployment,
both `(EngineCore pid=126)`, read as one rank)."""
_COMPOSE = re.compile(_COMPOSE_PREFIX + "|" + _KUBECTL_PREFIX)
"""`docker compose logs`' prefix, `service  | ` (the names padded to one width, perhaps coloured), or kubectl's."""


def _service(m: re.Match[str]) -> str:
    """The compose service or the kubectl pod a prefix names."""
    return m.group(1) or m.group(2)
MAX_SERVICES = 8
"""More docker compose services than this holding vLLM records are not told apart (each is read
once more on its own): such a file is read whole, as before."""
COMPOSE_SAMPLE = 50
"""How many lines with a process tag are looked at for the compose prefix before a file is said
to have none: `docker compose logs` prefixes every line, so the first tagged ones carry it."""


_YAML_ITEM = re.compile(r"([ \t]{0,40})- ([^\r\n]{1,2000})(\r?\n)?")
_YAML_COMMAND_START = re.compile(r"^[ \t]{0,40}- ['\"]?(?:vllm|python3?)['\"]?[ \t]*\r?$", re.MULTILINE)
_YAML_COMMENT = re.compile(r"[ \t]{0,40}#[^\r\n]{0,2000}(\r?\n)")
_YAML_SECOND = {"vllm": "serve", "python": "-m", "python3": "-m"}
"""The item a command's first item must be followed by (`vllm`, `serve`; `python3`, `-m`)."""
_YAML_RUNS_VLLM = re.compile(r"vllm serve |python3? -m vllm\.entrypoints\.")


def _yaml_command_lists(text: str) -> str:
    """A command written as a YAML list, one argument an item (a Kubernetes container's `command:`; real pastes
    round thirty-three, LMCache PR 3171: `- vllm`, `- serve`, `- deepseek-ai/DeepSeek-V4-Pro`, `- '--tensor-parallel-
    size'`, `- '8'`, …), as the one line it runs, in the first item's place (the others' lines left empty, so the
    lines keep their numbers); its quotes taken off. Only a run of items at one indent that starts `vllm serve` or
    `python -m vllm.entrypoints.…`; any other list stays as it is."""
    if "- " not in text:
        return text
    out: list[str] = []
    last = scanned = 0
    for start in _YAML_COMMAND_START.finditer(text):
        if start.start() < scanned:  # inside a run read already (each item is read once)
            continue
        items: list[str] = []
        pos, indent, breaks = start.start(), None, []
        while True:
            if indent is not None and (comment := _YAML_COMMENT.match(text, pos)) is not None:
                breaks.append(comment.group(1) or "")  # a commented-out item: not run, its line left empty
                pos = comment.end()
                continue
            if (m := _YAML_ITEM.match(text, pos)) is None or (indent is not None and m.group(1) != indent):
                break
            indent = m.group(1)
            item = m.group(2).strip()
            if item[:1] not in "'\"" and (comment_at := item.find(" #")) >= 0:
                item = item[:comment_at].rstrip()  # an inline comment (`- --tensor-parallel-size  # two cards`)
            if len(item) > 1 and item[0] == item[-1] and item[0] in "'\"":
                item = item[1:-1]
            items.append(item)
            breaks.append(m.group(3) or "")
            pos = m.end()
        scanned = pos
        command = " ".join(items)
        if len(items) < 3 or items[1] != _YAML_SECOND.get(items[0]) or _YAML_RUNS_VLLM.match(command + " ") is None:
            continue
        out += [text[last:start.start()], (indent or "") + command, "".join(breaks)]
        last = pos
    return "".join(out) + text[last:] if out else text


def _compose_lines(text: str) -> bool:
    """Whether one of the first COMPOSE_SAMPLE lines with a process tag (` pid=`) has the compose
    prefix: one search a line, not a regex tried at every offset of a 200 MB log."""
    i = text.find(" pid=")
    for _ in range(COMPOSE_SAMPLE):
        if i < 0:
            return False
        start = line_start(text, i) or 0
        if _COMPOSE.match(text, start, start + 200):
            return True
        end = text.find("\n", i)
        if end < 0:
            return False
        i = text.find(" pid=", end)
    return False


def _one_compose_service(where: str, text: str) -> tuple[str, tuple[str, ...]]:
    """One service's lines and a note, where `docker compose` lines of more than one service hold
    vLLM records and two show one process name and pid: each container numbers its own processes,
    so those are vLLMs of their own, not one boot (a boot that spans services, a headless node's
    workers, names each rank's process apart) (real pastes round fifteen: qwen3.5-9b started, then
    qwen3.5-4b died with -8.59 GiB for KV, both as EngineCore_DP0 pid=132). The service read is the
    first whose lines state a failure, else the first that states a memory figure, else the first;
    lines with no service prefix stay with it."""
    if not _compose_lines(text):
        return text, ()  # the usual case
    lines = text.splitlines(keepends=True)
    owner: list[str | None] = []
    services: dict[str, None] = {}
    printers: dict[tuple[str, int], set[str]] = {}  # (process name, pid) → the services it prints under
    pods = False  # kubectl's prefix, not compose's
    for line in lines:
        m = _COMPOSE.match(line)
        owner.append(_service(m) if m is not None else None)
        if m is None or not has_prefix(line[m.end():]):
            continue  # not a vLLM record (another container's line, a raw traceback line)
        services.setdefault(_service(m))
        pods = pods or m.group(2) is not None
        tag = tag_of(line[m.end():])
        # the API server is pid 1 in every container, one boot's DP ranks behind their own servers too
        if tag is not None and proc_tag(tag[0]).role is not Role.FRONTEND:
            printers.setdefault(tag, set()).add(_service(m))
    # one boot may span services (a headless node's workers, DP ranks: each rank's processes named
    # apart): two vLLMs show as one engine or worker name and pid under two services
    if not 1 < len(services) <= MAX_SERVICES or not any(len(s) > 1 for s in printers.values()):
        return text, ()
    texts: dict[str, list[str]] = {name: [] for name in services}
    for line, name in zip(lines, owner):
        for kept in ((texts[name],) if name in texts else texts.values() if name is None else ()):
            kept.append(line)
    facts = {name: _fact_kinds("".join(t)) for name, t in texts.items()}
    chosen = next((n for n in services if FactKind.FAILURE in facts[n]),
                  next((n for n in services if facts[n] & RANK_KINDS), next(iter(services))))
    others = [n for n in services if n != chosen]
    why = ("states a failure" if FactKind.FAILURE in facts[chosen]
           else "states a memory figure" if facts[chosen] & RANK_KINDS else "prints")
    kind, command = ("kubectl pods", f"kubectl logs {others[0]}") if pods else (
        "docker compose services", f"docker compose logs {others[0]}")
    return "".join(texts[chosen]), (f"{where}: the lines of {len(services)} {kind} "
                                    f"({', '.join(services)}), each a vLLM of its own; the report reads {chosen}'s, "
                                    f"the first that {why}: pass {', '.join(others)}'s lines on their own "
                                    f"(`{command}`)",)


_VERSION_NEEDLE = "server version"
"""What SERVER_START's version lines share (`vLLM API server version`, `vLLM server version`)."""
MAX_STARTS_READ = 8
"""How many of the newest starts are read on their own for a figure or a failure (a crash loop may
append thousands); past them the report reads the one before them."""
_START_LINES = 20
"""How many lines one start's banner (its version line, its logo) spans at most."""


def _logo_head(text: str, start: int) -> LogLine | None:
    """The logged record a logo line belongs to, where the logo is one multi-line record (0.34:
    `(APIServer pid=1) INFO … [startup.py:38] ` with nothing after it, then the logo's lines)."""
    span = prev_span(text, start)
    for _ in range(3):
        if span is None:
            return None
        line = parse_line(text[span[0]:min(span[1], span[0] + LOGGED_HEAD_CHARS)], span[0])
        if line.level is not None:
            return line if not line.msg else None
        span = prev_span(text, span[0])
    return None


def _fact_kinds(text: str) -> set[FactKind]:
    """What a part of a file states, read as a file of its own (a start, a compose service's lines)."""
    return {f.kind for p in parse_file(text, "").lines for f in p.facts}


def _states_anything(text: str) -> bool:
    """Whether a start's lines state a memory figure or a failure."""
    kinds = _fact_kinds(text)
    return bool(kinds & RANK_KINDS) or FactKind.FAILURE in kinds


FRAMES_LOOKED_AT = 200
"""How many traceback frames _other_programs_traceback reads at most."""
OTHER_SERVERS = ("sgl_jax", "sglang", "sgl_kernel", "lmdeploy", "tensorrt_llm", "text_generation_server",
                 "llama_cpp", "mlc_llm", "exllamav2")
"""Path parts of other LLM servers' code, whose tracebacks people paste beside vLLM's."""


def _other_programs_traceback(text: str) -> tuple[str, str] | None:
    """(the program, a frame's path) where the text's traceback frames (its first FRAMES_LOOKED_AT)
    are in another LLM server's code (OTHER_SERVERS) and none in vLLM's or its TPU backend's: no vLLM
    boot (real pastes round sixteen: SGLang-JAX's `sgl_jax/srt/…` frames and a TPU out-of-memory error
    were read as a vLLM crash). A user's own script's frames name no server: the text is read."""
    i, frames, other = text.find('File "'), 0, None
    while i >= 0 and frames < FRAMES_LOOKED_AT:
        end = text.find('"', i + 6, i + 1000)
        if end < 0:
            break
        path = text[i + 6:end]
        parts = set(re.split(r"[/\\.\-]", path.lower()))
        if parts & {"vllm", "tpu_inference"}:
            return None
        if other is None and (name := next((n for n in OTHER_SERVERS if n in parts), None)):
            other = (name, path)
        frames += 1
        i = text.find('File "', end)
    return other


def _errors_of_two_runs(text: str, lines: tuple[ParsedLine, ...]) -> str | None:
    """Two errors of different runs that a person quoted, in a text with no vLLM record and no traceback frame:
    two failures that each name a cause (not a generic "initialization failed"), with different messages, each
    in a fenced block of its own (real pastes round twenty-three, vllm#27934: a write-up with an "Error 1" and an
    "Error 2" section, each a fenced quote of its own run's ValueError, was read as one boot that failed with the
    first and ran at the second's GMU on the second's device). Returns the two lines ("line 23: `…`; line 30:
    `…`), else None. One quoted error, or several in one block (a dead boot's last lines), is read as before."""
    if FRAME in text:
        return None
    fences = fenced_block_starts(text)
    seen: dict[int, tuple[int, str]] = {}  # fenced block -> its first stated failure (position, message)
    for parsed in lines:
        pos = parsed.line.pos
        block = bisect.bisect_right(fences, pos)
        if block % 2 == 0 or block in seen:
            continue  # outside every fenced block, or that block's failure is known
        for fact in parsed.facts:
            if fact.kind is FactKind.FAILURE and fact.value.priority < GENERIC:
                if any(message != fact.value.message for _, message in seen.values()):
                    first_pos, first_message = next(iter(seen.values()))
                    return "; ".join(f"line {line_number(text, at)}: \"{clipped(one_line(message), 80)}\""
                                     for at, message in ((first_pos, first_message), (pos, fact.value.message)))
                seen[block] = (pos, fact.value.message)
                break
    return None


def _split_note(where: str, split: int) -> tuple[str, ...]:
    if not split:
        return ()
    records = "1 vLLM record" if split == 1 else f"{split} vLLM records"
    return (f"{where}: {records} ran on after another record on the same line, as a log viewer copies them: "
            f"each was read as a line of its own",)


def _cut_notes(where: str, cuts: Cuts) -> tuple[str, ...]:
    if not cuts.cut_lines:
        return ()
    shown = ", ".join(map(str, cuts.cut_lines[:12])) + (" …" if len(cuts.cut_lines) > 12 else "")
    return (f"{where}: lines {shown} ({len(cuts.cut_lines)} in all) stop at column {cuts.width} and go on in the "
            f"next line, as a paste through `fold -w {cuts.width}` or a {cuts.width}-column terminal cuts them: "
            f"they were read joined; a line cut where the paste ends is still lost",)


class Said(NamedTuple):
    """A candidate line whose record has vLLM's prefix or states a fact (parse_file), for _mentions_only."""
    start: int
    end: int
    logged: bool
    """It has the prefix or states a fact of the log, not only a command's flags."""


KVAUDIT_COMMAND = re.compile(r"(?<![\w.\-/])kvaudit[ \t]+(?:run|plan|show|diff|ingest|selftest)\b")
"""kvaudit's own command line (`kvaudit run -- vllm serve M -tp 8 …`, `$ kvaudit plan r.json --gmu 0.16`): the
vLLM flags it passes are an example of kvaudit's documentation, not a command a person ran vLLM with."""
MENTIONS_SHOWN = 3
"""How many of a document's lines that only mention vLLM's wordings the refusal names."""


def _mentions_only(text: str, said: list[Said], width: int | None) -> tuple[int, ...] | None:
    """None where the text is a log; else the first lines (1-based, at most MENTIONS_SHOWN) that name vLLM's
    wordings or flags only as a document does. A text is a log where
    - one of its records has vLLM's prefix or states a fact of the log (more than a command's flags), read
      without the quotations inside a person's sentences (unwrap.without_quotations);
    - a process tag or record head of vLLM's stands outside those quotations (lines.looks_like_vllm: a log
      whose lines state no fact);
    - or it holds a command outside them (a paste of what a person ran, real pastes round twenty: `docker
      run … --tensor-parallel-size 8 …` alone; kvaudit's own are no such paste, KVAUDIT_COMMAND) and names
      no wording of the log only inside them.
    The README quotes `EngineCore failed to start` in a sentence and its commands are examples; a design note
    quotes "Available KV cache memory: 12.3 GiB"; an issue around a fenced, `> `-quoted or whole-line quoted
    paste has the paste's lines, and a description with only a command is read as the command. A `#` line that
    states only an error is a title quoting it, no log line.

    `said` is in text order. A record whose prefix comes before any quotation mark on its line is a log line
    at once (a log's first record is one); else the text is read without its quotations, once, and the
    records again from it. A text past EXCERPT_CHARS is a log file, not a person's document."""
    if len(text) > EXCERPT_CHARS:
        return None
    quiet: str | None = None
    named: list[int] = []
    commands = mentions = False
    for start, end, logged in said:
        head = text[start:min(end, start + TAG_SEARCH_CHARS)]
        if has_prefix(head[:_first_mark(head)]):
            return None
        if quiet is None:
            quiet = without_quotations(text)
        line, facts = _read_record(quiet, start, end, set(), width)
        if person_heading(line.msg) and facts and all(f.kind is FactKind.FAILURE for f in facts):
            # a heading that states only an error is a person's title quoting it (real pastes round thirty-one, an
            # error catalogue's `# torch.cuda.OutOfMemoryError: …`); a root prompt's command (`# vllm serve …`) or
            # figures pasted as comments (`# Available KV cache memory: …`) still read
            continue
        if line.is_vllm or any(f.kind not in COMMAND_KINDS for f in facts or concurrency(line.msg)):
            return None
        commands = commands or bool(facts) and KVAUDIT_COMMAND.search(line.msg) is None
        mentions = mentions or logged
        named.append(line.pos)
    if looks_like_vllm(without_quotations(text) if quiet is None else quiet) or (commands and not mentions):
        return None
    return tuple(line_number(text, pos) for pos in sorted(set(named))[:MENTIONS_SHOWN])


def _first_mark(line: str) -> int:
    """Where a line's first quotation mark is (its length where it has none)."""
    marks = [i for i in (line.find("`"), line.find('"')) if i >= 0]
    return min(marks, default=len(line))


def _is_v1(text: str) -> bool:
    """A V1 engine ran (only asked when Ray workers print figures: two passes over the text)."""
    return "(EngineCore" in text or "V1 LLM engine" in text


def _read_record(text: str, start: int, end: int, covered: set[int],
                 width: int | None = None) -> tuple[LogLine, tuple[Fact, ...]]:
    """The record around one candidate line, parsed, and the facts it states. A record cut from a
    terminal may have lost a space or gained one where a word was split: each way of joining its
    lines (unwrap.joined) is read and the one that states the most facts wins."""
    record = record_at(text, start, end, width)
    covered.update(s for s, _ in record.spans)
    readings = joined(text, record)
    line = parse_line(readings[0], record.start)
    if _table_row(text[slice(*record.spans[0])]):
        return line, ()
    facts = _typed(line)
    for reading in readings[1:]:
        other = parse_line(reading, record.start)
        other_facts = _typed(other)
        if _weight(other_facts) > _weight(facts):
            line, facts = other, other_facts
    return line, facts


def _table_row(line: str) -> bool:
    """A Markdown table's row: a line that starts and ends with `|` and has another `|` between, and no vLLM
    record head. A document's table quotes vLLM's wordings in its cells (real pastes round twenty-four, a course
    doc's troubleshooting table: `| `No available memory for the cache blocks` | weights fit, no room for KV |
    … |`, its rows joined into one record, was read as the boot's failure in kv); a log's record is never one. A
    log pasted in a pane framed by bars keeps its record heads (`| (EngineCore pid=1) ERROR 05-28 … |`), and its
    other lines (a traceback's) have no bar inside; `│ ` (box drawing) is no `|` (unwrap.clean strips frames)."""
    row = line.strip()
    return (len(row) > 2 and row[0] == "|" and row[-1] == "|" and "|" in row[1:-1]
            and not has_prefix(row.lstrip("| \t")))


_ILLUSTRATION = re.compile(r"\s*(?:" + LEVELS + r")[ \t]+(?:…|\.{3})[ \t]+(?![\[(])")
"""A level, then `…` or `...` where vLLM prints the record's time and `[file.py:N]`: a document's illustration of
what to look for, not a record (real pastes round twenty-four, a course doc's "Expected log landmarks": `INFO …
Available KV cache memory: 33.4 GiB`, then "(Numbers are illustrative)", filled the owners and the KV figure).
vLLM's logger never prints that (`vllm/logger.py`'s _FORMAT). A paste that shortened only the time keeps the
file (`(Worker_TP0 pid=400) INFO … [gpu_worker.py:675] Available KV cache memory: 8.28 GiB`, round nineteen),
and stays a record."""


_ILLUSTRATION_LINE = re.compile(r"^[ \t]*" + _ILLUSTRATION.pattern.removeprefix(r"\s*"), re.M)


def _illustrations(text: str) -> tuple[int, ...]:
    """The first MENTIONS_SHOWN lines (1-based) of a text that is no log which show an _ILLUSTRATION."""
    if len(text) > EXCERPT_CHARS:
        return ()
    found = itertools.islice(_ILLUSTRATION_LINE.finditer(text), MENTIONS_SHOWN)
    return tuple(line_number(text, m.start()) for m in found)


def _launcher_only(text: str, lines: tuple[ParsedLine, ...]) -> str | None:
    """Where a file's only facts are a launcher's stop of vLLM (failures.Cause.launcher), what its first such line
    says, with its number; else None (real pastes round twenty-four b: lemonade's journal, `vllm-server failed to
    start within timeout`, and no line of vLLM's)."""
    facts = [(p.line.pos, f) for p in lines for f in p.facts]
    if not facts or not all(f.kind is FactKind.FAILURE and f.value.launcher for _, f in facts):
        return None
    pos, first = facts[0]
    # the record may have joined the line to a table above it (`kubectl describe`'s events): the launcher's own
    # words' line, where they are on one line (a wrapped one keeps the record's)
    at = [at for anchor in LAUNCHER_STOPS if (at := text.find(anchor, pos)) >= 0]
    return f"line {line_number(text, min(at, default=pos))}: {first.value.message}"


def _weight(facts: tuple[Fact, ...]) -> tuple[int, int]:
    """How much a reading of a record says: its facts, then how specific its failure is (a join
    that breaks `model's max seq len` still reads as some exception, but not as the KV check)."""
    failures = [f.value.priority for f in facts if f.kind is FactKind.FAILURE]
    return len(facts), -min(failures, default=0)


def _typed(line: LogLine) -> tuple[Fact, ...]:
    """The line's facts; a command-line flag counts only on a line vLLM's logger did not print (a
    pasted `vllm serve …`), never inside a log record's message (the GMU advisory names flags too),
    vLLM's `Cudagraph is disabled under eager mode` and `Detected MTP model` only on one it printed (not a
    person quoting it: _PRINTED_ONLY),
    and a failure only where the line's level does not mark it handled (failures.handled); an ERROR
    record that is a traceback frame is a crash whose cause is not shown (facts.error_frame_facts)."""
    if not line.is_vllm and _ILLUSTRATION.match(line.msg):
        return ()
    facts = facts_from_message(line.msg) + list(error_frame_facts(line.level, line.msg))
    facts = [f for f in facts if f.kind is not FactKind.FAILURE or not handled(line.level, f.value.kind)]
    if line.is_vllm:
        return tuple(f for f in facts if f.kind not in COMMAND_KINDS)
    return tuple(f for f in facts if f.kind not in _PRINTED_ONLY)  # vLLM's own words, quoted by a person


ENV_REPORT = "collect_env.py"
"""vLLM's environment script (`python collect_env.py`, `vllm collect-env`), whose output vLLM's bug template asks
for above the log: its own traceback is in that listing, not in the boot (failure_timeline)."""
ENV_LISTING = "Collecting environment information"
"""The first line ENV_REPORT prints."""
_LISTED = (FactKind.PLATFORM, FactKind.VERSION)
"""What that listing states in lines kvaudit reads (the platform vLLM's import detected, its version): a text with
nothing else holds no boot (real pastes round twenty-three, vllm#17227: an issue body cut after the listing was read
as a boot that "ends before startup finished")."""


def _environment_listing_only(text: str, lines: tuple[ParsedLine, ...]) -> bool:
    """The text holds ENV_LISTING, states nothing but _LISTED, and each of its lines with vLLM's prefix is the
    platform line the script's import printed: no boot's record is in it."""
    if ENV_LISTING not in text or any(f.kind not in _LISTED for p in lines for f in p.facts):
        return False
    return all(PLATFORM_LINE in line or not has_prefix(line) for line in text.splitlines())


_PRINTED_ONLY = (FactKind.EAGER, FactKind.MTP_DRAFTER)
"""Facts read only from a record vLLM printed: write-ups quote these lines to say what to look for."""


_V0_PID = re.compile(V0_WORKER + r" pid=(\d{1,9})\)")


def _v0_workers(text: str, tags: dict[int, str]) -> list[int]:
    """V0's worker processes in the order of their pids, the order V0 started them in (one per rank
    from 1), each counted wherever it printed: a worker whose lines state no figure still holds its rank
    (real pastes round nineteen, vllm#15340: pid 275 printed only its profiling time, and 277 was read
    as rank 2, not 3)."""
    named = {pid for pid, name in tags.items() if name == V0_WORKER}
    if not named:
        return []
    return sorted(named | {int(m.group(1)) for m in _V0_PID.finditer(text)})


def _final_tags(text: str, lines: tuple[ParsedLine, ...]) -> dict[int, str]:
    """Each pid's last name. Fact lines come after a worker's rename almost always; when the last
    one still carries a provisional name (`VllmWorker-0`, plain `Worker`), the pid's next lines
    are read until the name settles, so the file is never searched to its end per pid."""
    last: dict[int, tuple[str, int]] = {}
    for p in lines:
        if p.line.pid is not None and p.line.tag is not None:
            last[p.line.pid] = (p.line.tag, p.line.pos)
    tags = {}
    budget = RENAME_SEARCH_CHARS
    for pid, (tag, pos) in last.items():
        after = pos + 1
        for _ in range(RENAME_HOPS):
            if not proc_tag(tag).provisional or budget <= 0:
                break
            stop = min(after + budget, len(text))
            nxt = next_line_of(text, pid, after, stop)
            budget -= (nxt[1] if nxt is not None else stop) - after
            if nxt is None:
                break
            found = tag_of(text[nxt[0]:nxt[1]])
            if found is not None and found[1] == pid:
                tag = found[0]
            after = nxt[1]
        tags[pid] = tag
    return tags
