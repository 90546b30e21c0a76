"""vLLM's CPU platform decides the MLA backend, and with it chunked prefill, batching and block
size, by one switch: `torch.cpu._is_amx_tile_supported()` on x86 (CpuPlatform.get_attn_backend_cls
and check_and_update_config in vllm/platforms/cpu.py), unless `--attention-backend CPU_MLA` asks for
the reference backend. These tests give that switch both answers on any machine (no kernel runs:
only vLLM's engine config is resolved, in a fresh process) and check what kvaudit reads back
(engines/vllm/resolved.py) and the forced changes it names, so neither path depends on the CPU
the suite happens to run on.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from boot_processes import communicate_all

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

SCRIPT = r"""
import json, sys
import torch
amx, backend = sys.argv[1] == "1", sys.argv[2]
torch.cpu._is_amx_tile_supported = lambda: amx  # the switch vLLM's CPU platform decides by
from vllm.engine.arg_utils import EngineArgs
from vllm.platforms import current_platform
from vllm.v1.attention.selector import AttentionSelectorConfig
from kvaudit.config import embedded_model_path
from kvaudit.engines.vllm import resolved
args = dict(model=embedded_model_path(), load_format="dummy", skip_tokenizer_init=True, max_model_len=4096,
            max_num_batched_tokens=512, max_num_seqs=8, enforce_eager=True)
if backend != "auto":
    args["attention_backend"] = backend
config = EngineArgs(**args).create_engine_config()
chosen = current_platform.get_attn_backend_cls(
    config.attention_config.backend,
    attn_selector_config=AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype=None,
                                                 block_size=config.cache_config.block_size, use_mla=True))
print(json.dumps({"resolved": resolved.read(config), "backend": chosen.rpartition(".")[2]}))
"""


ASKED = [(True, "auto"), (False, "auto"), (True, "CPU_MLA")]
"""The decisions the tests below read: each in a fresh process of its own, the three started together (each
process spends its ~15 s importing vLLM, mostly on one core: one after another they took ~50 s of the CI's
2-core EPYC)."""


@pytest.fixture(scope="module")
def decisions() -> dict[tuple[bool, str], tuple[int, str, str]]:
    procs = {(amx, backend): subprocess.Popen([sys.executable, "-c", SCRIPT, "1" if amx else "0", backend],
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for amx, backend in ASKED}
    return communicate_all(procs)


def decide(decisions: dict[tuple[bool, str], tuple[int, str, str]], amx: bool, backend: str = "auto") -> dict:
    returncode, stdout, stderr = decisions[(amx, backend)]
    assert returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def _forced(decision: dict) -> list[str]:
    from kvaudit.config import AuditConfig
    asked = AuditConfig(max_model_len=4096, max_num_batched_tokens=512, max_num_seqs=8, enforce_eager=True)
    from kvaudit.engines.vllm.resolved import forced_changes
    name = {"AMXMLABackend": "AMX_MLA", "CPUMLABackend": "CPU_MLA"}[decision["backend"]]
    return forced_changes(asked, decision["resolved"], "cpu", name)


def test_with_amx_tiles_vllm_runs_amx_mla_with_chunked_prefill_and_kvaudit_names_no_change(decisions):
    decision = decide(decisions, amx=True)
    assert decision["backend"] == "AMXMLABackend"
    r = decision["resolved"]
    assert (r["enable_chunked_prefill"], r["max_num_batched_tokens"], r["block_size"]) == (True, 512, 128)
    assert _forced(decision) == []


def test_without_amx_tiles_vllm_runs_cpu_mla_whole_prompts_and_kvaudit_names_each_change(decisions):
    decision = decide(decisions, amx=False)
    assert decision["backend"] == "CPUMLABackend"
    r = decision["resolved"]
    assert (r["enable_chunked_prefill"], r["enable_prefix_caching"], r["max_num_batched_tokens"],
            r["block_size"]) == (False, False, 4096, 16)
    [line] = _forced(decision)
    assert "max_num_batched_tokens 512 → 4096, enable_chunked_prefill on → off, enable_prefix_caching on → off" \
        in line
    assert "runs the reference CPU_MLA backend where the CPU has no AMX tiles or --attention-backend asks for it" in line


def test_attention_backend_cpu_mla_forces_the_non_amx_path_on_a_cpu_with_amx(decisions):
    decision = decide(decisions, amx=True, backend="CPU_MLA")
    assert decision["backend"] == "CPUMLABackend"
    assert decision["resolved"]["attention_backend_asked"] == "CPU_MLA"
    assert (decision["resolved"]["enable_chunked_prefill"], decision["resolved"]["max_num_batched_tokens"]) == \
        (False, 4096)


@pytest.mark.parametrize("length, batched, chunked, shape", [
    (4096, 4096, False, (4096, 4096)),   # CPU_MLA: a whole prompt is one step
    (2048, 4096, False, (2048, 2048)),   # the platform's 2048 floor: the prompt is still at most max_model_len
    (4096, 512, True, (512, 4096)),      # AMX_MLA: the last 512-token chunk attends to all 4096
    (256, 512, True, (256, 256)),
])
def test_the_prefill_probe_takes_the_largest_step_vllm_can_schedule(length, batched, chunked, shape):
    from kvaudit.engines.vllm.worker_cpu import prefill_shape
    assert prefill_shape(length, batched, chunked) == shape


@pytest.mark.parametrize("length, batched, seqs, shape", [
    (1024, 2048, 4, (2, 2048)),   # CPU_MLA at max_model_len 1024: two whole prompts share a step
    (1500, 2048, 4, (2, 2048)),   # a prompt of 1500 and one of 548
    (512, 2048, 4, (4, 2048)),
    (512, 2048, 2, (2, 1024)),    # no more prompts in a step than max_num_seqs
    (4096, 4096, 8, (1, 4096)),   # one prompt fills the step: the single-request probe is the step
    (4096, 512, 8, (1, 512)),     # AMX_MLA's 512-token chunks: one request's chunk fills the step
    (1024, 4096, 8, (4, 4096)),   # chunked prefill too: four whole 1024-token prompts fit a 4096-token step
])
def test_the_probe_also_runs_the_fullest_step_of_whole_prompts(length, batched, seqs, shape):
    # The EPYC, max_model_len 1024, 4 sequences, malloc's mmap threshold fixed (so RSS repeats to 0.1 MiB):
    # without this step, --verify's batch ran 38.7 MiB and sampling 44.3 MiB over; with it, +32.0 and +22.8
    from kvaudit.engines.vllm.worker_cpu import batch_prefill_shape
    assert batch_prefill_shape(length, batched, seqs) == shape


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_heap_the_probe_freed_is_given_back_before_the_replay_reading():
    # 64 MiB of 64 KiB blocks (below glibc's mmap threshold: they live in the heap), freed under the
    # highest of them, still live, stay resident until malloc_trim: the replay phase's end reading would
    # charge them as torch_other beside the peak that already holds them (CPU flags 185-347 MiB cautious)
    import ctypes

    from kvaudit.engines.vllm.worker_cpu import trim_heap
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(64 << 10) for _ in range(1025)]
    for b in blocks:
        ctypes.memset(b, 1, 64 << 10)
    guard = max(blocks)  # keeps the freed ones below the heap's top, which free() alone would give back
    blocks.remove(guard)
    for b in blocks:
        libc.free(b)
    released = trim_heap()
    libc.free(guard)
    assert released is not None and released >= 48 << 20, released


@pytest.mark.parametrize("amx", [True, False])
def test_the_rank_journals_the_switch_as_vllm_reads_it(monkeypatch, amx):
    # AuditCPUWorker.init_device journals amx_tiles(); the supervisor names the CPU_MLA reason from it when a
    # boot dies before KV (supervise.forced_changes), so it must follow vLLM's own test on either CPU
    import torch
    from vllm.platforms import current_platform
    from vllm.platforms.interface import CpuArchEnum

    from kvaudit.engines.vllm.worker_cpu import amx_tiles
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert amx_tiles() is (amx and current_platform.get_cpu_architecture() == CpuArchEnum.X86)
