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


def with_builders(runner, *thresholds, speculator_thresholds=()):
    """Attention groups as MRv2 keeps them (a list per KV group), builders with a reorder threshold."""
    group = lambda values: SimpleNamespace(metadata_builders=[SimpleNamespace(reorder_batch_threshold=v)  # noqa: E731
                                                               for v in values])
    runner.attn_groups = [[group(thresholds)]]
    runner.speculator = SimpleNamespace(attn_groups=[[group(speculator_thresholds)]])
    return runner


def test_the_shortest_prefill_query_is_one_above_the_largest_reorder_threshold():
    assert adapter.shortest_prefill_query(worker(with_builders(RunnerV2(), 512, None))) == 513
    assert adapter.shortest_prefill_query(worker(with_builders(RunnerV2(), 1, speculator_thresholds=(2,)))) == 3
    assert adapter.shortest_prefill_query(worker(RunnerV2())) == 1  # no attention groups: any query prefills


def test_a_short_query_over_the_longest_context_is_probed_beside_the_last_chunk():
    # MLA (FlashAttention MLA: queries up to 512 tokens decode): the last chunk, then 513 tokens over
    # max_model_len - 513 of context and over the chunk's context
    steps = adapter.long_prefill_steps(worker(with_builders(RunnerV2(), 512)), 8192, 24576)
    assert steps == {"last_chunk": (8192, 24576), "long_context": (513, 32255), "short_query": (513, 24576)}
    # no context (a prompt within one chunk, or no chunked prefill): the one step
    assert adapter.long_prefill_steps(worker(with_builders(RunnerV2(), 512)), 4096, 0) == {"last_chunk": (4096, 0)}


def test_the_probe_adds_what_the_longer_context_costs_to_the_last_chunk():
    # the H200 MTP model's figures in the terms: 112 KiB of context tensors a token
    per_token = 128 * (2 * 128 + 128 + 64) * 2
    chunk = 5_488_246_784
    transients = {"last_chunk": chunk, "long_context": 100 + 32255 * per_token, "short_query": 100 + 24576 * per_token}
    assert adapter.combined_prefill_transient(transients) == chunk + (32255 - 24576) * per_token
    # a longer context that costs nothing more (FlashAttention 3 reads the cache in place): the chunk's
    assert adapter.combined_prefill_transient({"last_chunk": chunk, "long_context": 10, "short_query": 12}) == chunk
    # a step that failed (not in the dict) adds nothing of its own; the largest step is the floor
    assert adapter.combined_prefill_transient({"last_chunk": 5, "long_context": 9}) == 14
    assert adapter.combined_prefill_transient({"last_chunk": 5}) == 5
