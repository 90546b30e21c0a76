"""The grammar of a `vllm serve` command line, read from the installed vLLM's source with `ast`
(nothing of vLLM is imported: its argument parser takes about 16 s to import on the 2-core
machine, for a check kvaudit makes before every boot).

vLLM builds the parser of `vllm serve` in `make_arg_parser` (vllm/entrypoints/launchers/cli_args.py
in 0.32, imported by vllm/entrypoints/cli/serve.py): a positional `model_tag`, a few options of its
own (`--config`, `--headless`, `--api-server-count`), the API server's options (`FrontendArgs`, one
per dataclass field, `_customize_cli_kwargs` adjusting some) and the engine's
(`AsyncEngineArgs.add_cli_args`: `add_argument` calls whose keyword arguments come from
`get_kwargs(SomeConfig)["field"]`, derived from the field's type by `_compute_kwargs`). What a
token means depends on how many values its option takes (argparse's `nargs`): that is what this
module reads, for every option string (`--tensor-parallel-size`, `-tp`, `--no-enforce-eager`), with
the rules of vLLM's `_compute_kwargs` applied to the field's annotation:

- a dataclass (a config object): one value (JSON);
- `bool | str | None`: an optional value (`nargs="?"`, alone it means True);
- any other type with `bool`: no value, and a `--no-NAME` twin (argparse.BooleanOptionalAction);
- a `Literal`: one value; a tuple, list or set: one or more values (`nargs="+"`); anything else: one.

tests/vllm/test_serve_config_vllm.py holds this against the parser vLLM itself builds: every option
string, its destination and its arity.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvaudit.vllm_source import engine_arg_names

FLAG = 0
"""nargs of an option that takes no value (`--enforce-eager`)."""
OPTIONAL = "?"
MANY = "+"
AUTO = "auto"


@dataclass(frozen=True)
class Option:
    """One option string of `vllm serve`."""

    dest: str
    """The argparse destination: vLLM's underscore name (`tensor_parallel_size`)."""
    nargs: int | str
    """0 (a flag), 1, N > 1, "?" (an optional value) or "+" (one or more values)."""
    const: Any = None
    """What a flag sets (True; False for `--no-NAME`), or "?" given no value (True)."""
    kind: str = AUTO
    """How vLLM converts each value (argparse's `type`): int, float, str, json (json.loads),
    config (a config dataclass: human-readable numbers expanded, then JSON), dict_or_str
    (vLLM's union_dict_and_str), or auto (not readable here: kvaudit reads JSON, else the string)."""
    optional: bool = False
    """vLLM's optional_type: the value `None` or an empty string means None."""


@dataclass(frozen=True)
class ServeGrammar:
    """What kvaudit needs of `vllm serve`'s parser to read a command line or a `--config` file as vLLM does."""

    options: Mapping[str, Option]
    """Every option string, long and short, with its `--no-NAME` twins."""
    human_readable: frozenset[str]
    """Destinations parsed by vLLM's `human_readable_int` (`8k`, `8K`, `8G`)."""
    human_readable_or_auto: frozenset[str]
    """Destinations parsed by `human_readable_int_or_auto` (those and `-1`/`auto`)."""
    engine: frozenset[str]
    """Destinations `LLM(...)` takes (engine_args.engine_arg_names); the rest are the API server's."""

    def long_options(self) -> list[str]:
        return sorted(o for o in self.options if o.startswith("--"))


@functools.lru_cache(maxsize=1)
def serve_grammar() -> ServeGrammar | None:
    """The installed vLLM's `vllm serve` grammar; None where vLLM is not installed or its source is
    not laid out where this module looks (kvaudit then reads a serve line without it, leniently)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return read_grammar(Path(spec.origin).parent)


def read_grammar(root: Path) -> ServeGrammar | None:
    """The grammar of the vLLM source tree at `root` (the `vllm` package folder)."""
    src = _Source(root)
    engine = engine_arg_names()
    options: dict[str, Option] = {}
    arg_utils = "vllm.engine.arg_utils"
    for cls in ("EngineArgs", "AsyncEngineArgs"):
        method = src.method(arg_utils, cls, "add_cli_args")
        if method is not None:
            _add_calls(src, arg_utils, method, cls, options)
    if "--tensor-parallel-size" not in options:
        return None
    serve_module = src.imported_from("vllm.entrypoints.cli.serve", "make_arg_parser")
    make = src.function(serve_module, "make_arg_parser") if serve_module else None
    if make is not None:
        _add_calls(src, serve_module, make, None, options)
        for call in _calls(make):  # FrontendArgs.add_cli_args(parser): one option per field
            func = call.func
            if (isinstance(func, ast.Attribute) and func.attr == "add_cli_args" and isinstance(func.value, ast.Name)
                    and func.value.id not in ("AsyncEngineArgs", "EngineArgs")):
                _add_dataclass_options(src, serve_module, func.value.id, options)
    readable, auto = _human_readable(src, arg_utils)
    return ServeGrammar(options=options, human_readable=readable, human_readable_or_auto=auto,
                        engine=engine if engine is not None else frozenset())


# --------------------------------------------------------------------------------------------
# Reading the source


class _Source:
    """The modules of one vLLM tree, parsed once each, and names looked up through their imports."""

    def __init__(self, root: Path):
        self.root = root
        self._trees: dict[str, ast.Module | None] = {}
        self._packages: set[str] = set()

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            parts = module.split(".")[1:]
            base = self.root.joinpath(*parts) if parts else self.root
            tree = None
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if path.is_file():
                    if path.name == "__init__.py":
                        self._packages.add(module)
                    try:
                        tree = ast.parse(path.read_text(encoding="utf-8"))
                    except (OSError, SyntaxError, ValueError):
                        tree = None
                    break
            self._trees[module] = tree
        return self._trees[module]

    def top_level(self, module: str) -> Iterator[ast.stmt]:
        tree = self.tree(module)
        stack = list(tree.body) if tree is not None else []
        while stack:
            node = stack.pop(0)
            yield node
            if isinstance(node, ast.If):
                stack[:0] = node.body + node.orelse
            elif isinstance(node, ast.Try):
                stack[:0] = node.body + [s for h in node.handlers for s in h.body] + node.orelse

    def imported_from(self, module: str, name: str) -> str | None:
        """The module `name` is imported from in `module` (`from vllm.x import name`), if it is."""
        for node in self.top_level(module):
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
                if node.level:  # relative: from the module's package (a package is its own)
                    self.tree(module)
                    parts = module.split(".")
                    keep = len(parts) - node.level + (1 if module in self._packages else 0)
                    return ".".join(parts[:keep] + ([node.module] if node.module else []))
                return node.module
        return None

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """Where `name` is defined, following imports: (module, ClassDef | FunctionDef | the
        aliased type expression)."""
        if depth > 6:
            return None
        for node in self.top_level(module):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                return module, node
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return module, node.value
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                    and node.value is not None:
                return module, node.value
            if isinstance(node, ast.TypeAlias) if hasattr(ast, "TypeAlias") else False:  # `type X = ...` (3.12)
                if node.name.id == name:  # type: ignore[attr-defined]
                    return module, node.value  # type: ignore[attr-defined]
        source = self.imported_from(module, name)
        if source is None or not source.startswith("vllm"):
            return None
        original = name
        for node in self.top_level(module):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.asname == name:
                        original = alias.name
        return self.lookup(source, original, depth + 1)

    def function(self, module: str, name: str) -> ast.FunctionDef | None:
        found = self.lookup(module, name)
        return found[1] if found is not None and isinstance(found[1], ast.FunctionDef) else None

    def method(self, module: str, cls: str, name: str) -> ast.FunctionDef | None:
        found = self.lookup(module, cls)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return None
        return next((n for n in found[1].body if isinstance(n, ast.FunctionDef) and n.name == name), None)

    def fields(self, module: str, cls: str, depth: int = 0) -> dict[str, tuple[str, ast.expr]]:
        """A dataclass's fields, its bases' first (as dataclasses.fields orders them): name →
        (module of the class, annotation)."""
        found = self.lookup(module, cls)
        if found is None or not isinstance(found[1], ast.ClassDef) or depth > 6:
            return {}
        where, node = found
        out: dict[str, tuple[str, ast.expr]] = {}
        for base in node.bases:
            if isinstance(base, ast.Name):
                out.update(self.fields(where, base.id, depth + 1))
        for st in node.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and not _is_classvar(st.annotation):
                out[st.target.id] = (where, st.annotation)
        return out


def _is_classvar(annotation: ast.expr) -> bool:
    base = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return isinstance(base, ast.Name) and base.id == "ClassVar"


def _calls(fn: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            yield node


def _kwargs_sources(fn: ast.FunctionDef) -> dict[str, str]:
    """`model_kwargs = get_kwargs(ModelConfig)` in a function body: variable → class name."""
    out = {}
    for node in ast.walk(fn):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "get_kwargs" and node.value.args
                and isinstance(node.value.args[0], ast.Name)):
            out[node.targets[0].id] = node.value.args[0].id
    return out


def _add_calls(src: _Source, module: str, fn: ast.FunctionDef, own_class: str | None,
               options: dict[str, Option]) -> None:
    """Every `add_argument("--name", "-n", …)` call in `fn`."""
    sources = _kwargs_sources(fn)
    customized = {(var, field): {"type": _type_kind(value)} for var, field, value in _type_assignments(fn)}
    for call in _calls(fn):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        strings = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if len(strings) != len(call.args) or not strings:
            continue  # an f-string or a computed name: not readable here (the contract test says if one appears)
        if not strings[0].startswith("-"):
            continue  # a positional (model_tag): the serve line's model, handled by its reader
        keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
        spread: list[ast.expr] = []  # **kwargs["field"], or **{**kwargs["field"], "default": None}
        for k in call.keywords:
            if k.arg is None and isinstance(k.value, ast.Dict):
                for key, value in zip(k.value.keys, k.value.values):
                    if key is None:
                        spread.append(value)
                    elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                        keywords[key.value] = value
            elif k.arg is None:
                spread.append(k.value)
        field_spec: tuple[int | str, str, bool] | None = None
        for value in spread:
            if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
                field = value.slice.value if isinstance(value.slice, ast.Constant) else None
                cls = sources.get(value.value.id)
                if isinstance(field, str) and cls is not None:
                    annotation = src.fields(module, cls).get(field)
                    if annotation is None and own_class is not None:
                        annotation = src.fields(module, own_class).get(field)
                    if annotation is not None:
                        field_spec = _spec_of(src, *annotation)
                        changed = customized.get((value.value.id, field), {})
                        if "type" in changed:
                            field_spec = (field_spec[0], changed["type"][0], changed["type"][1] or field_spec[2])
        nargs = _explicit_nargs(keywords)
        if nargs is None:
            nargs = field_spec[0] if field_spec is not None else 1
        kind, optional = field_spec[1:] if field_spec is not None else (AUTO, False)
        if "type" in keywords:
            kind, optional = _type_kind(keywords["type"])
        _register(options, strings, keywords.get("dest"), nargs, keywords, kind, optional)


def _explicit_nargs(keywords: Mapping[str, ast.expr]) -> int | str | None:
    action = keywords.get("action")
    if action is not None:
        name = action.attr if isinstance(action, ast.Attribute) else action.id if isinstance(action, ast.Name) \
            else action.value if isinstance(action, ast.Constant) else None
        if name in ("BooleanOptionalAction", "store_true", "store_false", "store_const", "count"):
            return FLAG
        if name == "append":
            return 1
    nargs = keywords.get("nargs")
    if isinstance(nargs, ast.Constant) and (isinstance(nargs.value, int) or nargs.value in ("?", "+", "*")):
        return MANY if nargs.value == "*" else nargs.value
    return None


def _register(options: dict[str, Option], strings: list[str], dest_node: ast.expr | None, nargs: int | str,
              keywords: Mapping[str, ast.expr], kind: str = AUTO, optional: bool = False) -> None:
    longs = [s for s in strings if s.startswith("--")]
    dest = (dest_node.value if isinstance(dest_node, ast.Constant) and isinstance(dest_node.value, str)
            else (longs[0] if longs else strings[0]).lstrip("-").replace("-", "_"))
    action = keywords.get("action")
    action_name = action.attr if isinstance(action, ast.Attribute) else action.id if isinstance(action, ast.Name) \
        else action.value if isinstance(action, ast.Constant) else None
    negatable = nargs == FLAG and action_name in (None, "BooleanOptionalAction")
    const: Any = False if action_name == "store_false" else True if nargs in (FLAG, OPTIONAL) else None
    if nargs == FLAG:
        kind = "flag"
    for s in strings:
        options[s] = Option(dest, nargs, const, kind, optional)
        if negatable and s.startswith("--"):
            options["--no-" + s[2:]] = Option(dest, FLAG, False, "flag")


def _add_dataclass_options(src: _Source, module: str, cls: str, options: dict[str, Option]) -> None:
    """`FrontendArgs.add_cli_args`: `--field-name` for every field, as `_customize_cli_kwargs` (its
    own and its bases') leaves the field's keyword arguments."""
    found = src.lookup(module, cls)
    if found is None:
        return
    where = found[0]
    custom = _customized(src, where, cls)
    for name, (field_module, annotation) in src.fields(where, cls).items():
        if name.startswith("_"):
            continue
        nargs, kind, optional = _spec_of(src, field_module, annotation)
        changed = custom.get(name, {})
        if changed.get("nargs", "keep") is None:
            nargs = 1
        elif "nargs" in changed:
            nargs = changed["nargs"]
        if changed.get("action") == "append":
            nargs = 1
        if "type" in changed:
            kind, optional = changed["type"]
        flags = changed.get("flags", [])
        _register(options, [*flags, "--" + name.replace("_", "-")], None, nargs, {}, kind, optional)


def _customized(src: _Source, module: str, cls: str, depth: int = 0) -> dict[str, dict[str, Any]]:
    """What `_customize_cli_kwargs` of `cls` and its bases does to nargs, action and flags:
    field → {"nargs": value or None (deleted), "action": "append", "flags": [...]}."""
    found = src.lookup(module, cls)
    if found is None or not isinstance(found[1], ast.ClassDef) or depth > 6:
        return {}
    where, node = found
    out: dict[str, dict[str, Any]] = {}
    for base in node.bases:
        if isinstance(base, ast.Name):
            for k, v in _customized(src, where, base.id, depth + 1).items():
                out.setdefault(k, {}).update(v)
    method = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "_customize_cli_kwargs"), None)
    if method is None:
        return out
    for st in ast.walk(method):
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        deleted = False
        if isinstance(st, ast.Assign):
            targets, value = st.targets, st.value
        elif isinstance(st, ast.Delete):
            targets, deleted = st.targets, True
        for target in targets:
            key = _double_subscript(target)
            if key is None:
                continue
            field, what = key
            if what not in ("nargs", "action", "flags", "type"):
                continue
            entry = out.setdefault(field, {})
            if what == "type" and value is not None:
                entry[what] = _type_kind(value)
            elif deleted:
                entry[what] = None
            elif isinstance(value, ast.Constant):
                entry[what] = value.value
            elif isinstance(value, (ast.List, ast.Tuple)) and what == "flags":
                entry[what] = [e.value for e in value.elts if isinstance(e, ast.Constant)]
            elif what == "action":
                entry[what] = "custom"
    return out


def _double_subscript(node: ast.expr) -> tuple[str, str] | None:
    """`kwargs["field"]["what"]` → ("field", "what")."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Subscript)):
        return None
    inner, outer = node.value.slice, node.slice
    if isinstance(inner, ast.Constant) and isinstance(outer, ast.Constant) \
            and isinstance(inner.value, str) and isinstance(outer.value, str):
        return inner.value, outer.value
    return None


def _human_readable(src: _Source, module: str) -> tuple[frozenset[str], frozenset[str]]:
    """The fields `_compute_kwargs` parses with `human_readable_int` (the set it names) and with
    `human_readable_int_or_auto` (the field it compares `name` with)."""
    fn = src.function(module, "_compute_kwargs")
    readable: set[str] = set()
    auto: set[str] = set()
    if fn is None:
        return frozenset(), frozenset()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Set) and any(
                isinstance(t, ast.Name) and "human_readable" in t.id for t in node.targets):
            readable |= {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.comparators) == 1:
            other = node.test.comparators[0]
            uses_auto = any(isinstance(n, ast.Name) and n.id == "human_readable_int_or_auto"
                            for st in node.body for n in ast.walk(st))
            if uses_auto and isinstance(other, ast.Constant) and isinstance(other.value, str):
                auto.add(other.value)
    return frozenset(readable), frozenset(auto)


# --------------------------------------------------------------------------------------------
# Types → nargs (vLLM's _compute_kwargs)

_BUILTIN = {"bool", "str", "int", "float", "dict", "list", "tuple", "set", "frozenset", "bytes", "object"}


def _spec_of(src: _Source, module: str, annotation: ast.expr) -> tuple[int | str, str, bool]:
    """(nargs, kind, optional) of a field, as vLLM's _compute_kwargs derives argparse's nargs and
    type from its annotation, in the same order of rules."""
    hints = _hints(src, module, annotation, 0)
    kinds = {h[0] for h in hints}
    optional = "none" in kinds
    if "dataclass" in kinds:
        return 1, "config", optional
    if kinds == {"bool", "str", "none"}:
        return OPTIONAL, "str", False
    if "bool" in kinds:
        return FLAG, "flag", False
    for h in hints:
        if h[0] == "literal":
            return 1, h[1], optional
    for collection in ("tuple", "list", "set"):
        for h in hints:
            if h[0] == collection:
                return h[1][0], h[1][1], optional
    if "int" in kinds:
        return 1, "int", optional
    if "float" in kinds:
        return 1, "float", optional
    if "dict" in kinds and ("str" in kinds or kinds & {"class", "dataclass", "literal", "unknown"}):
        return 1, "dict_or_str", False  # union_dict_and_str reads "None" as a string unless it is JSON
    if "dict" in kinds:
        return 1, "json", optional
    if "str" in kinds or kinds & {"class", "unknown"}:
        return 1, "str" if "unknown" not in kinds else AUTO, optional
    return 1, AUTO, optional


def _type_kind(node: ast.expr) -> tuple[str, bool]:
    """An explicit argparse `type=`: int, float, str, json.loads, human_readable_int, each maybe
    wrapped in optional_type(...) or parse_type(...)."""
    optional = False
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args \
            and node.func.id in ("optional_type", "parse_type"):
        optional = optional or node.func.id == "optional_type"
        node = node.args[0]
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    kinds = {"int": "int", "float": "float", "str": "str", "loads": "json", "human_readable_int": "int",
             "human_readable_int_or_auto": "int", "union_dict_and_str": "dict_or_str"}
    return kinds.get(name or "", AUTO), optional


def _type_assignments(fn: ast.FunctionDef) -> Iterator[tuple[str, str, ast.expr]]:
    """`vllm_kwargs["speculative_config"]["type"] = optional_type(json.loads)` in a function body."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            key = _double_subscript(target)
            holder = target.value.value if key is not None else None  # type: ignore[attr-defined]
            if key is not None and key[1] == "type" and isinstance(holder, ast.Name):
                yield holder.id, key[0], node.value


def _hints(src: _Source, module: str, node: ast.expr, depth: int) -> list[tuple[str, Any]]:
    """The union members of a type annotation, each as (kind, detail): bool, str, int, float,
    none, literal, dict, dataclass, class, unknown; tuple/list/set with their nargs."""
    if depth > 8:
        return [("unknown", None)]
    if isinstance(node, ast.Constant):
        if node.value is None:
            return [("none", None)]
        if isinstance(node.value, str):  # a string annotation
            try:
                return _hints(src, module, ast.parse(node.value, mode="eval").body, depth + 1)
            except SyntaxError:
                return [("unknown", None)]
        return [("unknown", None)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _hints(src, module, node.left, depth + 1) + _hints(src, module, node.right, depth + 1)
    if isinstance(node, ast.Subscript):
        base = node.value.id if isinstance(node.value, ast.Name) else \
            node.value.attr if isinstance(node.value, ast.Attribute) else None
        args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base in ("Optional",):
            return _hints(src, module, args[0], depth + 1) + [("none", None)]
        if base == "Union":
            return [h for a in args for h in _hints(src, module, a, depth + 1)]
        if base == "Annotated":
            return _hints(src, module, args[0], depth + 1)
        if base == "Literal":
            first = args[0].value if args and isinstance(args[0], ast.Constant) else None
            return [("literal", {int: "int", float: "float", str: "str"}.get(type(first), AUTO))]
        if base in ("tuple", "Tuple"):
            ellipsis = any(isinstance(a, ast.Constant) and a.value is Ellipsis for a in args)
            return [("tuple", (MANY if ellipsis else len(args), _element_kind(src, module, args[0], depth)))]
        if base in ("list", "List", "Sequence"):
            return [("list", (MANY, _element_kind(src, module, args[0], depth)))]
        if base in ("set", "Set", "frozenset"):
            return [("set", (MANY, _element_kind(src, module, args[0], depth)))]
        if base in ("dict", "Dict", "Mapping"):
            return [("dict", None)]
        if base == "type":
            return [("class", None)]
        return _hints(src, module, node.value, depth + 1)
    if isinstance(node, ast.Name):
        if node.id in _BUILTIN:
            if node.id in ("list", "set", "frozenset", "tuple"):
                return [("set" if node.id == "frozenset" else node.id, (MANY, AUTO))]
            return [(node.id, None)]
        if node.id in ("Any", "Callable"):
            return [("class", None)]
        found = src.lookup(module, node.id)
        if found is None:
            return [("unknown", None)]
        where, definition = found
        if isinstance(definition, ast.ClassDef):
            return [(_class_kind(definition), None)]
        if isinstance(definition, ast.expr):
            if isinstance(definition, ast.Call):  # NewType / TypeVar / TypeAliasType(...)
                return [("unknown", None)]
            return _hints(src, where, definition, depth + 1)
        return [("class", None)]
    if isinstance(node, ast.Attribute):
        return [("class", None)]
    return [("unknown", None)]


def _element_kind(src: _Source, module: str, node: ast.expr, depth: int) -> str:
    """The type of a collection's elements, as vLLM's collection_to_kwargs picks it: a union
    with str is str."""
    kinds = {h[0] for h in _hints(src, module, node, depth + 1)}
    if len(kinds) > 1:
        return "str" if "str" in kinds else AUTO
    return next((k for k in kinds if k in ("int", "float", "str")), AUTO)


def _class_kind(node: ast.ClassDef) -> str:
    """A config dataclass (vLLM parses it from JSON), a dict subclass, or another class."""
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
        if name in ("config", "dataclass"):
            return "dataclass"
    for base in node.bases:
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        if name in ("dict", "TypedDict"):
            return "dict"
    return "class"
