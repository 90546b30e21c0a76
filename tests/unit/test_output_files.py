"""`-o PATH` (run, selftest, ingest, plan) and `run --log PATH`: checked before any work and written
as a shell's `>` writes. An existing file is written through (owner, mode and hard links stay, a
symlink's target is written); a new one goes through an O_EXCL temporary file of fixed length and
unpredictable name; what cannot take a file (a FIFO, a device, a socket, a folder, a missing or
unwritable folder, a read-only file, the command's own input) is a one-line usage error at once;
`-` is standard output. Driven through `kvaudit ingest` and `kvaudit plan`, which write the way
`run` does and need no vLLM."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path

import pytest
from conftest import run_cli

LOG = Path(__file__).parents[2] / "configs" / "examples" / "h200-eager.vllm.log"
REPORT = Path(__file__).parents[2] / "configs" / "examples" / "cpu-batch512.json"


def ingest_to(target: Path | str, *extra: str) -> object:
    return run_cli("ingest", str(LOG), "-o", str(target), "-f", "json", *extra)


def within(seconds: float, fn):
    """fn()'s result, or None when it has not returned in time (an open that blocks)."""
    done: list = []
    worker = threading.Thread(target=lambda: done.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    return done[0] if done else None


def test_a_regular_file_gets_the_report_and_no_temporary_file_is_left(tmp_path):
    out = tmp_path / "r.json"
    result = ingest_to(out)
    assert result.code == 0, result.stderr
    assert json.loads(out.read_text())["schema"] == "kvaudit.report/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600


def test_a_planted_symlink_at_the_old_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / ".r.json.tmp").symlink_to(victim)
    assert ingest_to(tmp_path / "r.json").code == 0
    assert victim.read_text() == "untouched"
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == "kvaudit.report/1"


def test_a_symlink_is_written_through_not_replaced(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert ingest_to(link).code == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads(real.read_text())["schema"] == "kvaudit.report/1"


def test_an_existing_file_is_written_through_keeping_owner_mode_and_hard_links(tmp_path):
    # GIVEN a report file of another owner, mode 0640, with a second hard link (as `>` keeps them)
    out = tmp_path / "shared.json"
    out.write_text("old")
    os.chmod(out, 0o640)
    other_owner = os.geteuid() == 0
    if other_owner:
        os.chown(out, 4321, 4321)
    os.link(out, tmp_path / "the-other-name.json")
    before = out.stat()
    # WHEN written
    assert ingest_to(out).code == 0
    after = out.stat()
    # THEN the same file: inode, links, mode, owner; both names hold the report
    assert (after.st_ino, after.st_nlink, stat.S_IMODE(after.st_mode)) == (before.st_ino, 2, 0o640)
    assert (after.st_uid, after.st_gid) == ((4321, 4321) if other_owner else (before.st_uid, before.st_gid))
    assert json.loads((tmp_path / "the-other-name.json").read_text())["schema"] == "kvaudit.report/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json", "the-other-name.json"]


def test_a_read_only_file_is_refused(tmp_path):
    out = tmp_path / "kept.json"
    out.write_text("keep me")
    os.chmod(out, 0o444)
    result = ingest_to(out)
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: -o {out}: read-only (mode 0444); name another file"]
    assert out.read_text() == "keep me"


def test_the_input_itself_is_refused_as_output(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(LOG.read_bytes())
    linked = tmp_path / "same-file.json"
    os.link(log, linked)
    for target in (log, linked):
        result = run_cli("ingest", str(log), "-o", str(target))
        assert result.code == 2
        assert result.stderr_lines == [f"kvaudit: error: -o {target} is the input {log} itself: name another file"]
    assert log.read_bytes() == LOG.read_bytes()
    report = tmp_path / "r.json"
    report.write_bytes(REPORT.read_bytes())
    result = run_cli("plan", str(report), "--gmu", "0.3", "-o", str(report))
    assert result.code == 2 and "is the input" in result.stderr and report.read_bytes() == REPORT.read_bytes()


@pytest.mark.parametrize("length", [242, 250, 255])
def test_an_output_name_of_up_to_255_bytes_works(tmp_path, length):
    # the temporary name added 14 bytes to the output's name: ENAMETOOLONG from 242 bytes on
    out = tmp_path / ("r" * (length - 5) + ".json")
    assert len(out.name.encode()) == length
    result = ingest_to(out)
    assert result.code == 0, result.stderr
    assert json.loads(out.read_text())["schema"] == "kvaudit.report/1"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_a_name_longer_than_the_file_system_allows_is_refused_before_reading(tmp_path):
    out = tmp_path / ("r" * 256)
    result = ingest_to(out)
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: -o {out}: the file name is longer than the 255 bytes its file "
                                   f"system allows"]


def test_a_fifo_with_no_reader_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = within(10, lambda: ingest_to(fifo))
    if result is None:  # the old behaviour: unblock the open, so that the test process can end
        os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    assert result is not None, "blocked in open"
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: -o {fifo}: a FIFO, not a file: name a regular file, or -o - for "
                                   f"standard output"]


def private_device(folder, name: str, minor: int):
    """A private node of a memory device (char 1,minor: 3 null, 7 full): the real one is not put
    at risk."""
    node = folder / name
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    return node


@pytest.mark.parametrize("minor", [3, 7], ids=["null", "full"])
def test_a_device_is_refused_and_left_alone(tmp_path, minor):
    device = private_device(tmp_path, "dev", minor)
    result = ingest_to(device)
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: -o {device}: a character device, not a file: name a regular "
                                   f"file, or -o - for standard output"]
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        result = ingest_to(path)
    finally:
        server.close()
    assert result.code == 2 and result.stderr_lines[0].endswith("a socket, not a file: name a regular file, or -o - "
                                                                "for standard output")


def test_dash_is_standard_output_and_the_view_goes_to_stderr(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli("ingest", str(LOG), "-o", "-")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["schema"] == "kvaudit.report/1"
    assert "KV available" in result.stderr  # the table
    assert list(tmp_path.iterdir()) == []  # no file named `-`
    once = run_cli("ingest", str(LOG), "-o", "-", "-f", "json")
    assert json.loads(once.stdout) == json.loads(result.stdout) and "schema" not in once.stderr


def test_plan_writes_its_report_with_o(tmp_path):
    out = tmp_path / "plan.json"
    result = run_cli("plan", str(REPORT), "--gmu", "0.3", "-o", str(out))
    printed = run_cli("plan", str(REPORT), "--gmu", "0.3", "-f", "json")
    assert result.code == printed.code == 0, result.stderr
    assert "KV available" in result.stdout  # the view still prints
    assert out.read_text() == printed.stdout
    assert json.loads(out.read_text())["source"] == "plan"
    assert run_cli("show", str(out), "-f", "json").code == 0


@pytest.mark.parametrize("path", ["", "."])
def test_an_empty_path_or_the_current_folder_is_a_usage_error(path):
    # typer reads both as Path("."); a newcomer's `-o .` was told "got an empty path"
    result = ingest_to(path)
    assert result.code == 2
    assert result.stderr_lines == ["kvaudit: error: -o needs a file name, got the current folder (or an empty path)"]


def test_a_directory_is_a_usage_error(tmp_path):
    result = ingest_to(tmp_path)
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: -o {tmp_path}: is a directory; name a file"]


def test_a_path_through_a_file_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = ingest_to(blocker / "r.json")
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: -o {blocker / 'r.json'}: a part of the path is a file, not a "
                                   f"directory"]


def test_the_view_prints_when_the_file_cannot_be_written(tmp_path, monkeypatch):
    # GIVEN a folder that passed the check and is gone when the report is written (a run takes
    # minutes): the write fails as the system refuses it
    from kvaudit.render import output
    out = tmp_path / "gone" / "r.json"

    def folder_gone(target, data):
        raise FileNotFoundError(2, "No such file or directory")
    monkeypatch.setattr(output, "_check_new", lambda path, flag: None)
    monkeypatch.setattr(output, "_create", folder_gone)
    result = run_cli("ingest", str(LOG), "-o", str(out))
    # THEN the table is on stdout all the same, and the error says what was lost
    assert result.code == 2
    assert "KV available" in result.stdout
    assert result.stderr_lines == [f"kvaudit: error: cannot write the report to {out}: No such file or directory"]


@pytest.mark.parametrize("width", ["1", "39"])
def test_a_width_too_narrow_for_the_table_is_refused(width):
    result = run_cli("show", str(REPORT), "--width", width)
    assert result.code == 2 and "--width" in result.stderr and len(result.stderr_lines) == 1


def test_the_narrowest_width_renders(tmp_path):
    result = run_cli("show", str(REPORT), "--width", "40")
    assert result.code == 0 and "OK: fits" in result.stdout.replace("\n", " ")
    # every line fits but the flags meant for pasting, which never wrap (render/table.py)
    assert [line for line in result.stdout.splitlines() if len(line) > 40] == [
        "         safe vllm serve flags: --kv-cache-memory-bytes=2598764544 --gpu-memory-utilization=0.32 "
        "--max-model-len=4096"]


def test_selftest_checks_its_output_before_starting(tmp_path):
    result = within(30, lambda: run_cli("selftest", "--device", "cpu", "-o", str(tmp_path / "nodir" / "r.json")))
    assert result is not None and result.code == 2
    assert "does not exist" in result.stderr and len(result.stderr_lines) == 1


def test_selftest_refuses_a_time_limit_that_is_no_limit_before_starting():
    result = within(30, lambda: run_cli("selftest", "--device", "cpu", "--timeout", "0"))
    assert result is not None and result.code == 2
    assert result.stderr_lines == ["kvaudit: error: --timeout takes a finite number of seconds above 0, got 0.0"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_full_disk_is_one_line_naming_it_not_an_internal_error():
    import subprocess
    import sys
    report = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cpu-mla-epyc-run.json"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "kvaudit", "show", str(report), "-f", "json"], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stderr.splitlines() == ["kvaudit: error: could not write: No space left on device (free space or "
                                        "a writable place, then run it again)"]


@pytest.mark.parametrize(("name", "fmt"), [("report.html", "html"), ("r.HTM", "html"), ("kvaudit.prom", "prom")])
def test_a_document_suffix_without_its_format_gets_the_json_and_a_note(tmp_path, name: str, fmt: str):
    """A newcomer's `kvaudit show r.json -o report.html` (stop 55): the file gets the JSON record, as the README
    says, and stderr says how to get the page or the metrics instead."""
    out = tmp_path / name
    result = run_cli("show", str(REPORT), "-o", str(out))
    assert result.code == 0
    assert json.loads(out.read_text(encoding="utf-8"))["schema"] == "kvaudit.report/1"
    assert result.stderr_lines == [f"kvaudit: note: -o {name} gets the JSON record; pass -f {fmt} for the "
                                   f"{'page' if fmt == 'html' else 'metrics'}", f"kvaudit: report written to {out}"]


@pytest.mark.parametrize("name", ["r.json", "r.html.bak", "notes.txt"])
def test_other_suffixes_or_the_documents_own_format_get_no_note(tmp_path, name: str):
    result = run_cli("show", str(REPORT), "-o", str(tmp_path / name))
    assert result.code == 0 and not any(line.startswith("kvaudit: note:") for line in result.stderr_lines)
    page = run_cli("show", str(REPORT), "-f", "prom", "-o", str(tmp_path / "k.prom"))
    assert page.code == 0 and not any(line.startswith("kvaudit: note:") for line in page.stderr_lines)
