"""The fixed profiling order's machinery, shared by every engine: phase bracketing (into the
per-rank journal, engines/journal.py) and the warmup guard.

An engine drives the phases (load → profile → persistent → replay → graphs → kv → capture →
verify); `RankSequencer.phase()` brackets each one: reset peak stats at the start, settle and
read the probe at the end, append one journal line. The journal is the rank's whole record: the
driver tails it for live progress, reads it when the rank dies, and the same list of events
comes back through collective_rpc when the rank lives.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kvaudit.engines.journal import Journal
from kvaudit.engines.probes import Probe
from kvaudit.engines.stage_profile import StageProfiler
from kvaudit.schema import Phase, PhaseStatus


@dataclass
class PhaseHandle:
    """What the code inside a phase may add to its record."""

    status: PhaseStatus = PhaseStatus.OK
    detail: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def note(self, text: str) -> None:
        self.detail = text if not self.detail else f"{self.detail}; {text}"


class RankSequencer:
    """One rank's phases, measured by one probe, journaled as they complete."""

    def __init__(self, probe: Probe, journal: Journal, tracer: Any = None):
        self.probe = probe
        self.journal = journal
        self.tracer = tracer
        """An engines.trace.AllocationTracer (`--trace`), or None."""
        self.done: set[Phase] = set()

    def fact(self, **facts: Any) -> None:
        """A rank-level fact (device total, graph estimate, KV bytes, …) for the record."""
        self.journal.write({"type": "fact", **facts})

    @contextmanager
    def phase(self, name: Phase, *, settle: bool = True) -> Iterator[PhaseHandle]:
        handle = PhaseHandle()
        self.journal.write({"type": "start", "phase": name.value})
        self.probe.sync()
        self.probe.reset_peak()
        if self.tracer is not None:
            self.tracer.begin(name.value)
        start = time.perf_counter()
        profiler = StageProfiler.start(name.value)  # None unless KVAUDIT_PROFILE_DIR is set
        try:
            try:
                yield handle
            except STOPPED as exc:  # the boot is being stopped: no error of this rank's
                self._record(name, start, PhaseStatus.INTERRUPTED, interrupted(exc), settle=False, facts=handle.facts)
                raise
            except BaseException as exc:
                self._record(name, start, PhaseStatus.FAILED, exception_line(exc), settle=False, facts=handle.facts)
                self.journal.write({"type": "error", "phase": name.value, "error": type(exc).__name__,
                                    "message": exception_line(exc)})
                raise
            self._record(name, start, handle.status, handle.detail, settle=settle, facts=handle.facts)
        finally:  # the phase's closing settle and reading are in its seconds, so in its profile too
            if profiler is not None:
                profiler.stop()

    def _record(self, name: Phase, start: float, status: PhaseStatus, detail: str | None, *, settle: bool,
                facts: dict[str, Any]) -> None:
        reading = None
        try:
            if settle:
                self.probe.settle()
            else:
                self.probe.sync()
            reading = self.probe.read()
        except Exception as exc:  # a dead device cannot be read; the phase still gets its line
            failed = f"probe failed: {exception_line(exc)}"
            detail = f"{detail}; {failed}" if detail else failed
        event: dict[str, Any] = {"type": "phase", "name": name.value, "status": status.value,
                                 "seconds": round(time.perf_counter() - start, 3), "detail": detail}
        if reading is not None:
            event.update(torch_allocated_bytes=reading.allocated_bytes, torch_reserved_bytes=reading.reserved_bytes,
                         torch_peak_allocated_bytes=reading.peak_allocated_bytes,
                         torch_peak_reserved_bytes=reading.peak_reserved_bytes,
                         device_used_bytes=reading.device_used_bytes, graph_pool_bytes=reading.graph_pool_bytes,
                         free_bytes=reading.free_bytes)
            if self.tracer is not None:
                try:
                    event["sites"] = self.tracer.sites(name.value)
                except Exception as exc:  # a trace is an aid: the phase keeps its measurement
                    event["trace_error"] = exception_line(exc)
        event.update(facts)
        self.journal.write(event)
        self.done.add(name)


STOPPED = (SystemExit, KeyboardInterrupt)
"""What a rank's process raises when it is told to stop (vLLM's workers turn SIGTERM and SIGINT into
SystemExit): the phase it was in is interrupted, not failed."""


def interrupted(exc: BaseException) -> str:
    """The phase's detail: what happened, not the exception that carried it."""
    return "interrupted: the boot was stopped while this phase ran"


def exception_line(exc: BaseException, limit: int = 2000) -> str:
    """`ClassName: the first line of its message`, at most `limit` characters: an exception as a
    journal, a phase detail or a verify error states it (kvaudit.printable.one_line is another
    thing: any text made one safe line for a terminal)."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:limit]


class WarmupFailed(RuntimeError):
    """The persistent warmup failed on its first attempt and on the retry."""


class WarmupGuard:
    """Runs the persistent warmup once.

    Idempotent: after a success, later calls (vLLM's own, inside compile_or_warm_up_model) are
    no-ops. Retryable: a failed attempt leaves no done mark, and the retry happens on every rank
    or on none, decided by `agree` (an all-reduce of "did any rank fail?"), because warmups
    hold collectives (FlashInfer autotune's all_gather_object and barrier) and a retry on one
    rank alone would hang the others.
    """

    def __init__(self, agree: Callable[[bool], bool] = lambda failed: failed, attempts: int = 2):
        self.agree = agree
        self.max_attempts = attempts
        self.done = False
        self.attempts = 0
        self.errors: list[str] = []
        self.skipped_calls = 0

    def run(self, fn: Callable[[], Any]) -> bool:
        """Run fn unless it already succeeded; True when it ran now."""
        if self.done:
            self.skipped_calls += 1
            return False
        for attempt in range(1, self.max_attempts + 1):
            self.attempts += 1
            failure: Exception | None = None
            try:
                fn()
            except Exception as exc:  # KeyboardInterrupt and SystemExit propagate
                failure = exc
            if not self.agree(failure is not None):
                self.done = True
                return True
            self.errors.append(f"attempt {attempt}: " + (exception_line(failure) if failure else "another rank failed"))
        raise WarmupFailed("; ".join(self.errors))
