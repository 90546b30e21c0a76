"""Real pastes, round thirty-three (issues of vLLM and of the projects around it, 2024–2026). The data are the files
as the round saved them (tests/unit/data/round_thirty_three), each finding's must-not-fire case beside it."""
from __future__ import annotations

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.parse import _yaml_command_lists
from tests.unit.factories import pasted

MQ_ENGINE_OOM = "03_vllm23230_v0_0101_l40s_nemotron_nano9b_weights_16_5557_oom_33_75_gib_engine_py.log"
"""vllm#23230 (0.10.1, L40S): `Model loading took 16.5557 GiB`, then the OOM and MQLLMEngine's frames
(`…/vllm/engine/multiprocessing/engine.py`)."""
MP_EXECUTOR_FRAMES = "04_vllm12539_v0_l4_compose_prefix_traceback_initialize_cache_cut.log"
"""vllm#12539: compose-prefixed frames `llm_engine.py … _initialize_kv_caches` → `…/vllm/executor/
mp_distributed_executor.py … _run_workers` (cut)."""
CUT_ENGINE_LINE = "06_vllmpr29137_v1_0112dev_gguf_iq1s_command_args_max_model_len_40960_cut.log"
"""vllm PR 29137: `Initializing a V1 LLM engine (v0.11.2.dev67+g1d642872a.d20251120) with confi` (cut)."""


def _generation(text: str) -> str | None:
    return report_from_log_text(text, "x").engine.generation


def test_frames_only_v0_runs_name_the_v0_engine() -> None:
    """G3. Before: no engine generation for either."""
    assert _generation(pasted("round_thirty_three", MQ_ENGINE_OOM)) == "V0"
    assert _generation(pasted("round_thirty_three", MP_EXECUTOR_FRAMES)) == "V0"


def test_frames_both_engines_run_name_none_and_v1_frames_win() -> None:
    """Must not fire: `vllm/engine/llm_engine.py` and `vllm/worker/worker_base.py` ran under V1 too (0.8's LLMEngine
    dispatch, its WorkerWrapperBase); a V1 frame beside a V0 one is V1's boot."""
    frames = ('Traceback (most recent call last):\n'
              '  File "/usr/lib/python3/site-packages/vllm/engine/llm_engine.py", line 501, in from_engine_args\n'
              '  File "/usr/lib/python3/site-packages/vllm/worker/worker_base.py", line 612, in init_worker\n'
              'RuntimeError: CUDA error: out of memory\n')
    assert _generation(frames) is None
    both = frames.replace('vllm/worker/worker_base.py', 'vllm/executor/mp_distributed_executor.py') + (
        '  File "/usr/lib/python3/site-packages/vllm/v1/engine/core.py", line 80, in __init__\n')
    assert _generation(both) == "V1"


def test_the_engine_line_cut_before_its_config_names_the_engine() -> None:
    """G5. Before: the version was read (from its own line) but not the generation."""
    report = report_from_log_text(pasted("round_thirty_three", CUT_ENGINE_LINE), "x")
    assert (report.engine.generation, report.engine.version) == ("V1", "0.11.2.dev67+g1d642872a.d20251120")
    v0 = report_from_log_text("INFO 01-02 03:04:05 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with co\n",
                              "x")
    assert (v0.engine.generation, v0.engine.version) == ("V0", "0.6.3")


def test_a_sentence_naming_the_engine_line_is_no_engine() -> None:
    """Must not fire: the words inside a record's message, not at its start (a wrapper's record quoting them)."""
    text = "INFO 01-02 03:04:05 [launcher.py:93] still waiting after Initializing a V1 LLM engine (v0.11.0) with\n"
    assert _generation(text) is None
    assert _generation(text.replace("still waiting after ", "")) == "V1"


K8S_COMMAND_LIST = "08_lmcachepr3171_b200_runtimeerror_worker_failed_cuda_oom_178_35_k8s_command_list_tp8_cut.log"
"""LMCache PR 3171 (8× B200): a worker's CUDA OOM, then the pod's `command:` as a YAML list, one argument an item
(`- vllm`, `- serve`, `- deepseek-ai/DeepSeek-V4-Pro`, …, `- '--tensor-parallel-size'`, `- '8'`, …)."""


def test_a_command_written_as_a_yaml_list_is_read_as_the_line_it_runs() -> None:
    """G1. Before: the config was empty."""
    config = report_from_log_text(pasted("round_thirty_three", K8S_COMMAND_LIST), "x").config
    assert (config.model, config.tensor_parallel_size, config.kv_cache_dtype, config.block_size) == (
        "deepseek-ai/DeepSeek-V4-Pro", 8, "fp8", 256)


def test_other_yaml_lists_stay_lists() -> None:
    """Must not fire: a package list that names vLLM, a list at two indents, a list of two items."""
    failed = "(EngineCore_DP0 pid=7) ERROR 12-24 11:38:48 [core.py:866] EngineCore failed to start.\n"
    for listed in ("- vllm\n- serve-static\n- transformers\n", "- vllm\n  - serve\n  - M\n", "- vllm\n- serve\n"):
        assert report_from_log_text(listed + failed, "x").config.model is None, listed
    python = "- python3\n- -m\n- vllm.entrypoints.openai.api_server\n- --model\n- M\n- --max-model-len\n- '4096'\n"
    config = report_from_log_text(python + failed, "x").config
    assert (config.model, config.max_model_len) == ("M", 4096)


def test_a_wrappers_line_that_starts_like_the_engine_line_names_no_engine() -> None:
    """A review's cases (2026-12-08): only vLLM's line cut short names the engine; a wrapper's `Initializing an LLM
    engine for rollout worker 3` after a real V1 engine line leaves it V1."""
    v1 = ("INFO 06-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v0.9.0) with config: model='M', "
          "tensor_parallel_size=1\n")
    wrapper = "INFO 06-01 10:00:01 [rollout.py:12] Initializing an LLM engine for rollout worker 3\n"
    assert _generation(wrapper) is None
    assert _generation(v1 + wrapper) == "V1"
    for cut in ("Initializing a V1 LLM engine (v0.9", "Initializing a V1 LLM engine", "Initializing an LLM engine wi"):
        assert _generation(f"INFO 06-01 10:00:00 [core.py:58] {cut}\n") == ("V1" if "V1" in cut else "V0"), cut


def test_a_module_level_frame_of_the_front_ends_package_is_no_v0_sign() -> None:
    """0.8–0.10's API server imports vllm/engine/multiprocessing under V1 too: an import-time frame says nothing."""
    frames = ('Traceback (most recent call last):\n'
              '  File "/usr/lib/python3/site-packages/vllm/engine/multiprocessing/__init__.py", line 12, in <module>\n'
              '    from vllm.engine.llm_engine import LLMEngine\n'
              'ImportError: cannot import name \'LLMEngine\'\n')
    assert _generation(frames) is None


def test_yaml_lists_read_with_crlf_and_not_from_a_sentence_list() -> None:
    """CRLF line ends read as LF's; a Markdown list whose second item is a sentence (`- serve failed`) is no command;
    the lines keep their count."""
    failed = "(EngineCore_DP0 pid=7) ERROR 12-24 11:38:48 [core.py:866] EngineCore failed to start.\n"
    crlf = "- vllm\r\n- serve\r\n- M\r\n- '--tensor-parallel-size'\r\n- '2'\r\n"
    config = report_from_log_text(crlf + failed, "x").config
    assert (config.model, config.tensor_parallel_size) == ("M", 2)
    assert report_from_log_text("- vllm\n- serve failed\n- the model M\n" + failed, "x").config.model is None
    assert _yaml_command_lists("- vllm\n- serve\n- M") == "vllm serve M\n\n"  # its two line breaks, no third
