"""The layers (docs/design.md, Data flow): the CLI on top; render/ and engines/ beside each other,
each importing only the core; the core importing neither. Every module under kvaudit/ is placed
by its path, so a new core module is covered without being listed; imports inside functions count.
No module reaches itself through the imports of others, two modules or more (a cycle hides behind a
lazy import just as well); edges between a package and its own submodules are exempt (a package's
__init__ importing its submodules, which import names from it, is how packages work)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kvaudit"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    if module in ("kvaudit.cli", "kvaudit.__main__"):
        return "cli"
    for layer in ("engines", "render"):
        if module == f"kvaudit.{layer}" or module.startswith(f"kvaudit.{layer}."):
            return layer
    return "core"


ALLOWED = {"cli": {"cli", "engines", "render", "core"}, "engines": {"engines", "core"},
           "render": {"render", "core"}, "core": {"core"}}


def _imports() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module, names = _module(path), set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)  # `from kvaudit.engines import vllm`
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
        out[module] = {n for n in names if n.split(".")[0] == "kvaudit"}
    return out


IMPORTS = _imports()
MODULES = set(IMPORTS)


def _target(name: str) -> str | None:
    """The kvaudit module an imported name is (a module, or a name inside one)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_every_module_is_placed_and_the_core_is_found():
    core = {m for m in MODULES if _layer(m) == "core"}
    assert {"kvaudit.ledger", "kvaudit.assemble", "kvaudit.record", "kvaudit.schema", "kvaudit.plan",
            "kvaudit.printable", "kvaudit.validate", "kvaudit.diff", "kvaudit.capacity", "kvaudit.config"} <= core
    assert len(MODULES) > 80


def test_no_module_imports_above_or_beside_its_layer():
    wrong = sorted((m, t) for m, names in IMPORTS.items() for t in filter(None, map(_target, names))
                   if _layer(t) not in ALLOWED[_layer(m)])
    assert wrong == []


def _edges() -> dict[str, set[str]]:
    """module → the kvaudit modules it imports; a package importing its own submodule and back is how
    packages work, so only edges between modules outside each other count."""
    out: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, names in IMPORTS.items():
        for t in filter(None, map(_target, names)):
            if t != m and not (t.startswith(m + ".") or m.startswith(t + ".")):
                out[m].add(t)
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two modules or more (each a cycle of imports), sorted:
    Tarjan's algorithm, iterative, so the depth of the package does not matter."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def test_the_cycle_finder_finds_a_cycle_of_three_and_a_pair_and_nothing_in_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}) == [
        ["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_reaches_itself_through_its_imports():
    assert cycles(_edges()) == []
