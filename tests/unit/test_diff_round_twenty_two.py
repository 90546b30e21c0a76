"""Real pastes, round twenty-two (22a and 22d): diffs of two logs of one machine. Each test names its source; the
data are the helpers' files (tests/unit/data/round_twenty_two), each with one `# source:` line on top."""
from __future__ import annotations

from pathlib import Path

from kvaudit.diff import diff_reports
from kvaudit.engines.logs import report_from_log_text
from kvaudit.render.summary import diff_summary

_DATA = Path(__file__).parent / "data" / "round_twenty_two"
_V0_A = "03_vllm14184_v0_dev4676_qwen2vl7b_int8_config_a.log"
_V0_B = "03_vllm14184_v0_dev4927_qwen2vl7b_int8_config_b.log"


def _report(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


def test_one_version_change_is_listed_once() -> None:
    """vllm#14184 (Qwen2-VL-7B INT8, V0): the same config on two commits, `Initializing a V0 LLM engine
    (v0.1.dev4676+ge1b7aa6)` against `(v0.1.dev4927+geda5043)`. That one line fills engine.version and
    environment.vllm; the diff listed the change twice, as `engine.version` and as `vllm`."""
    diff = diff_reports(_report(_V0_A), _report(_V0_B), "a.log", "b.log")
    assert [(e.key, e.a, e.b) for e in diff.environment_differences] == [
        ("engine.version", "0.1.dev4676+ge1b7aa6", "0.1.dev4927+geda5043")]
    assert "environment: engine.version 0.1.dev4676+ge1b7aa6 → 0.1.dev4927+geda5043" in diff_summary(diff)
