"""The property tests (hypothesis) draw the same inputs on every run, so that a failure seen once
is seen again on the same checkout with the same hypothesis release (the test extra asks for 6.100
or later: another release may draw others, and a failure prints its input). A drawn input that
broke kvaudit is then pinned as the test's @example (tests/unit/test_logs_robust.py holds one such). New draws are for a
search on purpose: `KVAUDIT_HYPOTHESIS=explore pytest tests/unit`, whose failures hypothesis prints
with the input to pin. hypothesis is a test extra only: the GPU machine runs tests/gpu without it."""

from __future__ import annotations

import os

try:
    from hypothesis import settings
except ImportError:  # tests/gpu on the device: no property tests there
    settings = None

if settings is not None:
    settings.register_profile("reproducible", derandomize=True, database=None)
    settings.register_profile("explore")
    settings.load_profile("explore" if os.environ.get("KVAUDIT_HYPOTHESIS") == "explore" else "reproducible")
