"""The browser tests: kvaudit's HTML pages loaded in Debian's headless Chromium over the DevTools
protocol (tests/browser/cdp.py). Skipped, with the reason, where no chromium is installed
(`apt-get install chromium`; .ci/run installs it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))                  # cdp
sys.path.insert(0, str(HERE.parent / "unit"))  # factories

from cdp import Browser, chromium  # noqa: E402

_spec = importlib.util.spec_from_file_location("kvaudit_unit_conftest", HERE.parent / "unit" / "conftest.py")
_unit = sys.modules["kvaudit_unit_conftest"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_unit)  # the unit tests' in-process CLI runner, shared

NO_CHROMIUM = ("no chromium on this machine: the HTML report's browser tests need Debian's headless Chromium "
               "(apt-get install chromium, or KVAUDIT_CHROMIUM=/path/to/chromium)")


@pytest.fixture(scope="session")
def browser():
    if chromium() is None:
        pytest.skip(NO_CHROMIUM)
    with Browser() as b:
        yield b


@pytest.fixture
def cli():
    return _unit.run_cli
