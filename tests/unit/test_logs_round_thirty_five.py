"""Real pastes, round thirty-five (large deployments: DP/EP, MLA, multi-node, Ascend, ROCm, 2025–2026). The data are
the files as the round saved them (tests/unit/data/round_thirty_five), each finding's must-not-fire case beside it."""
from __future__ import annotations

from kvaudit.engines.logs import report_from_log_text
from kvaudit.schema import FailureKind
from tests.unit.factories import pasted

STATS_DUMP_ONLY = "04_vllm43222_v1_worker_dp0_ep0_frames_deepseek_v2_mla_dump_scheduler_stats_809_running_cut.log"
"""vllm#43222: DP/EP workers' frames, then the engine core's `[dump_input.py:81] Dumping scheduler stats:
SchedulerStats(num_running_reqs=809, …` (its `Dumping scheduler output …` record trimmed)."""
DP_FORCES_EAGER = "09_vllm18567_v091dev_tp2_dp2_command_args_dp_forcing_eager_cut.log"
"""vllm#18567: `[cuda.py:156] Data Parallel: Forcing enforce eager to be True since DP is currently not supported
with CUDA Graphs.`"""


def test_a_step_dumps_stats_record_says_the_engine_was_serving() -> None:
    """G1. Before: `crash … the boot died` (UNKNOWN); the 809 running requests say startup had finished."""
    report = report_from_log_text(pasted("round_thirty_five", STATS_DUMP_ONLY), "x")
    assert report.failure is None
    assert any(w.startswith("after startup finished: Dumping scheduler stats: SchedulerStats(num_running_reqs=809")
               for w in report.warnings)
    assert any(w.startswith("after startup finished: traceback frames logged at ERROR") for w in report.warnings)


def test_a_death_before_any_step_dump_stays_the_boots() -> None:
    """Must not fire: the same frames with no dump record after them are a death in startup."""
    text = pasted("round_thirty_five", STATS_DUMP_ONLY)
    cut = text[:text.index("(EngineCore_DP0 pid=2647451) ERROR 05-20 10:42:56 [dump_input.py:81]")]
    report = report_from_log_text(cut, "x")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH


def test_data_parallel_forcing_eager_is_eager() -> None:
    """G5. Before: enforce_eager unknown."""
    assert report_from_log_text(pasted("round_thirty_five", DP_FORCES_EAGER), "x").config.enforce_eager is True
    other = "INFO 05-26 03:09:32 [cuda.py:156] Data Parallel: Forcing enforce eager to be False for a test\n"
    assert report_from_log_text(other, "x").config.enforce_eager is None


def test_a_v1_process_record_or_a_v1_logger_path_names_v1() -> None:
    """G3. Before: no generation for 02 (`(EngineCore_0 pid=1285015) INFO …`), 10 (`(EngineCore_DP0 pid=258)
    WARNING …`) and 12 (`(APIServer pid=1) DEBUG … [v1/engine/utils.py:1143] …`)."""
    for name in ("02_glmv162_v0101_glm45v_fp8_tp8_args_max_model_len_65536_enginecore_0_cut.log",
                 "10_sparkdocker136_gptoss120_compilation_config_tail_full_and_piecewise_enginecore_dp0_parallel_state_cut.log",
                 "12_minimaxm27issue9_v1_debug_waiting_for_core_engine_k8s_args_flow_list_tp_cut.log"):
        assert report_from_log_text(pasted("round_thirty_five", name), "x").engine.generation == "V1", name


def test_v0_heads_and_a_name_in_prose_name_no_v1() -> None:
    """Must not fire: V0's worker tag and MQLLMEngine's `[engine.py:N]` head; the engine core named in a sentence; a V0
    engine line beside a V1 sign wins."""
    v0 = ("(VllmWorkerProcess pid=921093) INFO 03-01 10:00:00 [worker.py:267] Memory profiling takes 5.10 seconds\n"
          "ERROR 03-01 10:00:01 [engine.py:467] CUDA out of memory.\n")
    assert report_from_log_text(v0, "x").engine.generation is None
    prose = "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.\n"
    assert report_from_log_text(prose + v0, "x").engine.generation is None
    both = ("INFO 03-01 09:59:59 [llm_engine.py:237] Initializing a V0 LLM engine (v0.7.2) with config: model='M'\n"
            "(EngineCore_DP0 pid=258) WARNING 03-25 18:29:43 [multiproc_executor.py:880] Reducing Torch parallelism\n")
    assert report_from_log_text(both, "x").engine.generation == "V0"


def test_the_engine_lines_npu_device_names_ascend() -> None:
    """G2. vllm-ascend#4503 keeps the engine line (`…, device_config=npu, …`) and no platform line. Must not fire:
    `device_config=cuda` (ROCm's too) and `device_config=cpu` (vLLM 0.6's Neuron boots) name no platform."""
    name = "05_vllmascend4503_v0110_npu_ms_swift_dp_engine_config_max_seq_len_262144_chinese_cut.log"
    text = pasted("round_thirty_five", name)
    assert report_from_log_text(text, "x").environment.platform == "ascend"
    for device in ("cuda", "cpu"):
        other = text.replace("device_config=npu", f"device_config={device}")
        assert report_from_log_text(other, "x").environment.platform is None, device
