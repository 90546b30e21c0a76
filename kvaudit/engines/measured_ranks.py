"""Journal events → phase records and rank facts, and a rank's `MeasuredRank` for the assembly.
Pure Python: the supervisors use it on journals and collective_rpc results alike, the worker
uses it to size KV from what it measured."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvaudit.record import MeasuredRank
from kvaudit.schema import PHASE_ORDER, Phase, PhaseRecord, PhaseStatus, RankNode, Site

BOOT_FACTS = frozenset({
    # the rank's identity and environment (the `rank` event: audit.init_device, selftest/rank.py)
    "rank", "backend", "device_name", "driver", "cuda", "torch", "model_runner", "pid", "requested_bytes",
    "vllm_requested_bytes", "host", "node_ip", "node_rank", "local_rank", "device_index",
    # what the supervisors read beside the record: KV geometry, what vLLM resolved, warmups, verify
    "attention_backend", "block_size", "kv_bytes_per_block", "use_mla", "resolved", "amx_tiles", "prefill_probe",
    "gemm_caches",
    "warmup_attempts", "warmup_calls", "warmup_errors", "warmup_skipped_calls", "verify", "verify_true_peak_bytes",
    "verify_scenario_peaks", "sweep_error", "planted", "sizing",
    # kept in the journal for whoever reads it; the report derives its own (ledger.kv_budget, rank_ledger)
    "kv_budget", "kv_segment_rounding_bytes", "kvaudit_kv_available_bytes", "naive_kv_available_bytes",
    "graph_pool_retained_bytes", "graph_pool_measured_bytes",
})
"""The facts a rank journals besides its record's (record.JOURNAL_FACTS): every fact name a worker
writes or a supervisor reads is one of the two (tests/unit/test_record.py checks the source)."""

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
            named = all(isinstance(s.get(k), str) for k in ("phase", "owner", "site"))
            if nbytes is None or blocks is None or not named:
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


def measured_rank(folded: RankEvents, gmu: float | None = None, node: RankNode | None = None) -> MeasuredRank:
    """A rank's journal as the assembly's record (record.MeasuredRank reads the facts by its own
    fields); `gmu` where the rank stated none; `node`: where it ran (engines.vllm.nodes)."""
    return MeasuredRank.from_facts(folded.rank, tuple(folded.phases[p] for p in PHASE_ORDER if p in folded.phases),
                                   folded.facts, gpu_memory_utilization=gmu, sites=folded.site_records(), node=node)
