"""Real pastes, round thirty-two (finding G2): a model served from the Hugging Face cache, whose path ends in the
snapshot's revision (vllm#51454, a DP8 DeepSeek-V4-Flash boot): the headline and the Prometheus label named the model
by that hash. The data are the files as the round saved them (tests/unit/data/round_thirty_two), a case where the rule
must not fire beside it."""
from __future__ import annotations

import io
from pathlib import Path

from kvaudit.render.prom import PromReporter, samples
from kvaudit.render.summary import headline, model_name
from tests.unit.factories import log_report, pasted

SNAPSHOT = "06_vllm51454_v0250_dp8_ep_banner_args_gmu095_block256_cut.log"
"""vllm#51454: the banner and the args name `/root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/
snapshots/7872f01b1d1fe23eabc4c98b48bffcef5a386062`."""
_PATH = ("/root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/snapshots/"
         "7872f01b1d1fe23eabc4c98b48bffcef5a386062")


def test_a_cache_snapshot_is_named_by_its_repository() -> None:
    """Before: `kvaudit log · vllm 0.25.0 · 7872f01b1d1fe23eabc4c98b48bffcef5a386062 · tp 1 dp 8 gmu 0.95`, and the
    same hash as the Prometheus `model` label. The report keeps the path vLLM printed."""
    report = log_report(pasted("round_thirty_two", SNAPSHOT), SNAPSHOT)
    assert report.config.model == _PATH
    assert headline(report).startswith("kvaudit log · vllm 0.25.0 · deepseek-ai/DeepSeek-V4-Flash-0731 · ")
    out = io.StringIO()
    PromReporter().report(report, out)
    assert {labels["model"] for _, labels, _ in samples(out.getvalue()) if "model" in labels} == {
        "deepseek-ai/DeepSeek-V4-Flash-0731"}


def test_other_folders_keep_their_own_name() -> None:
    """Must not fire: a folder under the cache that is no snapshot (fixture 86's `~/.cache/huggingface/qwen3.8-27b-fp8`),
    a snapshot's own subfolder, and a Kaggle version folder read as before."""
    assert model_name("~/.cache/huggingface/qwen3.8-27b-fp8") == "qwen3.8-27b-fp8"
    assert model_name(_PATH + "/") == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert model_name(_PATH + "/original") == "original"
    assert model_name("/kaggle/input/qwen-3/transformers/8b/1") == "qwen-3/transformers/8b/1"


# --------------------------------------------------------------------------------------------
# G4: a running engine's lines (a trainer's sleep and prefix-cache reset) say startup had finished

_ENDS_EARLY = "the log ends before startup finished"


def test_a_trainers_calls_of_a_running_engine_say_its_start_finished() -> None:
    """lmm-r1#71 (`(LLMRayActor pid=95409) INFO … [block_pool.py:264] Successfully reset prefix cache`) and round
    thirty-one's EasyR1#260 (`Sleep mode freed 58.62 GiB memory, 7.87 GiB memory is still in use.`), their host OOM
    after. Before: "the log ends before startup finished", UNKNOWN; the engine had started and served."""
    for folder, name in (("round_thirty_two", "01_lmmr1issue71_ray_job_caret_ansi_llmrayactor_host_oom_sleep_cut.log"),
                         ("round_thirty_one", "15_easyr1issue260_v1_083_8xh100_ray_workerdict_sleep_mode_freed_58_62_"
                                              "still_7_87_host_oom_cut.log")):
        report = log_report(pasted(folder, name), name)
        assert not any(w.startswith(_ENDS_EARLY) for w in report.warnings)
        assert report.failure is None and report.verdict == "ok"


def test_a_log_cut_in_its_profile_still_ends_before_startup_finished() -> None:
    """Must not fire: round thirty-one's discuss.vllm.ai 2584, cut while profiling."""
    name = "01_discussvllm2584_v1_5090_qwen36_27b_awq_mtp_weights_18_47_compile_then_profiling_cut.log"
    report = log_report(pasted("round_thirty_one", name), name)
    assert any(w.startswith(_ENDS_EARLY) for w in report.warnings)


# --------------------------------------------------------------------------------------------
# G6: the platform from ROCm torch's OOM and from vllm-ascend's frames

HIP = "15_vllmgfx906issue14_rocm_tp2_hip_oom_joined_error_records_one_line.log"
ASCEND = "02_verl6764_ascend_nested_vllmhttpserver_enginecore_dp0_traceback_initialize_kv_caches_cut.log"


def test_the_platform_from_a_hip_oom_and_from_vllm_ascends_frames() -> None:
    """nlzy/vllm-gfx906#14 (`HIP out of memory. …`, no platform line) and verl#6764 (`File "/vllm-ascend/vllm_ascend/
    patch/platform/patch_core.py", …`): before, no platform."""
    assert log_report(pasted("round_thirty_two", HIP), HIP).environment.platform == "rocm"
    assert log_report(pasted("round_thirty_two", ASCEND), ASCEND).environment.platform == "ascend"


def test_a_cuda_oom_and_a_package_listing_name_no_such_platform() -> None:
    """Must not fire: fixture 108's `CUDA error: out of memory`; a listing's `vllm_ascend  0.9.0rc2` line."""
    name = "108-v1-19186-tp-capture-end-oom.log"
    text = (Path(__file__).parent.parent / "fixtures" / "logs" / "public" / name).read_text(encoding="utf-8")
    assert log_report(text, name).environment.platform is None  # it names none; a CUDA OOM makes no ROCm
    listing = ("vllm_ascend                       0.9.0rc2\n"
               "INFO 05-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 10.00 GiB\n")
    assert log_report(listing).environment.platform is None


HIP_OOM_JOINED = "15_vllmgfx906issue14_rocm_tp2_hip_oom_joined_error_records_one_line.log"
"""vllm-gfx906#14: `HIP out of memory. … #environment-variables)` then, 32 and 27 blanks on, two `ERROR 07-04 14:53:23
[engine.py:458] …` records on the same line (a docker console's wrapped lines, padded to its width)."""


def test_records_a_terminal_padded_onto_a_messages_line_are_lines_of_their_own() -> None:
    """G1. Before: the OOM's message ran on through both records (737 characters)."""
    report = log_report(pasted("round_thirty_two", HIP_OOM_JOINED), HIP_OOM_JOINED)
    assert report.failure is not None
    assert report.failure.message.endswith("(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    assert any("2 vLLM records ran on after another record on the same line" in w for w in report.warnings)


def test_a_record_quoted_one_blank_after_a_message_stays_in_it() -> None:
    """Must not fire: a message that quotes a record one blank on (a person's words, an exception that embeds one)."""
    text = pasted("round_thirty_two", HIP_OOM_JOINED)
    squeezed = text.replace("#environment-variables)" + " " * 32, "#environment-variables) ", 1).replace(
        "last):" + " " * 27, "last): ", 1)
    report = log_report(squeezed, HIP_OOM_JOINED)
    assert report.failure is not None and "ERROR 07-04 14:53:23 [engine.py:458]" in report.failure.message
    assert not any("ran on after another record" in w for w in report.warnings)
