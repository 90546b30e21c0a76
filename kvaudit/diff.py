"""Compare two reports: owner deltas per rank and on the binding rank, the dominant owner,
whether the knobs are comparable, what changed in the environment, and what happened to KV."""

from __future__ import annotations

from typing import Any

from kvaudit.config import COMPARED_KNOBS
from kvaudit.errors import FindingError
from kvaudit.schema import (
    NON_KV_OWNERS, DiffReport, EnvDifference, KnobDifference, Owner, OwnerDelta, RankReport, Report,
)
from kvaudit.sites import site_deltas
from kvaudit.units import fmt_gib


def _delta(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else b - a


def _owner_rows(a: RankReport | None, b: RankReport | None, rank: int | None) -> list[OwnerDelta]:
    rows = []
    for owner in Owner:
        av = a.owners.get(owner) if a else None
        bv = b.owners.get(owner) if b else None
        rows.append(OwnerDelta(owner=owner, rank=rank, a_bytes=av, b_bytes=bv, delta_bytes=_delta(av, bv)))
    return rows


def _knobs(a: Report, b: Report) -> list[KnobDifference]:
    out = []
    for knob in COMPARED_KNOBS:
        av, bv = getattr(a.config, knob), getattr(b.config, knob)
        if knob == "model" and av and bv:
            # Two checkouts of the same model in different folders are the same model.
            av, bv = av.rstrip("/").rsplit("/", 1)[-1], bv.rstrip("/").rsplit("/", 1)[-1]
        if av != bv:
            out.append(KnobDifference(knob, _plain(getattr(a.config, knob)), _plain(getattr(b.config, knob))))
    return out


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _environment(a: Report, b: Report) -> list[EnvDifference]:
    pairs: list[tuple[str, Any, Any]] = [
        ("engine.version", a.engine.version, b.engine.version),
        ("engine.model_runner", a.engine.model_runner, b.engine.model_runner),
        ("engine.attention_backend", a.engine.attention_backend, b.engine.attention_backend),
    ]
    for key in ("device_name", "driver", "cuda", "torch", "vllm"):
        pairs.append((key, getattr(a.environment, key), getattr(b.environment, key)))
    for key in sorted(set(a.environment.env) | set(b.environment.env)):
        pairs.append((f"env.{key}", a.environment.env.get(key), b.environment.env.get(key)))
    return [EnvDifference(k, av, bv) for k, av, bv in pairs if av != bv]


def diff_reports(a: Report, b: Report, a_name: str = "a", b_name: str = "b") -> DiffReport:
    owners = _owner_rows(a.binding(), b.binding(), None)
    a_ranks, b_ranks = {r.rank: r for r in a.ranks}, {r.rank: r for r in b.ranks}
    for rank in sorted(set(a_ranks) | set(b_ranks)):
        owners += _owner_rows(a_ranks.get(rank), b_ranks.get(rank), rank)
    binding_rows = [d for d in owners if d.rank is None and d.owner in NON_KV_OWNERS and d.delta_bytes]
    dominant = max(binding_rows, key=lambda d: abs(d.delta_bytes)).owner if binding_rows else None
    knobs = _knobs(a, b)
    ca, cb = a.capacity, b.capacity
    sites = tuple(d for rank in sorted(set(a_ranks) & set(b_ranks))
                  if a_ranks[rank].sites is not None and b_ranks[rank].sites is not None
                  for d in site_deltas(a_ranks[rank].sites, b_ranks[rank].sites, rank))
    return DiffReport(
        comparable=not knobs, knob_differences=tuple(knobs), environment_differences=tuple(_environment(a, b)),
        owners=tuple(owners), dominant_owner=dominant,
        capacity={"a": ca, "b": cb,
                  "kv_available_delta_bytes": _delta(ca.kv_available_bytes, cb.kv_available_bytes),
                  "kv_tokens_delta": _delta(ca.kv_tokens, cb.kv_tokens)},
        verdict={"a": a.verdict, "b": b.verdict}, a_name=a_name, b_name=b_name, sites=sites)


def half_known_owners(diff: DiffReport) -> tuple[Owner, ...]:
    """Non-KV owners on the binding rank that one side knows and the other does not (a partial
    report, such as a log excerpt): the dominant owner is chosen among the others only."""
    return tuple(d.owner for d in diff.owners if d.rank is None and d.owner in NON_KV_OWNERS
                 and (d.a_bytes is None) != (d.b_bytes is None))


def check_kv_drop(diff: DiffReport, limit_bytes: int) -> None:
    """The CI gate: KV on the binding rank fell by more than limit_bytes → a finding (exit 1)."""
    delta = diff.capacity["kv_available_delta_bytes"]
    a = diff.capacity["a"]
    if delta is None and a is not None and a.kv_available_bytes is not None:
        raise FindingError(f"{diff.b_name} has no KV figure ({diff.verdict['b'].value}): it never reached KV sizing")
    if delta is not None and -delta > limit_bytes:
        raise FindingError(f"KV cache fell by {fmt_gib(-delta)} ({diff.a_name} → {diff.b_name}), more than the "
                           f"allowed {fmt_gib(limit_bytes)}"
                           + (f"; dominant owner: {diff.dominant_owner.value}" if diff.dominant_owner else ""))
