"""The keyword arguments of `LLM(...)` from an AuditConfig (`engine_kwargs`: the boot's and the
follower nodes'). The names vLLM accepts are read from its source by the core
(kvaudit/vllm_source.py: engine_arg_names, re-exported here)."""

from __future__ import annotations

from typing import Any

from kvaudit.config import EXTENSIBLE_KV_ARG, AuditConfig
from kvaudit.vllm_source import engine_arg_names, vllm_version_text

__all__ = ["engine_arg_names", "engine_kwargs", "extensible_off_note", "vllm_version_text"]


def engine_kwargs(config: AuditConfig, worker_cls: str, accepted: frozenset[str] | None = None) -> dict[str, Any]:
    """LLM(...) keyword arguments, vLLM's names; None means vLLM's default and is left out.
    `accepted`: the names the installed vLLM takes (engine_arg_names, read when not given); where
    they include the extensible KV cache, it is turned off (config.EXTENSIBLE_KV_ARG)."""
    kwargs: dict[str, Any] = {
        "model": config.model, "worker_cls": worker_cls, "skip_tokenizer_init": True,
        "tensor_parallel_size": config.tensor_parallel_size,
        "decode_context_parallel_size": config.decode_context_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization, "max_model_len": config.max_model_len,
        "max_num_seqs": config.max_num_seqs, "max_num_batched_tokens": config.max_num_batched_tokens,
        "cudagraph_capture_sizes": list(config.cudagraph_capture_sizes) if config.cudagraph_capture_sizes else None,
        "enforce_eager": config.enforce_eager, "kv_cache_dtype": config.kv_cache_dtype,
        "block_size": config.block_size, "load_format": config.load_format,
        "enable_chunked_prefill": config.enable_chunked_prefill,
    }
    if config.speculative_method:
        kwargs["speculative_config"] = {"method": config.speculative_method,
                                        "num_speculative_tokens": config.num_speculative_tokens or 1}
    kwargs.update(config.extra_args)
    names = engine_arg_names() if accepted is None else accepted
    if names is not None and EXTENSIBLE_KV_ARG in names:
        kwargs[EXTENSIBLE_KV_ARG] = False  # config.validated refuses it turned on
    return {k: v for k, v in kwargs.items() if v is not None}


def extensible_off_note(kwargs: dict[str, Any], config: AuditConfig, version: str) -> str | None:
    """The report's note where the audit turned vLLM's extensible KV cache off itself (the user
    asked nothing of it): vLLM's default differs from what was audited, and how serve follows."""
    if kwargs.get(EXTENSIBLE_KV_ARG) is not False or config.extra_args.get(EXTENSIBLE_KV_ARG) is not None:
        return None
    return (f"vLLM {version} sizes the KV cache itself after warmup and graph capture by default where the driver "
            f"can map it (its extensible KV cache); kvaudit audits with it off, in its own order, and the safe flags' "
            f"--kv-cache-memory-bytes keeps it off in vllm serve")
