"""Reading a report (`kvaudit.report/1`) or a diff (`kvaudit.diff/1`) back from JSON, every value
checked.

Strict about the stable keys of docs/design.md (report contract) and lenient about everything
else: any JSON document that carries them is a report, extra keys are ignored, and the extensions
of kvaudit/schema.py are optional. A document that is not one gives a one-line `BadInputError`
with the path to the first bad key (`report.ranks[0].owners.weights: expected an integer …`); so
does a report whose fields name ranks it does not have (`_check_rank_references`).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from dataclasses import fields
from enum import Enum
from typing import Any

from kvaudit.config import (
    BOOL_KEYS,
    FLOAT_KEYS,
    INT_KEYS,
    INT_LIST_KEYS,
    MODELLED_KEYS,
    STABLE_KEYS,
    STR_KEYS,
    AuditConfig,
    config_from_json,
)
from kvaudit.errors import BadInputError
from kvaudit.schema import (
    DIFF_SCHEMA,
    RANK_STABLE_KEYS,
    REPORT_SCHEMA,
    STABLE_OWNERS,
    VERIFY_TORCH_KEYS,
    AccuracyEntry,
    BudgetTerm,
    Capacity,
    DiffReport,
    Engine,
    EnvDifference,
    Environment,
    Failure,
    FailureKind,
    KnobDifference,
    KvSizing,
    KvTerm,
    Lever,
    NodeSummary,
    Owner,
    OwnerDelta,
    OwnerSpread,
    Phase,
    PhaseRecord,
    PhaseStatus,
    RankNode,
    RankReport,
    Repeat,
    RepeatBoot,
    Report,
    Scenario,
    Site,
    SiteDelta,
    SizingDelta,
    Source,
    SweepPoint,
    Verdict,
    Verify,
    VerifyRank,
    VerifyScenario,
)
from kvaudit.units import INT_LIMIT


class _JsonObject:
    """A JSON object being read, with the path to it for error messages."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise BadInputError(f"{where}: expected an object, got {_kind(data)}")
        self.data, self.where = data, where

    def value(self, key: str, required: bool, nullable: bool = True) -> Any:
        """The raw value of `key`; None where it is absent (and may be) or null."""
        if key not in self.data:
            if required:
                raise BadInputError(f"{self.where}: missing key {key!r}")
            return None
        v = self.data[key]
        # Unknown numbers and strings are null, but a section or a name the report is built
        # around is not: null there would crash the loader or every renderer downstream.
        if v is None and required and not nullable:
            raise BadInputError(f"{self.where}.{key}: must not be null")
        return v

    def _bad(self, key: str, want: str, value: Any) -> BadInputError:
        return BadInputError(f"{self.where}.{key}: expected {want}, got {_kind(value)}")

    def int(self, key: str, required: bool = True, least: int | None = None) -> int | None:
        """An integer within ±INT_LIMIT (no count or size of a boot is larger, and every one fits a
        float), at least `least` where given; None where null."""
        v = self.value(key, required)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._bad(key, "an integer or null", v)
        _check_int(v, f"{self.where}.{key}", least)
        return v

    def number(self, key: str, required: bool = True) -> float | None:
        v = self.value(key, required)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self._bad(key, "a number or null", v)
        # json.loads reads NaN, Infinity and 1e999 as non-finite floats, which json.dumps would
        # write back as non-JSON literals; an integer beyond float range cannot become a float.
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f):
            raise BadInputError(f"{self.where}.{key}: expected a number or null, got {_short(v)} (not finite)")
        return f

    def str(self, key: str, required: bool = True) -> str | None:
        v = self.value(key, required)
        if v is not None and not isinstance(v, str):
            raise self._bad(key, "a string or null", v)
        return v

    def bool(self, key: str, required: bool = True) -> bool | None:
        v = self.value(key, required)
        if v is not None and not isinstance(v, bool):
            raise self._bad(key, "true, false or null", v)
        return v

    def enum(self, key: str, kind: type[Enum], required: bool = True, nullable: bool = False) -> Any:
        v = self.value(key, required, nullable)
        if v is None:
            return None
        try:
            return kind(v)
        except (ValueError, TypeError):
            allowed = ", ".join(str(m.value) for m in kind)  # type: ignore[attr-defined]
            raise BadInputError(f"{self.where}.{key}: expected one of {allowed}, got {_short(v)}") from None

    def list(self, key: str, required: bool = True) -> list[Any] | None:
        v = self.value(key, required)
        if v is not None and not isinstance(v, list):
            raise self._bad(key, "a list or null", v)
        return v

    def child(self, key: str, required: bool = True, nullable: bool = False) -> _JsonObject | None:
        v = self.value(key, required, nullable)
        return None if v is None else _JsonObject(v, f"{self.where}.{key}")

    def children(self, key: str, required: bool = True) -> list[_JsonObject]:
        items = self.list(key, required) or []
        return [_JsonObject(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(items)]

    def integers(self, key: str, required: bool = True) -> list[int] | None:
        items = self.list(key, required)
        if items is not None and not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
            raise BadInputError(f"{self.where}.{key}: expected a list of integers")
        for i, item in enumerate(items or ()):
            _check_int(item, f"{self.where}.{key}[{i}]", None)
        return items

    def strings(self, key: str) -> tuple[str, ...]:
        items = self.list(key, required=False) or []
        if not all(isinstance(s, str) for s in items):
            raise BadInputError(f"{self.where}.{key}: expected a list of strings")
        return tuple(items)


def _check_int(v: int, where: str, least: int | None) -> None:
    if abs(v) > INT_LIMIT:
        raise BadInputError(f"{where}: expected an integer within ±2^128, got one of {v.bit_length()} bits")
    if least is not None and v < least:
        raise BadInputError(f"{where}: expected an integer of at least {least} or null, got {v}")


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: f"the string {_short(v)}",
            list: "a list", dict: "an object"}.get(type(v), type(v).__name__)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _phase_record(node: _JsonObject) -> PhaseRecord:
    return PhaseRecord(
        name=node.enum("name", Phase), status=node.enum("status", PhaseStatus), seconds=node.number("seconds"),
        torch_allocated_bytes=node.int("torch_allocated_bytes"), torch_reserved_bytes=node.int("torch_reserved_bytes"),
        torch_peak_allocated_bytes=node.int("torch_peak_allocated_bytes"),
        device_used_bytes=node.int("device_used_bytes"), detail=node.str("detail"),
        graph_pool_bytes=node.int("graph_pool_bytes", required=False),
        torch_peak_reserved_bytes=node.int("torch_peak_reserved_bytes", required=False))


def _owners(node: _JsonObject) -> dict[Owner, int | None]:
    for key in node.data:
        if key not in Owner.__members__.values():
            raise BadInputError(f"{node.where}: unknown owner {_short(key)}")
    return {owner: node.int(owner.value, required=owner in STABLE_OWNERS) for owner in Owner}


def _rank_report(node: _JsonObject) -> RankReport:
    """A rank, read field by field as RankReport declares them: the scalars by their declared type
    (required where docs/design.md makes them stable), the rest by `_RANK_READERS`."""
    rank = RankReport(**{name: read(node) for name, read in _RANK_FIELDS.items()})
    _check_kv_budget(rank, node.where)
    return rank


def _scalar_reader(name: str, kind: Any) -> Callable[[_JsonObject], Any]:
    required = name in RANK_STABLE_KEYS
    if kind == int | None:
        return lambda node: node.int(name, required=required)
    if kind == str | None:
        return lambda node: node.str(name, required=required)
    if kind == float | None:
        return lambda node: node.number(name, required=required)
    if kind == bool | None:
        return lambda node: node.bool(name, required=required)
    raise TypeError(f"RankReport.{name}: no reader for {kind}; add one to validate._RANK_READERS")


_RANK_READERS: dict[str, Callable[[_JsonObject], Any]] = {
    "rank": lambda node: node.int("rank", least=0),
    "owners": lambda node: _owners(node.child("owners")),
    "phases": lambda node: tuple(_phase_record(p) for p in node.children("phases")),
    "deferred_steps": lambda node: node.strings("deferred_steps"),
    "sites": lambda node: _sites(node),
    "sweep": lambda node: _sweep(node),
    "node": lambda node: _rank_node(node.child("node", required=False, nullable=True)),
    "kv_tensor_block_bytes": lambda node: _positive_ints(node, "kv_tensor_block_bytes"),
    "kv_budget": lambda node: _kv_budget(node),
}
"""RankReport's fields that are not a plain scalar, each with its reader."""

_RANK_TYPES = typing.get_type_hints(RankReport)
_RANK_FIELDS = {f.name: _RANK_READERS.get(f.name) or _scalar_reader(f.name, _RANK_TYPES[f.name])
                for f in fields(RankReport)}
"""Every field of RankReport with its reader, built once: a new scalar field is read with no line here."""


def _kv_budget(node: _JsonObject) -> tuple[KvTerm, ...] | None:
    """The rank's `kv_budget` (an extension: absent in older reports and in logs' and plans')."""
    if node.list("kv_budget", required=False) is None:
        return None
    terms = []
    for t in node.children("kv_budget"):
        nbytes = t.int("bytes")
        if nbytes is None:
            raise BadInputError(f"{t.where}.bytes: must not be null")
        terms.append(KvTerm(term=t.enum("term", BudgetTerm), bytes=nbytes))
    return tuple(terms)


def _check_kv_budget(rank: RankReport, where: str) -> None:
    """A budget adds up: its terms sum to the rank's owners.kv_cache (to its kv_available_bytes
    where vLLM allocated none), and it starts from the requested budget."""
    if rank.kv_budget is None:
        return
    total = sum(t.bytes for t in rank.kv_budget)
    kv, key = rank.owners.get(Owner.KV_CACHE), "owners.kv_cache"
    if kv is None:
        kv, key = rank.kv_available_bytes, "kv_available_bytes"
    if kv is not None and total != kv:
        raise BadInputError(f"{where}.kv_budget: its terms sum to {total} bytes but {key} is {kv} "
                            f"({total - kv:+d}): the KV budget does not add up")
    first = rank.kv_budget[0] if rank.kv_budget else None
    if first is None or first.term is not BudgetTerm.REQUESTED or (
            rank.requested_bytes is not None and first.bytes != rank.requested_bytes):
        raise BadInputError(f"{where}.kv_budget: expected its first term to be the requested budget"
                            + (f" ({rank.requested_bytes} bytes)" if rank.requested_bytes is not None else ""))


def _positive_ints(node: _JsonObject, key: str) -> tuple[int, ...] | None:
    items = node.integers(key, required=False)
    if items is None:
        return None
    if not items or any(i <= 0 for i in items):
        raise BadInputError(f"{node.where}.{key}: expected a non-empty list of positive integers")
    return tuple(items)


JOURNAL_SOURCES = ("rpc", "file", "relay")
"""How a rank's record reached a run's report (RankNode.journal)."""


def _rank_node(node: _JsonObject | None) -> RankNode | None:
    if node is None:
        return None
    journal = node.str("journal", required=False)
    if journal not in (None, *JOURNAL_SOURCES):
        raise BadInputError(f"{node.where}.journal: expected rpc, file, relay or null, got {_short(journal)}")
    return RankNode(node_rank=node.int("node_rank", required=False), host=node.str("host", required=False),
                    ip=node.str("ip", required=False), local_rank=node.int("local_rank", required=False),
                    device_index=node.int("device_index", required=False), journal=journal)


def _nodes(node: _JsonObject) -> tuple[NodeSummary, ...] | None:
    if node.list("nodes", required=False) is None:
        return None
    summaries = []
    for summary in node.children("nodes"):
        node_rank = summary.int("node_rank")
        if node_rank is None:
            raise BadInputError(f"{summary.where}.node_rank: must not be null")
        summaries.append(NodeSummary(
            node_rank=node_rank, host=summary.str("host"), ip=summary.str("ip"),
            ranks=tuple(summary.integers("ranks") or ()), others_bytes=summary.int("others_bytes"),
            physical_headroom_bytes=summary.int("physical_headroom_bytes"),
            binding_rank=summary.int("binding_rank"), kv_available_bytes=summary.int("kv_available_bytes")))
    return tuple(summaries)


def _sweep(node: _JsonObject) -> tuple[SweepPoint, ...] | None:
    if node.list("sweep", required=False) is None:
        return None
    points = []
    for point in node.children("sweep"):
        tokens, peak = point.int("tokens"), point.int("activation_peak_bytes")
        if tokens is None or tokens < 1 or peak is None:
            raise BadInputError(f"{point.where}: expected tokens ≥ 1 and activation_peak_bytes, not null")
        points.append(SweepPoint(tokens=tokens, activation_peak_bytes=peak,
                                 seconds=point.number("seconds", required=False)))
    return tuple(sorted(points, key=lambda x: x.tokens))


def _sites(node: _JsonObject) -> tuple[Site, ...] | None:
    if node.list("sites", required=False) is None:
        return None
    sites = []
    for site in node.children("sites"):
        at = site.str("at", required=False) or "end"
        if at not in ("end", "peak"):
            raise BadInputError(f"{site.where}.at: expected end or peak, got {_short(at)}")
        sites.append(Site(phase=site.str("phase"), owner=site.str("owner"), site=site.str("site"),
                          bytes=site.int("bytes"), blocks=site.int("blocks"), at=at))
    return tuple(sites)


def _lever(node: _JsonObject) -> Lever:
    return Lever(name=node.str("name"), flag=node.str("flag"), frees_bytes=node.int("frees_bytes"),
                 frees_tokens=node.int("frees_tokens"), note=node.str("note", required=False) or "")


def _capacity(node: _JsonObject) -> Capacity:
    return Capacity(
        kv_available_bytes=node.int("kv_available_bytes"), binding_rank=node.int("binding_rank"),
        kv_tokens=node.int("kv_tokens"), kv_needed_bytes=node.int("kv_needed_bytes"),
        max_model_len_fits=node.bool("max_model_len_fits"),
        max_feasible_model_len=node.int("max_feasible_model_len"), gmu_needed=node.number("gmu_needed"),
        physical_headroom_bytes=node.int("physical_headroom_bytes"),
        naive_kv_available_bytes=node.int("naive_kv_available_bytes"),
        safe_serve_flags=node.strings("safe_serve_flags"),
        safe_serve_env=node.strings("safe_serve_env") if node.value("safe_serve_env", False) is not None else None,
        kv_bytes_per_block=node.int("kv_bytes_per_block", required=False, least=1),
        block_size=node.int("block_size", required=False, least=1),
        tokens_per_block=node.int("tokens_per_block", required=False, least=1),
        over_allocation_bytes=node.int("over_allocation_bytes", required=False),
        levers=tuple(_lever(x) for x in node.children("levers", required=False)),
        kv_not_served=node.str("kv_not_served", required=False))


def _verify_ranks(node: _JsonObject) -> tuple[VerifyRank, ...]:
    return tuple(VerifyRank(rank=r.int("rank"), true_peak_bytes=r.int("true_peak_bytes"),
                            slack_bytes=r.int("slack_bytes"),
                            **{k: r.int(k, required=False, least=0) for k in VERIFY_TORCH_KEYS})
                 for r in node.children("ranks", required=False))


def _verify(node: _JsonObject) -> Verify:
    return Verify(
        ok=bool(node.bool("ok")), prompt_tokens=node.int("prompt_tokens"),
        true_peak_bytes=node.int("true_peak_bytes"), slack_bytes=node.int("slack_bytes"), error=node.str("error"),
        decode_tokens=node.int("decode_tokens", required=False), repeats=node.int("repeats", required=False),
        oom_count=node.int("oom_count", required=False), ranks=_verify_ranks(node),
        scenarios=_scenarios(node))


def _scenarios(node: _JsonObject) -> tuple[VerifyScenario, ...] | None:
    if node.list("scenarios", required=False) is None:
        return None
    out = []
    for s in node.children("scenarios"):
        ok = s.bool("ok")
        if ok is None:
            raise BadInputError(f"{s.where}.ok: must not be null")
        out.append(VerifyScenario(
            name=s.enum("name", Scenario), ok=ok, requests=s.int("requests", required=False, least=0),
            tokens=s.int("tokens", required=False, least=0), prompt_tokens=s.int("prompt_tokens", required=False),
            decode_tokens=s.int("decode_tokens", required=False), step_tokens=s.int("step_tokens", required=False),
            draft_tokens=s.int("draft_tokens", required=False), sampling=s.str("sampling", required=False),
            true_peak_bytes=s.int("true_peak_bytes", required=False), slack_bytes=s.int("slack_bytes", required=False),
            error=s.str("error", required=False), ranks=_verify_ranks(s), seconds=s.number("seconds", required=False)))
    return tuple(out)


def _repeat(node: _JsonObject | None) -> Repeat | None:
    if node is None:
        return None
    boots, worst, cold = node.int("boots", least=1), node.int("worst_boot", least=1), node.bool("cold")
    if boots is None or worst is None or cold is None:
        raise BadInputError(f"{node.where}: boots, worst_boot and cold must not be null")
    runs = []
    for r in node.children("runs", required=False):
        boot = r.int("boot", least=1)
        if boot is None:
            raise BadInputError(f"{r.where}.boot: must not be null")
        runs.append(RepeatBoot(boot=boot, verdict=r.enum("verdict", Verdict),
                               kv_tokens=r.int("kv_tokens", required=False),
                               kv_available_bytes=r.int("kv_available_bytes", required=False),
                               safe_kv_cache_memory_bytes=r.int("safe_kv_cache_memory_bytes", required=False),
                               verify_slack_bytes=r.int("verify_slack_bytes", required=False),
                               failure=r.str("failure", required=False),
                               compile_cache=r.str("compile_cache", required=False)))
    owners = []
    for o in node.children("owners", required=False):
        rank = o.int("rank", least=0)
        if rank is None:
            raise BadInputError(f"{o.where}.rank: must not be null")
        owners.append(OwnerSpread(rank=rank, owner=o.enum("owner", Owner), min_bytes=o.int("min_bytes"),
                                  median_bytes=o.int("median_bytes"), max_bytes=o.int("max_bytes")))
    if len(runs) > boots or any(r.boot > boots for r in runs) or worst > boots:
        raise BadInputError(f"{node.where}: names a boot above boots ({boots})")
    if runs and worst not in {r.boot for r in runs}:
        raise BadInputError(f"{node.where}.worst_boot: names boot {worst}, which is not one of runs")
    return Repeat(boots=boots, cold=cold, worst_boot=worst, runs=tuple(runs),
                  kv_tokens_min=node.int("kv_tokens_min", required=False),
                  kv_tokens_median=node.int("kv_tokens_median", required=False),
                  kv_tokens_max=node.int("kv_tokens_max", required=False), owners=tuple(owners))


def _config(node: _JsonObject) -> AuditConfig:
    for key in STABLE_KEYS:
        node.value(key, required=True)
    for key in STR_KEYS:
        node.str(key, required=False)
    for key in INT_KEYS:
        node.int(key, required=key in STABLE_KEYS)
    for key in FLOAT_KEYS:
        node.number(key, required=key in STABLE_KEYS)
    for key in BOOL_KEYS:
        node.bool(key, required=key in STABLE_KEYS)
    for key in INT_LIST_KEYS:
        node.integers(key, required=key in STABLE_KEYS)
    extra = node.child("extra_args", required=False)
    data = {k: node.data.get(k) for k in MODELLED_KEYS if k in node.data}
    data["extra_args"] = extra.data if extra else {}
    return config_from_json(data)


def report_from_json(data: Any, where: str = "report") -> Report:
    """Parse a `kvaudit.report/1` document; raises BadInputError with the path to the first problem."""
    if not isinstance(data, dict):  # said as the other inputs that are no report are (a newcomer's JSON list)
        raise BadInputError(f"{where}: holds {_kind(data)}, not a kvaudit report (one JSON object with \"schema\": "
                            f"\"{REPORT_SCHEMA}\")")
    node = _JsonObject(data, where)
    schema = node.str("schema")
    if schema != REPORT_SCHEMA:
        raise BadInputError(f"{where}: schema {schema!r} is not {REPORT_SCHEMA!r}"
                            + (": a diff, not a report" if schema == DIFF_SCHEMA else ""))
    eng, env = node.child("engine"), node.child("environment")
    env_vars = env.child("env", nullable=True)
    if env_vars is not None and not all(isinstance(v, str) for v in env_vars.data.values()):
        raise BadInputError(f"{env_vars.where}: expected string values")
    verify, failure = node.child("verify", nullable=True), node.child("failure", nullable=True)
    accuracy = node.list("accuracy", required=False)
    report = Report(
        schema=schema, source=node.enum("source", Source),
        engine=Engine(name=eng.str("name"), version=eng.str("version"), model_runner=eng.str("model_runner"),
                      attention_backend=eng.str("attention_backend"),
                      kv_cache_sizing=eng.enum("kv_cache_sizing", KvSizing, required=False, nullable=True),
                      generation=eng.str("generation", required=False)),
        environment=Environment(device_name=env.str("device_name"), driver=env.str("driver"), cuda=env.str("cuda"),
                                torch=env.str("torch"), vllm=env.str("vllm"),
                                env=dict(env_vars.data) if env_vars else {},
                                platform=env.str("platform", required=False)),
        config=_config(node.child("config")),
        ranks=tuple(_rank_report(r) for r in node.children("ranks")),
        capacity=_capacity(node.child("capacity")),
        verify=_verify(verify) if verify else None,
        accuracy=None if accuracy is None else tuple(
            AccuracyEntry(owner=a.enum("owner", Owner), rank=a.int("rank"), planted_bytes=a.int("planted_bytes"),
                          measured_bytes=a.int("measured_bytes")) for a in node.children("accuracy", required=False)),
        verdict=node.enum("verdict", Verdict),
        failure=_failure(failure),
        verdict_reason=node.str("verdict_reason", required=False) or "",
        warnings=node.strings("warnings"), kvaudit_version=node.str("kvaudit_version", required=False),
        nodes=_nodes(node), repeat=_repeat(node.child("repeat", required=False, nullable=True)),
        planned_from=node.enum("planned_from", Source, required=False, nullable=True))
    _check_rank_references(report, where)
    return report


def _check_rank_references(report: Report, where: str) -> None:
    """What the types cannot say: each numbered rank appears once in `ranks`, and each field that
    names a rank (the binding ranks, accuracy, verify, the nodes) names one of them; each node
    appears once in `nodes`, and each rank on one node. The assembly derives all of these from
    `ranks`, so a report that breaks one was edited or made by something else (a diff compares
    ranks by number and would silently keep the last of two rank 1s, and a binding rank with no
    entry has no owners to compare).

    A rank's number may be null (unknown): such ranks never collide, and while a report has one, a
    field may name a number no entry has (it may be that rank's), so names are checked only when
    every rank has its number, as in every report kvaudit writes. `failure.rank` is never checked:
    a rank that died before it wrote a record is named there and has no entry."""
    index_of: dict[int, int] = {}
    for i, rank in enumerate(report.ranks):
        if rank.rank is None:
            continue
        if rank.rank in index_of:
            first = index_of[rank.rank]
            raise BadInputError(f"{where}.ranks[{i}].rank: rank {rank.rank} appears twice (ranks[{first}] is rank "
                                f"{rank.rank} too): each rank must appear once")
        index_of[rank.rank] = i
    every_rank_numbered = len(index_of) == len(report.ranks)

    def must_name_a_rank(rank: int | None, key: str) -> None:
        if rank is not None and every_rank_numbered and rank not in index_of:
            raise BadInputError(f"{where}.{key}: names rank {rank}, but no entry of ranks is rank {rank}")

    must_name_a_rank(report.capacity.binding_rank, "capacity.binding_rank")
    for i, entry in enumerate(report.accuracy or ()):
        must_name_a_rank(entry.rank, f"accuracy[{i}].rank")
    for i, verified in enumerate(report.verify.ranks if report.verify else ()):
        must_name_a_rank(verified.rank, f"verify.ranks[{i}].rank")
    for i, scenario in enumerate((report.verify.scenarios or ()) if report.verify else ()):
        for j, verified in enumerate(scenario.ranks):
            must_name_a_rank(verified.rank, f"verify.scenarios[{i}].ranks[{j}].rank")
    for i, spread in enumerate(report.repeat.owners if report.repeat else ()):
        must_name_a_rank(spread.rank, f"repeat.owners[{i}].rank")
    node_index: dict[int, int] = {}
    node_of_rank: dict[int, int] = {}
    for i, summary in enumerate(report.nodes or ()):
        if summary.node_rank in node_index:
            raise BadInputError(f"{where}.nodes[{i}].node_rank: node {summary.node_rank} appears twice "
                                f"(nodes[{node_index[summary.node_rank]}] is node {summary.node_rank} too)")
        node_index[summary.node_rank] = i
        for j, rank in enumerate(summary.ranks):
            must_name_a_rank(rank, f"nodes[{i}].ranks[{j}]")
            if rank in node_of_rank:
                raise BadInputError(f"{where}.nodes[{i}].ranks[{j}]: rank {rank} is already in "
                                    f"nodes[{node_of_rank[rank]}].ranks: " + (
                                        "each rank is listed once" if node_of_rank[rank] == i else
                                        "a rank runs on one node"))
            node_of_rank[rank] = i
        if summary.binding_rank is not None and node_of_rank.get(summary.binding_rank) != i:
            raise BadInputError(f"{where}.nodes[{i}].binding_rank: names rank {summary.binding_rank}, which is not "
                                f"one of this node's ranks")


def diff_from_json(data: Any, where: str = "diff") -> DiffReport:
    """Parse a `kvaudit.diff/1` document; raises BadInputError with the path to the first problem."""
    node = _JsonObject(data, where)
    if node.str("schema") != DIFF_SCHEMA:
        raise BadInputError(f"{where}: schema {node.data.get('schema')!r} is not {DIFF_SCHEMA!r}")
    cap = node.child("capacity")
    cap_a, cap_b = cap.child("a", nullable=True), cap.child("b", nullable=True)
    verdict = node.child("verdict")
    return DiffReport(
        comparable=bool(node.bool("comparable")),
        knob_differences=_knobs(node, "knob_differences"),
        environment_differences=tuple(EnvDifference(e.str("key"), e.value("a", True), e.value("b", True))
                                      for e in node.children("environment_differences")),
        owners=tuple(OwnerDelta(owner=d.enum("owner", Owner), rank=d.int("rank"), a_bytes=d.int("a_bytes"),
                                b_bytes=d.int("b_bytes"), delta_bytes=d.int("delta_bytes"))
                     for d in node.children("owners")),
        dominant_owner=node.enum("dominant_owner", Owner, nullable=True),
        capacity={"a": _capacity(cap_a) if cap_a else None, "b": _capacity(cap_b) if cap_b else None,
                  "kv_available_delta_bytes": cap.int("kv_available_delta_bytes"),
                  "kv_tokens_delta": cap.int("kv_tokens_delta", required=False),
                  # an extension: a diff written before it says nothing of the budgets (absent, not None)
                  **({"requested_delta_bytes": cap.int("requested_delta_bytes", required=False)}
                     if "requested_delta_bytes" in cap.data else {}),
                  **({"consumed_delta_bytes": cap.int("consumed_delta_bytes")} if "consumed_delta_bytes" in cap.data
                     else {})},
        verdict={"a": verdict.enum("a", Verdict), "b": verdict.enum("b", Verdict)},
        a_name=node.str("a_name", required=False) or "a", b_name=node.str("b_name", required=False) or "b",
        sites=tuple(SiteDelta(owner=d.str("owner"), site=d.str("site"), rank=d.int("rank"), phase=d.str("phase"),
                              a_bytes=d.int("a_bytes"), b_bytes=d.int("b_bytes"), delta_bytes=d.int("delta_bytes"))
                    for d in node.children("sites", required=False)),
        repeat=_diff_repeat(node.child("repeat", required=False, nullable=True)),
        warnings=_diff_warnings(node.child("warnings", required=False, nullable=True)),
        one_sided_knobs=_knobs(node, "one_sided_knobs", required=False) or None,
        failures=_diff_failures(node.child("failures", required=False, nullable=True)),
        kv_sizing=_kv_sizing(node))


def _kv_sizing(node: _JsonObject) -> tuple[SizingDelta, ...] | None:
    """The diff's `kv_sizing` (an extension: absent in a diff written before it, which says nothing of what sizing
    charged; then None, not empty)."""
    if node.list("kv_sizing", required=False) is None:
        return None
    return tuple(SizingDelta(term=s.str("term") or "", a_bytes=s.int("a_bytes"), b_bytes=s.int("b_bytes"),
                             delta_bytes=s.int("delta_bytes"), kv_delta_bytes=s.int("kv_delta_bytes"),
                             part_of=s.str("part_of", required=False))
                 for s in node.children("kv_sizing"))


def _failure(node: _JsonObject | None) -> Failure | None:
    return None if node is None else Failure(
        phase=node.enum("phase", Phase, nullable=True), rank=node.int("rank"),
        kind=node.enum("kind", FailureKind), message=node.str("message") or "",
        step=node.str("step", required=False))


def _diff_failures(node: _JsonObject | None) -> dict[str, Failure | None] | None:
    if node is None:
        return None
    _two_sides(node)
    return {side: _failure(node.child(side, nullable=True)) for side in ("a", "b")}


def _two_sides(node: _JsonObject) -> None:
    """A diff's per-side object: the keys a and b, and no other."""
    if set(node.data) != {"a", "b"}:
        raise BadInputError(f"{node.where}: expected exactly the keys a and b")


def _knobs(node: _JsonObject, key: str, required: bool = True) -> tuple[KnobDifference, ...]:
    return tuple(KnobDifference(k.str("knob"), k.value("a", True), k.value("b", True))
                 for k in node.children(key, required))


def _diff_warnings(node: _JsonObject | None) -> dict[str, tuple[str, ...]] | None:
    if node is None:
        return None
    _two_sides(node)
    for side in ("a", "b"):
        if not isinstance(node.data[side], list):
            raise BadInputError(f"{node.where}.{side}: expected a list of strings")
    return {side: node.strings(side) for side in ("a", "b")}


def _diff_repeat(node: _JsonObject | None) -> dict[str, Repeat | None] | None:
    if node is None:
        return None
    return {side: _repeat(node.child(side, required=False, nullable=True)) for side in ("a", "b")}
