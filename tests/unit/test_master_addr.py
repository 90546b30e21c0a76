"""`kvaudit run … -- --nnodes N --node-rank K --master-addr HOST`: a HOST the resolver says does not
exist is refused before any boot (a node waited in silence at a placeholder until the timeout); the
resolver is stood in, so the answer is the same on every machine."""

from __future__ import annotations

import socket
import time

import pytest

from kvaudit.config import AuditConfig
from kvaudit.engines.vllm import multinode


def config(**extra) -> AuditConfig:
    return AuditConfig(tensor_parallel_size=2, extra_args={"nnodes": 2, "node_rank": 1, **extra})


def no_such_host(host):
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def test_a_placeholder_is_refused_naming_the_fix():
    assert multinode.master_addr_refusal(config(master_addr="HEAD_IP"), no_such_host) == (
        "--master-addr HEAD_IP names no host this machine can resolve (Name or service not known): pass node 0's "
        "IP address or host name")


@pytest.mark.parametrize("extra", [{"master_addr": "10.0.0.1"}, {}, {"master_addr": "HEAD_IP", "nnodes": 1}])
def test_an_address_that_resolves_none_given_or_one_node_passes(extra):
    assert multinode.master_addr_refusal(config(**extra), lambda host: [("inet", host)]) is None
    if extra.get("nnodes") == 1 or not extra:  # the resolver is not even asked
        assert multinode.master_addr_refusal(config(**extra), no_such_host) is None


def test_a_resolver_that_does_not_answer_in_time_leaves_it_to_vllm(monkeypatch):
    monkeypatch.setattr(multinode, "RESOLVE_S", 0.2)
    start = time.monotonic()
    assert multinode.master_addr_refusal(config(master_addr="slow.example"), lambda host: time.sleep(5)) is None
    assert time.monotonic() - start < 2


def test_the_real_resolver_knows_a_literal_address():
    assert multinode.master_addr_refusal(config(master_addr="127.0.0.1")) is None
