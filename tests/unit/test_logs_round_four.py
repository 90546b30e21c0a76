"""Real pastes, round four: excerpts of vLLM 0.27–0.29 from August and September 2026
(tests/fixtures/logs/public/79-… to 86-…, each with its thread in its header; what a careful reader
takes from each is in test_logs_public.EXPECTED). Here, each general rule they needed, on its own:
flags in a person's sentence, the NVIDIA driver's out-of-memory, Model Runner V2's capture lines in an
excerpt, and vLLM's negative --kv-cache-memory suggestion, lines retyped with a clock time first.
"""

from __future__ import annotations

import pytest

from kvaudit.engines.failures import cause_of
from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.facts import FactKind, facts_from_message
from kvaudit.engines.logs.lines import parse_line
from kvaudit.schema import FailureKind, Owner
from kvaudit.units import gib_to_bytes


def tagged(proc: str, msg: str, src: str = "gpu_worker.py:1") -> str:
    return f"({proc} pid={100 + sum(map(ord, proc))}) INFO 09-30 12:00:00 [{src}] {msg}\n"


def command_args(line: str) -> dict[str, float | int]:
    return dict(f.value for f in facts_from_message(line) if f.kind is FactKind.COMMAND_ARG)


# --------------------------------------------------------------------------------------------
# 1. A command is a command line, a continuation line, or a run of flags; not one flag in a sentence


@pytest.mark.parametrize("line, args", [
    # spark-vllm-docker#388: the flags the person ran with, inside a sentence
    ("KV init can be got past. With --max-model-len 32768 --max-num-batched-tokens 2048 --gpu-memory-utilization "
     "0.72 --speculative-config 'null':", {"max_model_len": 32768, "max_num_batched_tokens": 2048,
                                            "gpu_memory_utilization": 0.72}),
    ("  --gpu-memory-utilization 0.98 \\", {"gpu_memory_utilization": 0.98}),  # a continuation line (vllm#57475)
    ("- --tensor-parallel-size=2", {"tensor_parallel_size": 2}),  # a YAML list item
    # …and its speculative config (JSON), read since round twenty-one
    ("--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 4}' -tp 4",
     {"tensor_parallel_size": 4, "speculative_method": "mtp", "num_speculative_tokens": 4}),
    ("vllm serve m --gpu-memory-utilization 0.9 because it is enough",  # names vllm, and its model (round nine)
     {"model": "m", "gpu_memory_utilization": 0.9}),
    # spark-vllm-docker#396: one flag and the person's words about another boot
    ("--gpu-memory-utilization 0.85 fixes it: 28.74 GiB KV → 240,816 tokens, 1.22× concurrency", {}),
    ("so raising --gpu-memory-utilization just swaps one failure for the other", {}),
    ("we tried -tp 2 first", {}),
])
def test_flags_count_as_a_command_only_where_the_line_is_one(line: str, args: dict[str, float | int]) -> None:
    assert command_args(line) == args


def test_a_flag_in_a_sentence_about_another_boot_is_not_this_boots_utilization_nor_its_tp() -> None:
    """GIVEN the KV check's figures and, after them, `--gpu-memory-utilization 0.85 fixes it`
    THEN the utilization stays unknown, and so does the TP size (no command states any knob)."""
    text = ("Available KV cache memory: 22.5 GiB\n"
            "--gpu-memory-utilization 0.85 fixes it: 28.74 GiB KV → 240,816 tokens.\n")
    report = report_from_log_text(text, "x")
    assert report.config.gpu_memory_utilization is None and report.config.tensor_parallel_size is None


# --------------------------------------------------------------------------------------------
# 2. The NVIDIA driver's out-of-memory (dmesg on a unified-memory GB10)


@pytest.mark.parametrize("line", [
    "kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned from "
    "_memdescAllocInternal(pMemDesc)",
    "then NVRM ... Out of memory [NV_ERR_NO_MEMORY] ... _memdescAllocInternal in dmesg.",
])
def test_the_drivers_out_of_memory_is_an_oom(line: str) -> None:
    cause = cause_of(line)
    assert cause is not None and cause.kind is FailureKind.OOM
    text = tagged("EngineCore", "Available KV cache memory: 8.22 GiB") + "\n" + line + "\n"  # dmesg, a block apart
    report = report_from_log_text(text, "x")
    assert report.failure is not None and report.failure.kind is FailureKind.OOM


# --------------------------------------------------------------------------------------------
# 3. Model Runner V2: which "Graph capturing finished" is the profiling capture, which the real one

CAPTURE = "Graph capturing finished in 6 secs, took {} GiB"
USAGE = ("Free memory on device (39.01/39.67 GiB) on startup. Desired GPU memory utilization is (0.87, 34.52 GiB). "
         "Actual usage is 22.28 GiB for consumed memory (weights + non-torch), 0.73 GiB for peak activation, and "
         "0.5 GiB for CUDAGraph memory. Current kv cache memory in use is 11.51 GiB.")
V2 = tagged("Worker_TP0", "Using V2 Model Runner", src="gpu_worker.py:441")


def test_a_v2_capture_right_before_actual_usage_is_the_real_one() -> None:
    """GIVEN (vllm-backport#41) a V2 worker's one capture line, then at once its "Actual usage"
    line, no pool line between them
    THEN the capture is the real one, vLLM estimated 0 and the activation is the whole peak."""
    text = V2 + tagged("Worker_TP0", CAPTURE.format("0.50"), src="model_runner.py:1032") + tagged("Worker_TP0", USAGE)
    r = report_from_log_text(text, "x").ranks[0]
    assert r.graph_pool_actual_bytes == gib_to_bytes("0.5") and r.graph_pool_estimate_bytes == 0
    assert r.owners[Owner.ACTIVATION_PEAK] == gib_to_bytes("0.73") and r.owners[Owner.GRAPH_POOL] == gib_to_bytes("0.5")


def test_v2_captures_before_the_kv_sizing_profile_and_after_it_capture_for_real() -> None:
    """GIVEN a V2 rank's profiling capture, "Available KV cache memory", the advisory, the real capture
    THEN the estimate comes from the advisory, the real capture is the last, the profiling one the first."""
    advisory = ("CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization="
                "0.8700 is equivalent to --gpu-memory-utilization=0.8574 without CUDA graph memory profiling. To "
                "maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.8826. To "
                "disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.")
    text = (V2 + tagged("Worker_TP0", CAPTURE.format("0.60"), src="model_runner.py:1032")
            + tagged("Worker_TP0", "Available KV cache memory: 11.51 GiB") + tagged("Worker_TP0", advisory)
            + tagged("Worker_TP0", CAPTURE.format("0.40"), src="model_runner.py:1032") + tagged("Worker_TP0", USAGE))
    r = report_from_log_text(text, "x").ranks[0]
    assert r.graph_pool_actual_bytes == gib_to_bytes("0.5")  # the "Actual usage" line's figure wins
    assert r.graph_pool_estimate_bytes == round((0.87 - 0.8574) * gib_to_bytes("39.67"))


# --------------------------------------------------------------------------------------------
# 4. vLLM's --kv-cache-memory suggestion below zero


def test_a_negative_kv_cache_memory_suggestion_says_the_rank_is_over_its_budget() -> None:
    """GIVEN (vllm#50576) an "Actual usage" line whose suggestion to fit the requested memory is
    negative: THEN the suggestion is kept as printed and a warning says no KV cache fits the budget."""
    usage = ("Free memory on device (46.93/47.4 GiB) on startup. Desired GPU memory utilization is (0.95, 45.03 GiB). "
             "Actual usage is 40.33 GiB for consumed memory (weights + non-torch), 3.12 GiB for peak activation, and "
             "2.51 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=-1160530022` "
             "(-1.08 GiB) to fit into requested memory, or `--kv-cache-memory=880860672` (0.82 GiB) to fully utilize "
             "gpu memory. Current kv cache memory in use is 1.58 GiB.")
    report = report_from_log_text(tagged("EngineCore", usage), "x")
    assert report.ranks[0].vllm_suggested_kv_cache_memory_bytes == -1160530022
    assert any("-1.08 GiB, below zero" in w and "no KV cache fits the budget" in w for w in report.warnings)
    positive = usage.replace("-1160530022", "1160530022").replace("(-1.08 GiB)", "(1.08 GiB)")
    assert not any("below zero" in w for w in report_from_log_text(tagged("EngineCore", positive), "x").warnings)


# --------------------------------------------------------------------------------------------
# 5. Lines retyped as `HH:MM:SS  (proc) LEVEL [file] message`, and the drafter's load


def test_a_retyped_line_is_a_record_and_a_clock_time_starts_a_line_of_its_own() -> None:
    """GIVEN (spark-vllm-docker#336) vLLM lines retyped with a clock time first and the process name
    without its pid, a dmesg line between them
    THEN each is a line of its own (the INFO record does not swallow the driver's line, which would
    make its OOM a handled one), and the drafter's load puts the OOM in phase load."""
    text = ("18:03:00  (Worker_TP0) INFO [gpu_model_runner.py:5332] Loading drafter model...\n"
            "18:03:03  kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]\n"
            "18:03:38  (EngineCore) ERROR [core.py:1349] EngineCore\n")
    report = report_from_log_text(text, "x")
    assert report.failure is not None and report.failure.kind is FailureKind.OOM
    assert report.failure.phase is not None and report.failure.phase.value == "load"
    assert report.failure.message.startswith("18:03:03  kernel: NVRM:") and "Loading drafter" not in report.failure.message


def test_a_retyped_record_reads_its_level_and_message() -> None:
    line = parse_line("12:00:01.5 (EngineCore) WARNING [gpu_worker.py:9] Available KV cache memory: 2.0 GiB", 0)
    assert (line.level, line.src, line.msg) == ("WARNING", "gpu_worker.py", "Available KV cache memory: 2.0 GiB")
