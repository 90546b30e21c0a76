"""`kvaudit run --gmu X` on vLLM's CPU backend: vLLM's CPU worker refuses to start where ceil(node total ×
GMU) is above what the NUMA node has available (vllm/v1/worker/cpu_worker.py init_device), 28 s into a boot;
kvaudit's preflight refuses the same before any boot (engines/vllm/supervise.py _check_node_memory). The
node's figures are stood in, so the test decides the same on every machine."""

from __future__ import annotations

import pytest

from kvaudit.config import AuditConfig, embedded_model_path
from kvaudit.engines.probes import host
from kvaudit.engines.vllm import supervise
from kvaudit.errors import UsageError

GiB = 1 << 30


@pytest.fixture
def node(monkeypatch):
    monkeypatch.setattr(supervise, "_device_count", lambda: (2, supervise.CPU_CORES))
    monkeypatch.setattr(host, "node_meminfo", lambda node=0: (10 * GiB, 5 * GiB))
    monkeypatch.setattr(host, "current_node", lambda: 0)


def test_a_gmu_above_what_the_node_has_available_is_refused_naming_the_most_that_passes(node):
    with pytest.raises(UsageError) as info:
        supervise.preflight(AuditConfig(model=embedded_model_path(), gpu_memory_utilization=0.6))
    assert str(info.value) == ("--gmu 0.6 asks 6.00 GiB of NUMA node 0's 10.00 GiB, and 5.00 GiB is available now: "
                               "vLLM's CPU worker refuses that at start; pass --gmu 0.5 or less, or leave --gmu out "
                               "for kvaudit's CPU default")


def test_vllm_s_own_bound_passes_and_no_gmu_is_kvaudit_s_to_pick(node):
    supervise.preflight(AuditConfig(model=embedded_model_path(), gpu_memory_utilization=0.5))  # ceil(5 GiB) = 5 GiB
    supervise.preflight(AuditConfig(model=embedded_model_path()))


def test_on_a_gpu_the_node_s_memory_is_not_asked(monkeypatch):
    monkeypatch.setattr(supervise, "_device_count", lambda: (1, "GPUs"))
    monkeypatch.setattr(host, "node_meminfo", lambda node=0: (10 * GiB, 1 * GiB))
    supervise.preflight(AuditConfig(model=embedded_model_path(), gpu_memory_utilization=0.98))


def test_the_gmu_it_names_shares_the_node_among_this_node_s_ranks(node):
    with pytest.raises(UsageError, match=r"pass --gmu 0\.25 or less"):
        supervise.preflight(AuditConfig(model=embedded_model_path(), gpu_memory_utilization=0.6,
                                        tensor_parallel_size=2))


@pytest.mark.parametrize("files, expected", [
    ({}, (64 * GiB, 40 * GiB)),                                                   # no cgroup: the node's
    ({"memory.max": "max\n", "memory.current": "1\n"}, (64 * GiB, 40 * GiB)),   # v2, no limit
    ({"memory.max": f"{16 * GiB}\n", "memory.current": f"{4 * GiB}\n"}, (16 * GiB, 12 * GiB)),  # a 16 GiB pod
    ({"memory.max": f"{128 * GiB}\n", "memory.current": "0\n"}, (64 * GiB, 40 * GiB)),  # a limit above the node
    ({"memory/memory.limit_in_bytes": f"{8 * GiB}", "memory/memory.usage_in_bytes": f"{7 * GiB}"},
     (8 * GiB, 1 * GiB)),                                                         # v1
    ({"memory/memory.limit_in_bytes": str(1 << 63)}, (64 * GiB, 40 * GiB)),        # v1's "no limit"
])
def test_a_container_s_memory_limit_clamps_the_node_as_vllm_does(tmp_path, files, expected):
    # vLLM 0.32's get_memory_node_info: a pod's --gmu is a share of the pod's limit, not of the host's node
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert host.cgroup_clamp(64 * GiB, 40 * GiB, root=tmp_path) == expected
