"""Live progress on stderr while vLLM boots (stdout stays data): what the boot is waiting on and
for how long, and each rank's phases as they finish.

On a terminal a spinner shows the stage and the elapsed seconds, updated as it spins. Piped or
redirected (CI logs), there is no spinner: each new stage is one plain line with the elapsed time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from kvaudit.config import AuditConfig
from kvaudit.printable import one_line
from kvaudit.units import fmt_gib


class _Waiting:
    """The spinner's text, rendered afresh on every refresh: the stage and the seconds so far."""

    def __init__(self, progress: Progress):
        self.progress = progress

    def __rich__(self) -> Text:
        return Text(f"{self.progress.stage} ({self.progress.elapsed():.0f} s)")


class Progress:
    def __init__(self, headline: str, waiting: str = "starting vLLM…", console: Console | None = None):
        self.console = console or Console(stderr=True, highlight=False, markup=False, emoji=False)
        self.headline, self.stage = headline, waiting
        self.started = time.monotonic()
        self._status = None

    @classmethod
    def for_run(cls, c: AuditConfig, log: Path | None) -> Progress:
        return cls(f"kvaudit: booting vLLM on {c.model} (tp {c.tensor_parallel_size or 1}"
                   f", dcp {c.decode_context_parallel_size or 1}"
                   + (f", mtp {c.num_speculative_tokens}" if c.speculative_method else "") + ")"
                   + (f"; vLLM log: {log}" if log else ""), "starting the boot process")

    @classmethod
    def for_selftest(cls, opts: Any) -> Progress:
        gmu = "default" if opts.gpu_memory_utilization is None else opts.gpu_memory_utilization
        return cls(f"kvaudit: selftest on {opts.device} (tp {opts.tensor_parallel_size}, gmu "
                   f"{gmu}, sizing {opts.sizing})", "starting the ranks")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __enter__(self) -> Progress:
        self.started = time.monotonic()
        self.console.print(one_line(self.headline), style="dim")
        if self.console.is_terminal:
            self._status = self.console.status(_Waiting(self))
            self._status.__enter__()
        else:
            self._plain()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)
            self._status = None

    def _plain(self) -> None:
        # piped: a line per stage, so a CI log shows where a slow boot is
        self.console.print(f"kvaudit: {self.elapsed():6.1f} s  {one_line(self.stage)}", soft_wrap=True)

    def _set_stage(self, stage: str) -> None:
        if stage == self.stage:
            return
        self.stage = stage
        if self._status is None:
            self._plain()

    def on_event(self, rank: int, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "stage" and isinstance(event.get("stage"), str):
            self._set_stage(event["stage"])
        elif kind == "start":
            self._set_stage(f"rank {rank}: {one_line(str(event.get('phase')))}")
        elif kind == "phase":
            status = str(event.get("status", "ok"))
            style = {"ok": None, "deferred": "yellow", "failed": "red", "interrupted": "yellow"}.get(status)
            used = event.get("device_used_bytes")
            seconds = event.get("seconds")
            self.console.print(f"  rank {rank}  {one_line(str(event.get('name', '?'))):<10} {one_line(status):<8} "
                               f"{seconds if isinstance(seconds, (int, float)) else 0:7.1f} s   device used "
                               f"{fmt_gib(used if isinstance(used, int) else None)}"
                               + (f"   {one_line(str(event['detail']))}" if event.get("detail") else ""), style=style,
                               soft_wrap=True)
        elif kind == "error":
            self.console.print(f"  rank {rank}  {one_line(str(event.get('phase', '?'))):<10} error    "
                               f"{one_line(str(event.get('message')))}", style="red")
        elif kind in ("died", "lost"):  # from another node, through the relay (engines/journal.py)
            how = (f"{event.get('signal') or 'exit code ' + str(event.get('exit_code'))}, as node "
                   f"{event.get('node_rank')} reports" if kind == "died" else
                   f"no heartbeat for {event.get('silent_s')} s")
            self.console.print(f"  rank {rank}  {kind}: {one_line(how)}", style="red")
