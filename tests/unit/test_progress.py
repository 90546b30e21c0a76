"""Feedback while `kvaudit run` boots (issue 15 item 12): the stage being waited on and the
elapsed time, as a spinner on a terminal and as plain lines when stderr is piped."""

from __future__ import annotations

import io
import json
import re

from rich.console import Console

from kvaudit.engines.vllm.stages import StageTailer
from kvaudit.render.progress import Progress, _Waiting


def piped() -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=80, highlight=False, markup=False, emoji=False)
    return Progress("kvaudit: booting vLLM on tiny", "starting the boot process", console=console), out


def test_piped_progress_prints_each_stage_with_the_elapsed_time():
    progress, out = piped()
    with progress:
        progress.on_event(-1, {"type": "stage", "stage": "importing vLLM"})
        progress.on_event(-1, {"type": "stage", "stage": "importing vLLM"})  # no change: no line
        progress.on_event(0, {"type": "start", "phase": "load"})
        progress.on_event(-1, {"type": "stage", "stage": "vLLM: shutting down"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "kvaudit: booting vLLM on tiny"
    stages = [re.fullmatch(r"kvaudit: +(\d+\.\d) s  (.*)", line) for line in lines[1:]]
    assert all(stages), lines
    assert [m.group(2) for m in stages] == ["starting the boot process", "importing vLLM", "rank 0: load",
                                            "vLLM: shutting down"]


def test_the_spinner_text_says_the_stage_and_the_seconds():
    progress, _ = piped()
    progress.stage = "vLLM: loading the model"
    progress.started -= 12.4
    assert str(_Waiting(progress).__rich__()) == "vLLM: loading the model (12 s)"


def test_escape_sequences_in_events_are_shown_escaped():
    progress, out = piped()
    with progress:
        progress.on_event(0, {"type": "error", "phase": "load", "message": "\x1b]0;owned\x07boom"})
    assert "\x1b" not in out.getvalue() and "\\x1b]0;owned\\x07boom" in out.getvalue()


def test_the_stage_tailer_reads_vllm_phrases_and_the_boot_journal(tmp_path):
    log, journal = tmp_path / "vllm.log", tmp_path / "boot.jsonl"
    stages = StageTailer(log, journal)
    assert stages.poll() is None  # nothing written yet
    journal.write_text(json.dumps({"type": "stage", "stage": "importing vLLM"}) + "\n")
    assert stages.poll() == "importing vLLM"
    log.write_text("INFO [core.py:116] Initializing a V1 LLM engine (v0.32.0) with config: model='x'\n")
    assert stages.poll() == "vLLM: starting the engine core"
    assert stages.poll() is None
    with open(log, "a") as fh:
        fh.write("INFO [gpu_model_runner.py:5250] Starting to load model /m...\n" + "x" * 200_000 + "\n")
    assert stages.poll() == "vLLM: loading the model"


def test_after_shutting_down_the_stage_says_what_vllm_waits_for(tmp_path):
    """The seconds after "vLLM: shutting down" (about 5 on the 2-core machine) name each step of
    vLLM 0.32's shutdown from its own [shutdown] lines, then the boot process's exit."""
    log, journal = tmp_path / "vllm.log", tmp_path / "boot.jsonl"
    stages = StageTailer(log, journal)
    journal.write_text(json.dumps({"type": "stage", "stage": "vLLM: shutting down (the engine core stops its "
                                   "workers)"}) + "\n")
    assert stages.poll() == "vLLM: shutting down (the engine core stops its workers)"
    seen = []
    for line in ("(EngineCore pid=1) INFO 12-04 14:36:25 [multiproc_executor.py:479] [shutdown] Executor: waiting "
                 "for worker exit count=1",
                 "(EngineCore pid=1) INFO 12-04 14:36:28 [multiproc_executor.py:486] [shutdown] Executor: all workers "
                 "exited gracefully",
                 "(MainProcess pid=2) INFO 12-04 14:36:30 [core_client.py:777] [shutdown] MPClient: complete"):
        with open(log, "a") as fh:
            fh.write(line + "\n")
        seen.append(stages.poll())
    assert seen == ["vLLM: shutting down: waiting for the workers to exit",
                    "vLLM: shutting down: workers exited, the engine core is stopping",
                    "vLLM: stopped; the boot process is exiting"]
    with open(journal, "a") as fh:
        fh.write(json.dumps({"type": "stage", "stage": "vLLM: stopped; the boot process is exiting"}) + "\n")
    assert stages.poll() is None  # the same stage from the boot process: nothing new to show
