"""Real pastes, round twenty-three: boots that sized their KV cache and then died (LMCache#3430, verl's four
engines, a docker notes page's sampler warmup, a log viewer's FlashInfer autotune). Each test names its source
and what kvaudit read before; the data are the excerpts as the round saved them (tests/unit/data/round_twenty_three;
LMCache#3430 is the public corpus' 136), a case where the rule must not fire beside each rule."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from kvaudit.capacity import SERVED_THEN_OOM, SIZED_NOT_SERVED
from kvaudit.engines.logs import report_from_log_text
from kvaudit.errors import BadInputError
from kvaudit.render import Format, reporter
from kvaudit.schema import FailureKind, Owner, Phase, PhaseStatus, Report, Verdict

_DATA = Path(__file__).parent / "data" / "round_twenty_three"
_PUBLIC = Path(__file__).parent.parent / "fixtures" / "logs" / "public"
LMCACHE = "136-v1-0.21-lmcache-3430-oom-in-llm-generate.log"
"""LMCache#3430 (vLLM 0.21.0, Qwen3-8B on an RTX A5000, gmu 0.9764): `Available KV cache memory: 6.37 GiB`, `GPU KV
cache size: 46,368 tokens`, the first capture bar, then (after a gap in the paste) torch's out-of-memory error and the
user's script's traceback through `llm.generate`."""
FOUR_ENGINES = "06_code53815542336_v0110_four_engines_sampler_warmup_oom_after_capture.log"
"""A verl rollout log (vLLM 0.11.0, Qwen2.5-Math-1.5B): four `EngineCore_DP0` engines side by side; pid 39535 sizes
70.35 GiB of KV, captures its graphs (`took 3.49 GiB`), then runs out of memory in the sampler warmup."""
SAMPLER = "07_code62571909065_v0190_eager_kv_then_sampler_failed_first_start.log"
"""A docker notes page (vLLM 0.19.0, Qwen3-0.6B, eager, gmu 0.75): `GPU KV cache size: 75,152 tokens`, then
`EngineCore failed to start.` with one frame, `in _dummy_sampler_run`, before the page's `...`."""
AUTOTUNE = "09_code52000797369_logviewer_ts_mtp_nvfp4_kv_then_flashinfer_autotune_failed.log"
"""A log viewer's export (vLLM ≈0.20, an NVFP4 hybrid model with MTP): `GPU KV cache size: 36,432 tokens`, the
FlashInfer autotuner's TMA errors, then `EngineCore failed to start.` through compile_or_warm_up_model →
kernel_warmup → flashinfer_autotune."""


def _text(name: str) -> str:
    return ((_PUBLIC if name == LMCACHE else _DATA) / name).read_text(encoding="utf-8")


def _report(name: str, text: str | None = None) -> Report:
    return report_from_log_text(_text(name) if text is None else text, name)


def _table(report: Report) -> str:
    out = io.StringIO()
    reporter(Format.TABLE, width=400).report(report, out)
    return out.getvalue()


_OOM_LINE = "(EngineCore pid=4108) ERROR 05-28 08:00:36 [core.py:1142] torch.OutOfMemoryError"
_SCRIPT = "Traceback (most recent call last):\n  File \"/workspace/lmcache-experiments"


def test_a_boot_that_died_after_its_kv_was_sized_offers_no_flags_from_that_kv() -> None:
    """LMCache#3430 without the user's script's traceback: torch's OOM under the capture bar, a death after KV
    sizing. Before: `safe_serve_flags` = `--kv-cache-memory-bytes=6839735419 --gpu-memory-utilization=0.9764
    --max-model-len=16384`, the KV that was live at the OOM, offered as flags."""
    text = _text(LMCACHE)
    cut = text[:text.index(_SCRIPT)]
    report = _report(LMCACHE, cut)
    assert report.failure is not None and report.failure.phase is not None
    assert report.capacity.safe_serve_flags == ()
    assert report.capacity.kv_not_served == f"{SIZED_NOT_SERVED}: the boot died in capture (oom)"
    assert (f"KV {SIZED_NOT_SERVED}: the boot died in capture (oom): 6.37 GiB on rank 0 = 46,368 tokens; no safe "
            f"flags are derived from it (they would size the KV cache the boot died with)") in report.warnings
    assert "KV available: sized, not served: 6.37 GiB on rank 0 = 46,368 tokens" in _table(report)


def test_the_same_kv_lines_with_no_death_after_them_are_not_labelled() -> None:
    """The same paste cut before torch's error: a boot still capturing when the paste ends, its KV figure as it
    was (no device total is left to derive flags from: torch's error stated it)."""
    text = _text(LMCACHE)
    report = _report(LMCACHE, text[:text.index(_OOM_LINE)])
    assert report.failure is None
    assert report.capacity.kv_not_served is None
    assert report.capacity.kv_tokens == 46368
    assert "sized, not served" not in _table(report)
    assert not [w for w in report.warnings if "not served" in w]


def test_vllms_own_kv_check_failing_keeps_its_corrected_flags() -> None:
    """vllm#10517 (public 02, V0): the KV check's ValueError at 29,000 tokens. Its flags are the shorter length
    that fits, not the boot's own: no label."""
    report = report_from_log_text((_PUBLIC / "02-v0.6-10517-29k-fails.log").read_text(encoding="utf-8"), "x")
    assert report.failure is not None and report.failure.kind.value == "does_not_fit"
    assert report.capacity.kv_not_served is None
    assert report.capacity.safe_serve_flags[-1] == "--max-model-len=23648"


def test_a_death_after_the_graph_capture_labels_its_kv_on_the_table() -> None:
    """verl's engine pid 39535 (vLLM 0.11.0): 70.35 GiB of KV, the capture, then the OOM. Before: "KV available:
    70.35 GiB on rank 0 = 2,634,544 tokens / one request at max_model_len: fits", nothing saying no boot served
    with it."""
    report = _report(FOUR_ENGINES)
    assert report.capacity.kv_not_served is not None
    assert report.capacity.kv_not_served.startswith(f"{SIZED_NOT_SERVED}: the boot died ")
    assert "KV available: sized, not served: 70.35 GiB on rank 0 = 2,634,544 tokens" in _table(report)


_SAMPLER_STEP = "after KV sizing, in the sampler warmup (`_dummy_sampler_run`)"


def test_a_sampler_frame_after_the_kv_lines_is_the_warmup_after_kv_sizing() -> None:
    """The docker notes page's first start (vLLM 0.19.0, eager): the KV lines, then `EngineCore failed to start.`
    and a frame `in _dummy_sampler_run`. Before: failure phase kv, rank 0's `kv` phase marked failed although its
    lines say it sized the cache (`GPU KV cache size: 75,152 tokens`)."""
    report = _report(SAMPLER)
    assert report.failure is not None
    assert (report.failure.phase, report.failure.step) == (Phase.CAPTURE, _SAMPLER_STEP)
    phases = {p.name: p.status for p in report.ranks[0].phases}
    assert phases[Phase.KV] is PhaseStatus.OK and phases[Phase.CAPTURE] is PhaseStatus.FAILED
    assert report.verdict_reason == (f"audit incomplete {_SAMPLER_STEP}, on rank 0 (crash): EngineCore failed to "
                                     f"start.")


def test_a_sampler_frame_before_any_kv_line_is_the_profiles() -> None:
    """The same start with its three KV lines taken out: the frame follows `Model loading took`, so it is
    profile_run's sampler run, before sizing; a paste that starts in the traceback (vllm#17939, public 109) says
    neither."""
    text = "".join(line for line in _text(SAMPLER).splitlines(keepends=True)
                   if "[gpu_worker.py:436]" not in line and "[kv_cache_utils.py:13" not in line)
    assert "KV cache" not in text
    report = _report(SAMPLER, text)
    assert report.failure is not None
    assert (report.failure.phase, report.failure.step) == (Phase.PROFILE, None)
    assert all(p.name is not Phase.KV for p in report.ranks[0].phases)
    cut = report_from_log_text((_PUBLIC / "109-v1-0.8-17939-tp-sampler-warmup-oom.log").read_text(encoding="utf-8"),
                               "x")
    assert cut.failure is not None and (cut.failure.phase, cut.failure.step) == (None, None)


def test_a_death_after_the_capture_names_the_sampler_warmup_not_the_capture() -> None:
    """verl's engine pid 39535: `Graph capturing finished in 5 secs, took 3.49 GiB`, then the OOM through
    compile_or_warm_up_model → _dummy_sampler_run. Before: "FAIL: boot failed in capture on rank 0 (oom)"; the
    phase stays the capture bucket (fixture 112's), the words say where in it."""
    report = _report(FOUR_ENGINES)
    assert report.failure is not None and report.failure.phase is Phase.CAPTURE
    step = "after the graph capture finished, in the sampler warmup (`_dummy_sampler_run`)"
    assert report.failure.step == step
    assert report.verdict_reason.startswith(f"boot failed {step}, on rank 0 (oom): torch.OutOfMemoryError")
    capture = next(p for p in report.ranks[0].phases if p.name is Phase.CAPTURE)
    assert capture.detail == f"capture took 3.49 GiB; died {step}"
    assert f"failure: oom {step}, on rank 0: torch.OutOfMemoryError" in " ".join(_table(report).split())


def test_flashinfers_autotune_is_named_before_the_capture() -> None:
    """The log viewer's NVFP4 boot: compile_or_warm_up_model → kernel_warmup → flashinfer_autotune, no capture
    line. Before: "UNKNOWN: audit incomplete in capture on rank 0 (crash)"."""
    report = _report(AUTOTUNE)
    assert report.failure is not None and report.failure.phase is Phase.CAPTURE
    assert report.failure.step == "after KV sizing, in `kernel_warmup` / `flashinfer_autotune`, before the graph capture"


def test_a_death_under_the_capture_bar_names_no_step() -> None:
    """LMCache#3430 without the user's traceback: torch's OOM under `Capturing CUDA graphs … 2%`, no frame: the
    capture it is, in the phase's own word."""
    text = _text(LMCACHE)
    report = _report(LMCACHE, text[:text.index(_SCRIPT)])
    assert report.failure is not None
    assert (report.failure.phase, report.failure.step) == (Phase.CAPTURE, None)
    assert report.verdict_reason.startswith("boot failed in capture on rank 0 (oom): ")


_GENERATE = "    outputs = llm.generate(prompts, sampling_params)"


def test_an_oom_in_the_users_llm_generate_is_after_startup() -> None:
    """LMCache#3430: torch's OOM, then the user's script's traceback through `outputs = llm.generate(prompts,
    sampling_params)` (an `LLM` exists only once startup finished). Before: "FAIL: boot failed in capture on
    rank 0 (oom)", from the last capture bar before a gap in the paste. Now as public 56's death while serving:
    no failure of the boot's, a note after startup, and the KV figure labelled (no flags); the verdict is a finding
    (real pastes round twenty-eight: "OK: fits" beside an OOM while serving read as a healthy server)."""
    report = _report(LMCACHE)
    assert report.failure is None and report.verdict is Verdict.FAIL
    assert report.verdict_reason.startswith("out of memory while serving, after startup finished (torch.OutOfMemory"
                                            "Error: CUDA out of memory. Tried to allocate 192.00 MiB.")
    assert report.verdict_reason.endswith("; the KV cache sized at startup left too little for the load: lower "
                                          "--gpu-memory-utilization, --max-num-seqs or --max-num-batched-tokens "
                                          "(kvaudit run --verify runs such loads before serving)")
    after = [w for w in report.warnings if w.startswith("after startup finished: ")]
    assert len(after) == 1 and after[0].startswith("after startup finished: torch.OutOfMemoryError: CUDA out of "
                                                   "memory. Tried to allocate 192.00 MiB.")
    assert report.capacity.kv_not_served == f"{SERVED_THEN_OOM}: the boot ran out of memory after startup, while serving"
    assert report.capacity.safe_serve_flags == ()
    assert "KV available: served, then out of memory: 6.37 GiB on rank 0 = 46,368 tokens" in _table(report)
    assert not [w for w in report.warnings if w.startswith("the log ends before startup finished")]


def test_a_traceback_through_the_llm_constructor_is_a_startup_death() -> None:
    """The same paste with the script's frame constructing the `LLM` (`llm = LLM(**llm_args)`), as a startup
    failure's traceback reads: the death in the capture stands."""
    text = _text(LMCACHE).replace(_GENERATE, "    llm = LLM(**llm_args)")
    assert text != _text(LMCACHE)
    report = _report(LMCACHE, text)
    assert report.failure is not None
    assert (report.failure.kind, report.failure.phase) == (FailureKind.OOM, Phase.CAPTURE)
    assert report.capacity.kv_not_served == f"{SIZED_NOT_SERVED}: the boot died in capture (oom)"


def test_an_error_after_startup_that_is_no_oom_keeps_the_flags() -> None:
    """A review's served boot (round fourteen) whose paste ends with a request's template error: after startup,
    but no memory error, so its KV figure stands and its flags are offered."""
    text = (Path(__file__).parent / "data" / "round_fourteen" / "review_excerpt_ok_boot_then_request_error.log"
            ).read_text(encoding="utf-8")
    report = report_from_log_text(text, "x")
    assert report.failure is None
    assert any(w.startswith("after startup finished: jinja2.exceptions.TemplateError") for w in report.warnings)
    assert report.capacity.kv_not_served is None
    assert report.capacity.safe_serve_flags[0] == "--kv-cache-memory-bytes=9652938998"


def test_the_boot_listed_as_a_process_of_the_pid_namespace_is_no_other_process() -> None:
    """verl's engine (pid 39535 in its container) OOMs with `Process 62912 has 494.00 MiB memory in use. Process
    113443 has 78.33 GiB memory in use. Of the allocated memory 74.24 GiB is allocated by PyTorch` and no `this
    process has`: torch names the caller by that clause only where NVML's pid is its getpid(). Before: "names 2
    other processes on the device holding 78.81 GiB"."""
    notes = [w for w in _report(FOUR_ENGINES).warnings if "out-of-memory message" in w]
    assert notes == ["torch's out-of-memory message names 1 other process on the device holding 0.48 GiB (Process "
                     "113443, 78.33 GiB, is the boot itself: the message has no `this process has`, as in a "
                     "container's PID namespace, and it holds the 74.42 GiB PyTorch reserved)"]


def test_listed_processes_stay_others_where_the_largest_holds_less_than_pytorch_allocated() -> None:
    """The same message with 113443 at 50.00 GiB, less than the 74.24 GiB PyTorch allocated: no listed process can
    be the boot, so both are others; and a message with its own `this process has` clause (vllm#8731, round
    twenty-one) lists only others."""
    text = _text(FOUR_ENGINES).replace("Process 113443 has 78.33 GiB", "Process 113443 has 50.00 GiB")
    notes = [w for w in _report(FOUR_ENGINES, text).warnings if "out-of-memory message" in w]
    assert notes == ["torch's out-of-memory message names 2 other processes on the device holding 50.48 GiB"]
    spec = (Path(__file__).parent / "data" / "round_twenty_one" / "v0_spec_oom_other_processes.log").read_text(
        encoding="utf-8")
    assert "this process has" in spec
    notes = [w for w in report_from_log_text(spec, "x").warnings if "out-of-memory message" in w]
    assert len(notes) == 1 and notes[0].startswith("torch's out-of-memory message names 3 other processes on the "
                                                   "device holding 4.86 GiB: with the boot's request")


def test_engine_cores_of_one_name_side_by_side_are_named_and_the_failed_one_said() -> None:
    """verl's rollout log: `EngineCore_DP0` under pids 39549, 39539, 39535 and 39544, their lines interleaved (one
    GPU each: `rank 0 in world size 1`); 39535 died. Before: one rank 0, its weights from 39549's line and its KV
    from 39535's, with no word of four engines."""
    notes = [w for w in _report(FOUR_ENGINES).warnings if "side by side" in w]
    assert notes == ["4 engine cores named EngineCore_DP0 print side by side (pid=39549, pid=39539, pid=39535, "
                     "pid=39544): each a vLLM of its own (one boot has one EngineCore_DP0), as an RL trainer's rollout "
                     "engines are; pid=39535 failed; the report reads them as one boot, its figures from pid=39549, "
                     "pid=39539, pid=39535: pass one engine's lines to read it alone"]


def test_one_engines_lines_or_runs_one_after_another_get_no_side_by_side_note() -> None:
    """The failed engine's own lines (with the unprefixed bars) read alone; and vllm#33297's two CI runs, each
    `EngineCore_DP0`, one after the other (round twenty-two's note says they each fail)."""
    text = "".join(line for line in _text(FOUR_ENGINES).splitlines(keepends=True)
                   if "(EngineCore_DP0 pid=" not in line or "pid=39535)" in line)
    report = _report(FOUR_ENGINES, text)
    assert report.failure is not None and not [w for w in report.warnings if "side by side" in w]
    runs = (Path(__file__).parent / "data" / "round_twenty_two" /
            "02_vllm33297_ci_quoted_buildkite_caret_colour_levels_free_memory_two_runs.log").read_text(encoding="utf-8")
    report = report_from_log_text(runs, "x")
    assert [w for w in report.warnings if "engine cores named EngineCore_DP0 each fail" in w]
    assert not [w for w in report.warnings if "side by side" in w]


ENV_REPORT_LOG = "02_vllm15457_template_collect_env_traceback_then_prose_command.log"
"""vllm#15457's bug report: the template's `python collect_env.py` listing holds that script's own traceback
(`ImportError: cannot import name '__version__' from 'vllm'`, every frame in collect_env.py), then `vllm --version`'s
platform line; no boot is in the paste."""


def test_collect_env_scripts_own_traceback_is_no_crash_of_the_boot() -> None:
    """Before: "audit incomplete on rank 0 (crash): ImportError: cannot import name '__version__' from 'vllm'"."""
    report = _report(ENV_REPORT_LOG)
    assert report.failure is None
    assert report.verdict is Verdict.UNKNOWN
    assert [w for w in report.warnings if w.startswith("collect_env.py")] == [
        "collect_env.py's own error (the environment listing vLLM's bug template asks for), not the boot's: "
        "ImportError: cannot import name '__version__' from 'vllm' (unknown location)"]


def test_collect_env_reaching_into_vllm_that_raised_is_still_a_failure() -> None:
    """The rule is about the script's own frames: where its import reached vLLM's code and that raised (the innermost
    frame is vLLM's), the error is vLLM's and stays the failure; a boot's own traceback stays one too."""
    text = _text(ENV_REPORT_LOG)
    inner = ('  File "/usr/lib/python3.12/site-packages/vllm/__init__.py", line 12, in <module>\n'
             '    from vllm.engine.arg_utils import EngineArgs\n')
    raised = text.replace("ImportError: cannot import name", inner + "ImportError: cannot import name", 1)
    report = _report(ENV_REPORT_LOG, raised)
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.message.startswith("ImportError: cannot import name '__version__' from 'vllm'")
    assert not [w for w in report.warnings if w.startswith("collect_env.py")]
    boot = text.replace("collect_env.py", "serve.py")
    assert _report(ENV_REPORT_LOG, boot).failure is not None


# ---------------------------------------------------------------------------------------------------------
# F1: a write-up that quotes two runs' errors, each in a fenced block of its own, and no log line

WRITE_UP = "04_vllm27934_prose_quoted_errors_no_log.log"
"""vllm#27934 (vLLM 0.11.1 nightly, RTX 3060 12 GB): a Markdown report, no vLLM record, "### Error 1" (with CPU offload,
gmu 0.5) quoting `ValueError: No available memory for the cache blocks …` and "### Error 2" (without it) quoting
`ValueError: Free memory on device (6.44/11.63 GiB) on startup is less than desired GPU memory utilization (0.9, …`,
each in its own fence. Before: verdict fail, `does_not_fit` in kv with Error 1's message, gmu 0.9 and an 11.63 GiB
device from Error 2's: a boot that never ran."""
_FIRST = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing."
_SECOND = ("ValueError: Free memory on device (6.44/11.63 GiB) on startup is less than desired GPU memory utilization "
           "(0.9, 10.47 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")


def test_a_write_up_quoting_two_runs_errors_in_fences_of_their_own_is_refused_in_one_line(cli, tmp_path) -> None:
    path = tmp_path / WRITE_UP
    path.write_text(_text(WRITE_UP), encoding="utf-8")
    for verb in ("show", "ingest"):
        result = cli(verb, str(path))
        assert result.code == 2 and result.stdout == "" and len(result.stderr_lines) == 1
        line = result.stderr_lines[0]
        assert line.startswith(f"kvaudit: error: {path}: no vLLM log line, only two different errors")
        assert 'line 23: "ValueError: No available memory for the cache blocks.' in line
        assert 'line 30: "ValueError: Free memory on device (6.44/11.63 GiB)' in line


def _fenced(*blocks: str, between: str = "\n### Another try\n") -> str:
    return "Setting up vLLM on my card.\n" + between.join(f"```\n{b}\n```" for b in blocks) + "\n"


def test_two_runs_errors_in_fences_of_their_own_are_refused() -> None:
    with pytest.raises(BadInputError, match=r"line 3: \"ValueError: No available memory.*line 7: \"ValueError: Free"):
        report_from_log_text(_fenced(_FIRST, _SECOND), "w.md")


def test_one_quoted_error_is_still_read_as_the_boots_failure() -> None:
    """A dead boot's last line, fenced, is how many people paste it: the rule needs two runs."""
    report = report_from_log_text(_fenced(_FIRST), "w.md")
    assert report.verdict is Verdict.FAIL
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT


def test_two_errors_in_one_fence_are_one_pasted_tail_and_read() -> None:
    report = report_from_log_text(_fenced(f"{_SECOND}\n{_FIRST}"), "w.md")
    assert report.verdict is Verdict.FAIL and report.failure is not None
    assert report.failure.message in (_FIRST, _SECOND)


def test_the_same_error_quoted_twice_is_one_failure() -> None:
    report = report_from_log_text(_fenced(_FIRST, _FIRST), "w.md")
    assert report.failure is not None and report.failure.message.startswith("ValueError: No available memory")


def test_fenced_errors_beside_a_vllm_record_are_a_log() -> None:
    record = "INFO 11-02 10:00:01 [gpu_worker.py:298] Available KV cache memory: -0.5 GiB"
    report = report_from_log_text(_fenced(f"{record}\n{_FIRST}", _SECOND), "w.md")
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT


def test_fenced_errors_with_a_traceback_frame_are_a_log() -> None:
    frame = ('Traceback (most recent call last):\n  File "/usr/lib/python3/site-packages/vllm/v1/core/kv_cache_utils.py",'
             ' line 700, in check_enough_kv_cache_memory\n    raise ValueError(')
    report = report_from_log_text(_fenced(f"{frame}\n{_FIRST}", _SECOND), "w.md")
    assert report.failure is not None and report.failure.kind is FailureKind.DOES_NOT_FIT


# ---------------------------------------------------------------------------------------------------------
# F9: an MTP drafter no config line names; an issue body that holds only vLLM's environment listing


def test_the_mtp_drafters_own_line_names_speculative_decoding_by_mtp() -> None:
    """AUTOTUNE's boot loaded an MTP drafter (`Detected MTP model. Sharing target model embedding weights with the
    draft model.`); no config line is in the paste. Before: speculative_method null."""
    config = _report(AUTOTUNE).config
    assert config.speculative_method == "mtp" and config.num_speculative_tokens is None


def test_a_person_quoting_the_mtp_line_names_no_drafter() -> None:
    """Write-ups quote the line to say what to look for: only a record vLLM printed counts."""
    text = ("INFO 05-01 16:51:13 [gpu_model_runner.py:4801] Loading drafter model...\n"
            "Verify by grepping for `Detected MTP model. Sharing target model embedding weights with the draft model.`\n")
    assert report_from_log_text(text, "w.md").config.speculative_method is None
    printed = "INFO 05-01 16:51:13 [llm_base_proposer.py:1445] " + text.split("`")[1]
    assert report_from_log_text(printed, "w.log").config.speculative_method == "mtp"


def test_a_config_line_without_speculative_decoding_is_not_overruled() -> None:
    engine = ("INFO 05-01 16:51:00 [core.py:77] Initializing a V1 LLM engine (v0.20.0) with config: model='m', "
              "speculative_config=None, tokenizer='m'\n")
    mtp = "INFO 05-01 16:51:13 [llm_base_proposer.py:1445] Detected MTP model. Sharing target model lm_head weights.\n"
    assert report_from_log_text(engine + mtp, "w.log").config.speculative_method is None


ENV_ONLY = "03_vllm17227_template_env_dump_8xH20_cut.log"
"""vllm#17227's body as the corpus gave it: the bug template's `collect_env.py` listing (8×H20, torch 2.6.0) whose one
vLLM record is its import's `Automatically detected platform cuda.`, cut before any log. Before: read as a boot with
no rank's memory, warned that "the log ends before startup finished"."""


def test_an_environment_listing_alone_is_refused_in_one_line(cli, tmp_path) -> None:
    path = tmp_path / ENV_ONLY
    path.write_text(_text(ENV_ONLY), encoding="utf-8")
    result = cli("show", str(path))
    assert result.code == 2 and result.stdout == "" and len(result.stderr_lines) == 1
    assert result.stderr_lines[0] == (f"kvaudit: error: {path}: vLLM's environment listing (collect_env.py's "
                                      f"`Collecting environment information...`) and no line of a boot's log: pass "
                                      f"the boot's log with it")


def test_an_environment_listing_above_a_boots_lines_is_read() -> None:
    boot = ("INFO 04-26 11:58:20 [core.py:61] Initializing a V1 LLM engine (v0.8.4) with config: model='m'\n"
            "INFO 04-26 11:58:40 [gpu_model_runner.py:1200] Model loading took 14.99 GiB and 10.1 seconds\n")
    report = report_from_log_text(_text(ENV_ONLY) + "\n" + boot, "issue.md")
    assert report.engine.version == "0.8.4" and report.ranks[0].owners[Owner.WEIGHTS] is not None


def test_an_environment_listing_with_a_record_that_states_nothing_is_read() -> None:
    """A boot's record whose words kvaudit reads no fact from is still a boot's line: the text is no listing alone."""
    boot = "INFO 04-26 11:58:21 [api_server.py:1043] vLLM API server version 0.8.4\n"
    other = "INFO 04-26 11:58:22 [api_server.py:1044] args: (something kvaudit reads nothing from)\n"
    report = report_from_log_text(_text(ENV_ONLY) + "\n" + other, "issue.md")
    assert report.verdict is Verdict.UNKNOWN and report.environment.platform == "cuda"
    assert any(w.startswith("the log ends before startup finished") for w in report.warnings)
    assert report_from_log_text(_text(ENV_ONLY) + "\n" + boot, "issue.md").engine.version == "0.8.4"
