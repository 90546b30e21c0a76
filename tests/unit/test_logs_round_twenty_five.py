"""Real pastes, round twenty-five: two DP engine cores dying while their NCCL communicator is made (trl#3310), and an
issue's title quoting torch's OOM above a Ray cluster's log (vllm#15598). Each test names its source and what kvaudit
read before; the data are the files as the round saved them (tests/unit/data/round_twenty_five), a case where the
rule must not fire beside each rule."""
from __future__ import annotations

from pathlib import Path

from factories import log_report, pasted

from kvaudit.schema import FailureKind, Phase

TRL = "09_trl3310_v1_dp8_engine_cores_interleaved_pynccl_init_exception.log"
"""huggingface/trl#3310 (vLLM 0.8, DP 8 under TRL): `EngineCore_4` and `EngineCore_6` print their tracebacks
interleaved, the last frames `parallel_state.py … in __init__`, `self.pynccl_comm = PyNcclCommunicator(`,
`pynccl.py … in __init__`, `self.comm: ncclComm_t = self.nccl.ncclCommInitRank(`; the paste ends there."""
RAY = "02_vllm15598_v0_ray_cluster_repeated_30x_profiling_then_worker_error.log"
"""vllm#15598 (V0, a Ray cluster): the title `# [Bug]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate
2.00 MiB. GPU 6 has a total capacity of 44.53 GiB …`, then Ray's folded profiling lines of one worker (`[repeated 30x
across cluster]`) and another worker's `Error executing metho`, cut."""


def _text(name: str) -> str:
    return pasted("round_twenty_five", name)


_report = log_report


def test_an_engine_core_dying_in_its_nccl_communicator_dies_in_baseline():
    # before: `failure: crash: traceback frames logged at ERROR …`, no phase
    report = _report(_text(TRL), TRL)
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.phase is Phase.BASELINE


def test_each_communicator_line_alone_places_the_death():
    head = "(EngineCore_4 pid=2095686) ERROR 04-17 23:05:06 [core.py:390] "
    frames = [head + "EngineCore hit an exception: Traceback (most recent call last):",
              head + '  File "/venv/lib/python3.10/site-packages/vllm/v1/engine/core.py", line 376, in run_engine_core']
    for call in ("    self.pynccl_comm = PyNcclCommunicator(", "    self.comm: ncclComm_t = self.nccl.ncclCommInitRank(",
                 '  File "/venv/lib/python3.10/site-packages/vllm/distributed/device_communicators/pynccl_wrapper.py", '
                 'line 277, in ncclCommInitRank'):
        report = _report("\n".join([*frames, head + call, head + "RuntimeError: NCCL error: unhandled system error"]))
        assert (report.failure.phase, report.failure.message) == (
            Phase.BASELINE, "RuntimeError: NCCL error: unhandled system error"), call


def test_an_nccl_error_in_the_capture_stays_in_the_capture():
    # must not fire: the communicator's all_reduce under capture_model is no communicator being made
    head = "(VllmWorker rank=0 pid=77) ERROR 04-17 23:05:06 [multiproc_executor.py:470] "
    lines = [head + "WorkerProc hit an exception.", head + "Traceback (most recent call last):",
             head + '  File "/venv/vllm/v1/worker/gpu_model_runner.py", line 2100, in capture_model',
             head + "    self._dummy_run(num_tokens)",
             head + '  File "/venv/vllm/distributed/device_communicators/pynccl.py", line 162, in all_reduce',
             head + "    self.nccl.ncclAllReduce(buffer_type(in_tensor.data_ptr()),",
             head + "RuntimeError: NCCL error: unhandled cuda error"]
    assert _report("\n".join(lines)).failure.phase is Phase.CAPTURE


def test_a_communicator_made_after_the_start_is_no_failed_start():
    # must not fire: a trainer's weight sync (TRL's /init_communicator/) makes a communicator once the server is up
    boot = (Path(__file__).parents[1] / "fixtures" / "logs" / "gpu-0.32-v1-tp2-ok.log").read_text(encoding="utf-8")
    head = "(APIServer pid=100) ERROR 11-30 10:05:00 [worker.py:120] "
    sync = [head + "Traceback (most recent call last):",
            head + '  File "/venv/trl/scripts/vllm_serve.py", line 140, in init_communicator',
            head + "    self.pynccl_comm = PyNcclCommunicator(pg, device=self.device)",
            head + "    self.comm: ncclComm_t = self.nccl.ncclCommInitRank(",
            head + "RuntimeError: NCCL error: unhandled system error"]
    before, after = _report(boot), _report(boot + "\n" + "\n".join(sync) + "\n")
    assert before.failure is None and after.failure is None
    assert after.verdict is before.verdict and after.capacity == before.capacity


def test_an_issue_title_quoting_torch_s_oom_makes_no_rank():
    # before: a `rank 0` column with only the title's device total (44.53 GiB) and 0.98 of it, beside the Ray worker
    report = _report(_text(RAY), RAY)
    untitled = _report(_text(RAY).replace(next(line for line in _text(RAY).splitlines()
                                               if line.startswith("# [Bug]")), ""), RAY)
    assert [r.rank for r in report.ranks] == [r.rank for r in untitled.ranks] == [1]
    assert report.ranks == untitled.ranks
    assert report.failure == untitled.failure and report.failure.phase is Phase.CAPTURE


def test_a_bare_oom_line_still_states_its_device():
    # must not fire: torch's OOM on a line of its own (an untagged traceback's last line) is the process's own
    line = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of "
            "23.57 GiB of which 448.00 KiB is free.")
    text = "Traceback (most recent call last):\n" + line + "\n"
    assert _report(text).ranks[0].device_total_bytes == round(23.57 * 2**30)
    # the same line as an issue's title above a record states nothing (before: rank 0, device 44.53 GiB)
    titled = "# [Bug]: " + line.replace("GPU 0", "GPU 6").replace("23.57", "44.53") + "\n\n" + (
        "(EngineCore pid=1) INFO 03-27 10:29:01 [core.py:58] Initializing a V1 LLM engine (v0.8.2) with config: model=x")
    assert _report(titled).ranks == ()
