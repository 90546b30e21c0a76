"""Logs as people share them: excerpts pasted into issues, e-mails and chats.

The two excerpts of issue 14 (tests/fixtures/logs/excerpts/): a v19 boot that fits and a v20 boot
that fails with the fork's ValueError, both with a message wrapped onto an indented line, no
process prefix, no timestamp and no version line. Expected bytes are vLLM's printed GiB × 2**30.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from kvaudit.engines.inputs import load_report
from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.boot_record import UNFINISHED_PAST_CAPTURE
from kvaudit.input_text import read_text
from kvaudit.schema import FailureKind, Owner, Phase, Verdict

EXCERPTS = Path(__file__).parent.parent / "fixtures" / "logs" / "excerpts"
V19, V20 = EXCERPTS / "v19-boots.txt", EXCERPTS / "v20-fails.txt"


def gib(x: float) -> int:
    return round(x * 2**30)


def owners(report, rank: int = 0) -> dict[Owner, int | None]:
    return dict(next(r for r in report.ranks if r.rank == rank).owners)


def test_an_excerpt_that_starts_with_a_bracket_is_a_log_not_json() -> None:
    # GIVEN a file whose first character is `[` ([gpu_model_runner.py:N] …) WHEN loaded THEN a log report
    report = load_report(V19)
    assert report.source.value == "log" and len(report.ranks) == 1


def test_the_v19_excerpt_gives_every_owner_its_wrapped_actual_usage_line_states() -> None:
    report = load_report(V19)
    o = owners(report)
    assert (o[Owner.WEIGHTS], o[Owner.ACTIVATION_PEAK], o[Owner.NON_TORCH], o[Owner.GRAPH_POOL],
            o[Owner.KV_CACHE]) == (gib(84.62), gib(2.31), gib(0.07), gib(0.55), gib(18.40))
    assert report.capacity.kv_tokens == 1_205_440 and report.verdict is Verdict.OK
    assert report.engine.version is None
    assert any("its figures are taken as one rank, rank 0" in w for w in report.warnings)
    assert UNFINISHED_PAST_CAPTURE in report.warnings  # it ends with the capture's usage line


def test_the_v20_excerpt_fails_with_the_needed_and_available_bytes() -> None:
    # GIVEN the fork's un-parenthesised ValueError ("models's", wrapped over four lines) and the
    # wrapper RuntimeError after it THEN the verdict is fail, from the KV check, with its figures
    report = load_report(V20)
    assert report.verdict is Verdict.FAIL
    assert (report.failure.kind, report.failure.phase, report.failure.rank) == (FailureKind.DOES_NOT_FIT, Phase.KV, 0)
    assert report.failure.message.startswith("ValueError: To serve at least one request with the models's max seq len")
    assert (report.capacity.kv_needed_bytes, report.capacity.kv_available_bytes) == (gib(4.52), gib(2.27))
    assert report.capacity.max_feasible_model_len == 263_168 and report.config.max_model_len == 524_288
    assert "4.52 GiB KV, 2.27 GiB available" in report.verdict_reason
    # the wrapped MRV2 line: 1.45 GiB captured is the pool, 0.25 GiB retained is only noted
    assert owners(report)[Owner.GRAPH_POOL] == gib(1.45) and report.ranks[0].graph_pool_retained_bytes == gib(0.25)


def test_diff_of_the_two_excerpts_reads_what_a_person_reads(cli) -> None:
    result = cli("diff", str(V19), str(V20), "-f", "json")
    assert result.code == 0
    diff = json.loads(result.stdout)
    binding = {d["owner"]: d["delta_bytes"] for d in diff["owners"] if d["rank"] is None}
    assert binding["weights"] == gib(86.10) - gib(84.62)
    assert binding["graph_pool"] == gib(1.45) - gib(0.55)
    assert (binding["activation_peak"], binding["non_torch"]) == (None, None)  # v20 does not say
    assert diff["dominant_owner"] == "weights"
    assert diff["capacity"]["kv_available_delta_bytes"] == gib(2.27) - gib(18.40)
    assert diff["verdict"] == {"a": "ok", "b": "fail"}
    assert diff["capacity"]["b"]["kv_needed_bytes"] == gib(4.52)


def test_the_diff_table_says_the_dominant_owner_is_among_known_deltas(cli) -> None:
    result = cli("diff", str(V19), str(V20), "--width", "400")
    line = next(x for x in result.stdout.splitlines() if x.startswith("dominant owner:"))
    # v20's fork charged its MRV2 estimate, 1.45 GiB, before sizing; v19 none (its 0.55 GiB capture came after)
    assert line == ("dominant owner: weights (of the owners both sides know; unknown on one side: activation_peak, "
                    "non_torch); it moved +1.48 GiB of KV's -16.13 GiB, and graph_pool's estimate +1.45 GiB moved KV "
                    "by -1.45 GiB: the rest is in owners not known on both sides (activation_peak, non_torch) or the "
                    "budget (requested: device × gpu_memory_utilization), not known on both sides")  # v20 states none


# --------------------------------------------------------------------------------------------
# The same excerpt, as it arrives through other hands


def _quoted(text: str) -> str:
    return "".join("> " + line for line in text.splitlines(keepends=True))


def _fenced(text: str) -> str:
    return "Here is my log:\n\n```text\n" + text + "```\n\nAny idea?\n"


def _crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def _tabs(text: str) -> str:
    return text.replace("\n    ", "\n\t")


def _nbsp(text: str) -> str:
    return text.replace(" GiB", "\u00a0GiB")


def _dots(text: str) -> str:
    return text.replace("1,205,440", "1.205.440").replace("524,288", "524.288")


def _spaces(text: str) -> str:
    return text.replace("1,205,440", "1\u202f205\u202f440")


def _framed(text: str) -> str:
    """Copied from a terminal pane that draws a frame (k9s, tmux borders): `│ line … │`."""
    return "".join(f"│ {line:<200} │\n" for line in text.splitlines())


def _ci(text: str) -> str:
    """Copied from a CI log viewer that puts `  | ` before each line."""
    return "".join(f"  | {line}\n" for line in text.splitlines())


def _terminal(text: str) -> str:
    """Unwrapped, then cut at 60 columns as a terminal does: in the middle of words."""
    lines = text.replace("\n    ", " ").splitlines()
    return "".join(line[i:i + 60] + "\n" for line in lines for i in range(0, max(len(line), 1), 60))


@pytest.mark.parametrize("transform", [_quoted, _fenced, _crlf, _tabs, _nbsp, _dots, _spaces, _terminal, _framed, _ci,
                                       lambda t: _quoted(_fenced(_crlf(t)))])
@pytest.mark.parametrize("path", [V19, V20])
def test_quotes_fences_crlf_tabs_nbsp_and_separators_change_nothing(path: Path, transform) -> None:
    text = read_text(path)
    expected = report_from_log_text(text, "x")
    got = report_from_log_text(transform(text), "x")
    assert got.ranks == expected.ranks
    assert (got.capacity, got.verdict, got.failure) == (expected.capacity, expected.verdict, expected.failure)


def test_a_terminal_cut_inside_a_word_is_read_whole() -> None:
    # As pasted in vllm-project issues: a 120-column terminal cut "KV cach|e is needed".
    text = ("(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len (100000), "
            "(4.26 GiB KV cach\n"
            "e is needed, which is larger than the available KV cache memory (4.25 GiB). Based on the available memory,"
            " the estimated\n")
    report = report_from_log_text(text, "x")
    assert report.failure.kind is FailureKind.DOES_NOT_FIT
    assert report.capacity.kv_needed_bytes == gib(4.26)


@pytest.mark.parametrize("line", [
    "ValueError: To serve at least one request with the model's max seq len (524288), (4.52 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (2.27 GiB).",
    "ValueError: To serve at least one request with the models's max seq len (524288), (4.52 GB KV cache is needed, "
    "which is larger than the available KV cache memory (2.27 GB).",
    "ValueError: To serve at least one request with the models's max seq len (524288), 4.52 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (2.27 GiB).",
])
def test_both_valueerror_spellings_fail_with_the_figures_in_a_full_log(line: str) -> None:
    # GIVEN a tagged full log whose KV check fails, followed by the wrapper RuntimeError
    text = "\n".join([
        "(EngineCore_DP0 pid=7) INFO 11-30 10:00:00 [core.py:93] Initializing a V1 LLM engine (v0.20.0) with config: "
        "model='m', tensor_parallel_size=1, max_seq_len=524288",
        "(EngineCore_DP0 pid=7) INFO 11-30 10:01:00 [gpu_worker.py:298] Available KV cache memory: 2.27 GiB",
        f"(EngineCore_DP0 pid=7) ERROR 11-30 10:01:01 [core.py:700] {line}",
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
    ]) + "\n"
    report = report_from_log_text(text, "x")
    assert report.verdict is Verdict.FAIL and report.failure.kind is FailureKind.DOES_NOT_FIT
    assert report.failure.rank == 0 and report.engine.version == "0.20.0"
    assert (report.capacity.kv_needed_bytes, report.capacity.kv_available_bytes) == (gib(4.52), gib(2.27))


@pytest.mark.parametrize("text", [
    "Actual usage is 84.62 GiB for weight, 2.31 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.55 GiB "
    "for CUDAGraph memory.",
    "Actual usage is 84.62 GiB for weights, 2.31 GiB for peak activation, 0.07 GiB for non-torch memory, 0.55 GiB "
    "for CUDA Graph memory.",
    "Actual usage is 84.62 GiB for weight, 2.31 GiB for peak activation,\n0.07 GiB for non-torch memory, and\n0.55 GiB "
    "for CUDAGraph memory.",
])
def test_the_actual_usage_line_in_its_spellings(text: str) -> None:
    report = report_from_log_text("[gpu_worker.py:391] " + text + "\n", "x")
    o = owners(report)
    assert (o[Owner.WEIGHTS], o[Owner.ACTIVATION_PEAK], o[Owner.NON_TORCH], o[Owner.GRAPH_POOL]) == (
        gib(84.62), gib(2.31), gib(0.07), gib(0.55))


@pytest.mark.parametrize("text", [
    "[model_runner.py:953] Estimated MRV2 CUDA graph memory: 1.20 GiB additional (1.45 GiB captured, 0.25 GiB "
    "retained and counted as non-torch)",
    "[model_runner.py:953] Estimated MRV2 CUDA graph memory: 1.20 GiB additional (1.45 GiB captured,\n"
    "    0.25 GiB retained and counted as non-torch)",
    "[model_runner.py:953] Estimated MRV2 CUDA graph memory:\n  1.20 GiB additional (1.45 GiB captured, 0.25 GiB\n"
    "  retained and counted as non-torch)",
])
def test_the_mrv2_graph_line_wrapped_or_not(text: str) -> None:
    report = report_from_log_text(text + "\n", "x")
    assert report.ranks[0].graph_pool_estimate_bytes == gib(1.45)
    assert report.ranks[0].graph_pool_retained_bytes == gib(0.25)


def test_separate_unwrapped_lines_stay_separate_records() -> None:
    # GIVEN two prefix-less messages of the same kind in a row THEN both are read, neither swallowed
    text = ("Model loading took 10.00 GiB memory and 5.0 seconds\n"
            "Graph capturing finished in 3 secs, took 0.50 GiB\n"
            "Graph capturing finished in 4 secs, took 0.70 GiB\n")
    from kvaudit.engines.logs.parse import parse_file
    assert [p.line.msg for p in parse_file(text, "x").lines] == text.splitlines()


# --------------------------------------------------------------------------------------------
# Standard input


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_show_reads_standard_input(cli, monkeypatch) -> None:
    _stdin(monkeypatch, V20.read_bytes())
    result = cli("show", "-", "-f", "json")
    assert result.code == 0 and json.loads(result.stdout)["verdict"] == "fail"


def test_ingest_reads_standard_input_gzip_too(cli, monkeypatch) -> None:
    import gzip
    _stdin(monkeypatch, gzip.compress(V19.read_bytes()))
    result = cli("ingest", "-", "-f", "json")
    assert result.code == 0 and json.loads(result.stdout)["ranks"][0]["owners"]["weights"] == gib(84.62)


def test_diff_reads_one_side_from_standard_input(cli, monkeypatch) -> None:
    _stdin(monkeypatch, V20.read_bytes())
    result = cli("diff", str(V19), "-", "-f", "json")
    assert result.code == 0 and json.loads(result.stdout)["verdict"] == {"a": "ok", "b": "fail"}


def test_standard_input_twice_is_a_usage_error(cli) -> None:
    result = cli("diff", "-", "-")
    assert result.code == 2 and result.stderr_lines == [
        "kvaudit: error: - (standard input) can be read only once: save one of the inputs to a file"]


# --------------------------------------------------------------------------------------------
# Several files: parts of one boot, or two runs (issue 15, item 8)

TP2 = Path(__file__).parent.parent / "fixtures" / "logs" / "gpu-0.32-v1-tp2-ok.log"


def test_two_runs_with_different_configs_are_refused(cli, tmp_path) -> None:
    # GIVEN the same boot twice, one copy saying it ran eager THEN ingest refuses to merge them
    text = read_text(TP2)
    assert "enforce_eager=False" in text
    eager = tmp_path / "eager.log"
    eager.write_text(text.replace("enforce_eager=False", "enforce_eager=True"), encoding="utf-8")
    result = cli("ingest", str(eager), str(TP2))
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines == [
        f"kvaudit: error: {eager} and {TP2} are logs of two different engine runs (enforce_eager True in one, "
        f"False in the other): ingest each on its own, or compare them with kvaudit diff"]


def test_two_excerpts_of_one_rank_are_refused(cli) -> None:
    result = cli("ingest", str(V19), str(V20))
    assert result.code == 2
    assert "are logs of two different engine runs (both print rank 0's figures)" in result.stderr


def test_one_boot_split_per_worker_still_merges(cli, tmp_path) -> None:
    lines = read_text(TP2).splitlines()
    node0, node1 = tmp_path / "node0.log", tmp_path / "node1.log"
    node0.write_text("\n".join(x for x in lines if "Worker_TP1" not in x), encoding="utf-8")
    node1.write_text("\n".join(x for x in lines if "Worker_TP1" in x), encoding="utf-8")
    result = cli("ingest", str(node0), str(node1), "-f", "json")
    assert result.code == 0 and [r["rank"] for r in json.loads(result.stdout)["ranks"]] == [0, 1]
