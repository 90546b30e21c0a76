"""`CudaProbe`: one CUDA device through PyTorch's caching-allocator statistics, `mem_get_info` and
the allocator's segments by pool id (graph pools are private pools). torch is imported when the
probe is made."""

from __future__ import annotations

from typing import Any

from kvaudit.engines import gc_sections
from kvaudit.engines.probes import DeviceFacts, Reading
from kvaudit.engines.probes.nvml import nvml_driver
from kvaudit.engines.probes.snapshot import allocator_snapshot, pool_totals


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
        gc_sections.collect()
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

    def alloc_retries(self) -> int | None:
        return int(self.torch.cuda.memory_stats(self.device).get("num_alloc_retries", 0))

    def facts(self) -> DeviceFacts:
        _, total = self.torch.cuda.mem_get_info(self.device)
        name = self.torch.cuda.get_device_name(self.device)
        return DeviceFacts(device_name=name, total_bytes=int(total), driver=nvml_driver(),
                           cuda=self.torch.version.cuda)
