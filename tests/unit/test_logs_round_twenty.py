"""Real pastes, round twenty (stop 50): logs from notebooks, web pages, other accelerators and wrappers, each
test naming its source; the data are the smallest excerpts of them that show each finding
(tests/unit/data/round_twenty)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvaudit.diff import diff_reports
from kvaudit.engines.inputs import load_report, report_from_text
from kvaudit.engines.logs import report_from_log_text
from kvaudit.errors import BadInputError
from kvaudit.render.summary import diff_summary
from kvaudit.schema import FailureKind, KnobDifference, KvSizing, Phase, Verdict

_DATA = Path(__file__).parent / "data" / "round_twenty"
GiB = 1 << 30


def _report(name: str):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8"), name)


def test_a_jupyter_notebook_is_read_as_the_log_its_outputs_hold() -> None:
    """dongukmoon/misc's Colab notebooks (gpt2 on vLLM 0.6.4.post1, an L4 and a T4): the log is in the cells'
    output strings. `ingest` read them; `show` and `diff` said "missing key 'schema'" (exit 2), as for a
    damaged report, because the file starts with `{`."""
    report = load_report(_DATA / "notebook_l4.ipynb")
    assert report.verdict is Verdict.OK
    assert report.capacity.kv_tokens == 294_816  # `# GPU blocks: 18426` × block size 16
    assert report.ranks[0].device_total_bytes == round(22.17 * GiB)


def test_json_with_a_reports_keys_is_still_judged_as_a_report() -> None:
    """A damaged report is told so, not read as a log: one of a report's top-level keys is enough."""
    with pytest.raises(BadInputError, match="missing key 'schema'"):
        report_from_text(json.dumps({"ranks": [], "verdict": "ok"}), "damaged.json")
    with pytest.raises(BadInputError, match="no vLLM log lines found"):
        report_from_text(json.dumps({"a": 1}), "other.json")  # neither: the log reader's own message


def test_a_diff_of_two_devices_names_the_budget_as_the_cause() -> None:
    """The same notebook on an L4 (22.17 GiB) and a T4 (14.75 GiB) at gmu 0.5: KV fell 3.60 GiB because the
    budget fell 3.71 GiB. Before, the summary named non_torch (which fell, so it raised KV) and blamed the
    rest on owners neither log states; the device's size was in no line."""
    diff = diff_reports(load_report(_DATA / "notebook_l4.ipynb"), load_report(_DATA / "notebook_t4.ipynb"))
    assert round(diff.capacity["requested_delta_bytes"] / GiB, 2) == -3.71  # (14.75 − 22.17) × 0.5
    lines = diff_summary(diff)
    dominant = next(line for line in lines if line.startswith("dominant owner:"))
    assert dominant == ("dominant owner: non_torch; KV's -3.60 GiB is mostly the budget's: device × "
                        "gpu_memory_utilization moved -3.71 GiB, and non_torch's -0.11 GiB moved KV by +0.11 GiB")
    environment = next(line for line in lines if line.startswith("environment:"))
    assert environment.endswith("device_total 22.17 GiB → 14.75 GiB")


def test_an_npu_out_of_memory_with_a_label_in_front_is_the_boots_oom() -> None:
    """vllm-ascend#1987 (910B, GLM-4-32B, TP2): `【BUG】：RuntimeError: NPU out of memory. Tried to allocate
    3.47 GiB (NPU 0; 60.97 GiB total capacity; …)`. Before, no failure at all (verdict unknown): only CUDA's
    wordings were out-of-memory, and the older allocator message's total was not read."""
    report = _report("npu_oom_labelled.log")
    assert report.failure is not None and report.failure.kind is FailureKind.OOM
    assert report.failure.message.startswith("RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB")
    assert report.verdict is Verdict.FAIL
    assert report.ranks[0].device_total_bytes == round(60.97 * GiB)


@pytest.mark.parametrize("device", ["XPU", "HPU"])
def test_other_devices_out_of_memory_is_oom(device: str) -> None:
    report = report_from_log_text(f"RuntimeError: {device} out of memory. Tried to allocate 2.00 GiB\n", "x")
    assert report.failure is not None and report.failure.kind is FailureKind.OOM


def test_a_tpu_worker_whose_weights_exceed_its_budget_does_not_fit() -> None:
    """tpu-inference PR 763 (8 × v5p, gmu 0.8): `ValueError: total_hbm_used_gb=647.4GiB exceeds
    total_hbm_limit_gb=606.37GiB by 41.02GiB.` (TPUWorker.determine_available_memory: nothing is left of the
    request for KV). Before, a crash of unknown cause, and the request (606.37 GiB = 0.8 × 8 × 94.75) read as
    the device's total."""
    report = _report("tpu_hbm_exceeds.log")
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.DOES_NOT_FIT, Phase.KV)
    assert report.verdict is Verdict.FAIL
    assert all(r.device_total_bytes is None for r in report.ranks)
    renamed = (_DATA / "tpu_hbm_exceeds.log").read_text(encoding="utf-8").replace("limit_gb", "limit_cap_gb")
    assert report_from_log_text(renamed, "x").failure.kind is FailureKind.DOES_NOT_FIT  # the wording since


def test_a_request_refused_for_its_length_is_no_boot_failure() -> None:
    """A page on vLLM 0.10.2 (cluetax.org): `ValueError: This model's maximum context length is 40000 tokens.
    However, your request has 78344 input tokens.`, then stats lines whose throughput the page elided
    (`Engine 000: ..., GPU KV cache usage: 4.7%`). Before, the boot's death (verdict unknown, a crash)."""
    report = _report("request_too_long_while_serving.log")
    assert report.failure is None
    assert any(w.startswith("after startup finished: ValueError: This model's maximum context length is 40000")
               for w in report.warnings)


def test_an_engine_dead_error_answered_to_a_request_is_no_boot_failure() -> None:
    """A mirror of vllm#41530 (DeepSeek-V4-Pro, TP8, MTP): `EngineDeadError, 500 Internal Server Error
    Traceback …` after a worker hung in `sample_tokens`, a step's call. Before, "the boot died"."""
    report = _report("engine_dead_while_serving.log")
    assert report.failure is None
    assert any(w.startswith("after startup finished:") for w in report.warnings)


def test_a_start_that_finished_passed_vllms_length_check() -> None:
    """vllm#15664 (V0, 0.8.3, a 49B GPTQ at --max-model-len 32768): the capture, `init engine (profile, create
    kv cache, warmup model) took 46.05 seconds`, the API server; no KV line kept. V0 raises before that line
    when the length does not fit (raise_if_cache_size_invalid), as V1 does (_check_enough_kv_cache_memory).
    Before, verdict unknown."""
    report = _report("v0_finished_no_kv_line.log")
    assert report.failure is None and report.capacity.max_model_len_fits is True
    assert report.verdict is Verdict.OK
    assert report.verdict_reason == "fits: max_model_len 32768 passed vLLM's own check"
    cut = (_DATA / "v0_finished_no_kv_line.log").read_text(encoding="utf-8").split("init engine")[0]
    assert report_from_log_text(cut, "x").capacity.max_model_len_fits is None  # not finished: not known


def test_the_older_actual_usage_wording_shows_graphs_were_not_budgeted() -> None:
    """vllm PR 48601 (MRv2, Qwen3.6-27B-FP8, TP4, H100; it then ran out of memory in kernel warmup): `Actual
    usage is 7.39 GiB for weight, 1.54 GiB for peak activation, 0.6 GiB for non-torch memory, and 2.04 GiB for
    CUDAGraph memory … Current kv cache memory in use is 63.25 GiB` (72.78 − 7.39 − 1.54 − 0.60 = 63.25: no
    graph memory charged). Before, the one capture line was read as the graph estimate and nothing said the
    2.04 GiB were outside the budget."""
    report = _report("mrv2_old_usage_wording.log")
    by_rank = {r.rank: r for r in report.ranks}
    for rank in (1, 2):  # rank 1: its capture line, then its usage line; rank 2: its usage line alone
        assert by_rank[rank].graph_pool_estimate_bytes == 0
        assert by_rank[rank].graph_pool_actual_bytes == round(2.04 * GiB)
        assert (f"rank {rank}: vLLM reserved no CUDA graph memory before sizing the KV cache (estimate 0), but "
                f"capture took 2.04 GiB: those bytes were not budgeted") in report.warnings
    off = (_DATA / "mrv2_old_usage_wording.log").read_text(encoding="utf-8").replace("63.25 GiB", "61.21 GiB")
    charged = {r.rank: r for r in report_from_log_text(off, "x").ranks}
    assert charged[2].graph_pool_estimate_bytes is None  # a cache 2.04 GiB smaller: graphs were charged


def test_an_untagged_paste_of_several_ranks_kv_lines_reads_the_least() -> None:
    """ai-dynamo/dynamo#3644 (TP8, vLLM's records re-emitted through Dynamo's tracing, no process prefixes):
    `Available KV cache memory: 16.83 GiB` seven times and `17.30 GiB` once. vLLM sizes every worker's cache
    by the least (unify_kv_cache_configs); the last line had been read, right here only because it is 16.83."""
    text = (_DATA / "dynamo_untagged_kv_lines.log").read_text(encoding="utf-8")
    assert _report("dynamo_untagged_kv_lines.log").capacity.kv_available_bytes == round(16.83 * GiB)
    lines = text.split("\n")
    larger = lines.pop(next(i for i, line in enumerate(lines) if "17.30 GiB" in line))
    lines.insert(1 + max(i for i, line in enumerate(lines) if "Available KV cache memory" in line), larger)
    assert report_from_log_text("\n".join(lines), "x").capacity.kv_available_bytes == round(16.83 * GiB)


def test_flashinfers_autotuner_out_of_memory_after_kv_is_said() -> None:
    """club-3090#613 (RTX 5090, a 2026-07 image): the KV size lines, then twice `[Autotuner]: OOM detected,
    falling back to default tactic` in the kernel warmup that runs after the cache is allocated. Before,
    `ok` and not a word of it; the verdict stays what the KV lines say, with the warning beside it."""
    report = _report("flashinfer_autotuner_oom.log")
    assert report.failure is None
    assert sum("FlashInfer's autotuner ran out of memory" in w for w in report.warnings) == 1


def test_an_oom_while_a_layer_makes_its_weights_is_in_load() -> None:
    """vllm#51124 (Kimi-K3, TP32): `… in __init__`, `… mxfp4.py, line 622, in create_weights`, then torch's
    out-of-memory error. A quantization method's create_weights runs in a layer's __init__, while the model
    loads. Before, the OOM had no phase."""
    report = _report("oom_in_create_weights.log")
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.OOM, Phase.LOAD)


def test_torchs_rank_prefix_places_a_figure_on_that_rank() -> None:
    """club-3090#1107 (2 × RTX 5090, TP2): `[rank1]:[W826 …] memory allocation failed with OOM on device 1 …
    (free: 282394624, total: 33687928832)`, beside `(Worker_TP0 pid=199)` and `(Worker_TP1 pid=200)` lines.
    Before, the device total went to rank 0 and the report said the log names no process."""
    report = _report("torch_rank_prefix.log")
    assert [(r.rank, r.device_total_bytes) for r in report.ranks] == [(1, 33_687_928_832)]
    assert not any(w.startswith("the log names no process") for w in report.warnings)


def test_kv_cache_memory_bytes_in_the_arguments_is_said_and_no_profile_is_claimed() -> None:
    """vllm#49878 (Gemma 4 31B, 0.25.1): `non-default args: {… 'kv_cache_memory_bytes': 52613349376 …}` and no KV
    line. Before, nothing said the cache was fixed at 49.00 GiB, and its sizing read `profile`, which vLLM skips.
    No figure is given to a rank from the arguments: the log does not show the boot got that far."""
    report = _report("kv_fixed_in_arguments.log")
    assert report.engine.kv_cache_sizing is KvSizing.FIXED
    assert ("kv_cache_memory_bytes 52613349376 in the arguments fixes each rank's KV cache at 49.00 GiB: vLLM skips "
            "its memory profile, and gpu_memory_utilization does not size the cache") in report.warnings
    assert report.capacity.kv_available_bytes is None


@pytest.mark.parametrize(("name", "kind", "message"), [
    ("page_title_names_the_error.log", FailureKind.DOES_NOT_FIT,
     "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"),
    ("page_paragraph_names_the_error.log", FailureKind.OOM,
     "torch.OutOfMemoryError: Error in model execution... CUDA out of memory."),
])
def test_the_error_as_printed_is_the_message_not_a_sentence_naming_it(name: str, kind: FailureKind,
                                                                       message: str) -> None:
    """errornotes.dev (a title `Fixing the vLLM Error: 'No available memory for the cache blocks'` two lines above
    the ValueError) and openillumi.com (a Japanese paragraph quoting 「CUDA out of memory」 above `[rank0]:
    torch.OutOfMemoryError: …`). Before, the title and the paragraph were the failure's message."""
    report = _report(name)
    assert report.failure is not None and report.failure.kind is kind
    assert report.failure.message.startswith(message)


@pytest.mark.parametrize("name", ["nvtop_rows_at_terminal_width.log", "bullets_of_one_width.log"])
def test_rows_of_one_width_are_not_a_fold(name: str) -> None:
    """triton-inference-server#7562 (nvtop's rows cut at 168 columns, the last one too) and a club-3090 report
    (`  - tag … digest …` items of 152 columns, each a new item). Before, "stop at column N and go on in the next
    line, as a paste through `fold`": rows read joined, a false warning."""
    report = _report(name)
    assert not any("go on in the next line" in w for w in report.warnings)


def test_a_diff_names_language_model_only_when_one_side_states_it() -> None:
    """club-3090 PRs 92 and 96 (one model, the second compose `-noviz`): `'language_model_only': True` only in the
    second's `non-default args`, the setting the pair exists for (no vision tower, no encoder profile). Before,
    the diff named only max_model_len 185000 → 189000."""
    diff = diff_reports(_report("compose_with_vision.log"), _report("compose_language_only.log"))
    assert KnobDifference("language_model_only", None, True) in (diff.one_sided_knobs or ())
    both = diff_reports(_report("compose_language_only.log"), _report("compose_language_only.log"))
    assert not both.knob_differences and not both.one_sided_knobs


def test_the_concurrency_line_after_the_available_memory_gives_the_length_and_the_fit() -> None:
    """discuss.vllm.ai 2608 (Qwen3.5-9B, 0.18.0, in Chinese prose): `--max-num-batched-tokens=64K`, then
    `Available KV cache memory: 45.94 GiB` and `Maximum concurrency for 262,144 tokens per request: 5.70x`, the
    KV size line between them not pasted. vLLM prints the concurrency only past its length check, and reads
    64K as 65,536 for that flag too. Before, no length, no fit (unknown), and the step's tokens dropped."""
    report = _report("concurrency_without_size_line.log")
    assert (report.config.max_model_len, report.config.max_num_batched_tokens) == (262_144, 65_536)
    assert report.capacity.max_model_len_fits is True and report.verdict is Verdict.OK


def test_a_running_servers_lines_alone_are_refused_for_what_they_are() -> None:
    """discuss.vllm.ai 1863: seven `[loggers.py:123] Engine 000: Avg prompt throughput: …` lines and prose. The
    refusal said no `[file.py:N]` line was found, while it had seven."""
    with pytest.raises(BadInputError) as refused:
        _report("serving_stats_only.log")
    message = str(refused.value)
    assert message.endswith("line(s) open with a `[file.py:N]` record head, as vLLM's do, and none is from a boot's "
                            "startup (no config, memory, KV or failure line: a running server's lines only?): kvaudit "
                            "reads startup logs")
    assert "\n" not in message


def test_the_platform_a_log_names_is_reported_and_shown() -> None:
    """ROCm/ROCm#5656 (2 nodes over Ray, gfx1201): `Automatically detected platform rocm.` Before, no report said
    which platform its figures were of (on CPU they are node memory; on a TPU worker, its chips summed)."""
    report = _report("rocm_two_nodes_platform.log")
    assert report.environment.platform == "rocm" and report.environment.device_name is None
    from kvaudit.render.summary import headline
    assert headline(report).endswith("· platform rocm")


def test_stats_lines_that_open_the_file_are_refused_as_a_logs_not_as_json() -> None:
    """The same stats lines with nothing before them start with `[`: the JSON error had won over the log's."""
    text = "".join(line[line.index("[loggers.py"):] + "\n"
                   for line in (_DATA / "serving_stats_only.log").read_text(encoding="utf-8").splitlines()
                   if "[loggers.py" in line)
    assert text.startswith("[loggers.py:123]")
    with pytest.raises(BadInputError, match=r"line\(s\) open with a `\[file.py:N\]` record head"):
        report_from_text(text, "stats.log")


def test_one_device_stated_at_two_precisions_is_no_difference() -> None:
    """A log states its device in GiB to 0.01, a run to the byte: the same card is no environment difference."""
    import dataclasses
    a = load_report(_DATA / "notebook_l4.ipynb")
    exact = dataclasses.replace(a.ranks[0], device_total_bytes=a.ranks[0].device_total_bytes + (1 << 22))
    b = dataclasses.replace(a, ranks=(exact,))
    assert not any(e.key == "device_total_bytes" for e in diff_reports(a, b).environment_differences)


def test_the_tpu_errors_newer_wording_gives_its_figures_too() -> None:
    renamed = (_DATA / "tpu_hbm_exceeds.log").read_text(encoding="utf-8").replace("limit_gb", "limit_cap_gb")
    old, new = _report("tpu_hbm_exceeds.log"), report_from_log_text(renamed, "x")
    assert [r.requested_bytes for r in new.ranks] == [r.requested_bytes for r in old.ranks] == [round(606.37 * GiB)]


def test_a_torch_rank_past_the_engines_world_is_not_vllms() -> None:
    text = (_DATA / "torch_rank_prefix.log").read_text(encoding="utf-8").replace("[rank1]:", "[rank9]:")
    assert [r.rank for r in report_from_log_text(text, "x").ranks] == [0]  # TP2: rank 9 is another program's


def test_dockers_json_file_log_is_read_by_show_as_by_ingest() -> None:
    """The review of round twenty: Docker's json-file log (`{"log": "INFO … Available KV cache memory: 16.83 GiB\\n",
    "stream": "stderr", …}` a line) was `not valid JSON (Extra data …)` for show and diff, while ingest read it. A
    damaged report that opens with a report's key still gets the JSON error."""
    report = load_report(_DATA / "docker_json_file.log")
    assert report.capacity.kv_tokens == 1_629_520
    with pytest.raises(BadInputError, match=r"not valid JSON \(Extra data"):
        report_from_text('{"schema": "kvaudit.report/1"}\n{"x": 1}\n', "two.json")
