"""The supervised-process runner both boot engines use (engines/process.py) and the one journal
reader (engines/journal.py)."""

from __future__ import annotations

import os
import time

from kvaudit.engines.journal import Journal, Tail, journal_rank, read_journals
from kvaudit.engines.process import StopSignals, run_supervised, workdir
from kvaudit.schema import FailureKind

RANK_MAIN = """import json, sys, time
from pathlib import Path
spec = json.loads(Path(sys.argv[1]).read_text())
with open(Path(spec["journal"]) / "rank0.jsonl", "a") as fh:
    fh.write(json.dumps({"type": "rank", "rank": 0}) + "\\n")
    fh.flush()
    time.sleep(spec["sleep"])
    fh.write(json.dumps({"type": "phase", "name": "baseline"}) + "\\n")
print("done")
sys.exit(spec["code"])
"""


def _run(tmp_path, *, sleep: float, code: int = 0, timeout_s: float = 60, should_stop=None):
    (tmp_path / "fakeengine.py").write_text(RANK_MAIN)
    journal = tmp_path / "journal"
    journal.mkdir(exist_ok=True)
    spec = tmp_path / "spec.json"
    spec.write_text(f'{{"journal": "{journal}", "sleep": {sleep}, "code": {code}}}')
    events = []
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    with StopSignals() as signals:
        finished = run_supervised("fakeengine", spec, log_path=tmp_path / "out.log", journal_dir=journal,
                                  on_progress=lambda rank, event: events.append((rank, event)), timeout_s=timeout_s,
                                  signals=signals, env=env, name="the fake engine", should_stop=should_stop)
    return finished, events


def test_a_process_that_ends_by_itself_reports_every_journal_line(tmp_path):
    finished, events = _run(tmp_path, sleep=0.0, code=3)
    assert finished.stop is None and finished.exit_code == 3 and finished.survivors == []
    assert [(rank, e["type"]) for rank, e in events] == [(0, "rank"), (0, "phase")]
    assert (tmp_path / "out.log").read_text().strip() == "done"


def test_a_process_past_its_timeout_is_stopped_and_the_stop_announced(tmp_path):
    started = time.monotonic()
    finished, events = _run(tmp_path, sleep=60, timeout_s=1)
    assert finished.stop is FailureKind.TIMEOUT and finished.survivors == []
    assert time.monotonic() - started < 30
    assert (-1, {"type": "stage", "stage": "stopping the fake engine (timeout)"}) in events


def test_should_stop_ends_the_process_with_its_reason(tmp_path):
    # a died marker another node relayed for rank 1 (engines/journal.py: JournalTailer.stopped)
    (tmp_path / "journal" / "relay").mkdir(parents=True)
    (tmp_path / "journal" / "relay" / "rank1.jsonl").write_text('{"type": "died", "rank": 1}\n')
    started = time.monotonic()
    finished, events = _run(tmp_path, sleep=60, should_stop=lambda tailer: FailureKind.WORKER_DIED
                            if tailer.stopped else None)
    assert finished.stop is FailureKind.WORKER_DIED and finished.survivors == []
    assert time.monotonic() - started < 30
    assert (1, {"type": "died", "rank": 1}) in events
    assert (-1, {"type": "stage", "stage": "stopping the fake engine (worker_died)"}) in events


def test_the_workdir_is_removed_even_after_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    seen = []
    try:
        with workdir("kvaudit-test-") as folder:
            seen.append(folder)
            assert (folder / "journal").is_dir()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert seen and not seen[0].exists()


def test_journal_files_are_told_by_their_rank(tmp_path):
    assert journal_rank(tmp_path / "rank12.jsonl") == 12
    assert journal_rank(tmp_path / "rankX.jsonl") is None and journal_rank(tmp_path / "boot.jsonl") is None
    Journal(tmp_path / "rank1.jsonl").write({"type": "rank", "rank": 1})
    (tmp_path / "rankX.jsonl").write_text('{"type": "rank"}\n')
    assert {rank: [e["type"] for e in events] for rank, events in read_journals(tmp_path).items()} == {1: ["rank"]}


def test_a_tail_reads_complete_lines_only_and_a_full_limited_read_whole(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"one\ntw")
    tail = Tail(path)
    assert tail.read() == b"one\n" and tail.read() == b""
    with open(path, "ab") as fh:
        fh.write(b"o\n")
    assert tail.read() == b"two\n"
    path.write_bytes(b"x" * 10)
    limited = Tail(path, limit=4)
    assert limited.read() == b"xxxx" and limited.read() == b"xxxx"
    assert Tail(tmp_path / "missing").read() == b""
