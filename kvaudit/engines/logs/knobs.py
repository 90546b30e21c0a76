"""Knobs from the two config lines vLLM prints at startup.

- `non-default args: {…}` (vllm/entrypoints/serve/utils/api_utils.py `log_non_default_args`): a
  Python dict repr of what the user changed. It is read with `ast.literal_eval` and never
  evaluated; values that are not literals (an enum, a config object's repr) make the whole
  literal fail, so a per-key regex picks out the plain values instead.
- `Initializing a V1 LLM engine (vX) with config: model='…', speculative_config=…, …`
  (vllm/config/vllm.py `VllmConfig.__str__`): the resolved config, `key=value` pairs whose values
  may themselves contain commas, so only the keys kvaudit needs are picked out, each by its own
  anchored pattern.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Mapping
from typing import Any

from kvaudit.config import INT_KEYS, MODELLED_KEYS, STR_KEYS

LITERAL_CHARS = 200_000
"""A dict literal longer than this is not parsed as a whole (ast is slow and deep on hostile text)."""

_INT_KEYS = tuple(k for k in INT_KEYS if k != "max_model_len") + ("pipeline_parallel_size", "data_parallel_size",
                                                                  "prefill_context_parallel_size")
_STR_KEYS = tuple(k for k in STR_KEYS if k != "speculative_method")


def literal_dict(text: str) -> dict[str, Any] | None:
    """A dict literal, or None when the text is not one (never raises on any input)."""
    if len(text) > LITERAL_CHARS:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in hostile text warn (SyntaxWarning)
            value = ast.literal_eval(text)
    except Exception:  # noqa: BLE001 - literal_eval raises ValueError, SyntaxError, TypeError,
        return None    # MemoryError, RecursionError … on hostile input; any of them means "not a literal".
    return value if isinstance(value, dict) else None


# One `'key': value` pair whose value is a plain literal: a quoted string, a number, a bool/None,
# or a flat list / dict (no nesting).
_VALUE = (r"""'(?:[^'\\]|\\.){0,2000}'|"(?:[^"\\]|\\.){0,2000}"|-?\d{1,20}(?:\.\d{1,20})?(?:[eE][-+]?\d{1,3})?"""
          r"""|True|False|None|\[[^\[\]]{0,20000}\]|\{[^{}]{0,20000}\}""")
_PAIR = re.compile(r"""['"](\w{1,80})['"]:\s*(""" + _VALUE + ")")


def pairs_fallback(text: str) -> dict[str, Any]:
    """The plain `'key': value` pairs of a dict repr that is not a literal as a whole, at its top
    level only: a nested dict's keys are not the user's flags, and a paste cut inside one
    (`'compilation_config': {'mode': None, …, 'backend': 'inductor', …` cut at a column, real pastes
    round twelve) left them read as `--backend inductor`. The first occurrence of a key wins."""
    out: dict[str, Any] = {}
    text = text[: LITERAL_CHARS * 5]
    top = 1 if text.lstrip().startswith("{") else 0
    depth, pos, quote, esc = 0, 0, "", -1
    for m in _PAIR.finditer(text):
        depth, quote, esc = _nesting(text, pos, m.start(), depth, quote, esc)
        pos = m.start()  # a pair not taken is scanned as text: its value may be no balanced literal
        if depth != top or quote or m.group(1) in out:
            continue
        value = _literal(m.group(2))
        if value is not _BAD:
            out[m.group(1)] = value
            pos = m.end()  # a literal's brackets and quotes are balanced
    return out


_STRUCTURE = re.compile(r"""[{}\[\]()'"\\]""")
"""The characters _nesting looks at; the regex skips the rest in C."""


def _nesting(text: str, start: int, end: int, depth: int, quote: str, escaped: int) -> tuple[int, str, int]:
    """The bracket depth, open quote (if any) and escaped offset at `end`, from those at `start`:
    brackets inside a quoted string do not count. Linear in end − start."""
    for m in _STRUCTURE.finditer(text, start, end):
        i, c = m.start(), m.group()
        if i == escaped:
            continue
        if quote:
            if c == "\\":
                escaped = i + 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
    return depth, quote, escaped


_BAD = object()


def _literal(text: str) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.literal_eval(text)
    except Exception:  # noqa: BLE001 - see literal_dict
        return _BAD


def non_default_args(text: str) -> dict[str, Any]:
    """The knobs of a `non-default args:` dict, literal or not, or of an `args: Namespace(…)` line."""
    if text.startswith(NAMESPACE):
        return namespace_pairs(text)
    parsed = literal_dict(text)
    return parsed if parsed is not None else pairs_fallback(text)


NAMESPACE = "Namespace("
"""vLLM 0.4–0.8's api_server printed its parsed command line, defaults included: `args: Namespace(
subparser='serve', model_tag='M', …, tensor_parallel_size=2, …)` (vllm#15105)."""
_NS_PAIR = re.compile(r"(\w{1,80})=(" + _VALUE + ")")
_NS_OPAQUE = re.compile(r"\w{1,80}=<[^<>\n]{1,300}>")


def namespace_pairs(text: str) -> dict[str, Any]:
    """The plain `key=value` pairs of a Namespace repr, read one after another from its start. An
    enum's or a function's repr (`config_format=<ConfigFormat.AUTO: 'auto'>`, early in 0.8's) is
    passed over: it ends at its `>`. Any other value that is no plain literal (an object's repr, a
    string longer than a literal is read) ends the reading, as does a paste's cut: where that value
    ends is not known, and a `, key=` inside it is no knob."""
    out: dict[str, Any] = {}
    i = len(NAMESPACE)
    while True:
        if (m := _NS_PAIR.match(text, i)) is not None and text.startswith((", ", ")"), m.end()):
            if (value := _literal(m.group(2))) is _BAD:
                break
            out.setdefault(m.group(1), value)
        elif (m := _NS_OPAQUE.match(text, i)) is None or not text.startswith((", ", ")"), m.end()):
            break
        i = m.end() + 2
    return out


def _sub_dict(value: Any) -> Mapping[str, Any] | None:
    """speculative_config / compilation_config arrive as a dict, or as the JSON text given on the CLI."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            parsed = literal_dict(value)
        return parsed if isinstance(parsed, Mapping) else None
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sizes(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, (list, tuple)) and all(_int(v) is not None for v in value):
        return tuple(value)
    return None


def knobs_from_args(args: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """AuditConfig fields (vLLM's names) and the remaining args (for extra_args, JSON-safe)."""
    known: dict[str, Any] = {}
    for key in _INT_KEYS:
        if (v := _int(args.get(key))) is not None:
            known[key] = v
    for key in _STR_KEYS:
        if isinstance(args.get(key), str):
            known[key] = args[key]
    tag = args.get("model_tag")
    if isinstance(tag, str) and ("model" not in known or "".join(known["model"].split()) == tag != known["model"]):
        # `vllm serve MODEL` stores the positional here; where `model` differs from it by a blank alone,
        # a paste's wrap split the model's name (`'model': 'Qwe` / `n2-7B-Instruct'`: real pastes round seventeen)
        known["model"] = tag
    if (v := _int(args.get("max_model_len"))) is not None and v > 0:
        known["max_model_len"] = v  # -1 asks for auto-fit: the length comes from the auto-fit line
    gmu = args.get("gpu_memory_utilization")
    if isinstance(gmu, (int, float)) and not isinstance(gmu, bool) and 0 < gmu <= 1:
        known["gpu_memory_utilization"] = float(gmu)
    for key in ("enforce_eager", "enable_chunked_prefill"):
        if isinstance(args.get(key), bool):
            known[key] = args[key]
    if (spec := _sub_dict(args.get("speculative_config"))) is not None:
        if isinstance(spec.get("method"), str):
            known["speculative_method"] = spec["method"]
        if (v := _int(spec.get("num_speculative_tokens"))) is not None:
            known["num_speculative_tokens"] = v
    if (sizes := _sizes(args.get("cudagraph_capture_sizes"))) is not None:
        known["cudagraph_capture_sizes"] = sizes
    if (comp := _sub_dict(args.get("compilation_config"))) is not None:
        if (sizes := _sizes(comp.get("cudagraph_capture_sizes"))) is not None:
            known.setdefault("cudagraph_capture_sizes", sizes)
    modelled = {*MODELLED_KEYS, *_INT_KEYS, "model_tag"} - {"speculative_method"}  # from speculative_config only
    extra = {str(k): json_safe(v) for k, v in args.items() if k not in modelled}
    return known, extra


def json_safe(value: Any, depth: int = 0) -> Any:
    """Plain JSON values; anything else (sets, bytes, tuples as keys, nan) becomes its repr."""
    if depth > 20:
        return repr(value)[:200]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in value]
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    return repr(value)[:200]


# VllmConfig.__str__ keys, each as `, key=value` (model is first, with no comma before it).
_ENGINE_INT = {key: re.compile(rf"{key}=(\d{{1,12}})(?=,|$)") for key in (
    "max_seq_len", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
    "decode_context_parallel_size", "prefill_context_parallel_size")}
_ENGINE_MODEL = re.compile(r"^model='((?:[^'\\]|\\.){0,2000})'")
_ENGINE_EAGER = re.compile(r"enforce_eager=(True|False)(?=,|$)")
_ENGINE_KV_DTYPE = re.compile(r"kv_cache_dtype=([\w.]{1,40})(?=,|$)")
_ENGINE_LOAD = re.compile(r"load_format=([\w.]{1,40})(?=,|$)")
# SchedulerConfig's flag as the config line prints it: `chunked_prefill_enabled=True` (0.6–0.2x),
# `enable_chunked_prefill=True` (0.22); real pastes round seventeen (logs from 0.9.2 to 0.23.0).
# ModelConfig.quantization as resolved (the checkpoint's own config may set it): `quantization=fp8`, `=None`.
_ENGINE_QUANT = re.compile(r"quantization=([\w.\-]{1,40})(?=,|$)")
# ModelConfig.dtype as resolved: `dtype=torch.bfloat16` (`kv_cache_dtype=` is another key: _field).
_ENGINE_DTYPE = re.compile(r"dtype=(?:torch\.)?(\w{1,20})(?=,|$)")
_ENGINE_CHUNKED = {key: re.compile(rf"{key}=(True|False)(?=,|$)")
                   for key in ("chunked_prefill_enabled", "enable_chunked_prefill")}
# SpeculativeConfig.__repr__ (vllm/config/speculative.py):
# "SpeculativeConfig(method='mtp', model=…, num_spec_tokens=1)". Matched only where the key is
# (found with str.find), so a line that repeats the key costs one bounded match per repeat.
_SPEC_KEY = "speculative_config=SpeculativeConfig("
_ENGINE_SPEC = re.compile(r"speculative_config=SpeculativeConfig\(method='([^']{1,80})'[^\n]{0,2000}?"
                          r"num_spec_tokens=(\d{1,6})\)")
# CompilationConfig.__repr__ is the str() of a dict (single quotes); older releases printed JSON.
_COMPILATION_KEY = "compilation_config="
_SIZES_KEY = "cudagraph_capture_sizes"
_SIZES_WINDOW = 200_000
"""How far after `compilation_config=` the capture sizes may be."""
_ENGINE_SIZES = re.compile(r"""['"]cudagraph_capture_sizes['"]:\s*\[([\d,\s]{0,20000})\]""")
_MODE_KEY = "cudagraph_mode"
# CompilationConfig's cudagraph_mode as the engine line prints it: the enum's repr in the dict
# (`'cudagraph_mode': <CUDAGraphMode.NONE: 0>`, real pastes round twenty-two: an eager 0.28 boot), its
# value in older JSON (`"cudagraph_mode":0`). Only NONE is read: no graphs are profiled or captured.
_ENGINE_MODE_NONE = re.compile(r"""['"]cudagraph_mode['"]:\s*(?:<CUDAGraphMode\.NONE: 0>|0(?=[,}\s]))""")


def knobs_from_engine_line(config: str) -> dict[str, Any]:
    known: dict[str, Any] = {}
    names = {"max_seq_len": "max_model_len"}
    for key, rx in _ENGINE_INT.items():
        if m := _field(config, key, rx):
            known[names.get(key, key)] = int(m.group(1))
    if m := _ENGINE_MODEL.search(config):
        known["model"] = m.group(1)
    if m := _field(config, "enforce_eager", _ENGINE_EAGER):
        known["enforce_eager"] = m.group(1) == "True"
    if m := _field(config, "quantization", _ENGINE_QUANT):
        known["quantization"] = None if m.group(1) == "None" else m.group(1)
    if m := _field(config, "dtype", _ENGINE_DTYPE):
        known["dtype"] = m.group(1)
    for key, rx in _ENGINE_CHUNKED.items():
        if m := _field(config, key, rx):
            known["enable_chunked_prefill"] = m.group(1) == "True"
    if m := _field(config, "kv_cache_dtype", _ENGINE_KV_DTYPE):
        known["kv_cache_dtype"] = m.group(1)
    if m := _field(config, "load_format", _ENGINE_LOAD):
        # Older releases printed the enum (`LoadFormat.DUMMY`); vLLM's own spelling is lower case.
        known["load_format"] = m.group(1).rsplit(".", 1)[-1].lower()
    if m := _keyed_match(config, _SPEC_KEY, _ENGINE_SPEC, 0):
        known["speculative_method"] = m.group(1)
        known["num_speculative_tokens"] = int(m.group(2))
    elif re.search(r"(?:^|, )speculative_config=None(?=,|$)", config):
        known["speculative_method"] = None
    start = config.find(_COMPILATION_KEY)
    if start >= 0 and (m := _keyed_match(config, _SIZES_KEY, _ENGINE_SIZES, -1, start, start + _SIZES_WINDOW)):
        known["cudagraph_capture_sizes"] = tuple(int(x) for x in re.findall(r"\d{1,12}", m.group(1)))
    if start >= 0 and _keyed_match(config, _MODE_KEY, _ENGINE_MODE_NONE, -1, start, start + _SIZES_WINDOW):
        known["cudagraph_mode"] = "NONE"
    return known


def _field(config: str, key: str, rx: re.Pattern[str]) -> re.Match[str] | None:
    """`key=value` at the start of the config or after `, ` (found with str.find: linear), or after a
    person's `... ` / `… ` where the paste left keys out (real pastes round seventeen)."""
    i = config.find(key + "=")
    while i >= 0:
        if (i == 0 or config.startswith(", ", i - 2) or config.startswith("... ", i - 4)
                or config.startswith("… ", i - 2)) and (m := rx.match(config, i)):
            return m
        i = config.find(key + "=", i + 1)
    return None


def _keyed_match(text: str, key: str, rx: re.Pattern[str], back: int, start: int = 0,
                 stop: int | None = None) -> re.Match[str] | None:
    """The first match of `rx` that begins `back` characters before an occurrence of `key`: the
    key is found with str.find, so every attempt is anchored and the scan stays linear."""
    stop = len(text) if stop is None else min(stop, len(text))
    i = text.find(key, start, stop)
    while i >= 0:
        if m := rx.match(text, max(i + back, 0)):
            return m
        i = text.find(key, i + 1, stop)
    return None
