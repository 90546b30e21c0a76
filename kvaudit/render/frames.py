"""pandas views of reports and diffs, for the table, CSV and markdown reporters.

The dataclasses are the model; these frames are only a way to lay them out.
"""

from __future__ import annotations

import pandas as pd

from kvaudit.schema import DiffReport, Owner, Report
from kvaudit.render.summary import rank_name
from kvaudit.units import fmt_gib3


def owners_long(report: Report) -> pd.DataFrame:
    """One row per (rank, owner): the CSV form, exact integer bytes."""
    rows = [{"rank": r.rank, "tp_rank": r.tp_rank, "dcp_rank": r.dcp_rank, "owner": o.value,
             "bytes": r.owners.get(o)} for r in report.ranks for o in Owner]
    # object columns keep Python ints and None as they are: Int64 overflows past 2**63 (which the
    # loader accepts), and a float column would write 1234.0 next to a null.
    return pd.DataFrame(rows, columns=["rank", "tp_rank", "dcp_rank", "owner", "bytes"], dtype=object)


def owners_wide(report: Report) -> pd.DataFrame:
    """Owners (and the budget lines) as rows, ranks as columns, GiB text cells."""
    lines: list[tuple[str, list[int | None]]] = [(o.value, [r.owners.get(o) for r in report.ranks]) for o in Owner]
    lines += [
        ("requested", [r.requested_bytes for r in report.ranks]),
        ("device_total", [r.device_total_bytes for r in report.ranks]),
        ("others", [r.others_bytes for r in report.ranks]),
        ("kv_available (kvaudit)", [r.kv_available_bytes for r in report.ranks]),
        ("kv_available (naive)", [r.naive_kv_available_bytes for r in report.ranks]),
        ("graph_pool estimate", [r.graph_pool_estimate_bytes for r in report.ranks]),
        ("graph_pool actual", [r.graph_pool_actual_bytes for r in report.ranks]),
    ]
    # vLLM's own figures of the same boot, beside kvaudit's, where it states them
    vllm = [
        ("graph_pool (vLLM's estimate)", [r.vllm_graph_estimate_bytes for r in report.ranks]),
        ("kv_available (vLLM's own)", [r.vllm_kv_available_bytes for r in report.ranks]),
        ("kv-cache-memory (vLLM's)", [r.vllm_suggested_kv_cache_memory_bytes for r in report.ranks]),
    ]
    lines += [(name, values) for name, values in vllm if any(v is not None for v in values)]
    columns = [rank_name(r.rank, i) + (" *" if r.rank is not None and r.rank == report.capacity.binding_rank
                                        and len(report.ranks) > 1 else "")
               for i, r in enumerate(report.ranks)]
    data = {col: [fmt_gib3(values[i]) for _, values in lines] for i, col in enumerate(columns)}
    return pd.DataFrame(data, index=[name for name, _ in lines])


def diff_long(diff: DiffReport) -> pd.DataFrame:
    rows = [{"rank": "binding" if d.rank is None else d.rank, "owner": d.owner.value, "a_bytes": d.a_bytes,
             "b_bytes": d.b_bytes, "delta_bytes": d.delta_bytes} for d in diff.owners]
    return pd.DataFrame(rows, columns=["rank", "owner", "a_bytes", "b_bytes", "delta_bytes"], dtype=object)  # exact


def diff_binding(diff: DiffReport) -> pd.DataFrame:
    """Binding-rank owners: a, b and delta in GiB."""
    rows = [d for d in diff.owners if d.rank is None]
    # a list of columns, not a dict: two sides of the same label must stay two columns
    return pd.DataFrame([[fmt_gib3(d.a_bytes), fmt_gib3(d.b_bytes), fmt_gib3(d.delta_bytes, signed=True)]
                         for d in rows], columns=[diff.a_name, diff.b_name, "delta"],
                        index=[d.owner.value for d in rows])


def diff_ranks(diff: DiffReport) -> pd.DataFrame:
    """Per-rank deltas: owners as rows, ranks as columns."""
    ranks = sorted({d.rank for d in diff.owners if d.rank is not None})
    cells = {(d.owner, d.rank): d.delta_bytes for d in diff.owners if d.rank is not None}
    return pd.DataFrame({f"rank {r}": [fmt_gib3(cells.get((o, r)), signed=True) for o in Owner] for r in ranks},
                        index=[o.value for o in Owner])


def accuracy_frame(report: Report) -> pd.DataFrame:
    """Selftest: planted vs measured per owner per rank, error in bytes and percent."""
    from kvaudit.units import fmt_bytes
    rows = []
    for a in report.accuracy or ():
        known = a.measured_bytes is not None and a.planted_bytes is not None
        err = a.measured_bytes - a.planted_bytes if known else None
        rows.append({"rank": a.rank, "owner": a.owner.value, "planted": fmt_gib3(a.planted_bytes),
                     "measured": fmt_gib3(a.measured_bytes), "error": fmt_bytes(err, signed=True),
                     # nothing planted (0): an error in percent of nothing has no meaning
                     "error %": f"{100 * err / a.planted_bytes:+.3f}%" if err is not None and a.planted_bytes
                     else "—"})
    frame = pd.DataFrame(rows, columns=["rank", "owner", "planted", "measured", "error", "error %"])
    return frame.set_index(["owner"]) if rows else frame
