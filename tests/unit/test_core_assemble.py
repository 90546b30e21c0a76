"""kvaudit.assemble: the one assembly path every source takes (BootRecord → Report)."""

from __future__ import annotations

import dataclasses

import pytest
from factories import BOOT_REQUESTED, GEOMETRY, boot_phases, config, gib, plain_rank, split_limited_boot_phases

from kvaudit.assemble import (
    BootRecord,
    MeasuredRank,
    StatedRank,
    assemble,
    rank_report,
    verify_summary,
)
from kvaudit.engines.failures import (
    CAUGHT_SIGNAL,
    CAUSES,
    CPU_KV_SHORT,
    CUDA_CHECK,
    LINKER_NO_LIBCUDA,
    NATIVE_FRAME,
    SHELL_SIGNALS,
    SIGNAL_REPORT,
    classify_line,
)
from kvaudit.engines.logs.facts import FactKind, facts_from_message
from kvaudit.ledger import owners_from_readings
from kvaudit.schema import Engine, Environment, Owner, Phase, PhaseRecord, Source


def _record(ranks, **kwargs) -> BootRecord:
    return BootRecord(source=kwargs.pop("source", Source.RUN), config=config(), engine=Engine(name="vllm"),
                      environment=kwargs.pop("environment", Environment()), ranks=tuple(ranks), geometry=GEOMETRY,
                      **kwargs)


def test_a_null_reading_stays_null_and_leaves_kv_unallocated_unknown():
    owners = owners_from_readings({Owner.WEIGHTS: gib(10), Owner.KV_CACHE: gib(50)}, requested=BOOT_REQUESTED)
    assert list(owners) == list(Owner)
    assert owners[Owner.PERSISTENT] is None and owners[Owner.KV_UNALLOCATED] is None


def test_stated_owners_balance_over_the_budget_without_torch_other():
    stated = {Owner.WEIGHTS: gib(10), Owner.PERSISTENT: gib(1), Owner.ACTIVATION_PEAK: gib(2),
              Owner.GRAPH_POOL: gib(1), Owner.NON_TORCH: gib(1), Owner.KV_CACHE: gib(50)}
    owners = owners_from_readings(stated, requested=gib(70))
    assert owners[Owner.TORCH_OTHER] is None and owners[Owner.KV_UNALLOCATED] == gib(5)
    assert owners_from_readings(stated, requested=None)[Owner.KV_UNALLOCATED] is None


@pytest.mark.parametrize("estimate, actual, stated, graph_pool", [
    (gib(1), gib(2), None, gib(2)),        # the larger of the two pools
    (gib(1), None, None, gib(1)),
    (None, None, None, None),              # nothing known: unknown, never 0
    (gib(1), gib(2), gib(3), gib(3)),      # a figure the source states wins
])
def test_graph_pool_from_the_two_pools_unless_stated(estimate, actual, stated, graph_pool):
    owners = owners_from_readings({Owner.GRAPH_POOL: stated}, requested=None, graph_pool_estimate_bytes=estimate,
                                  graph_pool_actual_bytes=actual)
    assert owners[Owner.GRAPH_POOL] == graph_pool


def test_a_stated_rank_keeps_everything_but_the_balance():
    rank = plain_rank(0, kv_available=gib(50), owners={Owner.WEIGHTS: gib(10)}, graph_pool_estimate_bytes=gib(1))
    out = rank_report(StatedRank(rank))
    assert out.kv_available_bytes == gib(50) and out.owners[Owner.WEIGHTS] == gib(10)
    assert out.owners[Owner.GRAPH_POOL] == gib(1) and out.owners[Owner.KV_UNALLOCATED] is None


def test_a_measured_rank_goes_through_the_ledger():
    phases = tuple(boot_phases().values())
    out = rank_report(MeasuredRank(0, phases, device_total_bytes=gib(80), gpu_memory_utilization=0.875,
                                   others_bytes=0, graph_pool_estimate_bytes=gib(1), kv_cache_bytes=gib(50)))
    assert out.requested_bytes == gib(70) and out.owners[Owner.WEIGHTS] == gib(10)
    assert out.kv_available_bytes is not None and out.naive_kv_available_bytes is not None


def test_the_record_not_the_source_name_decides_the_serve_flags():
    rank = plain_rank(0, kv_available=gib(1))   # max_model_len 131072 needs 16 GiB: does not fit
    with_vllm = assemble(_record([StatedRank(rank)]))
    without = assemble(_record([StatedRank(rank)], serves_vllm=False))
    assert with_vllm.capacity.safe_serve_flags and without.capacity.safe_serve_flags == ()


def test_planted_sizes_give_accuracy_and_an_empty_one_without_plants():
    phases = tuple(boot_phases().values())
    measured = MeasuredRank(0, phases, device_total_bytes=gib(80), gpu_memory_utilization=0.875, others_bytes=0,
                            graph_pool_estimate_bytes=gib(1), kv_cache_bytes=gib(50),
                            planted={Owner.WEIGHTS: gib(10)})
    rep = assemble(_record([measured], planted_sizes=True))
    assert [(a.owner, a.planted_bytes, a.measured_bytes) for a in rep.accuracy] == [(Owner.WEIGHTS, gib(10), gib(10))]
    assert assemble(_record([MeasuredRank(0, phases)], planted_sizes=True)).accuracy == ()
    assert assemble(_record([MeasuredRank(0, phases)])).accuracy is None


def test_verify_summary_takes_the_worst_rank():
    verify = verify_summary([(0, gib(60), gib(70)), (1, gib(69), gib(70)), (2, None, gib(70))], error=None,
                            prompt_tokens=8, decode_tokens=4, repeats=1, oom_count=0)
    assert verify.ok and verify.true_peak_bytes == gib(69) and verify.slack_bytes == gib(1)
    assert [r.slack_bytes for r in verify.ranks] == [gib(10), gib(1), None]
    over = verify_summary([(0, gib(71), gib(70))], error=None, prompt_tokens=None, decode_tokens=None, repeats=1,
                          oom_count=0)
    assert not over.ok and over.error == "true peak above the requested budget"
    none = verify_summary([(0, None, gib(70))], error="boom", prompt_tokens=None, decode_tokens=None, repeats=1,
                          oom_count=0)
    assert none.error == "boom" and none.true_peak_bytes is None


SAMPLES = {
    "To serve at least one request": "ValueError: To serve at least one request with the model's max seq len (8192), "
                                     "(1.00 GiB KV cache is needed, which is larger than the available KV cache memory "
                                     "(0.50 GiB).",
    "stored in KV cache": "ValueError: The model's max seq len (8192) is larger than the maximum number of tokens that "
                          "can be stored in KV cache (4096).",
    "To serve at least one": "ValueError: To serve at least one",
    "NV_ERR_NO_MEMORY": "kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]",
    "is larger than the maximum number of tokens that can be": "ValueError: The model's max seq len (32768) is larger "
                                                              "than the maximum number of tokens that can be s",
    "not supported": "NotImplementedError: FP8 KV cache with MLA is not supported on this backend",
    "exceeds total_hbm_limit": "ValueError: total_hbm_used_gb=647.4GiB exceeds total_hbm_limit_gb=606.37GiB by "
                               "41.02GiB. Please consider increasing --gpu-memory-utilization from 0.8",
    CPU_KV_SHORT: "ValueError: Available memory on node 0 (1.0/8.0 GiB) on kv cache allocation is less than "
                      "requested memory for kv (2.0 GiB)",
    # exception lines of their own, not inside another exception's message
    "SystemExit: 15": "SystemExit: 15",
    "KeyboardInterrupt": "KeyboardInterrupt: MQLLMEngine terminated",
    # a crash in native code, as the shell, Ray's handler, UCX and vLLM's C++ check print it (no exception line)
    **{words: f"{words} (core dumped)" for words in SHELL_SIGNALS},
    SIGNAL_REPORT: "*** SIGSEGV received at time=1746566409 on cpu 131 ***",
    CAUGHT_SIGNAL: "[gpu01:376235:0:376235] Caught signal 11 (Segmentation fault: address not mapped to object)",
    NATIVE_FRAME: "14 0x0000000000004493 ???()  /usr/lib/x86_64-linux-gnu/libffi.so.8:0",
    CUDA_CHECK: "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:432 'invalid argument'",
    LINKER_NO_LIBCUDA: "/usr/bin/ld: cannot find -lcuda",
    # a launcher's stop of the boot: kubelet's event, systemd's and a wrapper's line
    "failed liveness probe, will be restarted": "Normal Killing 2m kubelet Container vllm failed liveness probe, will "
                                                "be restarted",
    "failed startup probe, will be restarted": "Container vllm failed startup probe, will be restarted",
    "start operation timed out. Terminating.": "vllm.service: start operation timed out. Terminating.",
    "failed to start within timeout": "[Error] (WrappedServer) vllm-server failed to start within timeout",
}


@pytest.mark.parametrize("cause", CAUSES, ids=lambda c: c.anchor)
def test_run_and_ingest_classify_a_line_the_same_way(cause):
    line = SAMPLES.get(cause.anchor, f"RuntimeError: {cause.anchor} (a sample)")
    failures = [f.value for f in facts_from_message(line) if f.kind is FactKind.FAILURE]
    assert classify_line(line) is cause.kind
    assert [(f.kind, f.phase, f.priority) for f in failures] == [(cause.kind, cause.phase, cause.priority)]


def test_a_warning_that_something_is_not_supported_is_no_failure():
    line = "WARNING 12-02 21:01:09 [cuda.py:99] Custom allreduce is not supported on this platform"
    assert classify_line(line) is None
    assert not [f for f in facts_from_message(line) if f.kind is FactKind.FAILURE]


def test_no_core_module_imports_an_engine():
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[2] / "kvaudit"
    core = [root / n for n in ("assemble.py", "report.py", "ledger.py", "schema.py", "diff.py", "plan.py")]
    core += sorted((root / "render").glob("*.py"))
    for path in core:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.startswith("kvaudit.engines")], path.name


def test_phases_of_a_stated_rank_are_kept_in_order():
    phases = (PhaseRecord(name=Phase.LOAD, seconds=1.0), PhaseRecord(name=Phase.KV, detail="fixed 1.00 GiB"))
    out = rank_report(StatedRank(plain_rank(0, kv_available=None, phases=phases)))
    assert out.phases == phases


@pytest.mark.parametrize("version, device, after_warmup", [
    ("0.34.0", "NVIDIA H200", True), ("0.34.1rc1", None, True),  # a GPU run, a log (no device name)
    ("0.33.0", "NVIDIA H200", False), (None, "NVIDIA H200", False),  # before 0.34, or unknown: sized from the profile
    ("0.34.0", "CPU (NUMA node 0)", False),  # vLLM's CPU backend has no extensible KV cache
])
def test_serve_sizes_after_warmup_from_vllm_0_34_on_a_gpu(version, device, after_warmup):
    from kvaudit.assemble import serves_sizing_after_warmup
    record = dataclasses.replace(_record([]), engine=Engine(name="vllm", version=version),
                                 environment=Environment(device_name=device))
    assert serves_sizing_after_warmup(record) is after_warmup


def test_the_workers_allocator_decides_whether_the_probe_stands_for_the_replays_reserve():
    """The allocator the worker recorded reaches the ledger and the report: under expandable
    segments a probed rank is charged the probe, not the profile pass's reserved transient
    (ledger.activation_peak). The supervisor's environment decides nothing: a Ray worker has its own."""
    phases = split_limited_boot_phases()  # the profile pass: 3 GiB reserved for its 2 GiB allocated
    rank = MeasuredRank(0, tuple(phases.values()), device_total_bytes=gib(80), gpu_memory_utilization=0.875,
                        others_bytes=0, graph_pool_estimate_bytes=gib(1), kv_cache_bytes=gib(50),
                        prefill_probe_transient_bytes=gib(2.5))
    default = assemble(_record([rank], environment=Environment(
        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})))
    expandable = assemble(_record([dataclasses.replace(rank, allocator_expandable_segments=True)]))
    assert default.ranks[0].owners[Owner.ACTIVATION_PEAK] == gib(3)
    assert default.ranks[0].allocator_expandable_segments is None
    assert expandable.ranks[0].allocator_expandable_segments is True
    assert expandable.ranks[0].owners[Owner.ACTIVATION_PEAK] == gib(2.5)
    assert expandable.ranks[0].kv_available_bytes == default.ranks[0].kv_available_bytes + gib(0.5)
