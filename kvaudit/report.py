"""A finished report's exit code, and reading reports from files: gzip, standard input, size caps,
and the report JSON's own checks (its schema, then the ledger's balance).

Reports are made in `kvaudit.assemble`; telling a report from a vLLM log is
`kvaudit.engines.inputs`' job (a log needs the log engine, which nothing here imports).
"""

from __future__ import annotations

import codecs
import json
import os
import stat
import sys
import zlib
from pathlib import Path
from typing import BinaryIO, Mapping

from kvaudit.errors import BadInputError, ExitCode
from kvaudit.ledger import check_balance
from kvaudit.schema import FailureKind, Phase, PhaseRecord, RankReport, Report, Verdict
from kvaudit.validate import report_from_json

MAX_INPUT_BYTES = 2 << 30
"""Refuse to read more than this from one file (a log of a few hundred MB is normal); a gzip file
is refused as soon as what it expands to passes it."""
STDIN = "-"
"""The path that means standard input (`xclip -o | kvaudit show -`)."""
_CHUNK = 1 << 20


def exit_code(report: Report) -> ExitCode:
    """0 fits; 1 a finding (does not fit); 3 the audit could not complete."""
    if report.failure is not None and report.failure.kind is not FailureKind.DOES_NOT_FIT:
        return ExitCode.INCOMPLETE
    if report.verdict is Verdict.OK:
        return ExitCode.OK
    if report.verdict is Verdict.FAIL:
        return ExitCode.FINDING
    return ExitCode.INCOMPLETE


# --------------------------------------------------------------------------------------------
# Files


def input_name(path: Path | str) -> str:
    """How messages name an input: its path, or `<stdin>` for `-`."""
    return "<stdin>" if str(path) == STDIN else str(path)


def read_text(path: Path | str) -> str:
    """File contents as text: `-` is standard input; gzip by its magic bytes, not its suffix;
    UTF-8 or UTF-16 (_decode), undecodable bytes replaced. Only regular files are opened: a FIFO
    with no writer would block forever and a device (`/dev/zero`) never ends."""
    if str(path) == STDIN:
        if sys.stdin is None:  # started with standard input closed (`<&-`)
            raise BadInputError("- reads standard input, which is closed: pass a file")
        return _decode(_read_capped(sys.stdin.buffer, input_name(path)))
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise BadInputError(f"{path}: is a directory, not a report or log")
        if not stat.S_ISREG(mode):
            raise BadInputError(f"{path}: not a regular file (a FIFO, device or socket): save it to a file first, "
                                f"or pipe it in as `-`")
        with open(path, "rb") as fh:
            return _decode(_read_capped(fh, str(path)))
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"{path}: is a directory, not a report or log") from None
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _decode(raw: bytes) -> str:
    """Text in the encoding a byte-order mark names (UTF-8, or UTF-16 as Windows PowerShell's `>`
    writes it; the mark is dropped), else UTF-16 when NUL bytes at every other position say so
    (_utf16_without_bom), else UTF-8. Undecodable bytes are replaced; each way is one linear pass."""
    if raw.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    elif raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"   # the mark gives the byte order, and is dropped
    else:
        encoding = _utf16_without_bom(raw) or "utf-8"
    if encoding.startswith("utf-16"):   # whole code units: a stray last byte is dropped, not turned into U+FFFD
        raw = raw[:len(raw) // 2 * 2]
    return raw.decode(encoding, errors="replace")


_SNIFF_BYTES = 4096
"""How much of the start of a file tells UTF-16 without a byte-order mark from UTF-8."""


def _utf16_without_bom(raw: bytes) -> str | None:
    """`utf-16-le` or `utf-16-be` when the file starts as UTF-16 text with no byte-order mark: more
    than half the bytes at one parity are NUL (the high byte of every ASCII character) and few at
    the other. UTF-8 text has no NUL bytes, and a run of them (a log truncated in place by
    logrotate's copytruncate) has them at both parities."""
    sample = raw[:_SNIFF_BYTES]
    pairs = len(sample) // 2
    even_nuls, odd_nuls = sample[0::2].count(0), sample[1::2].count(0)
    if odd_nuls > pairs / 2 and even_nuls < pairs / 10:
        return "utf-16-le"
    if even_nuls > pairs / 2 and odd_nuls < pairs / 10:
        return "utf-16-be"
    return None


def _too_large(where: str) -> BadInputError:
    return BadInputError(f"{where}: larger than {MAX_INPUT_BYTES >> 30} GiB; pass the startup part of the log")


def _read_capped(fh: BinaryIO, where: str) -> bytes:
    """At most MAX_INPUT_BYTES (+1, to tell "too large"); gzip is expanded as a stream."""
    raw = fh.read(MAX_INPUT_BYTES + 1)
    if len(raw) > MAX_INPUT_BYTES:
        raise _too_large(where)
    return _gunzip(raw, where) if raw[:2] == b"\x1f\x8b" else raw


def _gunzip(packed: bytes, where: str) -> bytes:
    """Expand gzip (members one after another, as `cat a.gz b.gz` makes) chunk by chunk, and stop
    as soon as the output passes the cap: a small bomb never expands whole. A first pass only
    counts what the stream expands to, so a bomb is refused in constant memory (a 3 MB file of
    3.2 GB took 3.2 GB of RSS when the expansion was kept up to the cap)."""
    _inflate(packed, where, keep=False)
    return _inflate(packed, where, keep=True)


def _inflate(packed: bytes, where: str, *, keep: bool) -> bytes:
    out = bytearray()
    size = 0
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    started = True
    view = memoryview(packed)
    at = 0
    data = b""
    try:
        while True:
            if not data:
                if at >= len(view):
                    # output zlib still holds past the last call's limit, with no input left
                    piece = inflater.decompress(b"", _CHUNK) if started and not inflater.eof else b""
                    if not piece:
                        break
                    size += len(piece)
                    if size > MAX_INPUT_BYTES:
                        raise _too_large(where)
                    if keep:
                        out += piece
                    continue
                data, at = bytes(view[at:at + _CHUNK]), at + _CHUNK
            if not started:
                if not data.strip(b"\x00"):
                    data = b""  # zero padding after the last member (tape and block devices)
                    continue
                inflater, started = zlib.decompressobj(16 + zlib.MAX_WBITS), True
            piece = inflater.decompress(data, min(MAX_INPUT_BYTES + 1 - size, _CHUNK))
            size += len(piece)
            if size > MAX_INPUT_BYTES:
                raise _too_large(where)
            if keep:
                out += piece
            if inflater.eof:
                data, started = inflater.unused_data, False
            else:
                data = inflater.unconsumed_tail
    except zlib.error as exc:  # a bad deflate stream or header
        raise BadInputError(f"{where}: truncated or corrupt gzip ({exc})") from None
    if started and not inflater.eof:
        raise BadInputError(f"{where}: truncated or corrupt gzip (the compressed stream ends early)")
    return bytes(out)


MAX_REPORT_CHARS = 256 << 20
"""A JSON report is kilobytes to a few MB (a traced one included); parsed JSON takes about 25×
its size in memory, so a larger document is refused before it is parsed."""


def parse_report_text(text: str, where: str) -> Report:
    """A report from JSON text; every problem is one BadInputError line."""
    if len(text) > MAX_REPORT_CHARS:
        raise BadInputError(f"{where}: {len(text) >> 20} MiB of JSON, far larger than any kvaudit report "
                            f"(at most {MAX_REPORT_CHARS >> 20} MiB are read)")
    try:
        # Editors on Windows save a UTF-8 BOM; first_char skips it when a report is told from a log, so json.loads must too.
        data = json.loads(text.removeprefix("\ufeff"))
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise BadInputError(f"{where}: not valid JSON ({_json_error(exc)})") from None
    try:
        report = report_from_json(data, where)
    except RecursionError:
        raise BadInputError(f"{where}: nested too deeply to be a report") from None
    try:
        for rank in report.ranks:
            check_balance(rank)
    except BadInputError as exc:  # name the file: `kvaudit diff` reads two
        raise BadInputError(f"{where}: {exc}") from None
    return report


def _json_error(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return type(exc).__name__


def first_char(text: str) -> str:
    """The first character after a BOM and blank space: how a report is told from a log."""
    return text.lstrip("\ufeff \t\r\n")[:1]


def looks_like_json(text: str) -> bool:
    return first_char(text) in ("{", "[")


def phase_map(rank: RankReport) -> Mapping[Phase, PhaseRecord]:
    return {p.name: p for p in rank.phases}
