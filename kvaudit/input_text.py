"""An input file as text: standard input or a regular file (never one that can block), gzip by its
magic bytes, UTF-8 or UTF-16, size caps, and the repeats a terminal paste folds. Every verb that
reads a file reads it here; what the text is (a report, a log) is decided elsewhere
(`kvaudit.report`, `kvaudit.engines.inputs`).
"""

from __future__ import annotations

import codecs
import collections
import itertools
import os
import re
import stat
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from kvaudit.errors import BadInputError

MAX_INPUT_BYTES = 2 << 30
"""Refuse to read more than this from one file (a log of a few hundred MB is normal); a gzip file
is refused as soon as what it expands to passes it."""
STDIN = "-"
"""The path that means standard input (`xclip -o | kvaudit show -`)."""
_CHUNK = 1 << 20


# --------------------------------------------------------------------------------------------
# Files


def input_name(path: Path | str) -> str:
    """How messages name an input: its path, or `<stdin>` for `-`."""
    return "<stdin>" if str(path) == STDIN else str(path)


def read_text(path: Path | str) -> str:
    """File contents as text: `-` is standard input; gzip by its magic bytes, not its suffix;
    UTF-8 or UTF-16 (_encoding), undecodable bytes replaced. Only regular files are opened, and
    never in a way that can block: a FIFO with no writer would wait forever and a device
    (`/dev/zero`) never ends. A file larger than MAX_INPUT_BYTES is refused before it is read.

    Memory stays linear in the input: it is decoded a chunk at a time, never held whole as bytes,
    into a text of at most two bytes a character (_pieces), grown in place (_text). NUL characters
    are dropped (the hole logrotate's copytruncate leaves, a sparse file) and characters beyond the
    Basic Multilingual Plane (emoji) read as U+FFFD. A text with any character beyond Latin-1
    begins with U+FEFF, the byte-order mark every reader of it skips (_text says why)."""
    if str(path) == STDIN:
        if sys.stdin is None:  # started with standard input closed (`<&-`)
            raise BadInputError("- reads standard input, which is closed: pass a file")
        with _spooled(sys.stdin.buffer, input_name(path)) as fh:
            return _text(fh, input_name(path))
    where = str(path)
    try:
        info = os.stat(path)
        _check_regular(info.st_mode, where)
        if info.st_size > MAX_INPUT_BYTES:
            raise _too_large(where)
        # O_NONBLOCK: if a FIFO took the file's place since the check, open returns at once
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb") as fh:
            _check_regular(os.fstat(fd).st_mode, where)
            return _text(fh, where)
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"{path}: is a directory, not a report or log") from None
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None


def check_input(path: Path | str, what: str = "") -> None:
    """What read_text would refuse without reading: a missing file, a directory, a FIFO, device or
    socket, a file over the size cap (for a command that reads its inputs only after a boot)."""
    if str(path) == STDIN:
        return
    label = f"{what} {path}" if what else str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise BadInputError(f"{label}: no such file") from None
    except OSError as exc:
        raise BadInputError(f"{label}: cannot read: {exc.strerror or exc}") from None
    _check_regular(info.st_mode, label)
    if info.st_size > MAX_INPUT_BYTES:
        raise _too_large(label)
    if not os.access(path, os.R_OK):
        raise BadInputError(f"{label}: cannot read: permission denied")


def _check_regular(mode: int, where: str) -> None:
    if stat.S_ISDIR(mode):
        raise BadInputError(f"{where}: is a directory, not a report or log")
    if not stat.S_ISREG(mode):
        raise BadInputError(f"{where}: not a regular file (a FIFO, device or socket): save it to a file first, "
                            f"or pipe it in as `-`")


_SPOOL_IN_MEMORY = 16 << 20
"""Standard input up to this stays in memory while it is spooled; beyond, a temporary file."""


def _spooled(stream: BinaryIO, where: str) -> BinaryIO:
    """Standard input copied, a chunk at a time and at most MAX_INPUT_BYTES of it, to a file that
    can be read twice (_text reads its input twice). Plain UTF-8 loses its NUL bytes on the way
    (read_text drops them anyway), so an endless `/dev/zero` is refused at the cap in constant
    memory and without filling the disk."""
    spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)
    head = stream.read(_SNIFF_BYTES)
    plain_utf8 = not head.startswith(GZIP_MAGIC) and _encoding(head) in ("utf-8", "utf-8-sig")
    read = len(head)
    chunk = head
    try:
        while chunk:
            spool.write(chunk.translate(None, b"\0") if plain_utf8 and b"\0" in chunk else chunk)
            chunk = stream.read(_CHUNK)
            read += len(chunk)
            if read > MAX_INPUT_BYTES:
                raise _too_large(where)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool  # type: ignore[return-value]


GZIP_MAGIC = b"\x1f\x8b"


def _text(fh: BinaryIO, where: str) -> str:
    """The text of a seekable input, read twice. The first pass tells whether it holds a character
    beyond Latin-1; for gzip it also expands the whole stream, so a bomb is refused in constant
    memory (a 3 MB file of 3.2 GB took 3.2 GB of RSS when the expansion was kept), and keeps what
    it expanded when that is at most _KEEP_EXPANDED, which the second pass then reads instead of
    expanding again. The second pass builds the text by appending each decoded piece in place.

    CPython stores a text at one width for all its characters (1, 2 or 4 bytes); a text that
    widens while it grows is copied whole at that moment, three times its size at once when the
    first wide character comes last. So a text that will be two bytes wide starts two bytes wide,
    with U+FEFF, and never widens."""
    gz = fh.read(len(GZIP_MAGIC)) == GZIP_MAGIC
    fh.seek(0)
    wide = False
    kept: collections.deque[bytes] | None = collections.deque() if gz else None
    kept_bytes = 0

    def first_pass() -> Iterator[bytes]:
        nonlocal kept, kept_bytes
        for chunk in _gunzip(fh, where) if gz else _chunks(fh, where):
            if kept is not None:
                kept_bytes += len(chunk)
                if kept_bytes <= _KEEP_EXPANDED:
                    kept.append(chunk)
                else:
                    kept = None
            yield chunk

    for piece in _pieces(first_pass(), skip_ascii=True):
        if not piece.isascii() and _BEYOND_LATIN1.search(piece):
            wide = True
            if not gz:
                break  # the size is known already: nothing else to learn
    if kept is not None:
        chunks = _drain(kept)
    else:
        fh.seek(0)
        chunks = _gunzip(fh, where) if gz else _chunks(fh, where)
    text = "\ufeff" if wide else ""
    if sys.gettrace() is not None or sys.getprofile() is not None:
        # a tracer (a debugger, coverage, cProfile) turns off CPython's in-place append, and each
        # `+=` would copy the whole text (100 MiB took 12 s instead of 0.35 s): join once instead,
        # which holds the pieces and the text at once
        return "".join(itertools.chain((text,), _pieces(chunks)))
    for piece in _pieces(chunks):
        text += piece  # in place: `text` is the only reference (CPython grows it by realloc)
    return text


_KEEP_EXPANDED = 256 << 20
"""What the first pass over a gzip input keeps of its expansion, for the second."""


def _drain(kept: collections.deque[bytes]) -> Iterator[bytes]:
    """The kept chunks, each let go as it is handed out: the text grows as they shrink."""
    while kept:
        yield kept.popleft()


_BEYOND_LATIN1 = re.compile("[^\x00-\xff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _chunks(fh: BinaryIO, where: str) -> Iterator[bytes]:
    """The raw bytes, a chunk at a time, at most MAX_INPUT_BYTES of them."""
    size = 0
    while chunk := fh.read(_CHUNK):
        size += len(chunk)
        if size > MAX_INPUT_BYTES:  # a file that grew since it was measured
            raise _too_large(where)
        yield chunk


def _pieces(chunks: Iterator[bytes], *, skip_ascii: bool = False) -> Iterator[str]:
    """Decoded text, a piece per chunk: in the encoding the first bytes name (_encoding), without
    NUL characters, emoji and other characters beyond U+FFFF as U+FFFD (a text of them would take
    four bytes a character), undecodable bytes as U+FFFD. UTF-16 is decoded in whole code units:
    a stray last byte is dropped, not turned into U+FFFD. `skip_ascii` leaves out what is only
    ASCII in UTF-8 (nothing pending before it): a pass that looks for wide characters alone."""
    head = b""
    for chunk in chunks:  # enough bytes to tell the encoding by
        head += chunk
        if len(head) >= _SNIFF_BYTES:
            break
    if not head:
        return
    encoding = _encoding(head)
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    utf8 = encoding.startswith("utf-8")
    for raw in itertools.chain((head,), chunks):
        if skip_ascii and utf8 and raw.isascii() and not decoder.getstate()[0]:
            continue
        # in UTF-8 a character beyond U+FFFF starts with F0-F4 (memchr finds one fast; the regex is slow)
        yield _clean(decoder.decode(raw), astral=not utf8 or any(lead in raw for lead in _ASTRAL_LEADS))
    if encoding.startswith("utf-16"):
        pending, flag = decoder.getstate()
        if len(pending) % 2:
            decoder.setstate((pending[:-1], flag))
    yield _clean(decoder.decode(b"", final=True), astral=True)


_ASTRAL_LEADS = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")


def _clean(piece: str, *, astral: bool) -> str:
    """`piece` without NULs, and with characters beyond U+FFFF as U+FFFD where it may hold one."""
    if "\0" in piece:
        piece = piece.replace("\0", "")
    if astral and not piece.isascii():
        piece = _ASTRAL.sub("\ufffd", piece)
    return piece


def _encoding(head: bytes) -> str:
    """The encoding a byte-order mark names (UTF-8, or UTF-16 as Windows PowerShell's `>` writes
    it; the decoder drops the mark), else UTF-16 when NUL bytes at every other position say so
    (_utf16_without_bom), else UTF-8."""
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"   # the mark gives the byte order, and is dropped
    return _utf16_without_bom(head) or "utf-8"


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


_REPEAT_MAX = 256
"""Members at most this long, expanding to at most _REPEAT_OUT, are remembered: a file of many
tiny members (`for c in text: gzip.compress(c)`) repeats the same few, byte for byte but for
the header's time stamp, which changes nothing of what a member expands to."""
_REPEAT_OUT = 64
"""…and so a megabyte of remembered members expands to a few megabytes at most."""
_REPEAT_KEY = 12
"""Bytes after a member's time stamp that key the remembered members, one member per key: the
shortest member (an empty one) has 12 there."""
_REPEAT_ENTRIES = 4096
_PLAIN_HEADER = b"\x1f\x8b\x08\x00"
"""A gzip member's first bytes, deflate, no name, comment or extra field: the header is 10 bytes
and bytes 4–8 are its time stamp."""
_STAMP_END = 8
_HEADER = 10
_FIRST_SPAN = 1024
"""Compressed bytes split at once into members under one header (_repeats); doubled while every
member in them is a remembered one."""
_FIRST_FEED = 64
_WINDOW = 1 << 16
"""Compressed bytes kept ahead of the member being read, so a small member is seen whole."""
_NONZERO = re.compile(rb"[^\x00]")


def _gunzip(fh: BinaryIO, where: str) -> Iterator[bytes]:
    """Expand gzip (members one after another, as `cat a.gz b.gz` makes; zero padding between or
    after them, as tape and block devices add) a piece at a time, and stop as soon as the output
    passes MAX_INPUT_BYTES: a small bomb never expands whole.

    Each member is fed to zlib a little at a time (64 bytes, then twice as much while it lasts):
    zlib hands back what follows a member's end as a copy, and a 1 MiB feed made that a copy of
    the rest of the megabyte for every member (2 s per MB of one-byte members). A small member
    that expands as one already expanded (_REPEAT_MAX) is not expanded again: zlib alone costs
    half a microsecond a member, however small."""
    data, at, eof = b"", 0, False
    out = bytearray()
    size = 0
    remembered: dict[bytes, tuple[bytes, bytes, bytes, int]] = {}
    by_body: dict[bytes, bytes] = {}  # the same members, by what follows their 10-byte header
    span = [_FIRST_SPAN]
    try:
        while True:
            if not eof and len(data) - at < _WINDOW:  # keep _WINDOW bytes ahead
                more = fh.read(_CHUNK)
                eof = not more
                data, at = data[at:] + more, 0
            if at >= len(data):
                break
            if data[at] == 0:  # zero padding
                nonzero = _NONZERO.search(data, at)
                at = len(data) if nonzero is None else nonzero.start()
                continue
            moved, size = _repeats(data, at, remembered, by_body, span, out, size)
            if moved != at:  # through members that expand as remembered ones
                at = moved
                if size > MAX_INPUT_BYTES:
                    raise _too_large(where)
            else:
                # one member, fed to zlib a little at a time
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                feed, start, first, whole = _FIRST_FEED, at, len(out), True
                while not inflater.eof:
                    if not eof and len(data) - at < _WINDOW:
                        more = fh.read(_CHUNK)
                        eof = not more
                        data, at, whole = data[at:] + more, 0, False
                    if at >= len(data):
                        raise BadInputError(f"{where}: truncated or corrupt gzip (the compressed stream ends early)")
                    piece = data[at:at + feed]
                    part = inflater.decompress(piece, _CHUNK)
                    at += len(piece) - len(inflater.unconsumed_tail) - len(inflater.unused_data)
                    while True:
                        out += part
                        size += len(part)
                        if size > MAX_INPUT_BYTES:
                            raise _too_large(where)
                        if len(out) >= _CHUNK:
                            whole = False
                            yield bytes(out)
                            out.clear()
                        # zlib may hold more output than the limit let out, with no input left
                        if len(part) < _CHUNK or inflater.unconsumed_tail or inflater.eof:
                            break
                        part = inflater.decompress(b"", _CHUNK)
                    feed = min(feed * 2, _CHUNK)
                if whole and at - start <= _REPEAT_MAX and len(out) - first <= _REPEAT_OUT \
                        and len(remembered) < _REPEAT_ENTRIES and data.startswith(_PLAIN_HEADER, start):
                    expansion = bytes(out[first:])
                    remembered.setdefault(data[start + _STAMP_END:start + _STAMP_END + _REPEAT_KEY],
                                          (data[start:at], data[start + _STAMP_END:at], expansion, at - start))
                    by_body.setdefault(data[start + _HEADER:at], expansion)
            if len(out) >= _CHUNK:
                yield bytes(out)
                out.clear()
    except zlib.error as exc:  # a bad deflate stream or header
        raise BadInputError(f"{where}: truncated or corrupt gzip ({exc})") from None
    if out:
        yield bytes(out)


def _repeats(data: bytes, at: int, remembered: dict[bytes, tuple[bytes, bytes, bytes, int]],
             by_body: dict[bytes, bytes], span: list[int], out: bytearray, size: int) -> tuple[int, int]:
    """Members from `at` on that expand as remembered ones: (where they end, the size with them).
    Each is compared whole, so one cut at the end of `data` is left for zlib. Members under one
    header are split apart in C (_split); a run of one member is taken in one go (_run). The
    output is at most _REPEAT_OUT a member of `data`."""
    get, starts, pieces = remembered.get, data.startswith, []
    append = pieces.append
    while True:
        known = get(data[at + _STAMP_END:at + _STAMP_END + _REPEAT_KEY])
        if known is None:
            break
        whole, tail, expanded, step = known
        # the same bytes (one comparison), or the same member under another time stamp
        if not starts(whole, at) and not (starts(tail, at + _STAMP_END) and starts(_PLAIN_HEADER, at)):
            break
        if starts(tail, at + step + _STAMP_END) and starts(_PLAIN_HEADER, at + step):  # a run of it
            at, n = _run(data, at, step, tail)
            append(expanded * n)
        elif (split := _split(data, at, by_body, span, append)) > at:
            at = split
        else:
            at += step
            append(expanded)
    if not pieces:
        return at, size
    joined = b"".join(pieces)
    out += joined
    return at, size + len(joined)


def _split(data: bytes, at: int, by_body: dict[bytes, bytes], span: list[int], append) -> int:
    """Members from `at` on under the header of the one at `at` (time stamp and all), split apart
    in C, as long as each piece expands as a remembered member: such a piece is that member,
    whole, since its deflate stream ends where the piece does. `span[0]` compressed bytes are
    split at once: doubled while every piece is known, reset when one is not. Returns where the
    known pieces end."""
    header = data[at:at + _HEADER]
    while header.startswith(_PLAIN_HEADER) and (cut := data.rfind(header, at + _HEADER, at + span[0])) > at:
        bodies = data[at + _HEADER:cut].split(header)
        expanded = list(map(by_body.get, bodies))
        if None not in expanded:
            at = cut
            append(b"".join(expanded))  # type: ignore[arg-type]
            span[0] = min(span[0] * 2, _CHUNK)
            continue
        known = expanded.index(None)
        at += known * _HEADER + sum(map(len, bodies[:known]))
        append(b"".join(expanded[:known]))  # type: ignore[arg-type]
        span[0] = _FIRST_SPAN
        break
    return at


def _run(data: bytes, at: int, step: int, tail: bytes) -> tuple[int, int]:
    """Where the run of the `step`-byte member at `at` ends, and how many members it holds. The
    same bytes, time stamp and all, are compared in blocks of 1, 2, 4, … members, then halved; the
    same member under other time stamps, one at a time."""
    starts = data.startswith
    block, members, n = data[at:at + step], 1, 1
    at += step
    while starts(block, at):
        at, n = at + len(block), n + members
        block, members = block + block, 2 * members
    while members > 1:
        members //= 2
        block = block[:members * step]
        if starts(block, at):
            at, n = at + len(block), n + members
    while starts(_PLAIN_HEADER, at) and starts(tail, at + _STAMP_END):
        at, n = at + step, n + 1
    return at, n


