"""The boot's failure in its logs: the root cause among the failure facts (failures.root_cause:
the catalogue's priority, then the earliest, as for a run's own log), the phase it struck in (stated by the message, else the last
milestone printed before it), the rank that printed it, and failures after startup finished,
which are notes, not the boot's.
"""

from __future__ import annotations

from kvaudit.engines.failures import root_cause
from kvaudit.engines.logs.facts import FactKind, FailureFact
from kvaudit.engines.logs.ranks import Boot, engine_config, parallel_sizes, rank_of_proc, untagged
from kvaudit.schema import Failure, FailureKind, Phase

BOOT_DONE = "init engine (profile, create kv cache, warmup model) took"
"""v1/engine/core.py `_initialize_kv_caches`' last line: after it, a failure is not the boot's."""

# First lines that show the boot entered a phase, for failures whose message does not say where.
_MILESTONES: tuple[tuple[Phase, tuple[str, ...]], ...] = (
    (Phase.LOAD, ("Starting to load model", "Loading model from scratch", "Initializing model took",
                  "Loading weights took", "Loading safetensors checkpoint shards")),
    (Phase.PROFILE, ("Model loading took",)),
    (Phase.GRAPHS, ("Profiling CUDA graph memory", "Estimated CUDA graph memory")),
    (Phase.KV, ("Available KV cache memory", "KV cache size: ", "Auto set (", "Explicitly set (")),
)
_CAPTURE_MARKS = ("Capturing CUDA graphs", "Graph capturing finished", "JIT kernel warmup", "autotune",
                  "Compile and warming up", "Warming up FlashInfer", "DeepGEMM warmup")


def _timeline_phase(text: str, pos: int) -> Phase:
    """The phase the boot was in at `pos`: the last milestone printed before it."""
    phase, at = Phase.BASELINE, -1
    for name, marks in _MILESTONES:
        hits = [i for m in marks if (i := text.find(m, 0, pos)) >= 0]
        if hits and min(hits) > at:
            phase, at = name, min(hits)
    if phase is Phase.KV:
        hits = [i for m in _CAPTURE_MARKS if (i := text.find(m, at, pos)) >= 0]
        if hits:
            phase = Phase.CAPTURE
    return phase


def find_failure(boot: Boot, world_size: int | None) -> tuple[Failure | None, int | None, list[str]]:
    """The boot's failure (root cause first), its max feasible length, and post-boot notes."""
    facts = boot.engine.get(FactKind.FAILURE, [])
    by_file = {s.index: s for s in boot.scans}
    boot_done: dict[int, int] = {}
    during, after = [], []
    for f in facts:
        scan = by_file[f.file]
        if f.file not in boot_done:
            done = scan.text.find(BOOT_DONE)
            boot_done[f.file] = done if done >= 0 else len(scan.text) + 1
        (after if f.pos > boot_done[f.file] else during).append(f)
    notes = sorted({f"after startup finished: {f.value.message}" for f in after})
    if not during:
        return None, None, notes
    root = root_cause([(f.value.priority, (f.file, f.pos), f) for f in during])
    value: FailureFact = root.value
    scan = by_file[root.file]
    phase = value.phase or _timeline_phase(scan.text, root.pos)
    rank, tag = rank_of_proc(scan, root.pid, parallel_sizes(boot.scans, engine_config(boot.engine)))
    if rank is None and (world_size == 1 or untagged(boot)):
        rank = 0
    feasible = None
    if value.kind is FailureKind.DOES_NOT_FIT:
        lens = [f.value for f in boot.engine.get(FactKind.MAX_FEASIBLE_LEN, []) if f.pos <= boot_done[f.file]]
        feasible = lens[0] if lens else None
    return Failure(phase=phase, rank=rank, kind=value.kind, message=value.message), feasible, notes
