"""The failure catalogue, and the one decision of which failure is a boot's.

What went wrong, from vLLM's own words: one table classifies a vLLM failure line for the run
supervisor (the log of the boot it ran), the log engine (users' logs, engines/logs/facts.py) and
an exception a rank journaled (`rank_error_failure`, the vLLM worker's and the selftest's alike),
so a line means the same everywhere. Every engine then hands its evidence to `decide_failure`
as `Candidate`s: one rule picks the boot's failure for `run`, `selftest` and `ingest`.

Order matters: the first cause whose anchor (and pattern) a line holds is its cause, most
specific first. Causes marked `log_only` (a bare traceback, `EngineCore failed to start`, any
exception line, …) show that a user's boot died without saying why; `find_failure_in_log` leaves
them out, as a run's supervisor has each rank's own error. The templates, and the vLLM files
that print them: docs/vllm-startup.md §5.3–5.5.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Generic, TypeVar

from kvaudit.printable import clipped, plain_text
from kvaudit.schema import Failure, FailureKind, Phase


@dataclass(frozen=True)
class Cause:
    """One kind of failure line."""

    anchor: str
    """A substring every such line holds (checked first: most lines have none)."""
    kind: FailureKind
    phase: Phase | None
    """Fixed by the message (the KV check is always phase kv); None: where the boot was."""
    priority: int
    """0 names a memory cause, 1 a crash with a cause, 2 a generic "initialization failed" that
    only reports a failure printed elsewhere."""
    pattern: re.Pattern[str] | None = None
    """Where the anchor alone is too loose: the line must match this too."""
    starts: tuple[str, ...] = ()
    """Phrases the error sentence starts from when the line holds them (else the anchor)."""
    log_only: bool = False
    """Read from users' logs only: `find_failure_in_log` (a run's own log, whose supervisor has each
    rank's own error) leaves it out. Such lines show that a boot died, not why."""
    means: str = ""
    """What the line means where its words do not say (appended to the failure's message)."""
    launcher: bool = False
    """A launcher's line as it stops the whole boot from outside (LAUNCHER_STOPS): no rank's failure. It is no
    record, and a paste may join it to the text above it (a `kubectl describe` table): the message starts where
    the pattern matches."""
    needs_death: bool = False
    """A warning that names a cause only where the log shows the boot died (torch's allocator retries
    after it): alone, a note (failure_timeline.log_failure)."""

    def matches(self, line: str) -> bool:
        return self.anchor in line and (self.pattern is None or self.pattern.search(line) is not None)

    def start(self, line: str) -> str:
        return next((s for s in self.starts if s in line), self.anchor)


FATAL_SIGNAL = "ot fatal signal from worker processes"
"""V1's words (before 0.9) for a worker that died: `MulitprocExecutor got fatal signal from worker processes` (the
executor) and `Got fatal signal from worker processes` (the front end), each `…, shutting down. See stack trace
above for root cause issue.`"""
GENERIC = 2
"""The priority of a line that only reports a failure printed elsewhere."""
BARE = 3
"""The priority of a bare traceback header: the boot died, and the excerpt shows no more of it."""

CPU_KV_SHORT = "on kv cache allocation is less than requested memory for kv"
"""cpu_worker.py determine_available_memory: a STARTUP_MEMORY cause, or DOES_NOT_FIT when its
figure shows no byte was left for KV (the log engine reads the figure)."""

KILLED = "Killed"
"""The shell's word for a process SIGKILL ended (scan.py looks for its line in an excerpt)."""
SHELL_JOB_NOTICE = r"[^\s:]{0,200}(?:\.sh|\bsh|bash|zsh): line \d{1,7}: +\d{1,9} +"
"""bash's and sh's notice of a job a signal ended: `./serve.sh: line 12: 48213 Killed   vllm serve …`,
`/bin/sh: line 1: 7 Killed …`, `bash: line 1: …` (a script's name or the shell's)."""
NCCL_WATCHDOG = "Watchdog caught collective operation timeout"
"""torch's ProcessGroupNCCL line when a collective hangs past its timeout (scan.py looks for it in an
excerpt: torch's own log line, no vLLM record)."""
TORCH_ALLOC_OOM = "memory allocation failed with OOM on device"
"""torch's caching allocator's warning when the driver refuses it memory (`[rank0]:[W922 05:15:28] memory
allocation failed with OOM on device 0 while trying to allocate 2097152 bytes (free: 2031616, total:
23661248512)`): it then frees its cache and retries, so the line is the cause only beside lines that
say no more than that the boot died after it (an "initialization failed", a bare traceback); beside an
exception that names its own cause, or alone, it is a note (failure_timeline.log_failure; real pastes
round seventeen: a death in graph capture; a boot that served on after it). scan.py looks for it in an
excerpt: torch's own line, no vLLM record."""
WORKER_RERAISE = "Worker failed with error"
"""The engine core's re-raise of a worker's error (multiproc_executor.py get_response: `RuntimeError: Worker
failed with error '…', please check the stack trace above for the root cause`): it names no rank, so the
worker's own exception line, where the log has it, is the failure (facts.FailureFact.echo; real pastes
round eighteen: the untagged re-raise put a DP2 worker's death on rank 0)."""
FAULTHANDLER = "Fatal Python error"
"""CPython's faulthandler after a crash in native code (`Fatal Python error: Segmentation fault`): no vLLM
record, so scan.py looks for it in an excerpt (real pastes round eighteen: a Ray worker's segfault)."""
LINKER_NO_LIBCUDA = "cannot find -lcuda"
"""ld's line when Triton compiles its CUDA launcher and no libcuda.so is on the linker's path (no vLLM record:
scan.py looks for it in an excerpt)."""
CUDA_CHECK = "Failed: Cuda error"
"""vLLM's C++ CUDA check's line before it exits the process (no vLLM record: scan.py looks for it in an excerpt)."""
SHELL_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
                 "Illegal instruction": "SIGILL", "Floating point exception": "SIGFPE"}
"""The shell's words for a process a crash signal ended (`Segmentation fault (core dumped)`, or a script's
`run.sh: line 3: 1234 Aborted   (core dumped) vllm serve …`), each with its signal: no vLLM record, so
scan.py looks for them in an excerpt (real pastes round twenty-one: a segfault after the KV lines read ok)."""
SIGNAL_REPORT = " received at time="
"""The failure-signal handler Ray's workers install (abseil's): `*** SIGSEGV received at time=1746566409 on
cpu 131 ***`, then `PC: @ … addProxyOpIfNeeded()` (vllm#17770: a TP16 capture's crash in NCCL's proxy). Its
`*** SIGTERM received` is Ray stopping a worker: no crash."""
CAUGHT_SIGNAL = "Caught signal "
"""UCX's report of a crash signal (`Caught signal 11 (Segmentation fault: address not mapped …)`), before its
`==== backtrace ====` of numbered native frames."""
NATIVE_FRAME = "()  "
"""UCX's native backtrace frame, `14 0x0000000000004493 ???()  /usr/lib/x86_64-linux-gnu/libffi.so.8:0`: what a
paste keeps of a worker's segfault where its first line was cut (vllm#17242's TP16 boot)."""
INTERRUPTED_LINE = "KeyboardInterrupt"
"""Python's last traceback line after a ^C (scan.py looks for it in an excerpt: no vLLM record)."""
TRACEBACK = "Traceback (most recent call last)"
"""A Python traceback's header: the boot died, and its exception line follows (or the paste cut it)."""
EXCEPTION_NAME = r"(?:[A-Za-z_][\w.]{0,80})?(?:Error|Exception|Warning|Interrupt|Exit)"
"""A Python exception's name, as a traceback's last line starts: `RuntimeError`, `torch.OutOfMemoryError`,
`Exception`, `KeyboardInterrupt`, `SystemExit`."""

LAUNCHER_STOPS = {
    "failed liveness probe, will be restarted": (r"Container \S{1,253} failed liveness probe, will be restarted",
                                                 "Kubernetes restarted the container: its liveness probe failed"),
    "failed startup probe, will be restarted": (r"Container \S{1,253} failed startup probe, will be restarted",
                                                "Kubernetes restarted the container: its startup probe failed"),
    "start operation timed out. Terminating.": (r"[\w@.:-]{1,256}\.service: start operation timed out\. Terminating\.",
                                                "systemd stopped the service: its start timeout (TimeoutStartSec) ran "
                                                "out"),
    "failed to start within timeout": (r"(?i:\S{0,100}vllm\S{0,100}) failed to start within timeout",
                                       "the launcher stopped it: its start timeout ran out"),
}
"""A launcher's line as it stops vLLM from outside, each with what it means: kubelet's event (`Killing … Container vllm
failed liveness probe, will be restarted`), systemd's (`vllm.service: start operation timed out. Terminating.`), a
wrapper's (lemonade's `vllm-server failed to start within timeout`; real pastes round twenty-four b: a `timeout: 0s`
that stopped vLLM at once; the wrapper's subject must name vLLM, `Port forwarding failed to start within timeout` being
another program's). No vLLM record holds them, so scan.py looks for them in an excerpt (a file's first 4 MiB)."""
LAUNCHER_HINT = ("vLLM was stopped from outside, not by a failure of its own; vLLM's server answers only once startup "
                 "has finished, so give startup the time it takes (a startupProbe, a longer start timeout)")
"""What every launcher's stop means for the user, after the launcher's own reason."""


ENGINE_CORE_FAILED = "EngineCore failed to start"
"""V1's engine core's words as it dies starting (v1/engine/core.py run_engine_core: logger.exception); V0 has no
engine core, so they also say V1 ran."""


CAUSES: tuple[Cause, ...] = (
    # kv_cache_utils.py _check_enough_kv_cache_memory (0.32); 0.8.x said "models's".
    Cause("To serve at least one request", FailureKind.DOES_NOT_FIT, Phase.KV, 0,
          re.compile(r"To serve at least one request with the models?'?s? max seq len")),
    # …its head alone, where a paste or a mirror cut it (real pastes round thirty-one, a mirror's `(EngineCore pid=401)
    # ERROR [core.py:1140] ValueError: To serve at least one`): the check's, whose other message is "No available
    # memory for the cache blocks"
    # (the cut at the message's end, or joined to the next line's sentence)
    Cause("To serve at least one", FailureKind.DOES_NOT_FIT, Phase.KV, 0, re.compile(
          r"To serve at least one(?: request(?: with(?: the(?: models?'?s?(?: max(?: seq(?: len)?)?)?)?)?)?)?"
          r"\W{0,4}(?:$|(?=\s+[A-Z]))"),
          means="vLLM's KV check, its message cut before the figures: max_model_len needs more KV cache than a "
                "worker has (lower --max-model-len or raise --gpu-memory-utilization)"),
    # V0 llm_engine / worker raise_if_cache_size_invalid.
    Cause("stored in KV cache", FailureKind.DOES_NOT_FIT, Phase.KV, 0,
          re.compile(r"max seq len \(\S+\) is larger than the maximum number of tokens that can be stored in KV "
                     r"cache"), starts=("max seq len",)),
    # …its head, where a paste or a search result cut it (real pastes round eighteen: `… that can be s`)
    Cause("is larger than the maximum number of tokens that can be", FailureKind.DOES_NOT_FIT, Phase.KV, 0,
          re.compile(r"max seq len \(\S+\) is larger than the maximum number of tokens that can be"),
          starts=("max seq len",)),
    Cause("No available memory for the cache blocks", FailureKind.DOES_NOT_FIT, Phase.KV, 0),
    # tpu-inference's TPUWorker.determine_available_memory: the weights and the rest exceed the request
    # (limit × gpu_memory_utilization), nothing is left for KV (tpu-inference PR 763's log).
    Cause("exceeds total_hbm_limit", FailureKind.DOES_NOT_FIT, Phase.KV, 0,
          re.compile(r"total_hbm_used_gb=\S+ exceeds total_hbm_limit"), starts=("total_hbm_used_gb",)),
    Cause("Cannot auto-fit max_model_len", FailureKind.DOES_NOT_FIT, Phase.KV, 0),
    # config/compilation.py (since vllm PR 38270), once the KV cache is sized: a hybrid model's full
    # decode graphs need one Mamba cache block a sequence ("max_num_seqs (1024) exceeds available
    # Mamba cache blocks (939). … Please lower max_num_seqs to at most 939 or increase
    # gpu_memory_utilization."): the cache does not hold the batch the config allows.
    Cause("exceeds available Mamba cache blocks", FailureKind.DOES_NOT_FIT, Phase.KV, 0, starts=("max_num_seqs (",)),
    # kvaudit's selftest rank (engines/selftest/rank.py) when torch sees no CUDA device.
    Cause("no CUDA device is visible to torch", FailureKind.NO_DEVICE, Phase.BASELINE, 0),
    # v1/worker/utils.py request_memory and cpu_worker.py __init__.
    Cause("on startup is less than desired", FailureKind.STARTUP_MEMORY, Phase.BASELINE, 0,
          starts=("Free memory on device", "Available memory on node")),
    Cause("on startup is less than the engine's budget", FailureKind.STARTUP_MEMORY, Phase.BASELINE, 0,
          starts=("Free memory on device", "Available memory on node")),
    Cause("exceed the desired GPU memory utilization", FailureKind.STARTUP_MEMORY, Phase.BASELINE, 0,
          starts=("Free memory on device", "Available memory on node")),
    Cause(CPU_KV_SHORT, FailureKind.STARTUP_MEMORY, Phase.KV, 0, starts=("Available memory on node",)),
    # OOM: gpu_model_runner.py load_model logs "Failed to load model - not enough GPU memory. …
    # (original error: …)"; model_executor/layers/linear.py "Failed to create unquantized linear
    # weights: CUDA out of memory. …"; elsewhere torch's own message.
    Cause("Failed to load model - not enough GPU memory", FailureKind.OOM, Phase.LOAD, 0),
    Cause("weights: CUDA out of memory", FailureKind.OOM, Phase.LOAD, 0),
    Cause("CUDA out of memory", FailureKind.OOM, None, 0),
    # Ray's memory monitor killing a task when the node's host memory passes its threshold
    # (`ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.`, vllm#15102:
    # a worker's 2 TB of RAM while loading): no device's memory, and no rank (Ray names the worker by pid)
    Cause("the node running low on memory", FailureKind.CRASH, None, 1, log_only=True,
          means="Ray's memory monitor killed the task: the node's host memory (RAM) ran low, not a device's"),
    Cause("OutOfMemoryError", FailureKind.OOM, None, 0),
    Cause("CUDA error: out of memory", FailureKind.OOM, None, 0),
    # the CUDA driver API's out-of-memory as torch and vLLM's kernels raise it (club-3090#60:
    # `RuntimeError: CUDA driver error: out of memory` while repacking GPTQ weights)
    Cause("CUDA driver error: out of memory", FailureKind.OOM, None, 0),
    # torch's allocator on other devices: torch_npu's `RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB
    # (NPU 0; 60.97 GiB total capacity; …)` (vllm-ascend#1987), IPEX's `XPU out of memory`, Gaudi's HPU
    Cause("NPU out of memory", FailureKind.OOM, None, 0),
    Cause("XPU out of memory", FailureKind.OOM, None, 0),
    Cause("HPU out of memory", FailureKind.OOM, None, 0),
    # torch's OOM message quoted without its "CUDA out of memory." head (c10/cuda/CUDACachingAllocator.cpp:
    # "Tried to allocate 136.00 MiB. GPU 0 has a total capacity of 22.36 GiB of which …").
    # torch prints "has a total capacity of" in this message only.
    Cause("has a total capacity of", FailureKind.OOM, None, 0),
    Cause(TORCH_ALLOC_OOM, FailureKind.OOM, None, 0, log_only=True, needs_death=True),
    # The NVIDIA kernel driver refusing an allocation (`NVRM: … Out of memory [NV_ERR_NO_MEMORY]`,
    # from dmesg): on a unified-memory GB10 (DGX Spark) the device's out-of-memory shows only there. The
    # driver's words, `NVRM … [NV_ERR_NO_MEMORY]` (a paste's line or a sentence quoting it, fixture 81), not a
    # sentence that names the code word alone (real pastes round thirty-one, a blog's "Then — crash.
    # NV_ERR_NO_MEMORY." above the dmesg lines it quotes).
    Cause("NV_ERR_NO_MEMORY", FailureKind.OOM, None, 0, re.compile(r"NVRM\b.{0,400}\[NV_ERR_NO_MEMORY\]")),
    # vLLM 0.34's extensible KV cache mapping pages through the driver (utils/vmm_driver.py _check:
    # "GPU driver error %d: %s"; 2 is CUDA's and HIP's out-of-memory).
    Cause("GPU driver error 2: out of memory", FailureKind.OOM, None, 0),
    # gpu_worker.py determine_available_memory: free memory grew while profiling.
    Cause("Error in memory profiling", FailureKind.CRASH, Phase.PROFILE, 1),
    # v1/worker/workspace.py: a warmup after capture_model's lock_workspace() needed more workspace.
    Cause("Workspace is locked but", FailureKind.CRASH, Phase.CAPTURE, 1),
    # multiproc_executor.py worker monitor.
    Cause("died unexpectedly", FailureKind.WORKER_DIED, None, 1),
    # The DCP assertion (vllm/v1/worker/cp_utils.py family) on backends without softmax LSE.
    Cause("requires attention implementations to return the softmax LSE", FailureKind.REFUSED, None, 1),
    # A feature the backend refuses, raised as an exception.
    Cause("not supported", FailureKind.REFUSED, None, 1,
          re.compile(r"NotImplementedError: .*not supported|(?:Error|Exception): .*is not supported (?:by|on|for) ")),
    # v1/engine/core_client.py (utils.py before 0.2x): the front end gave up waiting for the engine
    # cores, VLLM_ENGINE_READY_TIMEOUT_S (600 s) after their start: "Timed out waiting for engines to
    # send initial message on input socket." (vllm PR 35616), 0.34 "… for engine core processes to start."
    Cause("Timed out waiting for engine", FailureKind.TIMEOUT, None, 1),
    # torch's ProcessGroupNCCL watchdog: a collective hung past its timeout, and the watchdog takes
    # the process down (SIGABRT, exit -6). Ranked as a worker's death, so an earlier crash that hung
    # the collective stays the cause; a death it brings is placed after it (failure_timeline).
    Cause(NCCL_WATCHDOG, FailureKind.TIMEOUT, None, 1,
          means="a collective (NCCL) hung past its timeout and the watchdog took the process down"),
    # V1 before 0.9 (v1/executor/multiproc_executor.py's SIGUSR1 handler: "MulitprocExecutor got fatal signal from
    # worker processes, shutting down. See stack trace above for root cause issue.", and core_client.py's "Got fatal
    # signal …"): a worker died, the reason in its own traceback above (round twenty-four b, vllm-ascend#616: the
    # engine cores' CRITICAL lines, read as nothing, while a worker's shutdown noise became the failure).
    Cause(FATAL_SIGNAL, FailureKind.WORKER_DIED, None, GENERIC, log_only=True,
          means="a worker process died (V1's executor was signalled); its own traceback, which says why, is not in "
                "the log"),
    # core_client / engine utils: the generic tail every failed boot prints.
    Cause("Engine core initialization failed", FailureKind.CRASH, None, GENERIC),
    Cause("WorkerProc initialization failed", FailureKind.CRASH, None, GENERIC),
    # Log-only: the ways pasted excerpts show a dead boot when its exception is cut off (issue 27).
    # v1/engine/core.py run_engine_core: logger.exception("EngineCore failed to start.").
    Cause(ENGINE_CORE_FAILED, FailureKind.CRASH, None, GENERIC, log_only=True),
    # V0 engine/multiprocessing/engine.py (MQLLMEngine): "Engine process failed to start. See stack trace …".
    Cause("Engine process failed to start", FailureKind.CRASH, None, GENERIC, log_only=True),
    # v1/executor/multiproc_executor.py: WorkerProc.worker_main / worker_busy_loop.
    Cause("WorkerProc failed to start", FailureKind.CRASH, None, GENERIC, log_only=True),
    Cause("WorkerProc hit an exception", FailureKind.CRASH, None, GENERIC, log_only=True),
    # V0 worker/worker_base.py execute_method: "Error executing method %r. This might cause deadlock
    # in distributed execution." (V1 before 0.9 too); the method names the phase (facts.PHASE_HINT).
    # A paste cut inside the word still names it: "Error executing metho".
    Cause("Error executing meth", FailureKind.CRASH, None, GENERIC, log_only=True),
    # V0 executor/multiproc_worker_utils.py: "Exception in worker %s while processing method %s".
    Cause("while processing method", FailureKind.CRASH, None, GENERIC, log_only=True),
    # v1/engine/core.py run_engine_core after startup (the busy loop): a failure while serving.
    Cause("EngineCore encountered a fatal error", FailureKind.CRASH, None, GENERIC, log_only=True),
    # vllm-ascend's model_runner_v1.py when its ACL graph capture raises (`ACLgraph sizes capture fail:
    # RuntimeError:`, then the reason on the record's next lines: too few streams for the sizes, an HCCL socket
    # timeout; vllm-ascend#3389, a TP16 boot read as no failure at all)
    Cause("ACLgraph sizes capture fail", FailureKind.CRASH, Phase.CAPTURE, 1),
    # Worker deaths other than the multiproc monitor's: V0 multiproc_worker_utils ("Worker %s pid %s
    # died, exit code: %s"), v1/utils.py ("Process %s (PID: %s) died with exit code %s"), Ray.
    Cause("exited unexpectedly", FailureKind.WORKER_DIED, None, 1, log_only=True),
    # Ray's ActorDiedError text (gpustack#2415: "The actor is dead because its worker process has
    # died. … (1) The process is killed by SIGKILL by OOM killer …").
    Cause("The actor is dead because its worker process has died", FailureKind.WORKER_DIED, None, 1, log_only=True),
    Cause("died, exit code", FailureKind.WORKER_DIED, None, 1, log_only=True),
    Cause("died with exit code", FailureKind.WORKER_DIED, None, 1, log_only=True),
    # v1/executor/multiproc_executor.py collective_rpc: a worker's error, re-raised in the engine core.
    Cause(WORKER_RERAISE, FailureKind.CRASH, None, 1, log_only=True),
    # …its end, where the worker's error spans lines and the paste keeps the last one (vllm#26431:
    # `ValueError("type fp8e4nv not supported …")', please check the stack trace above for the root cause`).
    Cause("', please check the stack trace above for the root cause", FailureKind.CRASH, None, 1, log_only=True),
    # The shell's notice of a process SIGKILL ended (a line `Killed`): nothing of vLLM's says why; the
    # kernel's out-of-memory killer sends it when host memory runs out (ArcticInference#37: `Killed`
    # right after `Loading weights took`); a script's shell names the job: `run.sh: line 3: 1234 Killed   vllm …`.
    Cause(KILLED, FailureKind.CRASH, None, 1,
          re.compile(r"^\W{0,4}Killed\s*$|^" + SHELL_JOB_NOTICE + "Killed "), log_only=True,
          means="the process was sent SIGKILL (the shell's word; the kernel's out-of-memory killer sends it when "
                "host memory runs out)"),
    # CPython's faulthandler (a crash in C code: a segfault, an abort).
    Cause(FAULTHANDLER, FailureKind.CRASH, None, 1, log_only=True),
    # vLLM's C++ CUDA check (csrc/custom_all_reduce.cuh CUDACHECK: `Failed: Cuda error %s:%d '%s'`, then
    # exit(EXIT_FAILURE)): no Python error follows (vllm#18446: TP8 custom all-reduce at the capture's end)
    Cause(CUDA_CHECK, FailureKind.CRASH, None, 1, re.compile(r"^\W{0,4}Failed: Cuda error \S"), log_only=True,
          means="a CUDA call in vLLM's C++ code failed, and its check ended the process"),
    # The linker failing under Triton's build of its CUDA launcher (`/usr/bin/ld: cannot find -lcuda`, then
    # `collect2: error: ld returned 1 exit status`; QwenLM/Qwen3-VL#1267: the profile's first Triton kernel)
    Cause(LINKER_NO_LIBCUDA, FailureKind.CRASH, None, 1, log_only=True,
          means="the linker found no libcuda.so while Triton built a kernel's launcher (install the driver's libcuda, "
                "or point TRITON_LIBCUDA_PATH at it)"),
    # A crash in native code, as the shell, Ray's signal handler and UCX report it: no vLLM record, and no
    # Python traceback where the process died on the signal.
    *(Cause(words, FailureKind.CRASH, None, 1,
            re.compile(rf"^\W{{0,4}}{words}(?: \(core dumped\))?\s*$|^{SHELL_JOB_NOTICE}{words} "), log_only=True,
            means=f"the process ended on {signal} (the shell's words: a crash in native code)")
      for words, signal in SHELL_SIGNALS.items()),
    Cause(SIGNAL_REPORT, FailureKind.CRASH, None, 1,
          re.compile(r"\*\*\* SIG(?:SEGV|ABRT|BUS|ILL|FPE|TRAP) received at time="),
          log_only=True, means="a crash signal, as the handler Ray's workers install reports it"),
    Cause(CAUGHT_SIGNAL, FailureKind.CRASH, None, 1,
          re.compile(r"Caught signal \d{1,2} \((?:" + "|".join(SHELL_SIGNALS) + ")"), log_only=True),
    # A traceback whose exception line the excerpt does not hold: the boot died, the cause is cut off.
    Cause(TRACEBACK, FailureKind.CRASH, None, BARE, log_only=True),
    # …and a native backtrace's frame where the report before it was cut
    Cause(NATIVE_FRAME, FailureKind.CRASH, None, BARE,
          re.compile(r"^\W{0,4}\d{1,4} +0x[0-9a-f]{8,16} +\S{1,300}\(\) +\S{1,500}:\d{1,7}\s*$"), log_only=True,
          means="a frame of a native backtrace (UCX's): the process crashed in native code"),
    # A process told to stop: a signal handler's `sys.exit(signum)` (Ray's sigterm_handler: `SystemExit: 15`
    # while vLLM waited for a placement group), V0's MQLLMEngine handler `KeyboardInterrupt: MQLLMEngine terminated`.
    Cause("SystemExit: 15", FailureKind.INTERRUPTED, None, 1, re.compile(r"^\W{0,4}SystemExit: 15\b"), log_only=True,
          means="exit 15, from a handler of SIGTERM: the process was told to stop"),
    Cause(INTERRUPTED_LINE, FailureKind.INTERRUPTED, None, 1, re.compile(r"^\W{0,4}KeyboardInterrupt\b"),
          log_only=True, means="the process was interrupted (SIGINT, or a stop of vLLM's own)"),
    # …priority GENERIC: a death of vLLM's own that the log shows earlier (`EngineCore failed to start.`) stays the
    # failure, and any exception line says more
    *(Cause(anchor, FailureKind.INTERRUPTED, None, GENERIC, re.compile(said), log_only=True, launcher=True,
            means=f"{reason}; {LAUNCHER_HINT}")
      for anchor, (said, reason) in LAUNCHER_STOPS.items()),
    # An exception as its repr, the whole of a record's message: the worker's executor logs the error it returns
    # so (real pastes round twenty-six: `(Worker_TP0 pid=60352) ERROR … [multiproc_executor.py:852] ValueError("type
    # fp8e4nv not supported in this architecture. …")`, an fp8 KV cache on a V100); a raise's echoed source line
    # (`raise ValueError(`) and a sentence that names one do not start with the name or do not end with `)`.
    Cause("Error(", FailureKind.CRASH, None, 1,
          re.compile(r"^\W{0,4}[A-Za-z_][\w.]{0,100}Error\((?:\"|').{0,4000}\)\s*$"), log_only=True),
    Cause("Exception(", FailureKind.CRASH, None, 1,
          re.compile(r"^\W{0,4}[A-Za-z_][\w.]{0,100}Exception\((?:\"|').{0,4000}\)\s*$"), log_only=True),
    # Any other exception line, as a traceback ends: "subprocess.CalledProcessError: Command …".
    Cause("Error: ", FailureKind.CRASH, None, 1, re.compile(r"^\W{0,4}[A-Za-z_][\w.]{0,100}Error: "), log_only=True),
    Cause("Exception: ", FailureKind.CRASH, None, 1, re.compile(r"^\W{0,4}[A-Za-z_][\w.]{0,100}Exception: "),
          log_only=True),
)


def cause_of(line: str) -> Cause | None:
    return next((c for c in CAUSES if c.matches(line)), None)


def classify_line(line: str) -> FailureKind | None:
    cause = cause_of(line)
    return cause.kind if cause is not None else None


# --------------------------------------------------------------------------------------------
# Which failure is the boot's, and its words: the same for `run` (its own vLLM log) and `ingest`

MESSAGE_CHARS = 400
"""A failure's message is its first line, trimmed to this many characters (a run's own log)."""
LOG_MESSAGE_CHARS = 1600
"""The same for a user's log: a pasted error is rejoined whole (vLLM's longest KV ValueError is
about 560 characters), and the verdict quotes all of it."""
_EXCEPTION = re.compile(r"[A-Za-z_][\w.]{0,80}(?:Error|Exception): ")
_MAX_LEN = re.compile(r"estimated maximum model length is (\d+)")


def error_text(msg: str, cause: Cause, limit: int = MESSAGE_CHARS) -> str:
    """The error as its first line shows it: from the exception class printed before the
    cause's anchor when there is one (a log prefix, a container prefix or a `Worker failed with
    error '…'` wrapper may precede it), else the whole message; one line, capped at `limit`."""
    msg = plain_text(msg)
    at = msg.find(cause.start(msg))
    before = None
    for m in _EXCEPTION.finditer(msg, max(at - 200, 0), max(at, 0)):
        before = m
    if cause.needs_death and at >= 0:
        before = None  # a warning's own words: a paste may have joined it to the lines above it
        msg = msg[at:]
    if cause.launcher and cause.pattern is not None and (said := cause.pattern.search(msg)):
        before, msg = None, msg[said.start():]
    first = (msg[before.start():] if before else msg).strip().splitlines()[0] if msg.strip() else ""
    lead = msg[max(before.start() - 8, 0):before.start()] if before else ""
    if quote := len(lead) - len(lead.rstrip("`")):
        # quoted as inline code in prose (`ValueError: Free memory … processes.`, or ``…``): its closing run of
        # backticks, and the sentence's stop after it, are the person's, not the error's (real pastes round
        # twenty-eight, vllm-omni#276)
        bare = first.rstrip().rstrip(".,;:!?) ")
        if bare.endswith("`" * quote):
            first = bare[:-quote].rstrip()
    first = f"{first.removesuffix('.')}: {cause.means}" if cause.means else first  # no `.:` between
    code = _SIGNAL_EXIT.search(first) if cause.kind is FailureKind.WORKER_DIED else None
    if code and int(code.group(1)) in _SIGNALS:
        first = f"{first}: {_SIGNALS[int(code.group(1))]}"
    return clipped(first, limit)


_SIGNAL_EXIT = re.compile(r"exit ?code:? -(\d{1,2})\b")
"""A process's exit code as Python's multiprocessing gives it: −N where signal N ended it."""
_SIGNALS = {9: "ended by SIGKILL (the kernel's out-of-memory killer sends it when host memory runs out; so do a "
                "container's or vLLM's own hard stop)",
            15: "ended by SIGTERM, sent to stop it: look for the cause before this line",
            6: "ended by SIGABRT (an abort in native code)", 11: "ended by SIGSEGV (a crash in native code)"}
"""What a negative exit code says (real pastes round twenty-one: a V0 worker's `died, exit code: -15`, a
consequence of another's stop, read as the cause)."""


class Evidence(IntEnum):
    """Where a failure candidate comes from, in the order the boot's failure is chosen: what
    kvaudit itself saw stop the boot first, vLLM's own words next, then a rank's exception, then
    the boot process's, then only its exit status, and last that no rank wrote anything."""

    STOPPED = 0
    """kvaudit stopped the boot (a timeout, a signal) or a rank's node reported it gone."""
    LOG_LINE = 1
    """A line of vLLM's log that the catalogue names (`cause_of`)."""
    RANK_ERROR = 2
    """An exception a rank journaled (`rank_error_failure`)."""
    PROCESS_ERROR = 3
    """The boot process's own result says it raised."""
    EXIT_STATUS = 4
    """The boot process exited non-zero and said nothing else."""
    NO_RECORDS = 5
    """No rank wrote a record."""


T = TypeVar("T")


@dataclass(frozen=True)
class Candidate(Generic[T]):
    """One piece of evidence of a failure, and what it decides (a Failure, or a log's fact that
    becomes one once chosen)."""

    evidence: Evidence
    item: T
    priority: int = 0
    """The catalogue's priority of its cause (0 a memory cause … BARE); 0 where none applies."""
    position: tuple[int, ...] = ()
    """Where it was seen (a log's file and offset, a rank's number): earlier first."""


def decide_failure(candidates: Iterable[Candidate[T]]) -> Candidate[T] | None:
    """The boot's failure among the candidates, by the one rule of every engine and log: the
    evidence's order, then the catalogue's priority (a does-not-fit or memory error over a crash
    that merely reports it), then the earliest (a wrapper re-raises what a worker printed first)."""
    return min(candidates, key=lambda c: (c.evidence, c.priority, c.position), default=None)


def rank_error_failure(rank: int | None, event: Mapping[str, Any], phase: Phase | None) -> Candidate[Failure]:
    """An exception a rank journaled ({"error": its class name, "message": …}), classified by the
    catalogue as a log line of it would be (`OutOfMemoryError: …` is an OOM); a crash otherwise."""
    error, message = str(event.get("error") or ""), str(event.get("message") or event.get("error") or "")
    cause = cause_of(f"{error}: {message}") if error else cause_of(message)
    kind = cause.kind if cause is not None and cause.priority < GENERIC else FailureKind.CRASH
    return Candidate(Evidence.RANK_ERROR, Failure(phase, rank, kind, message),
                     cause.priority if cause is not None else 1, (rank if rank is not None else 1 << 30,))


HANDLED_LEVELS = ("WARNING", "INFO", "DEBUG")
"""Levels at which vLLM logs an exception it handled and went on from (`Chat template warmup
failed` and its traceback, at WARNING)."""


def handled(level: str | None, kind: FailureKind) -> bool:
    """A failure's wording on a line logged at `level` that is no death of the boot: an exception
    at a level of handled ones. A figure that does not fit (V0's INFO `# GPU blocks: 0`) still is a
    finding. The same for a user's log and a run's own."""
    return level in HANDLED_LEVELS and kind is not FailureKind.DOES_NOT_FIT


def log_line_candidates(text: str) -> list[Candidate[tuple[FailureKind, str]]]:
    """The failure lines of a run's own log as candidates (kind, message). A generic
    "initialization failed" line is left out, and so are the log-only causes: the supervisor has
    the rank's own error for a failure whose cause the log does not name."""
    candidates = []
    for index, line in enumerate(text.splitlines()):
        if len(line) > 20000 or not ("Error" in line or "error" in line or "memory" in line or "support" in line
                                     or "Exception" in line):
            continue
        cause = cause_of(line)
        if cause is None or cause.priority >= GENERIC or cause.log_only:
            continue
        # only now: the log package imports this catalogue, and a clean boot's log needs none of it
        from kvaudit.engines.logs.lines import parse_line
        if not handled(parse_line(line, 0).level, cause.kind):
            candidates.append(Candidate(Evidence.LOG_LINE, (cause.kind, error_text(line, cause)), cause.priority,
                                        (index,)))
    return candidates


def find_failure_in_log(text: str) -> tuple[FailureKind, str] | None:
    """The root cause in the log of a run (`decide_failure` over `log_line_candidates`)."""
    chosen = decide_failure(log_line_candidates(text))
    return chosen.item if chosen is not None else None


def estimated_max_model_len(text: str) -> int | None:
    """vLLM's own estimate in its does-not-fit ValueError ("the estimated maximum model length is N")."""
    found = _MAX_LEN.findall(text)
    return int(found[-1]) if found else None
