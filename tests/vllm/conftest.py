"""Boots more than one module reads: each runs once per session (the CI's time is the boots')."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tp2_boot():
    """`kvaudit run --tp 2 --mtp 1 --max-model-len 1024` to its end, watched from outside
    (boot_processes.watch_tp2_boot): test_run_cpu.py reads its report, test_signals_cpu.py what it left."""
    pytest.importorskip("vllm")
    from boot_processes import watch_tp2_boot
    return watch_tp2_boot("success", None)
