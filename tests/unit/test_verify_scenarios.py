"""`--verify` scenarios, pure parts: which scenarios a `--verify` value chooses, how each load is
shaped from the engine's figures (kvaudit/engines/vllm/verify.py), how the report judges them
(assemble.verify_of_scenarios) and how RESULT.json's scenarios become the report's."""

from __future__ import annotations

import pytest
from conftest import run_cli  # noqa: F401  (the CLI runner, for the refusals)
from factories import BOOT_REQUESTED, MiB, gib

from kvaudit.assemble import scenario_summary, verify_of_scenarios
from kvaudit.config import AuditConfig
from kvaudit.engines.vllm import verify
from kvaudit.engines.vllm.supervise import _verify, first_logged_error
from kvaudit.errors import UsageError
from kvaudit.schema import Scenario
from kvaudit.validate import report_from_json

ALL = tuple(Scenario)


def shape(**kw) -> verify.Shape:
    base = dict(max_model_len=4096, max_num_seqs=8, max_num_batched_tokens=4096, chunked_prefill=False,
                kv_blocks=50_514, tokens_per_block=16, vocab_size=1024, max_logprobs=20)
    base.update(kw)
    return verify.Shape(**base)


# ------------------------------------------------------------------------------------------
# choosing


def test_verify_alone_chooses_every_scenario_that_applies():
    plain, mtp = AuditConfig(), AuditConfig(speculative_method="mtp", num_speculative_tokens=1)
    assert verify.choose("all", plain) == (Scenario.PREFILL, Scenario.BATCH, Scenario.SAMPLING)
    assert verify.choose("all", mtp) == ALL
    # vLLM's own --speculative-config after -- counts too
    passthrough = AuditConfig(extra_args={"speculative_config": {"method": "ngram"}})
    assert Scenario.SPEC in verify.choose("all", passthrough)


def test_a_list_chooses_those_in_their_fixed_order():
    assert verify.choose("batch, PREFILL", AuditConfig()) == (Scenario.PREFILL, Scenario.BATCH)


@pytest.mark.parametrize("text, words", [
    ("batch,warmup", "unknown scenario 'warmup': choose from batch, prefill, sampling, spec"),
    ("spec", "--verify spec needs speculative decoding: pass --mtp N"),
    (",", "--verify needs scenario names"),
])
def test_a_bad_choice_is_a_usage_error_that_names_the_fix(text, words):
    with pytest.raises(UsageError, match=words):
        verify.choose(text, AuditConfig())


@pytest.mark.parametrize("args, words", [
    (["--verify", "warmup"], "unknown scenario 'warmup'"),
    (["--verify", "spec"], "--verify spec needs speculative decoding"),
    (["--repeat", "0"], "--repeat': Input should be greater than or equal to 1"),
    (["--repeat", "2", "--", "--nnodes", "2", "--node-rank", "0"], "--repeat boots one node again and again"),
    # a newcomer's tries: each started a boot that ended in "timeout" (exit 3), ran with no limit, or ran no MTP
    (["--timeout", "0"], "--timeout takes a finite number of seconds above 0, got 0.0"),
    (["--timeout", "-1"], "--timeout takes a finite number of seconds above 0, got -1.0"),
    (["--timeout", "nan"], "--timeout takes a finite number of seconds above 0, got nan"),
    (["--mtp", "-1"], "--mtp takes how many tokens MTP drafts a step, 0 or more (0: none), got -1"),
])
def test_the_cli_refuses_before_any_boot(args, words):
    result = run_cli("run", *args)
    assert result.code == 2 and words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_bare_verify_is_all_and_a_following_option_is_not_its_value():
    from kvaudit.cli import _bare_verify
    assert _bare_verify(["--verify"]) == ["--verify=all"]
    assert _bare_verify(["--verify", "--gmu", "0.2"]) == ["--verify=all", "--gmu", "0.2"]
    assert _bare_verify(["--verify", "prefill,batch"]) == ["--verify", "prefill,batch"]
    # after -- nothing is kvaudit's
    assert _bare_verify(["--", "--verify"]) == ["--", "--verify"]
    assert _bare_verify(["--verify", "--", "--x"]) == ["--verify=all", "--", "--x"]


# ------------------------------------------------------------------------------------------
# shaping the loads


def test_prefill_is_one_request_of_max_model_len_less_the_decode_steps():
    (load,) = verify.plan([Scenario.PREFILL], shape())
    assert load.prompts == (4092,) and load.decode_tokens == 4 and load.tokens == 4096 and load.sampling == {}


def test_without_chunked_prefill_no_prompt_is_longer_than_the_step_budget():
    # vLLM 0.32 with MTP on CPU_MLA: max_num_scheduled_tokens stays 512 while the platform raises
    # max_num_batched_tokens to 2048 and turns chunked prefill off; a longer prompt waits forever
    s = shape(max_model_len=1024, max_num_batched_tokens=2048, max_num_scheduled_tokens=512, draft_tokens=1,
              lookahead_tokens=1, max_num_seqs=4)
    prefill, batch = verify.plan([Scenario.PREFILL, Scenario.BATCH], s)
    assert prefill.prompts == (512,)
    assert max(batch.prompts) + (batch.requests - 1) * 2 <= 512  # the last prompt fits beside 3 decoding requests
    assert "never scheduled and waits forever" in s.unschedulable()
    assert "VllmConfig._set_max_num_scheduled_tokens" in s.unschedulable()
    # with chunked prefill a long prompt is chunked: nothing to say
    assert shape(chunked_prefill=True, max_num_batched_tokens=512).unschedulable() is None
    assert shape().unschedulable() is None


def test_the_batch_decodes_together_and_fits_max_model_len():
    s = shape()
    prompts, decode = verify.batch_shape(s)
    # 8 admissions + 8 × 4096 / 4096 steps of prompts, then 4 more
    assert decode == 8 + 8 + 4 and len(prompts) == 8
    assert all(p + decode <= s.max_model_len for p in prompts)
    assert max(prompts) <= s.step_budget - 7  # beside 7 requests decoding one token each


def test_the_batch_fills_a_cache_smaller_than_the_config_allows():
    # a cache of 201 blocks of 16 tokens (block 0 is vLLM's null block): 25 blocks per request
    s = shape(max_model_len=4096, kv_blocks=201, max_num_seqs=8)
    prompts, decode = verify.batch_shape(s)
    assert len(prompts) == 8
    per_request = prompts[0] + decode
    assert per_request == 25 * 16  # every slot of its share of the blocks
    assert per_request * 8 == 200 * 16


def test_the_batch_leaves_room_for_the_draft_tokens_and_the_lookahead():
    s = shape(kv_blocks=201, max_num_seqs=8, draft_tokens=2, lookahead_tokens=2)
    prompts, decode = verify.batch_shape(s)
    assert decode == (8 + 8 + 4) * 3  # a step can accept every draft: the requests must still be running
    assert prompts[0] + decode + 2 + 2 == 25 * 16


def test_a_cache_too_small_for_max_num_seqs_gets_fewer_requests():
    s = shape(kv_blocks=9, max_num_seqs=8)  # 8 usable blocks; a request needs 16 prompt + 20 generated tokens
    prompts, decode = verify.batch_shape(s)
    assert len(prompts) == 2 and all(p >= verify.MIN_PROMPT_TOKENS for p in prompts)
    assert sum(p + decode for p in prompts) <= 8 * 16


def test_sampling_asks_for_top_k_top_p_min_p_and_the_most_logprobs():
    (load,) = verify.plan([Scenario.SAMPLING], shape(max_logprobs=20))
    assert load.sampling == {"temperature": 1.0, "top_k": 50, "top_p": 0.9, "min_p": 0.05, "logprobs": 20}
    assert load.sampling_text() == "temperature 1.0, top_k 50, top_p 0.9, min_p 0.05, logprobs 20"
    # vLLM refuses min_p with speculative decoding (SamplingParams._validate_spec_decode)
    (spec,) = verify.plan([Scenario.SAMPLING], shape(draft_tokens=1, max_logprobs=-1))
    assert "min_p" not in spec.sampling and spec.sampling["logprobs"] == verify.FALLBACK_LOGPROBS


def test_batch_is_greedy_and_spec_samples_so_the_drafts_meet_the_random_rejection_path():
    batch, spec = verify.plan([Scenario.BATCH, Scenario.SPEC], shape(draft_tokens=1))
    assert batch.sampling == {"temperature": 0.0} and spec.sampling == {"temperature": 1.0}
    assert batch.prompts == spec.prompts and spec.step_tokens == 8 * 2


def test_prompts_differ_from_request_to_request():
    # a prefix cache could otherwise share their blocks and the batch would fill less KV
    first = [verify.prompt_ids(i, 32, 1024)[:16] for i in range(64)]
    assert len({tuple(f) for f in first}) == 64
    assert all(2 <= t < 1024 for t in verify.prompt_ids(5, 100, 1024))


@pytest.mark.parametrize("vocab", [21, 22, 23, 1024, 32000, 129280, 151936])
def test_no_prompt_of_one_scenario_starts_as_one_of_another(vocab):
    # vLLM keeps a finished request's blocks in its prefix cache: with one set of prompts for every
    # scenario, sampling's prompts were all cache hits (no prefill ran) and batch's first request
    # reused the prefill scenario's prompt. The first two tokens tell every pair apart.
    starts: dict[tuple[int, ...], tuple[Scenario, int]] = {}
    for scenario in Scenario:
        for request in range(256):
            start = tuple(verify.prompt_ids(request, 2, vocab, scenario))
            other = starts.setdefault(start, (scenario, request))
            assert other[0] is scenario or other == (scenario, request), (start, other, scenario, request)


def test_each_scenario_is_sent_its_own_prompts():
    loads = verify.plan(ALL, shape(draft_tokens=1))
    starts = {load.name: {tuple(p["prompt_token_ids"][:2]) for p in verify.prompts_of(load, 1024)} for load in loads}
    assert [len(starts[s]) for s in ALL] == [1, 8, 8, 8]
    assert all(not (starts[a] & starts[b]) for a in ALL for b in ALL if a is not b)
    (prefill,) = verify.prompts_of(loads[0], 1024)
    assert len(prefill["prompt_token_ids"]) == loads[0].prompts[0]


# ------------------------------------------------------------------------------------------
# judging


def test_the_worst_scenario_gives_the_top_level_figures_and_every_failure_is_named():
    ok = scenario_summary(Scenario.PREFILL, [(0, gib(69), gib(70))], error=None, requests=1, tokens=4096)
    over = scenario_summary(Scenario.BATCH, [(0, gib(70) + 40 * MiB, gib(70))], error=None, requests=8)
    dead = scenario_summary(Scenario.SAMPLING, [], error="EngineDeadError: boom")
    v = verify_of_scenarios([ok, over, dead])
    assert not v.ok and v.error == ("batch: true peak above the requested budget; sampling: EngineDeadError: boom")
    # a failed scenario with a measured overrun is the worst; its figures are the top level's
    assert v.slack_bytes == -40 * MiB and v.true_peak_bytes == gib(70) + 40 * MiB
    assert v.overrun_bytes == 40 * MiB and [s.name for s in v.scenarios] == [Scenario.PREFILL, Scenario.BATCH,
                                                                             Scenario.SAMPLING]


def test_the_safe_flags_hold_back_the_worst_overrun_of_any_scenario():
    # an ok scenario 5 MiB over (inside the tolerance) and another failed by an error, 1 GiB under
    small = scenario_summary(Scenario.BATCH, [(0, gib(70) + 5 * MiB, gib(70))], error=None)
    failed = scenario_summary(Scenario.SAMPLING, [(0, gib(69), gib(70))], error="RuntimeError: x")
    v = verify_of_scenarios([small, failed])
    assert v.slack_bytes == gib(1)  # the failed one is the worst…
    assert v.overrun_bytes == 5 * MiB  # …but the overrun the safe flags subtract is the batch's


def test_every_scenario_within_the_tolerance_is_ok():
    a = scenario_summary(Scenario.PREFILL, [(0, gib(70) + 3 * MiB, gib(70)), (1, gib(60), gib(70))], error=None)
    v = verify_of_scenarios([a])
    assert v.ok and v.error is None and v.slack_bytes == -3 * MiB and [r.rank for r in v.ranks] == [0, 1]


def test_no_scenario_is_a_failed_verify():
    assert verify_of_scenarios([], error="shape: no KV").error == "shape: no KV"


def test_result_json_scenarios_become_the_report_s():
    log = ("(Worker pid=1) WARNING 12-04 16:13:32 [base.py:380] ValueError: Tokenizer not available\n"
           "(Worker pid=2) ERROR 12-04 16:29:50 [multiproc_executor.py:1063] RuntimeError: index -65 is out of "
           "bounds for dimension 1 with size 1024\n")
    data = {"scenarios": [
        {"name": "prefill", "requests": 1, "tokens": 516, "prompt_tokens": 512, "decode_tokens": 4, "step_tokens": 2,
         "draft_tokens": 1, "sampling": None, "error": None, "seconds": 0.25,
         "ranks": [{"rank": 0, "true_peak_bytes": BOOT_REQUESTED - MiB, "requested_bytes": BOOT_REQUESTED}]},
        {"name": "sampling", "requests": 4, "tokens": None, "error": "EngineDeadError: EngineCore encountered an "
         "issue.", "ranks": []},
        {"name": "bogus", "ranks": []}, "not a dict"], "error": None}
    v = _verify(data, log)
    assert [s.name for s in v.scenarios] == [Scenario.PREFILL, Scenario.SAMPLING]
    assert v.scenarios[0].ok and v.scenarios[0].slack_bytes == MiB and v.scenarios[0].prompt_tokens == 512
    dead = v.scenarios[1]
    assert not dead.ok and dead.error.endswith("(vLLM's log: RuntimeError: index -65 is out of bounds for dimension "
                                               "1 with size 1024)")
    assert first_logged_error(log).startswith("RuntimeError")  # the warning's traceback is passed over


def test_scenarios_round_trip_through_the_report_and_name_real_ranks(tmp_path):
    import json
    from dataclasses import replace

    from factories import real_json

    from kvaudit.errors import BadInputError
    from kvaudit.schema import dumps
    data = real_json("run2")  # TP2 + MTP + verify
    report = report_from_json(data)
    scen = scenario_summary(Scenario.BATCH, [(0, gib(1), gib(2)), (1, gib(1), gib(2))], error=None, requests=8,
                            tokens=100, sampling="temperature 0.0", seconds=1.5)
    rep = replace(report, verify=verify_of_scenarios([scen]))
    again = report_from_json(json.loads(dumps(rep)))
    assert again.verify == rep.verify
    bad = json.loads(dumps(rep))
    bad["verify"]["scenarios"][0]["ranks"][1]["rank"] = 7
    with pytest.raises(BadInputError, match=r"verify\.scenarios\[0\]\.ranks\[1\]\.rank: names rank 7"):
        report_from_json(bad)
    bad["verify"]["scenarios"][0]["name"] = "warmup"
    with pytest.raises(BadInputError, match=r"verify\.scenarios\[0\]\.name: expected one of prefill"):
        report_from_json(bad)
    # a report without scenarios keeps its bytes: the extension is absent, not null
    assert "scenarios" not in json.loads(dumps(report))["verify"]


def test_a_scenario_keeps_each_rank_s_allocator_figures_and_a_failure_shows_them(tmp_path):
    import json
    from dataclasses import fields, replace

    from factories import real_json

    from kvaudit.errors import BadInputError
    from kvaudit.render import summary
    from kvaudit.schema import VERIFY_TORCH_KEYS, VerifyRank, dumps
    assert VERIFY_TORCH_KEYS == tuple(f.name for f in fields(VerifyRank))[3:]
    # what a worker's kvaudit_verify_end returns, as RESULT.json holds it (the MTP boot of vLLM 0.33 on the
    # H200: the batch left 8.5 GiB in the allocator's cache that the sampling scenario found there)
    figures = {"torch_allocated_start_bytes": gib(128), "torch_peak_allocated_bytes": gib(128) + 300 * MiB,
               "torch_reserved_start_bytes": gib(137), "torch_peak_reserved_bytes": gib(137) + 20 * MiB}
    data = {"scenarios": [
        {"name": "sampling", "requests": 16, "error": None,
         "ranks": [{"rank": 0, "true_peak_bytes": gib(138), "requested_bytes": gib(137), **figures,
                    "torch_reserved_start_bytes": True}]},  # not a byte count: left out
        {"name": "prefill", "requests": 1, "error": None,
         "ranks": [{"rank": 0, "true_peak_bytes": gib(136), "requested_bytes": gib(137)}]}], "error": None}
    v = _verify(data)
    (sampling_rank,), (prefill_rank,) = v.scenarios[0].ranks, v.scenarios[1].ranks
    assert (sampling_rank.torch_allocated_start_bytes, sampling_rank.torch_peak_allocated_bytes,
            sampling_rank.torch_reserved_start_bytes, sampling_rank.torch_peak_reserved_bytes) == (
        gib(128), gib(128) + 300 * MiB, None, gib(137) + 20 * MiB)
    assert prefill_rank == VerifyRank(rank=0, true_peak_bytes=gib(136), slack_bytes=gib(1))
    # the report keeps them and reads them back; a rank without them has no such keys (absent, not null)
    report = replace(report_from_json(real_json("run2")), verify=v)
    # the figures are the H200's: a CUDA report (run2 ran on the CPU, where a failed verify gets the host's advice)
    report = replace(report, environment=replace(report.environment, device_name="NVIDIA H200"))
    text = dumps(report)
    again = report_from_json(json.loads(text))
    assert again.verify == v
    ranks_json = [s["ranks"][0] for s in json.loads(text)["verify"]["scenarios"]]
    assert ranks_json[0]["torch_peak_reserved_bytes"] == gib(137) + 20 * MiB
    assert "torch_reserved_start_bytes" not in ranks_json[0] and not set(VERIFY_TORCH_KEYS) & set(ranks_json[1])
    # the failed scenario says how much of its peak was the allocator's cache; the one that held says nothing
    line, advice = summary.verify_allocator_lines(report)
    assert line == ("sampling, rank 0: at its peak torch had allocated +300.00 MiB and reserved — over the "
                    "scenario's start; the allocator's cache (reserved, not allocated) held at least 8.73 GiB")
    # its live memory (allocated + non-torch: 138 GiB − 8.73 GiB of cache) was inside the budget of 137 GiB
    assert advice == summary.CACHE_ONLY_ADVICE
    # where the live memory itself went over (cache 100 MiB, overrun 1 GiB), the cache is no excuse: no advice
    data["scenarios"][0]["ranks"][0].update(torch_peak_reserved_bytes=gib(128) + 400 * MiB)
    (small,) = summary.verify_allocator_lines(replace(report, verify=_verify(data)))
    assert small.endswith("held at least 100.00 MiB")
    # nor where a failed scenario has no allocator figures to tell (it may be the one that went over)
    both = json.loads(json.dumps(data))
    both["scenarios"][0]["ranks"][0].update(figures)
    both["scenarios"][1]["ranks"][0]["true_peak_bytes"] = gib(138)
    assert summary.CACHE_ONLY_ADVICE not in summary.verify_allocator_lines(replace(report, verify=_verify(both)))
    # where the two peaks are equal (the CPU probe reads RSS for both) there is nothing to say
    equal = {**figures, "torch_peak_reserved_bytes": figures["torch_peak_allocated_bytes"]}
    data["scenarios"][0]["ranks"][0].update(equal)
    assert summary.verify_allocator_lines(replace(report, verify=_verify(data))) == []
    # a negative byte count is no figure: left out of a RESULT.json, refused in a report
    data["scenarios"][0]["ranks"][0]["torch_peak_allocated_bytes"] = -5
    assert _verify(data).scenarios[0].ranks[0].torch_peak_allocated_bytes is None
    bad = json.loads(text)
    bad["verify"]["scenarios"][0]["ranks"][0]["torch_peak_allocated_bytes"] = -5
    with pytest.raises(BadInputError, match=r"verify\.scenarios\[0\]\.ranks\[0\]\.torch_peak_allocated_bytes"):
        report_from_json(bad)
