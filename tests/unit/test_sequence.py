"""The sequence machinery: the warmup guard (idempotent, retry once on every rank or none), the
per-rank journal (a torn last line is skipped), RankSequencer's phase bracketing with a fake
probe, and measured_ranks.fold."""

from __future__ import annotations

import json
import os
import pstats
from types import SimpleNamespace

import pytest
from factories import GiB

from kvaudit.engines import measured_ranks
from kvaudit.engines.journal import JOURNAL_ENV, Journal, read_journal
from kvaudit.engines.sequence import RankSequencer, WarmupFailed, WarmupGuard
from kvaudit.schema import Phase, PhaseStatus

# ------------------------------------------------------------------------------------------
# WarmupGuard


class Step:
    """A warmup that fails the first `failures` times it is called."""

    def __init__(self, failures: int = 0, exc: type[BaseException] = RuntimeError):
        self.calls, self.failures, self.exc = 0, failures, exc

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc(f"autotune failed (call {self.calls})\nsecond line of the error")


def test_a_successful_warmup_runs_once_and_later_calls_are_no_ops():
    guard, step = WarmupGuard(), Step()
    assert guard.run(step) is True
    # vLLM's own compile_or_warm_up_model calls the warmup again: nothing happens
    assert guard.run(step) is False and guard.run(step) is False
    assert step.calls == 1 and guard.done and guard.attempts == 1 and guard.skipped_calls == 2
    assert guard.errors == []


def test_a_failed_attempt_is_retried_once_and_leaves_its_error():
    guard, step = WarmupGuard(), Step(failures=1)
    assert guard.run(step) is True
    assert step.calls == 2 and guard.attempts == 2 and guard.done
    assert guard.errors == ["attempt 1: RuntimeError: autotune failed (call 1)"]   # first line only
    assert guard.run(step) is False and step.calls == 2


def test_two_failures_raise_warmup_failed_and_leave_no_done_mark():
    guard, step = WarmupGuard(), Step(failures=5)
    with pytest.raises(WarmupFailed) as info:
        guard.run(step)
    assert step.calls == 2 and not guard.done
    assert str(info.value) == ("attempt 1: RuntimeError: autotune failed (call 1); "
                               "attempt 2: RuntimeError: autotune failed (call 2)")


def test_agree_forces_a_retry_on_a_rank_that_succeeded_when_another_failed():
    # GIVEN this rank's warmup succeeds, but on attempt 1 another rank failed (the all-reduce says so)
    votes: list[bool] = []
    verdicts = iter([True, False])   # any rank failed? attempt 1: yes; attempt 2: no

    def agree(failed: bool) -> bool:
        votes.append(failed)
        return next(verdicts)

    guard, step = WarmupGuard(agree=agree), Step()
    assert guard.run(step) is True
    # THEN it ran again with the others (a retry on one rank alone would hang their collectives)
    assert step.calls == 2 and votes == [False, False]
    assert guard.errors == ["attempt 1: another rank failed"] and guard.done


def test_two_ranks_retry_together():
    # GIVEN rank 0 fails its first attempt and rank 1 succeeds: an all-reduce of "failed?" per attempt
    steps = {0: Step(failures=1), 1: Step()}
    failed_by_attempt: dict[int, list[bool]] = {}
    guards = {}

    for rank in (0, 1):
        def agree(failed, rank=rank):
            # an all-reduce: rank 1 (run second) sees rank 0's vote of the same attempt
            attempt = guards[rank].attempts
            failed_by_attempt.setdefault(attempt, []).append(failed)
            return any(failed_by_attempt[attempt])
        guards[rank] = WarmupGuard(agree=agree)

    assert guards[0].run(steps[0]) is True
    assert guards[1].run(steps[1]) is True
    assert steps[0].calls == 2 and steps[1].calls == 2   # both ran twice
    assert guards[1].errors == ["attempt 1: another rank failed"]
    assert failed_by_attempt == {1: [True, False], 2: [False, False]}


def test_all_ranks_agreeing_on_failure_twice_raises_everywhere():
    guard, step = WarmupGuard(agree=lambda failed: True), Step()
    with pytest.raises(WarmupFailed, match=r"attempt 1: another rank failed; attempt 2: another rank failed"):
        guard.run(step)
    assert step.calls == 2 and not guard.done


def test_keyboard_interrupt_is_not_swallowed():
    guard = WarmupGuard()
    with pytest.raises(KeyboardInterrupt):
        guard.run(Step(failures=1, exc=KeyboardInterrupt))
    assert not guard.done and guard.attempts == 1


# ------------------------------------------------------------------------------------------
# Journal


def test_journal_lines_survive_a_torn_last_line(tmp_path):
    path = tmp_path / "rank0.jsonl"
    journal = Journal(path)
    journal.write({"type": "start", "phase": "load"})
    journal.write({"type": "phase", "name": "load", "torch_allocated_bytes": 10 * GiB})
    # the rank dies in the middle of its next write
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"type": "phase", "name": "prof')
    events = read_journal(path)
    assert [e["type"] for e in events] == ["start", "phase"]
    assert events[1]["torch_allocated_bytes"] == 10 * GiB
    assert all(isinstance(e["t"], float) for e in events)   # every line is timestamped
    assert journal.events == events                          # the in-memory copy is the same list


def test_read_journal_skips_garbage_and_non_objects(tmp_path):
    path = tmp_path / "rank1.jsonl"
    path.write_bytes(b'{"type": "rank", "rank": 1}\n[1, 2]\n\xff\xfe garbage\n"text"\n{"type": "fact", "x": 1}\n')
    assert read_journal(path) == [{"type": "rank", "rank": 1}, {"type": "fact", "x": 1}]
    assert read_journal(tmp_path / "missing.jsonl") == []


def test_journal_for_rank_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(JOURNAL_ENV, str(tmp_path))
    journal = Journal.for_rank(3)
    journal.write({"type": "fact", "a": 1})
    assert journal.path == tmp_path / "rank3.jsonl" and read_journal(journal.path)[0]["a"] == 1
    monkeypatch.delenv(JOURNAL_ENV)
    memory_only = Journal.for_rank(3)
    memory_only.write({"type": "fact"})
    assert memory_only.path is None and len(memory_only.events) == 1


# ------------------------------------------------------------------------------------------
# RankSequencer with a fake probe


class FakeProbe:
    """Counts what the sequencer asks for; each read returns the next planted reading."""

    def __init__(self, readings, fail_read: bool = False):
        self.log: list[str] = []
        self.readings = list(readings)
        self.fail_read = fail_read

    def sync(self):
        self.log.append("sync")

    def reset_peak(self):
        self.log.append("reset_peak")

    def settle(self):
        self.log.append("settle")

    def read(self):
        self.log.append("read")
        if self.fail_read:
            raise RuntimeError("CUDA error: device lost\nmore")
        return self.readings.pop(0)


def reading(a, r, p, u, pool=0, free=0, peak_reserved=None):
    return SimpleNamespace(allocated_bytes=a, reserved_bytes=r, peak_allocated_bytes=p, device_used_bytes=u,
                           graph_pool_bytes=pool, free_bytes=free,
                           peak_reserved_bytes=r if peak_reserved is None else peak_reserved)


def test_a_phase_resets_the_peak_at_its_start_and_reads_at_its_end():
    probe = FakeProbe([reading(10 * GiB, 11 * GiB, 12 * GiB, 14 * GiB, free=66 * GiB)])
    seq = RankSequencer(probe, Journal(None))
    with seq.phase(Phase.LOAD) as handle:
        # inside the phase: the peak was already reset, nothing was read yet
        assert probe.log == ["sync", "reset_peak"]
        handle.note("dummy weights")
        handle.note("second note")
        handle.facts["weights_format"] = "dummy"
    assert probe.log == ["sync", "reset_peak", "settle", "read"]
    start, phase = seq.journal.events
    assert start["type"] == "start" and start["phase"] == "load"
    assert phase["type"] == "phase" and phase["name"] == "load" and phase["status"] == "ok"
    assert (phase["torch_allocated_bytes"], phase["torch_reserved_bytes"], phase["torch_peak_allocated_bytes"],
            phase["device_used_bytes"], phase["free_bytes"]) == (10 * GiB, 11 * GiB, 12 * GiB, 14 * GiB, 66 * GiB)
    assert phase["torch_peak_reserved_bytes"] == 11 * GiB
    assert phase["detail"] == "dummy weights; second note" and phase["weights_format"] == "dummy"
    assert seq.done == {Phase.LOAD}


def test_a_deferred_status_is_recorded():
    probe = FakeProbe([reading(1, 1, 1, 1)])
    seq = RankSequencer(probe, Journal(None))
    with seq.phase(Phase.PERSISTENT) as handle:
        handle.status = PhaseStatus.DEFERRED
    assert seq.journal.events[-1]["status"] == "deferred"


def test_a_failed_phase_is_recorded_with_its_error_and_re_raised():
    probe = FakeProbe([reading(1, 2, 3, 4)])
    seq = RankSequencer(probe, Journal(None))
    with pytest.raises(ValueError):
        with seq.phase(Phase.KV):
            raise ValueError("To serve at least one request\nwith the model's max seq len")
    start, phase, error = seq.journal.events
    assert phase["status"] == "failed" and phase["name"] == "kv"
    assert phase["detail"] == "ValueError: To serve at least one request"
    assert error == {"t": error["t"], "type": "error", "phase": "kv", "error": "ValueError",
                     "message": "ValueError: To serve at least one request"}
    # no settle after a failure (the device may be gone): a plain sync, then the reading
    assert probe.log == ["sync", "reset_peak", "sync", "read"]
    assert phase["torch_allocated_bytes"] == 1


@pytest.mark.parametrize("stop", [SystemExit, KeyboardInterrupt])
def test_a_phase_stopped_from_outside_is_interrupted_not_failed(stop):
    # vLLM's workers turn the SIGTERM that stops a boot into SystemExit: the phase was shown as
    # "failed … SystemExit:", and its rank's error named the wrong cause of a stopped boot
    seq = RankSequencer(FakeProbe([reading(1, 2, 3, 4)]), Journal(None))
    with pytest.raises(stop):
        with seq.phase(Phase.LOAD):
            raise stop()
    start, phase = seq.journal.events  # no error event
    assert phase["status"] == "interrupted" and phase["name"] == "load"
    assert phase["detail"] == "interrupted: the boot was stopped while this phase ran"


def test_a_probe_that_cannot_read_still_gives_the_phase_its_line():
    seq = RankSequencer(FakeProbe([], fail_read=True), Journal(None))
    with seq.phase(Phase.CAPTURE):
        pass
    phase = seq.journal.events[-1]
    assert phase["status"] == "ok" and phase["detail"] == "probe failed: RuntimeError: CUDA error: device lost"
    assert "torch_allocated_bytes" not in phase


def test_facts_are_journaled(tmp_path):
    seq = RankSequencer(FakeProbe([]), Journal(tmp_path / "rank0.jsonl"))
    seq.fact(graph_pool_estimate_bytes=GiB, kv_available_bytes=50 * GiB)
    event = read_journal(tmp_path / "rank0.jsonl")[0]
    assert event["type"] == "fact" and event["graph_pool_estimate_bytes"] == GiB


def test_the_sequencer_journal_folds_back_into_records(tmp_path):
    probe = FakeProbe([reading(0, 0, 0, 2 * GiB), reading(10 * GiB, 10 * GiB, 10 * GiB, 12 * GiB)])
    seq = RankSequencer(probe, Journal(tmp_path / "rank0.jsonl"))
    for name in (Phase.BASELINE, Phase.LOAD):
        with seq.phase(name):
            pass
    folded = measured_ranks.fold(0, read_journal(tmp_path / "rank0.jsonl"))
    assert list(folded.phases) == [Phase.BASELINE, Phase.LOAD]
    assert folded.phases[Phase.LOAD].torch_allocated_bytes == 10 * GiB
    assert folded.phases[Phase.LOAD].torch_peak_reserved_bytes == 10 * GiB
    assert folded.died_in is None


# ------------------------------------------------------------------------------------------
# measured_ranks.fold


def test_fold_collects_facts_phases_errors_and_where_the_rank_died():
    events = [
        {"type": "rank", "rank": 1, "t": 1.0, "device_total_bytes": 80 * GiB, "tp_rank": 1},
        {"type": "start", "phase": "baseline"},
        {"type": "phase", "name": "baseline", "status": "ok", "torch_allocated_bytes": 5, "seconds": 2},
        {"type": "fact", "kv_available_bytes": 7, "tp_rank": 9},
        {"type": "start", "phase": "load"},
        {"type": "error", "phase": "load", "error": "OutOfMemoryError", "message": "CUDA out of memory"},
        {"type": "start", "phase": "no-such-phase"},
        {"type": "phase", "name": "no-such-phase"},
        {"type": "phase", "name": "load", "status": "weird"},
    ]
    folded = measured_ranks.fold(1, events)
    assert folded.rank == 1
    assert folded.facts == {"rank": 1, "device_total_bytes": 80 * GiB, "tp_rank": 9, "kv_available_bytes": 7}
    assert list(folded.phases) == [Phase.BASELINE]
    assert folded.phases[Phase.BASELINE].seconds == 2.0
    assert folded.started is Phase.LOAD and folded.died_in is Phase.LOAD
    assert folded.errors == [events[5]]
    assert folded.get_int("device_total_bytes") == 80 * GiB and folded.get_int("missing") is None


def test_fold_keeps_the_last_record_of_a_retried_phase_and_no_bools_as_bytes():
    events = [
        {"type": "start", "phase": "persistent"},
        {"type": "phase", "name": "persistent", "status": "failed", "torch_allocated_bytes": 1},
        {"type": "start", "phase": "persistent"},
        {"type": "phase", "name": "persistent", "status": "ok", "torch_allocated_bytes": True,
         "device_used_bytes": "12", "detail": 5},
        {"type": "fact", "flag": True},
    ]
    folded = measured_ranks.fold(0, events)
    rec = folded.phases[Phase.PERSISTENT]
    assert rec.status is PhaseStatus.OK and folded.died_in is None
    assert rec.torch_allocated_bytes is None and rec.device_used_bytes is None and rec.detail is None
    assert folded.get_int("flag") is None
    assert measured_ranks.phase_records(events) == {Phase.PERSISTENT: rec}


def test_fold_of_a_real_journal_round_trip(tmp_path):
    journal = Journal(tmp_path / "rank0.jsonl")
    journal.write({"type": "rank", "rank": 0})
    journal.write({"type": "start", "phase": "replay"})
    assert json.loads((tmp_path / "rank0.jsonl").read_text().splitlines()[0])["rank"] == 0
    assert measured_ranks.fold(0, read_journal(journal.path)).died_in is Phase.REPLAY


# ------------------------------------------------------------------------------------------
# KVAUDIT_PROFILE_DIR: each phase's profile, for the overhead work


def _busy(n: int) -> int:
    return sum(i * i for i in range(n))


def test_with_the_profile_folder_set_each_phase_leaves_its_profile(tmp_path, monkeypatch):
    from kvaudit.engines.stage_profile import PROFILE_ENV
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "prof"))
    probe = FakeProbe([reading(GiB, GiB, GiB, GiB), reading(GiB, GiB, GiB, GiB)])
    seq = RankSequencer(probe, Journal(None))
    with seq.phase(Phase.LOAD):
        _busy(1000)
    with pytest.raises(ValueError), seq.phase(Phase.PROFILE):
        raise ValueError("boom")
    stem = tmp_path / "prof" / f"load-pid{os.getpid()}"
    text = stem.with_suffix(".txt").read_text()
    assert "_busy" in text and "cumulative" in text
    assert any("_busy" in fn for _, _, fn in pstats.Stats(str(stem) + ".pstats").stats)
    # a failed phase is profiled too, and the profiler is free for the next phase
    assert (tmp_path / "prof" / f"profile-pid{os.getpid()}.txt").exists()
    with seq.phase(Phase.PERSISTENT):
        pass
    assert (tmp_path / "prof" / f"persistent-pid{os.getpid()}.txt").exists()


def test_without_the_profile_folder_no_phase_is_profiled(tmp_path, monkeypatch):
    from kvaudit.engines import stage_profile
    monkeypatch.delenv(stage_profile.PROFILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    seq = RankSequencer(FakeProbe([reading(GiB, GiB, GiB, GiB)]), Journal(None))
    with seq.phase(Phase.LOAD):
        assert stage_profile._active is False
    assert list(tmp_path.iterdir()) == []


def test_a_phase_inside_a_profiled_phase_is_not_profiled_again(tmp_path, monkeypatch):
    from kvaudit.engines import stage_profile
    monkeypatch.setenv(stage_profile.PROFILE_ENV, str(tmp_path))
    outer = stage_profile.StageProfiler.start("outer")
    assert outer is not None
    try:
        assert stage_profile.StageProfiler.start("inner") is None
    finally:
        outer.stop()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"outer-pid{os.getpid()}.pstats", f"outer-pid{os.getpid()}.txt"]
