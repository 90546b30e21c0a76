"""Probes: read memory counters at phase boundaries. They never allocate device memory.

`CudaProbe` reads PyTorch's caching-allocator statistics, `mem_get_info`, allocator segments by
pool id (graph pools are private pools) and NVML. `HostProbe` is the CPU backend's equivalent:
vLLM's CPU worker sizes KV from the process RSS against the NUMA node's memory, so RSS is what
this probe charges, and "other processes" are frozen at baseline (concurrent workers on the
same node would otherwise land in this rank's ledger).

torch is imported inside the CUDA probe only: this module is importable without it.
"""

from __future__ import annotations

import gc
import importlib
import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Reading:
    """One probe reading; fields map one-to-one onto a PhaseRecord's measurements."""

    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    device_used_bytes: int
    peak_reserved_bytes: int
    graph_pool_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class DeviceFacts:
    device_name: str | None
    total_bytes: int
    driver: str | None = None
    cuda: str | None = None


class _InductorStandIn(types.ModuleType):
    """torch._inductor while an allocator snapshot runs in a process that never imported it. It
    has no `codecache`, so torch's symbolizer skips the mapping; any other attribute (another
    thread reaching for inductor in that instant) imports the real module, which also replaces
    this one on torch, and comes from it."""

    def __getattr__(self, name: str) -> Any:
        if name == "codecache":
            raise AttributeError(name)
        return getattr(importlib.import_module("torch._inductor"), name)


def allocator_snapshot(torch: Any, device: Any = None) -> dict[str, Any]:
    """torch.cuda.memory._snapshot(), without importing torch's compiler stack as a side effect.

    With allocator history on, a snapshot symbolizes the stacks of live blocks, and to name the
    source lines of inductor-generated code torch's symbolizer asks `hasattr(torch, "_inductor")`
    (torch/csrc/profiler/python/combined_traceback.cpp). torch answers that lazy attribute by
    importing torch._inductor and torch._dynamo: 3.2–6.2 s on the H200 image (it compiles them
    from source), paid by the first snapshot that has stacks to symbolize in any process that
    has not imported them. Such a process has run no inductor code, so no stack can hold any: for
    the length of the call a stand-in without `codecache` answers the question, and torch skips
    the mapping it would have found empty."""
    if "torch._inductor" in sys.modules or "_inductor" in vars(torch):
        return torch.cuda.memory._snapshot(device)
    stand_in = _InductorStandIn("torch._inductor")
    torch._inductor = stand_in
    try:
        return torch.cuda.memory._snapshot(device)
    finally:
        if vars(torch).get("_inductor") is stand_in:
            del torch._inductor


def pool_totals(segments: list[dict[str, Any]], device: int, pool: Any = None) -> tuple[int, int]:
    """(reserved, allocated) bytes of the allocator segments (a snapshot's `segments`) of one
    private pool on one device, or of every private pool when `pool` is None; pool (0, 0) is the
    default pool. Reserved counts the pages a pool holds free (a live pool never returns them);
    allocated, the blocks still in use."""
    want = tuple(pool) if pool is not None else None
    reserved = allocated = 0
    for seg in segments:
        if seg.get("device") not in (None, device):
            continue
        seg_pool = tuple(seg.get("segment_pool_id") or (0, 0))
        if seg_pool == (0, 0) or (want is not None and seg_pool != want):
            continue
        reserved += int(seg.get("total_size") or 0)
        allocated += int(seg.get("allocated_size") or 0)
    return reserved, allocated


class CudaProbe:
    """Reads one CUDA device. `others_bytes()` must be asked before this process creates its
    CUDA context (NVML's device-used then holds only other processes)."""

    def __init__(self, device: object | None = None):
        import torch
        self.torch = torch
        self.device = device

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def settle(self) -> None:
        """What vLLM does at its measurement points: collect garbage, return cached blocks."""
        self.sync()
        gc.collect()
        self.torch.cuda.empty_cache()

    def graph_pool_bytes(self) -> int:
        """Bytes of allocator segments in private pools (CUDA graph pools; pool id (0, 0) is the
        default pool). Segments a live graph or a held pool handle uses survive empty_cache, so
        this is the pool's retained high-water, not gross − retained."""
        return self.pool_segments()[0]

    def pool_segments(self, pool: Any = None) -> tuple[int, int]:
        """(reserved, allocated) bytes of one private pool's segments (`pool`, a
        graph_pool_handle()), or of every private pool's when `pool` is None."""
        return pool_totals(allocator_snapshot(self.torch)["segments"], self._index(), pool)

    def _index(self) -> int:
        dev = self.device if self.device is not None else self.torch.cuda.current_device()
        return dev.index if hasattr(dev, "index") and dev.index is not None else int(dev)  # type: ignore[arg-type]

    def read(self, *, pools: bool = True) -> Reading:
        cuda = self.torch.cuda
        free, total = cuda.mem_get_info(self.device)
        return Reading(
            allocated_bytes=int(cuda.memory_allocated(self.device)),
            reserved_bytes=int(cuda.memory_reserved(self.device)),
            peak_allocated_bytes=int(cuda.max_memory_allocated(self.device)),
            device_used_bytes=int(total - free),
            peak_reserved_bytes=int(cuda.max_memory_reserved(self.device)),
            graph_pool_bytes=self.graph_pool_bytes() if pools else 0,
            free_bytes=int(free))

    def peak_reserved_bytes(self) -> int:
        return int(self.torch.cuda.max_memory_reserved(self.device))

    def facts(self) -> DeviceFacts:
        _, total = self.torch.cuda.mem_get_info(self.device)
        name = self.torch.cuda.get_device_name(self.device)
        return DeviceFacts(device_name=name, total_bytes=int(total), driver=nvml_driver(),
                           cuda=self.torch.version.cuda)


def nvml_driver() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML missing or no driver: the report says null
        return None


OTHERS_ENV = "KVAUDIT_NVML_USED"
"""Device memory in use per physical GPU before any vLLM process existed, measured by the boot
process and handed to the workers (JSON {index or UUID: bytes})."""


def nvml_used_by_device() -> dict[str, int]:
    """NVML's used bytes of every GPU, keyed by physical index and by UUID; {} without NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return {}
    out: dict[str, int] = {}
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            used = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            out[str(i)] = used
            out[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = used
    except Exception:
        pass
    finally:
        pynvml.nvmlShutdown()
    return out


def others_for_rank(local_rank: int, *, has_context: bool) -> int | None:
    """Other processes' device memory for the GPU this rank takes: from the boot process's
    reading when there is one, else NVML now if this process has no CUDA context yet, else
    unknown."""
    import json
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    target = visible[local_rank] if local_rank < len(visible) else str(local_rank)
    try:
        table = json.loads(os.environ.get(OTHERS_ENV, "{}"))
    except json.JSONDecodeError:
        table = {}
    if isinstance(table.get(target), int):
        return table[target]
    return None if has_context else nvml_device_used(local_rank)


def nvml_device_used(local_rank: int) -> int | None:
    """Device memory in use on the GPU this rank will take, by NVML, without touching CUDA.

    Read before the process creates its CUDA context, it is what other processes hold.
    CUDA_VISIBLE_DEVICES maps the rank's logical index to a physical index or UUID."""
    try:
        import pynvml
    except ImportError:
        return None
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    try:
        pynvml.nvmlInit()
        try:
            target = visible[local_rank] if local_rank < len(visible) else str(local_rank)
            if target.isdigit():
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(target))
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(target)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


# ------------------------------------------------------------------------------------------------
# Host (CPU backend)

_KB = 1024
_STATUS_FIELD = re.compile(r"^(VmRSS|VmHWM):\s+(\d+)\s+kB", re.MULTILINE)


def _status() -> dict[str, int]:
    text = Path("/proc/self/status").read_text()
    return {k: int(v) * _KB for k, v in _STATUS_FIELD.findall(text)}


def node_meminfo(node: int = 0) -> tuple[int, int]:
    """(total, available) of a NUMA node, the way vLLM's CPU worker reads them
    (vllm/utils/cpu_resource_utils.py get_memory_node_info): MemTotal, and
    MemFree + Active(file) + Inactive(file) + SReclaimable; /proc/meminfo when there is no node file."""
    path = Path(f"/sys/devices/system/node/node{node}/meminfo")
    fields: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4:
                fields[parts[2].rstrip(":")] = int(parts[3]) * _KB
        available = sum(fields.get(k, 0) for k in ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable"))
    else:
        for line in Path("/proc/meminfo").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                fields[parts[0].rstrip(":")] = int(parts[1]) * _KB
        available = fields.get("MemAvailable", fields.get("MemFree", 0))
    return fields["MemTotal"], available


class HostProbe:
    """RSS and peak RSS of this process. The peak is reset through /proc/self/clear_refs
    (writing 5 resets VmHWM to the current RSS, Linux ≥ 4.0).

    Mapped onto the CUDA vocabulary so one ledger serves both: what the process held when the
    probe was made (interpreter, libraries, vLLM's runtime: the host's "context") is non-torch;
    RSS growth after that is "torch" (allocated = reserved = RSS − baseline RSS); device used is
    other processes at baseline + this process's RSS."""

    def __init__(self, node: int = 0):
        self.node = node
        total, available = node_meminfo(node)
        self.total_bytes = total
        self.baseline_rss = _status()["VmRSS"]
        self.others_bytes = max(total - available - self.baseline_rss, 0)
        """Node memory in use by everything but this process, frozen at construction."""
        self._peak_reset_ok = True

    def sync(self) -> None:
        pass

    def settle(self) -> None:
        gc.collect()

    def reset_peak(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            self._peak_reset_ok = False

    def read(self, *, pools: bool = True) -> Reading:
        st = _status()
        rss = st["VmRSS"]
        _, available = node_meminfo(self.node)
        grown = rss - self.baseline_rss
        peak = max(st["VmHWM"], rss) - self.baseline_rss
        return Reading(allocated_bytes=grown, reserved_bytes=grown, peak_allocated_bytes=peak, peak_reserved_bytes=peak,
                       device_used_bytes=self.others_bytes + rss, graph_pool_bytes=0, free_bytes=available)

    def peak_reserved_bytes(self) -> int:
        """Peak RSS growth over baseline since the last reset (the verify step adds the baseline
        back as non-torch)."""
        return _status()["VmHWM"] - self.baseline_rss

    def facts(self) -> DeviceFacts:
        return DeviceFacts(device_name=f"CPU (NUMA node {self.node})", total_bytes=self.total_bytes)
