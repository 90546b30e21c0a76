"""Probes: read memory counters at phase boundaries. They never allocate device memory.

The `Probe` protocol is what the sequencer (engines/sequence.py) measures a phase with; `cuda`
reads one CUDA device (PyTorch's allocator, mem_get_info, private pools), `host` is the CPU
backend's equivalent (process RSS against the NUMA node), `nvml` reads what other processes hold
and the driver version, `snapshot` takes the allocator snapshot without importing torch's
compiler stack. torch is imported inside the CUDA probe only: this package is importable
without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


class Probe(Protocol):
    """What a phase is measured with."""

    def sync(self) -> None:
        """Wait for the device's queued work."""

    def reset_peak(self) -> None:
        """Start a new peak: the next reading's peaks are from here on."""

    def settle(self) -> None:
        """What vLLM does at its measurement points: collect garbage, return cached blocks."""

    def read(self, *, pools: bool = True) -> Reading:
        """The counters now (`pools`: also the private pools' segments, where the probe has any)."""

    def peak_reserved_bytes(self) -> int:
        """The reserved peak since the last reset."""

    def alloc_retries(self) -> int | None:
        """How often the allocator found no room, gave its cache back and tried again, since the
        process started (torch's num_alloc_retries); None where the probe has no such count."""

    def facts(self) -> DeviceFacts:
        """The device's name and total, and the driver."""
