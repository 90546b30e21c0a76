"""Reports from logs feed `kvaudit diff` like reports from runs, and ingest needs neither torch nor vllm."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kvaudit.diff import diff_reports
from kvaudit.engines.logs import report_from_log_text
from kvaudit.input_text import read_text
from kvaudit.schema import NON_KV_OWNERS, Owner

FIXTURES = Path(__file__).parent.parent / "fixtures" / "logs"
GiB = 1 << 30


def load(name: str, text: str | None = None):
    return report_from_log_text(text if text is not None else read_text(FIXTURES / name), name)


def test_different_configs_are_not_comparable() -> None:
    """GIVEN two real CPU boots, TP=1 and TP=2, of the same model
    THEN the diff says they are not comparable and lists tensor_parallel_size, and the batch the
    scheduler resolved for each (its `Chunked prefill is enabled with max_num_batched_tokens=` line)."""
    diff = diff_reports(load("cpu-0.32-tp1-ok.log"), load("cpu-0.32-tp2-ok.log"))
    assert diff.comparable is False
    assert [(k.knob, k.a, k.b) for k in diff.knob_differences] == [("tensor_parallel_size", 1, 2),
                                                                   ("max_num_batched_tokens", 4096, 8192)]
    assert ("env.VLLM_CPU_OMP_THREADS_BIND", "auto", "0|1") in [(e.key, e.a, e.b) for e in diff.environment_differences]


def test_same_config_two_images() -> None:
    """GIVEN the fork's v20 log and a v19 variant of it (lighter weights, no MRV2 graph accounting,
    more KV), with the same knobs
    THEN the diff is comparable, weights moved by +0.42 GiB on rank 0, and KV fell by 1.55 GiB."""
    v20_text = read_text(FIXTURES / "gpu-fork-v20-tp2-dcp2.log")
    v19_text = "\n".join(line for line in v20_text.splitlines()
                         if "MRV2" not in line and "B12X sparse" not in line)
    v19_text = (v19_text.replace("Model loading took 20.42 GiB", "Model loading took 20.0 GiB")
                .replace("Available KV cache memory: 3.25 GiB", "Available KV cache memory: 4.8 GiB")
                .replace("Current kv cache memory in use is 3.25 GiB", "Current kv cache memory in use is 4.8 GiB")
                .replace("(v0.30.1.dev12+gb12x)", "(v0.30.1.dev3+gb12x)"))
    diff = diff_reports(load("v19.log", v19_text), load("v20.log", v20_text), "v19.log", "v20.log")
    assert diff.comparable is True and diff.knob_differences == ()
    weights = next(d for d in diff.owners if d.owner is Owner.WEIGHTS and d.rank == 0)
    assert weights.delta_bytes == 21_925_808_046 - 21_474_836_480  # 20.42 − 20.0 GiB
    assert diff.capacity["kv_available_delta_bytes"] == 3_489_660_928 - 5_153_960_755  # 3.25 − 4.8 GiB
    assert diff.dominant_owner in NON_KV_OWNERS
    assert ("engine.version", "0.30.1.dev3+gb12x", "0.30.1.dev12+gb12x") in [
        (e.key, e.a, e.b) for e in diff.environment_differences]
    assert diff.verdict["a"].value == diff.verdict["b"].value == "ok"


def test_booted_vs_failed() -> None:
    diff = diff_reports(load("cpu-0.32-tp1-ok.log"), load("cpu-0.32-does-not-fit.log"))
    assert diff.verdict["a"].value == "ok" and diff.verdict["b"].value == "fail"
    assert {k.knob for k in diff.knob_differences} >= {"max_model_len", "gpu_memory_utilization", "model"}


def test_ingest_imports_neither_torch_nor_vllm() -> None:
    code = ("import sys; from pathlib import Path; from kvaudit.engines.inputs import load_report; "
            f"load_report(Path({str(FIXTURES / 'gpu-0.32-v1-tp2-ok.log')!r})); "
            "bad = [m for m in ('torch', 'vllm') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
