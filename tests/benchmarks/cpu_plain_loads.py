"""A plain vLLM on the CPU (no kvaudit in it) under `--verify`'s loads, one after another, with the engine core's
resident memory around each: what a user's `vllm serve` with kvaudit's flags holds once its heap has settled.

    python tests/benchmarks/cpu_plain_loads.py --kv-cache-memory-bytes N [--model DIR]

The embedded model at kvaudit's CPU defaults (max_model_len 4096, 8 sequences, GMU 0.13, dummy weights, eager);
the loads are verify's: prefill (one 4092-token prompt + 4), batch (eight 4076-token prompts + 20, greedy),
sampling (the same with top-k 50, top-p 0.9, min-p 0.05, logprobs 20), then batch and sampling again, then twice
64 prompts of 64 lengths each with that sampling (a server's traffic: GEMM row counts no other load had). The
kernel caches are held as kvaudit's safe flags hold them (capacity.HOST_JIT_CACHES) unless --default-caches. Each line:
the engine core's VmRSS at the load's start, its VmHWM over the load (reset through /proc/PID/clear_refs) and its
VmRSS at the end, in MiB. Compare the peak with the report's requested bytes."""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from kvaudit.capacity import JIT_CACHE_DEFAULT, jit_caches_unset

EMBEDDED = Path(__file__).resolve().parents[2] / "kvaudit" / "data" / "tiny-deepseek"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv-cache-memory-bytes", type=int, required=True)
    parser.add_argument("--model", default=str(EMBEDDED))
    parser.add_argument("--default-caches", action="store_true",
                        help=f"leave oneDNN's and torch's kernel caches at their default capacity ({JIT_CACHE_DEFAULT})")
    args = parser.parse_args()
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")  # as kvaudit's safe flags carry it
    if not args.default_caches:  # as they carry these (capacity.HOST_JIT_CACHES)
        os.environ.update(jit_caches_unset(os.environ))
    import psutil
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=args.model, load_format="dummy", max_model_len=4096, max_num_seqs=8, gpu_memory_utilization=0.13,
              kv_cache_memory_bytes=args.kv_cache_memory_bytes, enforce_eager=True, skip_tokenizer_init=True)
    core = max(psutil.Process().children(recursive=True), key=lambda p: p.memory_info().rss)

    def status() -> dict[str, int]:
        text = Path(f"/proc/{core.pid}/status").read_text()
        return {k: int(v) // 1024 for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text, re.M)}

    print(f"engine core pid {core.pid} after the boot: VmRSS {status()['VmRSS']} MiB", flush=True)
    greedy = SamplingParams(max_tokens=20, ignore_eos=True, detokenize=False, temperature=0.0)
    sampling = SamplingParams(max_tokens=20, ignore_eos=True, detokenize=False, temperature=1.0, top_k=50, top_p=0.9,
                              min_p=0.05, logprobs=20)
    loads = [("prefill", 1, 4092, SamplingParams(max_tokens=4, ignore_eos=True, detokenize=False, temperature=0.0)),
             ("batch", 8, 4076, greedy), ("sampling", 8, 4076, sampling), ("batch again", 8, 4076, greedy),
             ("sampling again", 8, 4076, sampling), ("lengths", 64, 0, sampling), ("lengths again", 64, 0, sampling)]
    for n, (name, requests, length, params) in enumerate(loads):
        # "lengths": 64 prompts of 64 different lengths (101 to 4038 tokens) over eight sequences, so every GEMM
        # meets row counts no other load had, as a long-running server's traffic does
        prompts = [TokensPrompt(prompt_token_ids=[(n * 1000 + i * 7 + j) % 1000 + 1
                                                  for j in range(length or 101 + i * 62 + (n % 2) * 31)])
                   for i in range(requests)]
        start = status()["VmRSS"]
        Path(f"/proc/{core.pid}/clear_refs").write_text("5")
        llm.generate(prompts, params, use_tqdm=False)
        after = status()
        print(f"{name}: start {start} peak {after['VmHWM']} (+{after['VmHWM'] - start}) end {after['VmRSS']}",
              flush=True)


if __name__ == "__main__":
    main()
