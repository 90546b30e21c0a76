"""What the boot waits on before the audit worker's first phase and between its phases: the
stage, from the boot process's own journal (`boot.jsonl`: "stage" events) and a few phrases of
vLLM's log, read as they are appended. The supervised process runner shows it as progress."""

from __future__ import annotations

from pathlib import Path

from kvaudit.engines.journal import Tail, parse_events

VLLM_STAGES = (
    # (a phrase vLLM 0.26–0.32 logs, the stage it starts)
    ("Resolved architecture", "vLLM: resolving the model config"),
    ("Initializing a V1 LLM engine", "vLLM: starting the engine core"),
    ("Starting to load model", "vLLM: loading the model"),
    ("Loading weights took", "vLLM: model loaded"),
    ("Model loading took", "vLLM: model loaded"),
    ("init engine", "vLLM: engine ready"),
    # shutdown (0.32's [shutdown] lines): the engine core stops its workers and waits for each to exit
    ("EngineCore: trigger received", "vLLM: shutting down: the engine core stops its workers"),
    ("Executor: waiting for worker exit", "vLLM: shutting down: waiting for the workers to exit"),
    ("Executor: all workers exited", "vLLM: shutting down: workers exited, the engine core is stopping"),
    ("MPClient: complete", "vLLM: stopped; the boot process is exiting"),
)
STAGE_BYTES = 1 << 16
"""The most of vLLM's log read per poll: a stage phrase is near a line's start; a long line (an
engine config dump) is not searched whole."""


class StageTailer:
    """The stage the boot is waiting on, from vLLM's log and the boot process's journal."""

    def __init__(self, log_path: Path, boot_journal: Path):
        self.log, self.boot_journal = Tail(log_path, STAGE_BYTES), Tail(boot_journal, STAGE_BYTES)
        self.stage: str | None = None

    def poll(self) -> str | None:
        """The new stage, or None when it did not change."""
        found = None
        text = self.log.read().decode("utf-8", "replace")
        for phrase, stage in VLLM_STAGES:
            at = text.rfind(phrase)
            if at >= 0 and (found is None or at > found[0]):
                found = (at, stage)
        stage = found[1] if found else None
        for event in parse_events(self.boot_journal.read()):
            if isinstance(event.get("stage"), str):
                stage = event["stage"]  # the boot process knows better than the log
        if stage is None or stage == self.stage:
            return None
        self.stage = stage
        return stage
