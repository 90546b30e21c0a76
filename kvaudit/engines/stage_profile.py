"""Where a phase's seconds go, for the overhead work (issue 31): with `KVAUDIT_PROFILE_DIR` set in
the environment of `kvaudit run`, every phase of every rank runs under cProfile and leaves two files
in that folder, `<phase>-pid<N>.pstats` and `<phase>-pid<N>.txt` (the calls with the most cumulative
time). vLLM's workers inherit the environment, so each rank writes its own. Unset, nothing runs.
Every phase RankSequencer.phase brackets is profiled: all but the baseline, which each engine reads
itself. A later boot of the same pid (`--repeat`) writes over an earlier one's files.

A profile is an aid: a folder that cannot be written costs the phase nothing but the files. A phase
that opens inside another (none does today) is timed, not profiled: one profiler runs at a time.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
from pathlib import Path

PROFILE_ENV = "KVAUDIT_PROFILE_DIR"
TOP_CALLS = 60
"""How many calls the text file lists, by cumulative time."""

_active = False


class StageProfiler:
    """One phase's profile: `start` (None where profiling is off or one runs already), then `stop`."""

    def __init__(self, folder: Path, name: str):
        self.folder = folder
        self.name = name
        self.profile = cProfile.Profile()

    @classmethod
    def start(cls, name: str) -> StageProfiler | None:
        global _active
        folder = os.environ.get(PROFILE_ENV)
        if not folder or _active:
            return None
        profiler = cls(Path(folder), name)
        try:
            profiler.profile.enable()  # raises where another profiler runs (Python 3.12's sys.monitoring)
        except Exception:  # noqa: BLE001 - an aid: the phase runs unprofiled
            return None
        _active = True
        return profiler

    def stop(self) -> None:
        global _active
        self.profile.disable()
        _active = False
        stem = self.folder / f"{self.name}-pid{os.getpid()}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.profile.dump_stats(str(stem) + ".pstats")
            text = io.StringIO()
            pstats.Stats(self.profile, stream=text).sort_stats("cumulative").print_stats(TOP_CALLS)
            (stem.parent / (stem.name + ".txt")).write_text(text.getvalue(), encoding="utf-8")
        except Exception:  # noqa: BLE001 - an aid: never the phase's error, never in its place
            pass
