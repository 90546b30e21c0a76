"""`HostProbe`: the CPU backend's probe. vLLM's CPU worker sizes KV from the process RSS against the
NUMA node's memory, so RSS is what this probe charges, and "other processes" are frozen at
baseline (concurrent workers on the same node would otherwise land in this rank's ledger)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from kvaudit.engines import gc_sections
from kvaudit.engines.probes import DeviceFacts, Reading

_KB = 1024
_STATUS_FIELD = re.compile(r"^(VmRSS|VmHWM):\s+(\d+)\s+kB", re.MULTILINE)


def _status() -> dict[str, int]:
    text = Path("/proc/self/status").read_text()
    return {k: int(v) * _KB for k, v in _STATUS_FIELD.findall(text)}


def rss_bytes() -> int:
    """This process's resident set (VmRSS), the figure vLLM's CPU worker sizes KV against."""
    return _status()["VmRSS"]


def node_meminfo(node: int = 0) -> tuple[int, int]:
    """(total, available) of a NUMA node, the way vLLM's CPU worker reads them
    (vllm/utils/cpu_resource_utils.py get_memory_node_info): MemTotal, and
    MemFree + Active(file) + Inactive(file) + SReclaimable; /proc/meminfo when there is no node file;
    both clamped by a container's memory limit (cgroup_clamp), as vLLM 0.32 does."""
    total, available = _node_meminfo(node)
    return cgroup_clamp(total, available)


def cgroup_clamp(total: int, available: int, root: Path = Path("/sys/fs/cgroup")) -> tuple[int, int]:
    """vLLM 0.32's clamp of a node's figures by the cgroup memory limit (get_cgroup_memory_limit and
    get_cgroup_memory_usage): v2 `memory.max` / `memory.current`, else v1 `memory/memory.limit_in_bytes`
    (2^62 and above: no limit) / `memory.usage_in_bytes`; below the node's total, the limit is the total
    and limit − usage caps what is available. Without it, a pod's --gmu was read against the host."""
    limit = _read_int(root / "memory.max")
    usage = _read_int(root / "memory.current") if limit is not None else None
    if limit is None:
        limit = _read_int(root / "memory" / "memory.limit_in_bytes")
        if limit is not None and limit >= 1 << 62:
            limit = None
        usage = _read_int(root / "memory" / "memory.usage_in_bytes") if limit is not None else None
    if limit is not None and limit < total:
        return limit, max(0, min(available, limit - (usage or 0)))
    return total, available


def _read_int(path: Path) -> int | None:
    """A file holding one integer (vLLM's _read_int_file): None when absent, unreadable or not one
    (cgroup v2 writes `max` for no limit)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def current_node() -> int:
    """The NUMA node of this process's first allowed CPU, the node vLLM's CPU worker sizes from
    (cpu_worker.py: the worker's first CPU's numa_node); 0 where the system does not say."""
    try:
        first = min(os.sched_getaffinity(0))
        for entry in Path(f"/sys/devices/system/cpu/cpu{first}").iterdir():
            if entry.name.startswith("node") and entry.name[4:].isdigit():
                return int(entry.name[4:])
    except (OSError, ValueError, AttributeError):
        pass
    return 0


def _node_meminfo(node: int) -> tuple[int, int]:
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
        gc_sections.collect()

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

    def alloc_retries(self) -> int | None:
        return None   # the host heap has no caching allocator to retry

    def facts(self) -> DeviceFacts:
        return DeviceFacts(device_name=f"CPU (NUMA node {self.node})", total_bytes=self.total_bytes)
