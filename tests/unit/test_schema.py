"""The report contract: round trips, what the loader accepts (the stable keys of docs/design.md and
nothing more) and what it refuses, each refusal one line that names the path."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import typing

import pytest
from factories import DATA, REAL_REPORTS, assert_superset, real_json, write_json

from kvaudit.diff import diff_reports
from kvaudit.engines.inputs import load_report
from kvaudit.errors import BadInputError, ExitCode
from kvaudit.report import parse_report_text
from kvaudit.schema import (
    DIFF_SCHEMA,
    RANK_STABLE_KEYS,
    REPORT_SCHEMA,
    Owner,
    RankReport,
    Report,
    dumps,
    to_jsonable,
)
from kvaudit.validate import diff_from_json, report_from_json

# The stable keys, written out from docs/design.md's "Report contract" (not from the implementation).
STABLE_TOP = ("schema", "source", "engine", "environment", "config", "ranks", "capacity", "verify", "verdict",
              "failure")
STABLE_ENGINE = ("name", "version", "model_runner", "attention_backend")
STABLE_ENVIRONMENT = ("device_name", "driver", "cuda", "torch", "vllm", "env")
STABLE_CONFIG = ("model", "tensor_parallel_size", "decode_context_parallel_size", "speculative_method",
                 "num_speculative_tokens", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
                 "max_num_batched_tokens", "cudagraph_capture_sizes", "enforce_eager", "kv_cache_dtype", "block_size")
STABLE_RANK = ("rank", "tp_rank", "dcp_rank", "device_total_bytes", "requested_bytes", "others_bytes", "owners",
               "graph_pool_estimate_bytes", "graph_pool_actual_bytes", "kv_available_bytes", "phases")
STABLE_OWNERS = ("weights", "persistent", "activation_peak", "graph_pool", "non_torch", "kv_cache", "kv_unallocated")
STABLE_PHASE = ("name", "seconds", "torch_allocated_bytes", "torch_reserved_bytes", "torch_peak_allocated_bytes",
                "device_used_bytes", "status", "detail")
STABLE_CAPACITY = ("kv_available_bytes", "binding_rank", "kv_tokens", "kv_needed_bytes", "max_model_len_fits",
                   "max_feasible_model_len", "gmu_needed", "physical_headroom_bytes", "naive_kv_available_bytes",
                   "safe_serve_flags")
STABLE_VERIFY = ("ok", "prompt_tokens", "true_peak_bytes", "slack_bytes", "error")
STABLE_FAILURE = ("phase", "rank", "kind", "message")


def keep(data: dict, keys) -> dict:
    return {k: data[k] for k in keys}


def stable_only(data: dict) -> dict:
    """A report as a tool that knows only docs/design.md's stable keys would write it. Without the
    torch_other extension, its bytes are part of kv_unallocated (Owner.TORCH_OTHER's docstring)."""
    out = keep(data, STABLE_TOP)
    out["engine"] = keep(data["engine"], STABLE_ENGINE)
    out["environment"] = keep(data["environment"], STABLE_ENVIRONMENT)
    out["config"] = keep(data["config"], STABLE_CONFIG)
    out["capacity"] = keep(data["capacity"], STABLE_CAPACITY)
    if data["verify"] is not None:
        out["verify"] = keep(data["verify"], STABLE_VERIFY)
    if data["failure"] is not None:
        out["failure"] = keep(data["failure"], STABLE_FAILURE)
    out["ranks"] = []
    for rank in data["ranks"]:
        r = keep(rank, STABLE_RANK)
        owners = keep(rank["owners"], STABLE_OWNERS)
        if rank["owners"].get("torch_other") is not None and owners["kv_unallocated"] is not None:
            owners["kv_unallocated"] += rank["owners"]["torch_other"]
        r["owners"] = owners
        r["phases"] = [keep(p, STABLE_PHASE) for p in rank["phases"]]
        out["ranks"].append(r)
    return out


# ------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("name", REAL_REPORTS)
def test_a_real_report_round_trips(name):
    # GIVEN a real report as kvaudit wrote it
    text = (DATA / f"{name}.json").read_text(encoding="utf-8")
    # WHEN it is loaded and dumped again  THEN every key and value survives (extensions added since
    # the file was written appear as null), and the objects survive another trip exactly
    report = parse_report_text(text, name)
    assert_superset(json.loads(dumps(report)), json.loads(text))
    assert report_from_json(json.loads(dumps(report))) == report
    assert dumps(report_from_json(json.loads(dumps(report)))) == dumps(report)


def test_the_stable_rank_keys_are_the_documented_ones():
    assert RANK_STABLE_KEYS == STABLE_RANK


def test_every_scalar_field_of_a_rank_is_read_back_without_a_line_listing_it(real_reports):
    # GIVEN a real rank whose every plain scalar field (the extensions included) holds a value of its
    # own, none the default; the reader names none of them (it goes by RankReport's declared types)
    hints = typing.get_type_hints(RankReport)
    rank = real_reports["run2"].ranks[0]
    scalars = {f.name: hints[f.name] for f in dataclasses.fields(RankReport)
               if hints[f.name] in (int | None, str | None, float | None, bool | None) and f.name != "rank"}
    assert {"kv_segment_rounding_bytes", "prefill_probe_transient_bytes", "kv_cache_spec_dtype"} <= set(scalars)
    values = {name: (1000 + i if kind == int | None else f"value-{i}" if kind == str | None
                     else 0.5 + i if kind == float | None else True)
              for i, (name, kind) in enumerate(scalars.items())}
    rank = dataclasses.replace(rank, kv_budget=None, **values)
    report = dataclasses.replace(real_reports["run2"], ranks=(rank, *real_reports["run2"].ranks[1:]))
    # WHEN it is written and read back  THEN each value is there, typed
    back = report_from_json(json.loads(dumps(report))).ranks[0]
    assert {name: getattr(back, name) for name in scalars} == values
    assert back == rank


def test_loading_keeps_enums_and_integer_bytes(real_reports):
    rep = real_reports["run2"]
    assert isinstance(rep, Report) and rep.schema == REPORT_SCHEMA
    rank = rep.ranks[1]
    assert set(rank.owners) == set(Owner)
    assert all(v is None or type(v) is int for v in rank.owners.values())
    assert rep.config.cudagraph_capture_sizes is None and rep.config.tensor_parallel_size == 2
    assert rep.verify is not None and rep.verify.ok is False and rep.verify.slack_bytes == -39581777


def test_a_gzipped_report_loads_by_its_magic_bytes_not_its_suffix(tmp_path):
    path = tmp_path / "report.json"  # no .gz suffix
    path.write_bytes(gzip.compress((DATA / "run1.json").read_bytes()))
    assert load_report(path) == load_report(DATA / "run1.json")


# ------------------------------------------------------------------------------------------
# what the loader accepts


@pytest.mark.parametrize("name", REAL_REPORTS)
def test_a_report_with_only_the_stable_keys_loads(tmp_path, name):
    # GIVEN a real report stripped to docs/design.md's stable keys (no extension at all)
    data = stable_only(real_json(name))
    assert "torch_other" not in data["ranks"][0]["owners"] and "levers" not in data["capacity"]
    path = write_json(tmp_path / f"{name}.stable.json", data)
    # WHEN it is loaded  THEN it is a report; extensions are None or empty, torch_other unknown
    rep = load_report(path)
    assert rep.capacity.levers == () and rep.capacity.kv_bytes_per_block is None
    assert rep.warnings == () and rep.verdict_reason == "" and rep.accuracy is None
    for rank in rep.ranks:
        assert rank.owners[Owner.TORCH_OTHER] is None
        assert rank.kv_blocks is None and rank.deferred_steps == () and rank.free_at_start_bytes is None
    # AND the stable facts are intact
    full = load_report(DATA / f"{name}.json")
    assert rep.verdict == full.verdict and rep.capacity.kv_available_bytes == full.capacity.kv_available_bytes
    assert [r.owners[Owner.WEIGHTS] for r in rep.ranks] == [r.owners[Owner.WEIGHTS] for r in full.ranks]


def test_unknown_keys_are_ignored(tmp_path):
    data = real_json("run1")
    data["from_the_future"] = {"anything": [1, 2, 3]}
    data["ranks"][0]["new_rank_fact"] = "x"
    data["capacity"]["new_capacity_fact"] = 7
    assert load_report(write_json(tmp_path / "r.json", data)) == load_report(DATA / "run1.json")


# ------------------------------------------------------------------------------------------
# what the loader refuses: one line, naming the path


def delete(*path):
    def mutate(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return mutate


def put(value, *path):
    def mutate(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


REFUSALS = [
    # missing stable keys
    (delete("capacity"), r": missing key 'capacity'"),
    (delete("schema"), r": missing key 'schema'"),
    (delete("ranks", 0, "owners", "weights"), r"\.ranks\[0\]\.owners: missing key 'weights'"),
    (delete("ranks", 1, "phases", 2, "device_used_bytes"),
     r"\.ranks\[1\]\.phases\[2\]: missing key 'device_used_bytes'"),
    (delete("config", "max_model_len"), r"\.config: missing key 'max_model_len'"),
    (delete("engine", "attention_backend"), r"\.engine: missing key 'attention_backend'"),
    (delete("verify", "slack_bytes"), r"\.verify: missing key 'slack_bytes'"),
    # wrong types
    (put("big", "ranks", 0, "requested_bytes"), r"\.ranks\[0\]\.requested_bytes: expected an integer or null, "
                                                 r"got the string 'big'"),
    (put(True, "ranks", 0, "rank"), r"\.ranks\[0\]\.rank: expected an integer or null, got a boolean"),
    (put(1.5, "capacity", "kv_tokens"), r"\.capacity\.kv_tokens: expected an integer or null, got a number"),
    (put("0.9", "config", "gpu_memory_utilization"), r"\.config\.gpu_memory_utilization: expected a number"),
    (put("yes", "config", "enforce_eager"), r"\.config\.enforce_eager: expected true, false or null"),
    (put([1, "2"], "config", "cudagraph_capture_sizes"), r"\.config\.cudagraph_capture_sizes: expected a list of "
                                                         r"integers"),
    (put({}, "ranks"), r"\.ranks: expected a list or null, got an object"),
    (put([], "engine"), r"\.engine: expected an object, got a list"),
    (put(["x"], "ranks"), r"\.ranks\[0\]: expected an object, got the string 'x'"),
    (put({"A": 1}, "environment", "env"), r"\.environment\.env: expected string values"),
    (put(float("nan"), "capacity", "gmu_needed"), r"\.capacity\.gmu_needed: expected a number or null"),
    (put([1], "warnings"), r"\.warnings: expected a list of strings"),
    # unknown owner, unknown enum values
    (put(0, "ranks", 0, "owners", "mystery"), r"\.ranks\[0\]\.owners: unknown owner 'mystery'"),
    (put("warmup", "ranks", 0, "phases", 0, "name"), r"\.ranks\[0\]\.phases\[0\]\.name: expected one of baseline, "),
    (put("maybe", "verdict"), r"\.verdict: expected one of ok, fail, unknown, got 'maybe'"),
    (put("cloud", "source"), r"\.source: expected one of run, log, selftest"),
    # wrong or other schema
    (put("kvaudit.report/2", "schema"), r": schema 'kvaudit.report/2' is not 'kvaudit.report/1'$"),
    (put("memray/1", "schema"), r": schema 'memray/1' is not"),
    (put(1, "schema"), r"\.schema: expected a string or null, got an integer"),
    # cross-references: a rank twice, or a field naming a rank the report does not have
    (put(0, "ranks", 1, "rank"), r"\.ranks\[1\]\.rank: rank 0 appears twice \(ranks\[0\] is rank 0 too\)"),
    (put(7, "capacity", "binding_rank"), r"\.capacity\.binding_rank: names rank 7, but no entry of ranks is rank 7$"),
    (put(2, "verify", "ranks", 1, "rank"), r"\.verify\.ranks\[1\]\.rank: names rank 2, but no entry of ranks"),
    (put([{"owner": "weights", "rank": 3, "planted_bytes": 1, "measured_bytes": 1}], "accuracy"),
     r"\.accuracy\[0\]\.rank: names rank 3, but no entry of ranks is rank 3$"),
]


@pytest.mark.parametrize("mutate, pattern", REFUSALS)
def test_the_loader_refuses_with_one_line_naming_the_path(tmp_path, mutate, pattern):
    # GIVEN a real report with one thing wrong
    data = real_json("run2")
    mutate(data)
    path = write_json(tmp_path / "bad.json", data)
    # WHEN it is loaded  THEN BadInputError, one line, starting with the file and naming the key
    with pytest.raises(BadInputError) as info:
        load_report(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    assert re.search(pattern, message), message
    assert info.value.exit_code is ExitCode.USAGE


def test_ranks_without_numbers_are_no_duplicates_and_may_be_the_ranks_named(tmp_path):
    # GIVEN a report whose two ranks lost their numbers, while capacity and verify still name
    # ranks 0 and 1  THEN it loads: the nulls do not collide, and the names may be those ranks
    data = real_json("run2")
    for rank in data["ranks"]:
        rank["rank"] = None
    report = load_report(write_json(tmp_path / "unnumbered.json", data))
    assert [r.rank for r in report.ranks] == [None, None] and report.capacity.binding_rank == 1


def test_a_failure_may_name_a_rank_that_left_no_record(tmp_path):
    # GIVEN a partial report whose failing rank died before it wrote a record  THEN it loads
    data = real_json("run3")
    data["ranks"] = data["ranks"][:1]
    data["capacity"]["binding_rank"] = 0
    data["failure"]["rank"] = 1
    assert load_report(write_json(tmp_path / "partial.json", data)).failure.rank == 1


def test_a_diff_passed_as_a_report_is_named_as_such(tmp_path):
    a, b = load_report(DATA / "run1.json"), load_report(DATA / "run5.json")
    path = tmp_path / "diff.json"
    path.write_text(dumps(diff_reports(a, b)), encoding="utf-8")
    with pytest.raises(BadInputError, match=r"schema 'kvaudit.diff/1' is not 'kvaudit.report/1': a diff, not a "
                                            r"report$") as info:
        load_report(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


@pytest.mark.parametrize("content, pattern", [
    (lambda text: text[: len(text) // 2], r": not valid JSON \(.* at line \d+ column \d+\)$"),
    (lambda text: text[:1], r": not valid JSON"),
    (lambda text: text + "\n}", r": not valid JSON \(Extra data"),
    (lambda text: "[1, 2, 3]", r": holds a list, not a kvaudit report \(one JSON object with \"schema\": "
                               r"\"kvaudit.report/1\"\)$"),
    (lambda text: "{}", r": missing key 'schema'$"),
    (lambda text: "{" + "\x00\xff\xfe" * 10, r": not valid JSON"),
    (lambda text: "[" * 200_000, r": not valid JSON \(RecursionError\)$"),
])
def test_damaged_json_is_one_line_of_bad_input(tmp_path, content, pattern):
    path = tmp_path / "damaged.json"
    path.write_text(content((DATA / "run1.json").read_text(encoding="utf-8")), encoding="utf-8",
                    errors="surrogateescape")
    with pytest.raises(BadInputError, match=pattern) as info:
        load_report(path)
    assert "\n" not in str(info.value) and str(info.value).startswith(str(path))


def test_binary_that_starts_like_json_is_bad_input(tmp_path):
    path = tmp_path / "binary.json"
    path.write_bytes(b"{" + bytes(range(256)) * 4)
    with pytest.raises(BadInputError, match=r"not valid JSON") as info:
        load_report(path)
    assert "\n" not in str(info.value)


def test_truncated_gzip_is_bad_input(tmp_path):
    path = tmp_path / "report.json.gz"
    path.write_bytes(gzip.compress((DATA / "run1.json").read_bytes())[:200])
    with pytest.raises(BadInputError, match=r"truncated or corrupt gzip") as info:
        load_report(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_gzip_of_binary_is_bad_input(tmp_path):
    path = tmp_path / "report.json"
    path.write_bytes(gzip.compress(b"{\x00\x9c\xff binary"))
    with pytest.raises(BadInputError, match=r"not valid JSON"):
        load_report(path)


@pytest.mark.parametrize("make, pattern", [
    (lambda p: p, r": no such file$"),
    (lambda p: (p.mkdir(), p)[1], r": is a directory, not a report or log$"),
])
def test_a_path_that_is_not_a_file_is_bad_input(tmp_path, make, pattern):
    path = make(tmp_path / "missing.json")
    with pytest.raises(BadInputError, match=pattern):
        load_report(path)


# ------------------------------------------------------------------------------------------
# the diff contract


def test_a_diff_round_trips_through_its_schema(real_reports):
    diff = diff_reports(real_reports["run1"], real_reports["run2"], "run1.json", "run2.json")
    data = json.loads(dumps(diff))
    assert data["schema"] == DIFF_SCHEMA
    assert set(data) >= {"schema", "comparable", "knob_differences", "environment_differences", "owners",
                         "dominant_owner", "capacity", "verdict"}
    assert set(data["capacity"]) >= {"a", "b", "kv_available_delta_bytes"}
    assert set(data["owners"][0]) == {"owner", "rank", "a_bytes", "b_bytes", "delta_bytes"}
    assert diff_from_json(data) == diff


def test_diff_from_json_refuses_a_report():
    with pytest.raises(BadInputError, match=r"schema 'kvaudit.report/1' is not 'kvaudit.diff/1'"):
        diff_from_json(real_json("run1"))


def test_to_jsonable_writes_enums_as_their_values(real_reports):
    data = to_jsonable(real_reports["run5"])
    assert data["verdict"] == "fail" and data["failure"]["kind"] == "does_not_fit"
    assert data["ranks"][0]["phases"][0]["name"] == "baseline"
    assert data["ranks"][0]["owners"]["kv_cache"] is None   # unknown is null, never 0


# ------------------------------------------------------------------------------------------
# Bugs: inputs the loader accepts (or crashes on) although they are not reports.


NULL_REQUIRED = [
    ("engine",), ("environment",), ("config",), ("capacity",), ("ranks", 0, "owners"),
    ("source",), ("verdict",), ("ranks", 0, "phases", 0, "name"), ("ranks", 0, "phases", 0, "status"),
]


@pytest.mark.parametrize("path", NULL_REQUIRED, ids=lambda p: ".".join(map(str, p)))
def test_null_for_a_required_object_or_enum_is_bad_input(tmp_path, path):
    data = real_json("run2")
    put(None, *path)(data)
    with pytest.raises(BadInputError) as info:
        load_report(write_json(tmp_path / "null.json", data))
    assert "\n" not in str(info.value)


def test_an_unbalanced_report_names_its_file(tmp_path):
    data = real_json("run1")
    data["ranks"][0]["owners"]["weights"] += 4096
    path = write_json(tmp_path / "edited.json", data)
    with pytest.raises(BadInputError) as info:
        load_report(path)
    assert str(path) in str(info.value)


def test_an_integer_too_large_for_a_number_field_is_bad_input(tmp_path):
    data = real_json("run1")
    data["ranks"][0]["phases"][0]["seconds"] = 10 ** 400
    with pytest.raises(BadInputError):
        load_report(write_json(tmp_path / "huge.json", data))


def test_a_corrupt_gzip_body_is_bad_input(tmp_path):
    path = tmp_path / "report.json"
    # a valid gzip header, then garbage where the deflate stream should be
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"garbage in the deflate stream")
    with pytest.raises(BadInputError, match="corrupt gzip"):
        load_report(path)


def test_a_report_with_a_utf8_bom_loads(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + (DATA / "run1.json").read_bytes())
    assert load_report(path) == load_report(DATA / "run1.json")


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_bad_input(tmp_path, literal):
    text = (DATA / "run1.json").read_text(encoding="utf-8")
    text = text.replace('"gpu_memory_utilization": 0.3', f'"gpu_memory_utilization": {literal}')
    assert literal in text
    path = tmp_path / "inf.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BadInputError, match=r"gpu_memory_utilization"):
        load_report(path)
