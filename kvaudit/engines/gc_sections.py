"""Cheaper garbage collections inside kvaudit's own measurement sections, for the overhead work
(issue 31). Every settle collects garbage before a reading (the probes' `settle`). A full
collection walks every object the process tracks: 0.42 s in the CPU worker (embedded model,
AMD EPYC) and 0.85 s in vLLM 0.34's GPU worker (Llama-3.1-8B dimensions, H100, under cProfile,
2026-12-06), and one GPU boot collects about 40 times, 19 of them in the graphs phase.

A section (`section`) collects fully once and freezes what is left (gc.freeze), so each
collection inside walks only the objects made since. Garbage made inside is collected as
before; a cycle that holds an object older than the section is kept until the section ends.
The readings are exact where no such cycle dies inside the section. On the H100 (vLLM 0.34.0,
2026-12-07) the three real-dimension models (Llama-3.1-8B, DeepSeek-V2-Lite, DeepSeek-V3 dims with
MTP) sized the same KV to the token with the sections on as with every collection checked, so
they run unless `KVAUDIT_GC_SECTIONS` says otherwise:

- `on` (the default, also where the variable is unset or not one of MODES): the sections run;
- `off`: every settle collects fully, as before the sections;
- `check`: they run, and each settle's collection inside is followed by a full one whose finds
  are counted (objects the section's collection missed), and so is the section's end (vLLM's own
  collections inside are checked there); the section's note says how many. Zero at every check
  of a boot proves that boot's path; the readings stay exact either way.

vLLM's own capture context unfreezes the whole heap on its way out
(gc_utils.freeze_gc_for_cudagraph_capture, also around vLLM 0.29+'s graph estimate): the next
settle inside the section then collects fully once and freezes the heap again. A section opened
while the heap is frozen (by vLLM, or an outer section) does nothing; its end unfreezes the whole
heap, so nothing inside it may freeze the heap to keep it frozen (no vLLM 0.34 path in a section does).

One section spans the profile pass and the persistent warmup (AuditMixin.determine_available_memory),
so the profile phase's closing settle is a young collection too; it closes before the replay, and the
graph measurement and the long-prefill probe open their own. Where the heap was refrozen, an object
older than the refreeze that dies in a cycle is missed as one older than the section is.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

GC_SECTIONS_ENV = "KVAUDIT_GC_SECTIONS"
MODES = ("off", "on", "check")


DEFAULT_MODE = "on"


def mode() -> str:
    """The environment's mode; unset or anything not in MODES is the default."""
    value = os.environ.get(GC_SECTIONS_ENV, "").strip().lower()
    return value if value in MODES else DEFAULT_MODE


@dataclass
class Tally:
    """What a checked section's collections missed: `collections` checked, `missed` objects."""
    collections: int = 0
    missed: int = 0
    held_bytes: int | None = None
    """Device memory the missed objects held (what the checking collections freed of it), where the section
    was given a reader: the figure that decides whether a section's readings can differ from a full one's."""


_open: Tally | None = None
_checking = False
_held: Callable[[], int] | None = None
INTERPRETER_FROZEN = gc.get_freeze_count()
"""What was frozen when this module was imported (in vLLM's worker, before vLLM could freeze anything):
the interpreter's own. CPython 3.12 starts with objects frozen (375 in 3.12.1, the GPU machine's
Python; 0 in 3.11 and 3.13), so a non-zero count alone is no freeze of vLLM's: read that way,
no section opened on the H100 (vLLM 0.34.0, 2026-12-06e). A count above this one is."""


def frozen_by_another() -> int:
    """The objects frozen beyond the interpreter's own (vLLM's freeze_gc_heap, its capture context,
    a section open already); 0 where none."""
    count = gc.get_freeze_count()
    return count if count > INTERPRETER_FROZEN else 0


def collect() -> None:
    """gc.collect(), as a settle does it. Inside a section whose heap another unfroze (vLLM's capture
    context does on its way out) that collection was a full one: the heap is frozen again, so the
    section's later collections walk only what is young again. Inside a checked section, a young
    collection is followed by a full one whose finds are counted, then the heap frozen again."""
    gc.collect()
    tally = _open
    if tally is None:
        return
    if not frozen_by_another():
        gc.freeze()
    elif _checking:
        gc.unfreeze()
        _full_check(tally, _held)
        gc.freeze()


def _full_check(tally: Tally, held: Callable[[], int] | None) -> None:
    """One full collection, its finds counted, and the device memory they held where a reader is given."""
    before = held() if held is not None else None
    tally.missed += gc.collect()
    tally.collections += 1
    if before is not None and held is not None:
        tally.held_bytes = (tally.held_bytes or 0) + max(0, before - held())


@contextmanager
def section(name: str, note: Callable[[str], None] | None = None,
            held: Callable[[], int] | None = None) -> Iterator[Tally | None]:
    """Collect fully, freeze the heap, run the body, unfreeze; the Tally where the mode is check
    (noted through `note` at the end), else None. Nothing where off or the heap is frozen already.
    `held` reads the device's allocated bytes (torch.cuda.memory_allocated): a check then says how much
    of it the objects a section's collections missed held."""
    global _open, _checking, _held
    chosen = mode()
    frozen = frozen_by_another()
    if chosen == "off" or _open is not None or frozen:
        if chosen != "off" and _open is None and note is not None:
            # said, so that a boot whose sections never open shows why
            note(f"gc sections ({name}): not opened, the heap was frozen already ({frozen} objects)")
        yield None
        return
    gc.collect()
    tally = Tally()
    checking = chosen == "check"
    try:
        gc.freeze()
        _open, _checking, _held = tally, checking, held
        yield tally if checking else None
    finally:
        _open, _checking, _held = None, False, None
        gc.unfreeze()
    if checking:
        # and at the end: a section may hold no settle of kvaudit's, only vLLM's own collections
        _full_check(tally, held)
        if note is not None:
            holding = f", holding {tally.held_bytes} bytes of device memory" if tally.held_bytes is not None else ""
            note(f"gc check ({name}): {tally.collections} collections checked, the section's end included; "
                 f"a full collection after each found {tally.missed} objects they missed{holding}")
