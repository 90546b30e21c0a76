"""Real pastes, round thirteen (stop 46): whole log files committed to repositories, each test
naming its file."""
from __future__ import annotations

from pathlib import Path

from kvaudit.engines.logs import report_from_log_text
from kvaudit.render.summary import headline
from kvaudit.schema import FailureKind

_DATA = Path(__file__).parent / "data" / "round_thirteen"


def _log(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


def test_a_sigterm_while_ray_waits_is_an_interrupted_boot() -> None:
    """agent-distillation's vllm.log (0.8.5.post1): Ray's sigterm_handler ends the wait for a placement
    group with `SystemExit: 15`; before, the logged `15` was read as the message, the exception line as absent."""
    failure = _log("ray_sigterm_system_exit.log").failure
    assert failure is not None and failure.kind is FailureKind.INTERRUPTED
    assert failure.message == "SystemExit: 15: exit 15, from a handler of SIGTERM: the process was told to stop"


def test_a_traceback_after_startup_is_named_by_its_own_exception_line() -> None:
    """distributed_agent_gc's vllm.log (0.7.2): after startup and an orderly shutdown, `Exception ignored
    in: …` and its traceback end in `KeyboardInterrupt: MQLLMEngine terminated`: not "the boot died"."""
    report = _log("shutdown_keyboard_interrupt.log")
    assert report.failure is None
    notes = [w for w in report.warnings if w.startswith("after startup finished")]
    # the excerpt's `KeyboardInterrupt` line is found (round seventeen's review) and named by the catalogue
    assert notes == ["after startup finished: KeyboardInterrupt: MQLLMEngine terminated: the process was interrupted "
                     "(SIGINT, or a stop of vLLM's own)"]


def test_the_headline_names_pp_and_a_versioned_model_folder() -> None:
    """MapCoder's vllm.log (0.6.3.post1, pipeline_parallel_size=4 on the engine line) and an
    EXACT submission's vllm_server.log (Kaggle's `/kaggle/input/models/qwen-lm/qwen-3/transformers/8b/1`)."""
    assert " · tp 1 pp 4 " in headline(_log("pp4_engine_line.log")) + " "
    assert " · qwen-3/transformers/8b/1 · " in headline(_log("kaggle_model_path.log"))


def test_a_progress_bars_redraw_is_not_the_failures_words() -> None:
    """distributed_agent_gc's vllm_new_setup.log (0.7.2): ` | 26/35 [00:20<00:06,  1.34it/s]Capturing …`
    right after `RuntimeError: Engine process failed to start. …` was glued to its message."""
    failure = _log("progress_bar_after_error.log").failure
    assert failure is not None
    assert failure.message == "RuntimeError: Engine process failed to start. See stack trace for the root cause."


def test_a_file_whose_records_go_back_in_time_says_two_boots_may_share_it() -> None:
    """distributed_agent_gc's vllm_new_setup.log (0.7.2): a boot that died at 14:47:42 waiting for a Ray
    placement group and one whose graph capture finished at 14:10:42, written into one file at once."""
    report = _log("two_boots_one_file.log")
    assert ("two_boots_one_file.log: the records go back in time, from 04-18 14:47:42 to 04-18 14:10:42: two boots "
            "may have written into this file at once, or two logs were joined, and its figures and failure may mix "
            "them") in report.warnings


def test_ray_folded_lines_late_with_their_first_times_are_no_second_boot() -> None:
    text = ("(RayWorkerWrapper pid=6, ip=10.5.1.70) INFO 08-07 10:36:23 model_runner.py:692] Loading model weights "
            "took 24.4023 GB\n"
            "(RayWorkerWrapper pid=6, ip=10.5.1.70) INFO 08-07 10:27:36 model_runner.py:692] Loading model weights "
            "took 24.4023 GB [repeated 30x across cluster]\n")
    assert not any("back in time" in w for w in report_from_log_text(text, "x").warnings)


# ------------------------------------------------------------------------------------------
# The second review of this stop's reading (a reviewer's reproducers, each wrong before its fix)

_CUT = "ends before its exception line"


def test_exception_lines_of_other_shapes_end_a_traceback() -> None:
    """`triton.runtime.errors.OutOfResources: …` and `torch._dynamo.exc.Unsupported: …`: a dotted name
    and `: `, which the catalogue does not read, are the traceback's end all the same."""
    for name in ("review_out_of_resources.log", "review_dynamo_unsupported.log"):
        report = _log(name)
        assert report.failure is not None and not any(_CUT in w for w in report.warnings), name


def test_a_long_line_of_another_process_does_not_hide_the_exception_line() -> None:
    """An API server's 4 KB args line between the engine core's frames and its exception line."""
    assert not any(_CUT in w for w in _log("review_long_line_in_traceback.log").warnings)


def test_ray_may_print_a_workers_exception_line_under_another_worker() -> None:
    assert not any(_CUT in w for w in _log("review_ray_dedup_exception.log").warnings)


def test_a_bar_redraw_that_keeps_its_blocks_is_not_the_failures_words() -> None:
    failure = _log("review_bar_with_blocks.log").failure
    assert failure is not None
    assert failure.message == "RuntimeError: Engine process failed to start. See stack trace for the root cause."


def test_a_ray_node_on_another_clock_or_a_day_month_log_is_no_second_boot() -> None:
    for name in ("review_ray_node_other_zone.log", "review_day_month.log"):
        assert not any("back in time" in w for w in _log(name).warnings), name


def test_a_versioned_model_folder_at_the_root_keeps_no_empty_part() -> None:
    from kvaudit.render.summary import model_name
    assert (model_name("/ckpt/1"), model_name("data/run/checkpoints/2"), model_name("/m/Qwen3-8B/")) == \
           ("ckpt/1", "data/run/checkpoints/2", "Qwen3-8B")
