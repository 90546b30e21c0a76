"""Record an allocator snapshot of a CUDA graph pool, for the CPU tests of kvaudit's pool reading
(tests/unit/test_graph_measurement.py): `python3 tests/gpu/record_pool_snapshot.py OUT.json`.

Two graphs are captured into one private pool: inside the capture a 48 MiB intermediate is
allocated and freed (its pages stay with the pool) and 64 + 32 MiB outputs stay live. The
snapshot's segments are kept (frames dropped), with the truth measured another way: the
allocator's reserved total before and after the capture (nothing else allocates meanwhile)."""

from __future__ import annotations

import json
import sys

import torch

from kvaudit.engines.probes.snapshot import allocator_snapshot

MiB = 1 << 20


def segments() -> list[dict]:
    keep = ("device", "segment_pool_id", "total_size", "allocated_size", "segment_type")
    return [{k: s.get(k) for k in keep} for s in allocator_snapshot(torch)["segments"]]


def main(out: str) -> None:
    dev = torch.device("cuda", 0)
    x = torch.ones(1024, device=dev)
    stream = torch.cuda.Stream(dev)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    reserved_before = torch.cuda.memory_reserved(dev)
    pool = torch.cuda.graph_pool_handle()
    graphs, outputs = [], []
    with torch.cuda.stream(stream):
        for size in (64 * MiB, 32 * MiB):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool, stream=stream):
                scratch = torch.empty(48 * MiB, dtype=torch.uint8, device=dev)
                scratch.fill_(1)
                del scratch
                out_t = torch.empty(size, dtype=torch.uint8, device=dev)
                out_t.fill_(2)
                x.mul_(1.0)
            graphs.append(g)
            outputs.append(out_t)
    torch.cuda.synchronize()
    live = segments()
    reserved_live = torch.cuda.memory_reserved(dev)
    graphs.clear()
    outputs.clear()
    del g, out_t
    pool = list(pool)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    released = segments()
    record = {"device": 0, "pool": pool, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(dev),
              "pool_reserved_truth": reserved_live - reserved_before, "pool_allocated_truth": 96 * MiB,
              "reserved_after_release": torch.cuda.memory_reserved(dev) - reserved_before,
              "live": live, "released": released}
    with open(out, "w") as fh:
        json.dump(record, fh, indent=1)
    print(f"pool {pool}: reserved {record['pool_reserved_truth'] / MiB:.1f} MiB, "
          f"{len(live)} segments live, {len(released)} after release")


if __name__ == "__main__":
    main(sys.argv[1])
