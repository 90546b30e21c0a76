"""kvaudit's long-prefill probe on Model Runner V2 (adapter.long_prefill_shape / long_prefill_step):
which step it runs and that it is one request, on stand-ins with the signatures of vLLM 0.33's
GPUModelRunner._dummy_run (tests/fixtures/vllm-source pins them per release)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from kvaudit.engines.vllm import adapter


class RunnerV2:
    def __init__(self, max_num_tokens: int = 8192, max_num_reqs: int = 16):
        self.max_num_tokens = max_num_tokens
        self.max_num_reqs = max_num_reqs
        self.calls: list[tuple] = []

    def _dummy_run(self, num_tokens, *args, skip_attn=False, uniform_decode=False, context_len=0,
                   skip_eplb=False, is_profile=False, **kwargs):
        self.calls.append(("run", num_tokens, context_len, skip_attn, self.max_num_reqs))
        return "hidden", "last"

    def _dummy_sampler_run(self, hidden_states):
        self.calls.append(("sampler", hidden_states, self.max_num_reqs))


class RunnerWithoutContext(RunnerV2):
    def _dummy_run(self, num_tokens, *args, skip_attn=False, skip_eplb=False, is_profile=False, **kwargs):
        return super()._dummy_run(num_tokens)


def worker(runner, *, v2=True, max_model_len=32768, chunked=True):
    return SimpleNamespace(model_runner=runner, use_v2_model_runner=v2, vllm_config=object(),
                           model_config=SimpleNamespace(max_model_len=max_model_len),
                           scheduler_config=SimpleNamespace(enable_chunked_prefill=chunked))


def test_the_step_is_the_last_chunk_of_the_longest_prompt():
    assert adapter.long_prefill_shape(worker(RunnerV2())) == (8192, 32768 - 8192)
    # a prompt shorter than a chunk is one step over no context
    assert adapter.long_prefill_shape(worker(RunnerV2(), max_model_len=4096)) == (4096, 0)
    # without chunked prefill the whole prompt is one step
    assert adapter.long_prefill_shape(worker(RunnerV2(max_num_tokens=32768), chunked=False)) == (32768, 0)


def test_no_probe_where_the_runner_cannot_run_a_step_with_context():
    assert adapter.long_prefill_shape(worker(RunnerV2(), v2=False)) is None  # V1 (and the CPU backend)
    assert adapter.long_prefill_shape(worker(RunnerWithoutContext())) is None  # MRv2 before 0.28


@pytest.fixture
def vllm_config_stub(monkeypatch):
    """`vllm.config.set_current_vllm_config`, where vLLM is not importable here."""
    try:
        import vllm.config  # noqa: F401
        return
    except Exception:
        pass
    from contextlib import nullcontext
    vllm = types.ModuleType("vllm")
    config = types.ModuleType("vllm.config")
    config.set_current_vllm_config = lambda c: nullcontext()
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.config", config)


def test_the_step_is_one_request_with_attention_then_its_sampler(vllm_config_stub, monkeypatch):
    import contextlib

    import vllm.config
    monkeypatch.setattr(vllm.config, "set_current_vllm_config", lambda c: contextlib.nullcontext())
    runner = RunnerV2()
    adapter.long_prefill_step(worker(runner), 8192, 24576)
    assert runner.calls == [("run", 8192, 24576, False, 1), ("sampler", "last", 1)]
    assert runner.max_num_reqs == 16  # restored
