"""Real pastes, round twenty-eight (findings G1, G2): an engine core that died while serving (club-3090#58, the
issue's title a runtime `torch.OutOfMemoryError`), and an error quoted as inline code in prose (vllm-omni#276).
Each test names its source and what kvaudit read before; the data are the files as the round saved them
(tests/unit/data/round_twenty_eight), a case where the rule must not fire beside each rule."""
from __future__ import annotations

from kvaudit.schema import FailureKind, Phase, Verdict
from tests.unit.factories import log_report, pasted

_ROUND = "round_twenty_eight"
DIED_SERVING = "05_club3090issue58_v1_runtime_oom_in_busy_loop_enginedeaderror_after_startup.log"
"""club-3090#58: the API server's `EngineDeadError`, then the engine core's traceback through `run_engine_core` →
`run_busy_loop` → `_process_engine_step`, cut there; the OOM is in the issue's title, not in the paste."""
QUOTED = "04_vllmomni276_prose_backticked_free_memory_0_49_of_79_32_gmu_06_47_59_two_a100.log"
"""vllm-omni#276: `` `ValueError: Free memory on device (0.49/79.32 GiB) on startup is less than desired GPU memory
utilization (0.6, 47.59 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.` ``
in a sentence of the issue."""
_OOM = ("(EngineCore pid=104) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 50.00 MiB. GPU 0 has a "
        "total capacity of 23.56 GiB of which 56.88 MiB is free.\n")
_LOWER = ("; the KV cache sized at startup left too little for the load: lower --gpu-memory-utilization, "
          "--max-num-seqs or --max-num-batched-tokens (kvaudit run --verify runs such loads before serving)")


def test_an_oom_while_serving_is_a_finding_not_ok() -> None:
    """The paste with the OOM its title states, as the engine core prints it after the traceback. Before: "OK: fits:
    the max_model_len it serves passed vLLM's own check", the OOM a warning. The boot itself did not fail (no
    `failure`), but the verdict says what happened and what to lower."""
    text = pasted(_ROUND, DIED_SERVING)
    report = log_report(f"{text}\n{_OOM}", DIED_SERVING)
    assert report.failure is None and report.verdict is Verdict.FAIL
    assert report.verdict_reason == ("out of memory while serving, after startup finished (torch.OutOfMemoryError: "
                                     "CUDA out of memory. Tried to allocate 50.00 MiB. GPU 0 has a total capacity of "
                                     "23.56 GiB of which 56.88 MiB is free.)" + _LOWER)
    assert report.capacity.safe_serve_flags == ()


def test_an_engine_death_while_serving_without_its_cause_stays_a_warning() -> None:
    """The paste as saved: the engine died while serving and the log does not say why (a bug is as likely as
    memory), so the startup verdict stands and the death is said beside it."""
    report = log_report(pasted(_ROUND, DIED_SERVING), DIED_SERVING)
    assert report.failure is None and report.verdict is Verdict.OK
    assert report.verdict_reason == "fits: the max_model_len it serves passed vLLM's own check"
    assert [w for w in report.warnings if w.startswith("after startup finished: ")] == [
        "after startup finished: vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
        "stack trace (above) for the root cause."]
    assert report.capacity.kv_not_served is None


def test_an_error_quoted_as_inline_code_loses_the_closing_backtick() -> None:
    """Before: the failure's message ended `… used by other processes.`` (the sentence's closing backtick)."""
    report = log_report(pasted(_ROUND, QUOTED), QUOTED)
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.STARTUP_MEMORY, Phase.BASELINE)
    assert report.failure.message.startswith("ValueError: Free memory on device (0.49/79.32 GiB) on startup")
    assert report.failure.message.endswith("reduce GPU memory used by other processes.")


def test_an_unquoted_error_keeps_a_backtick_of_its_own() -> None:
    """vLLM's own line, not quoted, whose words end in a backticked flag: nothing is taken from it."""
    line = ("ERROR 12-11 10:00:00 [core.py:700] ValueError: Free memory on device (0.49/79.32 GiB) on startup is less "
            "than desired GPU memory utilization (0.6, 47.59 GiB). Lower `--gpu-memory-utilization`\n")
    report = log_report(line)
    assert report.failure is not None and report.failure.message.endswith("Lower `--gpu-memory-utilization`")


def test_a_double_backtick_quote_and_the_sentences_stop_after_it_are_the_persons_too() -> None:
    """The same sentence quoted with ``…`` (Markdown's way to quote a backtick), and with its full stop after the
    quote: the message ends where the error does."""
    text = pasted(_ROUND, QUOTED)
    for quoted in (text.replace("`ValueError", "``ValueError").replace("processes.`", "processes.``"),
                   text.replace("processes.`", "processes.`.")):
        assert quoted != text
        report = log_report(quoted, QUOTED)
        assert report.failure is not None
        assert report.failure.message.endswith("reduce GPU memory used by other processes.")
        assert report.failure.message.startswith("ValueError: Free memory on device (0.49/79.32 GiB)")
