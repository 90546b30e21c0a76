"""The property tests (hypothesis) draw the same inputs on every run, so that a failure seen once
is seen again on the same checkout with the same hypothesis release (the test extra asks for 6.100
or later: another release may draw others, and a failure prints its input). A drawn input that
broke kvaudit is then pinned as the test's @example (tests/unit/test_logs_robust.py holds one such). New draws are for a
search on purpose: `KVAUDIT_HYPOTHESIS=explore pytest tests/unit`, whose failures hypothesis prints
with the input to pin. hypothesis is a test extra only: the GPU machine runs tests/gpu without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:
    from hypothesis import settings
except ImportError:  # tests/gpu on the device: no property tests there
    settings = None

if settings is not None:
    settings.register_profile("reproducible", derandomize=True, database=None)
    settings.register_profile("explore")
    settings.load_profile("explore" if os.environ.get("KVAUDIT_HYPOTHESIS") == "explore" else "reproducible")


# ---------------------------------------------------------------------------------------------------------------
# Two processes where a run names a directory (pytest-xdist, a test extra; `-n 0` or `-p no:xdist` runs in one).
# The real vLLM boots (tests/vllm) go to one process, one after another as before, and come first; the other
# process takes everything else meanwhile. A CPU boot pins its worker to a core and keeps the other for vLLM's own
# processes, which are mostly waiting: the rest of the suite (4.5 min on the 2-core AMD EPYC) fits beside the
# boots (21 min), where it ran after them. Two boots never run at once: each measures the memory of a machine
# the other would share, and a TP2 boot pins both cores.

BOOTS = "tests/vllm/"


def _names_a_directory(config: pytest.Config) -> bool:
    here = Path(config.invocation_params.dir)
    return any((here / arg.split("::")[0]).is_dir() for arg in config.args)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    chosen = config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None) is not None
    if (config.pluginmanager.hasplugin("xdist") and not chosen and "PYTEST_XDIST_WORKER" not in os.environ
            and _names_a_directory(config) and not config.getoption("collectonly")
            and not config.getoption("usepdb") and len(os.sched_getaffinity(0)) >= 2):
        config.option.numprocesses = 2
        config.option.dist = "load"
        config.option.tx = ["popen"] * 2


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    from xdist.scheduler import LoadScopeScheduling

    class BootsInOneProcess(LoadScopeScheduling):
        """Every test of tests/vllm is one unit of work, so one process runs them all (and each module's
        boots once); every other test is a unit of its own."""

        def _split_scope(self, nodeid: str) -> str:
            return BOOTS if nodeid.startswith(BOOTS) else nodeid

    return BootsInOneProcess(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # the boots first: the longest unit of work, which the other process's tests then fit beside
    items.sort(key=lambda item: not item.nodeid.startswith(BOOTS))
