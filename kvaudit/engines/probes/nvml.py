"""NVML: the driver version, and the device memory other processes hold, read before this
process (or any vLLM process) created a CUDA context. pynvml is imported where it is used."""

from __future__ import annotations

import json
import os


def nvml_driver() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML missing or no driver: the report says null
        return None


OTHERS_ENV = "KVAUDIT_NVML_USED"
"""Device memory in use per physical GPU before any vLLM process existed, measured by the boot
process and handed to the workers (JSON {index or UUID: bytes})."""


def nvml_used_by_device() -> dict[str, int]:
    """NVML's used bytes of every GPU, keyed by physical index and by UUID; {} without NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return {}
    out: dict[str, int] = {}
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            used = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            out[str(i)] = used
            out[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = used
    except Exception:
        pass
    finally:
        pynvml.nvmlShutdown()
    return out


def others_for_rank(local_rank: int, *, has_context: bool) -> int | None:
    """Other processes' device memory for the GPU this rank takes: from the boot process's
    reading when there is one, else NVML now if this process has no CUDA context yet, else
    unknown."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    target = visible[local_rank] if local_rank < len(visible) else str(local_rank)
    try:
        table = json.loads(os.environ.get(OTHERS_ENV, "{}"))
    except json.JSONDecodeError:
        table = {}
    if isinstance(table.get(target), int):
        return table[target]
    return None if has_context else nvml_device_used(local_rank)


def nvml_device_used(local_rank: int) -> int | None:
    """Device memory in use on the GPU this rank will take, by NVML, without touching CUDA.

    Read before the process creates its CUDA context, it is what other processes hold.
    CUDA_VISIBLE_DEVICES maps the rank's logical index to a physical index or UUID."""
    try:
        import pynvml
    except ImportError:
        return None
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    try:
        pynvml.nvmlInit()
        try:
            target = visible[local_rank] if local_rank < len(visible) else str(local_rank)
            if target.isdigit():
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(target))
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(target)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None
