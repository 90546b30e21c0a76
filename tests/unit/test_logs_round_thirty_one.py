"""Real pastes, round thirty-one (findings G1–G3; mostly forum and blog pages): a config a forum's typographic quotes
hid (discuss.vllm.ai 1602), a trimmed startup error read on into the issue's prose (an issue mirror of
edutelligence#570), and vLLM's KV check cut after its first words behind a head without its time (a mirror's summary
of a DeepSeek-V4-Pro TP8 PP2 boot). Each test names its source and what kvaudit read before; the data are the files as
the round saved them (tests/unit/data/round_thirty_one), a case where the rule must not fire beside each rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.errors import BadInputError
from kvaudit.schema import FailureKind, Phase, Verdict
from tests.unit.factories import log_report, pasted

_ROUND = "round_thirty_one"
_PUBLIC = Path(__file__).parent.parent / "fixtures" / "logs" / "public"
QUOTES = "02_discussvllm1602_v1_0101dev_mistral7b_typographic_quotes_args_max_num_batched_200000_cut.log"
"""discuss.vllm.ai 1602: `non-default args: {‘model_tag’: ‘mistralai/Mistral-7B-Instruct-v0.2’, …, ‘block_size’: 32,
…, ‘max_num_seqs’: 200, ‘enable_chunked_prefill’: False}` and the engine line's `model=‘mistralai/…’`, then vLLM's
`Chunked prefill is enabled with max_num_batched_tokens=200000.`"""
TRIMMED = ("06_edutelligence570_mirror_v1_rtxpro6000_tp2_gemma3_27b_wrapped_free_memory_cuda0_79_12_of_94_97_"
           "gmu095.log")
"""`ValueError: Free memory on device cuda:0 (79.12/94.97 GiB) on startup is less` / `than desired GPU memory
utilization (0.95, 90.22 GiB).`, then the issue's prose on the next line (`…even though GPUs 1 and 2 …`)."""
CUT_CHECK = "05_stepcodex_checkenoughkv_v0210_dsv4pro_tp8_pp2_offload_cut_valueerror_prose_15_57_vs_223_68.log"
"""`(EngineCore pid=401) ERROR [core.py:1140] ValueError: To serve at least one`, the rest of the message not in
the page (its figures told in prose below)."""


def test_a_forums_typographic_quotes_hide_no_knob() -> None:
    """Before: model, block_size and max_num_seqs null (the dict and the engine line's `model=‘…’` unread)."""
    config = log_report(pasted(_ROUND, QUOTES), QUOTES).config
    assert (config.model, config.block_size, config.max_num_seqs, config.max_num_batched_tokens) == (
        "mistralai/Mistral-7B-Instruct-v0.2", 32, 200, 200_000)
    # vLLM's own line says what it did, over what was typed: chunked prefill on
    assert config.enable_chunked_prefill is True


def test_an_apostrophe_in_prose_and_quotes_of_pythons_stay_as_they_are() -> None:
    """Must not fire: a dict in Python's quotes keeps a typographic apostrophe inside a value; `LLM(model=”…”)` and a
    person's `vLLM’s` read as before (fixture 88; round twenty's concurrency paste)."""
    args = ("INFO 09-13 13:31:16 [cli_args.py:261] non-default args: {'model': '/models/it’s-mine', "
            "'max_model_len': 4096}\n")
    assert log_report(args).config.model == "/models/it’s-mine"
    name = "88-v1-dsv4-44376-llm-kwargs-then-kv-short.log"
    assert log_report((_PUBLIC / name).read_text(encoding="utf-8"), name).config.model == "DeepSeek-V4-Flash"
    concurrency = "concurrency_without_size_line.log"
    assert log_report(pasted("round_twenty", concurrency), concurrency).config.model == "Qwen3.5-9B"


def test_a_trimmed_startup_error_ends_at_its_figures() -> None:
    """Before: the failure message ran on for 1,068 characters of the issue's prose."""
    report = log_report(pasted(_ROUND, TRIMMED), TRIMMED)
    assert report.failure is not None and report.failure.kind is FailureKind.STARTUP_MEMORY
    assert report.failure.message == ("ValueError: Free memory on device cuda:0 (79.12/94.97 GiB) on startup is less "
                                      "than desired GPU memory utilization (0.95, 90.22 GiB).")


def test_an_untrimmed_error_keeps_vllms_own_next_sentence() -> None:
    """Must not fire: vLLM's sentence after the figures (`Decrease GPU memory …`, `Try increasing …`) is the error's,
    on its line or the next."""
    for name, tail in (("15-v1-0.9.1-20305-startup.log", "Decrease GPU memory utilization or reduce GPU memory used "
                                                         "by other processes."),
                       ("43-v1-0.8-16118-quoted-error.log", "or decreasing `max_model_len` when initializing the "
                                                            "engine.")):
        report = log_report((_PUBLIC / name).read_text(encoding="utf-8"), name)
        assert report.failure is not None and report.failure.message.endswith(tail)
    wrapped = ("ERROR 06-01 10:00:00 [core.py:1136] ValueError: Free memory on device (31.44/47.38 GiB) on startup is "
               "less than desired GPU memory utilization (0.95, 45.01 GiB).\nDecrease GPU memory utilization or reduce "
               "GPU memory used by other processes.\n")
    report = log_report(wrapped)
    assert report.failure is not None and report.failure.message.endswith("used by other processes.")


def test_the_kv_checks_first_words_alone_do_not_fit() -> None:
    """Before: no failure at all, UNKNOWN (a head without its time, and the message cut before it says which check)."""
    report = log_report(pasted(_ROUND, CUT_CHECK), CUT_CHECK)
    assert report.failure is not None and (report.failure.kind, report.failure.phase) == (FailureKind.DOES_NOT_FIT,
                                                                                         Phase.KV)
    assert report.failure.message.startswith("ValueError: To serve at least one: vLLM's KV check, its message cut "
                                             "before the figures")
    assert report.verdict is Verdict.FAIL


def test_the_checks_whole_message_keeps_its_figures() -> None:
    """Must not fire: the message with its figures reads them (fixture 43: 24.00 GiB needed, 9.97 available), and words
    after `one` that are not the message's go on reading as before."""
    name = "43-v1-0.8-16118-quoted-error.log"
    report = log_report((_PUBLIC / name).read_text(encoding="utf-8"), name)
    assert report.failure is not None and report.failure.message.startswith(
        "ValueError: To serve at least one request with the models's max seq len (1048576), (24.00 GiB")
    prose = log_report("To serve at least one more model on this GPU, I lowered it.\n" + "INFO 05-01 10:00:00 "
                       "[gpu_worker.py:298] Available KV cache memory: 10.00 GiB\n")
    assert prose.failure is None


# --------------------------------------------------------------------------------------------
# G4: the driver's out-of-memory line, not a sentence that names its code word

DRIVER = "12_tobiasweiss_blog_v0211rc1_2x_dgx_spark_tp2_dsv4flash_prose_then_dmesg_oom_killer_worker_tp.log"
"""A blog on two DGX Sparks: "Then — crash. NV_ERR_NO_MEMORY. The OOM killer takes down VLLM::Worker_TP." in its first
paragraph, later the dmesg lines `NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]` and
`VLLM::Worker_TP invoked oom-killer: …`."""


def test_the_drivers_line_is_the_oom_not_the_sentence_naming_it() -> None:
    """Before: the failure's message was the blog's first sentence."""
    report = log_report(pasted(_ROUND, DRIVER), DRIVER)
    assert report.failure is not None and report.failure.kind is FailureKind.OOM
    assert "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]" in report.failure.message
    assert "Then — crash" not in report.failure.message
    assert log_report("Then — crash. NV_ERR_NO_MEMORY. The OOM killer takes down VLLM::Worker_TP.\n"
                      "INFO 05-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 10.00 GiB\n").failure is None


def test_a_pasted_kernel_line_stays_the_oom() -> None:
    """Must not fire: fixture 87's `18:03:03  kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory
    [NV_ERR_NO_MEMORY]` (a DGX Spark's drafter load), an OOM in load."""
    name = "87-v1-0.26-spark-336-drafter-driver-oom.log"
    report = log_report((_PUBLIC / name).read_text(encoding="utf-8"), name)
    assert report.failure is not None and (report.failure.kind, report.failure.phase) == (FailureKind.OOM, Phase.LOAD)
    assert report.failure.message.endswith("NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]")


# --------------------------------------------------------------------------------------------
# G6: a heading admits no document as a log

CATALOGUE = "14_errorcanon_aigenerated_catalog_md_heading_oom_79_15_llm_kwargs_in_workarounds.log"
"""An error catalogue's page: `# torch.cuda.OutOfMemoryError: CUDA out of memory. …` as its title, advice bullets with
`LLM(model='meta-llama/Llama-2-7b-hf', max_num_seqs=64)` in inline code, no line of a log."""


def test_a_page_whose_only_log_like_line_is_its_title_is_refused() -> None:
    """Before: read as a log whose config came from an advice bullet's `LLM(…)` (Llama-2-7b-hf, max_model_len 4096)."""
    with pytest.raises(BadInputError, match="no vLLM log lines found"):
        log_report(pasted(_ROUND, CATALOGUE), CATALOGUE)


def test_an_issue_title_above_a_real_log_still_reads_the_log() -> None:
    """Must not fire: round thirty's vllm-ascend#3308, its title quoting the error above the worker's frames."""
    name = "07_ascend3308_v0110rc0_title_npu_oom_worker_tp0_frames_initialize_kv_cache_cut.log"
    report = log_report(pasted("round_thirty", name), name)
    assert report.failure is not None and report.failure.phase is Phase.KV
