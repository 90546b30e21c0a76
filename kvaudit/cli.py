"""Command line. Each command parses flags, calls the core, renders, and returns an exit code.

Offline commands (diff, show, ingest) never import torch or vllm: engines are imported inside
the commands that boot something.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, Optional, TextIO

import typer

from kvaudit.config import no_option, size_option
from kvaudit.errors import ExitCode, KvauditError, UsageError
from kvaudit.printable import one_line
from kvaudit.render import DOCUMENT_FORMATS, DOCUMENT_SUFFIXES, Format, check_format, reporter

if TYPE_CHECKING:
    from kvaudit.write_config import Written

app = typer.Typer(
    name="kvaudit", add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # plain click help: no box that truncates option names at 80 columns
    help="Where every byte of vLLM startup GPU memory goes, per rank, and how much KV cache is really safe.")

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output on stdout (html and prom: in the -o "
                                                                  "file when one is given).")]
MIN_WIDTH = 40
"""Narrower, the owner table's label column alone fills the line."""
WidthOpt = Annotated[Optional[int], typer.Option("--width", min=MIN_WIDTH, help="Table width (default: the terminal's).")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the report JSON here; - is stdout "
                                                   "(the view then goes to stderr).")]
TraceOpt = Annotated[bool, typer.Option("--trace", help="Record the CUDA allocator's history and attribute every "
                                        "block to an owner and an allocation site (module/function).")]
WriteConfigOpt = Annotated[Optional[Path], typer.Option(
    "--write-config", metavar="FILE", help="Write a vllm serve config (YAML) with the safe values applied, only "
                                           "when the config fits: the --config YAML, or one built from the flags.")]
OwnersOpt = Annotated[Optional[list[Path]], typer.Option(
    "--owners", metavar="FILE", help="Extra owner rules for --trace (TOML, tried before kvaudit's defaults; "
                                     "see configs/owners.toml). Repeatable.")]


class _Command(typer.core.TyperCommand):
    """Plain help that reads at 80 columns: `REPORT`, not typer's `{REPORT}`, in the usage line,
    and `<path>...` for a list of paths, not its Python type."""

    def collect_usage_pieces(self, ctx):  # type: ignore[no-untyped-def]
        return [re.sub(r"^\{([^}]*)\}", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]

    def format_help(self, ctx, formatter):  # type: ignore[no-untyped-def]
        super().format_help(ctx, formatter)
        formatter.buffer[:] = ["".join(formatter.buffer).replace("<list[Path]>", "<path>...   ")]  # same width: the column stays aligned


def _emit_report(report, fmt: Format, width: int | None, output: Path | None = None,
                 inputs: Sequence[Path] = ()) -> None:
    from kvaudit.schema import dumps
    _emit(lambda out: reporter(fmt, width=width).report(report, out), lambda: dumps(report), fmt, output, inputs)


def _emit(view: Callable[[TextIO], None], record: Callable[[], str], fmt: Format, output: Path | None,
          inputs: Sequence[Path] = ()) -> None:
    """The view on stdout, then the record (report, diff or plan JSON) in -o: a file that cannot be
    written never costs the view. `-o -` puts the record on stdout and the view on stderr (once, for
    -f json). A document format (html, prom) goes whole into -o instead, and nothing to stdout; its
    file is replaced atomically (a textfile collector never reads half of one)."""
    from kvaudit.render.output import is_stdout
    to_stdout = is_stdout(output)
    if fmt in DOCUMENT_FORMATS and output is not None and not to_stdout:
        page = io.StringIO()
        view(page)
        _write(output, page.getvalue(), f"{fmt.value} output", inputs, replace=True)
        return
    if not (to_stdout and fmt is Format.JSON):
        stream = sys.stderr if to_stdout and fmt not in DOCUMENT_FORMATS else sys.stdout
        try:
            view(stream)
            stream.flush()
        except BrokenPipeError:  # the reader stopped (`kvaudit ingest … -o r.json | head`): not our failure,
            _silence(stream)     # so the record is still written and the exit code is still the command's
    if output is None or (to_stdout and fmt in DOCUMENT_FORMATS):
        return
    named = next((f for f, suffixes in DOCUMENT_SUFFIXES.items() if output.suffix.lower() in suffixes), None)
    if named is not None and fmt is not named:
        # a newcomer's `show r.json -o report.html`: the file gets the JSON, as documented; say so at once
        typer.echo(f"kvaudit: note: -o {one_line(output.name)} gets the JSON record; pass -f {named.value} for the "
                   f"{'page' if named is Format.HTML else 'metrics'}", err=True)
    _write(output, record(), "report", inputs)


def _write(output: Path, text: str, what: str, inputs: Sequence[Path] = (), replace: bool = False) -> None:
    from kvaudit.render.output import is_stdout, write_output
    try:
        write_output(output, text, inputs=inputs, replace=replace)
    except BrokenPipeError:
        if not is_stdout(output):
            raise UsageError(f"cannot write the {what} to {output}: broken pipe") from None
        _silence(sys.stdout)  # `-o -` and the reader stopped: the exit code stays the command's
        return
    except OSError as exc:
        raise UsageError(f"cannot write the {what} to {output}: {exc.strerror or exc}") from None
    if not is_stdout(output):
        typer.echo(f"kvaudit: {what} written to {output}", err=True)


def _version(value: bool) -> None:
    if value:
        from kvaudit import __version__
        typer.echo(f"kvaudit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print kvaudit's version and exit.")] = False) -> None:
    """Where every byte of vLLM startup GPU memory goes, per rank, and how much KV cache is really safe."""


@app.command(cls=_Command, short_help="Render a report or log: table, json, csv, markdown, html, prom.")
def show(report: Annotated[Path, typer.Argument(metavar="REPORT", help="A kvaudit report (JSON) or a raw vLLM log; - reads stdin.")],
         output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the report JSON here (-f html "
                                                        "or prom: the page or the metrics); - is stdout.")] = None,
         fmt: FormatOpt = Format.TABLE, width: WidthOpt = None) -> None:
    """Render one report (or a vLLM startup log) as a table, JSON, CSV, markdown, an HTML page or
    Prometheus metrics."""
    from kvaudit.engines.inputs import load_report
    from kvaudit.render.output import check_paths
    check_paths([("-o", output)], [("", report)])
    check_format(fmt)
    _emit_report(load_report(report), fmt, width, output, [report])


@app.command(cls=_Command, short_help="Per-owner deltas of two reports or logs; a CI gate on KV.")
def diff(a: Annotated[Path, typer.Argument(metavar="A", help="The run that booted (report JSON or vLLM log; - reads stdin).")],
         b: Annotated[Path, typer.Argument(metavar="B", help="The run to compare with it.")],
         output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the diff JSON here (-f html "
                                                        "or prom: the page or the metrics); - is stdout.")] = None,
         fmt: FormatOpt = Format.TABLE, width: WidthOpt = None,
         fail_on_kv_drop: Annotated[Optional[str], typer.Option(
             "--fail-on-kv-drop", metavar="SIZE|N%",
             help="Exit 1 when KV on the binding rank fell by more than this (4096, 512MiB, 1.5GiB, or 5% of "
                  "A's KV).")] = None,
         ) -> None:
    """Per-owner deltas per rank, the dominant owner, knob and environment differences, KV change."""
    from kvaudit.diff import check_kv_drop, diff_reports, kv_drop_limit, side_labels
    from kvaudit.engines.inputs import load_report
    from kvaudit.render.output import check_paths
    check_paths([("-o", output)], [("", a), ("", b)])
    check_format(fmt)
    limit = kv_drop_limit(fail_on_kv_drop) if fail_on_kv_drop is not None else None
    _stdin_once([a, b])
    a_name, b_name = side_labels(str(a), str(b))
    result = diff_reports(load_report(a), load_report(b), a_name=a_name, b_name=b_name)
    if not result.comparable:
        typer.echo("kvaudit: warning: the runs differ in " + ", ".join(k.knob for k in result.knob_differences)
                   + "; owner deltas mix config and code changes", err=True)
    from kvaudit.schema import dumps
    _emit(lambda out: reporter(fmt, width=width).diff(result, out), lambda: dumps(result), fmt, output, [a, b])
    if limit is not None:
        check_kv_drop(result, limit)


@app.command(cls=_Command, short_help="A report from the vLLM startup logs of one boot.")
def ingest(logs: Annotated[list[Path], typer.Argument(metavar="LOG", help="The vLLM startup logs of one boot, one file per node "
                                                            "(gzip too); - reads stdin.")],
           output: OutputOpt = None, fmt: FormatOpt = Format.TABLE, width: WidthOpt = None) -> None:
    """Turn the raw vLLM startup logs of one boot into a report (source log): every rank's owners and the verdict."""
    from kvaudit.engines.logs import report_from_logs
    from kvaudit.input_text import input_name, read_text
    from kvaudit.render.output import check_paths
    from kvaudit.report import exit_code
    _stdin_once(logs)
    check_paths([("-o", output)], [("", path) for path in logs])
    report = report_from_logs([(read_text(path), input_name(path)) for path in logs])
    _emit_report(report, fmt, width, output, logs)
    raise typer.Exit(int(exit_code(report)))


def _stdin_once(paths: list[Path]) -> None:
    if sum(str(p) == "-" for p in paths) > 1:
        raise UsageError("- (standard input) can be read only once: save one of the inputs to a file")


class _RunCommand(_Command):
    """Remembers what came before `--`: an option `run` does not have there is a typo of one of
    its own or a vLLM argument (config.check_run_options); after `--` it is vLLM's."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        ctx.meta["kvaudit.before_dashdash"] = list(args[:args.index("--")] if "--" in args else args)
        return super().parse_args(ctx, _bare_verify(args))


def _bare_verify(args: list[str]) -> list[str]:
    """`--verify` alone is `--verify=all` (every scenario that applies); followed by a word that is
    no option (`--verify prefill,batch`) that word is its value. After `--` nothing is kvaudit's."""
    out = list(args)
    end = out.index("--") if "--" in out else len(out)
    for i in range(end):
        if out[i] == "--verify" and (i + 1 >= end or out[i + 1].startswith("-")):
            out[i] = "--verify=all"
    return out


@app.command(cls=_RunCommand, short_help="Boot vLLM with the audit worker: owners per rank, verdict.",
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(ctx: typer.Context,
        model: Annotated[Optional[str], typer.Option(help="Model directory (config.json) or Hugging Face id (from "
                                                          "the HF cache, as vLLM resolves it). Default: the embedded "
                                                          "tiny DeepSeek-V3-style model.")] = None,
        dummy_weights: Annotated[bool, typer.Option("--dummy-weights", help="Random weights of the real shapes: "
                                                    "audit a checkpoint from its config.json alone.")] = False,
        tp: Annotated[Optional[int], typer.Option("--tp", help="tensor_parallel_size  [default: 1]")] = None,
        dcp: Annotated[Optional[int], typer.Option("--dcp", help="decode_context_parallel_size  [default: 1]")] = None,
        mtp: Annotated[Optional[int], typer.Option("--mtp", help="MTP speculative tokens (method mtp)")] = None,
        gmu: Annotated[Optional[float], typer.Option("--gmu", help="gpu_memory_utilization. Default: vLLM's on a "
                                                     "GPU; on CPU a fraction of NUMA node 0, about 3 GiB per worker and "
                                                     "at most 80% of the node's available memory / tp (the report "
                                                     "says which).")] = None,
        max_model_len: Annotated[Optional[int], typer.Option(
            "--max-model-len", parser=size_option("max_model_len"), metavar="<int>",
            help="Default: the model's (4096 for the embedded model). As in vLLM: 32k, 32K.")] = None,
        max_num_seqs: Annotated[Optional[int], typer.Option(
            "--max-num-seqs", help="Default: vLLM's (8 for the embedded model).")] = None,
        max_num_batched_tokens: Annotated[Optional[int], typer.Option(
            "--max-num-batched-tokens", parser=size_option("max_num_batched_tokens"), metavar="<int>",
            help="Default: vLLM's (512 for the embedded model). As in vLLM: 8k, 8K.")] = None,
        cudagraph_sizes: Annotated[Optional[str], typer.Option("--cudagraph-sizes", metavar="1,2,4,8",
                                                               help="cudagraph_capture_sizes")] = None,
        kv_cache_dtype: Annotated[Optional[str], typer.Option("--kv-cache-dtype", help="Default: vLLM's (auto).")] = None,
        enforce_eager: Annotated[Optional[bool], typer.Option("--enforce-eager/--no-enforce-eager",
                                                              help="Default: eager on CPU, graphs on GPU.")] = None,
        config_file: Annotated[Optional[Path], typer.Option("--config", help="A vllm serve config (YAML, read as "
                                                            "vllm serve --config reads it) or a kvaudit TOML preset "
                                                            "(configs/*.toml).")] = None,
        write_config: WriteConfigOpt = None,
        verify: Annotated[Optional[str], typer.Option(
            "--verify", metavar="[LIST]", help="After boot, on the sized cache, true peak vs budget: "
            "prefill (a max_model_len prompt + decode), batch (max_num_seqs requests filling the KV, "
            "decoding together), spec (the same with the draft tokens; with --mtp), sampling (top-k, "
            "top-p, min-p, logprobs). Alone: every one that applies; or a comma-separated list.")] = None,
        repeat: Annotated[int, typer.Option("--repeat", min=1, metavar="N", help="Boot N times, a fresh engine each: "
                                            "per owner and rank min/median/max and the KV tokens' "
                                            "spread; the report is the worst boot's.")] = 1,
        cold: Annotated[bool, typer.Option("--cold", help="Empty vLLM's, torch.compile's and the kernel "
                                           "caches before each boot (a private folder, never yours).")] = False,
        output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the report JSON here "
                                                       "(also when the boot fails); - is stdout (the view then "
                                                       "goes to stderr).")] = None,
        fmt: FormatOpt = Format.TABLE, width: WidthOpt = None,
        timeout: Annotated[float, typer.Option("--timeout", help="Seconds before a hung boot is stopped.")] = 1800.0,
        log: Annotated[Optional[Path], typer.Option("--log", help="Keep vLLM's own log in this file (with "
                                                    "--repeat, boot K's in FILE.bootK).")] = None,
        trace: TraceOpt = False, owners: OwnersOpt = None,
        sweep: Annotated[bool, typer.Option("--sweep", help="Also profile the activation peak at 1/8, 1/4 and 1/2 "
                                            "of max_num_batched_tokens, for `kvaudit plan`.")] = False,
        ) -> None:
    """Boot vLLM with the fixed profiling order and report every rank's owners and the KV verdict.

    Further vLLM engine arguments, or a whole `vllm serve` line, go after `--`:

    \b
      kvaudit run --tp 2 -- --enable-expert-parallel
      kvaudit run -- vllm serve MODEL --config config.yaml -tp 4
    """
    from kvaudit.config import build_run, check_run_options, passthrough_overrides
    from kvaudit.engines.process import StopSignals
    from kvaudit.engines.vllm import RunOptions, node_rank, preflight, run_audit, run_follower
    from kvaudit.engines.vllm.engine_args import engine_arg_names
    from kvaudit.render.output import check_paths, model_config
    from kvaudit.render.progress import Progress
    from kvaudit.report import exit_code

    # every file this run reads or writes, before the boot: a missing folder or a FIFO is exit 2 now
    from kvaudit.serve_config import line_config_path
    inputs = [("--config", config_file), ("the serve line's --config", line_config_path(ctx.args)),
              *(("--owners", path) for path in owners or ()), ("the model's", model_config(model))]
    _check_write_config(write_config)
    check_paths([("-o", output), ("--log", log), ("--write-config", write_config)], inputs)
    check_seconds("--timeout", timeout)
    engine_args = engine_arg_names()
    before = ctx.meta.get("kvaudit.before_dashdash", [])
    check_run_options([a for a in ctx.args[:len(before)] if a in before],
                      [o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")],
                      engine_args)
    check_format(fmt)  # -f html without matplotlib: now, not after the boot
    if config_file is not None:
        config_not_a_report(config_file)
    knobs = dict(tensor_parallel_size=tp, decode_context_parallel_size=dcp, gpu_memory_utilization=gmu,
                 max_model_len=max_model_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                 kv_cache_dtype=kv_cache_dtype, enforce_eager=enforce_eager)
    config, deployment = build_run(model=model, dummy_weights=dummy_weights, preset=config_file, passthrough=ctx.args,
                                   engine_args=engine_args, mtp=mtp, cudagraph_sizes=cudagraph_sizes, **knobs)
    for said in passthrough_overrides(ctx.args, **knobs):
        typer.echo(f"kvaudit: note: {said}", err=True)
    if write_config is not None:
        from kvaudit.write_config import check_run_target
        check_run_target(config, deployment)
    preflight(config)  # what can be refused without booting is refused now, before any output
    from kvaudit.engines.vllm.verify import check_repeat, choose
    check_repeat(repeat, config)
    options = RunOptions(verify=choose(verify, config) if verify is not None else (), timeout_s=timeout,
                         log_path=log, trace=trace, owners=tuple(owners or ()), sweep=sweep, repeat=repeat, cold=cold)
    _echo_deployment(deployment, model)
    if node_rank(config) > 0:  # -- --nnodes N --node-rank K: serve this node's ranks; node 0 reports
        with StopSignals() as signals:
            with Progress.for_run(config, log) as progress:
                outcome = run_follower(config, options, progress.on_event, signals)
        typer.echo(f"kvaudit: {outcome.message}", err=True)
        if write_config is not None:
            typer.echo(f"kvaudit: no config written to {write_config}: node 0 has the report; pass --write-config "
                       f"there", err=True)
        raise typer.Exit(outcome.exit_code)
    # SIGINT, SIGTERM and SIGHUP stop the boot; they stay deferred until the report is written
    with StopSignals() as signals:
        with Progress.for_run(config, log) as progress:
            report = run_audit(config, options, progress.on_event, signals)
        if not _table_seen(fmt, output):  # there the table's own warning lines are below it
            _echo_warnings(report)
        _emit_report(report, fmt, width, output, [p for _, p in inputs if p is not None])
        _echo_pinned(deployment, report)
        if write_config is not None:
            from kvaudit.write_config import run_config
            _write_config(write_config, report, int(exit_code(report)), output,
                          [p for _, p in inputs if p is not None],
                          lambda name: run_config(asked=config, deployment=deployment, report=report, report_name=name))
    raise typer.Exit(int(exit_code(report)))


def _check_write_config(path: Optional[Path]) -> None:
    if path is not None:
        from kvaudit.write_config import check_target
        check_target(path)


_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
"""A disk full, over quota or read-only when output is written (`> /dev/full`)."""


def check_seconds(flag: str, seconds: float) -> None:
    """A time limit is a number of seconds above 0 (0, a negative or nan would end every boot at once, or
    never): exit 2 naming the flag, before anything starts."""
    import math
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{flag} takes a finite number of seconds above 0, got {seconds}")


def _echo_deployment(deployment, model: Optional[str], planned: bool = False) -> None:
    """Before the boot (or the plan): what kvaudit took from a vllm serve config or line and left out."""
    if deployment is not None:
        from kvaudit.serve_config import deployment_notes
        for line in deployment_notes(deployment, model_given=model is not None, planned=planned):
            typer.echo(f"kvaudit: note: {one_line(line)}", err=True)


def _echo_pinned(deployment, report) -> None:
    """After the boot (or the plan): a deployment's own kv-cache-memory-bytes above the safe bytes is a warning."""
    from kvaudit.render.summary import safe_kv_bytes
    from kvaudit.serve_config import pinned_warnings
    for line in pinned_warnings(deployment, safe_kv_bytes(report.capacity)):
        typer.echo(f"kvaudit: warning: {one_line(line)}", err=True)


def _write_config(path: Path, report, code: int, output: Optional[Path], inputs: Sequence[Path],
                  written: Callable[[str], Written]) -> None:
    """--write-config after the report: the config with the safe values, or one line saying why not."""
    from kvaudit.render.output import is_stdout
    from kvaudit.write_config import config_refusal
    why = config_refusal(report, code)
    if why is not None:
        typer.echo(f"kvaudit: no config written to {path} (left as it was): {one_line(why)}", err=True)
        return
    name = (str(output) if output is not None and not is_stdout(output) else
            "the report on standard output" if output is not None else "this run's report (not saved: -o keeps it)")
    result = written(name)
    _write(path, result.text, "config", inputs)
    typer.echo(f"kvaudit: safe values set: {', '.join(result.changes)}", err=True)


def _table_seen(fmt: Format, output: Optional[Path]) -> bool:
    """The report's view, warnings included, is read on the terminal: on stdout when that is one,
    or on stderr (`-o -` puts the JSON on stdout and the view there)."""
    from kvaudit.render.output import is_stdout
    return fmt in (Format.TABLE, Format.MARKDOWN) and (is_stdout(output) or _stdout_is_terminal())


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _echo_warnings(report) -> None:
    """The report's warnings (those that want action, not its notes) on stderr too: stdout may be a
    file or JSON, and an untested vLLM, a retried warmup or a surviving process must be seen."""
    from kvaudit.render.summary import notes_and_warnings
    for line in notes_and_warnings(report)[1]:
        typer.echo(f"kvaudit: warning: {one_line(line)}", err=True)


@app.command(cls=_Command, short_help="Planted allocations of known size: the ground truth.")
def selftest(device: Annotated[str, typer.Option("--device", help="cuda (the proof) or cpu (a smoke run).")] = "cuda",
             tp: Annotated[int, typer.Option("--tp", help="Ranks: one process per GPU (gloo on cpu).")] = 1,
             gmu: Annotated[Optional[float], typer.Option(
                 "--gmu", help="gpu_memory_utilization. Default: 0.98 on cuda; on cpu a fraction of the host's "
                               "memory, about 2 GiB per rank and at most 80% of the available memory / tp "
                               "(the report says which).")] = None,
             verify: Annotated[bool, typer.Option("--verify", help="Allocate KV, replay graphs, run the "
                                                  "worst-case step; true peak vs budget.")] = False,
             repeat: Annotated[int, typer.Option("--repeat", help="Verify repeats.")] = 1,
             inject_warmup_failure: Annotated[bool, typer.Option("--inject-warmup-failure", help="Fail the "
                                                                 "first warmup attempt (retry, count once).")] = False,
             sizing: Annotated[str, typer.Option("--sizing", help="kvaudit (fixed order) or naive (one profile "
                                                 "before warmup, the order upstream vLLM sizes KV in).")] = "kvaudit",
             retain_graph_pool: Annotated[bool, typer.Option("--retain-graph-pool", help="Keep the profiling "
                                                             "graph pool (and its pages) alive.")] = False,
             output: OutputOpt = None, fmt: FormatOpt = Format.TABLE, width: WidthOpt = None,
             timeout: Annotated[float, typer.Option("--timeout", help="Seconds before a hung rank is stopped.")] = 900.0,
             trace: TraceOpt = False, owners: OwnersOpt = None) -> None:
    """Planted-allocation ground truth: a torch workload of known sizes through the same sequence."""
    from kvaudit.engines.selftest import SelftestOptions, check_options, run_selftest
    from kvaudit.render.output import check_paths
    from kvaudit.render.progress import Progress
    from kvaudit.report import exit_code
    check_paths([("-o", output)], [("--owners", path) for path in owners or ()])
    check_seconds("--timeout", timeout)
    check_format(fmt)
    opts = SelftestOptions(device=device, tensor_parallel_size=tp, gpu_memory_utilization=gmu, verify=verify,
                           repeat=repeat, inject_warmup_failure=inject_warmup_failure, sizing=sizing,
                           retain_graph_pool=retain_graph_pool, timeout_s=timeout, trace=trace,
                           owners=tuple(owners or ()))
    check_options(opts)  # before the progress line says anything has started
    with Progress.for_selftest(opts) as progress:
        report = run_selftest(opts, progress.on_event)
    _emit_report(report, fmt, width, output)
    raise typer.Exit(int(exit_code(report)))


def main() -> None:
    """Console entry point: every KvauditError is one line on stderr and its exit code."""
    try:
        code = app(standalone_mode=False, prog_name="kvaudit")  # not "python -m kvaudit"
        try:
            sys.stdout.flush()  # a closed pipe shows here when the data fit in the buffer
        except BrokenPipeError:
            _silence(sys.stdout)  # the reader stopped; the command's exit code stands
    except KvauditError as exc:
        typer.echo(f"kvaudit: error: {one_line(str(exc))}", err=True)
        sys.exit(int(exc.exit_code))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("kvaudit: interrupted", err=True)
        sys.exit(int(ExitCode.INCOMPLETE))
    except _PARSE_ERRORS as exc:
        _usage_error(exc)
    except BrokenPipeError:
        _stdout_closed()
    except SystemExit as exc:
        # typer answers a closed pipe inside a command with sys.exit(1), a finding; the reader
        # (`kvaudit show … | head`) stopping is no failure of ours.
        if isinstance(exc.__context__, BrokenPipeError):
            _stdout_closed()
        raise
    except Exception as exc:  # a bug: still one line, the traceback on request
        if os.environ.get("KVAUDIT_DEBUG"):
            raise
        if isinstance(exc, OSError) and exc.errno in _FULL:  # the machine's, not a bug: named with its file
            where = f" {exc.filename}" if exc.filename else ""
            typer.echo(f"kvaudit: error: could not write{where}: {exc.strerror or exc} (free space or a writable "
                       f"place, then run it again)", err=True)
            sys.exit(int(ExitCode.INCOMPLETE))
        typer.echo(f"kvaudit: internal error: {type(exc).__name__}: {one_line(str(exc))} (KVAUDIT_DEBUG=1 shows "
                   f"the traceback)",
                   err=True)
        sys.exit(int(ExitCode.INCOMPLETE))
    sys.exit(code if isinstance(code, int) else 0)


# What typer raises for a command line it cannot parse. typer >= 0.2x vendors click and roots it at
# typer.TyperException; older typer re-exports click's classes (click.ClickException). Either way it
# is the base of typer.BadParameter right under Exception, found without importing click.
_PARSE_ERRORS: type[Exception] = next(c for c in typer.BadParameter.__mro__ if Exception in c.__bases__)


def _usage_error(exc: Exception) -> NoReturn:
    """One line and the help to read, exit 2. Bare `kvaudit` raises one that carries the help,
    which typer has printed already (its message is then empty) or not (the message is the help)."""
    message = exc.format_message().strip()  # type: ignore[attr-defined]
    if "\n" in message:
        typer.echo(message, err=True)
    elif message:
        message = message.replace("Value error, ", "")  # pydantic's label, not ours
        # typer >= 0.2x checks values with pydantic, whose message leaves out the value it refused
        cause = exc.__cause__
        given = [e.get("input") for e in cause.errors()] if callable(getattr(cause, "errors", None)) else []
        if len(given) == 1 and repr(given[0]) not in message:
            message += f": got {given[0]!r}"
        ctx = getattr(exc, "ctx", None)
        # an option missing its value is refused before the verb's context exists: the verb is the first argument
        verb = next((a for a in sys.argv[1:2] if a in {c.name or c.callback.__name__ for c in app.registered_commands
                                                        if c.callback is not None}), None)
        where = ctx.command_path if ctx else f"kvaudit {verb}" if verb else "kvaudit"
        if type(exc).__name__ == "NoSuchOption":  # said as `kvaudit run` says its own (config.check_run_options)
            near = sorted(getattr(exc, "possibilities", None) or ())
            message = no_option(where, getattr(exc, "option_name", ""), " or ".join(near) or None)
        typer.echo(f"kvaudit: error: {one_line(message)} (see {where} --help)", err=True)
    sys.exit(int(ExitCode.USAGE))


def config_not_a_report(path: Path) -> None:
    """A kvaudit report given as `--config` is refused as what it is (a newcomer's got "source is not an option of
    vllm serve": JSON is YAML, and the report's keys were read as serve options)."""
    import json

    from kvaudit.schema import REPORT_SCHEMA
    from kvaudit.serve_config import read_config_text
    text = read_config_text(path, "config file")
    if not text.lstrip().startswith("{"):
        return
    try:
        data = json.loads(text)
    except ValueError:
        return
    if isinstance(data, dict) and data.get("schema") == REPORT_SCHEMA:
        raise UsageError(f"config file {path} is a kvaudit report, not a config: --config takes a vllm serve YAML or "
                         f"a TOML preset (a report goes to kvaudit show, plan or diff)")


def _silence(stream: TextIO) -> None:
    """Python's advice for a closed pipe (signal docs, "Note on SIGPIPE"): point the stream's file at
    devnull, so later writes and the flush at interpreter exit do not raise again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (tests, an embedding program): nothing will flush it to a pipe


def _stdout_closed() -> NoReturn:
    """A closed pipe outside a view (help, a version line): exit quietly."""
    _silence(sys.stdout)
    sys.exit(0)


@app.command(cls=_Command, short_help="Predict an edited config's report from a measured one.")
def plan(report: Annotated[Path, typer.Argument(metavar="REPORT", help="A measured kvaudit report (JSON) or a raw vLLM log.")],
         gmu: Annotated[Optional[float], typer.Option("--gmu", help="New gpu_memory_utilization.")] = None,
         max_model_len: Annotated[Optional[int], typer.Option("--max-model-len", parser=size_option("max_model_len"),
                                                             metavar="<int>", help="New max_model_len.")] = None,
         max_num_seqs: Annotated[Optional[int], typer.Option(
             "--max-num-seqs", help="New max_num_seqs (more than measured needs a boot).")] = None,
         max_num_batched_tokens: Annotated[Optional[int], typer.Option(
             "--max-num-batched-tokens", parser=size_option("max_num_batched_tokens"), metavar="<int>",
             help="New max_num_batched_tokens (a --sweep report interpolates).")] = None,
         cudagraph_sizes: Annotated[Optional[str], typer.Option("--cudagraph-sizes", metavar="1,2,4,8",
                                                                help="New cudagraph_capture_sizes.")] = None,
         kv_cache_dtype: Annotated[Optional[str], typer.Option(
             "--kv-cache-dtype", help="New kv_cache_dtype (a 16-bit spec to plain fp8 halves it).")] = None,
         enforce_eager: Annotated[Optional[bool], typer.Option(
             "--enforce-eager/--no-enforce-eager", help="Drop or add graph capture.")] = None,
         solve: Annotated[Optional[str], typer.Option("--solve", metavar="max-model-len|gmu|max-num-seqs",
                                                      help="Solve for one knob.")] = None,
         for_len: Annotated[Optional[int], typer.Option("--for-len", help="With --solve max-num-seqs: tokens "
                                                        "per request.")] = None,
         output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the plan's report JSON here "
                                                        "(as -f json prints it; -f html or prom: the page or the "
                                                        "metrics); - is stdout.")] = None,
         fmt: FormatOpt = Format.TABLE, width: WidthOpt = None,
         config_file: Annotated[Optional[Path], typer.Option(
             "--config", help="The deployment's vllm serve config (YAML): its knobs are the plan's edits "
                              "(flags win); --write-config writes it back.")] = None,
         write_config: WriteConfigOpt = None) -> None:
    """Predict the report of an edited config from a measured one, without booting: every owner
    measured, scaled (rule and points) or unknown (what to boot), then KV, the verdict and safe flags."""
    from kvaudit.engines.inputs import load_report
    from kvaudit.plan import edits_from_flags, plan_dumps, plan_exit_code, plan_or_solve
    from kvaudit.render.output import check_paths
    from kvaudit.render.plan import render_plan
    _check_write_config(write_config)
    check_paths([("-o", output), ("--write-config", write_config)], [("", report), ("--config", config_file)])
    edits = edits_from_flags(gmu=gmu, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=max_num_batched_tokens, cudagraph_sizes=cudagraph_sizes,
                             kv_cache_dtype=kv_cache_dtype, enforce_eager=enforce_eager)
    measured = load_report(report)
    deployment = None
    if config_file is not None:
        from kvaudit.config import engine_name_check
        from kvaudit.serve_config import plan_deployment
        # without vLLM's grammar (no vLLM here) only kvaudit's own names tell a typo
        deployment, edits = plan_deployment(config_file, measured, edits, engine_name_check(None))
        _echo_deployment(deployment, measured.config.model, planned=True)
    result = plan_or_solve(measured, edits, solve, for_len)
    _emit(lambda out: render_plan(result, fmt, out, width=width), lambda: plan_dumps(result), fmt, output, [report])
    _echo_pinned(deployment, result.report)
    if write_config is not None:
        from kvaudit.write_config import plan_config
        _write_config(write_config, result.report, int(plan_exit_code(result)), None, [report],
                      lambda name: plan_config(plan=result, deployment=deployment, report_name=str(report)))
    raise typer.Exit(int(plan_exit_code(result)))
