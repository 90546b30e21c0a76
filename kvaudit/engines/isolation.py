"""The environment of kvaudit's child processes (the vLLM boot, the selftest launcher and ranks).

`python -m kvaudit.engines.…` puts the current directory first on sys.path, so a folder named
`kvaudit/` where the user stands (a clone of this repository, a checkout of something else) would
be imported instead of the installed package: the boot then died at its first import, and the
report said only that a worker died. PYTHONSAFEPATH=1 (Python 3.11+, inherited by every process
below, vLLM's spawned workers included) leaves the current directory off sys.path, so the children
import the package this kvaudit was installed as.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def installed_only_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with PYTHONSAFEPATH=1."""
    env = dict(os.environ if base is None else base)
    env["PYTHONSAFEPATH"] = "1"
    return env
