"""Write the source contract of a vLLM release that is not installed here: the modules kvaudit's
support check reads (adapter.SOURCE_MODULES), indexed by `ast` from the release's wheel or an
unpacked source folder, without importing anything of it.

    pip download --no-deps --only-binary=:all: vllm==0.26.0 -d /tmp/x
    python tests/vllm/source_contract.py /tmp/x/vllm-0.26.0-*.whl      # GPU releases: the wheel
    python tests/vllm/source_contract.py VENV/lib/python3.11/site-packages/vllm   # an installed one

It writes tests/fixtures/vllm-source/vllm-<version>.json, which tests/unit/test_contract_source.py
reads at CI time (the wheel is not needed there). Method bodies are reduced to the names they
call only where a hook says what it must call (adapter.HOOKS), to keep the file small.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvaudit.engines.vllm.adapter import ANY_OF, HOOKS, OPTIONAL_HOOKS, SOURCE_MODULES  # noqa: E402
from kvaudit.engines.vllm.source_index import SCHEMA, index_source  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "vllm-source"


def read_sources(src: Path) -> tuple[dict[str, tuple[str, bool] | None], str, str]:
    """{module: (source text, is a package) or None}, the release's version, and where it came
    from (the wheel's name, or the installed distribution's)."""
    if src.is_file():
        zf = zipfile.ZipFile(src)
        names = set(zf.namelist())
        read = lambda p: zf.read(p).decode("utf-8") if p in names else None  # noqa: E731
        version = re.search(r"vllm(?:_cpu)?-([^-]+)-", src.name).group(1)
        origin = src.name
    else:
        base = src if (src / "vllm").is_dir() else src.parent
        read = lambda p: (base / p).read_text(encoding="utf-8") if (base / p).is_file() else None  # noqa: E731
        text = read("vllm/_version.py") or ""
        m = re.search(r"version = (?:__version__ = )?['\"]([^'\"]+)['\"]", text)
        version = m.group(1) if m else "unknown"
        dists = sorted(p.name.removesuffix(".dist-info") for p in base.glob("vllm*.dist-info"))
        origin = f"{dists[0]} (installed)" if dists else "an unpacked source folder"
    out: dict[str, tuple[str, bool] | None] = {}
    for module in SOURCE_MODULES:
        path = module.replace(".", "/")
        for candidate, is_package in ((f"{path}.py", False), (f"{path}/__init__.py", True)):
            text = read(candidate)
            if text is not None:
                out[module] = (text, is_package)
                break
        else:
            out[module] = None
    return out, version, origin


def reduce(index: dict) -> dict:
    """Keep what the hooks can ask about: every module-level function's parameters, the
    classes a hook names (with their bases), imports of hooked names or from indexed modules;
    a body's called names only where a hook says what it must call."""
    hooks = [h for group in HOOKS.values() for h in group] + list(OPTIONAL_HOOKS) \
        + [h for sets in ANY_OF.values() for hooks_ in sets for h in hooks_]
    named = {(h.module, h.name.split(".")[0]) for h in hooks}
    keep_calls = {(h.module, h.name) for h in hooks if h.calls}
    # a hooked method's calls may be made by a method of its class it delegates to (0.33)
    for module, name in list(keep_calls):
        cls, _, member = name.partition(".")
        methods = ((index.get(module) or {}).get("classes", {}).get(cls) or {}).get("methods", {}) if member else {}
        keep_calls |= {(module, f"{cls}.{callee}") for callee in methods.get(member, {}).get("calls", ())
                       if callee in methods}
    for module, m in index.items():
        if m is None:
            continue
        classes = {c for c in m["classes"] if (module, c) in named}
        for c in list(classes):
            classes |= {b.split("[")[0].rsplit(".", 1)[-1] for b in m["classes"][c]["bases"]}
        m["classes"] = {c: v for c, v in m["classes"].items() if c in classes}
        m["imports"] = {k: v for k, v in m["imports"].items()
                        if (module, k) in named or k in classes or v.rpartition(".")[0] in SOURCE_MODULES}
        for name, fn in m["functions"].items():
            if (module, name) not in keep_calls:
                fn.pop("calls")
        for cls, c in m["classes"].items():
            for name, fn in c["methods"].items():
                if (module, f"{cls}.{name}") not in keep_calls:
                    fn.pop("calls")
    return index


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a vLLM wheel, or a folder holding vllm/")
    args = ap.parse_args()
    sources, version, origin = read_sources(args.source)
    index = {m: None if s is None else index_source(s[0], m, is_package=s[1]) for m, s in sources.items()}
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"vllm-{version}.json"
    data = {"schema": SCHEMA, "version": version, "source": origin, "modules": reduce(index)}
    out.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{out.relative_to(ROOT)}: {out.stat().st_size} bytes, "
          f"{sum(v is not None for v in index.values())}/{len(index)} modules")


if __name__ == "__main__":
    main()
