"""`-o PATH` (run, selftest, ingest): regular files are replaced atomically through an O_EXCL
temporary file of unpredictable name; devices, FIFOs and /dev/stdout are written in place; a
symlink is written through; an empty path is a usage error. Driven through `kvaudit ingest`,
which writes the same way `run` does and needs no vLLM."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from conftest import run_cli

LOG = Path(__file__).parents[2] / "configs" / "examples" / "h200-eager.vllm.log"


def ingest_to(target: Path | str) -> object:
    return run_cli("ingest", str(LOG), "-o", str(target), "-f", "json")


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


def test_a_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    result = ingest_to(fifo)
    reader.join(timeout=10)
    assert result.code == 0, result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got[0])["schema"] == "kvaudit.report/1"


def private_device(folder, name: str, minor: int):
    """A private node of a memory device (char 1,minor: 3 null, 7 full): the real one is not put
    at risk."""
    node = folder / name
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    return node


def test_a_full_device_survives_and_the_error_is_one_line(tmp_path):
    full = private_device(tmp_path, "full", 7)
    result = ingest_to(full)
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: cannot write the report to {full}: No space left on device"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]


def test_a_null_device_is_written_in_place(tmp_path):
    null = private_device(tmp_path, "null", 3)
    assert ingest_to(null).code == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_an_empty_path_is_a_usage_error():
    result = ingest_to("")
    assert result.code == 2
    assert result.stderr_lines == ["kvaudit: error: -o needs a file name, got an empty path"]


def test_a_directory_is_a_usage_error(tmp_path):
    result = ingest_to(tmp_path)
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: -o {tmp_path}: is a directory; name a file"]
