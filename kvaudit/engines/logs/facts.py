"""The catalogue: each memory-related vLLM log message → typed facts.

One `Rule` per message family of docs/vllm-startup.md §5, each with the vLLM
file and function that prints it, a substring guard (cheap, checked before the regex) and the
ERE the benchmark hands to `grep -cE`. A rule sees only the message (the part after the logger
prefix); who printed it and where is added by the caller.

Numbers: vLLM prints GiB with `format_gib` = `round(b / 2**30, 2)` (vllm/utils/mem_utils.py),
so `gib_to_bytes` gives the bytes the figure stands for; some lines use `%.2f` or `round(, 2)`,
which is the same. Figures can be negative (an over-committed budget), so the patterns accept a
sign. Digit runs are bounded: `int()` refuses strings past 4300 digits, and garbage must not
become a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kvaudit.config import SIZE_KEYS
from kvaudit.engines.failures import (
    BARE,
    CAUSES,
    CPU_KV_SHORT,
    LOG_MESSAGE_CHARS,
    TRACEBACK,
    WORKER_RERAISE,
    cause_of,
    error_text,
)
from kvaudit.engines.logs.knobs import NAMESPACE
from kvaudit.engines.logs.lines import KV_BLOCK_DEVICES, person_heading
from kvaudit.schema import COMPILE_HIT, COMPILE_MISS, FailureKind, Phase
from kvaudit.serve_config import human_readable_int
from kvaudit.units import INT64_MAX, LOG_FLOAT_LIMIT, MiB, gib_to_bytes

NUM = r"\d{1,12}(?:\.\d{1,12})?"
SNUM = r"-?" + NUM
INT = r"\d{1,12}"
CINT = r"\d{1,3}(?:[,.'_ ]\d{3}){1,4}(?!\d)|\d{1,12}"
"""An integer, with thousands separators in either style: `1,205,440` (`f"{n:,}"` in
kv_cache_utils.py), `1.205.440`, `1 205 440` (a non-breaking space is a space by now), `1'205'440`."""
_SEPARATORS = str.maketrans("", "", ",.'_ ")



class FactKind(StrEnum):
    # Per rank (attributed to the process that printed them).
    WEIGHTS = "weights"
    LOAD_SECONDS = "load_seconds"
    KV_AVAILABLE = "kv_available"
    KV_IN_USE = "kv_in_use"
    KV_FIXED = "kv_fixed"
    GRAPH_CAPTURE = "graph_capture"
    GRAPH_ACTUAL = "graph_actual"
    GRAPH_ESTIMATE = "graph_estimate"
    GRAPH_RETAINED = "graph_retained"
    GRAPH_PER_SIZE = "graph_per_size"
    ADVISORY = "advisory"
    ADVISORY_DISABLED = "advisory_disabled"
    CONSUMED = "consumed"
    PEAK_WITH_GRAPHS = "peak_with_graphs"
    PEAK = "peak"
    NON_TORCH = "non_torch"
    GRAPH_USAGE = "graph_usage"
    DEVICE_TOTAL = "device_total"
    FREE_AT_START = "free_at_start"
    REQUESTED = "requested"
    PROFILE_SECONDS = "profile_seconds"
    TORCH_PEAK_INCREASE = "torch_peak_increase"
    NON_KV_TOTAL = "non_kv_total"
    B12X_TRANSIENT = "b12x_transient"
    NON_KV_RSS = "non_kv_rss"
    KV_SUGGESTION = "kv_suggestion"
    KV_BLOCKS = "kv_blocks"
    TORCH_PEAK_TOTAL = "torch_peak_total"
    """V0 0.6.4–0.6.5's `peak_torch_memory`: torch's allocated peak in the profile pass, the weights
    included (its KV is the budget less it and non_torch_memory): activation_peak is it less the weights."""
    # Engine level (printed once, or about the whole boot).
    GMU = "gmu"
    KV_TOKENS = "kv_tokens"
    MAX_CONCURRENCY = "max_concurrency"
    FAILURE = "failure"
    CHECKED_MODEL_LEN = "checked_model_len"
    KV_NEEDED = "kv_needed"
    KV_AVAILABLE_AT_CHECK = "kv_available_at_check"
    MAX_FEASIBLE_LEN = "max_feasible_len"
    AUTOFIT = "autofit"
    AUTOFIT_KV = "autofit_kv"
    """The KV memory auto-fit sized max_model_len against: the least of any worker's (its limiting
    worker's), naming no rank."""
    NON_DEFAULT_ARGS = "non_default_args"
    ENGINE_CONFIG = "engine_config"
    VERSION = "version"
    PLATFORM = "platform"
    BATCHED_TOKENS = "batched_tokens"
    """config/scheduler.py's "Chunked prefill is enabled with max_num_batched_tokens=N.": the resolved value."""
    CHUNKED_DISABLED = "chunked_disabled"
    """A config-time line that turns chunked prefill off after the scheduler's line said it was on
    (config.py: `Only "last" pooling supports chunked prefill and prefix caching; disabling both.`)."""
    MODEL_LOADING = "model_loading"
    """The model a worker starts to load (`Starting to load model M...`) or the logo banner names (`█  model   M`):
    the model where no config line or command names it."""
    LOGGED_MAX_MODEL_LEN = "logged_max_model_len"
    """config/model.py's `Using max model len N`: the length vLLM resolved (the target model's is the first)."""
    SET_BLOCK_SIZE = "set_block_size"
    """The platform's `Setting attention block size to N tokens …`: the block size it set (hybrid and
    quantized-KV pages, XPU), over what the user typed."""
    IMAGE_VERSION = "image_version"
    """The release in vLLM's container image tag (`vllm/vllm-openai:v0.31.0-ubuntu2404`) a paste names: the
    version where no banner or engine line states one."""
    MODEL_RUNNER = "model_runner"
    GENERATION = "generation"
    ATTENTION_BACKEND = "attention_backend"
    ENV = "env"
    NOTE = "note"
    PHASE_HINT = "phase_hint"
    PHASE_FLOOR = "phase_floor"
    """A traceback frame that places the failure no earlier than its phase (KV_SETUP_CALL)."""
    """A phase a failing call names: a traceback frame or `Error executing method 'load_model'`."""
    EAGER = "eager"
    """config/vllm.py's info "Cudagraph is disabled under eager mode": enforce_eager was set."""
    MTP_DRAFTER = "mtp_drafter"
    """The proposer's info "Detected MTP model. Sharing target model … weights with the draft model.": the boot
    loaded an MTP drafter (speculative decoding by MTP)."""
    WARMUP_FRAME = "warmup_frame"
    """A traceback frame of a startup call after KV sizing, or of the sampler run (WARMUP_CALLS): the call's name
    (failure_timeline: the sampler run's phase, and the step a death after KV sizing names)."""
    GRAPH_CAPTURE_FRAME = "graph_capture_frame"
    """A traceback frame in torch's CUDA graph capture (GRAPH_CAPTURE_CALLS): Phase.CAPTURE, unless the
    log places the failure elsewhere (failure_timeline.log_failure)."""
    RAY_FOLDED = "ray_folded"
    """Ray's `[repeated Nx across cluster]`: N more workers printed a line of this shape."""
    COMMAND_ARG = "command_arg"
    COMMAND_ENV = "command_env"
    """A pasted command line's own VLLM_* assignments before its program (none: an empty tuple), one per line that
    holds a command with a flag or a model: which lines set a variable, where two commands were pasted."""
    """(flag, value) from a pasted command line: `--tensor-parallel-size 8`, `-tp=8`."""
    PARALLEL_RANKS = "parallel_ranks"
    """(world size, {"dp": rank, "pp": rank, "pcp": rank, "tp": rank}, global rank) from parallel_state.py's
    `rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 1, …`."""
    COMPILE_RANK = "compile_rank"
    """(rank within the DP engine, DP index) from the `rank_1_0` directory of a worker's own torch.compile cache path
    (`Using cache directory: …/rank_1_0/backbone for vLLM's torch.compile`, `saved AOT compiled function to
    …/rank_1_0/model`, `Directly load AOT compilation from path …/rank_1_0/model`)."""
    WORLD_RANK = "world_rank"
    """(world size, global rank) from parallel_state.py's init_distributed_environment line `world_size=4
    rank=3 local_rank=3 distributed_init_method=… backend=nccl`: the rank of a worker whose name states none."""
    CP_WORLD = "cp_world"
    """kv_cache_utils.py's `Multiplying the GPU KV cache size by the cp_world_size 4 (pcp_world_size 1 *
    dcp_world_size 4).`: (pcp, dcp), the context-parallel sizes the KV size in tokens was multiplied by."""
    PLATFORM_BLOCK_SIZE = "platform_block_size"
    """The block size a platform's fork uses where none is given (Gaudi's vllm-fork: 128), from the
    device word of its block count line (`# HPU blocks: N`)."""
    KV_BLOCKS_TOTAL = "kv_blocks_total"
    """v1/metrics/loggers.py `num_gpu_blocks is: N`: the engine's blocks, summed over DP engines."""
    KV_MEASURED = "kv_measured"
    """(blocks, bytes): the KV cache a rank measured room for after warmup and graph capture (0.34's
    extensible KV cache, `Memory after warmup: … N KV cache blocks (S GiB) fit …`)."""
    KV_EXTENDED = "kv_extended"
    """(blocks, bytes): the extensible KV cache a rank committed in the end (`Extended KV cache to
    N blocks (X GiB).`): the cache it serves with, the minimum over ranks."""
    COMPILE = "compile"
    """A graph of the model compiled in the boot (COMPILE_MISS) or loaded from vLLM's compile cache (COMPILE_HIT)."""
    KV_KEPT_TRANSIENT = "kv_kept_transient"
    """Bytes the extensible KV cache's sizing kept free for transient activations (`Memory after
    warmup`: the larger of the warmup's allocated peak and torch's reservation growth)."""


RANK_KINDS = frozenset({
    FactKind.WEIGHTS, FactKind.LOAD_SECONDS, FactKind.KV_AVAILABLE, FactKind.KV_IN_USE, FactKind.KV_FIXED,
    FactKind.GRAPH_CAPTURE, FactKind.GRAPH_ACTUAL, FactKind.GRAPH_ESTIMATE, FactKind.GRAPH_RETAINED,
    FactKind.GRAPH_PER_SIZE, FactKind.ADVISORY, FactKind.ADVISORY_DISABLED, FactKind.CONSUMED,
    FactKind.PEAK_WITH_GRAPHS, FactKind.PEAK, FactKind.NON_TORCH, FactKind.GRAPH_USAGE, FactKind.DEVICE_TOTAL,
    FactKind.FREE_AT_START, FactKind.REQUESTED, FactKind.PROFILE_SECONDS, FactKind.TORCH_PEAK_INCREASE,
    FactKind.NON_KV_TOTAL, FactKind.B12X_TRANSIENT, FactKind.NON_KV_RSS, FactKind.KV_SUGGESTION, FactKind.KV_BLOCKS,
    FactKind.KV_MEASURED, FactKind.KV_EXTENDED, FactKind.KV_KEPT_TRANSIENT, FactKind.TORCH_PEAK_TOTAL,
    FactKind.COMPILE,
})
"""Facts that belong to the rank whose process printed them; the rest describe the boot."""


@dataclass(frozen=True)
class Fact:
    kind: FactKind
    value: Any
    """Bytes (int) for sizes, seconds (float), or a small tuple / record named by the kind."""


@dataclass(frozen=True)
class GraphEstimate:
    bytes: int
    source: str
    """Which line it came from; the assembler prefers the most direct one."""


@dataclass(frozen=True)
class FailureFact:
    kind: FailureKind
    phase: Phase | None
    """Fixed by the message (the KV check is always phase kv); None: where the boot was."""
    message: str
    rank: int | None = None
    """Rarely known from the message itself."""
    priority: int = 0
    """0 names a memory cause, 1 a crash with a cause, 2 a generic "initialization failed"."""
    echo: bool = False
    """The raise's source line a traceback echoes: an exception line of the same priority, if the
    log shows one, says it better (failure_timeline orders it after them)."""
    needs_death: bool = False
    """Its cause's (failures.Cause.needs_death): the boot's failure only beside a sign that it died."""
    launcher: bool = False
    """Its cause's (failures.Cause.launcher): a launcher stopped the whole boot, no rank."""


def _gib(text: str) -> int:
    return gib_to_bytes(text)


def _mib(text: str) -> int:
    return round(float(text) * MiB)


def _int(text: str) -> int:
    return int(text.translate(_SEPARATORS))


@dataclass(frozen=True)
class Rule:
    name: str
    guard: str | tuple[str, ...]
    """A substring every matching message contains (checked first: most lines have none)."""
    grep: str
    """The same anchor as a POSIX ERE, for the benchmark's `grep -cE`."""
    facts: Callable[[str], Iterable[Fact]]

    def applies(self, msg: str) -> bool:
        guard = self.guard
        return guard in msg if isinstance(guard, str) else any(g in msg for g in guard)


COMMAND_KINDS = (FactKind.COMMAND_ARG, FactKind.COMMAND_ENV)
"""What a pasted command states (its flags, its model, the variables it sets): no fact of a boot's own lines."""

# --------------------------------------------------------------------------------------------
# Weights (§5.2)

LOADED_WEIGHTS = ("Model loading took", "Loading model weights took")
"""The line a worker's weight load ends with: V1's (and V2's) `Model loading took`, V0's (and vllm-ascend's)
`Loading model weights took`."""

# V1 gpu_model_runner.py load_model: info_once "Model loading took %s GiB memory and %.6f seconds"
# (rank 0 only); V2 gpu/model_runner.py: the same, per worker; U/N V2 and V0 said "… GiB and …".
# Pastes and notes drop the time often (`Model loading took 81.8 GiB memory`: real pastes round seventeen).
_LOAD = re.compile(rf"Model loading took ({SNUM}) (?:GiB|GB)(?: memory)?(?: and ({NUM}) seconds)?")
# V0 worker/model_runner.py: "Loading model weights took 2.3463 GB" (GB meant GiB there); 0.3
# printed MiB as "MB" (`model_memory_usage / float(2**20)`: "Loading model weights took 244.61 MB").
_LOAD_V0 = re.compile(rf"Loading model weights took ({SNUM}) (GB|MB)\b")
# Gaudi (HabanaAI/vllm-fork hpu_model_runner.py load_model): "Loading model weights took in total
# 7.481 GiB of device memory (7.486 GiB/94.62 GiB used) and …"; its "Pre-loading model weights on
# hpu:0 took …" has the same summary. The device total follows the slash.
_LOAD_HPU = re.compile(rf"(?:Loading model weights took in total|Pre-loading model weights on \S{{1,20}} took) "
                       rf"({SNUM}) ?GiB of device memory \(({SNUM}) ?GiB/({SNUM}) ?GiB used\)")


def _load(msg: str) -> Iterable[Fact]:
    if m := _LOAD.search(msg):
        yield Fact(FactKind.WEIGHTS, _gib(m.group(1)))
        if m.group(2) is not None:
            yield Fact(FactKind.LOAD_SECONDS, float(m.group(2)))
    elif m := _LOAD_HPU.search(msg):
        yield Fact(FactKind.WEIGHTS, _gib(m.group(1)))
        yield Fact(FactKind.DEVICE_TOTAL, _gib(m.group(3)))
    elif m := _LOAD_V0.search(msg):
        yield Fact(FactKind.WEIGHTS, _gib(m.group(1)) if m.group(2) == "GB" else _mib(m.group(1)))


# --------------------------------------------------------------------------------------------
# KV sizing (§5.2, §5.4)

# gpu_worker.py determine_available_memory: info_once "Available KV cache memory: %s GiB".
_AVAILABLE = re.compile(rf"Available KV cache memory: ({SNUM}) GiB")
# gpu_worker.py, kv_cache_memory_bytes set: profiling skipped, KV fixed by the user.
_FIXED = re.compile(rf"Initial free memory ({SNUM}) GiB, reserved ({SNUM}) GiB memory for KV Cache as specified "
                    r"by kv_cache_memory_bytes")


def _available(msg: str) -> Iterable[Fact]:
    if m := _AVAILABLE.search(msg):
        yield Fact(FactKind.KV_AVAILABLE, _gib(m.group(1)))
    if m := _FIXED.search(msg):
        yield Fact(FactKind.FREE_AT_START, _gib(m.group(1)))
        yield Fact(FactKind.KV_FIXED, _gib(m.group(2)))
        yield Fact(FactKind.NOTE, "the KV cache size was fixed by kv_cache_memory_bytes: vLLM skipped memory "
                                  "profiling and did not respect gpu_memory_utilization")


# kv_cache_utils.py update_kv_cache_capacity: info_once "%s KV cache size: %s tokens, Maximum
# concurrency for %s tokens per request: %.2fx"; U and older printed the two halves as two lines.
_KV_SIZE = re.compile(rf"(?:([A-Z]{{2,6}}(?: \+ host)?) )?KV cache size: ({CINT}) tokens")
# Some builds print the second half without "per request".
_CONCURRENCY = re.compile(rf"Maximum concurrency for ({CINT}) tokens(?: per request)?: ({NUM})x")


def _kv_size(msg: str) -> Iterable[Fact]:
    if m := _KV_SIZE.search(msg):
        yield Fact(FactKind.KV_TOKENS, (m.group(1) or "GPU", _int(m.group(2))))


def concurrency(msg: str) -> Iterable[Fact]:
    """The concurrency half: on the KV size line (0.32) or the line after it (U and older)."""
    if m := _CONCURRENCY.search(msg):
        yield Fact(FactKind.MAX_CONCURRENCY, (_int(m.group(1)), float(m.group(2))))


# kv_cache_utils.py _auto_fit_max_model_len (0.33: kv_cache_planning.py); 0.34 kept the wording only
# for the extensible KV cache's tentative fit (`…; the final length is set after CUDA graph capture
# and warmup`) and otherwise says "--max-model-len auto reduced max_model_len from A to B (…)".
_AUTOFIT = re.compile(rf"(?:Auto-fit max_model_len: reduced|--max-model-len auto reduced max_model_len) from "
                      rf"({INT}) to ({INT})")
# The same function where the model's whole length fits: "Auto-fit max_model_len: full model context
# length %d fits in available KV cache memory (%s)", and 0.34's refit after warmup "Auto-fit
# max_model_len: using max_model_len=%d, which fits in the KV cache memory left after …".
_AUTOFIT_KEPT = re.compile(rf"Auto-fit max_model_len: (?:full model context length |using max_model_len=)({INT})"
                           rf",? (?:which )?fits in")
# Each wording names the limiting worker's KV memory: "(29.72 GiB available for KV cache)",
# "(29.72 GiB GPU available for the KV cache)", "(36.20 GiB)", "(… GiB … left for the KV cache after …)".
_AUTOFIT_KV = re.compile(rf"\(({SNUM}) GiB(?: GPU)?(?: \+ {SNUM} GiB host)?(?:\)| available for| left for)")


def _autofit(msg: str) -> Iterable[Fact]:
    if m := _AUTOFIT.search(msg):
        yield Fact(FactKind.AUTOFIT, (int(m.group(1)), int(m.group(2))))
        tentative = " (tentatively: the length is set again after graph capture and warmup)" \
            if "final length is set after" in msg else ""
        yield Fact(FactKind.NOTE, f"max_model_len was auto-fit: reduced from {m.group(1)} to {m.group(2)}{tentative}")
    elif m := _AUTOFIT_KEPT.search(msg):
        yield Fact(FactKind.AUTOFIT, (int(m.group(1)), int(m.group(1))))
    else:
        return
    if kv := _AUTOFIT_KV.search(msg, m.end()):
        yield Fact(FactKind.AUTOFIT_KV, _gib(kv.group(1)))


# vLLM 0.34's extensible KV cache (v1/worker/extensible_kv_cache.py): the cache's address range is
# reserved at "Available KV cache memory" (then a capacity, not the cache) and sized after warmup
# and graph capture. measure_kv_cache_blocks, per rank: "Memory after warmup: %s GiB free, %s GiB
# committed to the KV cache, %s GiB kept for transient activations (%s GiB allocated at peak, %s GiB
# of torch reservation growth); %d KV cache blocks (%s GiB) fit within the requested %s GiB. …";
# extend_kv_cache, per rank, with the engine's minimum over ranks: "Extended KV cache to %d blocks
# (%.2f GiB)." (physical bytes).
_MEASURED = re.compile(rf"Memory after warmup: ({NUM}) GiB free, ({NUM}) GiB committed to the KV cache, ({NUM}) GiB "
                       rf"kept for transient activations \([^)]{{0,200}}\); ({CINT}) KV cache blocks \(({NUM}) GiB\) "
                       rf"fit within the requested ({NUM}) GiB")
_EXTENDED = re.compile(rf"Extended KV cache to ({CINT}) blocks \(({NUM}) GiB\)")
# extensible_kv_cache.py measure_kv_cache_blocks, once: an explicit GMU in (0.7, 1) that withholds ≥ 1 GiB.
_CAPPED = re.compile(rf"gpu_memory_utilization=({NUM}) caps this instance at ({NUM}) GiB, keeping ({NUM}) GiB of "
                     rf"free device memory out of the KV cache")


def _extensible(msg: str) -> Iterable[Fact]:
    if m := _MEASURED.search(msg):
        yield Fact(FactKind.KV_MEASURED, (_int(m.group(4)), _gib(m.group(5))))
        yield Fact(FactKind.KV_KEPT_TRANSIENT, _gib(m.group(3)))
        yield Fact(FactKind.REQUESTED, _gib(m.group(6)))
    if m := _EXTENDED.search(msg):
        yield Fact(FactKind.KV_EXTENDED, (_int(m.group(1)), _gib(m.group(2))))
    if m := _CAPPED.search(msg):
        yield Fact(FactKind.NOTE, f"gpu_memory_utilization {m.group(1)} capped the extensible KV cache at "
                                  f"{m.group(2)} GiB and kept {m.group(3)} GiB of free memory out of it "
                                  f"(vLLM's warning)")


# --------------------------------------------------------------------------------------------
# Graph memory (§5.3, §5.6)

# V1 gpu_model_runner.py capture_model: info_once (rank 0); V2 gpu/model_runner.py: per worker,
# printed twice (the profiling capture, then the real one).
_CAPTURE = re.compile(rf"Graph capturing finished in ({NUM}) secs?, took ({SNUM}) GiB")
# gpu_worker.py compile_or_warm_up_model, per worker, only when the estimate is > 0. The unmerged
# wording "(actual: X GiB captured + Y GiB retained by profiling)" (docs/vllm-startup.md §5.6)
# has the same shape, and so has vllm-ascend's worker.py ("[vllm-ascend] - ACL graph pool memory: 0.44 GiB
# (actual), 0.59 GiB (estimated), difference: …"; real pastes round nineteen, vllm-ascend#10700).
_POOL = re.compile(rf"(?:CUDA|ACL) graph pool memory: ({SNUM}) GiB \(actual[^)]{{0,200}}\), ({SNUM}) GiB \(estimated\)")
# V1 gpu_model_runner.py profile_cudagraph_memory: "Estimated CUDA graph memory: %.2f GiB total" (a
# person retyping it may drop the `total`: vllm#44740).
_ESTIMATE = re.compile(rf"Estimated CUDA graph memory: ({SNUM}) GiB(?: total|$)")
# Fork v20 [model_runner.py:953]: "X GiB additional (Y GiB captured, Z GiB retained and counted as
# non-torch)". The pool holds the full Y (graph pools live in torch-reserved memory, never in
# non-torch), so Y is the estimate and Z is only recorded (docs/vllm-startup.md §3.3).
_MRV2_ADDITIONAL = re.compile(rf"Estimated MRV2 CUDA graph memory: ({SNUM}) ?GiB additional \(({SNUM}) ?GiB captured,? "
                              rf"({SNUM}) ?GiB retained")
# Fork dev/gilded-gnosis: "X GiB total (Z GiB retained in the reusable pool)": X is already gross.
_MRV2_TOTAL = re.compile(rf"Estimated MRV2 CUDA graph memory: ({SNUM}) ?GiB total \(({SNUM}) ?GiB retained")


def _graphs(msg: str) -> Iterable[Fact]:
    if m := _CAPTURE.search(msg):
        yield Fact(FactKind.GRAPH_CAPTURE, (float(m.group(1)), _gib(m.group(2))))
    if m := _POOL.search(msg):
        yield Fact(FactKind.GRAPH_ACTUAL, _gib(m.group(1)))
        yield Fact(FactKind.GRAPH_ESTIMATE, GraphEstimate(_gib(m.group(2)), "pool"))
    if m := _ESTIMATE.search(msg):
        yield Fact(FactKind.GRAPH_ESTIMATE, GraphEstimate(_gib(m.group(1)), "estimated"))
    if m := _MRV2_ADDITIONAL.search(msg):
        yield Fact(FactKind.GRAPH_ESTIMATE, GraphEstimate(_gib(m.group(2)), "mrv2"))
        yield Fact(FactKind.GRAPH_RETAINED, _gib(m.group(3)))
    elif m := _MRV2_TOTAL.search(msg):
        yield Fact(FactKind.GRAPH_ESTIMATE, GraphEstimate(_gib(m.group(1)), "mrv2"))
        yield Fact(FactKind.GRAPH_RETAINED, _gib(m.group(2)))


# V1 gpu_model_runner.py profile_cudagraph_memory, DEBUG per mode: "Estimated %s CUDA graph memory:
# %.2f MiB first-capture + (%d-1) × %.2f MiB per-graph". Each capture size is one graph per mode.
_PER_GRAPH = re.compile(rf"Estimated ([A-Z_]{{1,40}}) CUDA graph memory: ({NUM}) MiB first-capture \+ \(({INT})-1\) "
                        rf"\S{{1,3}} ({NUM}) MiB per-graph")


def _per_graph(msg: str) -> Iterable[Fact]:
    if m := _PER_GRAPH.search(msg):
        yield Fact(FactKind.GRAPH_PER_SIZE, (m.group(1), _mib(m.group(4))))


# gpu_worker.py determine_available_memory, per worker when the estimate is > 0:
# equivalent = round(util − est/total, 4); suggested = min(round(util + est/total, 4), 1.0).
# So est ≈ (current − equivalent) × total; the capped "suggested" figure is not the estimate.
_ADVISORY = re.compile(rf"The current --gpu-memory-utilization=({NUM}) is equivalent to --gpu-memory-utilization="
                       rf"({SNUM}) without CUDA graph memory profiling")
_ADVISORY_HEAD = re.compile(rf"The current --gpu-memory-utilization=({NUM}) is equivalent to ")
# With VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 the estimate is still profiled, not applied.
_ADVISORY_DISABLED = re.compile(r"CUDA graph memory profiling is disabled "
                                r"\(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0\)"
                                rf".{{0,400}}?increasing --gpu-memory-utilization from ({NUM}) to ({NUM})")


# gpu_worker.py before v0.19 made profiling the default: "In v0.19, CUDA graph memory profiling will
# be enabled by default (…). To try it now, set … and increase --gpu-memory-utilization from X to Y
# to maintain the same effective KV cache size."
_ADVISORY_FROM = re.compile(rf"increase --gpu-memory-utilization from ({NUM}) to ({NUM})")


def _advisory(msg: str) -> Iterable[Fact]:
    if "will be enabled by default" in msg and (m := _ADVISORY_FROM.search(msg)):
        yield Fact(FactKind.ADVISORY_DISABLED, (float(m.group(1)), float(m.group(2))))
        yield Fact(FactKind.GMU, float(m.group(1)))
    if m := _ADVISORY.search(msg):
        yield Fact(FactKind.ADVISORY, (float(m.group(1)), float(m.group(2))))
        yield Fact(FactKind.GMU, float(m.group(1)))
    elif m := _ADVISORY_HEAD.search(msg):
        # the advisory retold in a person's words ("… is equivalent to 0.8400 without CUDA graph …"):
        # its first figure is still the utilization the boot ran with; the estimate is not read from it.
        yield Fact(FactKind.GMU, float(m.group(1)))
    if "profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0)" in msg:
        yield Fact(FactKind.ENV, ("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "0"))
        if m := _ADVISORY_DISABLED.search(msg):
            yield Fact(FactKind.ADVISORY_DISABLED, (float(m.group(1)), float(m.group(2))))
            yield Fact(FactKind.GMU, float(m.group(1)))


# --------------------------------------------------------------------------------------------
# The "Actual usage" line and the startup budget (§5.3, §5.4)

# gpu_worker.py compile_or_warm_up_model (0.32 / N, docs/vllm-startup.md §2.1–2.2): consumed =
# weights + persistent torch + non-torch; peak = transient headroom + the applied graph estimate;
# graph = capture_model's return. U and older (DEBUG): weights, peak, non-torch, graph. NPU
# (docs/vllm-startup.md §5.6): "Actual usage: … for weights, …, … for NPU graph memory".
# Matched loosely: commas, "and", plurals and the graph's name changed between releases and forks.
_GRAPH_MEMORY = r"(?:the )?(?:CUDA ?[Gg]raphs?|NPU graph|[Gg]raph) memory"
_ACTUAL_NEW = re.compile(rf"Actual usage is ({SNUM}) ?GiB for consumed memory \(weights \+ non-torch\),? ({SNUM}) ?GiB "
                         rf"for peak activations?,?(?: and)? ({SNUM}) ?GiB for {_GRAPH_MEMORY}")
_ACTUAL_OLD = re.compile(rf"Actual usage(?: is|:) ({SNUM}) ?GiB for (?:the )?weights?,? ({SNUM}) ?GiB for peak "
                         rf"activations?,? ({SNUM}) ?GiB for non-torch memory,?(?: and)? ({SNUM}) ?GiB for "
                         rf"{_GRAPH_MEMORY}")
# 0.10 printed the KV in use in bytes ("… is 11423138508 bytes.") and the suggestions without the
# "(X GiB)" that 0.32 adds; NPU builds say "Replace gpu_memory_utilization with …". The first
# suggestion is the one "to fit into requested memory" in every wording (gpu_worker.py
# compile_or_warm_up_model: kv_cache_memory_bytes_to_requested_limit, then …_to_gpu_limit).
# vllm-ascend's worker.py: "… Current KV cache memory: 7.03 GiB." (vllm-ascend#13439).
_IN_USE = re.compile(rf"Current (?:kv cache memory in use is|KV cache memory:) ({SNUM}) ?(GiB|bytes)")
# A fork's MRv2 worker names the flag in full: "… with `--kv-cache-memory-bytes=8538253005` (7.95 GiB) …".
_SUGGESTION = re.compile(r"Replace gpu_memory_utilization (?:config )?with `--kv-cache-memory(?:-bytes)?=(-?\d{1,20})`")
# gpu_worker.py "Free memory on device ({free}/{total} GiB) on startup. Desired GPU memory
# utilization is ({util}, {requested} GiB)."; v1/worker/utils.py request_memory raises with
# "Free memory on device {device} (…) on startup is less than desired GPU memory utilization
# ({util}, {requested} GiB)" (older releases omit the device).
_FREE = re.compile(rf"Free memory on device (?:\S{{1,40}} )?\(({SNUM})/({SNUM}) GiB\) on startup")
_DESIRED = re.compile(rf"[Dd]esired GPU memory utilization (?:is )?\(({NUM}), ({SNUM}) GiB\)")
_ENGINE_BUDGET = re.compile(rf"engine's budget after excluding external process's weights \(({NUM}), ({SNUM}) GiB\)")
# gpu_worker.py, DEBUG per worker.
_INITIAL = re.compile(rf"Initial free memory: ({SNUM}) GiB; Requested memory: ({NUM}) \(util\), ({SNUM}) GiB")
_REQUESTED_DEBUG = re.compile(rf"worker requested memory: ({SNUM}) ?GiB")
# gpu_worker.py determine_available_memory, DEBUG per worker, 0.10 (vllm PR 21429): "Initial free
# memory: 139.12 GiB, free memory: 81.52 GiB, requested GPU memory: 69.86 GiB".
_INITIAL_010 = re.compile(rf"Initial free memory: ({SNUM}) ?GiB, free memory: {SNUM} ?GiB, "
                          rf"requested GPU memory: ({SNUM}) ?GiB")


def _actual(msg: str) -> Iterable[Fact]:
    if m := _ACTUAL_NEW.search(msg):
        yield Fact(FactKind.CONSUMED, _gib(m.group(1)))
        yield Fact(FactKind.PEAK_WITH_GRAPHS, _gib(m.group(2)))
        yield Fact(FactKind.GRAPH_USAGE, _gib(m.group(3)))
    elif m := _ACTUAL_OLD.search(msg):
        yield Fact(FactKind.WEIGHTS, _gib(m.group(1)))
        yield Fact(FactKind.PEAK, _gib(m.group(2)))
        yield Fact(FactKind.NON_TORCH, _gib(m.group(3)))
        yield Fact(FactKind.GRAPH_USAGE, _gib(m.group(4)))
    if m := _IN_USE.search(msg):
        yield Fact(FactKind.KV_IN_USE, _gib(m.group(1)) if m.group(2) == "GiB" else round(float(m.group(1))))
    if m := _SUGGESTION.search(msg):
        yield Fact(FactKind.KV_SUGGESTION, int(m.group(1)))


def _budget(msg: str) -> Iterable[Fact]:
    if m := _FREE.search(msg):
        yield Fact(FactKind.FREE_AT_START, _gib(m.group(1)))
        yield Fact(FactKind.DEVICE_TOTAL, _gib(m.group(2)))
    if m := _DESIRED.search(msg):
        yield Fact(FactKind.GMU, float(m.group(1)))
        yield Fact(FactKind.REQUESTED, _gib(m.group(2)))
    if m := _ENGINE_BUDGET.search(msg):
        yield Fact(FactKind.GMU, float(m.group(1)))
        yield Fact(FactKind.REQUESTED, _gib(m.group(2)))
    if m := _INITIAL.search(msg):
        yield Fact(FactKind.FREE_AT_START, _gib(m.group(1)))
        yield Fact(FactKind.GMU, float(m.group(2)))
        yield Fact(FactKind.REQUESTED, _gib(m.group(3)))
    if m := _REQUESTED_DEBUG.search(msg):
        yield Fact(FactKind.REQUESTED, _gib(m.group(1)))
    if m := _INITIAL_010.search(msg):
        yield Fact(FactKind.FREE_AT_START, _gib(m.group(1)))
        yield Fact(FactKind.REQUESTED, _gib(m.group(2)))


# utils/mem_utils.py MemoryProfilingResult.__repr__, DEBUG per worker (`logger.debug(profile_result)`):
# "Memory profiling takes {t:.2f} seconds. Total non KV cache memory: {g}GiB; torch peak memory
# increase: {g}GiB; total consumed (from mem_get_info): {g}GiB; weights memory: {g}GiB." (0.28–0.33;
# 0.33's memory_profiling: non_kv = total_consumed + transient_peak_headroom, so the transient
# peak, activation_peak, is their difference). Older V1 (U, 0.9–0.11) printed "non-torch forward
# increase memory" in the fourth place and non_kv = weights + torch peak increase + non-torch
# increase. vllm-ascend's NPU repr: "Total npu memory: {g} GiB; Total non KV cache memory: …;
# torch peak memory increase: …; non-torch forward increase memory: … GiB." Each field is read on
# its own, so their order and the space before GiB do not matter.
_PROFILE_FIELDS = (
    (FactKind.PROFILE_SECONDS, re.compile(rf"Memory profiling takes ({NUM}) seconds")),
    (FactKind.NON_KV_TOTAL, re.compile(rf"Total non KV cache memory: ({SNUM}) ?GiB")),
    (FactKind.TORCH_PEAK_INCREASE, re.compile(rf"torch peak memory increase: ({SNUM}) ?GiB")),
    (FactKind.CONSUMED, re.compile(rf"total consumed \(from mem_get_info\): ({SNUM}) ?GiB")),
    (FactKind.NON_TORCH, re.compile(rf"non-torch forward increase memory: ({SNUM}) ?GiB")),
    (FactKind.WEIGHTS, re.compile(rf"weights memory: ({SNUM}) ?GiB")),
    (FactKind.DEVICE_TOTAL, re.compile(rf"Total npu memory: ({SNUM}) ?GiB")),
)
# V0 worker.py determine_num_available_blocks printed a multi-line breakdown; each line stands alone.
_V0_TOTAL = re.compile(rf"total_gpu_memory \(({SNUM}) ?GiB\) x gpu_memory_utilization \(({NUM})\) = ({SNUM}) ?GiB")
# (its KV figure last: a paste that cut the line before it keeps the three before it, real pastes round
# twenty-two, Orpheus-TTS#115)
_V0_BREAKDOWN = re.compile(rf"model weights take ({SNUM}) ?GiB; non_torch_memory takes ({SNUM}) ?GiB; "
                           rf"PyTorch activation peak memory takes ({SNUM}) ?GiB"
                           rf"(?:; the rest of the memory reserved for KV Cache is ({SNUM}) ?GiB)?")


# V0 worker.py determine_num_available_blocks, 0.6.4: one line "Memory profiling results:
# total_gpu_memory=…GiB initial_memory_usage=…GiB peak_torch_memory=…GiB memory_usage_post_profile=…GiB
# non_torch_memory=…GiB kv_cache_size=…GiB gpu_memory_utilization=…"; 0.6.5 puts `duration=… seconds, `
# first and `, ` between the fields (vllm PR 10909).
_SEP = "(?:, ?| )"
# (0.6.4's worker.py printed `memory_usage_post_profile=%.2fGib`, its b lower-case: real pastes round
# twenty-two, vllm#12155, the whole line was dropped)
_V0_RESULTS = re.compile(rf"total_gpu_memory=({SNUM}) ?GiB{_SEP}initial_memory_usage=({SNUM}) ?GiB{_SEP}"
                         rf"peak_torch_memory=({SNUM}) ?GiB{_SEP}memory_usage_post_profile=({SNUM}) ?Gi[Bb]{_SEP}"
                         rf"non_torch_memory=({SNUM}) ?GiB{_SEP}"
                         rf"kv_cache_size=({SNUM}) ?GiB{_SEP}gpu_memory_utilization=({NUM})")
KV_BLOCK_WORDS = tuple(f" {device} blocks: " for device in KV_BLOCK_DEVICES)
"""The words after the `#` of that line, as the scan and the phase timeline look for them."""
_BLOCKS = re.compile(rf"(?:{'|'.join(KV_BLOCK_DEVICES)}) blocks: ({CINT})")
HPU_BLOCK_SIZE = 128
"""Gaudi's default block size (HabanaAI/vllm-fork and vllm-gaudi: 128 where vLLM's CUDA default is
16). Real pastes round sixteen: `# HPU blocks: 4107` beside `64.17 GiB reserved for KV cache` is 16 MiB
a block, 128 tokens of Llama-3.1-8B; read at 16, the tokens were 8× too few."""


def _profile(msg: str) -> Iterable[Fact]:
    if "total_gpu_memory=" in msg and (m := _V0_RESULTS.search(msg)):
        yield Fact(FactKind.DEVICE_TOTAL, _gib(m.group(1)))
        yield Fact(FactKind.TORCH_PEAK_TOTAL, _gib(m.group(3)))
        yield Fact(FactKind.NON_TORCH, _gib(m.group(5)))
        yield Fact(FactKind.KV_AVAILABLE, _gib(m.group(6)))
        yield Fact(FactKind.GMU, float(m.group(7)))
    if "blocks: " in msg and (m := _BLOCKS.search(msg)):
        blocks = _int(m.group(1))
        yield Fact(FactKind.KV_BLOCKS, blocks)
        if m.group(0)[:3].upper() == "HPU":
            yield Fact(FactKind.PLATFORM_BLOCK_SIZE, HPU_BLOCK_SIZE)
        if blocks == 0:
            # Not one block: no byte for KV. V0 raises "No available memory for the cache blocks"
            # next (llm_engine.py _initialize_kv_caches / worker raise_if_cache_size_invalid), which a
            # paste often cuts off: the count alone says the boot does not fit.
            yield Fact(FactKind.KV_AVAILABLE, 0)
            yield Fact(FactKind.MAX_FEASIBLE_LEN, 0)
            yield Fact(FactKind.FAILURE, FailureFact(
                FailureKind.DOES_NOT_FIT, Phase.KV, "# GPU blocks: 0: no memory is left for the KV cache (vLLM stops "
                "with \"No available memory for the cache blocks\")"))
    if "Total non KV cache memory" in msg:
        yield from _profile_fields(msg)
    if m := _V0_TOTAL.search(msg):
        yield Fact(FactKind.DEVICE_TOTAL, _gib(m.group(1)))
        yield Fact(FactKind.GMU, float(m.group(2)))
        yield Fact(FactKind.REQUESTED, _gib(m.group(3)))
    if m := _V0_BREAKDOWN.search(msg):
        yield Fact(FactKind.WEIGHTS, _gib(m.group(1)))
        yield Fact(FactKind.NON_TORCH, _gib(m.group(2)))
        yield Fact(FactKind.PEAK, _gib(m.group(3)))
        if m.group(4) is not None:
            yield Fact(FactKind.KV_AVAILABLE, _gib(m.group(4)))


def _profile_fields(msg: str) -> Iterable[Fact]:
    found: dict[FactKind, int | float] = {}
    for kind, rx in _PROFILE_FIELDS:
        if m := rx.search(msg):
            found[kind] = float(m.group(1)) if kind is FactKind.PROFILE_SECONDS else _gib(m.group(1))
            yield Fact(kind, found[kind])
    non_kv, consumed = found.get(FactKind.NON_KV_TOTAL), found.get(FactKind.CONSUMED)
    if consumed is not None and non_kv is not None and non_kv >= consumed:
        yield Fact(FactKind.PEAK, int(non_kv) - int(consumed))  # transient_peak_headroom
    elif FactKind.NON_TORCH in found and (peak := found.get(FactKind.TORCH_PEAK_INCREASE)) is not None:
        yield Fact(FactKind.PEAK, peak)  # the older accounting: the torch peak increase is the activation peak


# "Memory profiling results:" as a table, one field a line (V0 worker.py, 0.6.5, vllm#10511):
#     Memory profiling results:
#     total_gpu_memory     79.22GiB
#     the current vLLM instance can use    71.29GiB
#     model weights take   14.96GiB
#     non_torch_memory     1.79GiB
#     PyTorch activation peak memory       1.26GiB
#     available_kv_cache_memory    53.29GiB
# (tab-separated in the log). Each line is read on its own, anchored at the message's start.
_TABLE_FIELDS = (
    (FactKind.DEVICE_TOTAL, re.compile(rf"total_gpu_memory\s+({SNUM}) ?GiB\s*$")),
    (FactKind.REQUESTED, re.compile(rf"the current vLLM instance can use\s+({SNUM}) ?GiB\s*$")),
    (FactKind.WEIGHTS, re.compile(rf"model weights take\s+({SNUM}) ?GiB\s*$")),
    (FactKind.NON_TORCH, re.compile(rf"non_torch_memory\s+({SNUM}) ?GiB\s*$")),
    (FactKind.PEAK, re.compile(rf"PyTorch activation peak memory\s+({SNUM}) ?GiB\s*$")),
    (FactKind.KV_AVAILABLE, re.compile(rf"available_kv_cache_memory\s+({SNUM}) ?GiB\s*$")),
)
_TABLE_GMU = re.compile(rf"gpu_memory_utilization\s+({NUM})\s*$")


def _profile_table(msg: str) -> Iterable[Fact]:
    for kind, rx in _TABLE_FIELDS:
        if m := rx.match(msg):
            yield Fact(kind, _gib(m.group(1)))
    if m := _TABLE_GMU.match(msg):
        yield Fact(FactKind.GMU, float(m.group(1)))


def _figures(*lines: tuple[re.Pattern[str], tuple[tuple[FactKind, Callable[[str], int | float]], ...]]
             ) -> Callable[[str], Iterable[Fact]]:
    """A rule's reader for lines that each state their figures in groups, in order: for each
    (pattern, ((kind, unit), …)) whose pattern the message holds, group N is read by the Nth unit."""
    def read(msg: str) -> Iterable[Fact]:
        for rx, fields in lines:
            if m := rx.search(msg):
                yield from (Fact(kind, unit(m.group(n))) for n, (kind, unit) in enumerate(fields, 1))
    return read


# vllm-ascend worker.py determine_available_memory (NPU): "Available memory: {bytes}, total memory:
# {bytes}" (f-string of two ints).
_NPU_AVAILABLE = re.compile(r"Available memory: (\d{1,20}), total memory: (\d{1,20})")
_npu = _figures((_NPU_AVAILABLE, ((FactKind.KV_AVAILABLE, int), (FactKind.DEVICE_TOTAL, int))))

# tpu-inference's TPUWorker.determine_available_memory (vLLM on TPU, real pastes round sixteen):
# "Memory statistics | total_hbm_limit_gb=94.75GiB | total_hbm_limit_cap_gb=80.53GiB |
# total_hbm_used_gb=16.58GiB | total_hbm_avail_gb=63.95GiB": the worker's chips' HBM, summed: the
# limit, the limit × gpu_memory_utilization (the request), what is in use before KV (the weights and
# the rest), and what is left of the request for KV.
# Each field is read on its own: newer releases add others (`kv_connector_hbm_reserve_gb=…`).
TPU_HBM_LINE = "total_hbm_limit_gb="
_tpu_statistics = _figures(*((re.compile(rf"\btotal_hbm_{key}_gb=({SNUM}) ?GiB"), ((kind, _gib),)) for key, kind in (
    ("limit", FactKind.DEVICE_TOTAL), ("limit_cap", FactKind.REQUESTED), ("used", FactKind.NON_KV_TOTAL),
    ("avail", FactKind.KV_AVAILABLE))))
# The same worker when nothing is left for KV (failures.py: does_not_fit): "ValueError: total_hbm_used_gb=647.4GiB
# exceeds total_hbm_limit_gb=606.37GiB by 41.02GiB." The figure after "exceeds" is the request, the limit × gmu,
# in every wording (tpu-inference PR 763 renamed it total_hbm_limit_cap_gb: 606.37 = 0.8 × 8 v5p chips' 94.75 GiB).
TPU_EXCEEDS_LINE = "exceeds total_hbm_limit"
_TPU_EXCEEDS = re.compile(rf"\btotal_hbm_used_gb=({NUM}) ?GiB exceeds total_hbm_limit(?:_cap)?_gb=({NUM}) ?GiB")


def _tpu(msg: str) -> Iterable[Fact]:
    if (m := _TPU_EXCEEDS.search(msg)) is None:
        yield from _tpu_statistics(msg)
        return
    yield Fact(FactKind.NON_KV_TOTAL, _gib(m.group(1)))
    yield Fact(FactKind.REQUESTED, _gib(m.group(2)))

# xpu_worker.py (Intel XPU, vLLM ~0.11; real pastes round sixteen): "Before memory profiling run, total
# GPU memory: 65520.00 MB, model load takes 12870.74 MB, free gpu memory is 52435.44 MB." and "After
# memory profiling run, peak memory usage is 13552.69 MB,torch mem is 12870.74 MB, non-torch mem is
# 426.94 MB, free gpu memory is 51896.32 MB." Its MB are MiB (bytes / 2**20: the load's 12870.74 is
# the 12.55 GiB `Model loading took` states, with what loading left besides the weights). Its peak is
# torch's allocated peak, the weights included, plus the non-torch memory where that is above 0
# (xpu_worker.py: `peak_memory += non_torch_allocations`): torch's peak is the difference.
XPU_PROFILE_LINE = "memory profiling run, "
_XPU_BEFORE = re.compile(rf"Before memory profiling run, total GPU memory: ({NUM}) MB")
_XPU_AFTER = re.compile(rf"After memory profiling run, peak memory usage is ({NUM}) MB, ?torch mem is {NUM} MB, "
                        rf"non-torch mem is ({SNUM}) MB")


def _xpu(msg: str) -> Iterable[Fact]:
    yield from _figures((_XPU_BEFORE, ((FactKind.DEVICE_TOTAL, _mib),)))(msg)
    if m := _XPU_AFTER.search(msg):
        peak, non_torch = _mib(m.group(1)), _mib(m.group(2))
        yield Fact(FactKind.TORCH_PEAK_TOTAL, peak - max(non_torch, 0))
        yield Fact(FactKind.NON_TORCH, non_torch)

# HabanaAI/vllm-fork's habana_worker.py (Gaudi, V0): "Free device memory: 79.22 GiB, 71.3 GiB usable
# (gpu_memory_utilization=0.9), 7.13 GiB reserved for HPUGraphs (VLLM_GRAPH_RESERVED_MEM=0.1), 64.17
# GiB reserved for KV cache": the free memory after the profile, that × utilization, the graphs'
# share of it and the rest, the KV cache (real pastes round sixteen). Its utilization is a share of
# the free memory, not of the device as vLLM's is: it is not read as the config's (the review).
_hpu = _figures((re.compile(rf"Free device memory: {SNUM} ?GiB, {SNUM} ?GiB usable \(gpu_memory_utilization={NUM}\)"
                            rf".{{0,200}}?({SNUM}) ?GiB reserved for KV cache"),
                 ((FactKind.KV_AVAILABLE, _gib),)))


# v1/metrics/loggers.py log_engine_initialized, the API server once the engines are up: "Engine %03d:
# vllm cache_config_info with initialization after num_gpu_blocks is: %d" (core_client.py sums
# num_gpu_blocks over the data-parallel engines).
_NUM_GPU_BLOCKS = re.compile(rf"num_gpu_blocks is: ({CINT})")


def _num_gpu_blocks(msg: str) -> Iterable[Fact]:
    if m := _NUM_GPU_BLOCKS.search(msg):
        yield Fact(FactKind.KV_BLOCKS_TOTAL, _int(m.group(1)))


# Fork [mla_attention.py:1047], VLLM_MEMORY_PROFILE_INCLUDE_ATTN=1: part of the profile peak.
_B12X = re.compile(rf"Including ({NUM}) MiB of B12X sparse DCP transient memory in the profile peak")


def _b12x(msg: str) -> Iterable[Fact]:
    if m := _B12X.search(msg):
        yield Fact(FactKind.B12X_TRANSIENT, _mib(m.group(1)))


# --------------------------------------------------------------------------------------------
# CPU backend (§5.5): cpu_worker.py determine_available_memory, per worker. RSS-based:
# kv = requested − RSS; "node total" plays the device total.
_CPU_AUTO = re.compile(rf"Auto set \(({SNUM})/({SNUM})\) GiB for KV cache on node ({INT})"
                       rf"(?:, with ({SNUM}) GiB requested memory for the worker\. "
                       rf"({SNUM}) GiB memory was consumed by non-kv usages)?")
_CPU_EXPLICIT = re.compile(rf"Explicitly set \(({SNUM})/({SNUM})\) GiB for KV cache on node ({INT})")


def _cpu(msg: str) -> Iterable[Fact]:
    if m := _CPU_AUTO.search(msg):
        yield Fact(FactKind.KV_AVAILABLE, _gib(m.group(1)))
        yield Fact(FactKind.DEVICE_TOTAL, _gib(m.group(2)))
        if m.group(4) is not None:
            yield Fact(FactKind.REQUESTED, _gib(m.group(4)))
            yield Fact(FactKind.NON_KV_RSS, _gib(m.group(5)))
    elif m := _CPU_EXPLICIT.search(msg):
        yield Fact(FactKind.KV_FIXED, _gib(m.group(1)))
        yield Fact(FactKind.DEVICE_TOTAL, _gib(m.group(2)))
        yield Fact(FactKind.NOTE, "the KV cache size was fixed explicitly (kv_cache_memory_bytes or "
                                  "VLLM_CPU_KVCACHE_SPACE): gpu_memory_utilization was not used for it")


# --------------------------------------------------------------------------------------------
# Failures (§5.3, §5.4, §5.5)

# kv_cache_utils.py _check_enough_kv_cache_memory (0.32): "To serve at least one request with the
# model's max seq len (N), (X GiB KV cache is needed, which is larger than the available KV cache
# memory (Y GiB)"; 0.8.x said "models's" and GB; the fork drops the stray "(" before X. A paste cut
# after the needed size (vllm#53961: `… 23.32 GiB KV cache is needed, which is larger t`) still
# states the length and what it needs; the available memory is then not known from this line.
_TO_SERVE = re.compile(rf"max seq len \(({CINT})\),? \(?({SNUM}) ?(?:GiB|GB) (?:of )?KV cache (?:is )?needed"
                       rf"(?:,? which is larger than the available KV cache memory \(?({SNUM}) ?(?:GiB|GB))?")
_ESTIMATED_LEN = re.compile(rf"the estimated maximum model length is ({CINT})")
# V0 (and V1 before 0.8) llm_engine / worker raise_if_cache_size_invalid: "The model's max seq len
# (N) is larger than the maximum number of tokens that can be stored in KV cache (M)."
_V0_TOO_LONG = re.compile(rf"max seq len \(({CINT})\) is larger than the maximum number of tokens that can be "
                          rf"stored in KV cache \(({CINT})\)")
_V0_TOO_LONG_HEAD = re.compile(rf"max seq len \(({CINT})\) is larger than the maximum number of tokens that can be")
# v1/worker/utils.py request_memory and cpu_worker.py __init__ / determine_available_memory.
_NODE = rf"Available memory on node ({INT}) \(({SNUM})/({SNUM}) GiB\)"
_CPU_STARTUP = re.compile(rf"{_NODE} on startup is less than desired CPU memory utilization \(({NUM}), ({SNUM}) GiB\)")
_CPU_KV_ALLOC = re.compile(rf"{_NODE} on kv cache allocation is less than requested memory for kv "
                           rf"\(({SNUM})(?:/({SNUM}))? GiB\)")




def _kv_check(msg: str) -> Iterable[Fact]:
    if "To serve at least one request" in msg and (m := _TO_SERVE.search(msg)):
        yield Fact(FactKind.CHECKED_MODEL_LEN, _int(m.group(1)))
        yield Fact(FactKind.KV_NEEDED, _gib(m.group(2)))
        if m.group(3) is not None:
            yield Fact(FactKind.KV_AVAILABLE_AT_CHECK, _gib(m.group(3)))
        if e := _ESTIMATED_LEN.search(msg):
            yield Fact(FactKind.MAX_FEASIBLE_LEN, _int(e.group(1)))
    if "stored in KV cache" in msg and (m := _V0_TOO_LONG.search(msg)):
        yield Fact(FactKind.CHECKED_MODEL_LEN, _int(m.group(1)))
        yield Fact(FactKind.KV_TOKENS, ("GPU", _int(m.group(2))))
        yield Fact(FactKind.MAX_FEASIBLE_LEN, _int(m.group(2)))
    elif (m := _V0_TOO_LONG_HEAD.search(msg)) is not None:
        yield Fact(FactKind.CHECKED_MODEL_LEN, _int(m.group(1)))  # its cut head: the length, not the tokens
    if any(anchor in msg for anchor in ("No available memory for the cache blocks", "Cannot auto-fit max_model_len")):
        yield Fact(FactKind.MAX_FEASIBLE_LEN, 0)  # not one token fits: the longest feasible request is 0


def _startup(msg: str) -> Iterable[Fact]:
    if m := _CPU_STARTUP.search(msg):
        yield Fact(FactKind.FREE_AT_START, _gib(m.group(2)))
        yield Fact(FactKind.DEVICE_TOTAL, _gib(m.group(3)))
        yield Fact(FactKind.GMU, float(m.group(4)))
        yield Fact(FactKind.REQUESTED, _gib(m.group(5)))
    if m := _CPU_KV_ALLOC.search(msg):
        kv = _gib(m.group(4))
        free, total = _gib(m.group(2)), _gib(m.group(3))
        yield Fact(FactKind.DEVICE_TOTAL, total)
        if m.group(5) is not None:
            # cpu_worker.py determine_available_memory: the KV request is the request less what the worker holds
            # (its RSS), and the node's available memory is measured with the worker loaded: before the boot, the
            # node had that much more free, at most all of it (real pastes round thirty, LMCache#3614: 149.11 GiB
            # free, the KV asking 206.54 of a 207.8 GiB request, short by 57.43 GiB, not the 58.69 free − request says)
            requested = _gib(m.group(5))
            yield Fact(FactKind.REQUESTED, requested)
            yield Fact(FactKind.FREE_AT_START, min(free + requested - kv, total))
        else:
            # an explicit KV size (`requested memory for kv (12.0 GiB)`): the worker's own memory is not said, so
            # the node's figure, a lower bound of what it had free before the boot
            yield Fact(FactKind.FREE_AT_START, free)
        yield Fact(FactKind.KV_AVAILABLE_AT_CHECK, kv)
        if kv <= 0:
            yield Fact(FactKind.MAX_FEASIBLE_LEN, 0)


# torch's OOM message: "GPU 0 has a total capacity of 93.09 GiB of which 739.81 MiB is free."
# torch before 2.1, and torch_npu: "(GPU 0; 14.75 GiB total capacity; 13.2 GiB already allocated; …)"
_OOM_TOTAL = re.compile(rf"has a total capacity of ({NUM}) GiB of which"
                        rf"|\((?:GPU|NPU|XPU|HPU) \d{{1,3}}; ({NUM}) GiB total capacity;")
# torch's allocator warning (failures.TORCH_ALLOC_OOM): "… (free: 2031616, total: 23661248512)", in bytes
_ALLOC_OOM_TOTAL = re.compile(r"while trying to allocate \d{1,20} bytes \(free: \d{1,20}, total: (\d{1,20})\)")


_RAISE = re.compile(r"\braise [A-Za-z_][\w.]{0,80}\(")
"""A traceback's echo of the raising source line (`    raise RuntimeError("Engine core initialization
failed. "`): the cause, after the exception line that follows it (gpustack#2723; FailureFact.echo)."""


def _failure(msg: str) -> Iterable[Fact]:
    """The message's cause in the failure catalogue (engines/failures.py), as a fact."""
    cause = cause_of(msg)
    if cause is None:
        return
    kind = cause.kind
    if cause.anchor == CPU_KV_SHORT and (m := _CPU_KV_ALLOC.search(msg)) and _gib(m.group(4)) <= 0:
        # kv ≤ 0: the process already used its whole budget (nothing left for KV: does not fit);
        # kv > 0: other processes hold the node memory it asked for.
        kind = FailureKind.DOES_NOT_FIT
    text = error_text(msg, cause, LOG_MESSAGE_CHARS)
    echo = False
    if cause.anchor == TRACEBACK:
        text = f"{TRACEBACK}: the boot died; its exception line is not in the log"
    else:
        echo = cause.anchor == WORKER_RERAISE or (
            (at := msg.find(cause.anchor)) >= 0 and _RAISE.search(msg, max(0, at - 200), at) is not None)
    yield Fact(FactKind.FAILURE, FailureFact(kind, cause.phase, text, priority=cause.priority, echo=echo,
                                             needs_death=cause.needs_death, launcher=cause.launcher))
    if kind is not FailureKind.OOM or person_heading(msg):
        # an issue's title that quotes torch's OOM (`# [Bug]:torch.OutOfMemoryError: … GPU 6 has a total capacity
        # of 44.53 GiB …`) names no rank: its device total made a rank 0 of it beside the Ray worker whose lines
        # the body holds (real pastes round twenty-five, vllm#15598); failure_timeline skips its failure alike
        return
    if m := _OOM_TOTAL.search(msg):
        yield Fact(FactKind.DEVICE_TOTAL, _gib(m.group(1) or m.group(2)))
    elif m := _ALLOC_OOM_TOTAL.search(msg):
        yield Fact(FactKind.DEVICE_TOTAL, int(m.group(1)))


# An ERROR record the paste cut off after its level and time, its `[file.py:N]` never closed
# (club-3090#617: `(EngineCore pid=43) ERROR 07-13 00:04:10 [co` right after the KV sizing): the
# boot logged an error there, and its words are not in the log. Read from users' logs only, as a
# bare traceback header is (the lowest priority: any stated cause wins).
CUT_ERROR_HEAD = r"ERROR[ \t]+\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:[ \t]+\[?[^\]\s]{0,200})?[ \t]*"
"""An ERROR record's level, time and unclosed `[file.py:N` (scan.py looks for it at a line's end)."""
CUT_ERROR_RECORD = re.compile(r"(?:^|\s)" + CUT_ERROR_HEAD + "$")


def _cut_error(msg: str) -> Iterable[Fact]:
    if len(msg) <= 400 and CUT_ERROR_RECORD.search(msg):
        yield Fact(FactKind.FAILURE, FailureFact(
            FailureKind.CRASH, None, f"{msg.strip()} … (an ERROR record cut off before its message: the boot logged "
                                     "an error here; its words are not in the log)", priority=BARE))


# An ERROR record that is a traceback frame (`(Worker_TP1_EP1 pid=404) ERROR 11-25 08:05:06
# [multiproc_executor.py:815]   File "…/kernel_warmup.py", line 37, in kernel_warmup`): vLLM logs
# a worker's exception at ERROR, one record a line (multiproc_executor.py worker_busy_loop,
# logger.exception). A paste that holds such frames and stops before the exception line (vllm#29360)
# shows that the boot died, not why: a crash at the lowest priority, as a bare traceback header
# (any stated cause, the traceback's own exception line included, wins). Read from users' logs
# only, and on ERROR records only: the rule needs the record's level, which the catalogue's rules
# do not see, so parse.py asks it with the level (error_frame_facts).
ERROR_FRAME_HEAD = (r"ERROR[ \t]+(?:\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,9})?[ \t]+)?\[?[\w./\-]{1,200}:\d{1,7}\]"
                    r"[ \t]{1,40}File \"")
"""An ERROR record's level, time and `[file.py:N]`, then a traceback frame's `File "` (scan.py finds
these records in an excerpt by it)."""
_FRAME_RECORD = re.compile(r'File "[^"\r\n]{1,400}')
ERROR_FRAME_TEXT = ("traceback frames logged at ERROR: the boot died; the exception line that says why is not in "
                    "the log")
ERROR_LEVELS = ("ERROR", "CRITICAL")


def error_frame_facts(level: str | None, msg: str) -> Iterable[Fact]:
    """A crash whose cause is not shown, where an ERROR record's message is a traceback frame
    (`File "…", line N, in name`, or its path alone where the paste cut the line), or where a
    torch.distributed rank's stderr is (`[rank0]:   File "…"`: torchrun prefixes what a rank prints
    to stderr, and an uncaught exception's traceback is what a dying rank prints; rl-swarm#314)."""
    if level in ERROR_LEVELS and _FRAME_RECORD.match(msg):
        yield Fact(FactKind.FAILURE, FailureFact(FailureKind.CRASH, None, ERROR_FRAME_TEXT, priority=BARE))
    elif level is None and (m := _RANK_FRAME.match(msg)):
        yield Fact(FactKind.FAILURE, FailureFact(FailureKind.CRASH, None, RANK_FRAME_TEXT.format(m.group(1)),
                                                 rank=int(m.group(1)), priority=BARE))
    elif level is None and (m := _STARTUP_FRAME.match(msg)):
        yield Fact(FactKind.FAILURE, FailureFact(FailureKind.CRASH, None, STARTUP_FRAME_TEXT.format(m.group(1)),
                                                 priority=BARE))


_RANK_FRAME = re.compile(r'\[rank(\d{1,6})\]:\s{1,8}File "[^"\n]{0,400}/vllm/')
"""A rank's frame in vLLM's own code: a user's script's frames are not vLLM's startup dying."""
RANK_FRAME_TEXT = ("traceback frames a torch.distributed rank printed ([rank{}]:): the process died; the exception "
                   "line that says why is not in the log")


# --------------------------------------------------------------------------------------------
# Where a failing call was: the phase its method or its traceback frames name

PHASE_OF_CALL: dict[str, Phase] = {
    # worker_base / gpu_worker / V0 worker methods and the engine-side calls that wrap them.
    "init_device": Phase.BASELINE, "init_worker_distributed_environment": Phase.BASELINE,
    # distributed/parallel_state.py, which init_worker_distributed_environment calls: the groups and
    # their communicators (NCCL's ncclCommInitRank) made (gpustack#835)
    "ensure_model_parallel_initialized": Phase.BASELINE, "initialize_model_parallel": Phase.BASELINE,
    # a group's NCCL communicator: made (device_communicators/cuda_communicator.py `PyNcclCommunicator(`) and
    # initialised (pynccl.py `self.nccl.ncclCommInitRank(`) in the group's __init__, which a paste keeps while it
    # cuts the frames above (real pastes round twenty-five, trl#3310: two DP engine cores dying there). A
    # communicator a trainer makes after the start (its weight sync) comes after the boot finished, where no
    # frame names a phase.
    "PyNcclCommunicator": Phase.BASELINE, "ncclCommInitRank": Phase.BASELINE,
    "load_model": Phase.LOAD,
    # model_executor/model_loader: the model built (its layers made in its __init__) and its weights read
    "initialize_model": Phase.LOAD, "make_layers": Phase.LOAD, "load_weights": Phase.LOAD,
    # a layer's quantization method makes its weights in the layer's __init__ (LinearBase, FusedMoE), and
    # repacks them once read (model_loader/utils.py): both only while the model loads (vllm#51124: a
    # Kimi-K3 OOM in Mxfp4MoEMethod.create_weights, no phase before)
    "create_weights": Phase.LOAD, "process_weights_after_loading": Phase.LOAD,
    "determine_available_memory": Phase.PROFILE, "determine_num_available_blocks": Phase.PROFILE,
    "profile_run": Phase.PROFILE,
    "profile_cudagraph_memory": Phase.GRAPHS,
    "get_kv_cache_config": Phase.KV, "get_kv_cache_configs": Phase.KV, "check_enough_kv_cache_memory": Phase.KV,
    "_check_enough_kv_cache_memory": Phase.KV, "initialize_from_config": Phase.KV, "initialize_cache": Phase.KV,
    "initialize_kv_cache": Phase.KV, "_init_cache_engine": Phase.KV, "raise_if_cache_size_invalid": Phase.KV,
    # gpu_model_runner.py up to 0.2x: initialize_kv_cache → initialize_kv_cache_tensors → the allocation
    "initialize_kv_cache_tensors": Phase.KV, "_allocate_kv_cache_tensors": Phase.KV,
    "compile_or_warm_up_model": Phase.CAPTURE, "capture_model": Phase.CAPTURE, "_warm_up_model": Phase.CAPTURE,
    "kernel_warmup": Phase.CAPTURE,
    # kernel_warmup's FlashInfer autotune (model_executor/warmup/kernel_warmup.py: the model run under the
    # autotuner, after the KV cache and before the capture; real pastes round twenty-three, an NVFP4 boot's
    # TMA descriptor error there)
    "flashinfer_autotune": Phase.CAPTURE,
    # Model Runner V2's warmup after its capture (v1/worker/gpu/warmup.py, from compile_or_warm_up_model: the
    # sampler's kernels built and run; real pastes round twenty-two, a FlashInfer JIT build without nvcc)
    "warmup_kernels": Phase.CAPTURE,
    # vllm/model_executor/warmup/deep_gemm_warmup.py, which only kernel_warmup calls (after the KV
    # cache, before the capture): deep_gemm_warmup and the per-kernel warm-ups under it.
    "deep_gemm_warmup": Phase.CAPTURE, "deepgemm_fp8_gemm_nt_warmup": Phase.CAPTURE,
    "_deepgemm_fp8_gemm_nt_warmup": Phase.CAPTURE, "deepgemm_grouped_fp8_gemm_nt_contiguous_warmup": Phase.CAPTURE,
    "_deepgemm_grouped_fp8_gemm_nt_contiguous_warmup": Phase.CAPTURE,
}
"""The startup call → the phase it runs (docs/vllm-startup.md §1; v1/engine/core.py
_initialize_kv_caches calls determine_available_memory, then get_kv_cache_configs and
initialize_from_config, then compile_or_warm_up_model; V0 ran determine_num_available_blocks, then
initialize_cache, which also captured the graphs)."""
GRAPH_CAPTURE_CALLS = ("capture_begin", "capture_end")
"""torch/cuda/graphs.py CUDAGraph.capture_begin / capture_end, which `with torch.cuda.graph(…)` calls
on entry and exit: a frame there is a CUDA graph capture. The frame does not say which capture:
vLLM's real one after the KV cache (capture_model), or, from 0.21, the profiling one before sizing
(profile_cudagraph_memory), so it is read as the capture only where nothing in the log places the
failure before the KV cache (failure_timeline.log_failure)."""
SAMPLER_WARMUP = "_dummy_sampler_run"
"""gpu_model_runner.py's sampler run, called twice in a V1 startup: by profile_run before KV sizing, and by
compile_or_warm_up_model after the capture (its error: "CUDA out of memory occurred when warming up sampler with N
dummy requests"). A frame in it is in the phase the log places it (failure_timeline: the capture's after a KV line,
else the profile's), so it has no PHASE_OF_CALL entry (real pastes round twenty-three: a frame in it right after
`GPU KV cache size`, read as a death in kv)."""
KERNEL_WARMUPS = ("kernel_warmup", "flashinfer_autotune", "deep_gemm_warmup", "deepgemm_fp8_gemm_nt_warmup",
                  "_deepgemm_fp8_gemm_nt_warmup", "deepgemm_grouped_fp8_gemm_nt_contiguous_warmup",
                  "_deepgemm_grouped_fp8_gemm_nt_contiguous_warmup")
"""The kernel warm-ups compile_or_warm_up_model runs after KV sizing and before the graph capture: kernel_warmup,
and DeepGEMM's and FlashInfer's autotune under it (v1/worker/gpu_worker.py, every release read)."""
MRV2_WARMUP = "warmup_kernels"
"""Model Runner V2's kernel warmup (v1/worker/gpu/warmup.py): after the capture in 0.27, before it in later code
(gpu_worker.py: "A workspace resize after capture frees what the graphs point at"), so its frame says nothing of
the capture."""
WARMUP_CALLS = ("compile_or_warm_up_model", "_warm_up_model", "capture_model", *KERNEL_WARMUPS, MRV2_WARMUP,
                SAMPLER_WARMUP)
"""The calls whose frames name a step after KV sizing (facts.FactKind.WARMUP_FRAME), the sampler run's too."""
KV_SETUP_CALL = "_initialize_kv_caches"
"""The engine core's call that profiles, sizes the KV cache and captures (v1/engine/core.py), after the model loaded:
a frame in it places a death in no one phase, profile or later (real pastes round twenty-nine, vllm#35854: an engine
core's frames down to it, through tracing/otel.py's sync_wrapper, cut; no header, no level, no exception line)."""
# A frame of vLLM's own code in a startup call, on a line no logger wrote (a process's stderr, as compose or
# journald pass it on): a traceback through the start, which is how an engine core dies (real pastes round
# twenty-six: a compose paste of frames only, `(EngineCore pid=165)   File ".../vllm/v1/engine/core.py", line 261,
# in _initialize_kv_caches` … `in determine_available_memory`, header and exception line not pasted). faulthandler's
# frames (`line N in name`, no comma) are its own rule; a request's frames after the start name no startup call,
# and log_failure keeps what comes after the start a note.
_STARTUP_FRAME = re.compile(r'\s{0,12}File "[^"\n]{0,400}/vllm/[^"\n]{0,400}", line \d{1,7}, in (' + "|".join(
    (*PHASE_OF_CALL, KV_SETUP_CALL)) + r")\b")
FRAME_CALLS = (*PHASE_OF_CALL, *GRAPH_CAPTURE_CALLS, SAMPLER_WARMUP, KV_SETUP_CALL)
"""Every call a traceback frame is kept for."""
STARTUP_FRAME_TEXT = ("traceback frames through vLLM's startup (`in {}`): the boot died; the traceback's header and "
                      "exception line are not in the log")
_METHOD = re.compile(r"(?:Error executing method|while processing method) '?([A-Za-z_]\w{0,80})")
# A traceback frame (`File "…", line N, in name`) or faulthandler's (`File "…", line N in name`); also one whose
# `File "` a paste cut, where its path (no space, ending .py) follows a blank or opens the text (`l/lib/…/pynccl.py",
# line 139, in __init__`), and one whose dunder name Markdown made bold (`in **init**`: a traceback pasted into an
# issue unfenced, real pastes round twenty-five, vllm#21661). frame_call gives the name as Python wrote it.
FRAME = re.compile(r'(?:File "|(?<!\S)(?=[^"\s]{1,400}\.py", ))[^"\n]{1,400}", line \d{1,7}(,)? in '
                   r'(\*\*[A-Za-z]\w{0,76}\*\*|[A-Za-z_]\w{0,80})')


def frame_call(m: re.Match[str]) -> str:
    """The function a FRAME match names, a Markdown-bolded dunder (`**init**`) as Python wrote it (`__init__`)."""
    name = m.group(2)
    return f"__{name[2:-2]}__" if name.startswith("**") else name


_COMMUNICATOR_INIT = re.compile(r'[/\\]distributed[/\\]device_communicators[/\\]\w{1,80}\.py", line \d{1,7}, in '
                                r'(?:__init__\b|\*\*init\*\*)')
"""A frame in a device communicator's constructor (pynccl.py's PyNcclCommunicator, cuda_communicator.py,
custom_all_reduce.py, shm_broadcast.py): vLLM makes them while it sets up its process groups
(init_worker_distributed_environment → initialize_model_parallel), before the model loads; pynccl's __init__ also
runs a warm-up all_reduce there, whose NCCL error is a death in baseline (real pastes round twenty-five, vllm#21661:
`pynccl.py", line 139, in **init**` over `self.all_reduce(data)` → `RuntimeError: NCCL error: unhandled cuda
error`). A trainer's weight-sync communicator made after the start is after the boot, as PHASE_OF_CALL's."""


def communicator_init(line: str) -> bool:
    """Whether a line holds a frame in a device communicator's constructor (_COMMUNICATOR_INIT)."""
    return _COMMUNICATOR_INIT.search(line) is not None


_STARTUP_CALLS = "|".join(PHASE_OF_CALL)
# The executors call a worker method by its name: `self._run_workers("init_device")` (V0, Ray),
# `self.collective_rpc("initialize_cache", …)` (V0 0.7–0.10, V1): the source line names the phase.
# (A POSIX ERE as well: the ingest benchmark greps for it.)
_RPC_CALL_HEAD = r"(_run_workers|collective_rpc)\( {0,4}" + '["\']' + "(" + _STARTUP_CALLS + ")" + '["\']'
SOURCE_CALL_HEAD = r"(^|[^A-Za-z0-9_])(" + _STARTUP_CALLS + "|" + SAMPLER_WARMUP + r")\(|" + _RPC_CALL_HEAD
"""A call of a startup method (or of the sampler run: _SAMPLER_SOURCE) in a line of code, or by its name through an
executor (scan.py looks for it in an excerpt)."""
# The source line a traceback prints under each frame is the call in progress in it, so a call of a
# startup method there places the failure as the next frame would: where a paste cut that frame
# (modal-examples#1318, vllm#17822's journalctl lines, vllm-ascend#8440:
# `    available_gpu_memory = self.model_executor.determine_available_memory()`; a condensed
# traceback's `gpu_worker.py:573 in determine_available_memory` / `-> self.model_runner.profile_run()`,
# real pastes round fourteen). Only a statement calling the method reads so, at the start of a
# record or right after its frame's header (a bare traceback's lines joined into one record), not a
# person's sentence that names it; an annotated assignment too (pynccl.py's `self.comm: ncclComm_t = …`).
def _source_call(calls: str) -> re.Pattern[str]:
    return re.compile(r"(?:^|(?:, |\.py:\d{1,7} )in [A-Za-z_<][\w<>]{0,80}\s+)[ \t]{0,12}(?:-> )?"
                      r"(?:[\w.,:\[\] ]{1,120}=[ \t]*)?(?:[A-Za-z_]\w{0,80}\.){0,6}(" + calls + r")\(")


_SOURCE_CALL = _source_call(_STARTUP_CALLS)
# The sampler run's call as the statement under its caller's frame, the run's own frame cut (real pastes round
# twenty-seven, vllm#29049: `in compile_or_warm_up_model`, then `self.model_runner._dummy_sampler_run(hidden_states=
# last_hidden_states)`, the excerpt's end): a frame in it, as far as the phase and step go (_sampler_hints).
_SAMPLER_SOURCE = _source_call(SAMPLER_WARMUP)


_RPC_CALL = re.compile(r"\b" + _RPC_CALL_HEAD)


def _call_phase(msg: str) -> Iterable[Fact]:
    for m in _SOURCE_CALL.finditer(msg):
        yield Fact(FactKind.PHASE_HINT, PHASE_OF_CALL[m.group(1)])
    if SAMPLER_WARMUP in msg and _SAMPLER_SOURCE.search(msg):
        yield Fact(FactKind.WARMUP_FRAME, SAMPLER_WARMUP)
    if m := _RPC_CALL.search(msg):
        yield Fact(FactKind.PHASE_HINT, PHASE_OF_CALL[m.group(2)])
    if m := _METHOD.search(msg):
        if (phase := PHASE_OF_CALL.get(m.group(1))) is not None:
            yield Fact(FactKind.PHASE_HINT, phase)
    if m := FRAME.search(msg):
        call = frame_call(m)
        if (phase := PHASE_OF_CALL.get(call)) is not None:
            yield Fact(FactKind.PHASE_HINT, phase)
        elif call == KV_SETUP_CALL:
            yield Fact(FactKind.PHASE_FLOOR, Phase.PROFILE)
        elif call in GRAPH_CAPTURE_CALLS:
            yield Fact(FactKind.GRAPH_CAPTURE_FRAME, Phase.CAPTURE)
        elif communicator_init(m.group(0)):
            yield Fact(FactKind.PHASE_HINT, Phase.BASELINE)
        if call in WARMUP_CALLS:
            yield Fact(FactKind.WARMUP_FRAME, call)
        if m.group(1) is None:  # faulthandler dumps the stack of a process that crashed in C code or hung
            yield Fact(FactKind.FAILURE, FailureFact(
                FailureKind.CRASH, None, f"a faulthandler stack dump (the process crashed or hung): {m.group(0)}",
                priority=BARE))


# --------------------------------------------------------------------------------------------
# Ray's folding and pasted command lines

# Ray's log deduplication prints a line once and folds the same line from other workers into
# "[repeated Nx across cluster]", ignoring the words with digits in them: the folded workers'
# figures may differ and are not in the log.
_RAY_FOLDED = re.compile(r"\[repeated (\d{1,9})x across cluster\]")
# A progress bar's redraws are folded too, one worker's as much as many (real pastes round fifteen:
# `Capturing CUDA graphs:  51%|█████ | 34/67 [00:10<00:09,  3.34it/s] [repeated 34x across cluster]`
# on a TP=2 boot whose two workers' figures are both in the log): that count is no count of workers.
_BAR_REDRAW = re.compile(r"\d{1,9}/\d{1,9} \[\d{1,4}:\d\d")


def _ray(msg: str) -> Iterable[Fact]:
    if (m := _RAY_FOLDED.search(msg)) and not _BAR_REDRAW.search(msg, 0, m.start()):
        yield Fact(FactKind.RAY_FOLDED, int(m.group(1)))


# distributed/parallel_state.py initialize_model_parallel, once a worker: "rank %s in world size %s is
# assigned as DP rank %s, PP rank %s, PCP rank %s, TP rank %s, ETP rank %s, EP rank %s, EPLB rank %s"
# (older releases name fewer groups). The world is ExternalDP × DP × PP × PCP × TP ranks (the
# reshape there), so where the groups' ranks seen fill it, each size is known (layout.py).
PARALLEL_STATE_LINE = " in world size "
_PARALLEL_STATE = re.compile(r"\brank (\d{1,6}) in world size (\d{1,6}) is assigned as (.{0,200})")
_GROUP_RANK = re.compile(r"\b(DP|PP|PCP|TP) rank (\d{1,6})\b")


def _parallel_state(msg: str) -> Iterable[Fact]:
    if m := _PARALLEL_STATE.search(msg):
        ranks = {g.lower(): int(r) for g, r in _GROUP_RANK.findall(m.group(3))}
        if int(m.group(1)) < int(m.group(2)):
            yield Fact(FactKind.PARALLEL_RANKS, (int(m.group(2)), ranks, int(m.group(1))))


# compilation/backends.py and decorators.py name a worker's compile cache `rank_{rank}_{dp_rank}` (parallel_config's
# rank within its DP engine, and the DP index) and print the path once a compile or load: a Ray worker's lines name no
# rank, but this one states it (real pastes round twenty-six, vllm#36861: `(RayWorkerWrapper pid=33834, ip=…)` saved
# its graph to `…/torch_aot_compile/84065e…/rank_1_0/model` and its KV and graph figures were put on rank 0). Read in
# vLLM's own three sentences only: a `cache_dir` in a config or command, or a path in prose, states nothing. The rank
# directory is the last one of the path (a user's cache_dir may hold `rank_` in its own name), followed by the
# backbone's prefix or the AOT file's `model`, or by nothing (0.8's `…/rank_0_0 for vLLM's torch.compile`).
COMPILE_CACHE_LINES = ("Using cache directory: ", "saved AOT compiled function to ",
                       "Directly load AOT compilation from path ")
_COMPILE_CACHE_RANK = re.compile(r"(?:" + "|".join(COMPILE_CACHE_LINES) + r")\S{0,1000}?[/\\]rank_(\d{1,6})_(\d{1,6})"
                                 r"(?:[/\\][\w.-]{0,64})?(?: for vLLM's torch\.compile|[ \t\r]*$)")


def _compile_cache_rank(msg: str) -> Iterable[Fact]:
    if m := _COMPILE_CACHE_RANK.search(msg):
        yield Fact(FactKind.COMPILE_RANK, (int(m.group(1)), int(m.group(2))))


CP_WORLD_LINE = "Multiplying the GPU KV cache size by the cp_world_size"
_CP_WORLD = re.compile(r"cp_world_size (\d{1,4}) \(pcp_world_size (\d{1,4}) \* dcp_world_size (\d{1,4})\)")
DCP_WORLD_LINE = "Multiplying the GPU KV cache size by the dcp_world_size"
_DCP_WORLD = re.compile(r"by the dcp_world_size (\d{1,4})\b")
"""0.11–0.12's wording, before prefill context parallelism: DCP alone."""


def _cp_world(msg: str) -> Iterable[Fact]:
    # kv_cache_utils.py _report_kv_cache_config (0.1x on): the tokens it prints next are the context-parallel
    # group's, each rank holding its share (real pastes round twenty-one: DCP 4 read as "≥ 2, size not stated")
    if (m := _CP_WORLD.search(msg)) and int(m.group(1)) == int(m.group(2)) * int(m.group(3)):
        yield Fact(FactKind.CP_WORLD, (int(m.group(2)), int(m.group(3))))
    elif m := _DCP_WORLD.search(msg):
        yield Fact(FactKind.CP_WORLD, (1, int(m.group(1))))


# distributed/parallel_state.py init_distributed_environment, once a worker: "world_size=%d rank=%d
# local_rank=%d distributed_init_method=%s backend=%s" (vLLM 0.23's `(Worker pid=N)` workers name no rank:
# real pastes round seventeen, four workers failing the free-memory check on cuda:0 to cuda:3).
WORLD_RANK_LINE = " local_rank="
_WORLD_RANK = re.compile(r"\bworld_size=(\d{1,6}) rank=(\d{1,6}) local_rank=\d{1,6} distributed_init_method=")


def _world_rank(msg: str) -> Iterable[Fact]:
    if (m := _WORLD_RANK.search(msg)) and int(m.group(2)) < int(m.group(1)):
        yield Fact(FactKind.WORLD_RANK, (int(m.group(1)), int(m.group(2))))


# `vllm serve …` / `python -m vllm.entrypoints.openai.api_server …` as people paste them: the
# parallel sizes (vllm/engine/arg_utils.py: -tp, -pp, -dp are the short forms), the length and the
# utilisation. Read only from lines that are no vLLM log record (parse.py drops them there).
COMMAND_FLAGS = {"--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
                 "--pipeline-parallel-size": "pipeline_parallel_size", "-pp": "pipeline_parallel_size",
                 "--data-parallel-size": "data_parallel_size", "-dp": "data_parallel_size",
                 "--decode-context-parallel-size": "decode_context_parallel_size",
                 "-dcp": "decode_context_parallel_size",
                 "--max-model-len": "max_model_len", "--gpu-memory-utilization": "gpu_memory_utilization",
                 "--block-size": "block_size", "--max-num-seqs": "max_num_seqs",
                 "--max-num-batched-tokens": "max_num_batched_tokens"}
# vLLM's FlexibleArgumentParser turns each `_` of a `--` flag's name into `-` before argparse reads
# it (`--max_model_len 8192`), and argparse takes a prefix that names one flag alone (allow_abbrev:
# `--gpu-memory-util 0.9`). Each flag's shortest prefix read here names it alone among the 430 flags
# of vLLM 0.32's `vllm serve` and runs into its second word (`--gpu-m`, not `--gp`);
# `--data-parallel-size` has none (`--data-parallel-size-local`).
FLAG_PREFIXES = {"--tensor-parallel-size": "--tensor-p", "--pipeline-parallel-size": "--pipeline-p",
                 "--decode-context-parallel-size": "--decode-c", "--max-model-len": "--max-m",
                 "--gpu-memory-utilization": "--gpu-m", "--block-size": "--block-s"}
_FLAG_AT = r"(?:^|(?<=[\s\"'`(]))"
"""Where a flag may start: the line's start, or after a space, a quote, a backtick or a parenthesis."""
_COMMAND = re.compile(_FLAG_AT + r"(--?[A-Za-z][\w\-]{0,60})(?:=|[ \t]+)"
                      r"(\d{1,9}(?:\.\d{1,6})?[kKmMgGtT]?)(?![\w.])")


def command_flag(word: str) -> str | None:
    """The knob (a COMMAND_FLAGS value) a pasted flag's name sets, as vLLM reads it, or None."""
    name = word.replace("_", "-") if word.startswith("--") else word
    if name in COMMAND_FLAGS:
        return COMMAND_FLAGS[name]
    return next((COMMAND_FLAGS[flag] for flag, shortest in FLAG_PREFIXES.items()
                 if name.startswith(shortest) and flag.startswith(name)), None)


# (not a shell prompt's folder named vllm: `[root@host vllm]# python …`, `user@box:~/vllm$ python …`, where the
# command is what follows the prompt; real pastes round twenty-four b, vllm-ascend#616: the model was lost)
_COMMAND_CONTEXT = re.compile(r"(?<![A-Za-z0-9_])(?:vllm|python|api_server)(?![\]$#%])", re.IGNORECASE)
MAX_COMMAND_RUNS = 64
"""Commands read from one line at most: a line holds a few; each run reads a few words and the 4 KiB
before it, so a line of `vllm vllm vllm …` costs no more than 64 runs (untrusted input stays linear)."""
# A shell word: a quoted string (a JSON value keeps its spaces) or a run of non-blanks.
_WORD = re.compile(r"""'[^'\n]{0,2000}'|"[^"\n]{0,2000}"|`[^`\n]{0,2000}`|\S{1,2000}""")
_FLAG_WORD = re.compile(r"-{1,2}[A-Za-z][\w.\-]{0,80}(?:=\S{0,2000})?")
_QUOTES = "\"'`,"


_ENV_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,80}=")
COMMAND_HEAD_WORDS = 3
"""Words a command holds before its first flag: `vllm serve MODEL`, `python3 -m …` (a sentence that
names vllm before a flag, `vllm works if I drop --enforce-eager`, is none)."""


def _command_runs(msg: str) -> list[tuple[int, int]]:
    """Each command a line holds, from its program's name (`vllm`, `python`, `api_server`) to the end
    of its flags: the first word of letters alone after them that is no flag's value ends it (shell
    words such as `$(($1 + 1000))` do not). A person's sentence after a pasted command (joined to it
    as a wrapped line is) is no part of it (llm-scaler#578: `… -tp=4`, then "crashes …, but using
    `-tp=2` or even `-tp=1` loads fine")."""
    spans: list[tuple[int, int]] = []
    limit = min(len(msg), 100_000)
    pos = 0
    while len(spans) < MAX_COMMAND_RUNS and (ctx := _COMMAND_CONTEXT.search(msg, pos, limit)) is not None:
        end, flags, words, value_next = ctx.end(), 0, 0, False
        for m in _WORD.finditer(msg, ctx.start(), limit):
            word = m.group(0)
            if _FLAG_WORD.fullmatch(word.strip(_QUOTES)):
                end, flags, value_next = m.end(), flags + 1, "=" not in word
            elif word == "\\" or (not flags and _ENV_WORD.match(word)):
                continue  # a line's continuation; `VLLM_USE_V1=1` before the program
            elif not flags and words < COMMAND_HEAD_WORDS:  # the program, its subcommand, its model
                end, words = m.end(), words + 1
            elif flags and (value_next or not word.strip(_QUOTES).isalpha()):
                end, value_next = m.end(), False  # a flag's value; a shell word
            else:
                break
        spans.append((ctx.start(), end))
        pos = end if flags else ctx.end()  # no flag: the next program name may start the command
    return spans


def _flag_spans(msg: str) -> list[tuple[int, int]]:
    """Where a line without `vllm` in it holds a command: its runs of flags, each flag with at most
    one value after it. A run counts when it is the whole line (a continuation line, `  --max-model-len
    124000 \\`, or a YAML list item `- --tp=2`) or holds two flags or more (`With --max-model-len 32768
    --gpu-memory-utilization 0.72:`); one flag with words after it is a person's sentence about some
    other run (`--gpu-memory-utilization 0.85 fixes it: …`), not this boot's command."""
    spans: list[tuple[int, int]] = []
    start = end = flags = 0
    value_next = whole = False
    first = True
    for m in _WORD.finditer(msg[:100_000]):
        word = m.group(0)
        if _FLAG_WORD.fullmatch(word.strip(_QUOTES)):
            if not flags:
                start, whole = m.start(), first
            flags, end, value_next = flags + 1, m.end(), "=" not in word
        elif flags and value_next and word != "\\":
            end, value_next = m.end(), False
        elif word == "\\" or (first and word in ("-", "*", ">")):
            pass  # a continuation backslash; a list bullet or a quote mark before the first flag
        else:
            if flags >= 2:
                spans.append((start, end))
            flags, whole = 0, False
        if word not in ("-", "*", ">"):
            first = False
    if flags and (flags >= 2 or whole):
        spans.append((start, end))
    return spans


# The offline API as people paste it: `llm = LLM(model=…, tensor_parallel_size=2, …)` (vLLM's
# entrypoints/llm.py LLM.__init__ passes its keywords on to EngineArgs, the same knobs as the CLI's
# flags), or `EngineArgs(…)` / `AsyncEngineArgs(…)` themselves (vllm#27067). Its keywords are read
# on the line that opens the call, or on a line that holds one keyword and nothing else (a call
# spread over lines, vllm#44376: `    max_model_len=30_000,`); a keyword among other words is
# someone's sentence or another record's text. Python numerals may group digits with `_`.
KWARG_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "decode_context_parallel_size",
              "max_model_len", "gpu_memory_utilization", "block_size")
KWARG_NEEDLES = ("_parallel_size=", "max_model_len=", "gpu_memory_utilization=", "block_size=", "enforce_eager=")
"""What a line with one of KWARG_KEYS, or `enforce_eager=`, holds (the scan's needles for it)."""
_NUMERAL = r"\d(?:_?\d){0,11}(?:\.\d{1,6})?"
_KWARG = re.compile(r"(?<![\w.\-])(" + "|".join(KWARG_KEYS) + r")[ \t]*=[ \t]*(" + _NUMERAL + r")(?![\w.])")
_KWARG_LINE = re.compile(r"[ \t]{0,40}(?:" + "|".join(KWARG_KEYS) + r")[ \t]*=[ \t]*" + _NUMERAL
                         + r"[ \t]*,?[ \t]*\)?[ \t]*,?[ \t]*")
_LLM_CALL = re.compile(r"(?<![\w.])(?:LLM|(?:Async)?EngineArgs)\(")
# The one boolean knob read from a command: `--enforce-eager` (`--no-enforce-eager` from 0.10, where
# the flag became a BooleanOptionalAction; `_` for `-` as above) and the offline call's
# `enforce_eager=True` (vllm#9163).
_EAGER_FLAG = re.compile(_FLAG_AT + r"--(no[-_])?enforce[-_]eager(?![\w\-=])")
# The one word-valued knob read from a command: `--kv-cache-dtype fp8` (any of vLLM's CacheDType
# names, which grow: `fp8_e4m3`, `nvfp4`, `fp8_per_token_head`, …).
_KV_DTYPE_FLAG = re.compile(_FLAG_AT + r"--kv[-_]cache[-_]dtype(?:=|[ \t]+)['\"]?"
                            r"([a-z][a-z0-9_]{1,40})(?![\w.\-])")
# `--dtype half` (vLLM's ModelConfig dtype choices) and `--enable-expert-parallel` / `-ep` (real pastes round
# twenty-one: read from `non-default args`, not from a pasted command)
_DTYPE_FLAG = re.compile(_FLAG_AT + r"--dtype(?:=|[ \t]+)['\"]?(auto|half|float16|bfloat16|float|float32)"
                         r"(?![\w.\-])")
_EP_FLAG = re.compile(_FLAG_AT + r"(?:--enable[-_]expert[-_]parallel|-ep)(?![\w\-=])")
_EAGER_KWARG = re.compile(r"(?<![\w.\-])enforce_eager[ \t]*=[ \t]*(True|False)(?![\w.])")


def _kwargs(msg: str) -> Iterable[Fact]:
    if call := _LLM_CALL.search(msg[:100_000]):
        stop = msg.find("#", call.end(), 100_000)  # a comment after the call is a person's words
        stop = 100_000 if stop < 0 else stop
        found = _KWARG.finditer(msg, call.end(), stop)
        if eager := _EAGER_KWARG.search(msg, call.end(), stop):
            yield Fact(FactKind.COMMAND_ARG, ("enforce_eager", eager.group(1) == "True"))
    elif len(msg) <= 200 and _KWARG_LINE.fullmatch(msg):
        found = _KWARG.finditer(msg)
    elif len(msg) <= 200 and (eager := _EAGER_KWARG.fullmatch(msg.strip(" \t,)"))):
        yield Fact(FactKind.COMMAND_ARG, ("enforce_eager", eager.group(1) == "True"))
        return
    else:
        return
    for m in found:
        yield _kwarg_fact(m.group(1), m.group(2))


def _kwarg_fact(key: str, numeral: str) -> Fact:
    """One of KWARG_KEYS with its _NUMERAL (`_` digit separators allowed): GMU a float, the others whole numbers."""
    number = numeral.replace("_", "")
    return Fact(FactKind.COMMAND_ARG, (key, float(number) if key == "gpu_memory_utilization" else int(float(number))))


_TYPOGRAPHIC_QUOTES = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'}
"""The quotes an editor or a forum puts for Python's (‘’ “”), each with Python's."""
_MODEL_QUOTES = "\"'" + "".join(_TYPOGRAPHIC_QUOTES)
"""The quotes a model's name may stand in: Python's, and the typographic ones an editor puts (vllm#44376)."""
_MODEL_STRING = r"[" + _MODEL_QUOTES + r"]([^\s" + _MODEL_QUOTES + r"<>${}]{1,300})[" + _MODEL_QUOTES + "]"
_CALL_MODEL = re.compile(r"(?<![\w.])(?:vllm\.)?(?:LLM|(?:Async)?EngineArgs)\((?:\s{0,200}" + _MODEL_STRING
                         + r"|[^()#]{0,600}?(?<![\w.])model[ \t]*=[ \t]*" + _MODEL_STRING + ")")
"""The model of an offline call, `LLM(model="…", …)` or `EngineArgs(…)` (entrypoints/llm.py: the first parameter, so
also `LLM('facebook/opt-125m', …)`, round nine's BuildKit paste), on the call's line or a line of its own below it
(real pastes round thirty: vllm-ascend#14004's `LLM(` then `    model="Qwen/Qwen3-0.6B",`; vllm#44376's typographic
quotes `model=”DeepSeek-V4-Flash”`): inside the call's parentheses, before a comment."""
_VLLM_CALL_WORDS = ("from vllm import", "import vllm", "vllm.LLM(", "EngineArgs(", *KWARG_NEEDLES)
"""What makes an `LLM(` call vLLM's: the text imports vLLM, or the call passes one of vLLM's own keywords (another
framework's `LLM(model="gpt-4o")`, CrewAI's, is not)."""


def offline_call_model(text: str) -> str | None:
    """The model the first vLLM offline call in `text` names (_CALL_MODEL, _VLLM_CALL_WORDS); None where none does."""
    imports = any(word in text for word in _VLLM_CALL_WORDS[:2])
    for m in _CALL_MODEL.finditer(text):
        close = text.find(")", m.end(), m.end() + 2000)
        call = text[m.start():close + 1 if close >= 0 else m.end() + 2000]  # up to the call's `)`, as far as read
        if imports or any(word in call for word in _VLLM_CALL_WORDS[2:]):
            return m.group(1) or m.group(2)
    return None


def _command_value(key: str, text: str) -> float | int | None:
    """A pasted flag's number as vLLM reads it: the utilization a float, the rest whole numbers; the
    length and the step's tokens may carry vLLM's human-readable suffix (`--max-model-len 32k`: 32,000;
    `--max-num-batched-tokens=64K`: 65,536, real pastes round twenty)."""
    if key == "gpu_memory_utilization":
        return None if text[-1].isalpha() else float(text)
    if not text[-1].isalpha():
        return int(float(text))
    if key not in SIZE_KEYS:  # vLLM reads sizes so for these of the knobs read here (config.SIZE_KEYS)
        return None
    try:
        return human_readable_int(text)
    except ValueError:  # `1.5K`: vLLM refuses a binary suffix on a fraction
        return None


SERVE_NEEDLE = "vllm serve "
"""A pasted `vllm serve MODEL …` (the scan's needle for one without flags)."""
# The model is a word that is no placeholder (`<model>`, `$MODEL`, `{model}`) and no flag; a
# redirection or pipe may follow it (`vllm serve M>serve.log`).
_MODEL_WORD = r"([^\s'\"`\\\-<${][^\s'\"`<>${}|;&]{0,200})(?![^\s'\"`>|;&])"
_SERVED_MODEL = re.compile(r"vllm serve[ \t]+" + _MODEL_WORD)
# (`--model_id` is KServe's huggingfaceserver's: real pastes round twenty-two, kserve PR 4470)
_MODEL_FLAG = re.compile(_FLAG_AT + r"--model(?:[-_]id)?(?:=|[ \t]+)['\"]?" + _MODEL_WORD)
_PROMPT_ENDS = ("$", "#", ">", "%")
_ENV_NAME = r"[A-Za-z_]\w{0,80}="
"""A variable the command line sets for the command: `CUDA_VISIBLE_DEVICES=0,1`."""
_ENV_WORD = re.compile(_ENV_NAME)
_ENV_WORDS = re.compile(r"(?:" + _ENV_NAME + r"\S{0,300}[ \t]+){0,32}")
_LAUNCHERS = frozenset({"env", "sudo", "-E", "nohup", "exec", "time", "nice"})
"""Words that run the command after them (`sudo -E python3 -m vllm…`, `nohup vllm serve …`)."""
_CONTAINER_TOOLS = frozenset({"docker", "podman", "nerdctl"})
_EXECUTABLE_PATH = re.compile(r"(?:[^\s'\"`]{0,300}/(?=vllm[ \t]))?")
"""The path a command names vLLM by: `/home/u/venv/bin/vllm serve MODEL` (real pastes round seventeen)."""
_WORD_ENDS = (" ", "\t", "\n", "\r", "'", '"', "`")
"""What ends the path before the command's run (_command_runs starts a run at the word `vllm`)."""
_IMAGE_MODEL = re.compile(r"(?<![^\s'\"`/])vllm/vllm-openai(?:-rocm|-cpu)?(?::[\w.\-]{1,128})?(?:[ \t]+\\)*[ \t]+"
                          + _MODEL_WORD)
"""The model a container's run names after vLLM's image, its first positional (the image's entrypoint is `vllm
serve`; real pastes round twenty-two, recipes#381: `vllm/vllm-openai:deepseekv4-cu130 \\ deepseek-ai/DeepSeek-V4-Pro
\\ --trust-remote-code …`, its continuation lines joined). A flag there (`--model M`) is read as one (_MODEL_FLAG)."""
_NOT_MODELS = frozenset({"vllm", "python", "python3", "bash", "sh"})
"""Words after the image that start another command (an image run with its entrypoint replaced), no model; a model's
path or name starts with a letter, a digit, `/`, `.` or `~` (not a shell's `&&`)."""


def _served_model(msg: str, start: int, end: int) -> str | None:
    """The model a pasted command serves: `vllm serve MODEL` (the positional) or `--model MODEL`,
    where the command starts its line (after a shell prompt and the environment it sets at most,
    `user@host:~$ CUDA_VISIBLE_DEVICES=0,1 vllm serve …`): a person's sentence that names `vllm serve
    X` states no model of this boot."""
    if start > 0 and msg[start - 1] == "/":  # the path vLLM is named by (`/home/u/venv/bin/vllm serve …`)
        floor = max(start - 300, 0)
        start = max(msg.rfind(c, floor, start) for c in _WORD_ENDS) + 1 or floor
    words = msg[max(start - 4096, 0):start].split()
    # a container's run names vLLM's image, its own flags before it (`docker run --gpus all -p 8000:8000
    # vllm/vllm-openai:v0.10.1 --model M`): what came before `docker` is what must start the line
    container = next((k for k, w in enumerate(words) if w in _CONTAINER_TOOLS and "run" in words[k + 1:k + 3]), None)
    if container is not None:
        words = words[:container]
    while words and (_ENV_WORD.match(words[-1]) or words[-1] in _LAUNCHERS):
        words.pop()
    if words and not words[-1].endswith(_PROMPT_ENDS) and not _labelled(msg, start, words[-1]):
        return None
    run = msg[start:min(end, 100_000)]
    run = run[_ENV_WORDS.match(run).end():]  # where the command's run starts at the variables it sets
    run = run[_EXECUTABLE_PATH.match(run).end():]
    m = _SERVED_MODEL.match(run) or _MODEL_FLAG.search(run)
    if (m is None and (image := _IMAGE_MODEL.search(run)) and image.group(1) not in _NOT_MODELS
            and (image.group(1)[0].isalnum() or image.group(1)[0] in "/.~")):
        m = image
    # a heading that names the command (`vllm serve command:`, real pastes round twenty-one) serves no model
    return m.group(1) if m and not m.group(1).endswith(":") else None


_LABEL_ENDS = (":", "：")
_LABEL_WORDS = 3
"""The most words a label before a command may have (`start cmd:`, `Launch command:`, `启动命令为：`)."""


def _labelled(msg: str, start: int, last: str) -> bool:
    """Whether the command at `start` follows a label that opens its line (`start cmd:  python -m
    vllm.entrypoints.openai.api_server --model M …`, real pastes round twenty-six: its flags were read and its
    model dropped as a sentence's), not the end of a sentence's clause."""
    line = msg[msg.rfind("\n", 0, start) + 1:start]
    if not last.endswith(_LABEL_ENDS):  # or a sentence that opens its line to say it is the person's own command
        return _OWN_COMMAND.fullmatch(line) is not None
    head = line[:line.find(last) + len(last)] if last in line else ""
    return 0 < len(head.split()) <= _LABEL_WORDS


_OWN_COMMAND = re.compile(r"[ \t>*-]{0,8}(?:my|the) (?:launch |start |serve |full )?command (?:is|was)[ \t]{1,8}`?"
                          + _ENV_WORDS.pattern + "`?", re.IGNORECASE)
"""A label in words that opens its line and says the command after it is the boot's (`My command is
LMCACHE_CONFIG_FILE=… vllm serve Meta-Llama-3.1-8B-Instruct --gpu-memory-utilization 0.8 …`, real pastes round
thirty-four: its flags were read, its model dropped). A sentence (`I ran vllm serve M and it crashed`, round nine),
advice (`You can try vllm serve M`) or an example (`For example, vllm serve M`) names no model of a boot."""


# `docker inspect`'s Args and a compose `command:` list as they print: each argument single-quoted (real pastes round
# twenty-two, vllm#10360: CMD: `'--model' 'Qwen2.5-32B-Instruct-AWQ' '--max-model-len' '4096'
# '--enable-prefix-caching'`). The run from its first quoted flag is a whole argument list, read as the command it
# quotes; an argument with a space in it (a JSON value) ends the run.
_QUOTED_ARGS = re.compile(r"'-{1,2}[A-Za-z][\w.\-]{0,80}'(?:[ \t]{1,8}'[^\s'\\]{1,2000}'){1,256}")


_MODEL_ARGS = re.compile(r"--model_args(?:=|[ \t]+)(\S{1,4000})")
"""lm-evaluation-harness's engine arguments (`lm_eval --model vllm --model_args pretrained=M,tensor_parallel_size=2,
gpu_memory_utilization=0.8,data_parallel_size=4 …`): one word of `key=value`s, commas between, a value in quotes at
most (real pastes round thirty-four: lm-eval#2779, llm-compressor#1151)."""


_LM_EVAL_RUN = re.compile(r"(?:\[[^\]\n]{0,200}\][ \t]*)?(?:\S{0,200}[$#>%][ \t]+)?" + _ENV_WORDS.pattern
                          + r"(?:(?:python3?|accelerate launch) -m |\S{0,300}/)?lm[_-]eval\b")
"""An lm-eval command that opens its line (after a bracketed tag, a shell prompt and the variables it sets, at most),
not advice in a sentence."""
_LM_EVAL_LATER = re.compile(r"(?:[;&|][ \t]*|[ \t])(?:(?:python3?|accelerate launch) -m )?lm[_-]eval[ \t]+--")
"""An lm-eval command after another on the same line (`vllm serve M … & lm_eval --model local-completions …`)."""
_LM_EVAL_BACKEND = re.compile(r"--model(?:=|[ \t]+)['\"]?([\w\-]{1,40})(?![\w\-])")
_LM_EVAL_VLLM = ("vllm", "vllm-vlm")
"""lm-eval's backends that are vLLM (`--model vllm`, `--model vllm-vlm`)."""


def _model_args(msg: str, lm_eval: bool) -> Iterable[Fact]:
    """What lm-eval's `--model_args` passes vLLM: its `pretrained=` model and vLLM's own keywords (KWARG_KEYS), where
    the line is an lm-eval command (`lm_eval`: _LM_EVAL_RUN opens it) of the vllm backend (`--model vllm`) or a
    continuation line that starts with `--model_args` (its command's `--model` on the line before), and it passes one
    of those keywords (its Hugging Face backend's are `parallelize=`, `device_map=`; SGLang's `tp_size=`)."""
    if (m := _MODEL_ARGS.search(msg, 0, 100_000)) is None:
        return
    continuation = msg.lstrip(" \t>").startswith("--model_args")
    backend = _LM_EVAL_BACKEND.search(msg, 0, 100_000) if lm_eval else None
    if not continuation and (backend is None or backend.group(1) not in _LM_EVAL_VLLM):
        return
    pairs = [part.split("=", 1) for part in m.group(1).strip("'\"").split(",") if "=" in part]
    values = {key.strip(): value.strip("'\"") for key, value in pairs}
    if not any(key in values for key in KWARG_KEYS):
        return
    if values.get("pretrained"):
        yield Fact(FactKind.COMMAND_ARG, ("model", values["pretrained"]))
    for key in KWARG_KEYS:
        if key in values and re.fullmatch(_NUMERAL, values[key]):
            yield _kwarg_fact(key, values[key])


def _command(msg: str) -> Iterable[Fact]:
    named = "lm_eval" in msg or "lm-eval" in msg
    lm_eval = named and _LM_EVAL_RUN.match(msg.lstrip(" \t>")) is not None
    if "--model_args" in msg:
        yield from _model_args(msg, lm_eval)
    # an lm-eval command's own flags (`--model vllm`, `--tasks`) are no vLLM's: only what stands before it is read
    if lm_eval:
        return
    if named and (later := _LM_EVAL_LATER.search(msg, 0, 100_000)) is not None:
        msg = msg[:later.start()]
    if any(needle in msg for needle in KWARG_NEEDLES):
        yield from _kwargs(msg)
    if "'-" in msg and (quoted := _QUOTED_ARGS.search(msg, 0, 100_000)) is not None:
        args = " ".join(word.strip("'") for word in quoted.group(0).split())
        if (m := _MODEL_FLAG.search(args)) is not None:
            yield Fact(FactKind.COMMAND_ARG, ("model", m.group(1)))
        yield from _command_facts(args)
        msg = msg[:quoted.start()] + msg[quoted.end():]
    runs = _COMMAND_CONTEXT.search(msg) is not None
    if runs:
        spans = _command_runs(msg)
    elif msg.lstrip().startswith("-") or " -" in msg:
        spans = _flag_spans(msg)
    else:
        return
    said: list[Fact] = []
    for start, end in spans:
        if runs and (model := _served_model(msg, start, end)) is not None:
            said.append(Fact(FactKind.COMMAND_ARG, ("model", model)))
        said += _command_facts(msg[start:min(end, 100_000)])
    yield from said
    if runs and said:
        head = _ENV_PREFIX.match(msg)
        yield Fact(FactKind.COMMAND_ENV, tuple((m.group(1), m.group(2).strip("'\""))
                                               for m in _ENV_ASSIGNMENT.finditer(msg, 0, head.end() if head else 0)))


_DP_EXAMPLE = "data_parallel.py"
"""vLLM's data-parallel example (examples/offline_inference/data_parallel.py), which takes its sizes as `--tp-size`
and `--dp-size` and passes them to LLM(tensor_parallel_size=…) per DP rank; DP issues run it (round twenty-four b,
vllm-ascend#616: `python examples/offline_inference/data_parallel.py --model=… --dp-size=2 --tp-size=8` read as TP
1). Other programs' `--tp-size` (SGLang's launch_server) are not vLLM's."""
_DP_EXAMPLE_SIZE = re.compile(r"(?<![\w-])--(tp|dp)-size(?:=|[ \t]+)['\"]?(\d{1,6})(?![\d.])")
"""(its digits may run into the paste's next words: `--tp-size=8Read from remote error: …`, a terminal's line glued
to the command's)"""


def _command_facts(command: str) -> Iterable[Fact]:
    """The knobs one pasted command's flags set (its model aside)."""
    if _DP_EXAMPLE in command:
        for m in _DP_EXAMPLE_SIZE.finditer(command):
            key = "tensor_parallel_size" if m.group(1) == "tp" else "data_parallel_size"
            yield Fact(FactKind.COMMAND_ARG, (key, int(m.group(2))))
    for m in _COMMAND.finditer(command):
        if (key := command_flag(m.group(1))) is None:
            continue
        if (value := _command_value(key, m.group(2))) is not None:
            yield Fact(FactKind.COMMAND_ARG, (key, value))
    for m in _EAGER_FLAG.finditer(command):
        yield Fact(FactKind.COMMAND_ARG, ("enforce_eager", m.group(1) is None))
    if m := _KV_DTYPE_FLAG.search(command):
        yield Fact(FactKind.COMMAND_ARG, ("kv_cache_dtype", m.group(1)))
    yield from _speculative_flags(command)
    if m := _DTYPE_FLAG.search(command):
        yield Fact(FactKind.COMMAND_ARG, ("dtype", m.group(1)))
    if _EP_FLAG.search(command):
        yield Fact(FactKind.COMMAND_ARG, ("enable_expert_parallel", True))


# The speculative config as a command gives it: `--speculative-config '{"method": "eagle3",
# "num_speculative_tokens": 3, …}'` (JSON), or one field a flag (`--speculative-config.method mtp`,
# `--speculative-config.num_speculative_tokens 3`: vLLM's FlexibleArgumentParser's dotted form). Real pastes
# round twenty-one: both were read only from `non-default args` and the engine line.
_SPEC_JSON = re.compile(r"--speculative[-_]config(?:=|[ \t]+)['\"]?\{([^}\n]{0,2000})\}")
_SPEC_DOTTED = re.compile(r"--speculative[-_]config\.(method|num[-_]speculative[-_]tokens)(?:=|[ \t]+)['\"]?"
                          r"(?!-)([\w\-]{1,40})")
_SPEC_FIELD = {"method": re.compile(r"[\"']method[\"']\s*:\s*[\"']([\w\-]{1,40})[\"']"),
               "num_speculative_tokens": re.compile(r"[\"']num_speculative_tokens[\"']\s*:\s*(\d{1,4})\b")}


def _speculative_flags(command: str) -> Iterable[Fact]:
    found: dict[str, str] = {}
    if m := _SPEC_JSON.search(command):
        found.update((key, f.group(1)) for key, rx in _SPEC_FIELD.items() if (f := rx.search(m.group(1))))
    for m in _SPEC_DOTTED.finditer(command):
        found["method" if m.group(1) == "method" else "num_speculative_tokens"] = m.group(2)
    if method := found.get("method"):
        yield Fact(FactKind.COMMAND_ARG, ("speculative_method", method))
    if (tokens := found.get("num_speculative_tokens", "")).isdigit():
        yield Fact(FactKind.COMMAND_ARG, ("num_speculative_tokens", int(tokens)))


# --------------------------------------------------------------------------------------------
# Config, version, runner, backend, environment (§5.1, §5.2)

_ARGS_KEY = "non-default args: "
NAMESPACE_ARGS = "args: " + NAMESPACE
# v1/engine/core.py EngineCore.__init__ "Initializing a V1 LLM engine (v%s) with config: %s";
# v1/engine/dump_input.py repeats the config when a step fails.
# V0 (llm_engine.py): "Initializing an LLM engine (v0.5.4) with config: …", before 0.4 without the version,
# 0.7.3–0.10 "Initializing a V0 LLM engine (v0.7.4.dev390+gdebd6bbf) with config: …" (vllm#12529).
_ENGINE = re.compile(r"(?:Initializing an? (?:V[01] )?|Dumping input data for V1 )LLM engine"
                     r"(?: \(v([^)\s]{1,200})\))? with config: (.*)", re.DOTALL)
_DEVICE_CONFIG = re.compile(r"(?<![\w.])device_config=(npu|xpu|tpu|hpu)(?![\w.])")
_DEVICE_PLATFORMS = {"npu": "ascend", "xpu": "xpu", "tpu": "tpu", "hpu": "hpu"}
"""The engine line's `device_config=` where it names its platform (real pastes round thirty-five, vllm-ascend#4503:
`device_config=npu` and no platform line kept); `cuda` names none (ROCm's torch calls its devices cuda too), nor
`cpu` (vLLM 0.6's Neuron boots printed it: real pastes round thirty, an inf2 instance)."""
_ENGINE_HEAD = re.compile(r"^Initializing an? (V[01] )?LLM engine(?: \(v([^)\s]{1,200})\))?")
"""The engine line's start alone (a paste cut it before `with config:`; real pastes round thirty-three,
`Initializing a V1 LLM engine (v0.11.2.dev67+g1d642872a.d20251120) with confi`)."""
_CUT_VERSION = re.compile(r" \((?:v[^)\s]{0,200})?")


def _cut_engine_line(rest: str) -> bool:
    """Whether what follows _ENGINE_HEAD is vLLM's line cut short: nothing, a start of ` with config:`, or a version
    cut inside its parentheses (a wrapper's `Initializing an LLM engine for rollout worker 3` is no engine line)."""
    rest = rest.rstrip()
    return " with config:".startswith(rest) or _CUT_VERSION.fullmatch(rest) is not None
# platforms/cuda.py get_attn_backend_cls: "Using %s attention backend out of potential backends";
# platforms/cpu.py: "Using %s backend." (MLA on CPU); older releases: "Using Flash Attention backend".
# 0.25's platforms/cuda.py, a chosen backend: "Using %s backend." with the enum itself,
# `Using AttentionBackendEnum.TRITON_ATTN backend.`
_BACKEND = re.compile(r"Using ([A-Z][A-Z0-9_]{1,40}) attention backend"
                      r"|Using ([A-Z][A-Z0-9_]{1,40}_(?:MLA|ATTN)) backend\."
                      r"|Using AttentionBackendEnum\.([A-Z][A-Z0-9_]{1,40}) backend\."
                      r"|Using (Flash ?Attention|FlashInfer|XFormers|Torch SDPA|Triton MLA|FlashMLA|Triton Attention"
                      r"|Sparse MLA) backend"  # ROCm: "Using Triton Attention backend.", "Using Sparse MLA backend."
                      r"|Using (Triton) backend on V1 engine")  # cuda.py 0.8–0.10
# A shell dump of the environment, or vLLM's own `VLLM_CPU_OMP_THREADS_BIND='auto', …` detail line.
_ENV = re.compile(r"^\s*(?:export\s+)?(VLLM_[A-Z0-9_]{1,80})=('[^']{0,200}'|\"[^\"]{0,200}\"|[^\s,;]{0,200})")
_ENV_ASSIGNMENT = re.compile(r"([A-Za-z_]\w{0,80})=('[^']{0,200}'|\"[^\"]{0,200}\"|[^\s,;]{0,200})")
_ENV_PREFIX = re.compile(r"\s*(?:(?:[A-Za-z_]\w{0,80})=(?:'[^']{0,200}'|\"[^\"]{0,200}\"|[^\s,;]{0,200})\s+){1,16}")
"""The variables a command line sets for its program, before it: `VLLM_USE_V1=0 CUDA_VISIBLE_DEVICES=0 python -m …`."""


_SMART_QUOTES = str.maketrans(_TYPOGRAPHIC_QUOTES)
"""Typographic quotes back to Python's, for a config a forum "smartened" (real pastes round thirty-one, discuss.vllm.ai:
Discourse printed `non-default args: {‘model’: ‘mistralai/…’, ‘max_model_len’: 16384, …}` and `model=‘…’`)."""


def _plain_quotes(text: str) -> str:
    """A config's text with typographic quotes made Python's, where it has no quote of Python's (then every quote was
    smartened; one with both kept a typographic apostrophe inside a value)."""
    return text if "'" in text or '"' in text else text.translate(_SMART_QUOTES)


def _config(msg: str) -> Iterable[Fact]:
    if (args := _non_default(msg)) is not None:
        yield Fact(FactKind.NON_DEFAULT_ARGS, _plain_quotes(args))
    if m := _ENGINE.search(msg):
        version, v1 = m.group(1), "V1 LLM engine" in m.group(0)
        if version is not None:
            yield Fact(FactKind.VERSION, version)
        yield Fact(FactKind.ENGINE_CONFIG, _plain_quotes(m.group(2)))
        if device := _DEVICE_CONFIG.search(m.group(2), 0, 20_000):
            yield Fact(FactKind.PLATFORM, _DEVICE_PLATFORMS[device.group(1)])
    elif (m := _ENGINE_HEAD.search(msg)) is not None and _cut_engine_line(msg[m.end():]):
        # the line cut before its config: the engine it names all the same
        version, v1 = m.group(2), m.group(1) == "V1 "
        if version is not None:
            yield Fact(FactKind.VERSION, version)
    else:
        return
    if not v1:
        yield Fact(FactKind.MODEL_RUNNER, None)  # the V0 engine: no model runner version to name
    yield Fact(FactKind.GENERATION, "V1" if v1 else "V0")


def _non_default(msg: str) -> str | None:
    """The `{…}` after the first `non-default args: ` that opens a dict (_ARGS_BODY), to the end of the
    message (a pasted excerpt may cut it before the closing brace: its plain pairs are still
    read), or 0.4–0.8's `Namespace(…)` after `args: ` (knobs.NAMESPACE)."""
    end = len(msg.rstrip())
    if msg.lstrip().startswith(NAMESPACE_ARGS):  # the api_server's record, not a line that quotes one
        return msg[msg.find(NAMESPACE_ARGS) + len("args: "):end]
    i = msg.find(_ARGS_KEY)
    for _ in range(_ARGS_TRIES):
        if i < 0:
            break
        body = i + len(_ARGS_KEY)
        if _ARGS_BODY.match(msg, body) and body < end:
            return msg[body:end]
        i = msg.find(_ARGS_KEY, body)
    return None


_ARGS_TRIES = 16
"""How many `non-default args: ` of one message are tried for a dict (a line that repeats the words without one
costs no more than a line that says them once)."""


_ARGS_BODY = re.compile(r"\{\s{0,8}(?:['\"\u2018\u201c][A-Za-z_]|\})")
"""A dict's start, its first key quoted (or `{}`; a forum's typographic quotes too, _SMART_QUOTES): no shell pattern
that quotes the wording (real pastes round twenty-two: `$ grep -o "non-default args: {[^}]*}" vllm.log`, then the
record, whose knobs were all lost)."""


# The start-up banner (entrypoints/utils.py, 0.11 and later) draws the logo in block characters
# and prints "version X" beside it; V0's api_server printed "vLLM API server version X".
# A fork's local version may be long (`0.26.1rc0+glm53.flash.nvfp4.luke.clean.r1.vllme75bcfd.b12x58a046f`, 61
# characters after `0.26`: real pastes round seventeen).
_BANNER_VERSION = re.compile(r"(?:vLLM API server version|[█▀▄]\s{1,8}version) (\d{1,3}\.\d{1,4}[\w.+\-]{0,200})")
# The logo's next line names the model served (`█▄█▀ █     █     █     █  model   Qwen/Qwen3.5-0.8B`, 0.15+); real
# pastes round twenty-four: a journald excerpt with the banner and no config line lost the model.
BANNER_MODEL = "█  model "
_BANNER_MODEL = re.compile(BANNER_MODEL + r"\s{0,8}([^\s<>${}]{1,300})\s*$")


# V0 worker/model_runner.py and V1 gpu_model_runner.py load_model: "Starting to load model %s..."
LOADING_MODEL = "Starting to load model "
_LOADING_MODEL = re.compile(r"\s{0,8}" + LOADING_MODEL + r"([^\s<>${}]{1,300}?)\.\.\.")


def _loading(msg: str) -> Iterable[Fact]:
    if m := _LOADING_MODEL.match(msg):  # the record's message, not a sentence that quotes it
        yield Fact(FactKind.MODEL_LOADING, m.group(1))


# config/model.py ModelConfig: "Using max model len %s", the length vLLM resolved for a model; the
# target's comes first, a draft model's config prints its own after it.
MAX_MODEL_LEN_LINE = "Using max model len "
_MAX_MODEL_LEN = re.compile(r"\s{0,8}" + re.escape(MAX_MODEL_LEN_LINE) + rf"({INT})\b")
# platforms/interface.py where a hybrid model's or a quantized KV's page sets the block: "Setting attention
# block size to %d tokens to ensure that attention page size is >= mamba page size." / "… so the quantized
# primary KV page covers …"; platforms/xpu.py "[XPU]Setting attention block size to %d tokens to ensure …".
BLOCK_SIZE_LINE = "Setting attention block size to "
_BLOCK_SIZE = re.compile(r"\s{0,8}(?:\[XPU\])?" + re.escape(BLOCK_SIZE_LINE) + rf"({INT}) tokens")


def _resolved_sizes(msg: str) -> Iterable[Fact]:
    # the record's message, not a sentence that quotes it
    if (m := _MAX_MODEL_LEN.match(msg)) and (n := _int(m.group(1))) > 0:
        yield Fact(FactKind.LOGGED_MAX_MODEL_LEN, n)
    if (m := _BLOCK_SIZE.match(msg)) and (n := _int(m.group(1))) > 0:
        yield Fact(FactKind.SET_BLOCK_SIZE, n)


# config/scheduler.py SchedulerConfig (0.6 on): "Chunked prefill is enabled with max_num_batched_tokens=%d."
CHUNKED_PREFILL = "Chunked prefill is enabled with max_num_batched_tokens="
_CHUNKED_PREFILL = re.compile(re.escape(CHUNKED_PREFILL) + rf"({INT})\b")


CHUNKED_OFF_LINE = "chunked prefill"
_CHUNKED_OFF = re.compile(r"chunked prefill[^\r\n]{0,300}?[Dd]isabl(?:ing|ed)\b|[Dd]isabling\)? chunked prefill")
"""vLLM turning chunked prefill off after the scheduler's line: `… chunked prefill … Disabling …`, a non-GPU platform's
MLA override (`forcing chunked prefill and prefix caching to be disabled.`), v1/engine/core.py's `Disabling chunked
prefill for model without KVCache`, 0.9's `(Disabling) chunked prefill by default`."""


def _chunked(msg: str) -> Iterable[Fact]:
    if m := _CHUNKED_PREFILL.search(msg):
        yield Fact(FactKind.BATCHED_TOKENS, _int(m.group(1)))
    if CHUNKED_OFF_LINE in msg and _CHUNKED_OFF.search(msg):
        yield Fact(FactKind.CHUNKED_DISABLED, True)


def _version(msg: str) -> Iterable[Fact]:
    if m := _BANNER_VERSION.search(msg):
        yield Fact(FactKind.VERSION, m.group(1))
    elif m := _BANNER_MODEL.search(msg):
        yield Fact(FactKind.MODEL_LOADING, m.group(1))


IMAGE_NEEDLE = "vllm/vllm-openai"
# vLLM's images are tagged by release (`vllm/vllm-openai:v0.31.0`, `…:v0.31.0-ubuntu2404`, `vllm/vllm-openai-rocm:
# v0.29.1`); `latest` and `nightly` name none. Real pastes round twenty-two: an A100's notes gave the release only
# as the image it ran.
_IMAGE_TAG = re.compile(r"\bvllm/vllm-openai(?:-rocm|-cpu)?:v?(\d{1,3}\.\d{1,4}\.\d{1,4}(?:\.\d{1,4})?"
                        r"(?:rc\d{1,4})?(?:\.post\d{1,4})?)(?![\w.])")


def _image(msg: str) -> Iterable[Fact]:
    if m := _IMAGE_TAG.search(msg):
        yield Fact(FactKind.IMAGE_VERSION, m.group(1))


PLATFORM_LINE = "Automatically detected platform "
"""vllm/platforms/__init__.py: `Automatically detected platform cuda.` (rocm, cpu, tpu, xpu, neuron; a plugin's
`Platform plugin ascend is activated`): what the log's figures are of (on CPU, node memory; on a TPU worker, its
chips' HBM summed). Real pastes round twenty: every log named it and no report said it."""
_PLATFORM = re.compile(r"(?:Automatically detected platform|Platform plugin) ([A-Za-z][\w\-]{0,40})"
                       r"(?:\.| is activated)")


PLATFORM_SIGNS = (("[aiter] import [module_", "rocm"), ("ACL graph memory profiling", "ascend"),
                  ("HIP out of memory", "rocm"), ("/vllm_ascend/", "ascend"))
"""Lines only one platform's runtime prints, where a paste cut the platform's own line (real pastes round
twenty-seven): AMD's aiter kernel library loading its modules (`[aiter] import [module_aiter_enum] under …`, ROCm
only; a package listing's `aiter==…` is not this), and vllm-ascend's ACL graph memory profiling (`ACL graph memory
profiling is enabled (default since v0.22.1). The current --gpu-memory-utilization=…`, its CUDA-graph line's twin);
and (round thirty-two) ROCm torch's `HIP out of memory.` and a traceback frame in vllm-ascend's code
(`File "/vllm-ascend/vllm_ascend/patch/…"`: a path; a package listing's `vllm_ascend  0.9.0` names no file)."""


def _platform(msg: str) -> Iterable[Fact]:
    if m := _PLATFORM.search(msg):
        yield Fact(FactKind.PLATFORM, m.group(1))
    for sign, platform in PLATFORM_SIGNS:
        if sign in msg:
            yield Fact(FactKind.PLATFORM, platform)


STREAM_CAPTURE = ("when stream is capturing", "cudaErrorStreamCapture")
"""CUDA's errors that only a stream capture raises (torch: "CUDA error: operation not permitted when
stream is capturing", then "Search for `cudaErrorStreamCaptureUnsupported' …"): the boot was in a
CUDA graph capture (club-3090#106: only the second line in the paste, phase unknown)."""


def _stream_capture(msg: str) -> Iterable[Fact]:
    yield Fact(FactKind.PHASE_HINT, Phase.CAPTURE)  # the rule's guard is the words


PADDING_LINE = "padding layers, may waste at most"
"""kv_cache_planning.py (kv_cache_utils.py before 0.33), a hybrid model's KV cache groups: "Add 6
padding layers, may waste at most 60.00% KV cache memory" (vllm#46462)."""
_PADDING = re.compile(rf"Add ({INT}) padding layers, may waste at most ({NUM})% KV cache memory")


def _padding(msg: str) -> Iterable[Fact]:
    if m := _PADDING.search(msg):
        yield Fact(FactKind.NOTE, f"vLLM padded a KV cache group with {m.group(1)} layers: up to {m.group(2)}% of "
                                  f"the KV cache memory may hold no token (a hybrid model's layer groups)")


AUTOTUNER_OOM = "OOM detected, falling back to default tactic"
"""FlashInfer's autotuner (flashinfer/autotuner.py, in vLLM's kernel warmup, which runs after the KV cache is
allocated): a tactic it tried ran out of memory, so it kept an untuned one (vllm PR 40887: "it frequently OOMs and
silently falls back to untuned default kernel tactics"; real pastes round twenty: club-3090#613, two on a 5090)."""


def _autotuner_oom(msg: str) -> Iterable[Fact]:
    if AUTOTUNER_OOM in msg:
        yield Fact(FactKind.NOTE, "FlashInfer's autotuner ran out of memory trying a kernel tactic in kernel warmup "
                                  "and fell back to its default (`OOM detected, falling back to default tactic`): the "
                                  "device had no room left for the tactic, and those kernels run untuned")


ENCODER_BUDGET = "Encoder cache will be initialized with a budget of"
_ENCODER_BUDGET = re.compile(rf"{ENCODER_BUDGET} ({CINT}) tokens, and profiled with ({INT}) ([\w ]{{1,40}}?) items? of")
HYBRID_OFF = "Hybrid KV cache manager is disabled"
LORA_LINE = "Using PunicaWrapper"


def _startup_extras(msg: str) -> Iterable[Fact]:
    """What else takes memory or shapes the KV cache at startup, said as notes (real pastes round twenty-one):
    - gpu_model_runner.py profile_run's encoder line: the profile runs the encoder on that many items of the
      largest size, their outputs counted in the activation peak;
    - kv_cache_utils.py: a hybrid model (sliding-window or Mamba layers) whose KV cache manager is off gives every
      layer full-length KV (unify_hybrid_kv_cache_specs), so its token count means less memory saved;
    - lora/punica_wrapper's selector: LoRA is on, and its adapter slots (max_loras × max_lora_rank buffers) are
      allocated with the model, inside `Model loading took` (V1)."""
    if (m := _ENCODER_BUDGET.search(msg)) is not None:
        yield Fact(FactKind.NOTE, f"the profile ran the multimodal encoder on {m.group(2)} {m.group(3).strip()} "
                                  f"item(s) of the largest size (an encoder cache budget of {m.group(1)} tokens): "
                                  f"its outputs are in the activation peak")
    elif HYBRID_OFF in msg:
        yield Fact(FactKind.NOTE, "vLLM's hybrid KV cache manager is off for this hybrid model: every layer, "
                                  "sliding-window or Mamba ones too, holds full-length KV, so the cache holds fewer "
                                  "tokens than the same memory would with it on")
    elif LORA_LINE in msg:
        yield Fact(FactKind.NOTE, "LoRA is on (vLLM's Punica wrapper): the adapters' slots are allocated with the "
                                  "model, inside the weights figure")


EAGER_LINE = "Cudagraph is disabled under eager mode"
"""config/vllm.py, printed only where enforce_eager is set (vllm#27378: a paste with no config line)."""
DP_EAGER_LINE = "Forcing enforce eager to be True"
"""platforms/cuda.py of 0.8–0.9 under data parallel: `Data Parallel: Forcing enforce eager to be True since DP is
currently not supported with CUDA Graphs.` (real pastes round thirty-five, vllm#18567)."""


MTP_LINE = "Detected MTP model. Sharing target model"
"""The proposer's info once it loaded an MTP drafter (v1/spec_decode/eagle.py, llm_base_proposer.py from 0.20: "…
embedding weights with the draft model.", "… lm_head weights …"): speculative decoding by MTP, where no config line
says so (real pastes round twenty-three: a log viewer's export of an MTP boot named no speculative method)."""


def _mtp(msg: str) -> Iterable[Fact]:
    yield Fact(FactKind.MTP_DRAFTER, "mtp")  # the rule's guard is the line


COMPILED_LINE, LOADED_LINE = "Compiling a graph for ", "Directly load "
"""vLLM's lines of a graph compiled in the boot (backends.py: `Compiling a graph for dynamic shape|compile range …
takes …`, each worker, every release with torch.compile; where a cached one failed to load, decorators.py's
`Compiling model again due to a load failure` comes before it) and of one loaded from its compile cache
(backends.py's `Directly load the compiled graph(s) for …`, decorators.py's `Directly load AOT compilation from
path`, 0.33+'s default); from 0.33 each carries `[backbone]` or `[eagle_head]`."""


def _compile(msg: str) -> Iterable[Fact]:
    if COMPILED_LINE in msg:
        yield Fact(FactKind.COMPILE, COMPILE_MISS)
    elif LOADED_LINE in msg:
        yield Fact(FactKind.COMPILE, COMPILE_HIT)


def _eager(msg: str) -> Iterable[Fact]:
    yield Fact(FactKind.EAGER, True)  # the rule's guard is the line


def _runner(msg: str) -> Iterable[Fact]:
    # gpu_worker.py / cpu_worker.py: info_once "Using V2 Model Runner"; config/vllm.py: warning
    # "Model Runner V2 requires Triton; using the V1 model runner instead."
    if "Using V2 Model Runner" in msg:
        yield Fact(FactKind.MODEL_RUNNER, "V2")
    elif "using the V1 model runner" in msg:
        yield Fact(FactKind.MODEL_RUNNER, "V1")


def backend(msg: str) -> Iterable[Fact]:
    if m := _BACKEND.search(msg):
        yield Fact(FactKind.ATTENTION_BACKEND, next(g for g in m.groups() if g))
        if "backend on V1 engine" in msg:  # cuda.py 0.8–0.10: `Using Flash Attention backend on V1 engine.`
            yield Fact(FactKind.GENERATION, "V1")


def _env(msg: str) -> Iterable[Fact]:
    if m := _ENV.match(msg):
        yield Fact(FactKind.ENV, (m.group(1), m.group(2).strip("'\"")))
    if "Applying persisted startup plan" in msg:
        yield Fact(FactKind.ENV, ("VLLM_ENABLE_STARTUP_PLAN", "1"))
        yield Fact(FactKind.NOTE, "a persisted startup plan was applied (VLLM_ENABLE_STARTUP_PLAN=1): memory profiling "
                                  "was skipped and the KV size came from the plan")


def _ere(text: str) -> str:
    """A literal as a POSIX ERE (re.escape would add escapes grep warns about)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


RULES: tuple[Rule, ...] = (
    Rule("load", (*LOADED_WEIGHTS, "Pre-loading model weights on"),
         r"Model loading took -?[0-9.]+ (GiB|GB)|Loading model weights took|Pre-loading model weights on", _load),
    Rule("available", ("Available KV cache memory", "as specified by kv_cache_memory_bytes"),
         r"Available KV cache memory: -?[0-9.]+ GiB|as specified by kv_cache_memory_bytes", _available),
    Rule("kv_size", "KV cache size: ", r"KV cache size: [0-9,]+ tokens", _kv_size),
    Rule("concurrency", "Maximum concurrency for", r"Maximum concurrency for [0-9,]+ tokens", concurrency),
    Rule("autofit", ("Auto-fit max_model_len", "auto reduced max_model_len"),
         r"Auto-fit max_model_len: (reduced|full model|using)|--max-model-len auto reduced", _autofit),
    Rule("extensible", ("Memory after warmup", "Extended KV cache to", "caps this instance"),
         r"Memory after warmup: |Extended KV cache to [0-9]+ blocks|caps this instance at", _extensible),
    Rule("graphs", ("Graph capturing finished", " graph pool memory: ", "CUDA graph memory: "),
         r"Graph capturing finished in [0-9]+ secs?, took|(CUDA|ACL) graph pool memory: -?[0-9.]+ GiB \(actual"
         r"|Estimated (MRV2 )?CUDA graph memory: -?[0-9.]+ GiB", _graphs),
    Rule("per_graph", "MiB per-graph", r"MiB first-capture", _per_graph),
    Rule("advisory", ("--gpu-memory-utilization=", "profiling is disabled", "will be enabled by default"),
         r"is equivalent to --gpu-memory-utilization=|CUDA graph memory "
         r"profiling is disabled", _advisory),
    Rule("actual", ("Actual usage", "Current kv cache memory", "Current KV cache memory"),
         r"Actual usage( is|:) |Current kv cache memory in use|Current KV cache memory:",
         _actual),
    Rule("budget", ("Free memory on device", "esired GPU memory utilization", "Requested memory:",
                    "requested memory:", "engine's budget", "requested GPU memory:"),
         r"Free memory on device|Requested memory: |worker requested memory|requested GPU memory: ", _budget),
    Rule("profile", ("Total non KV cache memory", "total_gpu_memory", "model weights take", "blocks: "),
         r"Total non KV cache memory|x gpu_memory_utilization|model weights take|total_gpu_memory="
         r"|# (" + "|".join(KV_BLOCK_DEVICES) + ") blocks",
         _profile),
    Rule("profile_table", ("total_gpu_memory", "gpu_memory_utilization", "vLLM instance can use", "model weights take",
                           "non_torch_memory", "activation peak memory", "available_kv_cache_memory"),
         r"^(total_gpu_memory|the current vLLM instance can use|non_torch_memory|PyTorch activation peak memory"
         r"|available_kv_cache_memory)[[:space:]]", _profile_table),
    Rule("npu", ", total memory: ", r"Available memory: [0-9]+, total memory: ", _npu),
    Rule("tpu", (TPU_HBM_LINE, TPU_EXCEEDS_LINE), f"{TPU_HBM_LINE}|{TPU_EXCEEDS_LINE}", _tpu),
    Rule("xpu", XPU_PROFILE_LINE, r"(Before|After) memory profiling run, ", _xpu),
    Rule("hpu", "reserved for KV cache", r"GiB reserved for KV cache", _hpu),
    Rule("num_gpu_blocks", "num_gpu_blocks is: ", r"num_gpu_blocks is: ", _num_gpu_blocks),
    Rule("b12x", "B12X sparse DCP", r"B12X sparse DCP transient", _b12x),
    Rule("cpu", ("set (",), r"(Auto|Explicitly) set \([0-9.-]+/[0-9.]+\) GiB for KV cache", _cpu),
    Rule("kv_check", ("To serve at least one request", "No available memory for the cache blocks",
                      "Cannot auto-fit max_model_len", "than the maximum number of tokens that can be"),
         r"To serve at least one request|No available memory for the cache blocks|Cannot auto-fit max_model_len"
         r"|than the maximum number of tokens that can be",
         _kv_check),
    Rule("startup", ("on startup is less than", "on kv cache allocation is less"),
         r"on startup is less than|on kv cache allocation is less", _startup),
    Rule("failure", tuple(c.anchor for c in CAUSES), "|".join(_ere(c.anchor) for c in CAUSES), _failure),
    Rule("cut_error", "ERROR", r"ERROR [0-9][0-9]-[0-9][0-9] [0-9:.,]+( \[?[^] ]*)?$", _cut_error),
    Rule("call_phase", ("method", '", line ', "("),
         r"Error executing meth|while processing method|\", line [0-9]+(, in (" + "|".join(FRAME_CALLS)
         + r")([^A-Za-z0-9_]|$)| in [A-Za-z_<*])|" + SOURCE_CALL_HEAD, _call_phase),
    Rule("ray", "x across cluster]", r"x across cluster\]", _ray),
    Rule("parallel_state", PARALLEL_STATE_LINE, PARALLEL_STATE_LINE, _parallel_state),
    Rule("compile_cache_rank", COMPILE_CACHE_LINES, r"(" + "|".join(COMPILE_CACHE_LINES) + r").*/rank_[0-9]+_[0-9]+",
         _compile_cache_rank),
    Rule("cp_world", (CP_WORLD_LINE, DCP_WORLD_LINE), f"{CP_WORLD_LINE}|{DCP_WORLD_LINE}", _cp_world),
    Rule("world_rank", WORLD_RANK_LINE, "world_size=[0-9]+ rank=[0-9]+ local_rank=", _world_rank),
    Rule("command", ("--", "-tp", "-pp", "-dp", "-dcp", SERVE_NEEDLE) + KWARG_NEEDLES,
         r"(--(tensor|pipeline|data)[-_]parallel[-_]size|-tp|-pp|-dp)[= ]|--(no[-_])?enforce[-_]eager|vllm serve "
         r"|(_parallel_size|max_model_len|gpu_memory_utilization|block_size)=[0-9]|enforce_eager *= *(True|False)",
         _command),
    Rule("config", ("non-default args: ", "LLM engine", NAMESPACE_ARGS),
         r"non-default args: |LLM engine (\(v[^)]*\) )?with config|args: Namespace\(",
         _config),
    Rule("loading", LOADING_MODEL, LOADING_MODEL + r"[^ ]+\.\.\.", _loading),
    Rule("chunked", (CHUNKED_PREFILL, CHUNKED_OFF_LINE), CHUNKED_PREFILL + "[0-9]|chunked prefill.*[Dd]isabling",
         _chunked),
    Rule("resolved_sizes", (MAX_MODEL_LEN_LINE, BLOCK_SIZE_LINE),
         _ere(MAX_MODEL_LEN_LINE) + "[0-9]|" + _ere(BLOCK_SIZE_LINE) + "[0-9]", _resolved_sizes),
    Rule("version", (" version ", BANNER_MODEL), r"vLLM API server version|[█▀▄] +version [0-9]|█  model ", _version),
    Rule("image", IMAGE_NEEDLE, r"vllm/vllm-openai(-rocm|-cpu)?:v?[0-9]+\.[0-9]+\.[0-9]", _image),
    Rule("platform", (PLATFORM_LINE, "Platform plugin ", *(sign for sign, _ in PLATFORM_SIGNS)),
         "Automatically detected platform |Platform plugin |" + "|".join(_ere(sign) for sign, _ in PLATFORM_SIGNS),
         _platform),
    Rule("runner", ("Using V2 Model Runner", "using the V1 model runner"),
         r"Using V2 Model Runner|using the V1 model runner", _runner),
    Rule("backend", " backend", r"Using [A-Za-z_. ]+ (attention )?backend", backend),
    Rule("eager", (EAGER_LINE, DP_EAGER_LINE), f"{EAGER_LINE}|{DP_EAGER_LINE}", _eager),
    Rule("mtp", MTP_LINE, MTP_LINE, _mtp),
    Rule("compile", (COMPILED_LINE, LOADED_LINE), f"{COMPILED_LINE}|{LOADED_LINE}", _compile),
    Rule("autotuner_oom", AUTOTUNER_OOM, AUTOTUNER_OOM, _autotuner_oom),
    Rule("startup_extras", (ENCODER_BUDGET, HYBRID_OFF, LORA_LINE),
         f"{ENCODER_BUDGET}|{HYBRID_OFF}|{LORA_LINE}", _startup_extras),
    Rule("padding", PADDING_LINE, PADDING_LINE, _padding),
    Rule("stream_capture", STREAM_CAPTURE, "|".join(STREAM_CAPTURE), _stream_capture),
    Rule("env", ("VLLM_", "persisted startup plan"), r"^(export )?VLLM_[A-Z0-9_]+=|persisted startup plan", _env),
)


_LOCALIZED = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+(?:\.\d{1,12})?|\d{1,3}(?:\.\d{3})+,\d{1,12}|\d{1,12},\d{1,12})"
                        r"(?=\s?(?:GiB|MiB|KiB|GB|MB|secs?\b|seconds|s\b|x\b))")
"""A figure before a unit written with thousands separators or a decimal comma, as a log that
passed through a spreadsheet or a localized tool has them: `1,234.56 GiB`, `1.234,56 GiB`,
`2,35 GiB`. vLLM's own are plain (`%.2f`), and its patterns read plain figures only, so these were
dropped without a word. A lone comma before exactly three digits is a thousands separator
(`2,350 GiB`); before one, two or more than three, a decimal comma (`2,35`, vLLM prints 2 or 4
decimals); where both marks appear, the last is the decimal one."""


def _plain_figure(m: re.Match[str]) -> str:
    figure = m.group(1)
    if "." in figure and "," in figure:
        thousands, decimal = (",", ".") if figure.rfind(".") > figure.rfind(",") else (".", ",")
        return figure.replace(thousands, "").replace(decimal, ".")
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+", figure):
        return figure.replace(",", "")
    return figure.replace(",", ".")


def facts_from_message(msg: str, rules: tuple[Rule, ...] = RULES) -> list[Fact]:
    """Every fact one message states, in catalogue order; a figure out of range (a garbled or
    doctored line, `in_log_range`) is dropped, not carried into the report. Figures with
    thousands separators or a decimal comma read as the plain ones they stand for (_LOCALIZED)."""
    if "," in msg:
        msg = _LOCALIZED.sub(_plain_figure, msg)
    out: list[Fact] = []
    for rule in rules:
        if rule.applies(msg):
            out.extend(f for f in rule.facts(msg) if in_log_range(f.value))
    return out


def in_log_range(value: Any) -> bool:
    """A number a log may state: an integer within INT64_MAX (bytes no device exceeds), another
    number within LOG_FLOAT_LIMIT (and not NaN); checked inside tuples, lists and graph estimates."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= INT64_MAX
    if isinstance(value, float):
        return abs(value) <= LOG_FLOAT_LIMIT  # not NaN either: NaN compares false
    if isinstance(value, GraphEstimate):
        return abs(value.bytes) <= INT64_MAX
    if isinstance(value, (tuple, list)):
        return all(in_log_range(v) for v in value)
    return True


def grep_pattern() -> str:
    """The catalogue's anchors as one ERE (what the benchmark gives `grep -cE`)."""
    return "|".join(f"({rule.grep})" for rule in RULES)
