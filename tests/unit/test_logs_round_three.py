"""Real pastes, round three: startup-log excerpts of vLLM 0.27 and later (2026) as people posted
them in public threads (tests/fixtures/logs/public/70-… to 78-…). These files carry no header: each
one's thread and what it shows are in SOURCES below. Each expectation is what a careful reader
takes from the excerpt text alone (GiB × 2**30, token counts and lengths as printed), compared key
by key with the report `kvaudit ingest` makes of the file, the same way as the first corpus
(test_logs_public.observed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvaudit.engines.inputs import load_report
from kvaudit.units import gib_to_bytes

sys.path.insert(0, str(Path(__file__).parent))
from test_logs_public import PUBLIC, observed  # noqa: E402

G = gib_to_bytes

# file: (thread, what the excerpt shows)
SOURCES: dict[str, tuple[str, str]] = {
    "70-v1-0.27-club3090-1084-kv-pool.log": (
        "https://github.com/noonghunna/club-3090/issues/1084",
        "bench report's 'KV pool sizing' block in a markdown fence, vllm/vllm-openai 0.27.1 line numbers "
        "(gpu_worker.py:563); Worker_TP0 prints the KV memory, EngineCore the two-line KV size (TP ≥ 2)"),
    "71-v1-0.27-club3090-1085-kv-pool.log": (
        "https://github.com/noonghunna/club-3090/issues/1085",
        "the same report for another compose: 11.15 GiB, 451,603 tokens at 147,456"),
    "72-v1-0.27-club3090-1086-kv-pool.log": (
        "https://github.com/noonghunna/club-3090/issues/1086",
        "the same report, FP8 model: 11.15 GiB, 214,135 tokens at 65,536"),
    "73-v1-syv-qwen38-7-script-kv.log": (
        "https://github.com/syv-ai/qwen38-27b-rtx3090/issues/7",
        "a launch script's env-var command line, then only the engine core's two KV size lines "
        "(kv_cache_utils.py:2284, newer than 0.27.1's 2235), DFlash speculative decoding"),
    "74-v1-talos-1995-bare-kv.log": (
        "https://github.com/mitchross/talos-argocd-proxmox/pull/1995",
        "the two KV size lines with every prefix stripped (TP=2 per the PR text, not the excerpt)"),
    "75-v1-0.28-54237-sigterm-failed.log": (
        "https://github.com/vllm-project/vllm/issues/54237",
        "vLLM 0.28.0 (per the thread title): EngineCore failed to start, the traceback cut after two frames"),
    "76-v1-0.29-pr-57595-indented-oom.log": (
        "https://github.com/vllm-project/vllm/pull/57595",
        "vLLM 0.29.1rc1 (vllm#57475): torch's OOM quoted without its 'CUDA out of memory.' head, in a "
        "four-space indented block wrapped at 80 columns, after prose"),
    "77-v1-glm-sparks-25-negative-graph-pool.log": (
        "https://github.com/MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks/pull/25",
        "a negative measured graph pool beside its estimate, and the advisory retold in the poster's "
        "words, wrapped"),
    "78-v1-backport-34-pp-tp-estimate-disabled.log": (
        "https://github.com/wtdcode/vllm-backport/issues/34",
        "PP × TP workers (only _PP1 and _TP0/_TP2/_TP3 shown) with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0"),
}

TP_AT_LEAST_2 = "tensor_parallel_size: ≥ 2, size not stated"

# The keys are test_logs_public's: ranks {rank: {owner or field: bytes}}, tokens, max_model_len,
# gmu, verdict, failure (kind, phase), warns (text a warning holds), message_starts.
EXPECTED: dict[str, dict[str, Any]] = {
    "70-v1-0.27-club3090-1084-kv-pool.log": dict(
        ranks={0: {"available": G("16.01")}}, tokens=374847, max_model_len=204800, tp=None, version=None,
        verdict="ok", failure=None, warns=TP_AT_LEAST_2),
    "71-v1-0.27-club3090-1085-kv-pool.log": dict(
        ranks={0: {"available": G("11.15")}}, tokens=451603, max_model_len=147456, tp=None, verdict="ok",
        failure=None, warns=TP_AT_LEAST_2),
    "72-v1-0.27-club3090-1086-kv-pool.log": dict(
        ranks={0: {"available": G("11.15")}}, tokens=214135, max_model_len=65536, tp=None, verdict="ok",
        failure=None, warns=TP_AT_LEAST_2),
    # GPU_UTIL=0.975 feeds the launch script, not a vLLM flag the excerpt shows: no gmu read.
    "73-v1-syv-qwen38-7-script-kv.log": dict(tokens=344579, max_model_len=163840, gmu=None, rank_count=0,
                                             verdict="ok", failure=None),
    "74-v1-talos-1995-bare-kv.log": dict(tokens=302921, max_model_len=131072, rank_count=0, verdict="ok",
                                         failure=None),
    "75-v1-0.28-54237-sigterm-failed.log": dict(
        verdict="unknown", failure=("crash", None), version=None, message_starts="EngineCore failed to start."),
    # "GPU 0 has a total capacity of 22.36 GiB": the device's total, on the one device the log names.
    "76-v1-0.29-pr-57595-indented-oom.log": dict(
        ranks={0: {"total": G("22.36")}}, verdict="fail", failure=("oom", None),
        message_starts="Tried to allocate 136.00 MiB. GPU 0 has a total capacity of 22.36 GiB of which 120.88 MiB "
                       "is free."),
    # vLLM's own figures: the estimate 2.43 GiB and the measured pool −0.19 GiB; the run's
    # utilization 0.86 from the retold advisory.
    "77-v1-glm-sparks-25-negative-graph-pool.log": dict(
        ranks={0: {"estimate": G("2.43"), "actual": -G("0.19")}}, gmu=0.86, verdict="unknown", failure=None),
    # The estimate line of _PP1_TP0 and _PP1_TP2; the utilization from "from 0.9350 to …". Global
    # ranks with TP ≥ 4 not stated: 4 and 6 at the least (said in a warning).
    "78-v1-backport-34-pp-tp-estimate-disabled.log": dict(
        ranks={4: {"estimate": G("0.58")}, 6: {"estimate": G("0.58")}, 7: {"estimate": None}}, gmu=0.935,
        tp=None, verdict="unknown", failure=None,
        warns=("tensor_parallel_size: ≥ 4, size not stated", "pipeline_parallel_size: ≥ 2, size not stated",
               "assume tensor_parallel_size 4, the least the worker names allow")),
}


def _observed(name: str) -> dict[str, Any]:
    expected = EXPECTED[name]
    report = load_report(PUBLIC / name)
    plain = {k: v for k, v in expected.items() if k != "ranks"}
    seen = observed(report, plain)
    if "ranks" in expected:
        by_rank = {r.rank: r for r in report.ranks}
        fields = {"available": "kv_available_bytes", "total": "device_total_bytes",
                  "estimate": "graph_pool_estimate_bytes", "actual": "graph_pool_actual_bytes"}
        seen["ranks"] = {rank: {k: getattr(by_rank[rank], fields[k]) for k in keys} if rank in by_rank else None
                         for rank, keys in expected["ranks"].items()}
    return seen


def test_every_round_three_file_has_its_thread_and_no_header() -> None:
    files = sorted(p.name for p in PUBLIC.glob("*.log") if p.name[:2].isdigit() and int(p.name[:2]) >= 70)
    assert files == sorted(SOURCES) == sorted(EXPECTED) and len(files) >= 9
    for name in files:
        assert SOURCES[name][0].startswith("https://github.com/")
        assert not (PUBLIC / name).read_text(encoding="utf-8").startswith("# source:")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_round_three_excerpt_reads_as_a_careful_reader_has_it(name: str) -> None:
    assert _observed(name) == EXPECTED[name]


@pytest.mark.parametrize("name", ["70-v1-0.27-club3090-1084-kv-pool.log", "75-v1-0.28-54237-sigterm-failed.log",
                                  "76-v1-0.29-pr-57595-indented-oom.log"])
def test_stdin_and_file_agree(name: str) -> None:
    path = PUBLIC / name
    run = [sys.executable, "-m", "kvaudit", "ingest"]
    by_file = subprocess.run([*run, str(path), "-f", "json"], capture_output=True, text=True, check=False)
    by_stdin = subprocess.run([*run, "-", "-f", "json"], input=path.read_text(encoding="utf-8"),
                              capture_output=True, text=True, check=False)
    assert by_file.returncode == by_stdin.returncode
    a, b = json.loads(by_file.stdout), json.loads(by_stdin.stdout)
    for key in ("verdict", "failure", "ranks", "capacity", "config"):
        assert a[key] == b[key], key
