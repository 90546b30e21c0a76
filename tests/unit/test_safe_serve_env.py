"""The allocator settings a boot ran under go with its safe flags (capacity.safe_serve_env): the same
KV bytes fit or not with torch's expandable segments or glibc's mmap threshold, so a deployment that
pastes the flags needs the settings too. Chosen by name from the boot's memory environment; shown
under the flags in the table and the HTML page, named in a written config's header, and kept
through a report's JSON. Under a failed verify, `show` names the allocator setting to try."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from factories import boot_rank, report

from kvaudit.capacity import allocator_env
from kvaudit.render import summary
from kvaudit.render.html import report_banner
from kvaudit.render.summary import ENV_LABEL, capacity_lines
from kvaudit.schema import Environment, Source, to_jsonable
from kvaudit.validate import report_from_json as parse_report
from kvaudit.write_config import run_config


def environment(**env: str) -> Environment:
    return Environment(device_name="NVIDIA H200", driver="570.1", cuda="12.8", torch="2.9.0", vllm="0.32.0",
                       env={"VLLM_USE_V1": "1", "CUDA_VISIBLE_DEVICES": "0", **env})


@pytest.mark.parametrize("env, expected", [
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",)),
    ({"PYTORCH_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512"},
     ("PYTORCH_ALLOC_CONF=expandable_segments:True,max_split_size_mb:512",)),
    ({"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"},
     ("MALLOC_MMAP_THRESHOLD_=131072", "MALLOC_TRIM_THRESHOLD_=0")),
    ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /opt/lib/libiomp5.so"},
     ("LD_PRELOAD='/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /opt/lib/libiomp5.so'",)),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=1", "TCMALLOC_RELEASE_RATE": "10"},
     ("GLIBC_TUNABLES=glibc.malloc.arena_max=1", "TCMALLOC_RELEASE_RATE=10")),
    # not allocator settings: a name that merely starts like one, torch's other variables, vLLM's
    ({"PYTORCH_CUDA_ALLOC_CONF_X": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1", "LD_PRELOADED": "x"}, None),
    ({}, None),
])
def test_allocator_settings_are_chosen_by_name_and_quoted_for_a_shell(env, expected):
    assert allocator_env({"VLLM_USE_V1": "1", **env}) == expected


def test_a_report_carries_the_allocator_settings_with_its_flags_through_json():
    rep = report([boot_rank()], environment=environment(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"))
    assert rep.capacity.safe_serve_flags[0].startswith("--kv-cache-memory-bytes=")
    assert rep.capacity.safe_serve_env == ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",)
    data = json.loads(json.dumps(to_jsonable(rep)))
    assert data["capacity"]["safe_serve_env"] == ["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]
    assert parse_report(data).capacity.safe_serve_env == rep.capacity.safe_serve_env


def test_without_allocator_settings_the_report_has_no_such_key():
    rep = report([boot_rank()], environment=environment())
    assert rep.capacity.safe_serve_flags and rep.capacity.safe_serve_env is None
    data = json.loads(json.dumps(to_jsonable(rep)))
    assert "safe_serve_env" not in data["capacity"]
    assert parse_report(data).capacity.safe_serve_env is None
    assert ENV_LABEL not in dict(capacity_lines(rep))


def test_the_settings_are_shown_under_the_flags_and_named_in_a_written_config():
    rep = report([boot_rank()], environment=environment(MALLOC_MMAP_THRESHOLD_="131072"))
    lines = dict(capacity_lines(rep))
    assert lines[ENV_LABEL] == "MALLOC_MMAP_THRESHOLD_=131072"
    labels = [label for label, _ in capacity_lines(rep)]
    assert labels.index(ENV_LABEL) == labels.index("safe vllm serve flags") + 1
    assert "MALLOC_MMAP_THRESHOLD_=131072</code>" in report_banner(rep)
    written = run_config(asked=rep.config, deployment=None, report=rep, report_name="r.json")
    header = [line for line in written.text.splitlines() if line.startswith("#")]
    assert any("measured with MALLOC_MMAP_THRESHOLD_=131072 in the environment" in line for line in header), header


def test_a_report_with_no_safe_flags_has_no_settings_to_go_with_them():
    # the selftest serves no vLLM: it has no flags to paste
    rep = report([boot_rank()], environment=environment(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"),
                 source=Source.SELFTEST)
    assert rep.capacity.safe_serve_flags == () and rep.capacity.safe_serve_env is None
    assert "paste" not in report_banner(rep)


def test_a_bad_value_in_a_report_is_refused_with_its_path():
    data = json.loads(json.dumps(to_jsonable(report([boot_rank()], environment=environment()))))
    data["capacity"]["safe_serve_env"] = [1]
    from kvaudit.errors import BadInputError
    with pytest.raises(BadInputError, match=r"capacity\.safe_serve_env: expected a list of strings"):
        parse_report(data)


# --------------------------------------------------------------------------------------------
# the way to try, under a failed verify's table


def cpu_report_with_a_failed_verify(**env: str):
    # a real CPU `--verify --repeat 2 --cold` report whose sampling scenario ran 46.3 MiB over (glibc's default)
    data = json.loads((Path(__file__).parents[1] / "benchmarks" / "results"
                       / "cpu-verify-repeated-2026-12-05-trim2.json").read_text())
    data["environment"]["env"].update(env)
    return parse_report(data)


def test_a_cpu_verify_that_failed_under_glibcs_moving_threshold_names_the_setting_to_try():
    rep = cpu_report_with_a_failed_verify()
    assert rep.verify is not None and not rep.verify.ok and rep.environment.device_name.startswith("CPU")
    assert summary.verify_allocator_lines(rep) == [summary.HOST_HEAP_ADVICE]   # RSS: no cache line to give


@pytest.mark.parametrize("env", [{"MALLOC_MMAP_THRESHOLD_": "131072"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"},
                                 {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}])
def test_no_advice_where_the_threshold_is_set_or_another_allocator_runs(env):
    assert summary.verify_allocator_lines(cpu_report_with_a_failed_verify(**env)) == []


def test_no_host_advice_for_a_gpu_report_or_a_verify_that_held():
    gpu = cpu_report_with_a_failed_verify()
    gpu = replace(gpu, environment=replace(gpu.environment, device_name="NVIDIA H200"))
    assert summary.verify_allocator_lines(gpu) == []
    held = cpu_report_with_a_failed_verify()
    assert held.verify is not None
    held = replace(held, verify=replace(held.verify, scenarios=tuple(replace(s, ok=True) for s in held.verify.scenarios)))
    assert summary.verify_allocator_lines(held) == []


@pytest.mark.parametrize(("env", "chosen"), [
    ({}, False), ({"MALLOC_MMAP_THRESHOLD_": "65536"}, True), ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1"}, True),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}, False), ({"LD_PRELOAD": "/usr/lib/libtcmalloc.so"}, True),
])
def test_what_counts_as_an_allocator_the_environment_chose(env, chosen):
    """`kvaudit run` holds glibc's mmap threshold on CPU only where the environment chose none of these."""
    from kvaudit.capacity import host_allocator_chosen
    assert host_allocator_chosen(env) is chosen


@pytest.mark.parametrize(("env", "unset"), [
    ({}, ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")),
    ({"DNNL_PRIMITIVE_CACHE_CAPACITY": "1024"}, ("LRU_CACHE_CAPACITY",)),  # oneDNN's older name counts as set
    ({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0", "LRU_CACHE_CAPACITY": "8"}, ()),
])
def test_kvaudit_run_holds_only_the_kernel_caches_the_environment_left_to_their_default(env, unset):
    from kvaudit.capacity import jit_caches_unset
    assert jit_caches_unset(env) == tuple((name, "32") for name in unset)


def test_the_kernel_caches_capacities_go_with_the_safe_flags_as_allocator_settings_do():
    from kvaudit.capacity import allocator_env
    env = {"LRU_CACHE_CAPACITY": "32", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32", "DNNL_PRIMITIVE_CACHE_CAPACITY": "8",
           "MALLOC_MMAP_THRESHOLD_": "131072", "OMP_NUM_THREADS": "2"}
    assert allocator_env(env) == ("DNNL_PRIMITIVE_CACHE_CAPACITY=8", "LRU_CACHE_CAPACITY=32",
                                  "MALLOC_MMAP_THRESHOLD_=131072", "ONEDNN_PRIMITIVE_CACHE_CAPACITY=32")


@pytest.mark.parametrize(("env", "capacities"), [
    ({}, (1024, 1024)), ({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32", "LRU_CACHE_CAPACITY": "8"}, (32, 8)),
    ({"DNNL_PRIMITIVE_CACHE_CAPACITY": "16"}, (16, 1024)), ({"LRU_CACHE_CAPACITY": "many"}, (1024, 1024)),
    ({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64", "DNNL_PRIMITIVE_CACHE_CAPACITY": "16"}, (64, 1024)),  # oneDNN's order
])
def test_the_kernel_caches_capacities_are_the_ones_a_process_of_the_environment_runs_with(env, capacities):
    from kvaudit.capacity import jit_cache_capacities
    assert jit_cache_capacities(env) == capacities
