"""Prepare one vLLM release for a boot on the device machine, which cannot download anything.

    python3 tests/gpu/prepare_release.py 0.24.0          # in the project root, on this machine
    python3 tests/gpu/prepare_release.py 0.33.0          # pins torch 2.14.0: torch travels too

It downloads vllm==RELEASE (Python 3.12, manylinux), drops what an H200 boot never loads
(FlashAttention 2 — vLLM falls back to it only where FA3 is missing — and the vllm-rs front end),
then resolves the release's own requirement pins against the packages the H200 image already holds
(tests/gpu/h200-image.txt): every package a boot imports that the image lacks is downloaded at the
version a boot has already proved (PROVEN, the set vLLM 0.26.0 booted with) where the release (or the
package that needs it) allows it, else at the newest version it allows, recursively.

A release that pins a torch other than the image's 2.11.0 (0.27 on; 0.33.0 pins 2.14.0) carries that
torch as well, with what it needs that the image holds at another version (TORCH_FAMILY: triton, NCCL,
and the torchvision vLLM pins, since the image's torchvision is built for 2.11 and fails to load beside
another torch). A pin the registry does not have is replaced by the newest release it has, with a note
(0.34.0 pins flashinfer-python 0.7.3, which it lacks: 0.7.4 travels; 0.33.0: torch pins nvidia-nccl-cu13
2.30.7, PyPI reachable from here has 2.32.6; the image's NCCL lacks ncclCommResume, which torch 2.14
calls).

Every wheel is cut into parts of at most CALL_BYTES and the parts are packed into
.gpuwheels/RELEASE/c0 … cN (git-ignored), one device call each; the last one holds install.sh, which
joins the parts and installs everything into /tmp/site-RELEASE. It prints the device calls to make.

Which packages a boot imports (BOOT_IMPORTS) was learned on vLLM 0.26.0, 0.24.0 and 0.22.1: the
ones vLLM imports on the way to an offline LLM(...) boot. Packages imported only by kernels an H200 dense/MLA boot
does not select (LAZY) are left out even when a requirement names them.
"""

from __future__ import annotations

import argparse
import email.parser
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

HERE = Path(__file__).resolve().parent
IMAGE_LIST = HERE / "h200-image.txt"
DROP = ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm-rs")
# What travels with one call is the working tree plus the carried folder, 64 MiB in all; the tracked
# tree is about 7 MiB now and grows with every committed result, so a part leaves it 16 MiB.
CALL_BYTES = 48 << 20
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
             "manylinux_2_31_x86_64", "linux_x86_64")
MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "platform_machine": "x86_64",
           "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
BOOT_IMPORTS = {canonicalize_name(n) for n in (
    "apache-tvm-ffi", "cachetools", "cbor2", "fastapi", "flashinfer-python", "gguf", "llguidance", "msgspec",
    "openai", "openai-harmony", "oss-harmony", "opentelemetry-api", "partial-json-parser", "pybase64",
    "pydantic", "pyzmq", "xgrammar", "compressed-tensors", "nvidia-cutlass-dsl",
    "quack-kernels")}
# oss-harmony: 0.33.0's name for the package that provides `openai_harmony` (openai-harmony before).
# compressed-tensors: 0.33.0 imports it while loading any model (seen on the H200, 2026-12-04:
# "ModuleNotFoundError: No module named 'compressed_tensors'" in load); 0.26.0 did not.
# nvidia-cutlass-dsl: 0.34.0's kernel warmup (kernel_config.enable_jit_warmup) compiles CuTe DSL kernels
# before KV sizing: "No module named 'cutlass'" in the persistent phase without it (H200, 2026-12-05). Its
# Python frontend (cutlass/__init__.py, cutlass.cute) is in nvidia-cutlass-dsl-libs-core, which libs-base
# requires; the [cu13] extra vLLM asks for brings the CUDA 13 libraries. quack-kernels: the same warmup
# then needs `quack` ("No module named 'quack'", H200, 2026-12-05; 0.34.0 pins quack-kernels 0.6.5).
# gguf: vLLM 0.22.1 and 0.24.0 import it at start-up (vllm/transformers_utils/gguf_utils.py, seen on
# the H200 on 2026-12-03); 0.26.0 imports it lazily.
PROVEN = {canonicalize_name(n): v for n, v in (
    ("annotated-types", "0.8.0"), ("apache-tvm-ffi", "0.1.10"), ("cachetools", "8.0.2"), ("cbor2", "6.3.0"),
    ("distro", "1.9.0"), ("fastapi", "0.136.3"), ("importlib-metadata", "10.2.0"), ("jiter", "0.19.0"),
    ("llguidance", "1.7.6"), ("msgspec", "0.23.0"), ("openai", "2.54.0"), ("openai-harmony", "0.0.8"),
    ("opentelemetry-api", "1.45.2"), ("partial-json-parser", "0.2.1.1.post7"), ("pybase64", "1.5.1"),
    ("pydantic", "2.14.4"), ("pydantic-core", "2.50.5"), ("pyzmq", "27.3.0"), ("sniffio", "1.3.1"),
    ("starlette", "1.10.0"), ("typing-inspection", "0.4.5"), ("xgrammar", "0.2.7"),
    ("flashinfer-python", "0.6.14"))}
LAZY = {canonicalize_name(n) for n in (
    "flashinfer-cubin", "nvidia-cudnn-frontend", "fastapi-cli", "uvicorn",
    "nvidia-cutlass-dsl-libs-cu12")}
# nvidia-cutlass-dsl-libs-cu12: nvidia-cutlass-dsl requires it whatever the extra; the image is CUDA 13 and
# the cu13 extra carries the libraries a boot there loads (92 MiB saved).
IMAGE_TORCH = "2.11.0"
TORCH_FAMILY = {canonicalize_name(n) for n in ("triton", "nvidia-nccl-cu13", "torchvision")}
"""What travels with a torch other than the image's: torch's own pins of these (triton, NCCL), and the
torchvision vLLM pins. The CUDA libraries (cuBLAS, cuDNN, …) stay the image's (13.0): torch 2.14.0
ran matmul, torch.compile and CUDA graphs with them on the H200 (cuDNN ops need 9.24, the image has
9.19; no LLM boot here uses cuDNN)."""


def image_packages() -> dict[str, str | None]:
    """name → version where the image's listing gives one (None: present, version not read)."""
    held: dict[str, str | None] = {}
    for line in IMAGE_LIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            held[canonicalize_name(name)] = version or None
    return held


def download(spec: str, dest: Path) -> Path:
    """One wheel for the H200's Python 3.12, manylinux x86-64; a pinned version the registry does
    not have falls back to its newest release (the caller notes it)."""
    before = set(dest.iterdir())
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(dest)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run(cmd + [spec], check=True)
    new = set(dest.iterdir()) - before
    if len(new) != 1:
        name = canonicalize_name(Requirement(spec).name)
        new = {p for p in dest.iterdir() if canonicalize_name(p.name.split("-")[0]) == name}
    return next(iter(new))


def requirements(wheel: Path, extras: frozenset[str] = frozenset()) -> list[Requirement]:
    """The wheel's requirements for the H200's Python 3.12 on Linux, with `extras` asked for
    (vLLM asks for nvidia-cutlass-dsl[cu13])."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.parser.Parser().parsestr(zf.read(meta).decode())
    out = []
    for raw in msg.get_all("Requires-Dist") or []:
        req = Requirement(raw)
        if req.marker is None or any(req.marker.evaluate({**MARKERS, "extra": extra})
                                     for extra in ("", *sorted(extras))):
            out.append(req)
    return out


def resolve(vllm_wheel: Path, dest: Path, skip: set[str] = frozenset()) -> tuple[list[Path], list[str]]:
    """The wheels a boot needs that the image lacks; plus notes on pins the image may not meet.
    `skip`: packages already travelling (the torch family)."""
    held = image_packages()
    notes: list[str] = []
    wheels: list[Path] = []
    seen: set[str] = set(skip)
    queue = [(req, "vllm") for req in requirements(vllm_wheel)]
    while queue:
        req, parent = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in seen or (parent == "vllm" and name not in BOOT_IMPORTS and name not in held):
            continue
        seen.add(name)
        if name in held:
            version = held[name]
            if version and req.specifier and not req.specifier.contains(Version(version), prereleases=True):
                notes.append(f"image has {name} {version}; {parent} asks {req.specifier}")
            continue
        if name in LAZY:
            continue
        proven = PROVEN.get(name)
        if proven and req.specifier.contains(proven, prereleases=True):
            wheel = download(f"{req.name}=={proven}", dest)
        else:
            wheel = download_or_newest(req, dest, notes, parent)  # 0.34.0 pins flashinfer-python 0.7.3: absent
            notes.append(f"{wheel.name}: no boot proved it yet ({parent} asks {req.specifier or 'any'})")
        wheels.append(wheel)
        queue += [(sub, name) for sub in requirements(wheel, frozenset(req.extras))]
    return wheels, notes


def download_or_newest(req: Requirement, dest: Path, notes: list[str], parent: str) -> Path:
    spec = f"{req.name}{req.specifier}"
    try:
        return download(spec, dest)
    except subprocess.CalledProcessError:
        wheel = download(req.name, dest)
        notes.append(f"{wheel.name}: {parent} pins {req.specifier}, which the registry does not have; "
                     f"took its newest")
        return wheel


def torch_family(vllm_wheel: Path, dest: Path, notes: list[str]) -> list[Path]:
    """torch at the release's pin, and TORCH_FAMILY from torch's and vLLM's own pins, where the pin
    is not the image's torch; [] where it is."""
    pins = {canonicalize_name(r.name): r for r in requirements(vllm_wheel)}
    torch_req = pins.get("torch")
    if torch_req is None or torch_req.specifier.contains(IMAGE_TORCH):
        return []
    held = image_packages()
    torch_wheel = download(f"torch{torch_req.specifier}", dest)
    wheels = [torch_wheel]
    wanted = [(r, "torch") for r in requirements(torch_wheel)] + [(r, "vllm") for r in pins.values()]
    for req, parent in wanted:
        name = canonicalize_name(req.name)
        if name not in TORCH_FAMILY or any(canonicalize_name(w.name.split("-")[0]) == name for w in wheels):
            continue
        version = held.get(name)
        if version and req.specifier.contains(version, prereleases=True):
            continue
        wheels.append(download_or_newest(req, dest, notes, parent))
    return wheels


def pack(files: list[Path], root: Path) -> int:
    """Cut each file into parts of at most CALL_BYTES and pack the parts, largest first, into
    folders c0 … c(N−1) of at most CALL_BYTES each; return N. A part is named FILE.part.KK, so
    install.sh joins each file from its parts in order."""
    parts: list[tuple[str, bytes]] = []
    for f in files:
        blob = f.read_bytes()
        for k, i in enumerate(range(0, len(blob), CALL_BYTES)):
            parts.append((f"{f.name}.part.{k:02d}", blob[i:i + CALL_BYTES]))
    bins: list[list[tuple[str, bytes]]] = []
    for name, data in sorted(parts, key=lambda p: -len(p[1])):
        for b in bins:
            if sum(len(d) for _, d in b) + len(data) <= CALL_BYTES:
                b.append((name, data))
                break
        else:
            bins.append([(name, data)])
    for i, b in enumerate(bins):
        folder = root / f"c{i}"
        folder.mkdir(parents=True)
        for name, data in b:
            (folder / name).write_bytes(data)
    return len(bins)


def slim(wheel: Path, out: Path) -> None:
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if info.filename in DROP:
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True)
                                if not line.decode().startswith(DROP))
            dst.writestr(info, data, compress_type=info.compress_type)


INSTALL = """#!/usr/bin/env bash
# On the device machine: join each wheel of vLLM {release} from its parts in /tmp/parts-{release} and
# install them, with no index and no dependencies, into /tmp/site-{release} (then
# PYTHONPATH=/tmp/site-{release}:$PWD; tests/gpu/session.sh also puts nvidia_cutlass_dsl/dsl_packages
# first, as that wheel's .pth file would in a site directory). Every earlier call copied its parts there.
set -euo pipefail
site=/tmp/site-{release}
parts=/tmp/parts-{release}
if [ ! -d "$site/vllm" ]; then
  mkdir -p /tmp/wheels-{release}
  for first in "$parts"/*.whl.part.00; do
    wheel=$(basename "$first" .part.00)
    cat "$parts/$wheel".part.* > "/tmp/wheels-{release}/$wheel"
  done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" /tmp/wheels-{release}/*.whl
  rm -rf /tmp/wheels-{release} "$parts"
fi
PYTHONPATH=$site python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("release", help="a vLLM release, e.g. 0.26.0 or 0.33.0")
    args = ap.parse_args()
    if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", args.release):
        sys.exit(f"prepare_release: not a release number: {args.release!r}")
    root = Path(".gpuwheels") / args.release
    with tempfile.TemporaryDirectory() as tmp:
        dl = Path(tmp)
        full = download(f"vllm=={args.release}", dl)
        deps_dir = dl / "deps"
        deps_dir.mkdir()
        notes: list[str] = []
        family = torch_family(full, deps_dir, notes)
        held = {canonicalize_name(w.name.split("-")[0]) for w in family}
        deps, more = resolve(full, deps_dir, skip=held)
        notes += more
        slim_wheel = dl / full.name
        slim(full, dl / "slim.whl")
        full.unlink()
        (dl / "slim.whl").rename(slim_wheel)
        if root.exists():
            shutil.rmtree(root)
        wheels = [slim_wheel, *family, *deps]
        n = pack(wheels, root)
        last = root / f"c{n}"
        last.mkdir(parents=True)
        (last / "install.sh").write_text(INSTALL.format(release=args.release))
        sizes = {w.name: w.stat().st_size for w in wheels}
    print(f"vLLM {args.release}: {sizes[slim_wheel.name] / 2**20:.0f} MiB without FA2 and vllm-rs; "
          f"{len(family) + len(deps)} packages the image lacks or holds at another version "
          f"({sum(sizes.values()) / 2**20 - sizes[slim_wheel.name] / 2**20:.1f} MiB):")
    print("  " + " ".join(sorted(p.name.split("-")[0] + "==" + p.name.split("-")[1] for p in [*family, *deps])))
    for note in notes:
        print(f"  note: {note}")
    for folder in sorted(root.glob("c*"), key=lambda f: int(f.name[1:])):
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"{folder}: {size / 2**20:.1f} MiB")
    print("\nDevice calls, back to back (send the first alone on a cold machine):")
    for k in range(n):
        print(f'  run(carry=[".gpuwheels/{args.release}/c{k}"], command="mkdir -p /tmp/parts-{args.release} '
              f'&& cp .gpuwheels/{args.release}/c{k}/* /tmp/parts-{args.release}/")')
    print(f'  run(carry=[".gpuwheels/{args.release}/c{n}"], command="bash .gpuwheels/{args.release}/c{n}/install.sh '
          f'&& export PYTHONPATH=/tmp/site-{args.release}:$PWD && <command>")')


if __name__ == "__main__":
    main()
