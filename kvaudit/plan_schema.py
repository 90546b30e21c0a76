"""The planning schema, `kvaudit.plan/1`: what `kvaudit plan` predicts (kvaudit/plan.py makes it)
and how it is written as JSON, beside the predicted report (itself `kvaudit.report/1`).

Frozen dataclasses; integer bytes with the unit in the name; unknown is None."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kvaudit.schema import KnobDifference, Owner, Report, to_jsonable

PLAN_SCHEMA = "kvaudit.plan/1"
"""The `plan` section beside a predicted report (which is itself `kvaudit.report/1`)."""


def on_cpu(report: Report) -> bool:
    """The boot ran on vLLM's CPU backend (host memory: no caching allocator's segments)."""
    return (report.environment.device_name or "").startswith("CPU")


class How(StrEnum):
    """How a planned figure was obtained."""

    MEASURED = "measured"
    """The measured report's figure: the edit does not change it."""
    SCALED = "scaled"
    """A rule applied to measured points; `rule`, `points` and `error_bytes` say which and how sure."""
    UNKNOWN = "unknown"
    """The edit changes it in a way no measured point covers; `boot` says what to boot."""


class Knob(StrEnum):
    """What `--solve` solves for."""

    MAX_MODEL_LEN = "max-model-len"
    GMU = "gmu"
    MAX_NUM_SEQS = "max-num-seqs"


@dataclass(frozen=True)
class Figure:
    """One owner of one rank in the plan."""

    owner: Owner
    bytes: int | None
    how: How
    rule: str = ""
    """The rule, in words, when scaled; why, when unknown."""
    points: tuple[tuple[int, int], ...] = ()
    """Measured (knob value, bytes) points the rule used."""
    error_bytes: int = 0
    """How far the true figure may be from `bytes`, either way."""
    extrapolated: bool = False
    """The knob value lies outside the measured points: the error is the whole extrapolated part."""
    boot: str = ""
    """For unknown figures: the boot that would measure it."""


@dataclass(frozen=True)
class PlanRank:
    rank: int
    figures: tuple[Figure, ...]
    requested_bytes: int | None
    kv_available_bytes: int | None
    """Predicted KV figure kvaudit would size: requested − the planned sizing charge."""
    kv_error_bytes: int | None
    """Stated error of kv_available_bytes (sum of the figures' errors), None when unknown."""


@dataclass(frozen=True)
class Edits:
    """The knobs `kvaudit plan` may change; None leaves the measured value."""

    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    kv_cache_dtype: str | None = None
    enforce_eager: bool | None = None

    def changes(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Solution:
    knob: Knob
    value: int | float | None
    """The answer; None when nothing fits."""
    for_len: int | None = None
    note: str = ""


@dataclass(frozen=True)
class Plan:
    report: Report
    """The predicted report: source plan, schema kvaudit.report/1."""
    measured: Report
    edits: tuple[KnobDifference, ...]
    """Each edited knob: measured value (a) → planned value (b)."""
    ranks: tuple[PlanRank, ...]
    kv_error_bytes: int | None
    """Stated error of the predicted KV on the binding rank, None when KV is unknown."""
    kv_error_tokens: int | None
    boots_needed: tuple[str, ...] = ()
    """What to boot to learn what the plan could not say (deduplicated)."""
    notes: tuple[str, ...] = ()
    solution: Solution | None = None
    schema: str = PLAN_SCHEMA

    @property
    def counts_torch_other_variation(self) -> bool:
        """The stated error holds torch_other's boot-to-boot variation (_rank_figures: CUDA only)."""
        return not on_cpu(self.measured) and any(
            f.owner is Owner.TORCH_OTHER and f.bytes for r in self.ranks for f in r.figures)


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The predicted report's own keys, then `plan` (how each figure was obtained) and
    `measured` (the report it came from), so `kvaudit show` reads the file as a report."""
    data: dict[str, Any] = to_jsonable(plan.report)
    data["plan"] = {
        "schema": plan.schema, "edits": to_jsonable(plan.edits), "kv_error_bytes": plan.kv_error_bytes,
        "kv_error_tokens": plan.kv_error_tokens, "ranks": to_jsonable(plan.ranks),
        "boots_needed": list(plan.boots_needed), "notes": list(plan.notes),
        "solution": to_jsonable(plan.solution) if plan.solution is not None else None}
    data["measured"] = to_jsonable(plan.measured)
    return data


def plan_dumps(plan: Plan) -> str:
    return json.dumps(plan_to_json(plan), indent=2) + "\n"
