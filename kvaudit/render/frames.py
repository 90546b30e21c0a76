"""Views of reports and diffs, for the reporters: `Frame`s (labelled text tables) for the human
formats, pandas DataFrames for CSV.

The dataclasses are the model; these frames are only a way to lay them out. The human formats
need no pandas (it is most of a cold `kvaudit diff`'s start: imported only for CSV).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvaudit.render.summary import rank_name
from kvaudit.schema import DiffReport, Owner, Report
from kvaudit.units import fmt_gib3

if TYPE_CHECKING:
    import pandas as pd


class Row(tuple):
    """One row's cells."""

    def tolist(self) -> list[Any]:
        return list(self)


@dataclass(frozen=True)
class Frame:
    """A labelled table: row labels, column labels (repeats allowed: a diff of a file with itself
    has two columns of one name) and the cells, row by row. It answers the few DataFrame members
    the reporters read (columns, index, iterrows, itertuples)."""

    index: tuple[Any, ...]
    columns: tuple[Any, ...]
    rows: tuple[tuple[Any, ...], ...]

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]], *, columns: Sequence[Any], index: Sequence[Any] | None = None) -> Frame:
        return cls(tuple(index) if index is not None else tuple(range(len(rows))), tuple(columns),
                   tuple(tuple(r) for r in rows))

    def iterrows(self) -> Iterator[tuple[Any, Row]]:
        return ((name, Row(row)) for name, row in zip(self.index, self.rows))

    def itertuples(self, index: bool = False) -> Iterator[tuple[Any, ...]]:
        return ((name, *row) if index else tuple(row) for name, row in zip(self.index, self.rows))

    def __len__(self) -> int:
        return len(self.rows)


def owners_long(report: Report) -> pd.DataFrame:
    """One row per (rank, owner): the CSV form, exact integer bytes."""
    import pandas as pd
    rows = [{"rank": r.rank, "tp_rank": r.tp_rank, "dcp_rank": r.dcp_rank, "owner": o.value,
             "bytes": r.owners.get(o)} for r in report.ranks for o in Owner]
    # object columns keep Python ints and None as they are: Int64 overflows past 2**63 (which the
    # loader accepts), and a float column would write 1234.0 next to a null.
    return pd.DataFrame(rows, columns=["rank", "tp_rank", "dcp_rank", "owner", "bytes"], dtype=object)


def owners_wide(report: Report) -> Frame:
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
        # 0.28+ logs: weights + persistent + non_torch in one figure, which the owners above leave unsplit
        ("consumed (vLLM's: w+p+n)", [r.vllm_consumed_bytes for r in report.ranks]),
        # …and their peak activation, which holds the graph estimate applied (activation_peak is the rest)
        ("peak (vLLM's: act+graph)", [r.vllm_peak_activation_bytes for r in report.ranks]),
    ]
    lines += [(name, values) for name, values in vllm if any(v is not None for v in values)]
    columns = [rank_name(r.rank, i) + (" *" if r.rank is not None and r.rank == report.capacity.binding_rank
                                        and len(report.ranks) > 1 else "")
               for i, r in enumerate(report.ranks)]
    return Frame.of([[fmt_gib3(values[i]) for i in range(len(columns))] for _, values in lines], columns=columns,
                    index=[name for name, _ in lines])


def diff_long(diff: DiffReport) -> pd.DataFrame:
    import pandas as pd
    rows = [{"rank": "binding" if d.rank is None else d.rank, "owner": d.owner.value, "a_bytes": d.a_bytes,
             "b_bytes": d.b_bytes, "delta_bytes": d.delta_bytes} for d in diff.owners]
    return pd.DataFrame(rows, columns=["rank", "owner", "a_bytes", "b_bytes", "delta_bytes"], dtype=object)  # exact


SIZING_LABELS = {"requested": "requested", "consumed": "consumed (vLLM's: w+p+n)",
                 "graph_pool": "graph_pool charged (estimate)"}
"""Rows of a diff's binding table from `kv_sizing`: the budget, vLLM's consumed figure (as a report's owner table
names it), and what KV sizing charged the graph pool where that is not the pool's own figure (its capture)."""


def diff_binding(diff: DiffReport) -> Frame:
    """Binding-rank owners: a, b and delta in GiB; then the budget, vLLM's consumed figure and the graph pool's
    charge at sizing, where a side states them (`kv_sizing`: what KV moved with)."""
    rows = [(d.owner.value, d.a_bytes, d.b_bytes, d.delta_bytes) for d in diff.owners if d.rank is None]
    pool = next(((a, b) for name, a, b, _ in rows if name == "graph_pool"), (None, None))
    for s in diff.kv_sizing or ():
        shown = s.term in SIZING_LABELS and (s.a_bytes is not None or s.b_bytes is not None)
        if shown and not (s.term == "graph_pool" and (s.a_bytes, s.b_bytes) == pool):
            rows.append((SIZING_LABELS[s.term], s.a_bytes, s.b_bytes, s.delta_bytes))
    # a list of columns, not a dict: two sides of the same label must stay two columns
    return Frame.of([[fmt_gib3(a), fmt_gib3(b), fmt_gib3(delta, signed=True)] for _, a, b, delta in rows],
                    columns=[diff.a_name, diff.b_name, "delta"], index=[name for name, *_ in rows])


def diff_ranks(diff: DiffReport) -> Frame:
    """Per-rank deltas: owners as rows, ranks as columns."""
    ranks = sorted({d.rank for d in diff.owners if d.rank is not None})
    cells = {(d.owner, d.rank): d.delta_bytes for d in diff.owners if d.rank is not None}
    return Frame.of([[fmt_gib3(cells.get((o, r)), signed=True) for r in ranks] for o in Owner],
                    columns=[f"rank {r}" for r in ranks], index=[o.value for o in Owner])


def accuracy_frame(report: Report) -> Frame:
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
    columns = ["rank", "planted", "measured", "error", "error %"]  # the owner labels the rows
    return Frame.of([[row[c] for c in columns] for row in rows], columns=columns, index=[row["owner"] for row in rows])


VERIFY_COLUMNS = ("requests", "prompt", "tokens", "decode step", "true peak (GiB)", "slack", "outcome")


def verify_frame(report: Report) -> Frame:
    """`--verify`'s scenarios: their load, true peak and slack on the worst rank, the outcome."""
    from kvaudit.capacity import OVERCOMMIT_TOLERANCE_BYTES
    from kvaudit.units import fmt_bytes, fmt_tokens
    scenarios = (report.verify.scenarios or ()) if report.verify is not None else ()
    # a scenario a little over its budget passes inside the tolerance: said, so a negative slack beside "ok" reads
    within = f"ok, within {fmt_bytes(OVERCOMMIT_TOLERANCE_BYTES)}"
    return Frame.of([[fmt_tokens(s.requests), fmt_tokens(s.prompt_tokens), fmt_tokens(s.tokens),
                      fmt_tokens(s.step_tokens), fmt_gib3(s.true_peak_bytes), fmt_bytes(s.slack_bytes, signed=True),
                      ("FAILED" if not s.ok else within if (s.slack_bytes or 0) < 0 else "ok")] for s in scenarios],
                    columns=VERIFY_COLUMNS, index=[s.name.value for s in scenarios])


def repeat_frame(report: Report) -> Frame:
    """`--repeat`: per owner (rows) and rank (columns) the range over the boots, `min–max` in
    GiB (one figure where every boot agreed to the shown digits)."""
    repeat = report.repeat
    ranks = sorted({o.rank for o in repeat.owners}) if repeat is not None else []
    cells = {(o.owner, o.rank): o for o in repeat.owners} if repeat is not None else {}

    def cell(owner: Owner, rank: int) -> str:
        spread = cells.get((owner, rank))
        if spread is None:
            return fmt_gib3(None)
        low, high = (fmt_gib3(b) for b in (spread.min_bytes, spread.max_bytes))
        return low if low == high else f"{low}–{high}"
    return Frame.of([[cell(o, r) for r in ranks] for o in Owner], columns=[f"rank {r}" for r in ranks],
                    index=[o.value for o in Owner])
