"""The rank's record (kvaudit/record.py): declared once, journaled by its field names, read back
typed, copied into the report without a hand list."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from kvaudit.engines.measured_ranks import BOOT_FACTS, fold, measured_rank
from kvaudit.record import JOURNAL_FACTS, LEDGER_FIGURES, SHARED_WITH_REPORT, MeasuredRank
from kvaudit.schema import RankReport, SweepPoint

ENGINES = Path(__file__).resolve().parents[2] / "kvaudit" / "engines"


def test_facts_are_read_back_by_the_records_own_field_types():
    events = [{"type": "rank", "rank": 3, "tp_rank": 1, "device_total_bytes": 1000, "gpu_memory_utilization": 0.5,
               "kv_cache_spec_dtype": "torch.bfloat16"},
              {"type": "fact", "kv_tensor_block_bytes": [4096, 2048], "deferred_steps": ["sampler", 7],
               "sweep": [{"tokens": 8, "activation_peak_bytes": 100}, {"tokens": -1, "activation_peak_bytes": 5}],
               "kv_structures_bytes": 512, "kv_available_bytes": 900}]
    rank = measured_rank(fold(3, events))
    assert (rank.rank, rank.tp_rank, rank.device_total_bytes, rank.gpu_memory_utilization) == (3, 1, 1000, 0.5)
    assert rank.kv_tensor_block_bytes == (4096, 2048) and rank.deferred_steps == ("sampler",)
    assert rank.sweep == (SweepPoint(8, 100, None),) and rank.kv_structures_bytes == 512
    assert rank.kv_available_bytes == 900 and rank.kv_cache_spec_dtype == "torch.bfloat16"


def test_a_fact_of_the_wrong_type_is_unknown_never_a_crash():
    events = [{"type": "fact", "device_total_bytes": "80 GiB", "tp_rank": True, "kv_tensor_block_bytes": [0],
               "gpu_memory_utilization": "high", "kv_structures_bytes": None, "deferred_steps": "sampler"}]
    rank = measured_rank(fold(0, events), gmu=0.9)
    assert rank.device_total_bytes is None and rank.tp_rank is None and rank.kv_tensor_block_bytes is None
    assert rank.gpu_memory_utilization == 0.9  # the supervisor's, where the rank stated none it can use
    assert rank.kv_structures_bytes == 0 and rank.deferred_steps == ()


def test_the_report_takes_every_shared_field_and_the_ledger_makes_the_rest():
    report_fields = {f.name for f in dataclasses.fields(RankReport)}
    record_fields = {f.name for f in dataclasses.fields(MeasuredRank)}
    assert set(SHARED_WITH_REPORT) == (report_fields & record_fields) - LEDGER_FIGURES
    assert LEDGER_FIGURES <= report_fields
    # report fields neither copied nor made by the ledger: only a log's (a run has no such figure)
    assert report_fields - set(SHARED_WITH_REPORT) - LEDGER_FIGURES == {"graph_pool_retained_bytes",
                                                                         "vllm_consumed_bytes",
                                                                         "vllm_peak_activation_bytes"}


def _fact_names_in_engines() -> tuple[dict[str, str], dict[str, str]]:
    """Literal fact names written (`.fact(name=…)`, a `{"type": "rank"|"fact", …}` event) and read
    (`facts.get("name")`, `get_int("name")`, `facts["name"]`) anywhere in kvaudit/engines."""
    written, read = {}, {}
    for path in ENGINES.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "fact":
                    written.update({k.arg: path.name for k in node.keywords if k.arg})
                if node.func.attr in ("get_int",) or (node.func.attr == "get" and isinstance(node.func.value, (
                        ast.Attribute, ast.Name)) and getattr(node.func.value, "attr", getattr(node.func.value, "id", ""))
                        in ("facts", "f")):
                    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                        read[node.args[0].value] = path.name
            if isinstance(node, ast.Dict):
                keys = {k.value: v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)}
                kind = keys.get("type")
                if isinstance(kind, ast.Constant) and kind.value in ("rank", "fact"):
                    written.update({k: path.name for k in keys if k != "type"})
    return written, read


def test_every_fact_name_written_or_read_in_the_engines_is_declared():
    written, read = _fact_names_in_engines()
    assert len(written) > 30 and "kv_structures_bytes" in written and "device_total_bytes" in written
    assert len(read) > 20 and "node_rank" in read
    declared = JOURNAL_FACTS | BOOT_FACTS
    assert {k: f for k, f in written.items() if k not in declared} == {}, "a fact written under no declared name"
    assert {k: f for k, f in read.items() if k not in declared} == {}, \
        "a fact read under no declared name"
    assert not JOURNAL_FACTS & BOOT_FACTS
