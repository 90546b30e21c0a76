"""Pasted commands as vLLM's own parser reads them (a paste-reading gap left open in stop 43):
FlexibleArgumentParser turns `_` in a `--` flag's name into `-` (`--max_model_len 8192`), argparse
takes a prefix that names one flag alone (`--gpu-memory-util 0.9`), and sizes take vLLM's
human-readable suffixes (`--max-model-len 32k`). tests/vllm/test_serve_config_vllm.py checks the same
lines against vLLM's real parser.
"""

from __future__ import annotations

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.facts import FLAG_PREFIXES, FactKind, command_flag, facts_from_message


def command_args(line: str) -> dict[str, float | int | bool]:
    return dict(f.value for f in facts_from_message(line) if f.kind is FactKind.COMMAND_ARG)


@pytest.mark.parametrize("line, args", [
    ("python -m vllm.entrypoints.openai.api_server --model m --tensor_parallel_size 2 --gpu_memory_utilization 0.85 "
     "--max_model_len 8192", {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.85, "max_model_len": 8192}),
    ("vllm serve m --gpu-memory-util 0.9 --max-model 4096 --tensor-parallel 4", {
        "gpu_memory_utilization": 0.9, "max_model_len": 4096, "tensor_parallel_size": 4}),
    ("vllm serve m --max-model-len 32k --block_size=32", {"max_model_len": 32_000, "block_size": 32}),
    ("vllm serve m --max-model-len 32K", {"max_model_len": 32_768}),
    ("vllm serve m --decode_context_parallel_size 2 --pipeline-parallel 2 --data_parallel_size 2", {
        "decode_context_parallel_size": 2, "pipeline_parallel_size": 2, "data_parallel_size": 2}),
    ("vllm serve m --enforce_eager", {"enforce_eager": True}),
    ("vllm serve m --no_enforce_eager", {"enforce_eager": False}),
    # not this knob: a prefix too short to name it alone, another flag it is a prefix of, vLLM's refusals
    ("vllm serve m --gp 0.9 --max 4096 --tensor 2", {}),
    ("vllm serve m --data-parallel-size-local 2 --data-parallel 2 --max-model-length 4096", {}),
    ("vllm serve m --max-model-len 1.5K --gpu-memory-utilization 0.9k", {}),
])
def test_a_pasted_flag_is_read_as_vllms_parser_reads_it(line: str, args: dict[str, float | int | bool]) -> None:
    assert command_args(line) == args


@pytest.mark.parametrize("flag", sorted(FLAG_PREFIXES))
def test_every_prefix_from_the_shortest_to_the_whole_name_sets_the_flags_knob(flag: str) -> None:
    shortest = FLAG_PREFIXES[flag]
    knob = command_flag(flag)
    assert knob is not None and flag.startswith(shortest)
    assert all(command_flag(flag[:n]) == knob for n in range(len(shortest), len(flag) + 1))
    assert command_flag(shortest[:-1]) is None
    assert command_flag("--" + flag[2:].replace("-", "_")) == knob  # `--max_model_len`


def test_a_log_whose_command_uses_vllms_other_spellings_states_its_knobs() -> None:
    text = ("$ vllm serve org/m --tensor_parallel_size 2 --gpu-memory-util 0.95 --max-model-len 16k\n"
            "(Worker_TP0 pid=1) INFO 05-01 10:00:00 [gpu_worker.py:100] Available KV cache memory: 10.00 GiB\n"
            "(Worker_TP1 pid=2) INFO 05-01 10:00:00 [gpu_worker.py:100] Available KV cache memory: 10.00 GiB\n")
    config = report_from_log_text(text, "x").config
    assert (config.tensor_parallel_size, config.gpu_memory_utilization, config.max_model_len) == (2, 0.95, 16_000)
