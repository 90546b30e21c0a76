"""Issue 28, item 4, on one H200: the user's own path. A plain vLLM boot (tests/gpu/user_path.py:
no kvaudit in its process) with the safe flags kvaudit printed for each real-dimension model at GMU
0.98, under the full batch of `--verify batch` with the sampling of `--verify sampling`: its own
peak (NVML device used, sampled every millisecond, minus what was in use before it started; or the
workers' own torch peak + non-torch, the larger) must stay within the requested budget and leave
at most 1 % of the device unused.

The kvaudit reports come from tests/gpu/test_verify_gpu.py's boots in $KVAUDIT_GPU_RESULTS when
they are there (stage `load1`/`load2` before `user-path`), else this test boots kvaudit itself.
Results: `h200-user-path-<model>[-vllm<release>].json` (and the load it ran, `.load.json`).
Run on vLLM 0.33.0: 8B and V2-Lite pass, the MTP model peaked 1.83 GiB over (docs/vllm-0.33-h200.md). On 0.34.0
with the rest of the device taken during the load (stage `load2-contended`): the MTP model's load ran whole at the
flags lowered by its verify's overrun; its recorded peak, 733 MB over, is its boot's (docs/vllm-0.34.md).
"""

from __future__ import annotations

import json

import pytest
from conftest import HERE, requires_vllm
from test_verify_gpu import boot, result_name
from user_path_load import run_user_path, safe_flags, user_load, within_budget

pytestmark = [pytest.mark.gpu, requires_vllm]

MODELS = {"llama-3.1-8b": (), "deepseek-v2-lite": (), "deepseek-v3-2layer-mtp": ("--mtp", "1")}


@pytest.mark.parametrize("model", list(MODELS))
def test_plain_vllm_with_the_safe_flags_holds_and_is_tight(results_dir, model):
    path = results_dir / f"{result_name(model)}.json"
    if path.exists():
        report = json.loads(path.read_text())
    else:
        _, report = boot(results_dir, model, model, *MODELS[model], "--verify")
    assert report["capacity"]["safe_serve_flags"], report.get("verdict_reason")
    vocab = json.loads((HERE / "models" / model / "config.json").read_text())["vocab_size"]
    load = user_load(report, vocab_size=int(vocab))
    result = run_user_path(load, results_dir, result_name(model).replace("h200-load-", "h200-user-path-"), timeout=900)
    assert result.get("error") is None, result
    step = load["loads"][0]
    assert result["generated_tokens"] == len(step["requests"]) * step["decode_tokens"]
    assert within_budget(result) == [], result


def test_vllms_own_sizing_under_the_same_load_and_kvaudit_reads_its_log(results_dir):
    """vLLM 0.34 sizes the KV cache itself after warmup and capture by default (its extensible KV
    cache): the 8B model's load through a plain boot with no KV flag and no GMU, so vLLM sizes it.
    Recorded (h200-vllm-own-llama-3.1-8b-vllm<release>.json): its blocks and its peak, beside
    kvaudit's safe budget. Checked: kvaudit reads that boot's own log as vLLM ran it, the blocks the
    cache was extended to (the engine's num_gpu_blocks) and sized after warmup."""
    import vllm.engine.arg_utils as arg_utils

    from kvaudit.engines.logs import report_from_log_text
    from kvaudit.schema import KvSizing
    if "enable_extensible_kv_cache" not in arg_utils.EngineArgs.__dataclass_fields__:
        pytest.skip("this vLLM has no extensible KV cache (0.34 on)")
    model = "llama-3.1-8b"
    path = results_dir / f"{result_name(model)}.json"
    report = json.loads(path.read_text()) if path.exists() else boot(results_dir, model, model, "--verify")[1]
    vocab = json.loads((HERE / "models" / model / "config.json").read_text())["vocab_size"]
    load = user_load(report, vocab_size=int(vocab))
    for key in ("kv_cache_memory_bytes", "gpu_memory_utilization", "enable_extensible_kv_cache"):
        load["engine"].pop(key, None)  # vLLM's own defaults decide
    name = result_name(model).replace("h200-load-", "h200-vllm-own-")
    result = run_user_path(load, results_dir, name, timeout=900)
    result["kvaudit_safe_kv_cache_memory_bytes"] = int(safe_flags(report)["kv_cache_memory_bytes"])
    (results_dir / f"{name}.json").write_text(json.dumps(result, indent=1))
    assert result.get("extensible_kv_cache") is True, result
    read = report_from_log_text((results_dir / f"{name}.log").read_text(errors="replace"), f"{name}.log")
    assert read.engine.kv_cache_sizing is KvSizing.AFTER_WARMUP
    assert [r.kv_blocks for r in read.ranks] == [result["num_gpu_blocks"]] * len(read.ranks)
