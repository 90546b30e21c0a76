"""Journal events → phase records and rank facts, and a rank's `MeasuredRank` for the assembly.
Pure Python: the supervisors use it on journals and collective_rpc results alike, the worker
uses it to size KV from what it measured."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kvaudit.assemble import MeasuredRank
from kvaudit.schema import PHASE_ORDER, Phase, PhaseRecord, PhaseStatus, RankNode, Site, SweepPoint

_MEASURES = ("torch_allocated_bytes", "torch_reserved_bytes", "torch_peak_allocated_bytes", "device_used_bytes",
             "graph_pool_bytes", "torch_peak_reserved_bytes")


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def phase_named(value: Any) -> Phase | None:
    """The phase a journal names, or None for anything else."""
    try:
        return Phase(value)
    except ValueError:
        return None


def phase_record(event: Mapping[str, Any]) -> PhaseRecord | None:
    try:
        name = Phase(event.get("name"))
        status = PhaseStatus(event.get("status", "ok"))
    except ValueError:
        return None
    seconds = event.get("seconds")
    detail = event.get("detail")
    return PhaseRecord(name=name, status=status, seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
                       detail=detail if isinstance(detail, str) else None,
                       **{k: _int(event.get(k)) for k in _MEASURES})


def phase_records(events: Iterable[Mapping[str, Any]]) -> dict[Phase, PhaseRecord]:
    """The last record of each phase (a retried phase keeps its final outcome)."""
    out: dict[Phase, PhaseRecord] = {}
    for event in events:
        if event.get("type") == "phase":
            record = phase_record(event)
            if record is not None:
                out[record.name] = record
    return out


@dataclass
class RankEvents:
    """Everything one rank's journal says, folded: its identity, facts and phases, the phase it
    was in when it stopped, and its errors."""

    rank: int
    facts: dict[str, Any] = field(default_factory=dict)
    phases: dict[Phase, PhaseRecord] = field(default_factory=dict)
    started: Phase | None = None
    """The last phase that started; if it has no record the rank died inside it."""
    errors: list[dict[str, Any]] = field(default_factory=list)
    sites: list[dict[str, Any]] | None = None
    """`--trace`: the site aggregates of every phase (None when the rank was not traced)."""

    @property
    def died_in(self) -> Phase | None:
        return self.started if self.started is not None and self.started not in self.phases else None

    def get_int(self, key: str) -> int | None:
        return _int(self.facts.get(key))

    def site_records(self) -> tuple[Site, ...] | None:
        """The traced sites as report records (malformed entries skipped: journals are data)."""
        if self.sites is None:
            return None
        out = []
        for s in self.sites:
            nbytes, blocks = _int(s.get("bytes")), _int(s.get("blocks"))
            if nbytes is None or blocks is None or not all(isinstance(s.get(k), str) for k in ("phase", "owner", "site")):
                continue
            out.append(Site(phase=s["phase"], owner=s["owner"], site=s["site"], bytes=nbytes, blocks=blocks,
                            at="peak" if s.get("at") == "peak" else "end"))
        return tuple(out)


def fold(rank: int, events: Iterable[Mapping[str, Any]]) -> RankEvents:
    out = RankEvents(rank=rank)
    for event in events:
        kind = event.get("type")
        if kind in ("rank", "fact"):
            out.facts.update({k: v for k, v in event.items() if k not in ("type", "t")})
        elif kind == "start":
            out.started = phase_named(event.get("phase")) or out.started
        elif kind == "phase":
            record = phase_record(event)
            if record is not None:
                out.phases[record.name] = record
                if isinstance(event.get("sites"), list):
                    # a retried phase keeps only its final aggregates
                    out.sites = [s for s in (out.sites or []) if s.get("phase") != record.name.value]
                    out.sites += [s for s in event["sites"] if isinstance(s, dict)]
        elif kind == "error":
            out.errors.append(dict(event))
    return out


def _ints(value: Any) -> tuple[int, ...] | None:
    """A list of positive integers from a fact, or None (journals are data)."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return None
    return tuple(value)


def _sweep(value: Any) -> tuple[SweepPoint, ...] | None:
    """The worker's sweep fact as report records (malformed entries skipped: journals are data)."""
    if not isinstance(value, list):
        return None
    points = []
    for p in value:
        tokens, peak = (p.get("tokens"), p.get("activation_peak_bytes")) if isinstance(p, dict) else (None, None)
        if isinstance(tokens, int) and tokens > 0 and isinstance(peak, int):
            seconds = p.get("seconds")
            points.append(SweepPoint(tokens, peak, float(seconds) if isinstance(seconds, (int, float)) else None))
    return tuple(sorted(points, key=lambda x: x.tokens)) or None


def measured_rank(folded: RankEvents, gmu: float | None = None, node: RankNode | None = None) -> MeasuredRank:
    """A rank's journal as the assembly's record; `gmu` where the rank stated none; `node`:
    where it ran (engines.vllm.nodes)."""
    f = folded.facts
    dtype = f.get("kv_cache_spec_dtype")
    return MeasuredRank(
        folded.rank, tuple(folded.phases[p] for p in PHASE_ORDER if p in folded.phases),
        tp_rank=folded.get_int("tp_rank"), dcp_rank=folded.get_int("dcp_rank"),
        device_total_bytes=folded.get_int("device_total_bytes"),
        gpu_memory_utilization=f.get("gpu_memory_utilization", gmu), others_bytes=folded.get_int("others_bytes"),
        graph_pool_estimate_bytes=folded.get_int("graph_pool_estimate_bytes"),
        kv_cache_bytes=folded.get_int("kv_cache_bytes"), kv_available_bytes=folded.get_int("kv_available_bytes"),
        kv_blocks=folded.get_int("kv_blocks"), deferred_steps=tuple(f.get("deferred_steps") or ()),
        vllm_kv_available_bytes=folded.get_int("vllm_kv_available_bytes"), sites=folded.site_records(),
        vllm_graph_estimate_bytes=folded.get_int("vllm_graph_estimate_bytes"),
        vllm_suggested_kv_cache_memory_bytes=folded.get_int("vllm_suggested_kv_cache_memory_bytes"),
        graph_capture_transient_bytes=folded.get_int("graph_capture_transient_bytes"), sweep=_sweep(f.get("sweep")),
        prefill_probe_transient_bytes=folded.get_int("prefill_probe_transient_bytes"),
        kv_cache_spec_dtype=dtype if isinstance(dtype, str) else None, node=node,
        kv_tensor_block_bytes=_ints(f.get("kv_tensor_block_bytes")),
        kv_structures_bytes=folded.get_int("kv_structures_reserve_bytes") or 0)
