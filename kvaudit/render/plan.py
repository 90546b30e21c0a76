"""`kvaudit plan` output, drawn by each format's reporter (`Reporter.plan`): the predicted report as
any report renders, then how each figure was obtained (table, markdown), one row per rank and
owner (csv), the whole plan (json), a page with the planned-vs-measured table (html), or the
predicted report's metrics (prom, `source="plan"`). The pieces those reporters use are here."""

from __future__ import annotations

import csv
from typing import TextIO

from kvaudit.plan_schema import Figure, How, Plan
from kvaudit.printable import one_line
from kvaudit.render import Format, printable_stream, reporter
from kvaudit.render.markdown_text import text as markdown_text
from kvaudit.units import fmt_bytes, fmt_gib3, fmt_tokens

KV_AVAILABLE_RULE = ("requested − the measured sizing charge, moved by each edited owner (error: the owners' alone, "
                     "before whole blocks)")
"""How a plan's per-rank kv_available is obtained, in the CSV's and the HTML page's rule column."""


def render_plan(plan: Plan, fmt: Format, out: TextIO, *, width: int | None = None) -> None:
    """A plan in `fmt`, through the one format dispatch (render.reporter: every format's
    reporter has a `plan`)."""
    reporter(fmt, width=width).plan(plan, out)


def write_plan_csv(plan: Plan, out: TextIO) -> None:
    """One row per rank and owner: bytes, how each figure was obtained, its error and points."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rank", "owner", "bytes", "how", "error_bytes", "extrapolated", "rule", "points", "boot"])
    for rank in plan.ranks:
        for f in rank.figures:  # one line a row: a newline in a report's string is escaped
            writer.writerow([rank.rank, f.owner.value, "" if f.bytes is None else f.bytes, f.how.value,
                             f.error_bytes, f.extrapolated, one_line(f.rule or ""), _points(f),
                             one_line(f.boot or "")])
        kv = "" if rank.kv_available_bytes is None else rank.kv_available_bytes
        writer.writerow([rank.rank, "kv_available", kv,
                         How.SCALED.value if rank.kv_available_bytes is not None else How.UNKNOWN.value,
                         "" if rank.kv_error_bytes is None else rank.kv_error_bytes, False,
                         KV_AVAILABLE_RULE, "", ""])


def write_plan_lines(plan: Plan, out: TextIO, *, markdown: bool) -> None:
    """After the predicted report: how each figure was obtained, one line each, data as data
    (render/sections.py); edits and notes carry the user's flags and the report's strings."""
    out = printable_stream(out)
    out.write("\n" + ("## " if markdown else "") + "plan: how each figure was obtained\n\n")
    for line in plan_lines(plan, markdown=markdown):
        out.write((markdown_text(one_line(line)) if markdown else one_line(line)) + "\n")


def _points(f: Figure) -> str:
    return " ".join(f"{x}:{b}" for x, b in f.points)


def figure_text(f: Figure) -> str:
    text = f.how.value if f.bytes is None else f"{fmt_gib3(f.bytes)} GiB {f.how.value}"
    if f.how is How.SCALED:
        text += f" ± {fmt_bytes(f.error_bytes)}" + (" (extrapolated)" if f.extrapolated else "")
    if f.rule:
        text += f": {f.rule}"
    if f.points:
        text += " [measured " + ", ".join(f"{x} → {fmt_bytes(b)}" for x, b in f.points) + "]"
    if f.how is How.MEASURED and f.error_bytes:
        text += f" (± {fmt_bytes(f.error_bytes)})"
    if f.boot:
        text += f"; boot to learn it: {f.boot}"
    return text


def plan_lines(plan: Plan, *, markdown: bool = False) -> list[str]:
    bullet = "- " if markdown else "  "
    lines = []
    if plan.edits:
        lines.append("edits: " + ", ".join(f"{e.knob} {e.a} → {e.b}" for e in plan.edits))
    else:
        lines.append("edits: none (the measured config, re-derived)")
    for rank in plan.ranks:
        lines.append(f"rank {rank.rank}:")
        for f in rank.figures:
            lines.append(f"{bullet}{f.owner.value}: {figure_text(f)}")
        # the owners' error alone: the binding rank's line below adds the rounding to whole blocks
        kv = ("unknown" if rank.kv_available_bytes is None
              else f"{fmt_gib3(rank.kv_available_bytes)} GiB ± {fmt_bytes(rank.kv_error_bytes)} from the owners")
        lines.append(f"{bullet}kv_available: {kv}")
    cap = plan.report.capacity
    if plan.kv_error_bytes is not None:
        variation = ("torch_other's boot-to-boot variation included, the other measured owners' not"
                     if plan.counts_torch_other_variation
                     else "boot-to-boot variation of the measured owners not included")
        lines.append(f"KV on the binding rank: {fmt_bytes(cap.kv_available_bytes)} ± {fmt_bytes(plan.kv_error_bytes)}"
                     f" (± {fmt_tokens(plan.kv_error_tokens)} tokens; whole blocks included; {variation})")
    shown = set(plan.report.warnings)  # the predicted report's notes were drawn above it: not twice
    for note in plan.notes:
        if f"note: {note}" not in shown:
            lines.append(f"note: {note}")
    for boot in plan.boots_needed:
        lines.append(f"to learn what is unknown, boot: {boot}")
    if plan.solution is not None:
        s = plan.solution
        answer = "nothing fits" if s.value is None else f"{s.value}"
        lines.append(f"solve {s.knob.value}" + (f" for {s.for_len} tokens" if s.for_len else "")
                     + f": {answer}" + (f" ({s.note})" if s.note else ""))
    return lines
