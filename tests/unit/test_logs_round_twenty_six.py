"""Real pastes, round twenty-six: a compose paste of an engine core's traceback frames with neither header nor
exception line (kyuz0/amd-strix-halo-vllm-toolboxes#73), a worker's exception logged as its repr and a command after
a `start cmd:` label (1Cat-vLLM#27, a V100 fork). Each test names its source and what kvaudit read before; the data
are the files as the round saved them (tests/unit/data/round_twenty_six), a case where the rule must not fire beside
each rule."""
from __future__ import annotations

from factories import log_report, pasted

from kvaudit.schema import FailureKind, Phase

FRAMES = "06_strixhalo73_gfx1151_compose_prefix_traceback_determine_available_memory_no_error_prefix_cut.log"
"""`vllm-1  | (EngineCore pid=165)   File ".../vllm/v1/engine/core.py", line 261, in _initialize_kv_caches` … `in
determine_available_memory` … `in collective_rpc`, cut: no `Traceback (most recent call last)`, no exception line."""
V100 = "08_1cat27_v100_tp2_cmd_kv_fp8_worker_valueerror_fp8e4nv.log"
"""`start cmd:  python -m vllm.entrypoints.openai.api_server --model Qwen3.6-35B-A3B-AWQ … --tensor-parallel-size 2
…`, then `(Worker_TP0 pid=60352) ERROR 05-06 06:47:41 [multiproc_executor.py:852] ValueError("type fp8e4nv not
supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')")`."""
WITH_ERROR = "11_club3090issue4_enginecore_bare_traceback_request_memory_free_22_76_of_24_gmu_0_97.log"
"""The same frames of an engine core, ending in `ValueError: Free memory on device cuda:0 (22.76/24.0 GiB) on startup
is less than desired GPU memory utilization (0.97, …)`."""


def _text(name: str) -> str:
    return pasted("round_twenty_six", name)


_report = log_report


def test_frames_through_the_start_without_header_or_exception_are_a_death_in_their_phase():
    # before: `UNKNOWN: not enough facts to decide whether max_model_len fits`, no failure
    report = _report(_text(FRAMES), FRAMES)
    assert (report.failure.kind, report.failure.phase) == (FailureKind.CRASH, Phase.PROFILE)
    assert report.failure.message == ("traceback frames through vLLM's startup (`in determine_available_memory`): "
                                      "the boot died; the traceback's header and exception line are not in the log")


def test_the_exception_line_after_such_frames_still_says_why():
    report = _report(_text(WITH_ERROR), WITH_ERROR)
    assert (report.failure.kind, report.failure.phase) == (FailureKind.STARTUP_MEMORY, Phase.BASELINE)
    assert report.failure.message.startswith("ValueError: Free memory on device cuda:0 (22.76/24.0 GiB) on startup")


def test_frames_that_are_no_death_of_the_start_are_no_failure():
    start = "(EngineCore pid=1) INFO 12-07 10:00:00 [core.py:90] Initializing a V1 LLM engine (v0.11.0) with config: " \
            "model='m'\n"
    frame = '(EngineCore pid=1)   File "/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 240, in {}'
    # a request's frames name no startup call; a WARNING record's frames were logged on purpose (a warmup vLLM got
    # past); faulthandler's dump of a hung process (`line N in name`) is its own rule
    assert _report(start + frame.format("execute_model") + "\n").failure is None
    warned = "(EngineCore pid=1) WARNING 12-07 10:00:01 [base.py:380]   File \"/venv/vllm/v1/worker/gpu_worker.py\", " \
             "line 240, in determine_available_memory\n"
    assert _report(start + warned).failure is None
    dumped = 'Thread 0x00007f (most recent call first):\n  File "/venv/vllm/v1/worker/gpu_worker.py", line 240 in ' \
             "determine_available_memory\n"
    assert _report(start + dumped).failure.message.startswith("a faulthandler stack dump")
    assert _report(start + frame.format("determine_available_memory") + "\n").failure.phase is Phase.PROFILE


def test_a_worker_s_exception_logged_as_its_repr_is_its_death():
    # before: no failure, `UNKNOWN: not enough facts`
    report = _report(_text(V100), V100)
    assert (report.failure.kind, report.failure.rank) == (FailureKind.CRASH, 0)
    assert report.failure.message == ("ValueError(\"type fp8e4nv not supported in this architecture. The supported "
                                      "fp8 dtypes are ('fp8e4b15', 'fp8e5')\")")


def test_a_raise_or_a_sentence_naming_an_exception_s_repr_is_no_death():
    from kvaudit.engines.failures import cause_of
    assert cause_of('ValueError("type fp8e4nv not supported")').anchor == "Error("
    assert cause_of("torch.AcceleratorError('CUDA error: an illegal memory access')").anchor == "Error("
    assert cause_of('    raise ValueError("type fp8e4nv not supported")') is None  # a raise's source line
    assert cause_of('I got ValueError("type fp8e4nv not supported") when starting it on a V100') is None
    assert cause_of('ValueError("x") was raised, then it fell back') is None  # the repr is not the whole message


def test_a_command_after_a_label_names_its_model():
    # before: tp 2, gmu 0.88, max_model_len 33000 read from the line, and its model dropped as a sentence's
    report = _report(_text(V100), V100)
    assert report.config.model == "Qwen3.6-35B-A3B-AWQ" and report.config.tensor_parallel_size == 2


def test_a_sentence_or_a_heading_before_a_command_names_no_model():
    sentence = "I then ran python -m vllm.entrypoints.openai.api_server --model Other-Model --tensor-parallel-size 2"
    assert _report(sentence + "\nINFO 12-07 10:00:00 [core.py:1] x").config.model is None
    long_label = "and after that, the start command: vllm serve Other-Model --tensor-parallel-size 2"
    assert _report(long_label + "\nINFO 12-07 10:00:00 [core.py:1] x").config.model is None
    assert _report("cmd: vllm serve Some/Model --tensor-parallel-size 2\nINFO 12-07 10:00:00 [core.py:1] x"
                   ).config.model == "Some/Model"
