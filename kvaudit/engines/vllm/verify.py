"""`kvaudit run --verify`: the scenarios, run on the cache kvaudit sized, after the audit.

Each scenario is a load a deployment can put on the engine once KV is sized, measured on its own
(the worker's kvaudit_verify_begin/end bracket it: peak reset, then the true peak per rank):

- `prefill`: one request of max_model_len − 4 tokens, then 4 decode steps (the longest step);
- `batch`: max_num_seqs requests whose KV fills the cache as far as the config allows, decoding
  together, greedy;
- `spec` (with speculative decoding only): the batch's requests with random sampling, so the
  rejection sampler's probabilistic path verifies the K draft tokens of every step;
- `sampling`: the batch's requests with top-k, top-p, min-p and the most logprobs the model
  allows (the profile's dummy sampler run asks for no logprobs: vLLM's _dummy_sampler_run).

The planning (`plan`) is pure: it sees only the engine's resolved figures (`Shape`). `run` drives
the engine (it imports vLLM) and returns plain dicts for RESULT.json.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvaudit.engines.sequence import exception_line
from kvaudit.errors import UsageError
from kvaudit.schema import Scenario

DECODE_TOKENS = 4
"""Decode steps after the prefill scenario's prompt (and the least any scenario generates)."""
MIN_PROMPT_TOKENS = 16
TOP_K, TOP_P, MIN_P = 50, 0.9, 0.05
FALLBACK_LOGPROBS = 20
"""Logprobs asked for where the model allows any number (max_logprobs −1): vLLM's default cap."""
ALL = "all"


def speculative(config: Any) -> bool:
    """Whether an AuditConfig asks for speculative decoding (`--mtp`, a preset, or vLLM's own
    `--speculative-config` after `--`)."""
    return bool(config.speculative_method or config.extra_args.get("speculative_config"))


def choose(text: str, config: Any) -> tuple[Scenario, ...]:
    """`--verify` (ALL: every scenario that applies) or `--verify prefill,batch`: the scenarios, in
    their fixed order. A name that is none, or `spec` without speculative decoding, is a usage
    error that names the fix."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"--verify needs scenario names or none at all: {', '.join(s.value for s in Scenario)}")
    if names == [ALL]:
        return tuple(s for s in Scenario if s is not Scenario.SPEC or speculative(config))
    known = {s.value for s in Scenario}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"--verify: unknown scenario {unknown[0]!r}: choose from {', '.join(sorted(known))} "
                         f"(comma-separated), or pass --verify alone for every one that applies")
    chosen = tuple(s for s in Scenario if s.value in names)
    if Scenario.SPEC in chosen and not speculative(config):
        raise UsageError("--verify spec needs speculative decoding: pass --mtp N (or vLLM's --speculative-config "
                         "after --), or leave spec out")
    return chosen


def check_repeat(repeat: int, config: Any) -> None:
    """`--repeat N` boots this node N times; a boot of several nodes would need every node to."""
    if repeat > 1 and config.extra_args.get("nnodes") not in (None, 1):
        raise UsageError("--repeat boots one node again and again; a boot of several nodes (--nnodes) cannot be "
                         "repeated from node 0 alone: run one boot at a time, or leave --repeat out")


@dataclass(frozen=True)
class Shape:
    """What the plan needs of the engine as vLLM resolved it, and of the cache kvaudit sized."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    kv_blocks: int | None
    """Blocks of the allocated cache (the fewest of any rank); None when no rank said."""
    tokens_per_block: int
    """block_size × decode_context_parallel_size."""
    vocab_size: int
    max_logprobs: int
    draft_tokens: int = 0
    """num_speculative_tokens (0 without speculative decoding)."""
    lookahead_tokens: int = 0
    """KV slots the scheduler reserves past a step for the drafter (vLLM's num_lookahead_tokens)."""
    max_num_scheduled_tokens: int | None = None
    """The scheduler's token budget a step where it differs from max_num_batched_tokens (vLLM
    lowers it for the draft slots with speculative decoding); None: max_num_batched_tokens."""

    @property
    def step_budget(self) -> int:
        """Tokens the scheduler puts into one step."""
        budget = max(self.max_num_batched_tokens, 1)
        return min(budget, self.max_num_scheduled_tokens) if self.max_num_scheduled_tokens else budget

    @property
    def longest_prompt(self) -> int:
        """The longest prompt vLLM ever schedules: without chunked prefill a prompt is one step, and
        one longer than the step budget waits forever (vLLM's Scheduler.schedule skips it)."""
        longest = self.max_model_len - DECODE_TOKENS
        return max(min(longest, self.step_budget) if not self.chunked_prefill else longest, 1)

    def unschedulable(self) -> str | None:
        """Why prompts up to max_model_len cannot all run in this engine, or None."""
        if self.chunked_prefill or self.step_budget >= self.max_model_len - DECODE_TOKENS:
            return None
        why = ""
        if self.max_num_scheduled_tokens and self.max_num_scheduled_tokens < self.max_num_batched_tokens:
            why = (f" (max_num_scheduled_tokens {self.max_num_scheduled_tokens} below max_num_batched_tokens "
                   f"{self.max_num_batched_tokens}: with speculative decoding vLLM fixes the step budget in "
                   f"VllmConfig._set_max_num_scheduled_tokens before the platform raises max_num_batched_tokens)")
        return (f"vLLM schedules at most {self.step_budget} tokens a step in this boot and runs without chunked "
                f"prefill{why}: a prompt longer than {self.step_budget} tokens is never scheduled and waits forever, "
                f"so max_model_len {self.max_model_len} cannot be served; --verify ran prompts of up to "
                f"{self.longest_prompt} tokens")


@dataclass(frozen=True)
class Load:
    """One scenario's requests: their prompt lengths, the tokens each generates, its sampling."""

    name: Scenario
    prompts: tuple[int, ...]
    decode_tokens: int
    draft_tokens: int
    sampling: dict[str, Any] = field(default_factory=dict)
    """SamplingParams keyword arguments beside max_tokens (vLLM's names)."""

    @property
    def requests(self) -> int:
        return len(self.prompts)

    @property
    def tokens(self) -> int:
        return sum(self.prompts) + self.decode_tokens * len(self.prompts)

    @property
    def step_tokens(self) -> int:
        return len(self.prompts) * (1 + self.draft_tokens)

    def sampling_text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.sampling.items())


def plan(names: Sequence[Scenario], shape: Shape) -> list[Load]:
    """The loads of the chosen scenarios, in order."""
    loads = []
    prompts, decode = batch_shape(shape)
    for name in names:
        if name is Scenario.PREFILL:
            loads.append(Load(name, (shape.longest_prompt,), DECODE_TOKENS, shape.draft_tokens, {}))
        elif name is Scenario.BATCH:
            loads.append(Load(name, prompts, decode, shape.draft_tokens, {"temperature": 0.0}))
        elif name is Scenario.SPEC:
            loads.append(Load(name, prompts, decode, shape.draft_tokens, {"temperature": 1.0}))
        elif name is Scenario.SAMPLING:
            loads.append(Load(name, prompts, decode, shape.draft_tokens, sampling_params(shape)))
    return loads


def sampling_params(shape: Shape) -> dict[str, Any]:
    """top-k, top-p, min-p and the most sample logprobs the model allows. min_p is left out with
    speculative decoding: vLLM refuses it there (SamplingParams._validate_spec_decode)."""
    params: dict[str, Any] = {"temperature": 1.0, "top_k": min(TOP_K, shape.vocab_size), "top_p": TOP_P}
    if not shape.draft_tokens:
        params["min_p"] = MIN_P
    params["logprobs"] = shape.max_logprobs if shape.max_logprobs > 0 else FALLBACK_LOGPROBS
    return params


def batch_shape(shape: Shape) -> tuple[tuple[int, ...], int]:
    """(prompt lengths, tokens each generates) of the full batch: max_num_seqs requests, each of
    the same length, whose KV fills the cache as far as the config allows.

    Decoding together: every request must still be generating when the last one is admitted.
    Admission takes at most one step per request plus the steps the prompts need at
    max_num_batched_tokens, so each request generates that many tokens and 4 more; with K draft
    tokens a step can accept all of them, so (1 + K) times that.

    Filling: each request may hold 1/max_num_seqs of the cache's blocks (vLLM's null block
    excluded); its prompt + generated tokens + the K tokens of its last step + the drafter's
    lookahead slots must fit them, and prompt + generated tokens must fit max_model_len.
    Without chunked prefill a prompt is scheduled whole, beside the requests already decoding
    (1 + K tokens each), so it must fit the step budget less theirs.
    A cache too small for max_num_seqs requests of MIN_PROMPT_TOKENS gets fewer requests."""
    n = max(shape.max_num_seqs, 1)
    admit = n + math.ceil(n * shape.max_model_len / shape.step_budget)
    decode = min((admit + DECODE_TOKENS) * (1 + shape.draft_tokens), max(shape.max_model_len // 2, DECODE_TOKENS))
    reserve = decode + shape.draft_tokens + shape.lookahead_tokens
    limit = shape.max_model_len - decode
    if not shape.chunked_prefill:
        limit = min(limit, shape.step_budget - (n - 1) * (1 + shape.draft_tokens))
    if shape.kv_blocks is not None:
        usable = max(shape.kv_blocks - 1, 0)
        per_request = usable // n * shape.tokens_per_block - reserve
        if per_request < MIN_PROMPT_TOKENS:  # fewer requests, each of MIN_PROMPT_TOKENS
            blocks = math.ceil((MIN_PROMPT_TOKENS + reserve) / shape.tokens_per_block)
            n = max(min(n, usable // blocks), 1)
            per_request = usable // n * shape.tokens_per_block - reserve
        limit = min(limit, per_request)
    return (max(limit, 1),) * n, decode


STRIDES = {Scenario.PREFILL: 7919, Scenario.BATCH: 7927, Scenario.SPEC: 7933, Scenario.SAMPLING: 7937}
"""Each scenario's step between consecutive prompt ids (distinct primes, at most 18 apart): two prompts of
different scenarios then differ in one of their first two tokens whatever their request numbers (in a
vocabulary of more than 20 ids), so their first KV blocks differ and no scenario's
prompt hits the prefix cache a scenario before it filled (the sampling scenario would otherwise
run no prefill at all, and batch's first request would reuse the prefill scenario's prompt)."""


def prompt_ids(request: int, length: int, vocab_size: int, scenario: Scenario = Scenario.BATCH) -> list[int]:
    """Token ids of one request's prompt in one scenario: a different sequence for each request (the
    request's multiple of a large prime) and for each scenario (STRIDES), so no prefix cache can share
    their blocks; ids 0 and 1 (often BOS and EOS) are left out."""
    span = max(vocab_size - 2, 1)
    stride = STRIDES[scenario]
    return [2 + ((j + 1) * stride + request * 1_000_003) % span for j in range(length)]


def prompts_of(load: Load, vocab_size: int) -> list[dict[str, Any]]:
    """The scenario's requests as vLLM's generate takes token ids: request i's prompt_ids in the
    scenario's own sequence."""
    return [{"prompt_token_ids": prompt_ids(i, length, vocab_size, load.name)} for i, length in enumerate(load.prompts)]


def shape_of(llm: Any, records: Sequence[Sequence[dict[str, Any]]]) -> Shape:
    """The Shape of a booted engine: vLLM's resolved config, and the allocated cache from the
    ranks' records (the kv_blocks and block_size facts of the kv phase)."""
    config = llm.llm_engine.vllm_config
    model, sched = config.model_config, config.scheduler_config
    blocks, block_size = [], None
    for events in records:
        for event in events if isinstance(events, list) else ():
            if isinstance(event, dict) and isinstance(event.get("kv_blocks"), int):
                blocks.append(event["kv_blocks"])
                block_size = event.get("block_size") or block_size
    dcp = int(getattr(config.parallel_config, "decode_context_parallel_size", 1) or 1)
    block_size = int(block_size or config.cache_config.block_size or 16)
    spec = config.speculative_config
    draft = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0
    lookahead = getattr(config, "num_lookahead_tokens", None)
    scheduled = getattr(sched, "max_num_scheduled_tokens", None)
    return Shape(max_model_len=int(model.max_model_len), max_num_seqs=int(sched.max_num_seqs),
                 max_num_batched_tokens=int(sched.max_num_batched_tokens),
                 chunked_prefill=bool(sched.enable_chunked_prefill), kv_blocks=min(blocks) if blocks else None,
                 tokens_per_block=block_size * dcp, vocab_size=int(model.get_vocab_size()),
                 max_logprobs=int(getattr(model, "max_logprobs", FALLBACK_LOGPROBS)), draft_tokens=draft,
                 lookahead_tokens=int(lookahead) if isinstance(lookahead, int) else draft,
                 max_num_scheduled_tokens=int(scheduled) if isinstance(scheduled, int) and scheduled > 0 else None)


def run(llm: Any, names: Sequence[Scenario], records: Sequence[Sequence[dict[str, Any]]],
        on_stage: Callable[[str], None] = lambda text: None,
        on_update: Callable[[dict[str, Any]], None] = lambda verify: None) -> dict[str, Any]:
    """Run the scenarios one after another on the booted engine; per scenario its load, its true
    peak per rank (`ranks`: rank, true_peak_bytes, requested_bytes) and its error. An error in one
    scenario (an OOM is the finding verify exists for) is recorded and the next one runs; once
    the engine cannot answer, the rest are recorded as not run. `on_update` gets the result so
    far after each scenario (RESULT.json keeps what a later death would lose)."""
    from vllm import SamplingParams
    shape = shape_of(llm, records)
    out: list[dict[str, Any]] = []
    warnings = [w for w in (shape.unschedulable(),) if w]
    dead: str | None = None
    for load in plan(names, shape):
        entry: dict[str, Any] = {"name": load.name.value, "requests": load.requests, "tokens": None,
                                 "prompt_tokens": max(load.prompts), "decode_tokens": load.decode_tokens,
                                 "step_tokens": load.step_tokens, "draft_tokens": load.draft_tokens,
                                 "sampling": load.sampling_text() or None, "ranks": [], "error": None}
        out.append(entry)
        if load.name is Scenario.SPEC and not shape.draft_tokens:
            entry["error"] = "not run: vLLM runs no speculative decoding in this boot"
            continue
        if dead is not None:
            entry["error"] = f"not run: {dead}"
            continue
        on_stage(f"verify: {load.name.value} ({load.requests} request{'s' if load.requests > 1 else ''}, "
                 f"{max(load.prompts)}-token prompt{'s' if load.requests > 1 else ''} + {load.decode_tokens})")
        start = time.perf_counter()
        try:
            llm.collective_rpc("kvaudit_verify_begin", args=(load.name.value,))
        except Exception as exc:
            dead = f"the engine did not answer ({exception_line(exc, 400)})"
            entry["error"] = f"not run: {dead}"
            continue
        params = SamplingParams(max_tokens=load.decode_tokens, ignore_eos=True, detokenize=False, **load.sampling)
        prompts = prompts_of(load, shape.vocab_size)
        try:
            outputs = llm.generate(prompts, params, use_tqdm=False)
            entry["tokens"] = sum(len(o.prompt_token_ids or ()) + sum(len(c.token_ids) for c in o.outputs[:1])
                                  for o in outputs)
        except Exception as exc:  # an OOM here is the finding verify exists for
            entry["error"] = exception_line(exc, 400)
        try:
            entry["ranks"] = llm.collective_rpc("kvaudit_verify_end")
        except Exception as exc:
            dead = f"the engine did not answer after {load.name.value} ({exception_line(exc, 400)})"
            entry["error"] = entry["error"] or dead
        entry["seconds"] = round(time.perf_counter() - start, 3)
        on_update({"scenarios": out, "error": None, "warnings": warnings})
    return {"scenarios": out, "error": None, "warnings": warnings}


