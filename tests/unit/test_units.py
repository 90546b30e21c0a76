"""Units: the one module that turns integer bytes into text and back (binary units, GiB = 2**30)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvaudit.errors import ExitCode, UsageError
from kvaudit.units import GiB, KiB, MiB, TiB, fmt_bytes, fmt_gib, fmt_gib3, fmt_tokens, gib_to_bytes, parse_bytes


def test_binary_units():
    assert (KiB, MiB, GiB, TiB) == (1024, 1024 ** 2, 1024 ** 3, 1024 ** 4)


@pytest.mark.parametrize("n, text", [
    (None, "—"),
    (0, "0 B"),
    (1023, "1023 B"),
    (1024, "1.00 KiB"),
    (512 * MiB, "512.00 MiB"),
    (12 * GiB + GiB * 34 // 100, "12.34 GiB"),
    (-(GiB + GiB // 10), "-1.10 GiB"),
    (3 * TiB, "3.00 TiB"),
])
def test_fmt_bytes_picks_the_largest_unit_of_at_least_one(n, text):
    assert fmt_bytes(n) == text


def test_fmt_bytes_signed():
    assert fmt_bytes(MiB, signed=True) == "+1.00 MiB"
    assert fmt_bytes(-MiB, signed=True) == "-1.00 MiB"
    assert fmt_bytes(0, signed=True) == "0 B"


@pytest.mark.parametrize("n, signed, text", [
    (None, False, "—"),
    (0, False, "0.00 GiB"),
    (GiB // 2, False, "0.50 GiB"),
    (20 * MiB, False, "0.02 GiB"),
    (-GiB, True, "-1.00 GiB"),
    (GiB, True, "+1.00 GiB"),
])
def test_fmt_gib(n, signed, text):
    assert fmt_gib(n, signed=signed) == text


@pytest.mark.parametrize("n, signed, text", [
    (None, True, "—"),
    (GiB + GiB // 2, False, "1.500"),
    (MiB, False, "0.001"),
    (-3 * GiB, True, "-3.000"),
    (5 * GiB, True, "+5.000"),
])
def test_fmt_gib3(n, signed, text):
    assert fmt_gib3(n, signed=signed) == text


def test_fmt_tokens():
    assert fmt_tokens(None) == "—" and fmt_tokens(2987776) == "2,987,776" and fmt_tokens(0) == "0"


@pytest.mark.parametrize("text, n", [
    ("4096", 4096),
    ("0", 0),
    ("512MiB", 512 * MiB),
    ("512 mib", 512 * MiB),
    (" 512M ", 512 * MiB),
    ("1.5GiB", 3 * GiB // 2),
    ("1.5 GiB", 3 * GiB // 2),
    ("2G", 2 * GiB),
    ("1k", 1024),
    ("1KiB", 1024),
    ("1T", TiB),
    ("100b", 100),
])
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text", ["", "lots", "-5", "5 PB", "1e3", "1.5.2G", "GiB", "5 MB"])
def test_parse_bytes_refuses_what_it_cannot_read(text):
    with pytest.raises(UsageError, match=r"cannot read .* as a size") as info:
        parse_bytes(text)
    assert "\n" not in str(info.value) and info.value.exit_code is ExitCode.USAGE


def test_gib_to_bytes_reads_vllms_two_decimal_gib():
    # vLLM printed "0.34 GiB": 0.34 × 2**30 = 365072220.16 → 365072220
    assert gib_to_bytes("0.34") == 365072220
    assert gib_to_bytes("1.00") == GiB


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(min_value=0, max_value=2 ** 50), st.sampled_from(["", "B", "KiB", "MiB", "GiB"]))
def test_parse_bytes_reads_whole_units_exactly(count, unit):
    size = {"": 1, "B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB}[unit]
    if count * size < 2 ** 53:
        assert parse_bytes(f"{count}{unit}") == count * size


def test_parse_bytes_keeps_large_byte_counts_exact():
    assert parse_bytes("9007199254740993") == 9007199254740993
