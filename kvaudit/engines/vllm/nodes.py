"""Node identity in a run's report: which node each rank ran on, a summary per node, and the
rank another node reported dead or lost (supervisor side: no torch, no vllm)."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from kvaudit.engines import records
from kvaudit.engines.relay import stop_marker
from kvaudit.schema import Failure, FailureKind, NodeSummary, PHASE_ORDER, RankNode, RankReport, Report


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def with_nodes(ranks: Sequence[RankReport], folded: Sequence[records.RankEvents],
               sources: dict[int, str]) -> list[RankReport]:
    """Each rank's node: vLLM's node rank where the boot had one; otherwise nodes are numbered
    by (host, IP) in the order of their lowest rank. A rank that never said where it ran (it
    died before its first record) keeps only how its journal arrived."""
    facts = {f.rank: f for f in folded}
    keys: dict[tuple[str | None, str | None], int] = {}
    out = []
    for r in sorted(ranks, key=lambda x: x.rank):
        f = facts.get(r.rank)
        host, ip = (_str(f.facts.get("host")), _str(f.facts.get("node_ip"))) if f else (None, None)
        node_rank = f.get_int("node_rank") if f else None
        if node_rank is None and (host or ip):
            node_rank = keys.setdefault((host, ip), len(keys))
        elif node_rank is not None:
            keys.setdefault((host, ip), node_rank)
        node = RankNode(node_rank=node_rank, host=host, ip=ip,
                        local_rank=f.get_int("local_rank") if f else None,
                        device_index=f.get_int("device_index") if f else None, journal=sources.get(r.rank))
        out.append(dataclasses.replace(r, node=node))
    return out


def _sub(a: int | None, b: int | None) -> int | None:
    return a - b if a is not None and b is not None else None


def summarise(report: Report) -> Report:
    """The report with `nodes`: per node its ranks, others, physical headroom and binding rank."""
    groups: dict[int, list[RankReport]] = {}
    for r in report.ranks:
        if r.node is not None and r.node.node_rank is not None:
            groups.setdefault(r.node.node_rank, []).append(r)
    if not groups:
        return report
    summaries = []
    for node_rank, members in sorted(groups.items()):
        others = [r.others_bytes for r in members]
        headrooms = [_sub(r.free_at_start_bytes, r.requested_bytes) for r in members]
        sized = [r for r in members if r.kv_available_bytes is not None]
        binding = min(sized, key=lambda r: (r.kv_available_bytes, r.rank)) if sized else None
        summaries.append(NodeSummary(
            node_rank=node_rank, host=members[0].node.host, ip=members[0].node.ip,
            ranks=tuple(r.rank for r in members),
            others_bytes=max(others) if None not in others else None,
            physical_headroom_bytes=min(headrooms) if None not in headrooms else None,
            binding_rank=binding.rank if binding else None,
            kv_available_bytes=binding.kv_available_bytes if binding else None))
    return dataclasses.replace(report, nodes=tuple(summaries))


def rank_gone(folded: Sequence[records.RankEvents], events: dict[int, list[dict[str, Any]]]) -> Failure | None:
    """The first rank whose journal ends with a died/lost marker (its node saw it die, or its
    heartbeat stopped): the boot failed there, whatever the other ranks then raised."""
    by_rank = {f.rank: f for f in folded}
    gone = []
    for rank, evs in events.items():
        marker = stop_marker(evs)
        if marker is not None:
            gone.append((marker.get("t") if isinstance(marker.get("t"), (int, float)) else float("inf"), rank, marker))
    if not gone:
        return None
    _, rank, marker = min(gone)
    f = by_rank.get(rank)
    phase = f.died_in if f is not None else None
    if phase is None and f is not None and f.phases:  # it died between phases
        done = max(PHASE_ORDER.index(p) for p in f.phases)
        phase = PHASE_ORDER[done + 1] if done + 1 < len(PHASE_ORDER) else None
    host = _str(f.facts.get("host")) if f is not None else _str(marker.get("host"))
    node = f.get_int("node_rank") if f is not None else None
    where = " on " + ", ".join(x for x in (f"node {node}" if node is not None else "",
                                           f"host {host}" if host else "") if x) if (host or node is not None) else ""
    if marker.get("type") == "died":
        how = (f"killed by {marker['signal']}" if marker.get("signal")
               else f"exit code {marker['exit_code']}" if marker.get("exit_code") is not None else "its process ended")
        message = (f"rank {rank}{where} died" + (f" in {phase.value}" if phase else "") + f" ({how}), as its node "
                   f"reported through vLLM's distributed store; the other ranks were stopped")
    else:
        message = (f"rank {rank}{where} was lost" + (f" in {phase.value}" if phase else "")
                   + f": its heartbeat in vLLM's distributed store stopped for {marker.get('silent_s')} s (its node "
                   f"or the network went away); the other ranks were stopped")
    return Failure(phase, rank, FailureKind.WORKER_DIED, message)
