"""Fuzzing the report loader and `kvaudit show` with damaged real reports.

Contract (docs/design.md, exit codes): any file is either a report (load_report returns one; `kvaudit
show` exits 0 with nothing on stderr) or bad input (BadInputError; exit 2 with exactly one line
on stderr). Never a traceback, never an internal error (exit 3).

The families below (1300 examples in all) each damage real reports one way;
`test_everything_at_once` mixes every kind of damage, including the ones that once broke the
contract (null required objects, integers beyond float range, rich-markup and surrogate text,
corrupt deflate streams, negative device totals, a balance error without the file name). Inputs
that do not look like JSON go to the log parser (kvaudit.engines.logs).
"""

from __future__ import annotations

import atexit
import copy
import gzip
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from conftest import run_cli
from factories import REAL_REPORTS, real_json
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from kvaudit.engines.inputs import load_report
from kvaudit.errors import BadInputError
from kvaudit.report import looks_like_json
from kvaudit.schema import Report

BASES = {name: real_json(name) for name in REAL_REPORTS}
NOT_NULL = {"name", "status", "source", "verdict", "kind", "owner", "schema",
            "engine", "environment", "config", "capacity", "owners"}
"""Keys of a required enum or object: a null there is a known bug (see test_schema)."""

WORK = Path(tempfile.mkdtemp(prefix="kvaudit-fuzz-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)
PY_TRACEBACK = "Traceback (most recent call last)"
COMMON = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------
# the contract


def _not_json(literal: str):
    raise ValueError(f"{literal} is not JSON (RFC 8259)")


def check_contract(raw: bytes, *, fmt: str = "table", strict_json_out: bool = False) -> str:
    """Write raw to a file; load it and show it; assert the contract. Returns the outcome."""
    path = WORK / "input.json"
    path.write_bytes(raw)
    try:
        report = load_report(path)
        outcome = "report"
        assert isinstance(report, Report)
    except BadInputError as exc:
        outcome = "bad"
        message = str(exc)
        assert message and "\n" not in message, f"not one line: {message!r}"
        assert str(path) in message, f"does not name the file: {message!r}"
    args = ["show", str(path), "--width", "100"] + (["-f", fmt] if fmt != "table" else [])
    result = run_cli(*args)
    # a Python traceback's header, not the word: a mutated document may hold it as a key, which the
    # one-line error then names (hypothesis drew `{'source': {'Traceback': ''}}`)
    assert PY_TRACEBACK not in result.stdout + result.stderr
    if outcome == "report":
        assert result.code == 0, f"a loadable report must show: exit {result.code}: {result.stderr!r}"
        assert result.stderr == ""
        if strict_json_out and fmt == "json":
            json.loads(result.stdout, parse_constant=_not_json)
    else:
        assert result.code == 2, f"bad input must exit 2: exit {result.code}: {result.stderr!r}"
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.startswith("kvaudit: error: ") and result.stdout == ""
    return outcome


# ------------------------------------------------------------------------------------------
# generators


def all_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.append(prefix + (key,))
            out.extend(all_paths(value, prefix + (key,)))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out.append(prefix + (i,))
            out.extend(all_paths(value, prefix + (i,)))
    return out


def parent_of(doc: Any, path: tuple) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


SAFE_TEXT = st.text(alphabet=st.characters(blacklist_characters="[]", blacklist_categories=("Cs",)), max_size=30)
"""Random unicode, without rich-markup brackets and lone surrogates (both known bugs)."""

CLEAN_VALUES = st.one_of(
    st.booleans(), st.integers(min_value=0, max_value=2 ** 62), st.integers(min_value=0, max_value=64),
    st.floats(allow_nan=False, allow_infinity=False), SAFE_TEXT, st.just([]), st.just({}),
    st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=4),
    st.dictionaries(SAFE_TEXT, SAFE_TEXT, max_size=3),
)

MARKUP_TEXT = st.sampled_from(["[/model]", "[bold]x", "a [/] b", "[red]", "\\[x]"])
FULL_VALUES = st.one_of(
    CLEAN_VALUES, st.none(),
    st.integers(min_value=19, max_value=400).map(lambda k: 10 ** k),
    st.integers(min_value=19, max_value=400).map(lambda k: -(10 ** k)),
    st.text(max_size=20), MARKUP_TEXT,
)


@st.composite
def mutated_document(draw, values=CLEAN_VALUES, full: bool = False) -> dict:
    """A real report with 1–3 keys deleted, retyped or given random text."""
    doc = copy.deepcopy(BASES[draw(st.sampled_from(REAL_REPORTS))])
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = all_paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, key = parent_of(doc, path), path[-1]
        current = parent[key]
        op = draw(st.sampled_from(["delete", "retype", "text"]))
        if op == "delete":
            del parent[key]
        elif op == "text" and isinstance(current, str):
            parent[key] = draw(st.text(max_size=40) if full else SAFE_TEXT)
        else:
            value = draw(st.one_of(st.none(), values))
            if value is None and not full and key in NOT_NULL:
                value = 0  # a null only where it is legal
            if not full and key == "device_total_bytes" and isinstance(value, int) and value < 0:
                value = 1
            parent[key] = value
    return doc


def dump(doc: dict, ascii_only: bool) -> bytes:
    return json.dumps(doc, allow_nan=True, ensure_ascii=ascii_only, indent=None).encode("utf-8")


# ------------------------------------------------------------------------------------------
# families that must hold now


@settings(max_examples=600, **COMMON)
@given(doc=mutated_document(), ascii_only=st.booleans())
def test_mutated_documents_load_or_are_refused(doc, ascii_only):
    check_contract(dump(doc, ascii_only))


@st.composite
def damaged_bytes(draw) -> bytes:
    text = dump(BASES[draw(st.sampled_from(REAL_REPORTS))], ascii_only=draw(st.booleans()))
    how = draw(st.sampled_from(["truncate", "garbage", "gzip", "gzip-truncated", "gzip-mutated"]))
    if how == "truncate":
        return text[: draw(st.integers(min_value=1, max_value=len(text) - 1))]
    if how == "garbage":
        at = draw(st.integers(min_value=1, max_value=len(text)))
        junk = draw(st.binary(min_size=1, max_size=16).map(lambda b: b.replace(b"[", b"(").replace(b"\\", b"/")))
        cut = draw(st.integers(min_value=0, max_value=8))
        return text[:at] + junk + text[at + cut:]
    if how == "gzip":
        return gzip.compress(text)
    if how == "gzip-truncated":
        packed = gzip.compress(text)
        return packed[: draw(st.integers(min_value=2, max_value=len(packed) - 1))]
    return gzip.compress(dump(draw(mutated_document()), ascii_only=True))


@settings(max_examples=400, **COMMON)
@given(raw=damaged_bytes())
def test_damaged_bytes_load_or_are_refused(raw):
    # every input is gzip (told by its magic bytes) or looks like JSON: none goes to the log parser
    assert raw[:2] == b"\x1f\x8b" or looks_like_json(raw.decode("utf-8", "replace"))
    check_contract(raw)


@st.composite
def odd_literals(draw) -> bytes:
    """NaN / Infinity / 1e999 in place of a number, or deep nesting in place of any value."""
    doc = copy.deepcopy(BASES[draw(st.sampled_from(REAL_REPORTS))])
    paths = all_paths(doc)
    path = draw(st.sampled_from(paths))
    parent = parent_of(doc, path)
    numeric = [p for p in paths if isinstance(parent_of(doc, p)[p[-1]], (int, float))
               and not isinstance(parent_of(doc, p)[p[-1]], bool)]
    if draw(st.booleans()) and numeric:
        path = draw(st.sampled_from(numeric))
        parent = parent_of(doc, path)
        literal = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1E400"]))
    else:
        depth = draw(st.integers(min_value=1, max_value=3000))
        literal = draw(st.sampled_from(["[" * depth + "1" + "]" * depth,
                                        '{"a":' * depth + "1" + "}" * depth]))
    parent[path[-1]] = "__FUZZ__"
    return dump(doc, ascii_only=True).replace(b'"__FUZZ__"', literal.encode())


@settings(max_examples=300, **COMMON)
@given(raw=odd_literals())
def test_non_finite_numbers_and_deep_nesting_load_or_are_refused(raw):
    check_contract(raw)


def test_the_passing_families_sum_to_at_least_a_thousand_examples():
    families = (test_mutated_documents_load_or_are_refused, test_damaged_bytes_load_or_are_refused,
                test_non_finite_numbers_and_deep_nesting_load_or_are_refused)
    assert sum(f._hypothesis_internal_use_settings.max_examples for f in families) >= 1000


# ------------------------------------------------------------------------------------------
# everything at once


@st.composite
def anything(draw) -> tuple[bytes, str]:
    how = draw(st.sampled_from(["mutated", "surrogate", "deflate-garbage", "deep-extra-args"]))
    fmt = draw(st.sampled_from(["table", "json", "csv", "markdown", "html", "prom"]))
    if how == "mutated":
        return dump(draw(mutated_document(values=FULL_VALUES, full=True)), ascii_only=draw(st.booleans())), fmt
    if how == "surrogate":
        doc = copy.deepcopy(BASES[draw(st.sampled_from(REAL_REPORTS))])
        doc["config"]["model"] = "__FUZZ__"
        return dump(doc, ascii_only=True).replace(b'"__FUZZ__"', b'"m\\ud800"'), fmt
    if how == "deflate-garbage":
        return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + draw(st.binary(min_size=1, max_size=64)), fmt
    doc = copy.deepcopy(BASES[draw(st.sampled_from(REAL_REPORTS))])
    doc["config"]["extra_args"] = "__FUZZ__"
    depth = draw(st.integers(min_value=400, max_value=900))
    return dump(doc, ascii_only=True).replace(b'"__FUZZ__"', b'{"a":' * depth + b"1" + b"}" * depth), "json"


@settings(max_examples=300, phases=[Phase.generate], **COMMON)
@given(case=anything())
def test_everything_at_once(case):
    raw, fmt = case
    check_contract(raw, fmt=fmt, strict_json_out=True)


# ------------------------------------------------------------------------------------------
# inputs that are not JSON: the log parser's side


@st.composite
def not_json(draw) -> bytes:
    kind = draw(st.sampled_from(["text", "binary", "log-ish"]))
    if kind == "binary":
        raw = draw(st.binary(max_size=512))
    elif kind == "text":
        raw = draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    else:
        lines = draw(st.lists(st.sampled_from([
            "INFO 12-02 21:04:00 [gpu_worker.py:201] Available KV cache memory: 0.28 GiB",
            "ERROR ValueError: To serve at least one request with the model's max seq len (160000)",
            "the estimated maximum model length is 131968.",
            "INFO Model loading took 0.04 GiB memory and 1.9 seconds",
            "torch.OutOfMemoryError: CUDA out of memory.",
        ]), max_size=8))
        raw = "\n".join(lines).encode()
    if looks_like_json(raw.decode("utf-8", "replace")) or raw[:2] == b"\x1f\x8b":
        raw = b"x" + raw
    return raw


@settings(max_examples=150, **COMMON)
@given(raw=not_json())
def test_non_json_inputs_go_to_the_log_parser_and_keep_the_contract(raw):
    # the log parser exists (kvaudit.engines.logs): no skip for its absence, which hid nothing but could hide it
    check_contract(raw)


# ------------------------------------------------------------------------------------------
# issue 15: what loads renders, in every verb; escape sequences never reach the terminal raw


NULLABLE_SITE = st.fixed_dictionaries({
    "phase": st.sampled_from(["load", "replay", "capture"]), "owner": st.sampled_from(["weights", "activation_peak"]),
    "site": SAFE_TEXT, "bytes": st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 40)),
    "blocks": st.one_of(st.none(), st.integers(min_value=0, max_value=64)), "at": st.sampled_from(["end", "peak"])})


@st.composite
def nulls_and_sites(draw) -> dict:
    """A real report with nulls where the loader allows them (rank numbers, owners, site bytes)
    and traced sites, some of unknown size: all of it loads, so every verb must render it."""
    doc = copy.deepcopy(BASES[draw(st.sampled_from(REAL_REPORTS))])
    for rank in doc["ranks"]:
        if draw(st.booleans()):
            rank["rank"] = None
        for owner in list(rank["owners"]):
            if draw(st.integers(min_value=0, max_value=3)) == 0:
                rank["owners"][owner] = None
        rank["sites"] = draw(st.lists(NULLABLE_SITE, max_size=5))
    return doc


def check_every_verb(a: Path, b: Path, fmt: str) -> None:
    """show A, diff A B and diff B A: exit 0, no traceback, no internal error."""
    for args in (["show", str(b)], ["diff", str(a), str(b)], ["diff", str(b), str(a)]):
        result = run_cli(*args, "-f", fmt, "--width", "100")
        assert result.code == 0, f"{args}: exit {result.code}: {result.stderr!r}"
        assert PY_TRACEBACK not in result.stderr and "internal error" not in result.stderr


@settings(max_examples=150, **COMMON)
@given(doc=nulls_and_sites(), fmt=st.sampled_from(["table", "json", "csv", "markdown", "html", "prom"]),
       base=st.sampled_from(REAL_REPORTS))
def test_reports_with_nulls_and_sites_render_in_every_verb(doc, fmt, base):
    path, other = WORK / "nulls.json", WORK / "base.json"
    path.write_bytes(dump(doc, ascii_only=True))
    try:
        load_report(path)  # it loads …
    except BadInputError:
        assume(False)  # a known owner nulled can unbalance the ledger: refused, one line (check_contract)
    other.write_bytes(dump(BASES[base], ascii_only=True))
    check_every_verb(other, path, fmt)  # … so it renders


def test_a_rank_without_a_number_diffs():
    doc = copy.deepcopy(BASES["run2"])
    doc["ranks"][0]["rank"] = None
    (WORK / "norank.json").write_bytes(dump(doc, ascii_only=True))
    result = run_cli("diff", str(WORK / "norank.json"), str(WORK / "norank.json"))
    assert result.code == 0, result.stderr


def test_a_site_of_unknown_size_shows():
    doc = copy.deepcopy(BASES["run1"])
    doc["ranks"][0]["sites"] = [{"phase": "load", "owner": "weights", "site": "a", "bytes": None, "blocks": 1},
                                {"phase": "load", "owner": "weights", "site": "b", "bytes": 4096, "blocks": 1}]
    (WORK / "nullsite.json").write_bytes(dump(doc, ascii_only=True))
    result = run_cli("show", str(WORK / "nullsite.json"))
    assert result.code == 0, result.stderr
    assert "sites: rank 0 at load: weights 4.00 KiB = 4.00 KiB b" in result.stdout


def test_a_kv_drop_gate_of_5000_digits_is_a_usage_error():
    path = str(WORK / "gate.json")
    Path(path).write_bytes(dump(BASES["run1"], ascii_only=True))
    result = run_cli("diff", path, path, "--fail-on-kv-drop", "9" * 5000)
    assert result.code == 2
    assert result.stderr_lines == ["kvaudit: error: --fail-on-kv-drop takes a size such as 4096, 512MiB or 1.5GiB, "
                                   "or a share such as 5%; got 5000 characters"]


ESCAPES = st.sampled_from(["\x1b[31mred", "\x1b]0;title\x07", "\x1b[2J\x1b[H", "a\x9b31mb", "\u202eevil",
                           "\x08\x08\x08x", "\x1bP+q\x1b\\"])
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@st.composite
def escaped_strings(draw) -> dict:
    """A real report with a terminal escape sequence in 1–4 of its strings."""
    doc = copy.deepcopy(BASES[draw(st.sampled_from(REAL_REPORTS))])
    doc["config"]["model"] = "/models/" + draw(ESCAPES)
    strings = [p for p in all_paths(doc) if isinstance(parent_of(doc, p)[p[-1]], str)
               and p[-1] not in NOT_NULL and p[-1] not in ("at", "phase", "schema")]
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        path = draw(st.sampled_from(strings))
        parent_of(doc, path)[path[-1]] = draw(ESCAPES)
    doc["warnings"] = [draw(ESCAPES)]
    return doc


@settings(max_examples=100, **COMMON)
@given(doc=escaped_strings(), fmt=st.sampled_from(["table", "csv", "markdown", "html", "prom"]))
def test_escape_sequences_in_reports_never_reach_the_terminal_raw(doc, fmt):
    path = WORK / "escapes.json"
    path.write_bytes(dump(doc, ascii_only=False))
    try:
        load_report(path)
    except BadInputError:
        return  # a retyped enum: refused, one line (check_contract covers it)
    for args in (["show", str(path)], ["diff", str(path), str(path)]):
        result = run_cli(*args, "-f", fmt, "--width", "100")
        assert result.code == 0, result.stderr
        assert RAW_CONTROL.findall(result.stdout + result.stderr) == []


def test_escape_sequences_in_a_log_and_its_name_are_shown_escaped():
    log = (Path(__file__).parents[2] / "configs" / "examples" / "h200-eager.vllm.log").read_text()
    evil = WORK / "evil\x1b[2J.log"
    evil.write_text(log.replace("/work/main/kvaudit/data/tiny-deepseek", "/m/\x1b]0;pwned\x07tiny"))
    shown = run_cli("show", str(evil))
    assert shown.code == 0, shown.stderr
    assert "\x1b" not in shown.stdout and " · \\x1b]0;pwned\\x07tiny · " in shown.stdout
    missing = run_cli("show", str(WORK / "gone\x1b[2J.json"))
    assert missing.code == 2
    assert missing.stderr_lines == [f"kvaudit: error: {WORK}/gone\\x1b[2J.json: no such file"]


def test_a_site_of_unknown_size_on_one_side_diffs_to_an_unknown_change():
    sides = []
    for name, size in (("nullside.json", None), ("sizedside.json", 4096)):
        doc = copy.deepcopy(BASES["run1"])
        doc["ranks"][0]["sites"] = [{"phase": "load", "owner": "weights", "site": "x", "bytes": size, "blocks": 1,
                                     "at": "end"}]
        (WORK / name).write_bytes(dump(doc, ascii_only=True))
        sides.append(str(WORK / name))
    result = run_cli("diff", *sides, "-f", "json")
    assert result.code == 0, result.stderr
    assert [(d["site"], d["a_bytes"], d["b_bytes"], d["delta_bytes"]) for d in json.loads(result.stdout)["sites"]] \
        == [("x", None, 4096, None)]
