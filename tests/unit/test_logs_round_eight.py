"""Real pastes, round eight (tests/fixtures/logs/public/119–127, each thread in its header; what a
careful reader takes from each is in test_logs_public.EXPECTED). Here, the general rules they
needed, on their own: an ERROR record that ends the log is a crash whose cause is not shown; the
message `logger.exception` logs right before a traceback is that traceback's cause; V0's block
count names the platform's device (`# rocm blocks: N`); V0's graph capture comes after KV sizing;
0.6.5's profiling results and 0.10's DEBUG budget line; pasted commands that disagree; the
`--enforce-eager` flag; a log that ends before startup finished, whatever gave its tokens.
"""

from __future__ import annotations

import pytest

from kvaudit.engines.failures import CAUSES
from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.boot_record import UNFINISHED, UNFINISHED_PAST_CAPTURE
from kvaudit.engines.logs.facts import KV_BLOCK_DEVICES
from kvaudit.engines.logs.parse import CLOSING_ERROR, LOGGED_WITH
from kvaudit.engines.logs.scan import scan, scan_exhaustive
from kvaudit.printable import plain_text
from kvaudit.render.summary import binding_note, failure_line
from kvaudit.schema import FailureKind, Owner, Phase
from kvaudit.units import gib_to_bytes

_BLOCKS = "INFO 06-12 08:12:23 distributed_gpu_executor.py:45] # GPU blocks: 507, # CPU blocks: 1024"
_CUT = "ERROR 06-12 08:12:23 worker_base.py:145] Error execut"
_LOAD = "INFO 08-16 18:12:09 [model_runner.py:1203] Model loading took 4.1367 GiB and 15.434767 seconds"
_CAPTURE = ("INFO 08-16 18:12:26 [model_runner.py:1513] Capturing cudagraphs for decoding. This may lead to "
            "unexpected consequences if the model is not static.")
_E = "ERROR 08-16 18:12:26 [engine.py:458] "
_TRACEBACK = [_E + "Traceback (most recent call last):",
              _E + '  File "/x/vllm/engine/multiprocessing/engine.py", line 446, in run_mp_engine',
              _E + "    engine = MQLLMEngine.from_vllm_config("]


def report_of(lines: list[str]):
    return report_from_log_text("\n".join(lines) + "\n", "paste.log")


def test_an_error_record_that_ends_the_log_is_a_crash_whose_cause_is_not_shown() -> None:
    report = report_of([_BLOCKS, _CUT, "", "  "])  # blank lines after it change nothing
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.CRASH, Phase.KV)
    assert report.failure.message == "Error execut" + CLOSING_ERROR
    assert report.verdict.value == "unknown"


@pytest.mark.parametrize("lines", [
    [_BLOCKS, _CUT, "INFO 06-12 08:12:30 llm_engine.py:100] init engine (profile, create kv cache, warmup model) "
                    "took 9.0 seconds"],  # the boot went on past the record
    [_BLOCKS, "WARNING 06-12 08:12:23 worker_base.py:145] Error execut"],  # not an ERROR
    [_BLOCKS, "ERROR 06-12 08:12:23 worker_base.py:145] "],  # an ERROR record without a word
])
def test_an_error_record_the_log_goes_on_past_or_a_lower_level_is_no_failure(lines: list[str]) -> None:
    assert report_of(lines).failure is None


def test_a_stated_cause_wins_over_the_error_record_that_ends_the_log() -> None:
    report = report_of([_BLOCKS, "ValueError: No available memory for the cache blocks. Try increasing "
                        "`gpu_memory_utilization` when initializing the engine.", _CUT])
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT


def test_the_message_logged_before_a_traceback_is_its_cause_and_v0s_capture_its_phase() -> None:
    report = report_of([_LOAD, _CAPTURE, _E + "size_k must divisible by BLOCK_SIZE_K", *_TRACEBACK])
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.CRASH, Phase.CAPTURE)
    assert report.failure.message == "size_k must divisible by BLOCK_SIZE_K" + LOGGED_WITH


@pytest.mark.parametrize("before", [
    "ERROR 08-16 18:12:26 [worker.py:99] size_k must divisible by BLOCK_SIZE_K",  # another source line
    "(VllmWorkerProcess pid=7) ERROR 08-16 18:12:26 [engine.py:458] size_k must divisible",  # another process
    "INFO 08-16 18:12:26 [engine.py:458] size_k must divisible by BLOCK_SIZE_K",  # not an ERROR
])
def test_a_line_before_the_traceback_from_elsewhere_is_not_its_message(before: str) -> None:
    report = report_of([_LOAD, before, *_TRACEBACK])
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.message.startswith("Traceback (most recent call last)")


def test_a_cause_the_line_before_states_itself_is_not_rewritten() -> None:
    failed = "(EngineCore_DP0 pid=9) ERROR 11-25 08:05:06 [core.py:708] EngineCore failed to start."
    tb = "(EngineCore_DP0 pid=9) ERROR 11-25 08:05:06 [core.py:708] Traceback (most recent call last):"
    report = report_of([failed, tb])
    assert report.failure is not None and report.failure.message == "EngineCore failed to start."


@pytest.mark.parametrize("device", KV_BLOCK_DEVICES)
def test_v0s_block_count_under_every_device_name_is_the_kv_block_count(device: str) -> None:
    report = report_of([f"INFO 06-05 13:03:17 [executor_base.py:112] # {device} blocks: 37011, # CPU blocks: 7281",
                        "INFO 06-05 13:03:17 [executor_base.py:117] Maximum concurrency for 2048 tokens per "
                        "request: 289.15x"])
    assert report.capacity.kv_tokens == 37011 * 16


def test_the_swap_spaces_cpu_block_count_is_not_the_kv_block_count() -> None:
    assert report_of(["INFO 06-05 13:03:17 [executor_base.py:112] # CPU blocks: 7281"]).capacity.kv_tokens is None


@pytest.mark.parametrize("device", ["rocm", "cuda", "ROCM"])
def test_a_failure_after_v0s_block_count_is_past_kv_sizing(device: str) -> None:
    report = report_of([_LOAD, f"INFO 08-16 18:12:25 [executor_base.py:113] # {device} blocks: 9000, # CPU blocks: "
                        "2000", "Traceback (most recent call last):"])
    assert report.failure is not None and report.failure.phase is Phase.KV


# --- round eight, second part: 0.6.5's and 0.10's budget lines, the pasted commands, the unfinished log

_RESULTS_065 = ("INFO 12-13 02:10:28 worker.py:237] Memory profiling results: duration=72.36 seconds, "
                "total_gpu_memory=79.15GiB, initial_memory_usage=19.68GiB, peak_torch_memory=34.50GiB, "
                "memory_usage_post_profile=35.32GiB, non_torch_memory=1.96GiB, kv_cache_size=34.78GiB, "
                "gpu_memory_utilization=0.90.")


def test_the_comma_separated_profiling_results_of_0_6_5_are_read_as_the_0_6_4_form_is() -> None:
    comma = report_of([_RESULTS_065])
    spaced = report_of([_RESULTS_065.replace(", ", " ").replace("duration=72.36 seconds ", "")])
    assert comma.config.gpu_memory_utilization == 0.9
    assert dict(comma.ranks[0].owners)[Owner.KV_CACHE] == gib_to_bytes("34.78")
    assert dict(comma.ranks[0].owners)[Owner.NON_TORCH] == gib_to_bytes("1.96")
    assert comma.ranks == spaced.ranks


def test_activation_is_the_0_6_4_torch_peak_less_the_weights_where_both_are_stated() -> None:
    load = "INFO 12-13 02:09:14 model_runner.py:1094] Loading model weights took 18.4902 GB"
    owners = dict(report_of([load, _RESULTS_065]).ranks[0].owners)
    assert owners[Owner.ACTIVATION_PEAK] == gib_to_bytes("34.50") - gib_to_bytes("18.4902")
    assert dict(report_of([_RESULTS_065]).ranks[0].owners)[Owner.ACTIVATION_PEAK] is None  # no weights stated


def test_the_0_10_debug_budget_line_gives_the_requested_bytes() -> None:
    line = ("(VllmWorker rank=2 pid=1608647) DEBUG 07-22 20:09:04 [gpu_worker.py:239] Initial free memory: 139.12 "
            "GiB, free memory: 81.52 GiB, requested GPU memory: 69.86 GiB")
    rank = report_of([line]).ranks[0]
    assert rank.rank == 2 and rank.requested_bytes == gib_to_bytes("69.86")
    assert rank.free_at_start_bytes == gib_to_bytes("139.12")


_SERVE = "python3 -m vllm.entrypoints.openai.api_server --model /m --max-model-len=16384 --gpu-memory-utilization "


def test_pasted_commands_that_disagree_on_a_knob_give_it_to_neither_and_say_so() -> None:
    report = report_of([_SERVE + "0.75", _SERVE + "0.20"])
    assert report.config.gpu_memory_utilization is None and report.config.max_model_len == 16384
    assert any("give gpu_memory_utilization different values (0.75, 0.2)" in w for w in report.warnings)


def test_pasted_commands_that_agree_give_the_knob_without_a_warning() -> None:
    report = report_of([_SERVE + "0.75", _SERVE + "0.75"])
    assert report.config.gpu_memory_utilization == 0.75
    assert not any("different values" in w for w in report.warnings)


@pytest.mark.parametrize(("lines", "eager"), [
    (["vllm serve m --enforce-eager --max-model-len 4096"], True),
    (["vllm serve m --no-enforce-eager --max-model-len 4096"], False),
    (['llm = LLM(model="m", gpu_memory_utilization=0.10, max_model_len=4096, enforce_eager=True)'], True),
    (['llm = LLM(model="m", enforce_eager=False)'], False),
    (["llm = LLM(", '    model="m",', "    enforce_eager=True,", ")"], True),  # a call spread over lines
    (["vllm serve m --max-model-len 4096"], None),  # not stated
    (["Try --enforce-eager if the capture runs out of memory"], None),  # a person's sentence, not a command
    (["vllm works if I drop --enforce-eager"], None),  # a sentence that names vllm first (a review)
    (["LLM(model='m')  # enforce_eager=True would help"], None),  # a comment after the call
    (["I don't see 'Cudagraph is disabled under eager mode' in my log"], None),  # vLLM's words, quoted
])
def test_enforce_eager_is_read_from_a_pasted_command_or_an_offline_call(lines: list[str], eager: bool | None) -> None:
    assert report_of([*lines, _LOAD]).config.enforce_eager is eager


_KV_BLOCKS_V1 = ["INFO 01-30 03:18:12 gpu_model_runner.py:848] Loading model weights took 67.7229 GB",
                 "INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381",
                 "INFO 01-30 03:19:14 kv_cache_utils.py:398] Maximum concurrency for 2048 tokens per request: 10.79x"]


def test_a_log_that_ends_after_its_block_count_is_unfinished_as_one_after_its_token_count() -> None:
    report = report_of(_KV_BLOCKS_V1)
    assert report.capacity.kv_tokens == 1381 * 16 and UNFINISHED in report.warnings
    done = report_of([*_KV_BLOCKS_V1, "INFO 01-30 03:19:40 core.py:91] init engine (profile, create kv cache, "
                                      "warmup model) took 80.1 seconds"])
    assert UNFINISHED not in done.warnings and UNFINISHED_PAST_CAPTURE not in done.warnings


def test_an_unfinished_log_that_shows_the_capture_after_kv_sizing_says_so() -> None:
    captured = [*_KV_BLOCKS_V1, "INFO 01-30 03:19:30 gpu_model_runner.py:1000] Graph capturing finished in 6 secs, "
                                "took 0.22 GiB"]
    report = report_of(captured)
    assert UNFINISHED_PAST_CAPTURE in report.warnings and UNFINISHED not in report.warnings
    # Model Runner V2's estimate prints the same line before KV sizing: that is no capture after it
    before = report_of([captured[0], captured[3], *captured[1:3]])
    assert UNFINISHED in before.warnings and UNFINISHED_PAST_CAPTURE not in before.warnings


def test_no_request_fits_says_so_where_the_log_states_no_kv_figure() -> None:
    report = report_of([_SERVE + "0.20", "ValueError: No available memory for the cache blocks. Try increasing "
                        "`gpu_memory_utilization` when initializing the engine."])
    assert report.verdict_reason.startswith("no request fits: no memory is left for KV")


def test_html_character_references_of_a_copied_web_page_are_read_as_their_characters() -> None:
    quoted = ("ERROR 08-12 10:00:00 [core.py:1] ValueError: The model&#39;s max seq len (8192) is larger than the "
              "maximum number of tokens that can be stored in KV cache (2400). Try increasing "
              "&quot;gpu_memory_utilization&quot; or decreasing `max_model_len` when initializing the engine.")
    report = report_of([quoted])
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT
    assert report.failure.message.startswith("ValueError: The model's max seq len (8192)")
    assert '"gpu_memory_utilization"' in report.failure.message


def test_plain_text_reads_only_character_references() -> None:
    assert plain_text("a &amp; b &lt;c&gt; &#x27;d&#39; &nbsp; &copy") == "a & b <c> 'd' &nbsp; &copy"
    assert plain_text("&#27;[0;36m(EngineCore_DP0 pid=7)&#x1b;[0;0m INFO") == "(EngineCore_DP0 pid=7) INFO"
    assert plain_text("&#0; &#xD800; &#1114112; &#65;") == "&#0; &#xD800; &#1114112; A"  # no such characters
    assert plain_text("boom&#10;OK&#13;&#x2028;&#133;") == "boom&#10;OK&#13;&#x2028;&#133;"  # no line break inside a line


def test_a_failure_after_torch_compile_with_no_load_line_in_the_paste_is_in_the_profile_phase() -> None:
    report = report_of(["INFO 05-19 06:22:40 [monitor.py:33] torch.compile takes 142.00 s in total",
                        "ERROR 05-19 06:22:41 [core.py:390] EngineCore hit an exception: Traceback (most recent "
                        "call last):"])
    assert report.failure is not None and report.failure.phase is Phase.PROFILE


# --- round eight, third part (vllm#40821): the catalogue's every anchor is looked for in an excerpt

_KV_TP2 = ["(Worker_TP0 pid=198) INFO 07-23 06:17:44 [gpu_worker.py:538] Available KV cache memory: 5.24 GiB",
           "(EngineCore pid=184) INFO 07-23 06:17:44 [kv_cache_utils.py:2146] GPU KV cache size: 295,827 tokens",
           "(EngineCore pid=184) INFO 07-23 06:17:44 [kv_cache_utils.py:2147] Maximum concurrency for 262,144 tokens "
           "per request: 1.13x"]
_LATER = "(Worker_TP0 pid=198) INFO 07-23 06:17:50 [kernel_warmup.py:44] Skipping FlashInfer autotune."


@pytest.mark.parametrize("anchor", [c.anchor for c in CAUSES])
def test_every_catalogue_anchor_on_a_logged_line_of_an_excerpt_is_a_candidate(anchor: str) -> None:
    line = f"(Worker_TP1 pid=199) ERROR 07-23 06:17:50 [multiproc_executor.py:962] {anchor}"
    text = "\n".join([*_KV_TP2, line, _LATER]) + "\n"
    start = text.index(line)
    assert any(s <= start < e for s, e in scan(text).segments)
    assert scan(text) == scan_exhaustive(text)


def test_a_worker_exception_line_after_kv_lines_is_a_crash_not_a_boot_that_fits() -> None:
    """vllm#40821's `WorkerProc hit an exception.` after the KV lines of another paste: it read `OK: fits`."""
    dead = "(Worker_TP1 pid=199) ERROR 07-23 06:17:50 [multiproc_executor.py:962] WorkerProc hit an exception."
    report = report_of([*_KV_TP2, dead, _LATER])
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.message == "WorkerProc hit an exception." and report.verdict.value == "unknown"


def test_a_persons_sentence_that_names_a_failure_is_not_the_boots() -> None:
    said = "I also tried 0.9 and got Engine core initialization failed, and before that CUDA out of memory"
    text = "\n".join([*_KV_TP2, said, _LATER]) + "\n"
    assert not any(s <= text.index(said) < e for s, e in scan(text).segments)
    report = report_of([*_KV_TP2, said, _LATER])
    assert report.failure is None and report.verdict.value == "ok"


# --- round eight, fourth part (vllm PR 29431): auto-fit names its limiting worker's KV memory

_PP0 = "(Worker_PP0 pid=3977958) INFO 11-25 20:02:29 [gpu_worker.py:348] Available KV cache memory: 36.20 GiB"
_E_AF = "(EngineCore_DP0 pid=3977692) INFO 11-25 20:02:30 [kv_cache_utils.py:1373] "
_REDUCED = _E_AF + ("Auto-fit max_model_len: reduced from 10485760 to 324640 to fit in available GPU memory (29.72 GiB "
                    "available for KV cache)")


def test_auto_fits_figure_goes_to_the_one_rank_without_its_own_and_the_length_fits() -> None:
    report = report_of(["vllm serve m --max-model-len -1 -pp 2", _PP0, _REDUCED])
    by_rank = {r.rank: r for r in report.ranks}
    assert by_rank[1].kv_available_bytes == gib_to_bytes("29.72")
    assert report.capacity.binding_rank == 1 and report.capacity.kv_available_bytes == gib_to_bytes("29.72")
    assert report.config.max_model_len == 324640 and report.verdict.value == "ok"
    assert report.verdict_reason.endswith("max_model_len 324640 passed vLLM's own check")


def test_auto_fits_figure_where_a_rank_states_it_adds_nothing() -> None:
    same = _REDUCED.replace("29.72 GiB", "36.20 GiB")
    report = report_of(["vllm serve m --max-model-len -1 -pp 2", _PP0, same])
    assert [r.rank for r in report.ranks] == [0] and not any("auto-fit names" in w for w in report.warnings)


def test_auto_fits_figure_below_every_rank_of_an_unknown_layout_is_a_warning() -> None:
    tp = [_PP0.replace("Worker_PP0 pid=3977958", f"Worker_TP{i} pid=9{i}") for i in (0, 1)]
    report = report_of([*tp, _REDUCED])
    assert any("less than any rank's figure in the log" in w for w in report.warnings)


@pytest.mark.parametrize(("line", "length", "kv"), [
    ("Auto-fit max_model_len: full model context length 131072 fits in available KV cache memory (36.20 GiB)",
     131072, "36.20"),
    ("--max-model-len auto reduced max_model_len from 262144 to 53248 (11.50 GiB GPU available for the KV cache).",
     53248, "11.50"),
    ("Auto-fit max_model_len: using max_model_len=65536, which fits in the KV cache memory left after CUDA graph "
     "capture and warmup (20.25 GiB GPU).", 65536, "20.25"),
])
def test_every_auto_fit_wording_gives_the_served_length_and_the_kv_it_fits(line: str, length: int, kv: str) -> None:
    report = report_of([_E_AF + line])
    assert report.config.max_model_len == length and report.verdict.value == "ok"
    assert report.capacity.kv_available_bytes == gib_to_bytes(kv)


def test_a_figure_set_in_markdown_is_read_as_the_figure() -> None:
    """vllm PR 2031: `- This PR: # GPU blocks: **20865**` was refused as no vLLM log."""
    assert report_of(["- This PR: # GPU blocks: **20865**"]).capacity.kv_tokens == 20865 * 16
    assert plain_text("GPU KV cache size: `249,584` tokens") == "GPU KV cache size: 249,584 tokens"
    assert plain_text("Try increasing `gpu_memory_utilization` **now**") == (
        "Try increasing `gpu_memory_utilization` **now**")  # words keep their marks


_MAMBA = ("ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (939). Each decode sequence requires "
          "one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 939 or "
          "increase gpu_memory_utilization.")


@pytest.mark.parametrize("line", [
    _MAMBA,
    "(EngineCore_DP0 pid=10078) RuntimeError: Worker failed with error '" + _MAMBA[12:] + "', please check the stack "
    "trace above for the root cause",  # vllm PR 38632, re-raised in the engine core
])
def test_a_batch_the_mamba_cache_cannot_hold_is_a_boot_that_does_not_fit(line: str) -> None:
    """vllm#49064, recipes PR 831: read as a crash in no phase, exit 3."""
    report = report_of([line])
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.DOES_NOT_FIT, Phase.KV)
    assert "max_num_seqs (1024) exceeds available Mamba cache blocks (939)" in report.failure.message
    assert report.verdict.value == "fail" and "lower max_num_seqs to at most 939" in report.verdict_reason


def test_the_binding_note_says_least_of_the_ranks_that_state_kv_and_speaks_of_one_engine() -> None:
    """vllm#50722: rank 2's KV line cut, rank 1 was called the least; data-parallel engines each size
    their own cache (vllm-ascend#9087), so "every rank allocates its block count" was false there."""
    ranks = [f"(Worker_TP{i} pid=9{i}) INFO 07-23 06:17:44 [gpu_worker.py:538] Available KV cache memory: 5.2{i} GiB"
             for i in (0, 1)] + ["(Worker_TP2 pid=92) INFO 07-23 06:17:44 [gpu_worker.py:538] Model loading took "
                                 "16.92 GiB memory and 9.1 seconds"]
    assert binding_note(report_of(ranks)) == ("* the binding rank (0): it has the least KV of the ranks that state it "
                                              "(1 states none), and every rank of its engine allocates its block "
                                              "count")
    assert binding_note(report_of(ranks[:2])) == ("* the binding rank (0): it has the least KV, and every rank of its "
                                                  "engine allocates its block count")


def test_a_failure_under_the_capture_progress_bar_of_0_10_and_older_is_in_the_capture() -> None:
    """vllm PR 21747: `Capturing CUDA graph shapes: 0%| 0/67`, then the engine core's failure (no phase)."""
    report = report_of(["Capturing CUDA graph shapes:   0%|          | 0/67 [00:09<?, ?it/s]",
                        "ERROR 07-29 23:23:41 [core.py:648] EngineCore failed to start."])
    assert report.failure is not None and report.failure.phase is Phase.CAPTURE


def test_vllms_note_that_graphs_are_off_under_eager_mode_says_enforce_eager() -> None:
    """vllm#27378: `Cudagraph is disabled under eager mode`, printed only then; enforce_eager read none."""
    line = "(EngineCore_DP0 pid=5014) INFO 10-23 11:30:24 [vllm.py:397] Cudagraph is disabled under eager mode"
    assert report_of([line, _LOAD]).config.enforce_eager is True
    assert report_of([_LOAD]).config.enforce_eager is None


def test_vllms_padding_warning_is_passed_on() -> None:
    """vllm#46462: `Add 6 padding layers, may waste at most 60.00% KV cache memory` was not shown."""
    line = ("(EngineCore pid=29723) WARNING 06-23 10:27:23 [kv_cache_utils.py:1152] Add 6 padding layers, may waste "
            "at most 60.00% KV cache memory")
    assert ("vLLM padded a KV cache group with 6 layers: up to 60.00% of the KV cache memory may hold no token (a "
            "hybrid model's layer groups)") in report_of([_LOAD, line]).warnings


@pytest.mark.parametrize(("lines", "tp"), [
    # llm-scaler#578: the command, then the reporter's sentence joined to it; it read the sentence's flags too
    (["vllm serve --max-model-len 65536 --enforce-eager --trust-remote-code -tp=4",
      "crashes while initializing KV cache, but using `-tp=2` or even `-tp=1` loads fine."], 4),
    # shell words after a flag are the command's still (vllm#10151: `$(($1 + 1000))`, then more flags)
    (["CUDA_VISIBLE_DEVICES=$2 python3 ./entrypoints/vllm/api_server.py \\", "--port $1 \\",
      "--request-output-queue-port $(($1 + 1000)) \\", "--tensor-parallel-size 2"], 2),
])
def test_a_pasted_command_ends_where_a_persons_sentence_starts(lines: list[str], tp: int) -> None:
    report = report_of([*lines, _LOAD])
    assert report.config.tensor_parallel_size == tp
    assert not any("different values" in w for w in report.warnings)


@pytest.mark.parametrize(("line", "kind"), [
    ("(EngineCore pid=74) ERROR 05-07 00:37:03 [core.py:1136] RuntimeError: CUDA driver error: out of memory",
     FailureKind.OOM),  # club-3090#60: read as a crash
    ("ERROR 07-09 13:21:18 [core.py:396] The actor is dead because its worker process has died. Worker exit type: "
     "SYSTEM_ERROR … (1) The process is killed by SIGKILL by OOM killer due to high memory usage.",
     FailureKind.WORKER_DIED),  # gpustack#2415: read as a crash whose exception line is not in the log
])
def test_the_cuda_drivers_out_of_memory_and_rays_dead_actor_are_named(line: str, kind: FailureKind) -> None:
    report = report_of([_LOAD, line, "Traceback (most recent call last):"])
    assert report.failure is not None and report.failure.kind is kind


_W_TB = "(Worker_TP1 pid=15193) ERROR 05-08 19:06:38 [multiproc_executor.py:962] Traceback (most recent call last):"


@pytest.mark.parametrize("line", [
    "(Worker_TP1 pid=15193) ERROR 05-08 19:06:38 [multiproc_executor.py:962] Search for "
    "`cudaErrorStreamCaptureUnsupported' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
    "for more information.",  # club-3090#106: the error's second line alone
    "(Worker_TP1 pid=15193) ERROR 05-08 19:06:38 [multiproc_executor.py:962] torch.AcceleratorError: CUDA error: "
    "operation not permitted when stream is capturing",
])
def test_a_cuda_error_only_a_stream_capture_raises_places_the_failure_in_the_capture(line: str) -> None:
    report = report_of([_W_TB, line])
    assert report.failure is not None and report.failure.phase is Phase.CAPTURE


def test_a_traceback_that_names_no_capture_stays_where_the_log_places_it() -> None:
    report = report_of([_W_TB, "(Worker_TP1 pid=15193) ERROR 05-08 19:06:38 [multiproc_executor.py:962] "
                                "RuntimeError: CUDA error: an illegal memory access was encountered"])
    assert report.failure is not None and report.failure.phase is None


def test_a_log_failure_in_no_phase_says_nothing_of_a_journal() -> None:
    """Pastes that start after the figures: 'before any rank journaled a phase' was false for a log."""
    report = report_of([*(f"(Worker_TP{i} pid=9{i}) INFO 07-29 23:23:00 [gpu_model_runner.py:1] Model loading took "
                          f"9.10 GiB memory and 5.0 seconds" for i in (0, 1)),
                        "(EngineCore_DP0 pid=7) ERROR 07-29 23:23:41 [core.py:648] EngineCore failed to start."])
    assert report.failure is not None and (report.failure.rank, report.failure.phase) == (None, Phase.PROFILE)
    cut = report_of(["(EngineCore_DP0 pid=7) ERROR 07-29 23:23:41 [core.py:648] EngineCore failed to start.",
                     "(Worker_TP1 pid=91) INFO 07-29 23:23:00 [x.py:1] hello"])
    assert cut.failure is not None and (cut.failure.rank, cut.failure.phase) == (None, None)
    assert failure_line(cut) == "crash: EngineCore failed to start."


def test_auto_fits_figure_is_given_to_no_rank_where_the_log_cannot_say_which() -> None:
    """A review: PP 2 with no worker line gave the figure to rank 0; two data-parallel engines' figures
    gave the last to rank 0; a one-GPU 0.34 boot whose extended cache is the figure was warned about."""
    pp = report_of(["vllm serve m --max-model-len -1 -pp 2", _REDUCED])
    assert pp.ranks == () and pp.verdict_reason == "fits: max_model_len 324640 passed vLLM's own check"
    assert any("its limiting worker's; the log names no rank for it" in w for w in pp.warnings)
    dp = report_of([_REDUCED.replace("29.72", "20.00").replace("EngineCore_DP0 pid=3977692", "EngineCore_DP1 pid=5"),
                    _REDUCED])
    assert dp.ranks == () and not any("auto-fit" in w and "rank" in w for w in dp.warnings)
    one = report_of(["vllm serve m --max-model-len -1", _PP0.replace("Worker_PP0 pid=3977958", "EngineCore pid=1"),
                     _REDUCED])
    assert [(r.rank, r.kv_available_bytes) for r in one.ranks] == [(0, gib_to_bytes("36.20"))]
    assert not any("auto-fit sized" in w for w in one.warnings)


def test_a_persons_sentence_that_names_a_process_and_a_failure_is_not_the_boots() -> None:
    """A review: `the (EngineCore pid=548) process said CUDA out of memory` read as the boot's OOM."""
    said = "On my other machine the (EngineCore pid=548) process said CUDA out of memory, but this one is fine."
    report = report_of([*_KV_TP2, said, _LATER])
    assert report.failure is None and report.verdict.value == "ok"


@pytest.mark.parametrize("after", [["```"], ["```", "</details>", ""], ["", "~~~", "  "]])
def test_an_error_record_that_ends_a_fenced_paste_is_read_past_the_fence(after: list[str]) -> None:
    report = report_of([_BLOCKS, _CUT, *after])
    assert report.failure is not None and report.failure.message == "Error execut" + CLOSING_ERROR


def test_an_error_record_after_startup_finished_that_ends_the_log_is_no_note() -> None:
    """A review: a served boot whose paste ends with a request's ERROR got an 'after startup finished' note."""
    served = [_BLOCKS, "INFO 06-12 08:12:30 llm_engine.py:100] init engine (profile, create kv cache, warmup model) "
                       "took 9.0 seconds", "ERROR 06-12 09:00:00 serving_chat.py:1] Error in preprocessing prompt"]
    report = report_of(served)
    assert report.failure is None and not any("ERROR record ends the log" in w for w in report.warnings)


def test_a_message_logged_blank_lines_before_a_traceback_is_not_its_cause() -> None:
    report = report_of([_LOAD, _CAPTURE, _E + "size_k must divisible by BLOCK_SIZE_K", "", *_TRACEBACK])
    assert report.failure is not None and report.failure.message.startswith("Traceback (most recent call last)")
