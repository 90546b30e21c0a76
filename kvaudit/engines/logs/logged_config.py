"""The config a boot's logs show: what the user typed (`non-default args`, or a pasted command
line) under what vLLM resolved (the engine config line), the served max_model_len, and the
parallel sizes (layout.py: stated, implied by the worker names, or only bounded from below).
"""

from __future__ import annotations

from kvaudit.config import OUTER_PARALLEL_SIZES, AuditConfig
from kvaudit.engines.logs.facts import FactKind, in_log_range, offline_call_model
from kvaudit.engines.logs.knobs import knobs_from_args, non_default_args
from kvaudit.engines.logs.layout import Layout
from kvaudit.engines.logs.ranks import (
    Boot,
    Located,
    boot_layout,
    command_args,
    engine_config,
    engine_first,
    engine_last,
)
from kvaudit.engines.logs.scan import COMMAND_WINDOW


def build_config(boot: Boot) -> tuple[AuditConfig, Layout]:
    """The config, and the layout it took its parallel sizes from (whose notes the report carries)."""
    engine = boot.engine
    args_text = engine_first(engine, FactKind.NON_DEFAULT_ARGS)
    known, extra = knobs_from_args(non_default_args(args_text)) if args_text is not None else ({}, {})
    resolved = engine_config(engine)
    # The engine line shows what vLLM resolved (defaults filled in, capture sizes expanded), so it
    # wins over what the user typed; gpu_memory_utilization is not on it.
    merged = {**known, **resolved}
    for key in ("quantization", "dtype"):
        if key in resolved:
            extra[key] = resolved[key]  # an extra arg (diff.QUANTIZATION, diff.DTYPE), as vLLM resolved it
    if (batched := engine_last(engine, FactKind.BATCHED_TOKENS)) is not None:
        merged["max_num_batched_tokens"] = batched  # the scheduler's own line: the value it resolved
        # …which it prints only with chunked prefill on (`Chunked prefill is enabled with …`), unless a
        # later config line turns it off again (pooling models: "…; disabling both.")
        # what vLLM did, over what was typed (V1 0.10 printed it beside `'enable_chunked_prefill': False`), where the
        # engine line, what vLLM ran, does not state it
        if "enable_chunked_prefill" not in resolved:
            merged["enable_chunked_prefill"] = not engine.get(FactKind.CHUNKED_DISABLED)
    command = command_args(engine)
    if "gpu_memory_utilization" not in merged:
        printed = [f.value for f in engine.get(FactKind.GMU, []) if 0 < f.value <= 1]
        typed = command.get("gpu_memory_utilization")
        merged["gpu_memory_utilization"] = (printed[0] if printed
                                            else typed if isinstance(typed, float) and 0 < typed <= 1 else None)
    typed = known.get("max_model_len")
    merged["max_model_len"] = (_served_length(engine) or resolved.get("max_model_len")
                               or (typed if isinstance(typed, int) and typed > 0 else None)  # not -1 (auto)
                               or engine_first(engine, FactKind.LOGGED_MAX_MODEL_LEN) or typed
                               or (command.get("max_model_len") or None))
    if merged.get("model") is None and isinstance(command.get("model"), str):
        merged["model"] = command["model"]  # `vllm serve MODEL` pasted at a line's start
    if merged.get("model") is None:  # an offline call's `LLM(model="…")`, its keywords read as a command's
        merged["model"] = next((m for scan in boot.scans
                                if (m := offline_call_model(scan.text[:COMMAND_WINDOW])) is not None), None)
    if merged.get("model") is None:
        merged["model"] = engine_first(engine, FactKind.MODEL_LOADING)
    if merged.get("kv_cache_dtype") is None and isinstance(command.get("kv_cache_dtype"), str):
        merged["kv_cache_dtype"] = command["kv_cache_dtype"]
    if "block_size" not in merged and command.get("block_size"):
        merged["block_size"] = command["block_size"]
    for key in ("max_num_seqs", "max_num_batched_tokens"):  # a pasted command's (real pastes round eighteen)
        if merged.get(key) is None and isinstance(command.get(key), int) and command[key] > 0:
            merged[key] = command[key]
    if (block := engine_last(engine, FactKind.SET_BLOCK_SIZE)) is not None:
        merged["block_size"] = block  # the platform set it over what was typed
    if "speculative_method" not in merged and isinstance(command.get("speculative_method"), str):
        merged["speculative_method"] = command["speculative_method"]  # a pasted --speculative-config
        if isinstance(command.get("num_speculative_tokens"), int):
            merged["num_speculative_tokens"] = command["num_speculative_tokens"]
    if "speculative_method" not in merged and engine.get(FactKind.MTP_DRAFTER):
        merged["speculative_method"] = "mtp"  # the drafter's own line; how many tokens it proposes, it does not say
    if merged.get("enforce_eager") is None and "enforce_eager" in command:
        merged["enforce_eager"] = command["enforce_eager"]
    if merged.get("enforce_eager") is None and engine.get(FactKind.EAGER):
        merged["enforce_eager"] = True
    boot_sizes = boot_layout(boot.scans, engine)
    merged["tensor_parallel_size"] = boot_sizes.size("tp")
    merged["decode_context_parallel_size"] = boot_sizes.size("dcp")
    fields = {k: merged.get(k) for k in (
        "model", "tensor_parallel_size", "decode_context_parallel_size", "speculative_method",
        "num_speculative_tokens", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
        "max_num_batched_tokens", "cudagraph_capture_sizes", "enforce_eager", "kv_cache_dtype", "block_size",
        "enable_chunked_prefill", "load_format")}
    # A knob no engine runs with (a garbled or doctored line) is not known.
    fields = {k: v if in_log_range(v) else None for k, v in fields.items()}
    for key in ("dtype", "enable_expert_parallel"):  # a pasted command's, where vLLM's lines do not say
        if key not in extra and key in command:
            extra[key] = command[key]
    for dim, key in OUTER_PARALLEL_SIZES:  # 1 too, where known: `kvaudit diff` compares them (config.py)
        value = boot_sizes.size(dim)
        if value is not None:
            extra[key] = value
    return AuditConfig(**fields, extra_args=extra), boot_sizes


def _served_length(engine: dict[FactKind, list[Located]]) -> int | None:
    """The max_model_len vLLM checked or served: after auto-fit, not the -1 that asked for it."""
    if (c := engine_last(engine, FactKind.MAX_CONCURRENCY)) is not None:
        return c[0] or None
    if (n := engine_first(engine, FactKind.CHECKED_MODEL_LEN)) is not None:
        return n
    if (a := engine_last(engine, FactKind.AUTOFIT)) is not None:
        return a[1]
    return None
