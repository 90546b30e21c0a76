"""Real pastes, round twenty-six (findings F3, F4): a Ray pipeline-parallel boot over two hosts whose one worker states
its rank only by its torch.compile cache path (vllm#36861), and a boot's tail followed by a benchmark's tqdm bars,
padded to the terminal's width (vllm#16258). Each test names its source and what kvaudit read before; the data are
the files as the round saved them (tests/unit/data/round_twenty_six), a case where the rule must not fire beside each
rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.facts import Fact, FactKind, facts_from_message
from kvaudit.schema import Report

_DATA = Path(__file__).parent / "data" / "round_twenty_six"
RAY_PP = "01_vllm36861_v1_ray_pp_two_hosts_kv_2_09_graphs_0_60.log"
"""vllm#36861, turn 0: V1, pipeline parallel 2 over two hosts by Ray. `(RayWorkerWrapper pid=33834,
ip=10.214.117.111)` prints `saved AOT compiled function to …/torch_aot_compile/84065e…/rank_1_0/model`, then
`Available KV cache memory: 2.09 GiB` and `Graph capturing finished in 5 secs, took 0.60 GiB`; `pid=15732,
ip=10.214.79.32` a folded compile line; the paste is cut in the next tag."""
BARS = "04_vllm16258_v1_083_vanilla_vs_ngram_boot_tail_kv_399k_tokens_benchmark_output.log"
"""vllm#16258, a comment by dtransposed: a 0.8.3 boot's last lines (399,104 tokens, init engine took 88.15 s), then a
benchmark's output: three `Processed prompts: 100%|████| …]` bars of 115 columns, the last before the cut word
`Processed`."""
AUTOTUNER = Path(__file__).parent / "data" / "round_twenty" / "flashinfer_autotuner_oom.log"
"""Round twenty's club-3090#613: FlashInfer's autotuner bars, two of them with a 211-column WARNING record printed
after the bar, each followed by the next bar."""

_AOT_HEAD = "(EngineCore_DP0 pid=46071) (RayWorkerWrapper pid=33834, ip=10.214.117.111) INFO 03-11 12:23:24"
_AOT = f"{_AOT_HEAD} [decorators.py:588] saved AOT compiled function to "
_KV = round(2.09 * 2**30)
_GRAPH = round(0.60 * 2**30)
_ORDER_NOTE = ("Ray workers `(RayWorkerWrapper pid=…, ip=…)` name no rank: their figures are given to {} in the "
               "order the workers first print one, which need not be vLLM's rank order")


def _text(name: str) -> str:
    return (_DATA / name).read_text(encoding="utf-8")


def _report(name: str, text: str | None = None) -> Report:
    return report_from_log_text(_text(name) if text is None else text, name)


def _placed(report: Report) -> list[tuple[int, int | None, int | None]]:
    return [(r.rank, r.owners.get("kv_cache"), r.owners.get("graph_pool")) for r in report.ranks]


def _ray_notes(report: Report) -> list[str]:
    return [w for w in report.warnings if w.startswith("Ray workers")]


# --------------------------------------------------------------------------------------------
# F3: a Ray worker's rank, stated by its own torch.compile cache path


def test_a_ray_workers_compile_cache_path_places_its_figures_on_its_rank() -> None:
    """The paste, whole. Before: `rank 0 *` held the 2.09 GiB KV and the 0.60 GiB graph pool ("KV available: 2.09 GiB
    on rank 0"), and the note gave ranks 0, 1 by order. pid 33834's path says `rank_1_0`: PP rank 1 of DP engine 0.
    pid 15732 states none and takes the rank left, 0, which the note now names alone."""
    report = _report(RAY_PP)
    assert _placed(report) == [(0, None, None), (1, _KV, _GRAPH)]
    assert report.capacity.binding_rank == 1
    assert _ray_notes(report) == [_ORDER_NOTE.format("rank 0")]


@pytest.mark.parametrize("message, stated", [
    # the three sentences (backends.py, decorators.py), with 0.33's `[backbone] ` prefix
    ("[backbone] Using cache directory: /root/.cache/vllm/torch_compile_cache/84065e/rank_1_0/backbone for vLLM's "
     "torch.compile", (1, 0)),
    ("saved AOT compiled function to /root/.cache/vllm/torch_compile_cache/torch_aot_compile/84065e/rank_3_1/model",
     (3, 1)),
    ("Directly load AOT compilation from path /root/.cache/vllm/torch_compile_cache/torch_aot_compile/84065e/rank_2_0/"
     "model", (2, 0)),
    # 0.8's path ends in the rank's directory
    ("Using cache directory: /root/.cache/vllm/torch_compile_cache/1517964802/rank_0_0 for vLLM's torch.compile",
     (0, 0)),
    # a user's cache_dir with `rank_` in its own name: the last directory is the worker's
    ("Using cache directory: /data/rank_7_0/cache/rank_2_0/backbone for vLLM's torch.compile", (2, 0)),
])
def test_the_compile_cache_sentences_state_the_workers_rank(message: str, stated: tuple[int, int]) -> None:
    assert [f for f in facts_from_message(message) if f.kind is FactKind.COMPILE_RANK] == [
        Fact(FactKind.COMPILE_RANK, stated)]


@pytest.mark.parametrize("message", [
    # a cache_dir given in the engine's arguments (`--compilation-config '{"cache_dir": …}'`)
    "non-default args: {'model': '/models/Qwen3', 'pipeline_parallel_size': 2, 'compilation_config': "
    "{'cache_dir': '/root/.cache/vllm/torch_compile_cache/rank_1_0'}}",
    # a person's sentence naming the path
    "the second host saves its graph to /root/.cache/vllm/torch_compile_cache/torch_aot_compile/84065e/rank_1_0/model",
    # the sentence, with words after the path (no path of vLLM's ends so)
    "Directly load AOT compilation from path /root/.cache/rank_1_0/model because I copied it there",
])
def test_a_cache_path_outside_vllms_sentences_states_no_rank(message: str) -> None:
    """Must not fire: only vLLM's own three sentences state a worker's compile cache."""
    assert [f for f in facts_from_message(message) if f.kind is FactKind.COMPILE_RANK] == []


@pytest.mark.parametrize("head", [
    "(EngineCore_DP0 pid=46071) INFO 03-11 12:23:24",  # the engine core's (no Ray worker's) line
    "INFO 03-11 12:23:24",  # an untagged line: the uni executor's, or a paste that dropped the tags
])
def test_a_cache_path_no_ray_worker_printed_places_no_worker(head: str) -> None:
    """Must not fire: the same path line, printed by another process. Both workers keep the order rule's ranks, as
    before (pid 33834 printed a figure first)."""
    report = _report(RAY_PP, _text(RAY_PP).replace(_AOT_HEAD, head, 1))
    assert _placed(report) == [(0, _KV, _GRAPH), (1, None, None)]
    assert _ray_notes(report) == [_ORDER_NOTE.format("ranks 0, 1")]


def test_a_compilation_config_cache_dir_in_the_command_places_no_worker() -> None:
    """Must not fire: the worker's own path line left out, a command whose `--compilation-config` names a `rank_1_0`
    directory."""
    command = ("vllm serve /models/Qwen3-32B --pipeline-parallel-size 2 --distributed-executor-backend ray "
               "--compilation-config '{\"cache_dir\": \"/root/.cache/vllm/torch_compile_cache/rank_1_0\"}'\n")
    lines = [line for line in _text(RAY_PP).split("\n") if not line.startswith(_AOT)]
    report = _report(RAY_PP, command + "\n".join(lines))
    assert _placed(report) == [(0, _KV, _GRAPH), (1, None, None)]
    assert _ray_notes(report) == [_ORDER_NOTE.format("ranks 0, 1")]


def test_a_cache_path_of_data_parallel_engine_1_places_no_worker() -> None:
    """Must not fire: `rank_1_1` is rank 1 of DP engine 1, whose global rank the path does not state (the engines'
    world size is not in it)."""
    report = _report(RAY_PP, _text(RAY_PP).replace("/rank_1_0/model", "/rank_1_1/model", 1))
    assert _placed(report) == [(0, _KV, _GRAPH), (1, None, None)]


def test_two_workers_claiming_one_rank_keep_the_order_rule() -> None:
    """Must not fire: pid 15732 states `rank_1_0` too (a paste of two boots): no claim is trusted, as for two
    parallel_state lines."""
    other = ("(EngineCore_DP0 pid=46071) (RayWorkerWrapper pid=15732, ip=10.214.79.32) INFO 03-11 12:23:20 "
             "[backends.py:548] Using cache directory: /root/.cache/vllm/torch_compile_cache/84065e/rank_1_0/backbone "
             "for vLLM's torch.compile\n")
    report = _report(RAY_PP, other + _text(RAY_PP))
    assert _placed(report) == [(0, _KV, _GRAPH), (1, None, None)]
    assert _ray_notes(report) == [_ORDER_NOTE.format("ranks 0, 1")]


def test_a_worker_whose_path_and_parallel_state_line_differ_states_no_rank() -> None:
    """Must not fire: pid 33834 also says `rank 0 in world size 2 is assigned as …`: one process, two ranks, and
    the order rule places both workers."""
    state = (f"{_AOT_HEAD} [parallel_state.py:1208] rank 0 in world size 2 is assigned as DP rank 0, PP rank 0, "
             f"PCP rank 0, TP rank 0, EP rank 0\n")
    report = _report(RAY_PP, state + _text(RAY_PP))
    assert _placed(report) == [(0, _KV, _GRAPH), (1, None, None)]
    assert _ray_notes(report) == [_ORDER_NOTE.format("ranks 0, 1")]


def test_named_workers_keep_the_rank_their_name_states() -> None:
    """Must not fire: `(Worker_TP1 pid=…)` prints its path and its figure first; its name places it, as before, and
    no note speaks of Ray."""
    text = "".join(
        f"(Worker_TP{tp} pid={pid}) INFO 03-11 12:23:{20 + i} [{where}] {message}\n"
        for i, (tp, pid, where, message) in enumerate([
            (1, 202, "backends.py:548", "Using cache directory: /root/.cache/vllm/torch_compile_cache/84065e/rank_1_0/"
                                        "backbone for vLLM's torch.compile"),
            (1, 202, "gpu_worker.py:424", "Available KV cache memory: 3.00 GiB"),
            (0, 201, "backends.py:548", "Using cache directory: /root/.cache/vllm/torch_compile_cache/84065e/rank_0_0/"
                                        "backbone for vLLM's torch.compile"),
            (0, 201, "gpu_worker.py:424", "Available KV cache memory: 2.09 GiB"),
        ]))
    report = report_from_log_text(text, "tp2.log")
    assert [(r.rank, r.owners.get("kv_cache")) for r in report.ranks] == [(0, _KV), (1, round(3.00 * 2**30))]
    assert _ray_notes(report) == []


# --------------------------------------------------------------------------------------------
# F4: tqdm bars, padded to the terminal's width, are no fold


def test_tqdm_bars_padded_to_the_terminal_width_are_no_fold() -> None:
    """The paste, whole. Before: "lines 27 (1 in all) stop at column 115 … `fold -w 115`": the three bars are 115
    columns, the last was glued to the cut word `Processed`. Now no note; the figures are as before."""
    report = _report(BARS)
    assert report.warnings == ("the log names no process (no `(Worker_TP0 pid=…)` prefixes): its figures are taken "
                               "as one rank, rank 0",)
    assert (report.capacity.kv_tokens, report.config.max_model_len) == (399_104, 16_384)


def _fold(text: str, width: int) -> str:
    return "\n".join(line[i:i + width] for line in text.split("\n") for i in range(0, max(len(line), 1), width))


def test_a_fold_that_cuts_the_bars_is_still_found() -> None:
    """Must not fire: `fold -w 100` of the paste cuts the bars inside (they end at no `]`): a bar is one of the cut
    lines, and the cut concurrency and graph lines are read joined (`24.36` / `x`, `took 0.` / `44 GiB`)."""
    report = _report(BARS, _fold(_text(BARS), 100))
    assert report.warnings[0] == (
        f"{BARS}: lines 19, 22, 25, 31 (4 in all) stop at column 100 and go on in the next line, as a paste through "
        f"`fold -w 100` or a 100-column terminal cuts them: they were read joined; a line cut where the paste ends is "
        f"still lost")
    assert (report.config.max_model_len, report.ranks[0].owners.get("graph_pool")) == (16_384, round(0.44 * 2**30))


def test_records_wrapped_at_the_bars_width_are_still_joined_and_the_bars_are_not() -> None:
    """Must not fire: the records prefixed `(EngineCore_0 pid=7093)` and wrapped at 115, the bars' own width: the
    records are found cut and read joined; the whole bars are no cut lines (before, line 30, the last bar, was named
    and glued to `Processed`)."""
    prefixed = "\n".join(f"(EngineCore_0 pid=7093) {line}" if line.startswith("INFO") else line
                         for line in _text(BARS).split("\n"))
    report = _report(BARS, _fold(prefixed, 115))
    assert report.warnings == (
        f"{BARS}: lines 19, 21, 23 (3 in all) stop at column 115 and go on in the next line, as a paste through "
        f"`fold -w 115` or a 115-column terminal cuts them: they were read joined; a line cut where the paste ends is "
        f"still lost",)
    assert (report.config.max_model_len, report.ranks[0].owners.get("graph_pool")) == (16_384, round(0.44 * 2**30))


def test_records_printed_after_a_bar_and_before_the_next_are_no_fold() -> None:
    """Must not fire: round twenty's autotuner log, whose two WARNING records after a bar are 211 columns each and
    followed by a bar. With the bars left out of the count they alone set a column; a tqdm redraw begins a line, so
    the line before it ended there, and no note is made."""
    report = report_from_log_text(AUTOTUNER.read_text(encoding="utf-8"), AUTOTUNER.name)
    assert [w for w in report.warnings if "stop at column" in w] == []
