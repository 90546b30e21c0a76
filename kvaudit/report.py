"""Assemble reports (rank ledgers → capacity → verdict), decide exit codes, read and write files.

Engines hand over per-rank measurements; this module is where they become a `Report`. Reading
accepts a report JSON, or a raw vLLM log (detected by content), and nothing else.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import zlib
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, Iterable, Mapping, Sequence

from kvaudit import __version__
from kvaudit.capacity import OVERCOMMIT_TOLERANCE_BYTES, KvGeometry, capacity, over_committed, overcommit_bytes
from kvaudit.config import AuditConfig
from kvaudit.errors import BadInputError, ExitCode
from kvaudit.ledger import check_balance, growth_after_sizing, rank_ledger
from kvaudit.schema import (
    AccuracyEntry, Capacity, Engine, Environment, Failure, FailureKind, Owner, Phase, PhaseRecord,
    RankReport, Report, Site, Source, Verdict, Verify,
)
from kvaudit.units import fmt_bytes, fmt_gib, fmt_tokens
from kvaudit.validate import report_from_json

MAX_INPUT_BYTES = 2 << 30
"""Refuse to read more than this from one file (a log of a few hundred MB is normal); a gzip file
is refused as soon as what it expands to passes it."""
STDIN = "-"
"""The path that means standard input (`xclip -o | kvaudit show -`)."""
_CHUNK = 1 << 20


def rank_report(rank: int, phases: Iterable[PhaseRecord], *, tp_rank: int | None, dcp_rank: int | None,
                device_total_bytes: int | None, gpu_memory_utilization: float | None, others_bytes: int | None,
                graph_pool_estimate_bytes: int | None, kv_cache_bytes: int | None,
                kv_available_bytes: int | None = None, kv_blocks: int | None = None,
                deferred_steps: Sequence[str] = (), vllm_kv_available_bytes: int | None = None,
                sites: Sequence[Site] | None = None, vllm_graph_estimate_bytes: int | None = None,
                graph_capture_transient_bytes: int | None = None) -> RankReport:
    """One rank's report from its phase records. `kv_available_bytes` is what the engine really
    returned to vLLM when it differs from a recomputation (it never should; see tests)."""
    phases = tuple(phases)
    by_name = {p.name: p for p in phases}
    led = rank_ledger(by_name, device_total_bytes=device_total_bytes, gpu_memory_utilization=gpu_memory_utilization,
                      others_bytes=others_bytes, graph_pool_estimate_bytes=graph_pool_estimate_bytes,
                      kv_cache_bytes=kv_cache_bytes, capture_transient_bytes=graph_capture_transient_bytes)
    return RankReport(
        rank=rank, tp_rank=tp_rank, dcp_rank=dcp_rank, device_total_bytes=device_total_bytes,
        requested_bytes=led.requested_bytes, others_bytes=others_bytes, owners=led.owners,
        graph_pool_estimate_bytes=graph_pool_estimate_bytes, graph_pool_actual_bytes=led.graph_pool_actual_bytes,
        kv_available_bytes=kv_available_bytes if kv_available_bytes is not None else led.kv_available_bytes,
        phases=phases, naive_kv_available_bytes=led.naive_kv_available_bytes,
        free_at_start_bytes=led.free_at_start_bytes, kv_blocks=kv_blocks, deferred_steps=tuple(deferred_steps),
        vllm_kv_available_bytes=vllm_kv_available_bytes, sites=tuple(sites) if sites is not None else None,
        vllm_graph_estimate_bytes=vllm_graph_estimate_bytes, graph_capture_transient_bytes=graph_capture_transient_bytes)


def build_report(*, source: Source, config: AuditConfig, ranks: Sequence[RankReport], engine: Engine,
                 environment: Environment, geometry: KvGeometry | None = None, verify: Verify | None = None,
                 failure: Failure | None = None, accuracy: Sequence[AccuracyEntry] | None = None,
                 warnings: Sequence[str] = (), known_kv_tokens: int | None = None,
                 known_max_feasible_model_len: int | None = None, known_max_model_len_fits: bool | None = None,
                 known_kv_needed_bytes: int | None = None, graph_bytes_per_size: int | None = None) -> Report:
    cap = capacity(ranks, config, geometry, known_kv_tokens=known_kv_tokens,
                   known_max_feasible_model_len=known_max_feasible_model_len,
                   known_max_model_len_fits=known_max_model_len_fits, known_kv_needed_bytes=known_kv_needed_bytes,
                   graph_bytes_per_size=graph_bytes_per_size,
                   verify_overrun_bytes=verify.overrun_bytes if verify is not None else 0)
    if source is Source.SELFTEST:  # no vLLM to pass flags to
        cap = replace(cap, safe_serve_flags=())
    verdict, reason = decide_verdict(ranks, cap, config, failure, verify)
    warn = list(warnings)
    small = overcommit_bytes(ranks)
    if 0 < small <= OVERCOMMIT_TOLERANCE_BYTES:
        warn.append(f"note: a rank used {fmt_bytes(small)} more than it requested after KV was sized (within the "
                    f"{fmt_bytes(OVERCOMMIT_TOLERANCE_BYTES)} tolerance)")
    if verify is not None and verify.ok and verify.overrun_bytes:
        warn.append(f"note: verify's true peak was {fmt_bytes(verify.overrun_bytes)} above the requested budget (within "
                    f"the {fmt_bytes(OVERCOMMIT_TOLERANCE_BYTES)} tolerance)")
    for r in ranks:
        if r.deferred_steps:
            warn.append(f"rank {r.rank}: warmup steps {', '.join(r.deferred_steps)} needed the KV cache and ran "
                        f"after it; their bytes were not budgeted")
    return Report(source=source, engine=engine, environment=environment, config=config, ranks=tuple(ranks),
                  capacity=cap, verdict=verdict, verify=verify,
                  accuracy=tuple(accuracy) if accuracy is not None else None, failure=failure,
                  verdict_reason=reason, warnings=tuple(warn), kvaudit_version=__version__)


def decide_verdict(ranks: Sequence[RankReport], cap: Capacity, config: AuditConfig, failure: Failure | None,
                   verify: Verify | None) -> tuple[Verdict, str]:
    """ok / fail / unknown, and one sentence that says why and names the fix."""
    if failure is not None:
        where = f" in {failure.phase.value}" if failure.phase else ""
        rank = f" on rank {failure.rank}" if failure.rank is not None else ""
        if failure.kind is FailureKind.DOES_NOT_FIT and cap.max_model_len_fits is False:
            return Verdict.FAIL, _does_not_fit(cap, config)
        if failure.kind in (FailureKind.DOES_NOT_FIT, FailureKind.OOM, FailureKind.STARTUP_MEMORY):
            return Verdict.FAIL, f"boot failed{where}{rank} ({failure.kind.value}): {failure.message}"
        return Verdict.UNKNOWN, f"audit incomplete{where}{rank} ({failure.kind.value}): {failure.message}"
    if over_committed(ranks):
        worst = max(ranks, key=lambda r: -(r.owners.get(Owner.KV_UNALLOCATED) or 0))
        return Verdict.FAIL, (f"rank {worst.rank} used {fmt_bytes(overcommit_bytes(ranks))} more than it requested "
                              f"after KV was sized ({_growth_text(worst)}): "
                              + (f"pass {cap.safe_serve_flags[0]}" if cap.safe_serve_flags
                                 else "lower the KV cache by that much"))
    if verify is not None and not verify.ok:
        return Verdict.FAIL, f"verify failed: {verify.error or 'true peak above the budget'}"
    if cap.max_model_len_fits is None:
        if cap.kv_available_bytes is not None and cap.kv_available_bytes <= 0:
            return Verdict.FAIL, "no memory is left for the KV cache: raise --gmu or lower the other owners"
        return Verdict.UNKNOWN, "not enough facts to decide whether max_model_len fits"
    if cap.max_model_len_fits:
        text = f"fits: {fmt_gib(cap.kv_available_bytes)} KV on rank {cap.binding_rank}"
        if cap.kv_tokens is not None:
            text += f" holds {fmt_tokens(cap.kv_tokens)} tokens"
        if cap.kv_needed_bytes is not None:
            text += f"; max_model_len {config.max_model_len} needs {fmt_gib(cap.kv_needed_bytes)}"
        return Verdict.OK, text
    return Verdict.FAIL, _does_not_fit(cap, config)


def _does_not_fit(cap: Capacity, config: AuditConfig) -> str:
    length = config.max_model_len
    if cap.max_feasible_model_len == 0 or (cap.kv_available_bytes is not None and cap.kv_available_bytes <= 0):
        return (f"no request fits: {fmt_gib(cap.kv_available_bytes)} is left for KV on rank {cap.binding_rank}; "
                f"raise --gmu or free memory from the other owners")
    # vLLM's check keeps one block back (the null block), so that much more must be freed.
    short = (cap.kv_needed_bytes + (cap.kv_bytes_per_block or 0) - cap.kv_available_bytes
             if cap.kv_needed_bytes is not None and cap.kv_available_bytes is not None else None)
    needs = f" needs {fmt_gib(cap.kv_needed_bytes)} KV," if cap.kv_needed_bytes is not None else ""
    text = f"does not fit: max_model_len {length}{needs} {fmt_gib(cap.kv_available_bytes)} available"
    if cap.binding_rank is not None:
        text += f" on rank {cap.binding_rank}"
    if cap.max_feasible_model_len is not None:
        text += f": lower --max-model-len to {cap.max_feasible_model_len}"
    if short is not None:
        text += f" or free {fmt_gib(short)}"
    if cap.physical_headroom_bytes is not None:
        text += f" (raising --gmu can recover at most {fmt_gib(max(cap.physical_headroom_bytes, 0))} here)"
    return text


def _growth_text(rank: RankReport) -> str:
    grown = growth_after_sizing(phase_map(rank), others_bytes=rank.others_bytes,
                                graph_pool_estimate_bytes=rank.graph_pool_estimate_bytes,
                                kv_cache_bytes=rank.owners.get(Owner.KV_CACHE), requested=rank.requested_bytes)
    parts = [f"{owner.value} +{fmt_bytes(delta)}" for owner, delta in grown.items() if delta > 0]
    unexplained = -(rank.owners.get(Owner.KV_UNALLOCATED) or 0) - sum(d for d in grown.values() if d > 0)
    if unexplained > OVERCOMMIT_TOLERANCE_BYTES:
        parts.append(f"the KV figure itself {fmt_bytes(unexplained)} above what the owners left")
    return ", ".join(parts) if parts else "no owner grew"


def exit_code(report: Report) -> ExitCode:
    """0 fits; 1 a finding (does not fit); 3 the audit could not complete."""
    if report.failure is not None and report.failure.kind is not FailureKind.DOES_NOT_FIT:
        return ExitCode.INCOMPLETE
    if report.verdict is Verdict.OK:
        return ExitCode.OK
    if report.verdict is Verdict.FAIL:
        return ExitCode.FINDING
    return ExitCode.INCOMPLETE


# --------------------------------------------------------------------------------------------
# Files


def input_name(path: Path | str) -> str:
    """How messages name an input: its path, or `<stdin>` for `-`."""
    return "<stdin>" if str(path) == STDIN else str(path)


def read_text(path: Path | str) -> str:
    """File contents as text: `-` is standard input; gzip by its magic bytes, not its suffix;
    undecodable bytes replaced. Only regular files are opened: a FIFO with no writer would block
    forever and a device (`/dev/zero`) never ends."""
    if str(path) == STDIN:
        return _decode(_read_capped(sys.stdin.buffer, input_name(path)))
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise BadInputError(f"{path}: is a directory, not a report or log")
        if not stat.S_ISREG(mode):
            raise BadInputError(f"{path}: not a regular file (a FIFO, device or socket): save it to a file first, "
                                f"or pipe it in as `-`")
        with open(path, "rb") as fh:
            return _decode(_read_capped(fh, str(path)))
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"{path}: is a directory, not a report or log") from None
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _too_large(where: str) -> BadInputError:
    return BadInputError(f"{where}: larger than {MAX_INPUT_BYTES >> 30} GiB; pass the startup part of the log")


def _read_capped(fh: BinaryIO, where: str) -> bytes:
    """At most MAX_INPUT_BYTES (+1, to tell "too large"); gzip is expanded as a stream."""
    raw = fh.read(MAX_INPUT_BYTES + 1)
    if len(raw) > MAX_INPUT_BYTES:
        raise _too_large(where)
    return _gunzip(raw, where) if raw[:2] == b"\x1f\x8b" else raw


def _gunzip(packed: bytes, where: str) -> bytes:
    """Expand gzip (members one after another, as `cat a.gz b.gz` makes) chunk by chunk, and stop
    as soon as the output passes the cap: a small bomb never expands whole. A first pass only
    counts what the stream expands to, so a bomb is refused in constant memory (a 3 MB file of
    3.2 GB took 3.2 GB of RSS when the expansion was kept up to the cap)."""
    _inflate(packed, where, keep=False)
    return _inflate(packed, where, keep=True)


def _inflate(packed: bytes, where: str, *, keep: bool) -> bytes:
    out = bytearray()
    size = 0
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    started = True
    view = memoryview(packed)
    at = 0
    data = b""
    try:
        while True:
            if not data:
                if at >= len(view):
                    # output zlib still holds past the last call's limit, with no input left
                    piece = inflater.decompress(b"", _CHUNK) if started and not inflater.eof else b""
                    if not piece:
                        break
                    size += len(piece)
                    if size > MAX_INPUT_BYTES:
                        raise _too_large(where)
                    if keep:
                        out += piece
                    continue
                data, at = bytes(view[at:at + _CHUNK]), at + _CHUNK
            if not started:
                if not data.strip(b"\x00"):
                    data = b""  # zero padding after the last member (tape and block devices)
                    continue
                inflater, started = zlib.decompressobj(16 + zlib.MAX_WBITS), True
            piece = inflater.decompress(data, min(MAX_INPUT_BYTES + 1 - size, _CHUNK))
            size += len(piece)
            if size > MAX_INPUT_BYTES:
                raise _too_large(where)
            if keep:
                out += piece
            if inflater.eof:
                data, started = inflater.unused_data, False
            else:
                data = inflater.unconsumed_tail
    except zlib.error as exc:  # a bad deflate stream or header
        raise BadInputError(f"{where}: truncated or corrupt gzip ({exc})") from None
    if started and not inflater.eof:
        raise BadInputError(f"{where}: truncated or corrupt gzip (the compressed stream ends early)")
    return bytes(out)


def parse_report_text(text: str, where: str) -> Report:
    """A report from JSON text; every problem is one BadInputError line."""
    try:
        # Editors on Windows save a UTF-8 BOM; looks_like_json skips it, so json.loads must too.
        data = json.loads(text.removeprefix("\ufeff"))
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise BadInputError(f"{where}: not valid JSON ({_json_error(exc)})") from None
    try:
        report = report_from_json(data, where)
    except RecursionError:
        raise BadInputError(f"{where}: nested too deeply to be a report") from None
    try:
        for rank in report.ranks:
            check_balance(rank)
    except BadInputError as exc:  # name the file: `kvaudit diff` reads two
        raise BadInputError(f"{where}: {exc}") from None
    return report


def _json_error(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return type(exc).__name__


def _first_char(text: str) -> str:
    """The first character after a BOM and blank space: how a report is told from a log."""
    return text.lstrip("\ufeff \t\r\n")[:1]


def looks_like_json(text: str) -> bool:
    return _first_char(text) in ("{", "[")


def load_report(path: Path | str) -> Report:
    """A report from a report JSON or a raw vLLM startup log (or an excerpt of one), told apart by
    content; `-` reads standard input."""
    return report_from_text(read_text(path), input_name(path))


def report_from_text(text: str, where: str) -> Report:
    """A report is a JSON object (its loader says what is wrong with a damaged one); anything else
    is read as a log. A text that starts with `[` is a log excerpt (`[gpu_worker.py:298] …`)
    unless it is JSON."""
    from kvaudit.engines import logs  # a log: parse it (no torch, no vllm)
    first = _first_char(text)
    if first == "{":
        return parse_report_text(text, where)
    if first == "[":
        try:
            json.loads(text.removeprefix("\ufeff"))
        except (json.JSONDecodeError, RecursionError, ValueError):
            try:
                return logs.report_from_log_text(text, where)
            except BadInputError:
                pass  # neither: the JSON error says more about a file that starts like JSON
        return parse_report_text(text, where)
    return logs.report_from_log_text(text, where)


def with_failure(report: Report, failure: Failure) -> Report:
    return replace(report, failure=failure)


def phase_map(rank: RankReport) -> Mapping[Phase, PhaseRecord]:
    return {p.name: p for p in rank.phases}
