"""A GMU for a number of bytes of this machine's NUMA node: a GMU is a fraction of the node, and the
nodes of the machines CI runs on differ (23.54 GiB on the AMD EPYC, 9.59 GiB on the AMX machine)."""

from __future__ import annotations

import math

from kvaudit.engines.probes.host import current_node, node_meminfo


def gmu_for(nbytes: int, at_least: float = 0.0) -> str:
    """The GMU (4 decimals, rounded up) whose budget is `nbytes` of this node, or `at_least` where
    that is more."""
    total, _ = node_meminfo(current_node())
    return str(max(at_least, math.ceil(nbytes / total * 10_000) / 10_000))
