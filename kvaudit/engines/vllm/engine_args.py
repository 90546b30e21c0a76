"""The keyword arguments of `LLM(...)` from an AuditConfig (`engine_kwargs`: the boot's and the
follower nodes'). The names vLLM accepts are read from its source by the core
(kvaudit/vllm_source.py: engine_arg_names, re-exported here)."""

from __future__ import annotations

from typing import Any

from kvaudit.config import AuditConfig
from kvaudit.vllm_source import engine_arg_names, vllm_version_text

__all__ = ["engine_arg_names", "engine_kwargs", "vllm_version_text"]


def engine_kwargs(config: AuditConfig, worker_cls: str) -> dict[str, Any]:
    """LLM(...) keyword arguments, vLLM's names; None means vLLM's default and is left out."""
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
    return {k: v for k, v in kwargs.items() if v is not None}
