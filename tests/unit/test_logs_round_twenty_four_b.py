"""Real pastes, round twenty-four b (a re-audit of rounds twenty-four and twenty-five, whose notes were lost): a
traceback frame a paste cut and Markdown bolded (`l/lib/…/pynccl.py", line 139, in **init**`, vllm#21661), a V1
0.8 worker's death told only by the engine core's `got fatal signal from worker processes` (vllm-ascend#616), and
environment variables of two pasted commands that disagree (vllm#17431). Each test names its source and what
kvaudit read before; the pastes are the rounds' saved files, a case where the rule must not fire beside each rule."""
from __future__ import annotations

import pytest

from kvaudit.engines.logs.facts import FRAME, frame_call
from kvaudit.errors import BadInputError
from kvaudit.schema import Phase
from tests.unit.factories import log_report, pasted

FLATTENED = "10_vllm21661_v1_flattened_whitespace_nccl_unhandled_cuda_error_with_nccl_info.log"
"""vllm#21661, turn 5 (tests/unit/data/round_twenty_five): a flattened worker traceback whose first frame lost its
`File "/usr/loca` to the excerpt and whose `__init__` GitHub's Markdown made bold: `l/lib/python3.12/dist-packages/
vllm/distributed/device_communicators/pynccl.py", line 139, in **init** ERROR 11-04 18:02:56 [v1/executor/
multiproc_executor.py:597] self.all_reduce(data) …`, ending `RuntimeError: NCCL error: unhandled cuda error`."""
_ERROR = "ERROR 11-04 18:02:56 [v1/executor/multiproc_executor.py:597] "
_NCCL = f"{_ERROR}RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)\n"
_PYNCCL = "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/pynccl.py"


# --------------------------------------------------------------------------------------------
# G2: a communicator's constructor frame, cut and bolded, is a death in baseline


def test_the_flattened_nccl_paste_dies_in_baseline() -> None:
    """Before: "crash: RuntimeError: NCCL error: unhandled cuda error …", no phase. pynccl.py's __init__ (the
    communicator's warm-up all_reduce) runs while vLLM makes its process groups, before the model loads."""
    report = log_report(pasted("round_twenty_five", FLATTENED), FLATTENED)
    assert report.failure is not None
    assert (report.failure.phase, report.failure.message) == (
        "baseline", "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)")


@pytest.mark.parametrize("frame", [
    f'File "{_PYNCCL}", line 139, in __init__',
    f'File "{_PYNCCL}", line 139, in **init**',
    f'{_PYNCCL[9:]}", line 139, in **init**',  # the excerpt cut `File "/usr/loca`
    f'{_ERROR}File "{_PYNCCL}", line 139, in __init__',
])
def test_a_communicator_constructor_frame_places_the_nccl_error_in_baseline(frame: str) -> None:
    report = log_report(f"{frame}\n{_ERROR}self.all_reduce(data)\n{_NCCL}")
    assert report.failure is not None and report.failure.phase == "baseline"


@pytest.mark.parametrize("frame", [
    # a model's constructor: no phase from this rule (the model's layers are made in load, by make_layers' frames)
    'File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/llama.py", line 300, in **init**',
    # the communicator's all_reduce alone: where it ran is not said
    f'File "{_PYNCCL}", line 162, in all_reduce',
])
def test_other_frames_name_no_phase(frame: str) -> None:
    report = log_report(f"{frame}\n{_NCCL}")
    assert report.failure is not None and report.failure.phase is None


def test_a_communicator_made_after_the_start_is_no_boot_failure() -> None:
    """A trainer's weight-sync communicator, made after vLLM finished starting: the start is not what failed."""
    text = ("INFO 11-04 18:00:00 [api_server.py:1] Application startup complete.\n"
            f'File "{_PYNCCL}", line 139, in **init**\n{_NCCL}')
    report = log_report(text)
    assert report.failure is None
    assert report.warnings == ("after startup finished: RuntimeError: NCCL error: unhandled cuda error (run with "
                               "NCCL_DEBUG=INFO for details)",)


def test_a_bolded_dunder_is_read_as_python_wrote_it_and_a_bold_word_elsewhere_is_no_frame() -> None:
    m = FRAME.search(f'{_PYNCCL[9:]}", line 139, in **init**')
    assert m is not None and frame_call(m) == "__init__"
    assert FRAME.search("run it with **script** and output = func(*args, **kwargs)") is None
    assert FRAME.search('he wrote "x.py", line 3, in main') is None  # a quote, not a path opening a word


# --------------------------------------------------------------------------------------------
# G1: V1 0.8's "got fatal signal from worker processes" is a worker's death, its shutdown noise no failure

ASCEND_TWO_RUNS = "14_code55786078040_ascend_two_error_msgs_two_runs_caret_ansi_caret_M.log"
"""vllm-ascend#616 (tests/unit/data/round_twenty_four): two runs of a DP2×TP8 DeepSeek-V2-Lite boot; the later one
ends in both engine cores' `CRITICAL … [multiproc_executor.py:49] MulitprocExecutor got fatal signal from worker
processes, shutting down. See stack trace above for root cause issue.` and a worker's `Exception ignored in:
<Finalize object, dead>` traceback through vLLM's `signal_handler` to `SystemExit:`; the dying worker's own
traceback is not in the paste."""
_FATAL = ("CRITICAL 04-22 17:08:49 [core_client.py:359] Got fatal signal from worker processes, shutting down. See "
          "stack trace above for root cause issue.\n")
_DIED = ("a worker process died (V1's executor was signalled); its own traceback, which says why, is not in the "
         "log")


def test_the_engine_cores_fatal_signal_is_the_failure_and_the_shutdown_traceback_is_not() -> None:
    """Before: "crash on rank 6: Traceback (most recent call last): the boot died; its exception line is not in the
    log" (rank 6's traceback is its own shutdown, `raise SystemExit()` in the handler) and a warning that a traceback
    ends before its exception line."""
    report = log_report(pasted("round_twenty_four", ASCEND_TWO_RUNS), ASCEND_TWO_RUNS)
    assert report.failure is not None
    assert (report.failure.kind, report.failure.rank, report.failure.phase) == ("worker_died", None, None)
    assert report.failure.message == (
        "MulitprocExecutor got fatal signal from worker processes, shutting down. See stack trace above for root "
        f"cause issue: {_DIED}")
    assert not any("before its exception line" in w for w in report.warnings)


def test_the_front_ends_fatal_signal_alone_is_a_worker_death() -> None:
    report = log_report(_FATAL)
    assert report.failure is not None
    assert (report.failure.kind, report.failure.message) == (
        "worker_died", f"Got fatal signal from worker processes, shutting down. See stack trace above for root cause "
                       f"issue: {_DIED}")


def test_the_workers_own_error_above_the_fatal_signal_stays_the_failure() -> None:
    """The stack trace above, pasted: its exception is the cause, the fatal signal what followed."""
    text = ("(VllmWorker rank=1 pid=2) ERROR 04-22 17:08:48 [multiproc_executor.py:400] WorkerProc hit an exception.\n"
            "(VllmWorker rank=1 pid=2) ERROR 04-22 17:08:48 [multiproc_executor.py:400] torch.OutOfMemoryError: CUDA "
            "out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which 1.00 GiB is "
            "free.\n" + _FATAL)
    report = log_report(text)
    assert report.failure is not None
    assert (report.failure.kind, report.failure.rank) == ("oom", 1)


def test_a_traceback_ending_in_a_bare_system_exit_has_its_exception_line() -> None:
    """`SystemExit:` (an empty message, its blank trimmed) ends a traceback as `SystemExit` does."""
    from kvaudit.engines.logs.failure_timeline import traceback_end
    text = ("(VllmWorker rank=6 pid=7) Traceback (most recent call last):\n"
            '(VllmWorker rank=6 pid=7)   File "/v/vllm/v1/executor/multiproc_executor.py", line 308, in signal_handler\n'
            "(VllmWorker rank=6 pid=7)     raise SystemExit()\n"
            "(VllmWorker rank=6 pid=7) SystemExit:\n")
    assert traceback_end(text, 0) == (True, "SystemExit:")
    assert traceback_end(text.replace("SystemExit:\n", "Shutting down: bye\n"), 0) == (True, None)


# --------------------------------------------------------------------------------------------
# G4: a variable two pasted commands set differently is taken from neither

TWO_COMMANDS = "03_vllm17431_a800_success_and_error_commands_v1_kv_failed_cut.log"
"""vllm#17431 (tests/unit/data/round_twenty_four): a "success case" `VLLM_USE_V1=0  …/python -m
vllm.entrypoints.openai.api_server --model …` and an "error case" without the variable, above a V1 engine core's
`EngineCore failed to start.`"""
_DISAGREE = ("the pasted commands set VLLM_USE_V1 differently (0, unset): which command this log is of is not known, "
             "so it is not taken from them")
_SERVE = "vllm serve /m/X --tensor-parallel-size 2"


def test_a_variable_only_one_of_two_commands_sets_is_not_the_runs() -> None:
    """Before: `"env": {"VLLM_USE_V1": "0"}` beside `"generation": "V1"`: the success command's setting given to the
    failing run."""
    report = log_report(pasted("round_twenty_four", TWO_COMMANDS), TWO_COMMANDS)
    assert report.environment.env == {}
    assert report.engine.generation == "V1"
    assert _DISAGREE in report.warnings


@pytest.mark.parametrize("text", [
    f"VLLM_USE_V1=0 {_SERVE}\n",  # one command
    f"VLLM_USE_V1=0 {_SERVE}\nVLLM_USE_V1=0 {_SERVE} --max-model-len 4096\n",  # two that agree
    f"VLLM_USE_V1=0 {_SERVE}\nI ran it with python 3.11 and it worked before.\n",  # a sentence naming python
])
def test_a_variable_the_commands_agree_on_is_kept(text: str) -> None:
    report = log_report(text)
    assert report.environment.env == {"VLLM_USE_V1": "0"}
    assert not any("set VLLM_USE_V1 differently" in w for w in report.warnings)


# --------------------------------------------------------------------------------------------
# G3: a prompt in a folder named vllm, and vLLM's data-parallel example's sizes


def test_the_dp_example_after_a_prompt_in_a_vllm_folder_names_model_and_sizes() -> None:
    """Before: `kvaudit log · vllm` with no model, TP "≥ 7, sizes not stated": the prompt's `vllm]#` was taken for
    the program, and the example's `--tp-size`/`--dp-size` were no flags kvaudit read."""
    report = log_report(pasted("round_twenty_four", ASCEND_TWO_RUNS), ASCEND_TWO_RUNS)
    assert (report.config.model, report.config.tensor_parallel_size) == ("/mnt/deepseek/DeepSeek-V2-Lite", 8)
    assert report.config.extra_args["data_parallel_size"] == 2


@pytest.mark.parametrize("line, model, tp", [
    ("[root@h vllm]# python -m vllm.entrypoints.openai.api_server --model /m/X --tensor-parallel-size 8", "/m/X", 8),
    ("(venv) user@box:~/vllm$ python -m vllm.entrypoints.openai.api_server --model /m/X --tensor-parallel-size 4",
     "/m/X", 4),
    ("(venv) user@box:~/vllm$ vllm serve /m/X --tensor-parallel-size 2", "/m/X", 2),  # read so before too
    ("root@box:/workspace/vllm# vllm serve /m/X --tensor-parallel-size 2", "/m/X", 2),
])
def test_a_prompt_in_a_vllm_folder_is_no_program(line: str, model: str, tp: int) -> None:
    report = log_report(line + "\n")
    assert (report.config.model, report.config.tensor_parallel_size) == (model, tp)


def test_another_programs_tp_size_is_not_vllms() -> None:
    """Must not fire: SGLang's launch_server takes `--tp-size` too."""
    text = ("python -m sglang.launch_server --model-path /m/X --tp-size 8\n"
            "INFO 01-01 00:00:00 [gpu_model_runner.py:1] Model loading took 1.00 GiB and 1.0 seconds\n")
    report = log_report(text)
    dp_example = log_report(text.replace("-m sglang.launch_server --model-path", "examples/offline_inference/"
                                                                                   "data_parallel.py --model"))
    assert (report.config.tensor_parallel_size, dp_example.config.tensor_parallel_size) == (None, 8)


# --------------------------------------------------------------------------------------------
# G5: a traceback cut inside the engine core's constructor places the failure no further than the log shows

_OR_LATER = "in profile or later (its traceback is cut before the call that failed)"


def test_a_traceback_cut_in_the_engine_cores_constructor_is_profile_or_later() -> None:
    """vllm#17431's error log: `torch.compile takes 13.93 s in total`, `EngineCore failed to start.`, frames cut in
    `EngineCore.__init__`; the issue's title says the KV check failed. Before: "audit incomplete in profile on rank 0
    (crash)": the compile line shows profiling had begun, and the engine core's start goes on to size the KV cache
    and capture."""
    report = log_report(pasted("round_twenty_four", TWO_COMMANDS), TWO_COMMANDS)
    assert report.failure is not None and (report.failure.phase, report.failure.step) == (Phase.PROFILE, _OR_LATER)
    assert report.verdict_reason == f"audit incomplete {_OR_LATER}, on rank 0 (crash): EngineCore failed to start."


def test_a_cut_traceback_whose_frames_name_the_call_stays_in_it() -> None:
    """Must not fire: the same paste whose frames go on to `determine_available_memory` (the profile's call), still
    cut; nor where its exception line is there (the KV check: kv, exactly)."""
    text = pasted("round_twenty_four", TWO_COMMANDS)
    frames = "".join(f'ERROR 04-30 10:20:36 [core.py:396]   File "/home/env/lib/python3.11/site-packages/vllm/v1/{path}", '
                     f"line {n}, in {call}\nERROR 04-30 10:20:36 [core.py:396]     {code}\n" for path, n, call, code in (
                         ("engine/core.py", 71, "__init__", "self._initialize_kv_caches(vllm_config)"),
                         ("engine/core.py", 129, "_initialize_kv_caches", "self.model_executor.determine_available_memory()"),
                         ("worker/gpu_worker.py", 160, "determine_available_memory", "self.model_runner.profile_run()")))
    report = log_report(text.rstrip("\n").rsplit("\n", 1)[0] + "\n" + frames, TWO_COMMANDS)
    assert report.failure is not None and (report.failure.phase, report.failure.step) == (Phase.PROFILE, None)
    kv = text + ("\nERROR 04-30 10:20:36 [core.py:396] ValueError: No available memory for the cache blocks. Try "
                 "increasing `gpu_memory_utilization` when initializing the engine.\n")
    report = log_report(kv, TWO_COMMANDS)
    assert report.failure is not None and (report.failure.phase, report.failure.step) == (Phase.KV, None)


# --------------------------------------------------------------------------------------------
# G6: a launcher that stops vLLM from outside (a start timeout, a failed probe) is named as what ended the boot

JOURNALD = "06_nixamdai68_journald_lemond_wrapper_timeout0s_then_comment_banner.log"
"""noamsto/nix-amd-ai#68 (tests/unit/data/round_twenty_four): lemonade's journal on Jul 25 (`Waiting for vllm-server
to be ready (timeout: 0s)...`, `vllm-server failed to start within timeout`, then SIGTERM and SIGKILL), then the
user's later comment with vLLM 0.23.1's banner, cut."""
_OUTSIDE = "vLLM was stopped from outside, not by a failure of its own"
_LOADING = ("(APIServer pid=1) INFO 11-03 09:12:05 [utils.py:233] non-default args: {'model': '/models/Qwen3-32B', "
            "'max_model_len': 32768, 'tensor_parallel_size': 2}\n"
            "(Worker_TP0 pid=340) INFO 11-03 09:12:40 [gpu_model_runner.py:2602] Starting to load model "
            "/models/Qwen3-32B...\n"
            "Loading safetensors checkpoint shards:  41% Completed | 7/17 [02:31<03:36, 21.6s/it]\n\n")
_EVENTS = ("Events:\n"
           "  Type     Reason     Age               From     Message\n"
           "  ----     ------     ----              ----     -------\n"
           "  Normal   Started    6m                kubelet  Started container vllm\n"
           "  Warning  Unhealthy  2m (x3 over 3m)   kubelet  Liveness probe failed: Get \"http://10.42.0.17:8000/health\": "
           "dial tcp 10.42.0.17:8000: connect: connection refused\n")
_KILLING = "  Normal   Killing    2m                kubelet  Container vllm failed liveness probe, will be restarted\n"


def test_the_launchers_timeout_is_what_ended_the_journald_paste() -> None:
    """Before: UNKNOWN, "the log ends before startup finished" (read from the later comment's banner alone), and
    nothing said that lemonade had stopped vLLM the moment it started it. A launcher stops every process: no rank."""
    report = log_report(pasted("round_twenty_four", JOURNALD), JOURNALD)
    assert report.failure is not None and report.failure.kind == "interrupted" and report.failure.rank is None
    assert report.failure.message.startswith("vllm-server failed to start within timeout: the launcher stopped it: "
                                             f"its start timeout ran out; {_OUTSIDE}")


def test_the_launchers_lines_alone_are_refused_with_what_they_say() -> None:
    """The Jul 25 block alone (lemonade's lines, none of vLLM's): before, `no vLLM log lines found` and nothing more."""
    block = pasted("round_twenty_four", JOURNALD).splitlines()[38:49]
    with pytest.raises(BadInputError, match=r"no vLLM log line, only a launcher's stop of vLLM \(line 7: vllm-server "
                                            r"failed to start within timeout: .*pass vLLM's own log"):
        log_report("\n".join(block) + "\n")
    with pytest.raises(BadInputError, match=r"\(line 6: Container vllm failed liveness probe, will be restarted: "
                                            r"Kubernetes restarted the container: its liveness probe failed; "):
        log_report(_EVENTS + _KILLING)


def test_a_probe_that_restarted_the_container_ends_the_load() -> None:
    """`kubectl logs` of a TP2 boot loading its shards, then `kubectl describe pod`'s events: the kill is the failure,
    in load, the message from the container's line (not the events table the paste joined it to)."""
    report = log_report(_LOADING + _EVENTS + _KILLING)
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase, report.failure.rank) == ("interrupted", Phase.LOAD, None)
    assert report.failure.message.startswith("Container vllm failed liveness probe, will be restarted: Kubernetes "
                                             f"restarted the container: its liveness probe failed; {_OUTSIDE}")


def test_systemds_start_timeout_after_loading_is_a_stop_in_profile() -> None:
    text = ("Nov 03 09:13:40 gpu1 vllm[2211]: (EngineCore_DP0 pid=2270) INFO 11-03 09:13:40 [gpu_model_runner.py:2653] "
            "Model loading took 30.6 GiB and 79.5 seconds\n"
            "Nov 03 09:13:41 gpu1 systemd[1]: vllm.service: start operation timed out. Terminating.\n"
            "Nov 03 09:13:46 gpu1 systemd[1]: vllm.service: Failed with result 'timeout'.\n")
    report = log_report(text)
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase, report.failure.rank) == ("interrupted", Phase.PROFILE, None)
    assert report.failure.message.startswith("vllm.service: start operation timed out. Terminating: systemd stopped the "
                                             "service: its start timeout (TimeoutStartSec) ran out; ")


def test_a_failed_probe_without_the_kill_and_vllms_own_timeout_are_no_launcher_stop() -> None:
    """Must not fire: the probe's `Unhealthy` event alone (kubelet restarts only after the threshold: the `Killing`
    line says it did); vLLM's DP coordinator's own RuntimeError, `… failed to report ZMQ addresses within
    timeout=120 seconds during startup.`, stays vLLM's crash."""
    assert log_report(_LOADING + _EVENTS).failure is None
    coordinator = ("(APIServer pid=1) ERROR 11-03 09:14:40 [core.py:708] RuntimeError: DP Coordinator process failed "
                   "to report ZMQ addresses within timeout=120 seconds during startup.\n")
    report = log_report(_LOADING + coordinator)
    assert report.failure is not None and report.failure.kind == "crash"
    assert report.failure.message.startswith("RuntimeError: DP Coordinator process failed to report ZMQ addresses")
