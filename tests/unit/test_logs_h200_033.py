"""Real vLLM 0.33.0 start-up logs from the H200 (issue #25 item 5): the `--log` of two `kvaudit run`
boots at real dimensions (tests/benchmarks/results/h200-real-llama-3.1-8b-vllm0.33.0.log and
before-fix/h200-real-deepseek-v3-2layer-mtp-vllm0.33.0-first.log), copied as fixtures. Expected
bytes are vLLM's printed GiB × 2**30, rounded, with the printed figure beside each; the lines are
quoted in each test. kvaudit sized the KV in these boots, so vLLM's "Available KV cache memory" (its
own figure) and "Current kv cache memory in use" (what was allocated) differ: the log report keeps
both."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.input_text import read_text
from kvaudit.schema import Owner, Report, Verdict

FIXTURES = Path(__file__).parent.parent / "fixtures" / "logs"


def gib(printed: float) -> int:
    return round(printed * (1 << 30))


@pytest.fixture(scope="module")
def llama() -> Report:
    name = "gpu-0.33-v2-h200-llama-8b.log"
    return report_from_log_text(read_text(FIXTURES / name), name)


@pytest.fixture(scope="module")
def mtp() -> Report:
    name = "gpu-0.33-v2-h200-deepseek-v3-mtp.log"
    return report_from_log_text(read_text(FIXTURES / name), name)


def test_the_engine_line_and_the_backend(llama: Report, mtp: Report) -> None:
    # "Initializing a V1 LLM engine (v0.33.0)", vllm/v1/worker/gpu/model_runner.py lines (Model Runner V2),
    # "Using FLASH_ATTN attention backend out of potential backends: [...]"
    assert (llama.engine.version, llama.engine.model_runner, llama.engine.attention_backend) == \
        ("0.33.0", "V2", "FLASH_ATTN")
    assert (mtp.engine.version, mtp.engine.model_runner, mtp.engine.attention_backend) == \
        ("0.33.0", "V2", "FLASH_ATTN_MLA")


def test_weights_kv_and_tokens(llama: Report, mtp: Report) -> None:
    # "Model loading took 15.0 GiB memory", "Current kv cache memory in use is 120.57 GiB",
    # "GPU KV cache size: 987,680 tokens" (vllm/v1/core/kv_cache_utils.py in 0.33's log)
    r = llama.ranks[0]
    assert r.owners[Owner.WEIGHTS] == gib(15.0)
    assert r.owners[Owner.KV_CACHE] == gib(120.57)
    assert llama.capacity.kv_tokens == 987_680
    # "Model loading took 47.63 GiB", "Current kv cache memory in use is 78.73 GiB", 24,461,904 tokens
    m = mtp.ranks[0]
    assert m.owners[Owner.WEIGHTS] == gib(47.63)
    assert m.owners[Owner.KV_CACHE] == gib(78.73)
    assert mtp.capacity.kv_tokens == 24_461_904


def test_vllms_own_kv_figure_is_kept_apart_from_what_was_allocated(llama: Report) -> None:
    # "Available KV cache memory: 120.94 GiB": vLLM's own figure; kvaudit's 120.57 GiB was allocated
    assert llama.ranks[0].kv_available_bytes == gib(120.94)
    assert llama.ranks[0].kv_available_bytes > llama.ranks[0].owners[Owner.KV_CACHE]


def test_graph_memory_actual_and_estimated(llama: Report, mtp: Report) -> None:
    # "CUDA graph pool memory: 0.06 GiB (actual), 0.12 GiB (estimated)": the owner holds the larger
    r = llama.ranks[0]
    assert (r.graph_pool_actual_bytes, r.graph_pool_estimate_bytes) == (gib(0.06), gib(0.12))
    assert r.owners[Owner.GRAPH_POOL] == gib(0.12)
    m = mtp.ranks[0]
    assert (m.graph_pool_actual_bytes, m.graph_pool_estimate_bytes) == (gib(0.62), gib(0.84))


def test_the_actual_usage_line_and_vllms_suggestion(llama: Report, mtp: Report) -> None:
    # "Actual usage is 15.1 GiB for consumed memory (weights + non-torch), 0.96 GiB for peak activation,
    # and 0.06 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with
    # `--kv-cache-memory=129642598810` (120.74 GiB) to fit into requested memory": its peak includes the
    # applied graph estimate (0.33's Worker.determine_available_memory: transient + estimate), so the
    # activation owner is 0.96 − 0.12 GiB
    r = llama.ranks[0]
    assert r.vllm_suggested_kv_cache_memory_bytes == 129_642_598_810
    assert r.owners[Owner.ACTIVATION_PEAK] == gib(0.96) - gib(0.12)
    m = mtp.ranks[0]
    assert m.vllm_suggested_kv_cache_memory_bytes == 86_386_739_610
    assert m.owners[Owner.ACTIVATION_PEAK] == gib(5.7) - gib(0.84)


def test_an_exception_vllm_handled_at_warning_level_is_no_failure_and_no_note(llama: Report) -> None:
    # after start-up vLLM's chat-template warmup failed without a tokenizer and logged the ValueError
    # with its traceback at WARNING, then went on serving: nothing died
    assert "WARNING 12-04 15:19:58 [base.py:383] ValueError: Tokenizer not available" in (FIXTURES / "gpu-0.33-v2-h200-llama-8b.log").read_text()
    assert llama.verdict is Verdict.OK and llama.failure is None
    assert not any("Traceback" in w or "Tokenizer" in w for w in llama.warnings), llama.warnings
