"""`kvaudit run … -- --nnodes N --node-rank K --master-addr ADDR`: an ADDR that is neither an IP address
nor a host name is refused before any boot (a node waited in silence at the README's `HEAD_IP` placeholder
until the timeout). Decided from the text alone, so the answer is the same on every machine and network."""

from __future__ import annotations

import pytest

from kvaudit.config import AuditConfig
from kvaudit.engines.vllm import multinode


def config(**extra) -> AuditConfig:
    return AuditConfig(tensor_parallel_size=2, extra_args={"nnodes": 2, "node_rank": 1, **extra})


@pytest.mark.parametrize("address", ["HEAD_IP", "head node", "-head", "a..b", "x" * 64 + ".example", "", "http://h"])
def test_what_names_no_host_is_refused_naming_the_fix(address):
    assert multinode.master_addr_refusal(config(master_addr=address)) == (
        f"--master-addr {address} is neither an IP address nor a host name (a host name holds letters, digits, "
        f"hyphens and dots only): pass node 0's IP address or host name")


@pytest.mark.parametrize("address", ["10.0.0.1", "::1", "[::1]", "2001:db8::5", "fe80::1%eth0", "head-0",
                                     "vllm-head.default.svc.cluster.local", "node7.", "localhost"])
def test_an_address_or_a_host_name_passes_resolvable_now_or_not(address):
    assert multinode.master_addr_refusal(config(master_addr=address)) is None


@pytest.mark.parametrize("extra", [{}, {"master_addr": "HEAD_IP", "nnodes": 1}])
def test_one_node_or_no_address_is_not_judged(extra):
    assert multinode.master_addr_refusal(config(**extra)) is None
