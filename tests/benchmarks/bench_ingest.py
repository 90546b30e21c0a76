"""Ingest throughput vs `grep -cE` of the same memory patterns, on one generated ~200 MB log;
or, with --files, ingest time for many one-rank logs of one boot.

    python tests/benchmarks/bench_ingest.py [--mb 200] [--repeat 5] [--keep DIR]
    python tests/benchmarks/bench_ingest.py --files 1000 --files 4000 [--repeat 1]

Generates an 8-rank TP=8 vLLM 0.32 startup log (Model Runner V1, graphs on, MTP) whose memory
lines are spread over the whole file between realistic noise: NCCL INFO chatter, tqdm bars
(with their block characters, so the text is not ASCII), INFO lines without memory, engine
metrics lines ("GPU KV cache usage"), HTTP access lines and tracebacks. Then, several times
each, times `read_text` + `report_from_log_text` and `grep -cE <the catalogue's anchors>`, prints
both throughputs (MB/s, medians) and their ratio, and exits 1 when the ratio is below the goal.

With `--files N` (repeatable) it writes N files, each one rank's lines of a TP=N boot (the
engine's lines in every file, as a node's log holds them), and times `read_text` of each +
`report_from_logs` of all, as `kvaudit ingest rank*.log` does: each N's median and its seconds
per 1000 files, which stay flat when ingest is linear in the number of files. Not part of the
pytest run.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvaudit.engines.logs import report_from_log_text, report_from_logs
from kvaudit.engines.logs.facts import grep_pattern
from kvaudit.input_text import read_text

GOAL = 0.3
TP = 8

NOISE = (
    "{ts}node-0:{wpid}:{tid} [{r}] NCCL INFO Channel {c:02d}/0 : {r}[{r}] -> {n}[{n}] via P2P/CUMEM/read",
    "{ts}node-0:{wpid}:{tid} [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "{ts}node-0:{wpid}:{tid} [{r}] NCCL INFO NVLS multicast support is not available on dev {r}",
    "{ts}(Worker_TP{r} pid={wpid}) INFO 11-30 10:{m:02d}:{s:02d} [custom_all_reduce.py:203] Registering {k} cuda graph "
    "addresses",
    "{ts}(Worker_TP{r} pid={wpid}) WARNING 11-30 10:{m:02d}:{s:02d} [fused_moe.py:1042] Using default MoE config. "
    "Performance might be sub-optimal! Config file not found at /usr/local/lib/python3.12/dist-packages/vllm/"
    "model_executor/layers/fused_moe/configs/E=256,N=256,device_name=NVIDIA_H200.json",
    "{ts}(Worker_TP{r} pid={wpid}) INFO 11-30 10:{m:02d}:{s:02d} [backends.py:611] Compiling a graph for compile range "
    "(1, 8192) takes {k}.12 s",
    "{ts}(APIServer pid=100) INFO 11-30 10:{m:02d}:{s:02d} [loggers.py:257] Engine 000: Avg prompt throughput: {k}.5 "
    "tokens/s, Avg generation throughput: 456.7 tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: "
    "12.3%, Prefix cache hit rate: 45.6%",
    "{ts}(APIServer pid=100) INFO:     10.0.{r}.7:{k} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    "{ts}Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  45%|████▌     | 23/51 [00:02<00:02, 11.42it/s]",
    "{ts}Loading safetensors checkpoint shards:  45% Completed | 73/163 [00:12<00:15,  5.81it/s]",
    "{ts}  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py\", line {k}, in run_engine_core",
    "{ts}    return self._call_impl(*args, **kwargs)",
    "{ts}(EngineCore pid=200) DEBUG 11-30 10:{m:02d}:{s:02d} [core.py:1011] EngineCore waiting for work.",
)


def _ts(rng: random.Random) -> str:
    # Half the lines behind a container runtime's timestamp, as `kubectl logs --timestamps` writes.
    return f"2026-11-30T10:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(10**9):09d}Z " \
        if rng.random() < 0.5 else ""


def boot_events(tp: int = TP) -> list[str]:
    """The memory lines of one TP=tp boot, in boot order (vLLM 0.32 templates, docs/vllm-startup.md §5)."""
    return [line for _, line in ranked_boot_events(tp)]


def ranked_boot_events(tp: int = TP) -> list[tuple[int | None, str]]:
    """boot_events with the rank that prints each line (None: the API server or engine core)."""
    w = [300 + r for r in range(tp)]
    ev: list[tuple[int | None, str]] = [(None, line) for line in [
        "(APIServer pid=100) INFO 11-30 10:00:00 [api_utils.py:286] non-default args: {'model_tag': "
        f"'deepseek-ai/DeepSeek-V3', 'model': 'deepseek-ai/DeepSeek-V3', 'tensor_parallel_size': {tp}, "
        "'gpu_memory_utilization': 0.95, 'max_model_len': 65536, 'speculative_config': {'method': 'mtp', "
        "'num_speculative_tokens': 1}}",
        "(EngineCore pid=200) INFO 11-30 10:00:05 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='deepseek-ai/DeepSeek-V3', speculative_config=SpeculativeConfig(method='mtp', "
        "model='deepseek-ai/DeepSeek-V3', num_spec_tokens=1), tokenizer='deepseek-ai/DeepSeek-V3', "
        "skip_tokenizer_init=False, dtype=torch.bfloat16, max_seq_len=65536, load_format=auto, "
        f"tensor_parallel_size={tp}, pipeline_parallel_size=1, data_parallel_size=1, "
        "decode_context_parallel_size=1, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, "
        "compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, "
        "'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_capture_sizes': [1, 2, 4, 8, 16, "
        "24, 32]}, kernel_config=KernelConfig(enable_jit_warmup=True)",
    ]]
    ev += [(r, f"(VllmWorker-{r} pid={w[r]}) WARNING 11-30 10:00:10 [vllm.py:725] Starting worker") for r in range(tp)]
    ev += [(r, f"(Worker_TP{r} pid={w[r]}) INFO 11-30 10:00:20 [cuda.py:507] Using FLASH_ATTN_MLA attention backend "
               f"out of potential backends: ['FLASH_ATTN_MLA', 'FLASHMLA', 'TRITON_MLA'].") for r in range(tp)]
    ev.append((0, f"(Worker_TP0 pid={w[0]}) INFO 11-30 10:02:20 [gpu_model_runner.py:5150] Model loading took 83.42 "
                  f"GiB memory and 120.512345 seconds"))
    for r in range(tp):
        ev.append((r, f"(Worker_TP{r} pid={w[r]}) INFO 11-30 10:04:00 [gpu_model_runner.py:6369] Profiling CUDA graph "
                      f"memory: PIECEWISE=7 (largest=32), FULL=4 (largest=16)"))
        ev.append((r, f"(Worker_TP{r} pid={w[r]}) INFO 11-30 10:04:10 [gpu_model_runner.py:6475] Estimated CUDA graph "
                      f"memory: 0.{85 + r % 3} GiB total"))
    ev.append((0, f"(Worker_TP0 pid={w[0]}) INFO 11-30 10:04:11 [gpu_worker.py:760] Available KV cache memory: "
                  f"31.12 GiB"))
    ev.append((None, "(EngineCore pid=200) INFO 11-30 10:04:12 [kv_cache_utils.py:2327] GPU KV cache size: 2,039,040 "
                     "tokens, Maximum concurrency for 65,536 tokens per request: 31.11x"))
    ev.append((0, f"(Worker_TP0 pid={w[0]}) INFO 11-30 10:05:00 [gpu_model_runner.py:6582] Graph capturing finished in "
                  f"12 secs, took 0.91 GiB"))
    for r in range(tp):
        ev.append((r, f"(Worker_TP{r} pid={w[r]}) INFO 11-30 10:05:01 [gpu_worker.py:972] CUDA graph pool memory: 0.91 "
                      f"GiB (actual), 0.{85 + r % 3} GiB (estimated), difference: 0.06 GiB (6.6%)."))
        ev.append((r, f"(Worker_TP{r} pid={w[r]}) INFO 11-30 10:05:02 [gpu_worker.py:1038] Free memory on device "
                  f"(139.25/139.81 GiB) on startup. Desired GPU memory utilization is (0.95, 132.82 GiB). Actual usage "
                  f"is 85.9 GiB for consumed memory (weights + non-torch), 17.{50 + r} GiB for peak activation, and "
                  f"0.91 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
                  f"`--kv-cache-memory=32000000000` (29.8 GiB) to fit into requested memory, or "
                  f"`--kv-cache-memory=39000000000` (36.32 GiB) to fully utilize gpu memory. "
                  f"Current kv cache memory in use is {31.12 - 0.01 * (r % 4):.2f} GiB."))
    ev.append((None, "(EngineCore pid=200) INFO 11-30 10:05:10 [core.py:402] init engine (profile, create kv cache, "
                     "warmup model) took 305.10 s"))
    return ev


def generate(path: Path, megabytes: int, seed: int = 7) -> int:
    """Write the log: boot events spread evenly over the file, noise in between; returns bytes."""
    rng = random.Random(seed)
    events = boot_events()
    target = megabytes << 20
    gap = target // (len(events) + 1)
    written = 0
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for event in events + [None]:
            block, size = [], 0
            while size < gap:
                r = rng.randrange(TP)
                line = rng.choice(NOISE).format(ts=_ts(rng), r=r, n=(r + 1) % TP, wpid=300 + r,
                                                tid=rng.randrange(9999), c=rng.randrange(32), k=rng.randrange(99999),
                                                m=rng.randrange(60), s=rng.randrange(60))
                block.append(line)
                size += len(line) + 1
            if event is not None:
                block.append(_ts(rng) + event)
            chunk = "\n".join(block) + "\n"
            out.write(chunk)
            written += len(chunk.encode("utf-8"))
    return written


def generate_rank_files(folder: Path, tp: int) -> list[Path]:
    """One file per rank of a TP=tp boot: the engine's lines, then that rank's (grouped in one
    pass: a filter per rank would cost tp² to write 16,000 files)."""
    engine, by_rank = [], [[] for _ in range(tp)]
    for rank, line in ranked_boot_events(tp):
        (engine if rank is None else by_rank[rank]).append(line)
    paths = []
    for rank, lines in enumerate(by_rank):
        path = folder / f"rank{rank:05d}.log"
        path.write_text("\n".join(engine + lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def time_ingest_files(paths: list[Path]) -> tuple[float, object]:
    start = time.perf_counter()
    report = report_from_logs([(read_text(p), str(p)) for p in paths])
    return time.perf_counter() - start, report


def bench_files(counts: list[int], repeat: int) -> int:
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    per_thousand: dict[int, float] = {}
    for count in counts:
        with tempfile.TemporaryDirectory() as tmp:
            paths = generate_rank_files(Path(tmp), count)
            runs = []
            for _ in range(repeat):
                elapsed, report = time_ingest_files(paths)
                assert len(report.ranks) == count, f"expected {count} ranks, got {len(report.ranks)}"
                runs.append(elapsed)
        median = statistics.median(runs)
        print(f"{count:6d} one-rank files: median {median:.2f} s = {1000 * median / count:.3f} s per 1000 files  "
              f"(runs: {', '.join(f'{t:.2f}' for t in runs)})", flush=True)
        per_thousand[count] = 1000 * median / count
    if len(per_thousand) > 1:
        few, many = min(per_thousand), max(per_thousand)
        print(f"per-1000-files time at {many} / at {few} = {per_thousand[many] / per_thousand[few]:.2f} "
              f"(1 is linear; quadratic would be {many / few:.0f})")
    return 0


def time_ingest(path: Path) -> tuple[float, object]:
    start = time.perf_counter()
    report = report_from_log_text(read_text(path), str(path))
    return time.perf_counter() - start, report


def time_grep(path: Path, pattern: str) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(["grep", "-cE", pattern, str(path)], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"grep failed: {done.stderr.strip()}")
    return elapsed, int(done.stdout.strip() or 0)


def check(report) -> None:
    """The figures must be the planted ones: a fast parser that misses lines proves nothing."""
    assert len(report.ranks) == TP, f"expected {TP} ranks, got {len(report.ranks)}"
    assert report.capacity.kv_tokens == 2_039_040, report.capacity.kv_tokens
    assert report.capacity.binding_rank == 3, report.capacity.binding_rank
    assert report.ranks[0].owners["weights"] is not None and report.ranks[1].owners["weights"] is None
    assert all(r.graph_pool_actual_bytes is not None for r in report.ranks)
    assert report.engine.attention_backend == "FLASH_ATTN_MLA" and report.config.tensor_parallel_size == TP


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200, help="size of the generated log (MiB)")
    ap.add_argument("--repeat", type=int, default=5, help="timed repetitions of each side")
    ap.add_argument("--keep", type=Path, default=None, help="write the log here instead of a temp dir")
    ap.add_argument("--files", type=int, action="append", default=None, metavar="N",
                    help="instead: time ingesting N one-rank logs of a TP=N boot (repeatable)")
    args = ap.parse_args(argv)
    if args.files:
        return bench_files(args.files, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.keep or Path(tmp)) / "bench-8rank.log"
        size = generate(path, args.mb)
        pattern = grep_pattern()
        ingest, grep, matched = [], [], 0
        for _ in range(args.repeat):
            # Alternate, so that cache warmth and machine noise hit both sides alike.
            elapsed, report = time_ingest(path)
            ingest.append(elapsed)
            check(report)
            elapsed, matched = time_grep(path, pattern)
            grep.append(elapsed)
        mb = size / 1e6
        ingest_mbs, grep_mbs = mb / statistics.median(ingest), mb / statistics.median(grep)
        ratio = ingest_mbs / grep_mbs
        print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
              f"Python {platform.python_version()}")
        print(f"log: {mb:.1f} MB, {TP} ranks, {len(boot_events())} memory events; grep matched {matched} lines")
        print(f"ingest (read_text + report_from_log_text): median {statistics.median(ingest):.3f} s "
              f"= {ingest_mbs:.1f} MB/s  (runs: {', '.join(f'{t:.3f}' for t in ingest)})")
        print(f"grep -cE (same anchors):                  median {statistics.median(grep):.3f} s "
              f"= {grep_mbs:.1f} MB/s  (runs: {', '.join(f'{t:.3f}' for t in grep)})")
        print(f"ratio ingest/grep: {ratio:.2f} (goal >= {GOAL})")
        return 0 if ratio >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
