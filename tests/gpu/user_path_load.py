"""The load of the user's-own-path check (tests/gpu/user_path.py), from a kvaudit report: the plain
vLLM engine the report's safe flags describe, and the full batch of `--verify batch` (max_num_seqs
requests filling the cache those flags give) with the sampling of `--verify sampling`. This runs in
the test's process; the vLLM process it feeds runs no kvaudit."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kvaudit.config import config_from_json
from kvaudit.engines.vllm import verify
from kvaudit.engines.vllm.boot import engine_kwargs

HERE = Path(__file__).parent
MiB = 1 << 20
TOLERANCE = 16 * MiB
"""kvaudit's over-commit tolerance (capacity.OVERCOMMIT_TOLERANCE_BYTES)."""


def safe_flags(report: dict[str, Any]) -> dict[str, str]:
    """`--kv-cache-memory-bytes=N …` → {kv_cache_memory_bytes: N, …}."""
    out = {}
    for flag in report["capacity"]["safe_serve_flags"]:
        name, _, value = flag.partition("=")
        out[name.lstrip("-").replace("-", "_")] = value
    return out


def user_load(report: dict[str, Any], *, vocab_size: int, max_logprobs: int = 20) -> dict[str, Any]:
    """LOAD.json for tests/gpu/user_path.py: the report's engine with its safe flags, one load."""
    flags = safe_flags(report)
    config = config_from_json(report["config"]).replace(gpu_memory_utilization=float(flags["gpu_memory_utilization"]),
                                                         max_model_len=int(flags["max_model_len"]))
    engine = engine_kwargs(config, "")
    engine.pop("worker_cls")
    kv = int(flags["kv_cache_memory_bytes"])
    engine["kv_cache_memory_bytes"] = kv
    cap = report["capacity"]
    draft = int(config.num_speculative_tokens or 0) if config.speculative_method else 0
    shape = verify.Shape(max_model_len=config.max_model_len, max_num_seqs=int(config.max_num_seqs),
                         max_num_batched_tokens=int(config.max_num_batched_tokens),
                         chunked_prefill=bool(config.enable_chunked_prefill),
                         kv_blocks=kv // int(cap["kv_bytes_per_block"]), tokens_per_block=int(cap["tokens_per_block"]),
                         vocab_size=vocab_size, max_logprobs=max_logprobs, draft_tokens=draft, lookahead_tokens=draft)
    prompts, decode = verify.batch_shape(shape)
    return {"engine": engine, "vocab_size": vocab_size,
            "loads": [{"requests": list(prompts), "decode_tokens": decode, "sampling": verify.sampling_params(shape)}]}


def run_user_path(load: dict[str, Any], folder: Path, name: str, *, env: dict[str, str] | None = None,
                  timeout: float = 900) -> dict[str, Any]:
    """Run tests/gpu/user_path.py on `load` in a fresh process; its OUT.json, with the log's tail
    under `log_tail` when it wrote none."""
    load_path, out_path, log_path = folder / f"{name}.load.json", folder / f"{name}.json", folder / f"{name}.log"
    load_path.write_text(json.dumps(load, indent=1))
    with log_path.open("w") as log:
        subprocess.run([sys.executable, str(HERE / "user_path.py"), str(load_path), str(out_path)], stdout=log,
                       stderr=subprocess.STDOUT, timeout=timeout, env={**os.environ, **(env or {})})
    if out_path.exists():
        return json.loads(out_path.read_text())
    return {"error": "no result", "log_tail": log_path.read_text()[-3000:]}


def within_budget(result: dict[str, Any]) -> list[str]:
    """What breaks the check, per device: a peak above the requested budget (beyond the
    tolerance), or more than 1 % of the device left unused; [] when it holds."""
    problems = []
    for i, (peak, requested, total) in enumerate(zip(result["peak_bytes"], result["requested_bytes"],
                                                     result["device_total_bytes"])):
        slack = requested - peak
        if slack < -TOLERANCE:
            problems.append(f"device {i}: peak {peak} is {-slack} bytes above the requested {requested}")
        if slack > math.floor(total / 100):
            problems.append(f"device {i}: {slack} bytes of the requested {requested} unused, above 1 % of {total}")
    return problems
