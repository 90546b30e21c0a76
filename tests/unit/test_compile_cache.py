"""Whether a boot compiled its model or loaded it from vLLM's torch.compile cache (`compile_cache`),
and the warning on safe flags from a boot that compiled it: on the H100 (vLLM 0.34.0, 2026-12-07)
DeepSeek-V3 dims with MTP held 2.25 GiB more after vLLM's profile once the cache was warm."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from factories import MiB, gib, rank_journal, real_json

from kvaudit.assemble import COLD_COMPILE, compile_cache_warning, rank_report
from kvaudit.engines import measured_ranks
from kvaudit.engines.vllm.adapter import COMPILED_COUNTS, LOADED_COUNTS, compile_cache
from kvaudit.render.summary import repeat_lines
from kvaudit.repeat import combine
from kvaudit.schema import boot_compile_cache, dumps
from kvaudit.validate import report_from_json

SOURCES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-source"


def counter(**counts: int) -> SimpleNamespace:
    return SimpleNamespace(**{name: 0 for name in (*COMPILED_COUNTS, *LOADED_COUNTS)} | counts)


@pytest.mark.parametrize(("counts", "state"), [
    ({"num_inductor_compiles": 3}, "miss"),
    ({"num_aot_compiles": 1}, "miss"),
    ({"num_compiled_artifacts_loaded": 3}, "hit"),
    ({"num_aot_artifacts_loaded": 1}, "hit"),
    ({"num_inductor_compiles": 1, "num_compiled_artifacts_loaded": 2}, "partial"),
    ({}, None),
])
def test_the_counters_say_whether_the_model_compiled_or_loaded(counts, state):
    assert compile_cache(counter(**counts)) == state


def test_a_vllm_without_the_counters_says_nothing():
    assert compile_cache(SimpleNamespace()) is None


def test_every_indexed_release_keeps_the_counters_read():
    # each release's source index (0.22.1 … 0.34.0) lists CompilationCounter's fields
    names = set(COMPILED_COUNTS) | set(LOADED_COUNTS)
    indexes = sorted(SOURCES.glob("vllm-*.json"))
    assert len(indexes) >= 10
    for index in indexes:
        attrs = json.loads(index.read_text())["modules"]["vllm.compilation.counter"]["classes"]["CompilationCounter"]
        assert names <= set(attrs["attrs"]), index.name


def test_the_installed_vllm_counts_as_read():
    from vllm.compilation.counter import compilation_counter
    assert compile_cache(compilation_counter) is None  # nothing compiled in this process
    assert {name for name in (*COMPILED_COUNTS, *LOADED_COUNTS) if not hasattr(compilation_counter, name)} == set()


def test_the_journaled_state_reaches_the_report_and_anything_else_is_unknown():
    def state(value):
        events = rank_journal(0) + [{"type": "fact", "compile_cache": value}]
        return rank_report(measured_ranks.measured_rank(measured_ranks.fold(0, events), 0.875)).compile_cache
    assert [state(v) for v in ("miss", "hit", "partial", "cold", 1)] == ["miss", "hit", "partial", None, None]


def base():
    return report_from_json(real_json("run1"))  # a real TP1 run that fits, with safe flags


def with_state(report, state, safe=None):
    cap = report.capacity
    if safe is not None:
        cap = replace(cap, safe_serve_flags=tuple(f"--kv-cache-memory-bytes={safe}" if f.startswith("--kv-cache")
                                                  else f for f in cap.safe_serve_flags))
    return replace(report, ranks=tuple(replace(r, compile_cache=state) for r in report.ranks), capacity=cap)


def test_flags_from_a_boot_that_compiled_come_with_the_warning():
    report = with_state(base(), "miss")
    assert report.capacity.safe_serve_flags
    [warning] = compile_cache_warning(report.ranks, report.capacity)
    assert warning.startswith(COLD_COMPILE + " (rank 0: vLLM's torch.compile cache did not hold it)")
    assert "2.25 GiB more on DeepSeek-V3 dims with MTP" in warning and "--repeat 2" in warning


@pytest.mark.parametrize("state", ["hit", None])
def test_no_warning_where_the_boot_loaded_the_cache_or_compiled_nothing(state):
    report = with_state(base(), state)
    assert compile_cache_warning(report.ranks, report.capacity) == []


def test_no_warning_without_safe_flags():
    report = with_state(base(), "partial")
    assert compile_cache_warning(report.ranks, replace(report.capacity, safe_serve_flags=())) == []


def test_the_state_is_written_and_read_back():
    report = with_state(base(), "partial")
    assert report_from_json(json.loads(dumps(report))).ranks[0].compile_cache == "partial"
    assert "compile_cache" not in json.loads(dumps(with_state(base(), None)))["ranks"][0]


def test_repeat_drops_the_warning_once_a_boot_loaded_the_cache():
    cold = with_state(base(), "miss", safe=gib(2))
    cold = replace(cold, warnings=(*cold.warnings, *compile_cache_warning(cold.ranks, cold.capacity)))
    warm = with_state(base(), "hit", safe=gib(2) - 64 * MiB)
    both = combine([cold, warm], boots=2, cold=False)
    assert not [w for w in both.warnings if w.startswith(COLD_COMPILE)]
    assert f"--kv-cache-memory-bytes={gib(2) - 64 * MiB}" in both.capacity.safe_serve_flags
    # --repeat 2 --cold: every boot compiled, so a warm restart is still not covered
    again = combine([cold, replace(cold, capacity=warm.capacity)], boots=2, cold=True)
    assert len([w for w in again.warnings if w.startswith(COLD_COMPILE)]) == 1


def test_repeat_says_which_boot_compiled_and_which_loaded():
    # GIVEN the H100's first (cold) and second (warm) boot of the same config
    cold, warm = with_state(base(), "miss", safe=gib(2)), with_state(base(), "hit", safe=gib(2) - 64 * MiB)
    both = combine([cold, warm], boots=2, cold=False)
    # THEN each boot's line carries its state, written and read back, and shown with its KV
    assert [b.compile_cache for b in both.repeat.runs] == ["miss", "hit"]
    again = report_from_json(json.loads(dumps(both)))
    assert [b.compile_cache for b in again.repeat.runs] == ["miss", "hit"]
    shown = repeat_lines(again)[1]
    assert "boot 1: ok" in shown and ", compile cache miss" in shown and ", compile cache hit" in shown
    # an eager boot records none: the key is left out, as a rank's is
    eager = combine([with_state(base(), None), with_state(base(), None)], boots=2, cold=False)
    assert [b.compile_cache for b in eager.repeat.runs] == [None, None]
    assert all("compile_cache" not in b for b in json.loads(dumps(eager))["repeat"]["runs"])


@pytest.mark.parametrize(("states", "boot"), [
    (["miss", "miss"], "miss"), (["hit", "hit"], "hit"), (["miss", "hit"], "partial"), (["partial"], "partial"),
    (["hit", None], "hit"), ([None, None], None), ([], None)])
def test_a_boots_state_over_its_ranks(states, boot):
    assert boot_compile_cache(states) == boot


def test_a_diff_of_a_cold_and_a_warm_boot_says_so():
    from kvaudit.diff import diff_reports
    out = diff_reports(with_state(base(), "miss"), with_state(base(), "hit"))
    assert [(e.key, e.a, e.b) for e in out.environment_differences if e.key == "compile_cache"] == \
        [("compile_cache", "miss", "hit")]
    same = diff_reports(with_state(base(), "hit"), with_state(base(), "hit"))
    assert [e for e in same.environment_differences if e.key == "compile_cache"] == []


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
COLD_8B = RESULTS / "h100-load-llama-3.1-8b-repeat3-cold-vllm0.34.0-2026-12-05b.boot1.log"
WARM_8B = RESULTS / "h100-load-llama-3.1-8b-repeat3-warm-vllm0.34.0-2026-12-06.boot2.log"
COLD_MTP = RESULTS / "h100-load-deepseek-v3-2layer-mtp-vllm0.34.0-capped.log"


def from_log(path: Path):
    from kvaudit.engines.logs import report_from_log_text
    return report_from_log_text(path.read_text(), path.name)


def test_a_real_034_log_says_whether_its_boot_compiled_or_loaded():
    # vLLM 0.34.0 on an H100: the first boot `[backbone] Compiling a graph for compile range (1, 8192) takes 5.39 s`;
    # a later one `[backbone] Directly load AOT compilation from path …`; the MTP boot compiled backbone and eagle_head
    cold, warm, mtp = from_log(COLD_8B), from_log(WARM_8B), from_log(COLD_MTP)
    assert [r.compile_cache for r in (*cold.ranks, *warm.ranks, *mtp.ranks)] == ["miss", "hit", "miss"]
    assert [w for w in cold.warnings if w.startswith(COLD_COMPILE)] != []
    assert [w for w in warm.warnings if w.startswith(COLD_COMPILE)] == []


def test_a_diff_of_the_two_real_logs_names_the_compile_cache():
    from kvaudit.diff import diff_reports
    out = diff_reports(from_log(COLD_8B), from_log(WARM_8B))
    assert ("compile_cache", "miss", "hit") in [(e.key, e.a, e.b) for e in out.environment_differences]


@pytest.mark.parametrize(("line", "states"), [
    # 0.8 (tests/fixtures/logs/public/11-v1-0.8-pr-17122-ok.log)
    ("INFO 04-24 16:33:11 [backends.py:118] Directly load the compiled graph(s) for shape None from the cache, "
     "took 4.673 s", ["hit"]),
    # 0.10 (tests/unit/data/round_ten/folded_147_columns.log)
    ("(EngineCore_0 pid=1812) INFO 09-04 01:04:11 [backends.py:215] Compiling a graph for dynamic shape takes 58.25 s",
     ["miss"]),
    # printed cold and warm alike: says neither (the warm 8B log above)
    ("(EngineCore pid=2257) INFO 12-06 05:19:32 [monitor.py:62] [backbone] torch.compile took 0.34 s in total", []),
])
def test_each_release_s_wording(line, states):
    from kvaudit.engines.logs.facts import FactKind, facts_from_message
    facts = [f.value for f in facts_from_message(line) if f.kind is FactKind.COMPILE]
    assert facts == states


COLD_MTP_026 = RESULTS / "h100-cold-warm-deepseek-v3-2layer-mtp-mtp-vllm0.26.0-2026-12-07.boot1.log"
WARM_MTP_026 = RESULTS / "h100-cold-warm-deepseek-v3-2layer-mtp-mtp-vllm0.26.0-2026-12-07.boot2.log"


def test_a_warm_026_boot_loads_its_aot_artifact_and_still_compiles_pieces():
    # vLLM 0.26.0 on an H100, `kvaudit run --repeat 2` in fresh caches: boot 1 `Compiling a graph for compile range
    # (1, 8192) takes 13.62 s`; boot 2 `Directly load AOT compilation from path …` and `Compiling a graph … takes
    # 0.51 s` (inductor's own cache): partial, as vLLM's counters say in the run
    cold, warm = from_log(COLD_MTP_026), from_log(WARM_MTP_026)
    assert [r.compile_cache for r in (*cold.ranks, *warm.ranks)] == ["miss", "partial"]


def test_a_later_boot_that_loaded_in_part_is_the_restart_the_warning_is_about():
    # the same two boots' states: boot 2 held 2.35 GiB more after the profile (torch_other 2.28 → 4.62 GiB), its
    # safe bytes the fewest; the flags cover it, so the cold-boot warning is dropped (it stayed before)
    cold = with_state(base(), "miss", safe=gib(2))
    cold = replace(cold, warnings=(*cold.warnings, *compile_cache_warning(cold.ranks, cold.capacity)))
    partial = with_state(base(), "partial", safe=gib(2) - 64 * MiB)
    partial = replace(partial, warnings=(*partial.warnings, *compile_cache_warning(partial.ranks, partial.capacity)))
    assert [w for w in partial.warnings if "vLLM's torch.compile cache held it in part" in w] != []
    both = combine([cold, partial], boots=2, cold=False)
    assert not [w for w in both.warnings if w.startswith(COLD_COMPILE)]
    # a first boot that loaded in part says nothing of a restart, nor does a --cold boot in emptied caches
    first = combine([partial, cold], boots=2, cold=False)
    assert len([w for w in first.warnings if w.startswith(COLD_COMPILE)]) == 1
    emptied = combine([cold, partial], boots=2, cold=True)
    assert len([w for w in emptied.warnings if w.startswith(COLD_COMPILE)]) == 1
