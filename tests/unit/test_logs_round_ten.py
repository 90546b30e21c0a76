"""Real pastes, round ten (stop 45): each test names the thread or form its log came from."""
from __future__ import annotations

import pytest

from kvaudit.engines.logs import report_from_log_text

_LOADED = "(VllmWorker rank=0 pid=2480291) INFO 05-07 19:18:17 [loader.py:458] Loading weights took 3.07 seconds\n"


@pytest.mark.parametrize("line", [
    "./serve.sh: line 12: 48213 Killed                  vllm serve Qwen/Qwen3-32B --tensor-parallel-size 2",
    "/bin/sh: line 1:     7 Killed                  python3 -m vllm.entrypoints.openai.api_server --model m",
    "bash: line 1: 1234 Killed python x.py",
])
def test_a_shells_job_notice_of_a_killed_job_is_the_failure(line: str) -> None:
    """bash and sh name the job the kernel's SIGKILL ended: `SCRIPT: line N: PID Killed   COMMAND`."""
    report = report_from_log_text(_LOADED + line + "\n", "x")
    assert report.failure is not None and report.failure.kind.value == "crash"
    assert "the process was sent SIGKILL" in report.failure.message


@pytest.mark.parametrize("line", [
    "I read that line 3: 1234 Killed means the OOM killer",
    "serve.sh: line 12: 48213 Terminated              vllm serve m",
])
def test_a_sentence_or_another_signal_is_no_killed_failure(line: str) -> None:
    assert report_from_log_text(_LOADED + line + "\n", "x").failure is None
