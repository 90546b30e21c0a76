"""Real pastes, round six (tests/fixtures/logs/public/106-… to 111-…, each with its thread in its
header; what a careful reader takes from each is in test_logs_public.EXPECTED). Here, the general
rule they needed, on its own: a traceback through `torch.cuda.graph`'s `capture_begin` /
`capture_end` is a CUDA graph capture, so an out-of-memory there struck in the capture phase,
unless the log places it elsewhere.
"""

from __future__ import annotations

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.facts import FactKind, facts_from_message
from kvaudit.schema import FailureKind, Phase

_W = "(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] "
_CAPTURE_END = [
    _W + '  File "/usr/local/lib/python3.10/site-packages/vllm/compilation/backends.py", line 681, in __call__',
    _W + "    with torch.cuda.graph(cudagraph, pool=self.graph_pool):",
    _W + '  File "/usr/local/lib/python3.10/site-packages/torch/cuda/graphs.py", line 186, in __exit__',
    _W + "    self.cuda_graph.capture_end()",
    _W + '  File "/usr/local/lib/python3.10/site-packages/torch/cuda/graphs.py", line 84, in capture_end',
    _W + "    super().capture_end()",
    _W + "RuntimeError: CUDA error: out of memory",
]


def failure_of(lines: list[str]) -> tuple[FailureKind, Phase | None]:
    report = report_from_log_text("\n".join(lines) + "\n", "paste.log")
    assert report.failure is not None
    return report.failure.kind, report.failure.phase


@pytest.mark.parametrize("frame", [
    'File "/usr/lib/python3.12/site-packages/torch/cuda/graphs.py", line 84, in capture_end',
    'File "/usr/lib/python3.12/site-packages/torch/cuda/graphs.py", line 71, in capture_begin',
])
def test_a_torch_cuda_graph_capture_frame_is_a_graph_capture(frame: str) -> None:
    assert [f.value for f in facts_from_message(frame) if f.kind is FactKind.GRAPH_CAPTURE_FRAME] == [Phase.CAPTURE]


@pytest.mark.parametrize("frame", [
    'File "/x/torch/cuda/graphs.py", line 186, in __exit__',  # the with-statement's exit, no capture named
    'File "/x/my_code.py", line 9, in capture_end_of_day',  # another name that starts the same
    "super().capture_end()",  # the source line under the frame, not a frame
])
def test_other_frames_are_no_graph_capture(frame: str) -> None:
    assert not [f for f in facts_from_message(frame) if f.kind is FactKind.GRAPH_CAPTURE_FRAME]


def test_an_oom_in_capture_end_struck_in_the_capture_phase() -> None:
    """vllm#19186: the worker's traceback tail alone (before: the phase was not known)."""
    assert failure_of(_CAPTURE_END) == (FailureKind.OOM, Phase.CAPTURE)


def test_after_the_kv_size_a_capture_frame_is_the_real_capture() -> None:
    kv = "(VllmWorker rank=0 pid=1087) INFO 06-05 06:18:00 [gpu_worker.py:227] Available KV cache memory: 5.10 GiB"
    assert failure_of([kv, *_CAPTURE_END]) == (FailureKind.OOM, Phase.CAPTURE)


def test_a_capture_frame_under_graph_profiling_stays_in_the_graphs_phase() -> None:
    """0.21 on, the profiling capture runs before KV sizing: a frame that names it wins."""
    profiling = _W + ('  File "/x/vllm/v1/worker/gpu_model_runner.py", line 6681, in profile_cudagraph_memory')
    assert failure_of([profiling, *_CAPTURE_END]) == (FailureKind.OOM, Phase.GRAPHS)


def test_a_capture_frame_does_not_move_the_kv_check() -> None:
    lines = [*_CAPTURE_END[:-1], _W + "ValueError: No available memory for the cache blocks. Try increasing "
             "`gpu_memory_utilization` when initializing the engine."]
    assert failure_of(lines) == (FailureKind.DOES_NOT_FIT, Phase.KV)
