"""Node identity in a run's report: which node each rank ran on, and the rank another node
reported dead or lost (supervisor side: no torch, no vllm). The per-node summaries are the
assembly's (kvaudit.capacity.node_summaries)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvaudit.engines import measured_ranks
from kvaudit.engines.journal import stop_marker
from kvaudit.schema import PHASE_ORDER, Failure, FailureKind, RankNode


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def rank_nodes(folded: Sequence[measured_ranks.RankEvents], sources: Mapping[int, str]) -> dict[int, RankNode]:
    """Each rank's node: vLLM's node rank where the boot had one; otherwise nodes are numbered
    by (host, IP) in the order of their lowest rank. A rank that never said where it ran (it
    died before its first record) keeps only how its journal arrived."""
    keys: dict[tuple[str | None, str | None], int] = {}
    out = {}
    for f in sorted(folded, key=lambda x: x.rank):
        host, ip = _str(f.facts.get("host")), _str(f.facts.get("node_ip"))
        node_rank = f.get_int("node_rank")
        if node_rank is None and (host or ip):
            node_rank = keys.setdefault((host, ip), len(keys))
        elif node_rank is not None:
            keys.setdefault((host, ip), node_rank)
        out[f.rank] = RankNode(node_rank=node_rank, host=host, ip=ip, local_rank=f.get_int("local_rank"),
                               device_index=f.get_int("device_index"), journal=sources.get(f.rank))
    return out


def rank_gone(folded: Sequence[measured_ranks.RankEvents],
              events: Mapping[int, list[dict[str, Any]]]) -> Failure | None:
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
