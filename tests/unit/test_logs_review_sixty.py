"""A review of real pastes rounds 33–35's fixes (2026-12-08): each case as the review wrote it
(tests/unit/data/review_sixty), read as the paste it stands for."""
from __future__ import annotations

from kvaudit.engines.logs import report_from_log_text
from kvaudit.schema import FailureKind
from tests.unit.factories import pasted


def _report(name: str):
    return report_from_log_text(pasted("review_sixty", name), "x")


def test_padded_records_split_after_a_short_message_and_after_a_short_pad() -> None:
    """Round 32 G1's line with its message cut to ~140 characters, and with one pad of 5 blanks: the OOM stays the
    failure, its message without the joined records."""
    for name in ("a1_short_message_padded_records.log", "a2_one_record_padded_five.log"):
        failure = _report(name).failure
        assert failure is not None and failure.kind is FailureKind.OOM, name
        assert "ERROR 07-04" not in failure.message, name


def test_data_parallels_other_forced_eager_wording_is_eager() -> None:
    assert _report("c2_dp_eager_deepep_variant.log").config.enforce_eager is True


def test_lm_eval_commands_backend_anywhere_and_no_vllm_model_from_its_flags() -> None:
    """`--model vllm` after `--model_args`, and `python -m lm_eval …`: the engine arguments are read, and lm-eval's
    `--model vllm` is no model named `vllm` (no warning that the commands disagree on the model)."""
    for name in ("f1_lm_eval_model_after_model_args.log", "f2_python_m_lm_eval.log"):
        report = _report(name)
        assert (report.config.model, report.config.tensor_parallel_size) == ("Qwen/Qwen2.5-72B-Instruct", 8), name
        assert not any("pasted commands give" in w for w in report.warnings), name


def test_a_commented_out_yaml_item_is_not_run() -> None:
    """`# - --enforce-eager` between the items: not eager, and the items after it still read; an inline comment too."""
    for name in ("f4_yaml_commented_out_flag.log", "f4b_yaml_inline_comment.log"):
        config = _report(name).config
        assert (config.model, config.tensor_parallel_size, config.max_model_len, config.enforce_eager) == (
            "org/M", 2, 32768, None), name
