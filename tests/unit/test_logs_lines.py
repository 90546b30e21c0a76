"""Line shapes, process tags and ranks, the fast scanner, and the config lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text, report_from_logs
from kvaudit.engines.logs.knobs import knobs_from_args, knobs_from_engine_line, literal_dict, non_default_args
from kvaudit.engines.logs.lines import Role, parse_line, proc_tag
from kvaudit.engines.logs.scan import scan, scan_exhaustive
from kvaudit.input_text import read_text
from kvaudit.schema import Owner

FIXTURES = Path(__file__).parent.parent / "fixtures" / "logs"
MSG = "Available KV cache memory: 4.0 GiB"


@pytest.mark.parametrize("raw", [
    f"(Worker_TP1 pid=42) INFO 11-30 10:00:00 [gpu_worker.py:760] {MSG}",
    f"2026-11-30T10:00:00.123456789Z (Worker_TP1 pid=42) INFO 11-30 10:00:00 [gpu_worker.py:760] {MSG}",
    f"[pod-xyz] (Worker_TP1 pid=42) INFO 11-30 10:00:00 [gpu_worker.py:760] {MSG}",
    f"\x1b[0;36m(Worker_TP1 pid=42)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-30 10:00:00\x1b[0m "
    f"\x1b[90m[gpu_worker.py:760]\x1b[0m {MSG}",
    f"(Worker_TP1 pid=42) INFO 11-30 10:00:00 [v1/worker/gpu_worker.py:760] {MSG}",
    # the colour codes pasted as text: a terminal's caret form (vllm#33155), the ␛ symbol, a JSON
    # log driver's or a repr's escape
    f"^[[0;36m(Worker_TP1 pid=42)^[[0;0m INFO 11-30 10:00:00 [gpu_worker.py:760] {MSG}",
    f"[Worker_TP1 pid=42] INFO 11-30 10:00:00 [gpu_worker.py:760] {MSG}",  # bracketed (vllm#29070)
    f"\u241b[0;36m(Worker_TP1 pid=42)\u241b[0;0m INFO 11-30 10:00:00 [gpu_worker.py:760] {MSG}",
    f"\\u001b[0;36m(Worker_TP1 pid=42)\\u001b[0;0m \\x1b[32mINFO\\033[0m 11-30 10:00:00 [gpu_worker.py:760] {MSG}",
])
def test_line_shapes(raw: str) -> None:
    line = parse_line(raw, 0)
    assert (line.pid, line.tag, line.level, line.msg) == (42, "Worker_TP1", "INFO", MSG)
    assert line.src is not None and line.src.endswith("gpu_worker.py")


def test_colours_go_and_nothing_else_does() -> None:
    from kvaudit.printable import strip_colours
    assert strip_colours("^[[0;36m(EngineCore_DP0 pid=7)^[[0;0m ERROR x") == "(EngineCore_DP0 pid=7) ERROR x"
    # a caret, a bracket or a backslash that starts no colour sequence stays
    for text in ("x^[y", "a[0m", "C:\\x1bin\\[3]", "^[[", "tokens ^[[ 12"):
        assert strip_colours(text) == text


def test_untagged_and_foreign_lines() -> None:
    line = parse_line(f"INFO 04-01 09:00:21 [kv_cache_utils.py:634] {MSG}", 5)
    assert (line.pid, line.level, line.src, line.msg, line.pos) == (None, "INFO", "kv_cache_utils.py", MSG, 5)
    line = parse_line("INFO 10-01 08:00:30 model_runner.py:1060] Loading model weights took 24.25 GB", 0)  # V0
    assert line.src == "model_runner.py" and line.msg == "Loading model weights took 24.25 GB"
    line = parse_line("ValueError: No available memory for the cache blocks.", 0)
    assert line.pid is None and line.src is None and not line.is_vllm
    line = parse_line("(VllmWorker rank=1 pid=901) ValueError: boom", 0)  # old raw-output prefix
    assert (line.pid, line.tag, line.level, line.msg) == (901, "VllmWorker rank=1", None, "ValueError: boom")


@pytest.mark.parametrize("name, role, dp, pp, tp, dcp, rank", [
    ("Worker_TP3", Role.WORKER, None, None, 3, None, None),
    ("Worker_TP1_DCP1", Role.WORKER, None, None, 1, 1, None),
    ("Worker_DP1_PP1_TP2_EP5", Role.WORKER, 1, 1, 2, None, None),
    ("Worker", Role.WORKER, None, None, None, None, None),
    ("VllmWorker-5", Role.WORKER, None, None, None, None, 5),
    ("VllmWorker rank=2", Role.WORKER, None, None, None, None, 2),
    ("VllmWorker TP4", Role.WORKER, None, None, 4, None, None),
    ("EngineCore", Role.ENGINE, None, None, None, None, None),
    ("EngineCore_DP1", Role.ENGINE, 1, None, None, None, None),
    ("EngineCore_0", Role.ENGINE, 0, None, None, None, None),
    ("APIServer", Role.FRONTEND, None, None, None, None, None),
    ("MainProcess", Role.FRONTEND, None, None, None, None, None),
])
def test_proc_tags(name: str, role: Role, dp, pp, tp, dcp, rank) -> None:
    tag = proc_tag(name)
    assert (tag.role, tag.dp, tag.pp, tag.tp, tag.dcp, tag.global_rank) == (role, dp, pp, tp, dcp, rank)


def test_pid_maps_to_its_last_name() -> None:
    """GIVEN a worker whose memory line was printed before its rename (VllmWorker-0 → Worker → Worker_TP1)
    THEN the line belongs to the rank of the last name, TP rank 1."""
    text = ("(VllmWorker-0 pid=7) INFO 11-30 10:00:00 [gpu_worker.py:760] Available KV cache memory: 4.0 GiB\n"
            "(Worker pid=7) INFO 11-30 10:00:01 [parallel_state.py:1] world_size=2 rank=1\n"
            "(Worker_TP1 pid=7) INFO 11-30 10:00:02 [parallel_state.py:2] ready\n"
            "(Worker_TP0 pid=6) INFO 11-30 10:00:02 [gpu_worker.py:760] Available KV cache memory: 5.0 GiB\n")
    report = report_from_log_text(text, "x")
    assert [(r.rank, r.tp_rank, r.kv_available_bytes) for r in report.ranks] == [(0, 0, 5 << 30), (1, 1, 4 << 30)]


def test_global_rank_with_pipeline_parallelism() -> None:
    text = "".join(f"(Worker_PP{pp}_TP{tp} pid={10 + 2 * pp + tp}) INFO 11-30 10:00:00 [gpu_worker.py:760] "
                   f"Available KV cache memory: {pp * 2 + tp + 1}.0 GiB\n" for pp in range(2) for tp in range(2))
    report = report_from_log_text(text, "x")
    assert [(r.rank, r.kv_available_bytes >> 30) for r in report.ranks] == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_engine_lines_are_not_a_rank_when_workers_exist() -> None:
    """GIVEN TP=2 workers and an EngineCore line with a per-rank figure
    THEN the engine line does not overwrite rank 0's own figure."""
    text = ("(Worker_TP0 pid=6) INFO 11-30 10:00:02 [gpu_worker.py:760] Available KV cache memory: 5.0 GiB\n"
            "(Worker_TP1 pid=7) INFO 11-30 10:00:02 [gpu_worker.py:1] world\n"
            "(EngineCore pid=2) INFO 11-30 10:00:03 [gpu_worker.py:760] Available KV cache memory: 9.0 GiB\n")
    report = report_from_log_text(text, "x")
    assert report.ranks[0].kv_available_bytes == 5 << 30


def test_tqdm_redraw_before_a_log_line_and_crlf() -> None:
    text = ("Capturing CUDA graphs (PIECEWISE): 100%|██████████| 4/4\r(Worker_TP0 pid=6) INFO 11-30 10:00:02 "
            "[gpu_model_runner.py:6582] Graph capturing finished in 3 secs, took 0.5 GiB\r\n"
            "(Worker_TP0 pid=6) INFO 11-30 10:00:02 [gpu_worker.py:760] Available KV cache memory: 5.0 GiB\r\n")
    r = report_from_log_text(text, "x").ranks[0]
    assert r.graph_pool_actual_bytes == 1 << 29 and r.kv_available_bytes == 5 << 30


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.log")))
def test_fast_scan_selects_what_a_line_by_line_scan_selects(name: str) -> None:
    """The single-character scanner must find exactly the segments a per-line check finds, and the
    reports must be identical."""
    text = read_text(FIXTURES / name)
    assert scan(text) == scan_exhaustive(text)
    assert report_from_logs([(text, name)]) == report_from_logs([(text, name)], exhaustive=True)


# --------------------------------------------------------------------------------------------
# Config lines


def test_non_default_args_literal() -> None:
    args = non_default_args("{'model': '/m', 'tensor_parallel_size': 8, 'gpu_memory_utilization': 0.97, "
                            "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 2}, "
                            "'cudagraph_capture_sizes': [1, 2, 4], 'enforce_eager': False, 'block_size': 64, "
                            "'kv_cache_dtype': 'fp8', 'max_num_seqs': 128, 'trust_remote_code': True}")
    known, extra = knobs_from_args(args)
    assert known == {"model": "/m", "tensor_parallel_size": 8, "gpu_memory_utilization": 0.97,
                     "speculative_method": "mtp", "num_speculative_tokens": 2, "cudagraph_capture_sizes": (1, 2, 4),
                     "enforce_eager": False, "block_size": 64, "kv_cache_dtype": "fp8", "max_num_seqs": 128}
    assert extra == {"speculative_config": {"method": "mtp", "num_speculative_tokens": 2}, "trust_remote_code": True}


def test_non_default_args_fallback_and_json_strings() -> None:
    """GIVEN values that are not literals (an enum repr, a config object) and JSON given on the CLI
    THEN literal_eval fails as a whole and the plain pairs are still read; nothing is evaluated."""
    text = ("{'model_tag': 'org/model', "
            "'compilation_config': CompilationConfig(mode=<CompilationMode.VLLM_COMPILE: 3>),"
            " 'speculative_config': '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}', 'max_model_len': -1, "
            "'cudagraph_capture_sizes': [8, 16], 'danger': __import__('os').system('false')}")
    assert literal_dict(text) is None
    known, _ = knobs_from_args(non_default_args(text))
    assert known == {"model": "org/model", "speculative_method": "mtp", "num_speculative_tokens": 1,
                     "cudagraph_capture_sizes": (8, 16)}


@pytest.mark.parametrize("text", ["", "{", "{'a': " * 2000, "{'a': 1" + "}" * 50, "{1: 2}", "[1, 2]", "\x00{}",
                                  "{'a': '\\N{BOGUS}'}", "{'a': 1e999}"])
def test_hostile_dict_text_never_raises(text: str) -> None:
    knobs_from_args(non_default_args(text))


def test_engine_line_knobs() -> None:
    config = ("model='/m/ds', speculative_config=SpeculativeConfig(method='mtp', model='/m/ds', num_spec_tokens=1), "
              "tokenizer='/m/ds', dtype=torch.bfloat16, max_seq_len=65536, load_format=LoadFormat.DUMMY, "
              "tensor_parallel_size=8, pipeline_parallel_size=2, data_parallel_size=1, decode_context_parallel_size=4, "
              "enforce_eager=True, kv_cache_dtype=fp8_e4m3, compilation_config={'mode': <CompilationMode.NONE: 0>, "
              "'cudagraph_capture_sizes': [], 'pass_config': {'x': 1}}")
    assert knobs_from_engine_line(config) == {
        "model": "/m/ds", "speculative_method": "mtp", "num_speculative_tokens": 1, "max_model_len": 65536,
        "load_format": "dummy", "tensor_parallel_size": 8, "pipeline_parallel_size": 2, "data_parallel_size": 1,
        "decode_context_parallel_size": 4, "enforce_eager": True, "kv_cache_dtype": "fp8_e4m3",
        "cudagraph_capture_sizes": (), "dtype": "bfloat16"}  # `dtype=`, not the `kv_cache_dtype=` after it


def test_owners_from_logs_never_invent_zero() -> None:
    """A log that never reached KV sizing has every owner null, not 0."""
    text = ("(Worker_TP0 pid=6) INFO 11-30 10:00:02 [gpu_model_runner.py:5150] "
            "Model loading took 5.0 GiB memory and 1 seconds\n")
    r = report_from_log_text(text, "x").ranks[0]
    assert r.owners[Owner.WEIGHTS] == 5 << 30
    assert all(v is None for o, v in r.owners.items() if o is not Owner.WEIGHTS)


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.log") if " pid=" in p.read_text()))
def test_a_log_with_its_colours_pasted_as_caret_text_reads_as_the_log(name: str) -> None:
    """vLLM's coloured process tags, pasted from a terminal that shows the escape as `^[`
    (vllm#33155): the same report as without them. Before, a boot that died in its graph capture
    read as fitting: its ERROR lines were not seen."""
    import re

    from kvaudit.schema import dumps
    text = read_text(FIXTURES / name)
    coloured = re.sub(r"\([A-Za-z][\w.\- =]{0,80} pid=\d+\)", lambda m: f"^[[0;36m{m.group()}^[[0;0m", text)
    assert "^[[0;36m" in coloured  # every file here has process tags, so the rewrite changed it
    plain, pasted = report_from_log_text(text, name), report_from_log_text(coloured, name)
    assert dumps(pasted) == dumps(plain)
