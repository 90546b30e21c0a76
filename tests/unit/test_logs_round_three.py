"""Real pastes, round three: excerpts of vLLM 0.27 and later (2026) as people posted them
(tests/fixtures/logs/public/70-… to 78-…, each with its thread in its header; what a careful reader
takes from each is in test_logs_public.EXPECTED, scored with the rest of the corpus). Here: stdin
and a file read alike, and what an engine core's lines alone say of the TP size.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvaudit.engines.inputs import load_report

sys.path.insert(0, str(Path(__file__).parent))
from test_logs_public import PUBLIC  # noqa: E402


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


# An engine core alone says one rank (the uni executor) only when it printed a rank's own figure:
# the KV size in tokens and the concurrency come from the engine core at any TP.
ENGINE_KV_LINES = (
    "(EngineCore pid=7) INFO 09-01 10:00:01 [kv_cache_utils.py:1087] GPU KV cache size: 302,921 tokens\n"
    "(EngineCore pid=7) INFO 09-01 10:00:01 [kv_cache_utils.py:1091] Maximum concurrency for 131,072 tokens "
    "per request: 2.31x\n")
WORKER_LINE = "(EngineCore pid=7) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 6.51 GiB\n"


@pytest.mark.parametrize(("text", "tp"), [(ENGINE_KV_LINES, None), (WORKER_LINE + ENGINE_KV_LINES, 1)])
def test_an_engine_core_is_one_rank_only_where_it_printed_a_rank_figure(tmp_path, text: str, tp: int | None) -> None:
    path = tmp_path / "engine.log"
    path.write_text(text, encoding="utf-8")
    report = load_report(path)
    assert report.config.tensor_parallel_size == tp
    assert report.capacity.kv_tokens == 302921


EXAMPLE_LOG = Path(__file__).parent.parent.parent / "configs" / "examples" / "cpu-batch512.vllm.log"


def test_the_examples_warmup_traceback_at_warning_is_no_death() -> None:
    # the README's example log: vLLM's chat-template warmup fails without a tokenizer and is logged,
    # traceback and ValueError, at WARNING; the boot went on (a newcomer was told "the boot died")
    text = EXAMPLE_LOG.read_text(encoding="utf-8")
    assert "WARNING 12-03 14:49:28 [base.py:380] Traceback (most recent call last):" in text
    report = load_report(EXAMPLE_LOG)
    assert report.verdict.value == "ok" and report.failure is None
    assert not any("Traceback" in w or "Tokenizer" in w for w in report.warnings), report.warnings


@pytest.mark.parametrize(("level", "noted"), [("ERROR", True), ("WARNING", False)])
def test_an_exception_after_startup_is_a_note_only_when_logged_as_an_error(tmp_path, level: str, noted: bool) -> None:
    text = ("(EngineCore pid=7) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 6.51 GiB\n"
            "(EngineCore pid=7) INFO 09-01 10:00:01 [kv_cache_utils.py:1087] GPU KV cache size: 302,921 tokens\n"
            "(EngineCore pid=7) INFO 09-01 10:00:01 [kv_cache_utils.py:1091] Maximum concurrency for 131,072 tokens "
            "per request: 2.31x\n"
            "(APIServer pid=5) INFO 09-01 10:00:09 [api_server.py:1900] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
            f"(APIServer pid=5) {level} 09-01 10:01:00 [base.py:380] Traceback (most recent call last):\n"
            f"(APIServer pid=5) {level} 09-01 10:01:00 [base.py:380] ValueError: something went wrong\n")
    path = tmp_path / "served.log"
    path.write_text(text, encoding="utf-8")
    report = load_report(path)
    assert report.verdict.value == "ok" and report.failure is None
    notes = [w for w in report.warnings if w.startswith("after startup finished: ")]
    # the exception line is there, so the traceback's header adds no "exception line is not in the log"
    assert notes == (["after startup finished: ValueError: something went wrong"] if noted else []), report.warnings
