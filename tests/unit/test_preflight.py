"""`kvaudit run` refuses what it can check before booting vLLM (issue 15 item 7): each is exit 2
with one line that names the fix, within a second, with no vLLM process started. What only
vLLM can refuse comes back whole (tests/vllm/test_refusals_cpu.py)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from factories import real_json, write_json

from kvaudit.config import embedded_model_path
from kvaudit.engines.vllm.adapter import dcp_refusal, decode_attention_impl
from kvaudit.engines.vllm.boot import reason


def run_quickly(cli, *args: str):
    started = time.monotonic()
    result = cli("run", *args)
    assert time.monotonic() - started < 5  # refused before any vLLM import
    return result


def test_a_missing_model_folder(cli, tmp_path):
    result = run_quickly(cli, "--model", str(tmp_path / "no-such-model"))
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: model {tmp_path}/no-such-model does not exist: pass a model "
                                   f"directory with a config.json (or a Hugging Face model id)"]


@pytest.mark.skipif(Path("/proc/driver/nvidia/gpus").exists(), reason="counts CPU cores")
def test_more_tp_ranks_than_cpu_cores(cli):
    cores = len(os.sched_getaffinity(0))
    result = run_quickly(cli, "--tp", str(cores + 1))
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: tensor_parallel_size {cores + 1} needs {cores + 1} CPU cores on "
                                   f"the CPU backend; this machine has {cores}: lower --tp"]


@pytest.mark.skipif(Path("/proc/driver/nvidia/gpus").exists(), reason="counts CPU cores")
def test_pipeline_and_prefill_context_ranks_count_too(cli):
    # vLLM's world size is tp × pp × pcp: each of those ranks needs a core (DCP reuses the TP ranks)
    cores = len(os.sched_getaffinity(0))
    result = run_quickly(cli, "--tp", "1", "--", "--pipeline-parallel-size", "1",
                         "--prefill-context-parallel-size", str(cores + 1))
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: tensor_parallel_size 1 × prefill_context_parallel_size "
                                   f"{cores + 1} needs {cores + 1} CPU cores on the CPU backend; this machine has "
                                   f"{cores}: lower them"]


def test_a_tp_that_does_not_divide_the_heads(cli, tmp_path, monkeypatch):
    # two devices, whatever this machine has: on one core the core count would be refused first
    from kvaudit.engines.vllm import supervise
    monkeypatch.setattr(supervise, "_device_count", lambda: (2, supervise.CPU_CORES))
    model = tmp_path / "three-heads"
    shutil.copytree(embedded_model_path(), model)
    config = json.loads((model / "config.json").read_text())
    config["num_attention_heads"] = 3
    (model / "config.json").write_text(json.dumps(config))
    result = run_quickly(cli, "--model", str(model), "--dummy-weights", "--tp", "2")
    assert result.code == 2
    assert result.stderr_lines == ["kvaudit: error: tensor_parallel_size 2 does not divide the model's 3 attention "
                                   "heads: pass a --tp that divides 3"]


def test_a_max_model_len_above_the_models_limit(cli):
    result = run_quickly(cli, "--max-model-len", "200000")
    assert result.code == 2
    assert result.stderr_lines == ["kvaudit: error: max_model_len 200000 is above the model's limit "
                                   "(max_position_embeddings 163840 in config.json): lower --max-model-len to "
                                   "163840 or less"]


def test_a_dcp_that_does_not_divide_tp_is_refused_before_any_vllm_import(cli):
    result = run_quickly(cli, "--tp", "2", "--dcp", "4")
    assert result.code == 2
    assert result.stderr_lines == ["kvaudit: error: decode_context_parallel_size 4 must divide tensor_parallel_size "
                                   "2: DCP reuses the TP ranks; pass a --dcp that divides --tp 2"]


# DCP on attention that cannot return the softmax LSE is refused in the boot process, once vLLM's
# platform is known (tests/vllm/test_dcp_cpu.py, against the installed vLLM); these are the cases
# where kvaudit does not ask vLLM at all.

class Untouchable:
    def __getattr__(self, name):
        raise AssertionError(f"the platform was asked for {name}")


class GpuPlatform:
    device_name = "cuda"

    def is_cpu(self) -> bool:
        return False


def test_without_dcp_the_platform_is_not_asked():
    assert dcp_refusal(1, Untouchable(), mla=True) is None


def test_on_a_gpu_the_attention_is_left_to_vllms_own_check_in_the_worker():
    # there the backend depends on the device and the model's shapes, which only a worker has
    assert decode_attention_impl(GpuPlatform(), mla=True) is None
    assert dcp_refusal(2, GpuPlatform(), mla=True) is None


def test_vllms_validation_error_keeps_its_reason():
    pydantic = pytest.importorskip("pydantic")

    class ModelConfig(pydantic.BaseModel):
        max_model_len: int

        @pydantic.field_validator("max_model_len")
        @classmethod
        def limit(cls, v: int) -> int:
            raise ValueError(f"User-specified max_model_len ({v}) is greater than the derived max_model_len")

    with pytest.raises(pydantic.ValidationError) as info:
        ModelConfig(max_model_len=9)
    assert reason(info.value) == ("ModelConfig: max_model_len: User-specified max_model_len (9) is greater than the "
                                  "derived max_model_len")


def test_a_failing_verdict_proposes_no_max_model_len_of_zero(cli, tmp_path):
    # --gmu 0.01: nothing is left for KV, so no length fits; the lever to a length of 0 is useless
    data = real_json("run5")
    data["capacity"]["max_feasible_model_len"] = 0
    lever = next(lv for lv in data["capacity"]["levers"] if lv["name"] == "max_model_len")
    lever["flag"] = "--max-model-len=0"
    path = write_json(tmp_path / "zero.json", data)
    for fmt in ("table", "markdown"):
        out = cli("show", str(path), "-f", fmt, "--width", "200").stdout
        assert "--max-model-len=0" not in out
        assert "--gpu-memory-utilization=0.0426" in out  # the useful levers stay
