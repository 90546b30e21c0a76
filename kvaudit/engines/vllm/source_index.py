"""What a Python package's modules define, read from their source with `ast`, without importing
them: module-level names (defined or imported, with where an import comes from), functions and
their parameters, classes with their bases, methods (parameters, and the names each one calls)
and attributes (class-level and `self.x = …`).

kvaudit's support check (adapter.support) runs on this index of the installed vLLM in the
boot process, where importing the worker modules would cost seconds; the source contracts of
releases that are not installed here (tests/fixtures/vllm-source/) are this index, saved as JSON.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

SCHEMA = "kvaudit.source-index/1"


def module_file(root: Path, module: str) -> Path | None:
    """vllm.v1.worker.gpu_worker → ROOT/v1/worker/gpu_worker.py (or its package __init__.py);
    ROOT is the package folder of the first dotted part."""
    parts = module.split(".")[1:]
    base = root.joinpath(*parts) if parts else root
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args]
    if a.vararg is not None:
        names.append(a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg is not None:
        names.append(a.kwarg.arg)
    return names


def _calls(fn: ast.AST) -> list[str]:
    """Names a function body calls: `f(…)` gives f, `x.y.f(…)` gives f."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                out.add(node.func.id)
            elif isinstance(node.func, ast.Attribute):
                out.add(node.func.attr)
    return sorted(out)


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements at module level, including those under if / try / with (TYPE_CHECKING
    blocks, optional imports); never inside a function or class."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
            for handler in node.handlers:
                out += _top_level(handler.body)
        elif isinstance(node, ast.With):
            out += _top_level(node.body)
    return out


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _target_names(elt)]
    return []


def _class(node: ast.ClassDef) -> dict[str, Any]:
    methods: dict[str, Any] = {}
    attrs: set[str] = set()
    for item in _top_level(node.body):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            methods[item.name] = {"params": _params(item), "calls": _calls(item)}
            for sub in ast.walk(item):
                targets = sub.targets if isinstance(sub, ast.Assign) else \
                    [sub.target] if isinstance(sub, (ast.AnnAssign, ast.AugAssign)) else []
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        attrs.add(t.attr)
        elif isinstance(item, ast.Assign):
            attrs.update(n for t in item.targets for n in _target_names(t))
        elif isinstance(item, ast.AnnAssign):
            attrs.update(_target_names(item.target))
    return {"bases": [ast.unparse(b) for b in node.bases], "methods": methods, "attrs": sorted(attrs)}


def index_source(text: str, module: str, is_package: bool = False) -> dict[str, Any]:
    tree = ast.parse(text)
    parts = module.split(".")
    imports: dict[str, str] = {}
    functions: dict[str, Any] = {}
    classes: dict[str, Any] = {}
    assigned: set[str] = set()
    for node in _top_level(tree.body):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:  # relative: `from .x import y` in a.b.c (or in package a.b) → a.b.x
                base = parts[: len(parts) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([source] if source else []))
            for alias in node.names:
                imports[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imports[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = {"params": _params(node), "calls": _calls(node)}
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = _class(node)
        elif isinstance(node, ast.Assign):
            assigned.update(n for t in node.targets for n in _target_names(t))
        elif isinstance(node, ast.AnnAssign):
            assigned.update(_target_names(node.target))
    return {"imports": dict(sorted(imports.items())), "functions": functions, "classes": classes,
            "assigned": sorted(assigned)}


def index_package(root: Path, modules: list[str], version: str | None) -> dict[str, Any]:
    """The index of `modules` under the package folder `root`; a module without a source file
    is recorded as null (absent in this release)."""
    out: dict[str, Any] = {}
    for module in modules:
        path = module_file(root, module)
        out[module] = None if path is None else \
            index_source(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py")
    return {"schema": SCHEMA, "version": version, "modules": out}


class SourceIndex:
    """Look-ups over an index: a module-level name, a class member (through the bases the
    index holds, as Python's attribute look-up would find it)."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.modules: dict[str, Any] = data["modules"]

    @property
    def version(self) -> str | None:
        return self.data.get("version")

    def has_module(self, module: str) -> bool:
        return self.modules.get(module) is not None

    def has_name(self, module: str, name: str) -> bool:
        m = self.modules.get(module)
        return m is not None and (name in m["functions"] or name in m["classes"] or name in m["assigned"]
                                  or name in m["imports"])

    def function(self, module: str, name: str) -> dict[str, Any] | None:
        m = self.modules.get(module)
        if m is None:
            return None
        if name in m["functions"]:
            return m["functions"][name]
        target = m["imports"].get(name)
        if target and "." in target:  # imported by name from a module the index also holds
            owner, _, attr = target.rpartition(".")
            if owner != module and owner in self.modules:
                return self.function(owner, attr)
        return None

    def _resolve_class(self, module: str, name: str) -> tuple[str, dict[str, Any]] | None:
        m = self.modules.get(module)
        if m is None:
            return None
        if name in m["classes"]:
            return module, m["classes"][name]
        target = m["imports"].get(name)
        if target and "." in target:
            owner, _, attr = target.rpartition(".")
            if owner != module and owner in self.modules:
                return self._resolve_class(owner, attr)
        return None

    def member(self, module: str, cls: str, name: str, _depth: int = 0) -> dict[str, Any] | None:
        """{"params": […], "calls": […]} for a method, {} for an attribute, None if absent."""
        found = self._resolve_class(module, cls)
        if found is None or _depth > 8:
            return None
        where, c = found
        if name in c["methods"]:
            return c["methods"][name]
        if name in c["attrs"]:
            return {}
        for base in c["bases"]:
            hit = self.member(where, base.split("[")[0].rsplit(".", 1)[-1], name, _depth + 1)
            if hit is not None:
                return hit
        return None
