"""What every source hands the assembly (kvaudit/assemble.py): a `BootRecord` of `RankRecord`s.

A measured rank (a run's or the selftest's) is declared once, here, as `MeasuredRank`: the worker
journals its facts under the names of the record's fields (`JOURNAL_FACTS`), the journal carries
them as plain JSON, `MeasuredRank.from_facts` reads them back typed (untrusted: a value of the
wrong type is unknown, never a crash), and the assembly copies every field the report shares
with it (`assemble.rank_report`). Adding a measured fact means a field here and one in
`schema.RankReport` (and its renderer; the JSON reader, kvaudit/validate.py, reads a scalar by
its declared type); nothing lists it by hand in between.
Nothing here imports an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from kvaudit.capacity import KvGeometry
from kvaudit.config import AuditConfig
from kvaudit.schema import (
    COMPILE_CACHE_STATES,
    Engine,
    Environment,
    Failure,
    Owner,
    PhaseRecord,
    RankNode,
    RankReport,
    Site,
    Source,
    SweepPoint,
    Verify,
)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _strings(v: Any) -> tuple[str, ...]:
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()


def _positive_ints(v: Any) -> tuple[int, ...] | None:
    """A non-empty list of positive integers, or None."""
    if not isinstance(v, list) or not v:
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        return None
    return tuple(v)


def _sweep(v: Any) -> tuple[SweepPoint, ...] | None:
    """The worker's sweep as report records (malformed entries skipped)."""
    if not isinstance(v, list):
        return None
    points = []
    for p in v:
        tokens, peak = (p.get("tokens"), p.get("activation_peak_bytes")) if isinstance(p, dict) else (None, None)
        if isinstance(tokens, int) and tokens > 0 and isinstance(peak, int):
            points.append(SweepPoint(tokens, peak, _float(p.get("seconds"))))
    return tuple(sorted(points, key=lambda x: x.tokens)) or None


FACT = "fact"
"""Field metadata: the decoder of a field the worker journals as a fact under the field's name."""


def _fact(decode: Callable[[Any], Any], default: Any = None) -> Any:
    return field(default=default, metadata={FACT: decode})


@dataclass(frozen=True)
class MeasuredRank:
    """One rank's phase readings and facts (a run's or the selftest's journal): the ledger makes
    its owners, its requested budget and its KV figure. Fields made with `_fact` are journaled
    by the worker under their own name; the others are given by the engine's supervisor."""

    rank: int
    phases: tuple[PhaseRecord, ...]
    tp_rank: int | None = _fact(_int)
    dcp_rank: int | None = _fact(_int)
    device_total_bytes: int | None = _fact(_int)
    gpu_memory_utilization: float | None = _fact(_float)
    others_bytes: int | None = _fact(_int)
    graph_pool_estimate_bytes: int | None = _fact(_int)
    kv_cache_bytes: int | None = _fact(_int)
    kv_available_bytes: int | None = _fact(_int)
    """What the engine says it returned to vLLM; the ledger re-derives it (`ledger.kv_budget`), and
    where the two differ the budget says by how much (`sized_otherwise`) and a warning says so."""
    kv_blocks: int | None = _fact(_int)
    deferred_steps: tuple[str, ...] = _fact(_strings, ())
    vllm_kv_available_bytes: int | None = _fact(_int)
    sites: tuple[Site, ...] | None = None
    """`--trace`: from the phase events, not a fact (engines/measured_ranks.py)."""
    vllm_graph_estimate_bytes: int | None = _fact(_int)
    vllm_suggested_kv_cache_memory_bytes: int | None = _fact(_int)
    graph_capture_transient_bytes: int | None = _fact(_int)
    prefill_probe_transient_bytes: int | None = _fact(_int)
    allocator_expandable_segments: bool | None = _fact(_bool)
    """The worker's allocator ran with expandable segments (see RankReport)."""
    sweep: tuple[SweepPoint, ...] | None = _fact(_sweep)
    kv_cache_spec_dtype: str | None = _fact(_str)
    compile_cache: str | None = _fact(lambda v: v if v in COMPILE_CACHE_STATES else None)
    """miss / hit / partial: the model compiled in this boot or loaded from vLLM's compile cache (see RankReport)."""
    node: RankNode | None = None
    """Where the rank ran and how its record arrived (a run's supervisor; None elsewhere)."""
    kv_tensor_block_bytes: tuple[int, ...] | None = _fact(_positive_ints)
    """Bytes per block of each KV tensor (CUDA; see RankReport)."""
    kv_structures_bytes: int = _fact(lambda v: _int(v) or 0, 0)
    """What KV initialisation takes besides the cache, measured before sizing and reserved in the
    KV budget (GPU; 0 where not measured)."""
    planted: Mapping[Owner, int] = field(default_factory=dict)
    """Sizes the source planted on purpose (the selftest), per owner: the report's accuracy."""

    @classmethod
    def from_facts(cls, rank: int, phases: tuple[PhaseRecord, ...], facts: Mapping[str, Any],
                   **given: Any) -> MeasuredRank:
        """The record of a rank's journaled facts (plain JSON, untrusted), each decoded by its
        field's type; `given`: what the supervisor knows besides (sites, node, a default GMU)."""
        decoded = {f.name: f.metadata[FACT](facts[f.name]) for f in fields(cls)
                   if FACT in f.metadata and f.name in facts}
        return cls(rank, phases, **{**decoded, **{k: v for k, v in given.items() if decoded.get(k) is None}})


JOURNAL_FACTS = frozenset(f.name for f in fields(MeasuredRank) if FACT in f.metadata)
"""The fact names a worker journals that become the rank's record."""

LEDGER_FIGURES = frozenset({"requested_bytes", "owners", "graph_pool_actual_bytes", "kv_available_bytes", "kv_budget",
                            "naive_kv_available_bytes", "free_at_start_bytes", "kv_segment_rounding_bytes"})
"""The report's per-rank figures the ledger makes of a measured rank (assemble.rank_report)."""

SHARED_WITH_REPORT = tuple(f.name for f in fields(MeasuredRank)
                           if f.name in {g.name for g in fields(RankReport)} and f.name not in LEDGER_FIGURES)
"""The record's fields the report carries as they are (assemble.rank_report copies them)."""


@dataclass(frozen=True)
class StatedRank:
    """A rank whose owners a source states outright (a log's figures, a plan's): the ledger adds
    only what follows from them, `kv_unallocated`; an owner the source does not know stays null."""

    report: RankReport
    """Everything the source knows of the rank; its owners are the stated readings."""


RankRecord = MeasuredRank | StatedRank


@dataclass(frozen=True)
class Stated:
    """Facts a log states outright, used where the KV geometry cannot say (see capacity.capacity)."""

    kv_tokens: int | None = None
    max_feasible_model_len: int | None = None
    max_model_len_fits: bool | None = None
    kv_needed_bytes: int | None = None
    kv_tokens_note: str | None = None
    """How `kv_tokens` was derived when the log states no token count (from its blocks); the
    verdict says so."""


@dataclass(frozen=True)
class BootRecord:
    """What one boot did, as a source tells it: config, environment, each rank's readings and
    facts, and how it failed."""

    source: Source
    config: AuditConfig
    engine: Engine
    environment: Environment
    ranks: tuple[RankRecord, ...]
    geometry: KvGeometry | None = None
    verify: Verify | None = None
    failure: Failure | None = None
    warnings: tuple[str, ...] = ()
    stated: Stated = Stated()
    graph_bytes_per_size: int | None = None
    serves_vllm: bool = True
    """False when there is no vLLM to pass flags to (the selftest): no safe serve flags."""
    planted_sizes: bool = False
    """The source planted known sizes: the report carries `accuracy` (empty when none was)."""
    verify_overrun_bytes: int | None = None
    """How far a verify's true peak went above the budget, when the record's own `verify` does
    not tell it (a plan carries its measured boot's); the safe flags keep that much back."""
    died_serving: Failure | None = None
    """An out-of-memory error after startup finished (a log's: while the boot served, not its own
    failure, which is None then): the KV figure left too little for serving (assemble.kv_not_served)."""


class BootSource(Protocol):
    """An engine's side of the assembly: it tells what one boot did."""

    def record(self) -> BootRecord: ...
