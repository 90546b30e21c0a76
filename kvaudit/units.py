"""The one place that turns integer bytes into text and back. Binary units: GiB = 2**30."""

from __future__ import annotations

import re
from fractions import Fraction

from kvaudit.errors import UsageError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

_UNITS = {"": 1, "b": 1, "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB,
          "t": TiB, "tib": TiB}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def fmt_bytes(n: int | None, *, signed: bool = False) -> str:
    """`12.34 GiB`, `512.00 MiB`, `-1.10 GiB`; `—` for unknown. Picks the largest unit ≥ 1."""
    if n is None:
        return "—"
    sign = "-" if n < 0 else ("+" if signed and n > 0 else "")
    a = abs(n)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if a >= size:
            return f"{sign}{a / size:.2f} {unit}"
    return f"{sign}{a} B"


def fmt_gib(n: int | None, *, signed: bool = False) -> str:
    """Always in GiB with two decimals (tables line up): `0.02 GiB`; a figure that rounds to zero is
    `0.00 GiB`, never `-0.00 GiB`."""
    if n is None:
        return "—"
    value = n / GiB if round(n / GiB, 2) else 0.0
    return f"{value:+.2f} GiB" if signed else f"{value:.2f} GiB"


def fmt_gib3(n: int | None, *, signed: bool = False) -> str:
    """GiB with three decimals (about one MiB), no unit: table cells under a `GiB` header. A figure
    that rounds to zero prints as zero, never `-0.000` (a rank 280 KiB over its request, within the
    tolerance a note names, read as a sign to a newcomer)."""
    if n is None:
        return "—"
    value = n / GiB if round(n / GiB, 3) else 0.0
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def fmt_tokens(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def parse_bytes(text: str) -> int:
    """`4096`, `512MiB`, `1.5 GiB`, `2G` → bytes. A bad size is a usage error."""
    m = _SIZE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"cannot read {text!r} as a size: write bytes (4096) or a binary unit (512MiB, 1.5GiB)")
    # Fraction, not float: a plain byte count above 2**53 must stay exact, and "1.5GiB" is exact too.
    return int(Fraction(m.group(1)) * _UNITS[m.group(2).lower()])


INT64_MAX = 2**63 - 1
"""The largest figure a log line or a knob may state (8 EiB: far above any device); beyond it a
log's line is garbled or doctored and the figure dropped, a knob refused."""

LOG_FLOAT_LIMIT = 1e12
"""Likewise for a log's other numbers (GMU, seconds, concurrency)."""

INT_LIMIT = 2**128
"""The largest integer a report may hold: above what figures within the log limits combine to,
and far inside float range, so every sum, ratio and GiB of it is safe to compute."""


def gib_to_bytes(text: str) -> int:
    """vLLM prints GiB rounded to 2 decimals (`format_gib`); this gives the bytes it stands for."""
    return round(float(text) * GiB)


def log_gib_rounding(value: int) -> int:
    """How far a figure a vLLM log printed in GiB (as gib_to_bytes read it) may be from the bytes it
    stands for: most lines print 2 decimals (`format_gib`: 0.005 GiB either way), some 1 (`Free memory
    on device (139.1/139.8 GiB)`, `Model loading took 15.0 GiB`: 0.05 GiB). A whole tenth of a GiB
    may be either, so it counts as 1 decimal: the bound errs on the safe side."""
    tenths = round(value * 10 / GiB)
    return round(0.05 * GiB) if value == round(tenths * GiB / 10) else round(0.005 * GiB)


def minus(a: int | None, b: int | None) -> int | None:
    """a − b of byte counts either of which may be unknown: unknown (None) then, never 0."""
    return None if a is None or b is None else a - b


def plus(*values: int | None) -> int | None:
    """The sum of byte counts any of which may be unknown: unknown (None) then."""
    return None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]
