"""Real pastes, round seven (tests/fixtures/logs/public/112-…, its thread in its header; what a careful
reader takes from it is in test_logs_public.EXPECTED). Here, the general rules it needed, on their
own: a traceback frame in vLLM's DeepGEMM warm-up (vllm/model_executor/warmup/deep_gemm_warmup.py,
which only kernel_warmup calls, after the KV cache) places a failure in the capture phase; and
ERROR records that hold traceback frames and no exception line (a paste cut inside the traceback)
are a crash whose cause is not shown, at the lowest priority.
"""

from __future__ import annotations

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.facts import ERROR_FRAME_TEXT, FactKind, facts_from_message
from kvaudit.engines.logs.scan import MAX_NEEDLE_LINES, scan, scan_exhaustive
from kvaudit.schema import FailureKind, Phase

_W = "(Worker_TP2_EP2 pid=405) ERROR 11-25 08:05:06 [multiproc_executor.py:815] "
_DEEP_GEMM = [
    _W + '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/warmup/deep_gemm_warmup.py", line 314, '
         "in deep_gemm_warmup",
    _W + "    deepgemm_grouped_fp8_gemm_nt_contiguous_warmup(",
    _W + '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/warmup/deep_gemm_warmup.py", line 285, '
         "in _deepgemm_grouped_fp8_gemm_nt_contiguous_warmup",
    _W + "    m_grouped_fp8_gemm_nt_contiguous((a1q, a1q_scales), (w, w_scale), out, expert_ids)",
]
_UNNAMED = [
    _W + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 810, '
         "in worker_busy_loop",
    _W + "    output = func(*args, **kwargs)",
    _W + '  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in decorate_context',
    _W + "    return func(*args, **kwargs)",
]
_HEALTHY = [
    "(Worker_TP0 pid=11) INFO 11-25 08:04:50 [gpu_worker.py:298] Available KV cache memory: 20.10 GiB",
    "(EngineCore_DP0 pid=9) INFO 11-25 08:04:51 [kv_cache_utils.py:1087] GPU KV cache size: 400,000 tokens",
    "(EngineCore_DP0 pid=9) INFO 11-25 08:04:51 [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens "
    "per request: 12.21x",
]


def report_of(lines: list[str]):
    return report_from_log_text("\n".join(lines) + "\n", "paste.log")


def failure_of(lines: list[str]) -> tuple[FailureKind, Phase | None, str]:
    report = report_of(lines)
    assert report.failure is not None
    return report.failure.kind, report.failure.phase, report.failure.message


@pytest.mark.parametrize("name", ["deep_gemm_warmup", "deepgemm_fp8_gemm_nt_warmup", "_deepgemm_fp8_gemm_nt_warmup",
                                  "deepgemm_grouped_fp8_gemm_nt_contiguous_warmup",
                                  "_deepgemm_grouped_fp8_gemm_nt_contiguous_warmup"])
def test_a_deep_gemm_warmup_frame_names_the_capture_phase(name: str) -> None:
    frame = f'File "/x/vllm/model_executor/warmup/deep_gemm_warmup.py", line 9, in {name}'
    assert [f.value for f in facts_from_message(frame) if f.kind is FactKind.PHASE_HINT] == [Phase.CAPTURE]


@pytest.mark.parametrize("text", [
    'File "/x/vllm/utils/deep_gemm.py", line 120, in fp8_gemm_nt',  # a DeepGEMM kernel, run by any forward
    'File "/x/my_code.py", line 9, in deep_gemm_warmup_report',  # another name that starts the same
    "we never reach deep_gemm_warmup(model, max_tokens)",  # a person's words that name the call
])
def test_other_deep_gemm_words_name_no_phase(text: str) -> None:
    assert not [f for f in facts_from_message(text) if f.kind is FactKind.PHASE_HINT]


def test_the_source_line_under_a_frame_that_calls_the_deep_gemm_warmup_names_the_capture() -> None:
    """The call in progress in the frame above (round nine's rule for a traceback's source lines)."""
    hints = [f.value for f in facts_from_message("deep_gemm_warmup(model, max_tokens)") if f.kind is FactKind.PHASE_HINT]
    assert hints == [Phase.CAPTURE]


def test_error_frames_in_the_deep_gemm_warmup_cut_before_the_exception_are_a_crash_in_capture() -> None:
    """vllm#29360's tail alone (before: no failure found, verdict open with nothing to say why)."""
    assert failure_of(_DEEP_GEMM) == (FailureKind.CRASH, Phase.CAPTURE, ERROR_FRAME_TEXT)
    assert report_of(_DEEP_GEMM).verdict.value == "unknown"


def test_error_frames_that_name_no_startup_call_are_a_crash_in_no_known_phase() -> None:
    assert failure_of(_UNNAMED) == (FailureKind.CRASH, None, ERROR_FRAME_TEXT)


def test_after_the_kv_size_error_frames_are_a_crash_that_the_verdict_does_not_call_fit() -> None:
    report = report_of([*_HEALTHY, *_UNNAMED])
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.phase is Phase.KV and report.verdict.value == "unknown"


def test_a_deep_gemm_kernel_frame_under_profile_run_stays_in_the_profile_phase() -> None:
    lines = [_W + '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 4198, in profile_run',
             _W + '  File "/x/vllm/utils/deep_gemm.py", line 120, in fp8_gemm_nt']
    assert failure_of(lines) == (FailureKind.CRASH, Phase.PROFILE, ERROR_FRAME_TEXT)


def test_a_complete_traceback_is_read_by_its_exception_not_as_a_cause_not_shown() -> None:
    oom = _W + ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity "
                "of 95.00 GiB of which 1.10 GiB is free.")
    kind, phase, message = failure_of([_W + "Traceback (most recent call last):", *_DEEP_GEMM, oom])
    assert (kind, phase) == (FailureKind.OOM, Phase.CAPTURE) and message != ERROR_FRAME_TEXT
    kind, phase, message = failure_of([*_UNNAMED, _W + "RuntimeError: DeepGEMM kernel failed to compile"])
    assert kind is FailureKind.CRASH and message.startswith("RuntimeError: DeepGEMM")


def test_a_healthy_log_that_names_deep_gemm_is_no_failure() -> None:
    info = ["(Worker_TP0 pid=11) INFO 11-25 08:04:52 [kernel_warmup.py:80] deep_gemm warm-up: "
            "DeepGEMM warmup done for 58 layers (deep_gemm_warmup)",
            "(Worker_TP0 pid=11) INFO 11-25 08:04:52 [deep_gemm.py:60] Using DeepGEMM kernels for Fp8MoE (deep_gemm)"]
    report = report_of([*_HEALTHY, *info])
    assert report.failure is None and report.verdict.value == "ok"


@pytest.mark.parametrize("level", ["WARNING", "INFO", "DEBUG"])
def test_frames_logged_at_a_handled_level_are_no_failure(level: str) -> None:
    lines = [line.replace(" ERROR ", f" {level} ") for line in _DEEP_GEMM]
    assert report_of([*_HEALTHY, *lines]).failure is None


def test_the_scan_finds_error_frame_records_as_the_exhaustive_scan_does_and_keeps_a_bounded_number() -> None:
    text = "\n".join([*_HEALTHY, *_UNNAMED, *_DEEP_GEMM]) + "\n"
    assert scan(text).segments == scan_exhaustive(text).segments
    many = "\n".join(_UNNAMED[0] for _ in range(4 * MAX_NEEDLE_LINES)) + "\n"
    assert len(scan(many).segments) == MAX_NEEDLE_LINES == len(scan_exhaustive(many).segments)
