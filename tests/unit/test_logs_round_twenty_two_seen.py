"""Real pastes, round twenty-two's "seen, not changed" (stop 53): a docker-style quoted argument list, the model
after vLLM's image in a container's run, two pods or two CI runs in one paste, named workers' lower bound on the
parallel size, LMCache's KV registration, a two-node boot's absent ranks. Each test names its source; the data are
the excerpts as the helpers saved them (tests/unit/data/round_twenty_two), a negative case beside each rule."""
from __future__ import annotations

from pathlib import Path

from kvaudit.engines.logs import report_from_log_text

_DATA = Path(__file__).parent / "data" / "round_twenty_two"
QUOTED_ARGS = "09_vllm10360_v064post1_qwen32b_awq_a6000_profiling_inline.log"
"""vllm#10360 (0.6.4.post1, Qwen2.5-32B AWQ on an A6000): the container's arguments as `docker inspect` prints them,
then the profiling line."""
IMAGE_MODEL = "13_recipes381_dsv4pro_8xh200_dp8_ep_800k_command_shape_cut.log"
"""recipes#381 (DeepSeek-V4-Pro, 8×H200, DP8 EP): a `docker run` of `vllm/vllm-openai:deepseekv4-cu130` and the
model as the image's first positional, cut inside `--max-model-len`."""


def _text(name: str) -> str:
    return (_DATA / name).read_text(encoding="utf-8")


def test_a_docker_style_quoted_argument_list_is_read_as_the_command() -> None:
    """vllm#10360: CMD: `'--model' 'Qwen2.5-32B-Instruct-AWQ' '--max-model-len' '4096' '--enable-prefix-caching'`.
    Before: model and max_model_len null (gmu 0.9 from the profiling line only)."""
    report = report_from_log_text(_text(QUOTED_ARGS), QUOTED_ARGS)
    assert report.config.model == "Qwen2.5-32B-Instruct-AWQ"
    assert report.config.max_model_len == 4096
    assert report.config.gpu_memory_utilization == 0.9


def test_a_quoted_flag_in_a_persons_sentence_is_no_argument_list() -> None:
    """The same paste with the flag quoted in a sentence, its value not an argument of its own: nothing is read."""
    text = _text(QUOTED_ARGS).replace("CMD: `'--model' 'Qwen2.5-32B-Instruct-AWQ' '--max-model-len' '4096' "
                                      "'--enable-prefix-caching'`", "I did not set '--max-model-len' to 4096 here")
    assert "'--max-model-len' to" in text
    report = report_from_log_text(text, QUOTED_ARGS)
    assert report.config.model is None and report.config.max_model_len is None


def test_the_model_after_vllms_image_in_a_container_run_is_read() -> None:
    """recipes#381: `vllm/vllm-openai:deepseekv4-cu130 \\` then `deepseek-ai/DeepSeek-V4-Pro \\`. Before: model null
    (dp 8, EP, fp8 KV and block 256 read)."""
    report = report_from_log_text(_text(IMAGE_MODEL), IMAGE_MODEL)
    assert report.config.model == "deepseek-ai/DeepSeek-V4-Pro"
    assert report.config.extra_args["data_parallel_size"] == 8
    assert report.config.block_size == 256


def test_a_flag_after_vllms_image_is_no_model() -> None:
    """The same run without the positional (its next word a flag), and one whose next word starts another program
    (`bash`): no model."""
    text = _text(IMAGE_MODEL)
    for replacement in ("", "  bash \\\n"):
        edited = text.replace("  deepseek-ai/DeepSeek-V4-Pro \\\n", replacement)
        assert edited != text
        report = report_from_log_text(edited, IMAGE_MODEL)
        assert report.config.model is None
        assert report.config.block_size == 256
