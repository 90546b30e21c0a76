"""kvaudit's allocator snapshots do not import torch's compiler stack (the cost of --trace).

torch's frame symbolizer asks `hasattr(torch, "_inductor")` during every snapshot with stacks;
each check runs in a fresh interpreter with torch.cuda.memory._snapshot replaced by a stand-in that
asks the same question the way torch's C++ does (hasattr on the module, then on the answer's
`codecache`). Both callers are covered: the tracer's phase snapshot and the probe's graph-pool
reading, which on the H200 imported inductor inside the first traced phase with live blocks
(6.2 s of the load phase)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

PRELUDE = textwrap.dedent("""
    import json, sys
    import torch
    from kvaudit.engines.probes.cuda import CudaProbe
    from kvaudit.engines.probes.snapshot import allocator_snapshot

    seen = {}
    def symbolizer_like(device=None):
        found = hasattr(torch, "_inductor")
        seen["codecache"] = found and hasattr(torch._inductor, "codecache")
        return {"segments": [{"device": 0, "segment_pool_id": [0, 0], "total_size": 2 << 20},
                             {"device": 0, "segment_pool_id": [1, 7], "total_size": 64 << 20}],
                "device_traces": []}
    torch.cuda.memory._snapshot = symbolizer_like
""")


def run(body: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_torchs_own_question_imports_inductor():
    # the premise: asking the lazy attribute imports torch._inductor (what cost 3.2-5.0 s on the H200)
    out = run("""
        before = "torch._inductor" in sys.modules
        torch.cuda.memory._snapshot()
        print(json.dumps({"before": before, "after": "torch._inductor" in sys.modules}))
    """)
    assert out == {"before": False, "after": True}


def test_the_snapshot_leaves_inductor_unimported_and_torch_as_it_was():
    out = run("""
        allocator_snapshot(torch)
        allocator_snapshot(torch)
        print(json.dumps({"imported": "torch._inductor" in sys.modules, "codecache": seen["codecache"],
                          "left": "_inductor" in vars(torch)}))
    """)
    assert out == {"imported": False, "codecache": False, "left": False}


def test_the_probes_graph_pool_reading_leaves_inductor_unimported():
    out = run("""
        pool = CudaProbe(torch.device("cuda", 0)).graph_pool_bytes()
        print(json.dumps({"pool": pool, "imported": "torch._inductor" in sys.modules,
                          "asked": "codecache" in seen, "left": "_inductor" in vars(torch)}))
    """)
    assert out == {"pool": 64 << 20, "imported": False, "asked": True, "left": False}


def test_once_inductor_is_imported_the_snapshot_sees_the_real_module():
    out = run("""
        import torch._inductor.codecache
        real = torch._inductor
        allocator_snapshot(torch)
        print(json.dumps({"codecache": seen["codecache"], "same": torch._inductor is real}))
    """)
    assert out == {"codecache": True, "same": True}


def test_the_stand_in_is_removed_when_the_snapshot_raises():
    out = run("""
        def failing(device=None):
            hasattr(torch, "_inductor")
            raise RuntimeError("allocator")
        torch.cuda.memory._snapshot = failing
        try:
            allocator_snapshot(torch)
        except RuntimeError:
            pass
        print(json.dumps({"left": "_inductor" in vars(torch), "imported": "torch._inductor" in sys.modules}))
    """)
    assert out == {"left": False, "imported": False}


def test_another_thread_reaching_for_inductor_meanwhile_gets_the_real_module():
    out = run("""
        def reaching(device=None):
            found = torch._inductor.config  # what inductor code elsewhere could touch in that instant
            return {"segments": [], "device_traces": [], "found": found is sys.modules["torch._inductor.config"]}
        torch.cuda.memory._snapshot = reaching
        snap = allocator_snapshot(torch)
        print(json.dumps({"found": snap["found"], "real": type(torch._inductor).__name__,
                          "imported": "torch._inductor" in sys.modules}))
    """)
    assert out == {"found": True, "real": "module", "imported": True}
