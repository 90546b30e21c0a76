"""Live per-rank phase progress on stderr while vLLM boots (stdout stays data)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from kvaudit.config import AuditConfig
from kvaudit.units import fmt_gib


class Progress:
    def __init__(self, headline: str, waiting: str = "starting vLLM…"):
        self.console = Console(stderr=True, highlight=False)
        self.headline, self.waiting = headline, waiting
        self._status = None

    @classmethod
    def for_run(cls, c: AuditConfig, log: Path | None) -> Progress:
        return cls(f"kvaudit: booting vLLM on {c.model} (tp {c.tensor_parallel_size or 1}"
                   f", dcp {c.decode_context_parallel_size or 1}"
                   + (f", mtp {c.num_speculative_tokens}" if c.speculative_method else "") + ")"
                   + (f"; vLLM log: {log}" if log else ""))

    @classmethod
    def for_selftest(cls, opts: Any) -> Progress:
        gmu = "default" if opts.gpu_memory_utilization is None else opts.gpu_memory_utilization
        return cls(f"kvaudit: selftest on {opts.device} (tp {opts.tensor_parallel_size}, gmu "
                   f"{gmu}, sizing {opts.sizing})", "starting the ranks…")

    def __enter__(self) -> Progress:
        self.console.print(self.headline, style="dim")
        self._status = self.console.status(self.waiting)
        self._status.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)

    def on_event(self, rank: int, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "start" and self._status is not None:
            self._status.update(f"rank {rank}: {event.get('phase')}…")
        elif kind == "phase":
            status = event.get("status", "ok")
            style = {"ok": None, "deferred": "yellow", "failed": "red"}.get(status)
            used = event.get("device_used_bytes")
            self.console.print(f"  rank {rank}  {event.get('name', '?'):<10} {status:<8} "
                               f"{event.get('seconds') or 0:7.1f} s   device used {fmt_gib(used)}"
                               + (f"   {event['detail']}" if event.get("detail") else ""), style=style)
        elif kind == "error":
            self.console.print(f"  rank {rank}  {event.get('phase', '?'):<10} error    {event.get('message')}",
                               style="red")
