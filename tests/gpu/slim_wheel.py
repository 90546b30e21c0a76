"""Repack the vLLM wheel that the team workspace's gpu-vllm/prepare script split into .gpuwheels/p*/ without the
parts an H200 boot never loads, so it travels in fewer device calls (each carries at most 64 MiB):

- vllm_flash_attn/_vllm_fa2_C.abi3.so (123 MB compressed): FlashAttention 2; vLLM imports it in a
  try/except and uses FA3 on Hopper (vllm/vllm_flash_attn/flash_attn_interface.py);
- vllm-rs (14 MB): the Rust front end binary, not used by an offline `LLM(...)` boot.

Usage (project root, after prepare): python3 tests/gpu/slim_wheel.py
Then carry .gpuwheels/s0 … sN one per call; the last holds the dependency wheels and install.sh.
"""

from __future__ import annotations

import glob
import shutil
import zipfile
from pathlib import Path

DROP = ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm-rs")
PART_BYTES = 52 << 20


def main() -> None:
    root = Path(".gpuwheels")
    parts = sorted(glob.glob(str(root / "p*" / "vllm.part.*")), key=lambda p: p.rsplit(".", 1)[-1])
    whole = Path("/tmp/vllm-full.whl")
    with open(whole, "wb") as out:
        for part in parts:
            out.write(Path(part).read_bytes())
    slim = Path("/tmp/vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    with zipfile.ZipFile(whole) as src, zipfile.ZipFile(slim, "w") as dst:
        for info in src.infolist():
            if info.filename in DROP:
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True)
                                if not line.decode().startswith(DROP))
            dst.writestr(info, data, compress_type=info.compress_type)
    deps = next(p for p in sorted(root.glob("p*")) if (p / "install.sh").exists())
    for old in root.glob("s*"):
        shutil.rmtree(old)
    blob = slim.read_bytes()
    chunks = [blob[i:i + PART_BYTES] for i in range(0, len(blob), PART_BYTES)]
    for i, chunk in enumerate(chunks):
        folder = root / f"s{i}"
        folder.mkdir()
        (folder / f"vllm.part.{i:02d}").write_bytes(chunk)
    last = root / f"s{len(chunks)}"
    shutil.copytree(deps, last)
    for stale in last.glob("vllm.part.*"):
        stale.unlink()
    for folder in sorted(root.glob("s*")):
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"{folder}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
