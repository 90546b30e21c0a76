"""Real pastes, round eighteen (stop 48): logs on web pages, notes and non-English write-ups, each
test naming its source; the data are the smallest excerpts of them that show each finding
(tests/unit/data/round_eighteen)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.boot_record import UNFINISHED_HEAD
from kvaudit.schema import FailureKind, Phase, Verdict

_DATA = Path(__file__).parent / "data" / "round_eighteen"


def _report(name: str, text: str | None = None):
    return report_from_log_text((_DATA / name).read_text(encoding="utf-8") if text is None else text, name)


def _unfinished(report) -> bool:
    return any(w.startswith(UNFINISHED_HEAD) for w in report.warnings)


def test_the_cpu_platforms_block_count_is_the_kv_caches() -> None:
    """A PyCon KR demo (vLLM 0.9.2, V0 on an x86 CPU): `# cpu blocks: 2340, # CPU blocks: 0`, then
    18.28x at 2048 tokens. vLLM's CPU platform names its device `cpu`: the first count is the KV
    cache's (2,340 × 16 = 37,440 tokens), the second, `CPU`, the swap space's. Before, no tokens."""
    report = _report("cpu_platform_blocks.log")
    assert report.capacity.kv_tokens == 2340 * 16


def test_one_block_a_request_is_read_from_the_concurrency() -> None:
    """IBM's fmwork README (vllm-spyre, V0): `# cpu blocks: 512` and `Maximum concurrency for 1152
    tokens per request: 512.00x`: a block is a whole request on Spyre (512 × 1152 = 589,824 tokens);
    before, 512 blocks of the default 16 tokens (8,192)."""
    report = _report("spyre_one_block_a_request.log")
    assert report.capacity.kv_tokens == 512 * 1152


def test_a_tie_in_gib_is_broken_by_the_bytes_the_cache_holds() -> None:
    """An 8× L40S TP8+EP write-up (0.10.2): ranks 1 and 2 both at `Available KV cache memory: 10.64
    GiB`, their caches 11,425,235,660 and 11,423,138,508 bytes (`Current kv cache memory in use is …
    bytes`). Before, rank 1 bound (the lower number); rank 2 holds less."""
    report = _report("tied_ranks_exact_bytes.log")
    assert report.capacity.binding_rank == 2


def test_v0s_too_long_error_cut_by_a_search_result_is_still_the_kv_check() -> None:
    """A RunPod console paste (vLLM 0.3): `ValueError: The model's max seq len (32768) is larger than
    the maximum number of tokens that can be s` (the search result's cut). Before, a crash."""
    report = _report("v0_too_long_cut.log")
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.DOES_NOT_FIT, Phase.KV)
    assert report.config.max_model_len == 32768 and report.verdict is Verdict.FAIL


def test_a_benchmarks_summary_and_metric_samples_show_the_boot_served() -> None:
    """A research log (vLLM V1): `Throughput: 0.05 requests/s, 36.80 total tokens/s, …` (vllm bench
    throughput's summary) before the KV lines; lab notes (0.29.0 on an M2 Pro): the server's `vllm:…
    {engine="0",…}` metric samples after them. Before, each "ends before startup finished"."""
    assert not _unfinished(_report("bench_throughput_summary.log"))
    assert not _unfinished(_report("metrics_samples_after_kv.log"))
    cut = "".join(line for line in (_DATA / "metrics_samples_after_kv.log").read_text().splitlines(keepends=True)
                  if not line.startswith("vllm:"))
    assert _unfinished(_report("x", cut))


def test_a_quoted_record_is_the_logs_line_and_a_quoted_name_is_not() -> None:
    """A Chinese Hygon DCU write-up that retells the log as bullets, each record in backticks and then
    explained: `init engine (profile, create kv cache, warmup model) took 48.45 seconds`: …, `Starting
    vLLM API server on http://0.0.0.0:8010`: 服务已成功启动. Round seventeen's rule (a backticked
    marker in a person's sentence is no sign) read this as a boot that had not finished; a marker in
    backticks with nothing else of its line is still only named."""
    assert not _unfinished(_report("quoted_records_bullets.log"))
    named = ("INFO 07-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 8.00 GiB\n"
             "The server hung: `Application startup complete` was never printed.\n")
    assert _unfinished(_report("x", named))


def test_a_ray_workers_segfault_is_the_boots_failure() -> None:
    """ROCm/ROCm#5656 (0.11.1rc2, two nodes, TP2 over Ray): rank 1's worker loads its weights, then
    `*** SIGSEGV received …` and faulthandler's `Fatal Python error: Segmentation fault`, both under
    its Ray prefix and no vLLM record. Before, no failure: the boot read as cut short."""
    report = _report("ray_worker_segfault.log")
    assert report.failure is not None
    assert (report.failure.kind, report.failure.rank) == (FailureKind.CRASH, 1)
    # the first of its crash lines, Ray's handler's, names the signal (round twenty-one: before it was read, the
    # message was faulthandler's `Fatal Python error: Segmentation fault`, which is still in the log after it)
    assert report.failure.message == ("*** SIGSEGV received at time=1762945937 on cpu 6 ***: a crash signal, as the "
                                      "handler Ray's workers install reports it")


def test_the_engine_cores_reraise_gives_way_to_the_workers_own_line() -> None:
    """vllm#47722 (llm-d wide-EP, DP8 EP, TP1): the engine core's untagged `RuntimeError: Worker failed
    with error '…'`, then `(Worker_DP2_EP2 pid=6222) ERROR … RuntimeError: shape …`. Before, the
    re-raise (no rank) put the death on rank 0; the worker's own line says rank 2."""
    report = _report("worker_reraise_untagged.log")
    assert report.failure is not None and report.failure.rank == 2
    assert report.failure.message.startswith("RuntimeError: shape '[128, 64, 576]' is invalid")
    # the re-raise alone is still the failure
    alone = (_DATA / "worker_reraise_untagged.log").read_text().splitlines()[0] + "\n"
    assert _report("x", alone).failure is not None


def test_a_ray_fold_counts_lines_not_workers() -> None:
    """ROCm/ROCm#5656 again: `[repeated 11x across cluster]` in a world of 2. Ray counts repeats of a
    line's shape from any process, the printing one too; the note said "that many more workers"."""
    line = ("(EngineCore_DP0 pid=742) (RayWorkerWrapper pid=233, ip=10.20.1.125) INFO 11-12 11:12:10 "
            "[gpu_model_runner.py:2904] Model loading took 7.2637 GiB and 9.390913 seconds [repeated 11x across "
            "cluster]\n")
    (note,) = [w for w in _report("x", line).warnings if w.startswith("Ray folded lines")]
    assert "that many more lines of its shape, from other workers or the same one again" in note


def test_a_pasted_commands_batch_knobs_are_read() -> None:
    """vllm-ascend#693 (TP8, V0-style workers): `python -m vllm.entrypoints.openai.api_server … --max-num-seqs=256
    --max-model-len=8192 --tensor-parallel-size=8 --block-size=128`. Before, max_num_seqs was not read
    from a command (it was from `non-default args`)."""
    report = _report("command_max_num_seqs.log")
    assert (report.config.max_num_seqs, report.config.max_model_len, report.config.block_size) == (256, 8192, 128)


def test_an_rl_trainers_exception_is_not_vllms_failure() -> None:
    """A verl GRPO log (three vLLMHttpServer replicas): `(TaskRunner pid=49607) FileNotFoundError: … .pt`
    (verl's checkpoint load), then vLLM's own `Engine core proc EngineCore_DP0 died unexpectedly`.
    Before, the trainer's exception was the boot's failure. A named process that printed no vLLM
    record, beside one that did, is another program's; alone, its exception still stands."""
    report = _report("rl_trainer_exception.log")
    assert report.failure is not None and report.failure.kind is FailureKind.WORKER_DIED
    assert [w for w in report.warnings if w.startswith("in another program's process (TaskRunner pid=49607")]
    trainer_only = (_DATA / "rl_trainer_exception.log").read_text().splitlines()[0] + "\n"
    alone = _report("x", trainer_only)
    assert alone.failure is not None and alone.failure.message.startswith("FileNotFoundError")


@pytest.mark.parametrize("name", ["review_s1_quoted_full_record.log", "review_s2_quoted_api_server.log",
                                  "review_s3_bench_before.log", "review_s4_promql.log", "review_s5_named_only.log"])
def test_a_persons_sentence_with_a_serving_marker_does_not_finish_a_dead_boot(name: str) -> None:
    """The second review's cases: a boot that died of an OOM in its profile pass, after a person's
    sentence that holds a serving marker (quoted mid-sentence, `Throughput: … total tokens/s` in prose,
    a PromQL `vllm:…{engine="0"}`). Before the fix each read as unknown, the OOM a note after startup."""
    report = _report(name)
    assert report.failure is not None and report.failure.kind is FailureKind.OOM
    assert report.verdict is Verdict.FAIL


@pytest.mark.parametrize("line, model", [
    ("docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.10.1 --model Qwen/Qwen3-8B --max-model-len 8192",
     "Qwen/Qwen3-8B"),
    ("sudo -E python3 -m vllm.entrypoints.openai.api_server --model org/m -tp 2", "org/m"),
    ("nohup vllm serve org/m --max-model-len 4096 > serve.log 2>&1 &", "org/m"),
    ("I used docker run with vllm/vllm-openai --model org/m", None),  # a sentence names no model
    ("we tried sudo vllm serve org/m --max-model-len 10", None),
])
def test_a_command_run_through_a_container_or_a_launcher_states_its_model(line: str, model: str | None) -> None:
    """The second review: `docker run … vllm/vllm-openai … --model M`, `sudo -E python3 -m vllm…`, `nohup vllm
    serve M` lost the model (the words before the run were no shell prompt)."""
    text = line + "\n(EngineCore pid=7) INFO 10-02 11:02:20 [gpu_worker.py:298] Available KV cache memory: 8.00 GiB\n"
    assert _report("x", text).config.model == model
