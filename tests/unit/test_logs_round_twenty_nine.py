"""Real pastes, round twenty-nine (findings G1, G2): tracebacks cut inside vLLM's KV check, the exception line lost
(vllm#20726, V1's `check_enough_kv_cache_memory(…)`; vllm-ascend#436, V0's `raise_if_cache_size_invalid(…)`), and an
engine core's frames down to its KV setup alone, with no header, level or exception line (vllm#35854). Each test
names its source and what kvaudit read before; the data are the files as the round saved them
(tests/unit/data/round_twenty_nine), a case where the rule must not fire beside each rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.schema import FailureKind, Phase, Verdict
from tests.unit.factories import log_report, pasted

_ROUND = "round_twenty_nine"
_PUBLIC = Path(__file__).parent.parent / "fixtures" / "logs" / "public"
V1_CHECK = "03_vllm20726_v1_09x_docker_desktop_timestamp_prefix_traceback_check_enough_kv_cache_memory_cut.log"
"""vllm#20726 (Qwen2.5-7B on a 16 GB card): Docker Desktop's timestamp before each ERROR record, frames through
`_initialize_kv_caches` → `get_kv_cache_config`, whose last source line is `check_enough_kv_cache_memory(vllm_config,
kv_cache_spec, available_memory)`, then the excerpt's cut (`20`)."""
V0_CHECK = "14_ascend436_v0_910b4_tp8_worker_initialize_cache_raise_if_cache_size_invalid_cut.log"
"""vllm-ascend#436 (TP8 on 910B4, V0): `Exception in worker VllmWorkerProcess while processing method
initialize_cache.`, frames down to `raise_if_cache_size_invalid(num_gpu_blocks,`, cut inside the next record."""
KV_SETUP = "08_vllm35854_v1_4x2080ti_bare_enginecore_traceback_initialize_kv_caches_cut.log"
"""vllm#35854 (4 × 2080 Ti 22G, Qwen3.5-35B-A3B): `(EngineCore_DP0 pid=32350)` frames, no level and no `Traceback`
header, through `self._initialize_kv_caches(` and otel's `sync_wrapper` into `_initialize_kv_caches`, cut."""
_DOES_NOT_FIT = ("vLLM's KV check, whose errors say the KV cache does not fit max_model_len or has no room at "
                 "all; its exception line is not in the log: lower --max-model-len or raise --gpu-memory-utilization")


# --------------------------------------------------------------------------------------------
# G1: a traceback cut inside the KV check is the KV cache that does not fit


@pytest.mark.parametrize(("name", "call", "rank"), [(V1_CHECK, "check_enough_kv_cache_memory", 0),
                                                    (V0_CHECK, "raise_if_cache_size_invalid", 1)])
def test_a_traceback_cut_inside_the_kv_check_does_not_fit(name: str, call: str, rank: int) -> None:
    """Before: UNKNOWN, "crash in kv … the exception line that says why is not in the log" (03), "crash in kv on rank
    1: Exception in worker VllmWorkerProcess while processing method initialize_cache." (14). Each check raises only
    the ValueErrors that say the KV cache does not fit."""
    report = log_report(pasted(_ROUND, name), name)
    assert report.failure is not None and report.verdict is Verdict.FAIL
    assert (report.failure.kind, report.failure.phase, report.failure.rank) == (FailureKind.DOES_NOT_FIT, Phase.KV, rank)
    assert report.failure.message == f"the traceback ends in {call}, {_DOES_NOT_FIT}"


def test_v0s_check_with_its_words_cut_does_not_fit_either() -> None:
    """V0's check joined the checks a cut `ValueError: The` raised in reads as (before: "crash: ValueError: The")."""
    text = pasted(_ROUND, V0_CHECK).rsplit("\n", 1)[0] + "\n"
    prefix = "(VllmWorkerProcess pid=103897) ERROR 03-31 16:55:54 multiproc_worker_utils.py:242] "
    text += (f'{prefix}  File "vllm/vllm/worker/worker.py", line 545, in raise_if_cache_size_invalid\n'
             f"{prefix}    raise ValueError(\n{prefix}ValueError: The\n")
    report = log_report(text, V0_CHECK)
    assert report.failure is not None and (report.failure.kind, report.failure.phase) == (FailureKind.DOES_NOT_FIT,
                                                                                         Phase.KV)
    assert report.failure.message.startswith("ValueError: The (cut; raised in raise_if_cache_size_invalid, ")


@pytest.mark.parametrize(("name", "message"), [
    # the check's statement, its frame, then the whole "To serve at least one request…" error: vLLM's own words
    ("44-v1-tpu-inference-223-traceback.log", "ValueError: To serve at least one request with the models's max seq "
                                              "len (131072)"),
    # V0's check's frame, then its error
    ("30-v0-0.6.4-10439-compose.log", "ValueError: No available memory for the cache blocks."),
    # the check's statement, then its raise's source line
    ("32-v1-0.11-27508-gptoss.log", 'raise ValueError("No available memory for the cache blocks. "'),
])
def test_a_stated_error_of_the_check_keeps_its_own_words(name: str, message: str) -> None:
    """Must not fire: where the log has the error the check raised, its words are the failure's, not the inference."""
    report = log_report((_PUBLIC / name).read_text(encoding="utf-8"), name)
    assert report.failure is not None and (report.failure.kind, report.failure.phase) == (FailureKind.DOES_NOT_FIT,
                                                                                         Phase.KV)
    assert report.failure.message.startswith(message)


def test_a_cut_in_a_call_after_the_check_or_in_another_process_is_no_inference() -> None:
    """Must not fire: a traceback whose last frame goes on past the check's statement (into another call), and the
    check's statement printed by another process than the one that reported the death."""
    text = pasted(_ROUND, V1_CHECK).rsplit("\n", 1)[0] + "\n"
    prefix = "2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py:586] "
    deeper = text + (f'{prefix}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line '
                     f"560, in estimate_max_model_len\n{prefix}    return binary_search(\n")
    report = log_report(deeper, V1_CHECK)
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    v0 = pasted(_ROUND, V0_CHECK).replace("(VllmWorkerProcess pid=103897) ERROR 03-31 16:55:54 multiproc_worker_utils"
                                          ".py:242]     raise_if_cache_size_invalid(",
                                          "(VllmWorkerProcess pid=103898) ERROR 03-31 16:55:54 multiproc_worker_utils"
                                          ".py:242]     raise_if_cache_size_invalid(")
    report = log_report(v0, V0_CHECK)
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH


# --------------------------------------------------------------------------------------------
# G2: an engine core's frames down to its KV setup are a death after the load


def test_frames_down_to_the_engine_cores_kv_setup_are_a_death_in_profile_or_later() -> None:
    """Before: no failure at all, UNKNOWN, and "an excerpt that ends before the model loaded" (the frames named no call
    kvaudit placed). `_initialize_kv_caches` profiles, sizes the KV cache and captures, after the load."""
    report = log_report(pasted(_ROUND, KV_SETUP), KV_SETUP)
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert (report.failure.phase, report.failure.step) == (
        Phase.PROFILE, "in profile or later (its traceback is cut before the call that failed)")
    assert report.failure.message.startswith("traceback frames through vLLM's startup (`in _initialize_kv_caches`)")


@pytest.mark.parametrize(("name", "kind", "phase"), [
    # the same engine core frames through _initialize_kv_caches with the exception line: the check's error
    ("97-v1-xpu-b60-616-no-memory-traceback.log", FailureKind.DOES_NOT_FIT, Phase.KV),
    # …and with the re-raise of a worker's error from the profile
    ("55-v1-29636-worker-failed-profile.log", FailureKind.CRASH, Phase.PROFILE),
])
def test_frames_through_the_kv_setup_with_more_said_keep_their_reading(name: str, kind: FailureKind,
                                                                       phase: Phase) -> None:
    report = log_report((_PUBLIC / name).read_text(encoding="utf-8"), name)
    assert report.failure is not None and (report.failure.kind, report.failure.phase, report.failure.step) == (
        kind, phase, None)


def test_deeper_frames_name_the_call_not_the_kv_setup() -> None:
    """Must not fire: round twenty-six's compose paste, frames through `_initialize_kv_caches` down to
    `determine_available_memory` (no header, no exception line): the deeper call names the failure and its phase."""
    name = "06_strixhalo73_gfx1151_compose_prefix_traceback_determine_available_memory_no_error_prefix_cut.log"
    report = log_report(pasted("round_twenty_six", name), name)
    assert report.failure is not None and (report.failure.phase, report.failure.step) == (Phase.PROFILE, None)
    assert report.failure.message.startswith("traceback frames through vLLM's startup (`in determine_available_memory`)")
