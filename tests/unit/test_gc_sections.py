"""gc_sections: a section's collections walk only what was made inside it (issue 31's overhead
work), keep a cycle that holds an older object until the section ends, and in check mode count
what a full collection finds after each of them."""

from __future__ import annotations

import gc
import weakref

import pytest

from kvaudit.engines import gc_sections


class Node:
    """A gc-tracked object that can hold itself in a cycle."""

    def __init__(self) -> None:
        self.me: Node | None = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    node = Node()
    node.me = node
    return node, weakref.ref(node)


@pytest.fixture(autouse=True)
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_unknown_or_unset_mode_is_on(monkeypatch):
    monkeypatch.delenv(gc_sections.GC_SECTIONS_ENV, raising=False)
    assert gc_sections.mode() == "on"
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "fast")
    assert gc_sections.mode() == "on"
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, " Check ")
    assert gc_sections.mode() == "check"
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "OFF")
    assert gc_sections.mode() == "off"


def test_unset_opens_a_section(monkeypatch):
    monkeypatch.delenv(gc_sections.GC_SECTIONS_ENV, raising=False)
    with gc_sections.section("default") as tally:
        assert tally is None
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_off_freezes_nothing(monkeypatch):
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "off")
    with gc_sections.section("off") as tally:
        assert tally is None
        assert gc.get_freeze_count() == 0


def test_a_cycle_made_inside_is_collected_inside(monkeypatch):
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "on")
    with gc_sections.section("young"):
        assert gc.get_freeze_count() > 0
        node, ref = cycle()
        del node
        gc_sections.collect()
        assert ref() is None
    assert gc.get_freeze_count() == 0


def test_a_cycle_older_than_the_section_waits_for_its_end(monkeypatch):
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "on")
    node, ref = cycle()
    with gc_sections.section("old"):
        del node
        gc_sections.collect()
        assert ref() is not None  # frozen with the heap: the section's collection does not walk it
    gc.collect()
    assert ref() is None


def test_check_counts_what_the_sections_collections_missed(monkeypatch):
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "check")
    notes: list[str] = []
    node, ref = cycle()
    with gc_sections.section("old", notes.append) as tally:
        assert tally is not None
        del node
        gc_sections.collect()
        assert ref() is None  # the check's full collection freed it: readings stay exact
        assert gc.get_freeze_count() > 0  # and the heap is frozen again for the next one
        gc_sections.collect()
    assert tally.collections == 3 and tally.missed >= 1  # the node (and its __dict__ where it has one)
    assert notes == ["gc check (old): 3 collections checked, the section's end included; "
                     f"a full collection after each found {tally.missed} objects they missed"]


def test_check_says_how_much_device_memory_the_missed_objects_held(monkeypatch):
    """With a reader of the device's allocated bytes, the note says what the checking collections freed of
    it: 0 proves the section's readings equal a full collection's; here a missed cycle held 4096 bytes."""
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "check")
    allocated = {"bytes": 0}

    class Buffer(Node):
        def __init__(self) -> None:
            super().__init__()
            allocated["bytes"] += 4096
            weakref.finalize(self, allocated.__setitem__, "bytes", 0)

    notes: list[str] = []
    buffer = Buffer()
    buffer.me = buffer
    with gc_sections.section("old", notes.append, lambda: allocated["bytes"]) as tally:
        del buffer
        gc_sections.collect()
        assert allocated["bytes"] == 0
    assert tally is not None and tally.held_bytes == 4096
    assert notes[0].endswith("objects they missed, holding 4096 bytes of device memory")
    with gc_sections.section("young", notes.append, lambda: allocated["bytes"]) as tally:
        gc_sections.collect()
    assert tally is not None and tally.held_bytes == 0
    assert notes[1].endswith("found 0 objects they missed, holding 0 bytes of device memory")


def test_check_finds_nothing_where_only_young_cycles_die(monkeypatch):
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "check")
    notes: list[str] = []
    with gc_sections.section("young", notes.append) as tally:
        node, ref = cycle()
        del node
        gc_sections.collect()
        assert ref() is None
    assert tally is not None and (tally.collections, tally.missed) == (2, 0)
    assert notes[0].endswith("found 0 objects they missed")


def test_the_end_checks_a_section_with_no_settle(monkeypatch):
    """vLLM's own gc.collect() inside a section (its profiling teardown) walks only what is young
    too: the section's end checks what that missed."""
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "check")
    notes: list[str] = []
    node, ref = cycle()
    with gc_sections.section("warmup", notes.append) as tally:
        del node
        gc.collect()  # not a settle: unchecked
        assert ref() is not None
    assert ref() is None
    assert tally is not None and tally.collections == 1 and tally.missed >= 1


def test_a_frozen_heap_is_left_as_it_was(monkeypatch):
    """vLLM freezes the heap itself (freeze_gc_heap, its capture context): a section opened then
    does nothing, and its end does not unfreeze what vLLM froze."""
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "on")
    gc.freeze()
    notes: list[str] = []
    with gc_sections.section("inside vLLM's", notes.append) as tally:
        assert tally is None
    assert gc.get_freeze_count() > 0
    assert len(notes) == 1 and notes[0].startswith("gc sections (inside vLLM's): not opened, the heap was frozen")


def test_a_section_inside_another_does_nothing(monkeypatch):
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "check")
    notes: list[str] = []
    with gc_sections.section("outer", notes.append):
        with gc_sections.section("inner", notes.append) as inner:
            assert inner is None
        assert gc.get_freeze_count() > 0
    assert [n.split(")")[0] for n in notes] == ["gc check (outer"]
    assert gc.get_freeze_count() == 0


def test_the_interpreters_own_freeze_is_no_freeze_of_vllms(monkeypatch):
    """CPython 3.12 starts with objects frozen (375 in 3.12.1, the GPU machine's Python): that
    count is the baseline, and only a freeze beyond it keeps a section closed. Read as vLLM's, it
    kept every section closed on the H100 (2026-12-06e)."""
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "check")
    gc.freeze()  # as the interpreter's start does in 3.12
    monkeypatch.setattr(gc_sections, "INTERPRETER_FROZEN", gc.get_freeze_count())
    assert gc_sections.frozen_by_another() == 0
    notes: list[str] = []
    with gc_sections.section("warmup", notes.append) as opened:
        assert opened is not None and gc.get_freeze_count() > 0
    assert [n.split(")")[0] for n in notes] == ["gc check (warmup"]
    # a freeze beyond the interpreter's (vLLM's freeze_gc_heap) still keeps a section closed
    monkeypatch.setattr(gc_sections, "INTERPRETER_FROZEN", 1)
    gc.freeze()
    assert gc_sections.frozen_by_another() == gc.get_freeze_count() > 1
    with gc_sections.section("after vLLM's freeze", notes.append) as closed:
        assert closed is None
    assert notes[-1].startswith("gc sections (after vLLM's freeze): not opened")


def test_a_heap_another_unfroze_is_frozen_again_at_the_next_collection(monkeypatch):
    """vLLM's capture context unfreezes the whole heap on its way out (and collects fully): the next
    settle inside the section collects fully once and freezes the heap again, so the settles after it
    walk only what is young once more."""
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "on")
    old, old_ref = cycle()
    with gc_sections.section("sizing"):
        assert gc.get_freeze_count() > 0
        gc.unfreeze()  # as vLLM's freeze_gc_for_cudagraph_capture does when it ends
        mid, mid_ref = cycle()  # made before the refreeze, dies after it
        del old
        gc_sections.collect()
        assert old_ref() is None  # the heap was not frozen: this collection was full
        assert gc.get_freeze_count() > 0  # and the heap is frozen again
        del mid
        gc_sections.collect()
        assert mid_ref() is not None  # frozen by the refreeze: the young collection does not walk it
    gc.collect()
    assert mid_ref() is None


def test_check_does_not_count_the_refreezing_collection(monkeypatch):
    """That refreezing collection was a full one: there is nothing to check after it."""
    monkeypatch.setenv(gc_sections.GC_SECTIONS_ENV, "check")
    notes: list[str] = []
    with gc_sections.section("sizing", notes.append) as tally:
        gc.unfreeze()
        gc_sections.collect()
        assert gc.get_freeze_count() > 0
    assert tally is not None and tally.collections == 1  # the section's end alone
