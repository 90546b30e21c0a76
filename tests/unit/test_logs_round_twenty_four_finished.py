"""Real pastes, round twenty-four: what a paste states that kvaudit did not read (the logo banner's model, V1 by its
own traceback) and a start vLLM reports as finished whose memory lines the paste skipped. Each test names its source
and what kvaudit read before; the data are the excerpts as the round saved them (tests/unit/data/round_twenty_four),
a case where the rule must not fire beside each rule."""
from __future__ import annotations

from pathlib import Path

from kvaudit.engines.logs import report_from_log_text
from kvaudit.render.summary import NO_FIGURES, NO_MEMORY_LINES, no_ranks_line
from kvaudit.schema import Report, Verdict

_DATA = Path(__file__).parent / "data" / "round_twenty_four"
TWO_COMMANDS = "03_vllm17431_a800_success_and_error_commands_v1_kv_failed_cut.log"
"""vllm#17431 (vLLM 0.8.5, A800): a "success" and an "error" command, then unprefixed ERROR lines of `core.py:396`
(`EngineCore failed to start.`, frames under `…/vllm/v1/engine/core.py`) cut mid-traceback."""
PORT = "05_strixhalo12_comment_podman_gfx1151_banner_then_routes_user_says_port_never_opens.log"
"""kyuz0/amd-strix-halo-vllm-toolboxes#12 (vLLM 0.17.1rc1, ROCm gfx1151, "port never opens"): the banner and
`non-default args` at 20:30:54, then (the paste skips the boot's middle) `Starting vLLM server on http://0.0.0.0:8080`
and the route list at 20:32:02."""
JOURNALD = "06_nixamdai68_journald_lemond_wrapper_timeout0s_then_comment_banner.log"
"""noamsto/nix-amd-ai#68 (vLLM 0.23.1 ROCm): journald, then the lemonade wrapper's, then vLLM's prefix; the banner's
`version 0.23.1.dev0+rocm…` and `model   Qwen/Qwen3.5-0.8B` lines and no config line."""


def _report(name: str, text: str | None = None) -> Report:
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8") if text is None else text, name)


_BANNER = ("(APIServer pid=1) INFO 05-15 09:06:22 [utils.py:306]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.21.0\n"
           "(APIServer pid=1) INFO 05-15 09:06:22 [utils.py:306]   █▄█▀ █     █     █     █  model   {model}\n")


def test_the_banners_model_line_names_the_model() -> None:
    """Before: config.model null (the banner's version was read, not the model on the line below it)."""
    report = _report(JOURNALD)
    assert report.config.model == "Qwen/Qwen3.5-0.8B"
    assert report.engine.version is not None and report.engine.version.startswith("0.23.1.dev0+rocm")


def test_a_config_line_names_the_model_before_the_banner() -> None:
    args = "(APIServer pid=1) INFO 05-15 09:06:22 [utils.py:233] non-default args: {'model': '/models/served'}\n"
    assert _report("b.log", _BANNER.format(model="org/banner-model") + args).config.model == "/models/served"
    assert _report("b.log", _BANNER.format(model="org/banner-model")).config.model == "org/banner-model"


def test_a_sentence_naming_a_model_is_no_banner() -> None:
    text = "INFO 05-15 09:06:22 [utils.py:306] Loading the model   org/x now\n"
    assert _report("b.log", text).config.model is None


def test_v1s_own_traceback_says_v1_ran() -> None:
    """Before: engine.generation absent (no `(EngineCore pid=…)` prefix, no engine config line in the paste)."""
    assert _report(TWO_COMMANDS).engine.generation == "V1"


def test_a_v0_traceback_says_nothing_of_v1() -> None:
    v0 = ('ERROR 04-30 10:20:36 [engine.py:400] Traceback (most recent call last):\n'
          'ERROR 04-30 10:20:36 [engine.py:400]   File "/env/lib/python3.11/site-packages/vllm/engine/llm_engine.py", '
          'line 280, in __init__\n'
          'ERROR 04-30 10:20:36 [engine.py:400] RuntimeError: CUDA error: an illegal memory access was encountered\n')
    assert _report("v0.log", v0).engine.generation is None


def test_a_finished_start_whose_memory_lines_the_paste_skipped_fits() -> None:
    """Before: verdict unknown, "not enough facts", and the table said the excerpt "ends before the model loaded"
    although vLLM logs `Starting vLLM server on` only once the engine finished (KV sized, graphs captured)."""
    report = _report(PORT)
    assert report.failure is None and report.config.max_model_len is None
    assert report.verdict is Verdict.OK
    assert report.verdict_reason == "fits: the max_model_len it serves passed vLLM's own check"
    assert no_ranks_line(report) == NO_MEMORY_LINES


def test_a_paste_that_stops_before_the_server_is_not_called_finished() -> None:
    text = (_DATA / PORT).read_text(encoding="utf-8")
    cut = text[:text.index("Starting vLLM server on")]
    report = _report(PORT, cut[:cut.rindex("\n", 0, len(cut) - 1) + 1])
    assert report.verdict is Verdict.UNKNOWN
    assert no_ranks_line(report) == NO_FIGURES
