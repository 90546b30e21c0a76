"""Reading inputs (issue 15, item 4): gzip expands as a stream and stops at the cap, plain files
and standard input are never read past it, and what is not a regular file (a FIFO that may never
be written, a device that never ends) is refused at once, except `-`. Logs and reports saved as
UTF-16 (Windows PowerShell's `>`) or with a UTF-8 byte-order mark read as the same text."""

from __future__ import annotations

import codecs
import gzip
import io
import os
import sys
import threading
import tracemalloc
import zlib
from pathlib import Path

import pytest

from kvaudit import input_text as report_module
from kvaudit.engines.inputs import report_from_text
from kvaudit.errors import BadInputError
from kvaudit.input_text import read_text

CAP = 1 << 20
TP2_OK = Path(__file__).parent.parent / "fixtures" / "logs" / "gpu-0.32-v1-tp2-ok.log"


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(report_module, "MAX_INPUT_BYTES", CAP)


def test_a_gzip_bomb_stops_at_the_cap_without_expanding_whole(tmp_path: Path, small_cap) -> None:
    # GIVEN 64 MiB of zeros gzipped to ~64 KiB and a 1 MiB cap
    path = tmp_path / "bomb.log.gz"
    path.write_bytes(gzip.compress(b"\0" * (64 << 20), compresslevel=9))
    tracemalloc.start()
    try:
        with pytest.raises(BadInputError, match=r"bomb\.log\.gz: larger than 0 GiB; pass the startup part"):
            read_text(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # THEN it never held more than a few times the cap (expanding whole held 64 MiB)
    assert peak < 8 * CAP


def test_concatenated_gzip_members_are_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "two.log.gz"
    path.write_bytes(gzip.compress(b"first\n") + gzip.compress(b"second\n") + b"\0" * 16)
    assert read_text(path) == "first\nsecond\n"


@pytest.mark.parametrize("cut", [10, 40])
def test_a_truncated_gzip_is_one_line(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "cut.gz"
    path.write_bytes(gzip.compress(os.urandom(4096))[:cut])
    with pytest.raises(BadInputError, match=r"cut\.gz: truncated or corrupt gzip"):
        read_text(path)


class _Endless(io.RawIOBase):
    """An input that never ends (what /dev/zero is), counting what was read from it."""

    def __init__(self) -> None:
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = len(buffer)
        buffer[:n] = b"x" * n
        self.given += n
        return n


def test_an_endless_standard_input_is_read_no_further_than_the_cap(monkeypatch, small_cap) -> None:
    endless = _Endless()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(endless)))
    with pytest.raises(BadInputError, match=r"^<stdin>: larger than 0 GiB"):
        read_text("-")
    assert endless.given <= CAP + (64 << 10)


def test_a_plain_file_over_the_cap_is_refused_before_it_is_opened(tmp_path: Path, monkeypatch, small_cap) -> None:
    # GIVEN a file of four times the cap (a 3 GiB file was read up to 2 GiB before it was refused)
    path = tmp_path / "big.log"
    with open(path, "wb") as fh:
        fh.truncate(4 * CAP)
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *args, **kwargs: opened.append(args[0]) or real_open(*args, **kwargs))
    with pytest.raises(BadInputError, match=r"big\.log: larger than 0 GiB"):
        read_text(path)
    assert opened == []


def test_a_fifo_is_refused_at_once(tmp_path: Path, cli) -> None:
    # GIVEN a FIFO nobody writes to WHEN shown THEN exit 2 at once (opening it would block forever)
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    done = []
    worker = threading.Thread(target=lambda: done.append(cli("show", str(fifo))), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # the old behaviour: unblock its open, so that the test process can end
        open(fifo, "wb").close()
    assert len(done) == 1
    assert done[0].code == 2 and done[0].stderr_lines == [
        f"kvaudit: error: {fifo}: not a regular file (a FIFO, device or socket): save it to a file first, "
        f"or pipe it in as `-`"]


def test_a_device_is_refused(cli) -> None:
    result = cli("ingest", "/dev/zero")
    assert result.code == 2 and "/dev/zero: not a regular file" in result.stderr


ENCODINGS = {
    "UTF-16LE with a BOM (Windows PowerShell 5 `>`)": lambda text: codecs.BOM_UTF16_LE + text.encode("utf-16-le"),
    "UTF-16BE with a BOM": lambda text: codecs.BOM_UTF16_BE + text.encode("utf-16-be"),
    "UTF-16LE without a BOM": lambda text: text.encode("utf-16-le"),
    "UTF-16BE without a BOM": lambda text: text.encode("utf-16-be"),
    "UTF-16LE with a BOM, gzipped": lambda text: gzip.compress(codecs.BOM_UTF16_LE + text.encode("utf-16-le")),
    "UTF-8 with a BOM (Notepad)": lambda text: codecs.BOM_UTF8 + text.encode("utf-8"),
}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_log_in_another_unicode_encoding_reads_as_the_same_text(tmp_path: Path, encoding: str) -> None:
    # GIVEN a real log (its tqdm bars are not ASCII) saved in another encoding
    text = TP2_OK.read_bytes().decode("utf-8")
    assert "█" in text
    path = tmp_path / "saved.log"
    path.write_bytes(ENCODINGS[encoding](text))
    # WHEN read  THEN the same text, without the file's byte-order mark; a text with characters
    # beyond Latin-1 begins with U+FEFF, which keeps it two bytes wide as it grows (report._text)
    assert read_text(path) == "\ufeff" + text


def test_a_utf16_log_and_report_show_as_their_utf8_originals(tmp_path: Path, cli) -> None:
    # GIVEN the log and its report JSON, each saved as UTF-16LE with a BOM, as PowerShell's
    # `kvaudit show LOG -f json > report.json` writes them
    original = cli("show", str(TP2_OK), "-f", "json")
    log, report = tmp_path / "utf16.log", tmp_path / "utf16.json"
    log.write_bytes(codecs.BOM_UTF16_LE + TP2_OK.read_bytes().decode("utf-8").encode("utf-16-le"))
    report.write_bytes(codecs.BOM_UTF16_LE + original.stdout.encode("utf-16-le"))
    # THEN each shows as the original did (it was "neither a kvaudit report nor a vLLM log")
    for path in (log, report):
        result = cli("show", str(path), "-f", "json")
        assert (result.code, result.stdout) == (0, original.stdout), result.stderr


@pytest.mark.parametrize("mark", [codecs.BOM_UTF16_LE, b""], ids=["with a BOM", "without a BOM"])
def test_a_utf16_report_with_a_stray_last_byte_still_loads(tmp_path: Path, cli, mark: bytes) -> None:
    # GIVEN a UTF-16 report whose file ends in half a code unit (a copy cut one byte short of even)
    original = cli("show", str(TP2_OK), "-f", "json")
    report = tmp_path / "odd.json"
    report.write_bytes(mark + original.stdout.encode("utf-16-le") + b"\n")
    # THEN the half unit is dropped: it was decoded as U+FFFD, and the JSON refused as "Extra data"
    result = cli("show", str(report), "-f", "json")
    assert (result.code, result.stdout) == (0, original.stdout), result.stderr


def test_utf16_on_standard_input_reads_as_the_same_text(monkeypatch) -> None:
    text = TP2_OK.read_bytes().decode("utf-8")
    raw = codecs.BOM_UTF16_BE + text.encode("utf-16-be")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
    assert read_text("-") == "\ufeff" + text


def test_a_utf8_log_after_a_run_of_nul_bytes_stays_utf8_and_loses_them(tmp_path: Path) -> None:
    # GIVEN a log truncated in place while vLLM kept writing at its offset (logrotate's
    # copytruncate): NUL bytes at both parities, then UTF-8  THEN it is not taken for UTF-16, and
    # the NULs, which no log line holds, are dropped
    path = tmp_path / "rotated.log"
    path.write_bytes(b"\0" * 10_000 + TP2_OK.read_bytes())
    assert read_text(path) == "\ufeff" + TP2_OK.read_bytes().decode("utf-8")


def test_an_ascii_text_stays_one_byte_a_character(tmp_path: Path) -> None:
    path = tmp_path / "plain.log"
    path.write_bytes(b"INFO plain ascii\n" * 1000)
    text = read_text(path)
    assert text == "INFO plain ascii\n" * 1000 and sys.getsizeof(text) < len(text) + 100


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_an_emoji_reads_as_a_replacement_character(tmp_path: Path, gz: bool) -> None:
    # GIVEN a log with an emoji (a text of it would take four bytes a character)
    raw = "INFO ok 🚀 done — €\n".encode()
    path = tmp_path / "emoji.log"
    path.write_bytes(gzip.compress(raw) if gz else raw)
    text = read_text(path)
    assert text == "\ufeffINFO ok \ufffd done — €\n"
    assert sys.getsizeof(text) < 2 * len(text) + 100


def _members(rng, count: int) -> tuple[bytes, bytes]:
    """Gzip members as hostile files mix them: one-byte and empty ones, runs of one member under
    one time stamp or several, names (a longer header), zero padding; and what they expand to."""
    parts, want = [], []
    while len(parts) < count:
        payload = rng.choice([b"x", b"y", b"", b"ab", bytes([rng.randrange(256)]), b"z" * rng.randrange(1, 300),
                              rng.randbytes(rng.choice([5, 4000, 90_000]))])
        for i in range(rng.choice([1, 1, 2, 3, 40, 2000]) if len(payload) < 300 else 1):
            stamp = rng.choice([0, i % 2, rng.randrange(1 << 31)])
            if rng.random() < 0.05:
                buf = io.BytesIO()
                with gzip.GzipFile(filename="n.log", mode="wb", fileobj=buf, mtime=stamp) as fh:
                    fh.write(payload)
                parts.append(buf.getvalue())
            else:
                parts.append(gzip.compress(payload, mtime=stamp, compresslevel=rng.choice([1, 6, 9])))
            want.append(payload)
            if rng.random() < 0.01:
                parts.append(b"\0" * rng.randrange(1, 40))
    return b"".join(parts), b"".join(want)


def _member_by_member(data: bytes) -> bytes | None:
    """The plain way, slow (it copies the rest after every member): zlib on one member after
    another, zero padding skipped; None where zlib refuses (a reserved header flag too, which
    RFC 1952 tells a decompressor to refuse and Python's gzip module lets through)."""
    out = []
    try:
        while data := data.lstrip(b"\0"):
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out.append(inflater.decompress(data))
            if not inflater.eof:
                return None
            data = inflater.unused_data
    except zlib.error:
        return None
    return b"".join(out)


@pytest.mark.parametrize("seed", range(6))
def test_many_members_expand_as_zlib_member_by_member_even_damaged(tmp_path: Path, seed: int) -> None:
    # GIVEN a mix of members that the reader takes by their remembered twins, split apart, in
    # runs or through zlib (input_text._gunzip), whole or with one bit changed
    import random
    rng = random.Random(seed)
    data, want = _members(rng, 3000)
    assert _member_by_member(data) == want
    # WHEN read THEN the same as zlib member by member; refused where that refuses
    assert b"".join(report_module._gunzip(io.BytesIO(data), "x")) == want
    for _ in range(30):
        damaged = bytearray(data)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        try:
            got = b"".join(report_module._gunzip(io.BytesIO(bytes(damaged)), "x"))
        except BadInputError:
            got = None
        assert got == _member_by_member(bytes(damaged))


def test_many_one_byte_members_expand_fast(tmp_path: Path) -> None:
    # GIVEN a log gzipped one byte a member (2 s per MB before: zlib handed back the rest of a
    # 1 MiB chunk after every member), 0.5 MB of it
    text = TP2_OK.read_bytes() * 2
    path = tmp_path / "bytes.gz"
    path.write_bytes(b"".join(gzip.compress(bytes([c]), mtime=0) for c in text))
    import time
    started = time.perf_counter()
    assert read_text(path) == "\ufeff" + text.decode()
    assert time.perf_counter() - started < 1.0  # 0.05 s here; tests/benchmarks/bench_hostile.py --inputs


def test_a_text_that_turns_wide_at_its_end_is_never_held_twice(tmp_path: Path) -> None:
    # GIVEN 16 MiB of ASCII log, then one character beyond Latin-1 (a tqdm bar's █): the text is
    # two bytes a character, 32 MiB; had it widened as it grew, 16 + 32 MiB were held at once
    path = tmp_path / "late.log"
    line = b"INFO 12-04 10:00:00 [gpu_worker.py:298] an ordinary line\n"
    path.write_bytes(line * ((16 << 20) // len(line)) + "█\n".encode())
    size = path.stat().st_size
    tracemalloc.start()
    try:
        text = read_text(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text.startswith("\ufeffINFO") and text.endswith("█\n")
    # THEN the peak is the text (two bytes a character) and a few chunks, within 2x the input
    assert peak < 2 * size + (8 << 20)


def test_reading_stays_linear_under_a_tracer(tmp_path: Path) -> None:
    # GIVEN a tracer (a debugger, coverage, cProfile), which turns off CPython's in-place append:
    # each `+=` copied the whole text then (100 MiB took 12 s instead of 0.35 s)
    path = tmp_path / "big.log"
    line = "INFO █ an ordinary line with a tqdm bar's block\n".encode()
    path.write_bytes(line * ((64 << 20) // len(line)))
    import time
    started = time.perf_counter()
    text = read_text(path)
    plain = time.perf_counter() - started
    sys.settrace(lambda *args: None)
    try:
        started = time.perf_counter()
        traced = read_text(path)
        seconds = time.perf_counter() - started
    finally:
        sys.settrace(None)
    assert traced == text
    assert seconds < 4 * plain + 0.5  # without the join: 3.9 s against 0.31 s here


@pytest.mark.parametrize("text", ["[project]\nname = \"kvaudit\"\n", "[tool.ruff]\nline-length = 120\n",
                                  "[section]\nkey=value\n"])
def test_a_toml_or_ini_file_is_neither_a_report_nor_a_log(text: str) -> None:
    """A newcomer's `kvaudit show pyproject.toml` (stop 55) was "not valid JSON (Expecting value …)": a file that
    opens with `[` and a word is no JSON array, and the log reader's refusal says what kvaudit reads."""
    with pytest.raises(BadInputError, match=r"neither a kvaudit report nor a vLLM log"):
        report_from_text(text, "x.toml")


@pytest.mark.parametrize("text", ["[1, 2", "[true, {", "[\n  {\"schema\": 1}", "[]x", "[\"a\""])
def test_a_damaged_json_array_still_gets_the_json_error(text: str) -> None:
    with pytest.raises(BadInputError, match=r"not valid JSON"):
        report_from_text(text, "x.json")
