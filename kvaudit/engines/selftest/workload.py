"""A small decoder-like workload whose memory is known in advance, owner by owner.

Every planted size is a multiple of 2 MiB and at least 32 MiB per allocation: the CUDA caching
allocator then gives each one a segment of exactly its size (requests of 1–10 MiB share 20 MiB
segments; larger ones round to 2 MiB), and on the host glibc serves each from its own mmap
(above its 32 MiB dynamic threshold), so RSS moves by exactly the bytes touched.

    weights        parameters of the layers, allocated at load
    non_torch      a raw allocation outside PyTorch (cuMemAlloc, the driver API), made at load
    persistent     the workspace the "kernel warmup" creates and keeps
    activation     transient buffers of the profile step, freed when it returns
    graph_pool     CUDA graphs for several batch sizes, their outputs in one private pool
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class Planted:
    """Bytes planted per rank, by owner."""

    weights: int
    persistent: int
    activation: int
    non_torch: int
    graph_outputs: tuple[int, ...]
    """One output buffer per captured batch size; the pool's high-water is their sum."""
    kv_block: int = 2 * MiB
    """KV is allocated in whole blocks of this size (the rest of the figure is kv_unallocated)."""

    @property
    def graph_pool(self) -> int:
        return sum(self.graph_outputs)

    @classmethod
    def for_device(cls, kind: str) -> Planted:
        if kind == "cuda":
            return cls(weights=8 * GiB, persistent=1536 * MiB, activation=3 * GiB, non_torch=512 * MiB,
                       graph_outputs=(64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB))
        # CPU smoke: a few hundred MiB of RSS, no graphs, nothing outside the allocator to tell apart.
        return cls(weights=192 * MiB, persistent=64 * MiB, activation=96 * MiB, non_torch=0, graph_outputs=())


CHUNK = 64 * MiB
"""Weights and activations are made of chunks this size (or the remainder, ≥ 32 MiB)."""
HIDDEN = 1024


def _chunks(total: int) -> list[int]:
    sizes = [CHUNK] * (total // CHUNK)
    if total % CHUNK:
        sizes.append(total % CHUNK)
    return sizes


class DriverAllocation:
    """Device memory outside PyTorch's allocator: cuMemAlloc through libcuda (the driver API,
    present wherever a CUDA driver is), in the primary context torch made current."""

    def __init__(self, nbytes: int):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.ptr = ctypes.c_uint64(0)
        self.nbytes = nbytes
        rc = self.lib.cuMemAlloc_v2(ctypes.byref(self.ptr), ctypes.c_size_t(nbytes))
        if rc != 0:
            raise MemoryError(f"cuMemAlloc of {nbytes} bytes failed with CUDA error {rc}")
        # Touch it, so the driver really backs it (cuMemsetD8 writes every byte).
        rc = self.lib.cuMemsetD8_v2(self.ptr, ctypes.c_ubyte(1), ctypes.c_size_t(nbytes))
        if rc != 0:
            raise RuntimeError(f"cuMemsetD8 failed with CUDA error {rc}")

    def free(self) -> None:
        if self.ptr.value:
            self.lib.cuMemFree_v2(self.ptr)
            self.ptr = ctypes.c_uint64(0)


class Workload:
    """The planted model on one rank. `group` is a torch.distributed group (or None) for the
    all-reduce each step does, so multi-rank runs exercise NCCL (or gloo) as a model would."""

    def __init__(self, planted: Planted, device: Any, group: Any = None, *, inject_warmup_failure: bool = False):
        import torch
        self.torch, self.planted, self.device, self.group = torch, planted, device, group
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self.inject_warmup_failure = inject_warmup_failure
        self.weights: list[Any] = []
        self.workspace = None
        self.driver: DriverAllocation | None = None
        self.pool = None
        self.anchor = None
        self.graph_input = None
        self.graphs: list[tuple[Any, Any]] = []
        self.kv = None
        self.warmup_calls = 0

    # -- phases -------------------------------------------------------------------------------
    def preload(self) -> None:
        """Run every kernel the workload uses once, tiny, before the baseline: module loading
        (CUDA loads kernels lazily), cuBLAS's handle and workspace and NCCL's first collective
        are runtime state like the CUDA context, not any owner's bytes."""
        t = self.torch
        w = t.full((HIDDEN * HIDDEN,), 0.01, dtype=t.bfloat16, device=self.device)
        self._forward(8, [w])
        t.ones(8, dtype=t.float32, device=self.device).mul_(1.0)
        if self.cuda:
            t.cuda.synchronize(self.device)
        del w

    def _forward(self, tokens: int, weights: list[Any]) -> None:
        t = self.torch
        x = t.ones(tokens, HIDDEN, dtype=t.bfloat16, device=self.device)
        for w in weights[:4]:
            x = t.nn.functional.silu(x @ w[: HIDDEN * HIDDEN].view(HIDDEN, HIDDEN))
        small = t.empty(4 * MiB, dtype=t.uint8, device=self.device)
        small.fill_(2)
        self._all_reduce()
        del x, small

    def load(self) -> None:
        t = self.torch
        for size in _chunks(self.planted.weights):
            w = t.empty(size // 2, dtype=t.bfloat16, device=self.device)
            w.fill_(0.01)
            self.weights.append(w)
        if self.cuda and self.planted.non_torch:
            self.driver = DriverAllocation(self.planted.non_torch)

    def step(self, tokens: int) -> None:
        """The profile step: a few matmuls against the weights, plus the planted transient."""
        t = self.torch
        transient = [t.empty(size, dtype=t.uint8, device=self.device) for size in _chunks(self.planted.activation)]
        for buf in transient:
            buf.fill_(2)
        self._forward(tokens, self.weights)
        if self.cuda:
            t.cuda.synchronize(self.device)
        del transient

    def kernel_warmup(self) -> None:
        """Autotune-like: creates the persistent workspace. The first attempt fails when asked."""
        self.warmup_calls += 1
        if self.inject_warmup_failure and self.warmup_calls == 1:
            raise RuntimeError("injected warmup failure (first attempt)")
        t = self.torch
        self.workspace = t.empty(self.planted.persistent, dtype=t.uint8, device=self.device)
        self.workspace.fill_(3)

    def capture_graphs(self) -> int:
        """Capture one graph per output size into one private pool (vLLM shares one pool
        across graphs); the static input lives as long as the workload."""
        if not self.cuda or not self.planted.graph_outputs:
            return 0
        t = self.torch
        if self.pool is None:
            self.pool = t.cuda.graph_pool_handle()
        if self.graph_input is None:
            self.graph_input = t.ones(8, dtype=t.float32, device=self.device)
        x = self.graph_input
        stream = t.cuda.Stream(self.device)
        t.cuda.synchronize(self.device)
        with t.cuda.stream(stream):
            for size in self.planted.graph_outputs:
                graph = t.cuda.CUDAGraph()
                with t.cuda.graph(graph, pool=self.pool, stream=stream):
                    out = t.empty(size, dtype=t.uint8, device=self.device)
                    out.fill_(4)
                    x.mul_(1.0)
                self.graphs.append((graph, out))
        t.cuda.synchronize(self.device)
        return len(self.graphs)

    def drop_graphs(self, *, retain: bool = False) -> None:
        """Profiling teardown. By default the graphs and their pool go (kvaudit and vLLM V1
        profile into a temporary pool). With `retain`, the profiling graphs stay alive as the
        pool's anchor, so the pool and every page in it survive into the real capture, which
        captures into the same pool and finds no free page to reuse: a fork that keeps its
        profiling pool alive for the real capture, at its worst."""
        if retain and self.graphs:
            self.anchor = list(self.graphs)
            self.graphs = []
        else:
            self.graphs.clear()
            self.pool = None

    def replay_graphs(self) -> None:
        for graph, _ in self.graphs:
            graph.replay()
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def allocate_kv(self, available: int) -> int:
        block = self.planted.kv_block
        nbytes = max(available // block, 0) * block
        if nbytes:
            self.kv = self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)
            self.kv.fill_(0)
        return nbytes

    def _all_reduce(self) -> None:
        if self.group is None:
            return
        import torch.distributed as dist
        t = self.torch
        v = t.ones(1024, dtype=t.float32, device=self.device)
        dist.all_reduce(v, group=self.group)

    def close(self) -> None:
        self.graphs.clear()
        self.anchor = None
        self.kv = None
        if self.driver is not None:
            self.driver.free()
