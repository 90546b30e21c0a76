"""Issue 28, item 4, on one H200: the user's own path. A plain vLLM boot (tests/gpu/user_path.py:
no kvaudit in its process) with the safe flags kvaudit printed for each real-dimension model at GMU
0.98, under the full batch of `--verify batch` with the sampling of `--verify sampling`: its own
peak (NVML device used, sampled every millisecond, minus what was in use before it started; or the
workers' own torch peak + non-torch, the larger) must stay within the requested budget and leave
at most 1 % of the device unused.

The kvaudit reports come from tests/gpu/test_verify_gpu.py's boots in $KVAUDIT_GPU_RESULTS when
they are there (stage `load1`/`load2` before `user-path`), else this test boots kvaudit itself.
Results: `h200-user-path-<model>[-vllm<release>].json` (and the load it ran, `.load.json`).
Run on vLLM 0.33.0: 8B and V2-Lite pass, the MTP model peaked 1.83 GiB over (docs/vllm-0.33-h200.md).
"""

from __future__ import annotations

import json

import pytest
from conftest import HERE, requires_vllm
from test_verify_gpu import boot, result_name
from user_path_load import run_user_path, user_load, within_budget

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
