"""The user's own path: a plain vLLM boot, no kvaudit in the process, with the safe flags kvaudit
printed, under a load; its own peak against the requested budget.

    python tests/gpu/user_path.py LOAD.json OUT.json

LOAD.json (written by tests/gpu/test_user_path_gpu.py or tests/vllm/test_verify_user_path_cpu.py
from a kvaudit report: kvaudit's scenario planner shapes the requests, this process only runs them):

    {"engine": {LLM(...) keyword arguments: model, the safe flags' kv_cache_memory_bytes,
                gpu_memory_utilization, max_model_len, and the report's other knobs},
     "vocab_size": N,
     "loads": [{"requests": [prompt length, ...], "decode_tokens": N,
                "sampling": {SamplingParams keyword arguments}}, ...]}

The loads run one after another in the one engine; the peak is over all of them.

Its own peak:
- CUDA: NVML's device used, minus what was in use before this process started vLLM, sampled
  every millisecond from a thread, and at the end each worker's own figure (collective_rpc of a
  plain function: device used now − torch reserved now + torch's peak reserved), the larger;
- CPU: the high-water RSS (VmHWM) of each vLLM worker process, the memory vLLM's CPU worker sizes
  its KV cache against (CPUWorker.determine_available_memory: requested − the process's RSS).

KVAUDIT_USER_PATH_CONTEND=1 (CUDA, device 0): once the boot is done, before the load, this process takes
every free byte of the device beyond what is left of the requested budget (a blocker tensor), as another
tenant would. The load then runs in its budget and no more: an allocator that kept cache above the
budget has to give it back, and what it cannot is an out-of-memory error (`error`). The blocker and
this process's own CUDA context (`contention_bytes`) are not the boot's: its peak leaves them out.
(At start the blocker cannot be there: vLLM takes its start-up snapshot after its own CUDA context and
then wants the whole budget free, `request_memory` in vllm/v1/worker/utils.py.)

OUT.json: {"backend", "device_total_bytes", "requested_bytes" (ceil(total × GMU), per device),
"before_bytes", "peak_bytes" (per device or worker; on CUDA the larger of "boot_peak_bytes", the workers'
own figure when the boot was done, and "load_peak_bytes", the load's: NVML's, "nvml_load_peak_bytes", or
the workers' own after a reset of torch's peak, the larger), "seconds", "generated_tokens", "error",
"gpu_memory_utilization" (as vLLM resolved it), "num_gpu_blocks" (vLLM's KV cache),
"extensible_kv_cache" (vLLM 0.34 sized it after warmup; null before 0.34)}.
It imports vLLM, psutil and (on CUDA) pynvml, never kvaudit.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any


def prompt_ids(request: int, length: int, vocab_size: int, load: int = 0) -> list[int]:
    """The first load's ids are kvaudit's batch scenario's (engines/vllm/verify.py prompt_ids with the
    batch's stride, 7927): a different sequence per request, ids 0 and 1 left out; each later load of the
    same engine steps by 2 more, so its prompts differ in their first two tokens from every earlier
    load's and vLLM's prefix cache serves none of them. Written out here: this process runs no kvaudit."""
    span = max(vocab_size - 2, 1)
    stride = 7927 + 2 * load
    return [2 + ((j + 1) * stride + request * 1_000_003) % span for j in range(length)]


class NvmlPeak:
    """Device used on every visible GPU, sampled from a thread."""

    def __init__(self) -> None:
        import pynvml
        pynvml.nvmlInit()
        self.nvml = pynvml
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        indices = [int(x) for x in visible.split(",") if x.strip()] if visible else \
            list(range(pynvml.nvmlDeviceGetCount()))
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.before = self.used()
        self.total = [int(pynvml.nvmlDeviceGetMemoryInfo(h).total) for h in self.handles]
        self.peak = list(self.before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def used(self) -> list[int]:
        return [int(self.nvml.nvmlDeviceGetMemoryInfo(h).used) for h in self.handles]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = [max(p, u) for p, u in zip(self.peak, self.used())]
            time.sleep(0.001)

    def __enter__(self) -> NvmlPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def worker_peak(_worker: object = None) -> dict[str, int]:
    """Run inside each CUDA worker (collective_rpc, which passes the worker itself): its device, the device used now, torch's
    reserved now and its peak reserved since the process started."""
    import torch
    free, total = torch.cuda.mem_get_info()
    return {"device": torch.cuda.current_device(), "used": int(total - free),
            "reserved": int(torch.cuda.memory_reserved()), "peak_reserved": int(torch.cuda.max_memory_reserved())}


def worker_boot_peak(_worker: object = None) -> dict[str, int]:
    """worker_peak at the end of the boot, then torch's peak statistics reset, so the next
    worker_peak is the load's alone."""
    import torch
    figures = worker_peak()
    torch.cuda.reset_peak_memory_stats()
    return figures


def own_peaks(ranks: list[dict[str, int]]) -> dict[int, int]:
    """Per device, the most any worker on it had in use at its peak: device used now − torch
    reserved now + torch's peak reserved (a peak that came when the device held as much else)."""
    peaks: dict[int, int] = {}
    for r in ranks:
        peaks[r["device"]] = max(peaks.get(r["device"], 0), r["used"] - r["reserved"] + r["peak_reserved"])
    return peaks


def cpu_workers() -> list[int]:
    """The pids of this process's vLLM workers: the descendants whose title vLLM set to
    VLLM::Worker (WorkerProc, multiproc_executor.py), else the engine core (a worker in-process)."""
    import psutil
    kids = psutil.Process().children(recursive=True)
    titled = {}
    for p in kids:
        try:
            titled[p.pid] = " ".join(p.cmdline())
        except psutil.Error:
            continue
    workers = [pid for pid, cmd in titled.items() if cmd.startswith("VLLM::Worker")]
    return workers or [pid for pid, cmd in titled.items() if cmd.startswith("VLLM::EngineCore")]


def vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


CONTEND_ENV = "KVAUDIT_USER_PATH_CONTEND"


def contend(headroom: int) -> Any:
    """Hold every free byte of device 0 beyond `headroom`, in the 2 MiB pages the driver maps."""
    import torch
    free, _ = torch.cuda.mem_get_info(0)
    granule = 2 << 20
    return torch.empty(max((free - headroom) // granule * granule, 0), dtype=torch.uint8, device="cuda:0")


def main(argv: list[str]) -> int:
    load = json.loads(Path(argv[1]).read_text())
    out_path = Path(argv[2])
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc of worker_peak
    import torch
    cuda = torch.cuda.is_available()
    out: dict[str, Any] = {"backend": "cuda" if cuda else "cpu", "error": None}
    nvml = NvmlPeak() if cuda else None
    if nvml is not None:
        out["before_bytes"] = nvml.before
        out["device_total_bytes"] = nvml.total
    from vllm import LLM, SamplingParams
    engine = dict(load["engine"])
    llm = LLM(**engine)
    cache = llm.llm_engine.vllm_config.cache_config
    # the GMU vLLM budgets with (0.34 resolves an unset one: 1.0 with its extensible KV cache, else 0.92)
    gmu = float(getattr(cache, "resolved_gpu_memory_utilization", None) or cache.gpu_memory_utilization)
    out["gpu_memory_utilization"] = gmu
    out["num_gpu_blocks"] = cache.num_gpu_blocks
    out["extensible_kv_cache"] = getattr(cache, "enable_extensible_kv_cache", None)
    if not cuda:
        from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info
        total = int(get_memory_node_info(get_allowed_cpu_list()[0].numa_node).total_memory)
        out["device_total_bytes"] = [total]
        out["before_bytes"] = [0]  # a process's own RSS: nothing of another's is in it
    out["requested_bytes"] = [math.ceil(t * gmu) for t in out["device_total_bytes"]]
    boot = own_peaks(llm.collective_rpc(worker_boot_peak)) if cuda else {}
    extra = [0] * len(out["device_total_bytes"])
    blocker = None
    if nvml is not None and os.environ.get(CONTEND_ENV) == "1":
        used = nvml.used()
        blocker = contend(out["requested_bytes"][0] - (used[0] - nvml.before[0]))
        extra = [after - now for after, now in zip(nvml.used(), used)]
        out["contention_bytes"] = extra
    runs = []
    for number, step in enumerate(load["loads"]):
        params = SamplingParams(max_tokens=int(step["decode_tokens"]), ignore_eos=True, detokenize=False,
                                **step.get("sampling", {}))
        prompts = [{"prompt_token_ids": prompt_ids(i, n, int(load["vocab_size"]), number)}
                   for i, n in enumerate(step["requests"])]
        runs.append((prompts, params))

    def generate() -> list[Any]:
        return [o for prompts, params in runs for o in llm.generate(prompts, params, use_tqdm=False)]
    start = time.perf_counter()
    try:
        if nvml is not None:
            with nvml:
                outputs = generate()
            ranks = llm.collective_rpc(worker_peak)
            load = own_peaks(ranks)
            out["worker_peak_bytes"] = ranks
            out["nvml_load_peak_bytes"] = [p - b - x for p, b, x in zip(nvml.peak, nvml.before, extra)]
            out["load_peak_bytes"] = [max(n, load.get(i, 0) - b - x) for i, (n, b, x)
                                      in enumerate(zip(out["nvml_load_peak_bytes"], nvml.before, extra))]
            out["boot_peak_bytes"] = [boot.get(i, 0) - b for i, b in enumerate(nvml.before)]
            out["peak_bytes"] = [max(p, q) for p, q in zip(out["load_peak_bytes"], out["boot_peak_bytes"])]
        else:
            outputs = generate()
            pids = cpu_workers()
            out["worker_pids"] = pids
            out["peak_bytes"] = [max(vm_hwm(pid) for pid in pids)] if pids else None
        out["generated_tokens"] = sum(len(o.outputs[0].token_ids) for o in outputs)
    except Exception as exc:  # the finding, not a crash of this script
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    out["seconds"] = round(time.perf_counter() - start, 3)
    del blocker
    out_path.write_text(json.dumps(out, indent=1))
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:
        pass
    return 0 if out["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
