"""The vLLM engine's supervisor: checks what it can before the boot (preflight), runs the boot
process through the supervised-process runner (engines/process.py), and tells what came back
(result.json, the rank journals, vLLM's log) as a `BootRecord` (`RunOutcome`).

It imports neither torch nor vllm: the CLI process stays small and can always clean up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvaudit.assemble import BootRecord, Stated, report_of, scenario_summary, verify_of_scenarios, verify_summary
from kvaudit.capacity import (
    HOST_JIT_CACHES,
    HOST_MMAP_THRESHOLD,
    KvGeometry,
    host_allocator_chosen,
    jit_caches_unset,
)
from kvaudit.config import AuditConfig, config_from_json, node_gmu_share
from kvaudit.engines import measured_ranks
from kvaudit.engines.failures import (
    Candidate,
    Evidence,
    decide_failure,
    estimated_max_model_len,
    log_line_candidates,
    rank_error_failure,
)
from kvaudit.engines.isolation import installed_only_env
from kvaudit.engines.journal import JOURNAL_ENV, JournalTailer, read_journals
from kvaudit.engines.process import Finished, ProgressFn, StopSignals, run_supervised, workdir
from kvaudit.engines.trace import trace_env
from kvaudit.engines.vllm import nodes, resolved
from kvaudit.engines.vllm.multinode import local_world_size, master_addr_refusal, node_rank
from kvaudit.engines.vllm.stages import StageTailer
from kvaudit.errors import UsageError
from kvaudit.repeat import combine
from kvaudit.schema import (
    PHASE_ORDER,
    VERIFY_TORCH_KEYS,
    Engine,
    Environment,
    Failure,
    FailureKind,
    KvSizing,
    Phase,
    Report,
    Scenario,
    Source,
    Verify,
)
from kvaudit.sites import load_rules
from kvaudit.units import fmt_bytes


@dataclass(frozen=True)
class RunOptions:
    verify: tuple[Scenario, ...] = ()
    """`--verify`: the scenarios to run after the boot (engines/vllm/verify.py); () runs none."""
    timeout_s: float = 1800.0
    log_path: Path | None = None
    """Keep vLLM's own log here (otherwise it lives in a temporary folder and is deleted)."""
    trace: bool = False
    """Record the CUDA allocator's history and attribute every block to an owner and site."""
    owners: tuple[Path, ...] = ()
    """Extra owner-rule files for the trace (tried before kvaudit's defaults)."""
    sweep: bool = False
    """Profile the activation peak at several token counts too (`kvaudit plan` interpolates)."""
    repeat: int = 1
    """`--repeat N`: boot N times, a fresh engine each; the report is the worst boot's with the
    spread of all (kvaudit/repeat.py)."""
    cold: bool = False
    """`--cold`: before each boot, empty vLLM's, torch.compile's and the kernel caches, in a
    private folder under the run's own work folder (COLD_CACHE_VARS), never the user's."""


COLD_CACHE_VARS = {
    "VLLM_CACHE_ROOT": "vllm",  # vLLM's torch.compile cache is its torch_compile_cache/
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": "flashinfer-autotune",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    "CUTE_DSL_CACHE_DIR": "cute-dsl",
    "TORCH_EXTENSIONS_DIR": "torch_extensions",
    "CUDA_CACHE_PATH": "cuda",  # the driver's JIT cache of PTX
}
"""`--cold`: each cache a boot can find warm, and its folder under the private cache root.
HF_HOME (the weights) is left alone: a cold start of the engine, not a download."""
COLD_ENV = "KVAUDIT_COLD_CACHES"
"""Set for a `--cold` boot to the variables above, so the boot process leaves them (temporary
paths) out of the report's environment."""


def cold_cache_env(root: Path) -> dict[str, str]:
    """Empty the private cache root and point every cache a boot can find warm into it."""
    shutil.rmtree(root, ignore_errors=True)
    env = {}
    for var, name in COLD_CACHE_VARS.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        env[var] = str(root / name)
    env[COLD_ENV] = ",".join(COLD_CACHE_VARS)
    return env


MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
"""The config.json keys vLLM derives a model's length limit from (vllm/transformers_utils/
model_arch_config_convertor.py derive_max_model_len_and_key): the smallest, model_max_length first."""
LENGTH_CHANGERS = ("rope_scaling", "rope_parameters", "sliding_window", "text_config")
"""Keys that make vLLM's derivation more than a minimum (scaling, windows, nested configs): with
any of them the check is left to vLLM, whose reason then comes back whole."""


def preflight(config: AuditConfig) -> None:
    """What can be checked in this process before a 10-second vLLM import: the model folder (a
    Hugging Face id: its config.json in the local cache, with HF_HUB_OFFLINE that it is there, and
    without, where it is not there, that the Hub can give it),
    --tp against the devices and the model's heads, --max-model-len against the model's limit.
    Each failure is a usage error (exit 2) that names the fix."""
    model = config.model
    if isinstance(model, str) and not Path(model).expanduser().exists() and _looks_like_path(model):
        raise UsageError(f"model {model} does not exist: pass a model directory with a config.json "
                         f"(or a Hugging Face model id)")
    tp = config.tensor_parallel_size or 1
    devices = _device_count()
    multi = config.extra_args.get("nnodes") not in (None, 1)
    local = local_world_size(config)  # more than one node: this node's share
    if devices is not None and local > devices[0] and config.extra_args.get("distributed_executor_backend") != "ray":
        sizes = [f"tensor_parallel_size {tp}"] + [
            f"{name} {config.passthrough_size(name)}"
            for name in ("pipeline_parallel_size", "prefill_context_parallel_size")
            if (config.passthrough_size(name) or 1) > 1]
        raise UsageError(" × ".join(sizes) + f" needs {local} {devices[1]}" + (" on each node" if multi else "")
                         + f"; this machine has {devices[0]}: " + ("lower --tp" if len(sizes) == 1 else "lower them"))
    refused = master_addr_refusal(config)
    if refused:
        raise UsageError(refused)
    if devices is not None and devices[1] == CPU_CORES and config.gpu_memory_utilization is not None:
        _check_node_memory(config.gpu_memory_utilization, local)
    if any(config.extra_args.get(k) is not None for k in ("hf_overrides", "hf_config_path")):
        hf: dict[str, Any] = {}  # vLLM reads another config.json, or edits it: its heads and limits are vLLM's to check
    elif isinstance(model, str) and not Path(model).expanduser().exists():
        hf = _hub_model_config(model, config.extra_args.get("revision"), config.extra_args.get("hf_token"))
    else:
        hf = _model_config(model)
    heads = hf.get("num_attention_heads")
    if isinstance(heads, int) and not isinstance(heads, bool) and heads % tp:
        raise UsageError(f"tensor_parallel_size {tp} does not divide the model's {heads} attention heads: "
                         f"pass a --tp that divides {heads}")
    length = config.max_model_len
    if length is not None and not any(k in hf for k in LENGTH_CHANGERS) \
            and not os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        limits = {k: hf[k] for k in MAX_LEN_KEYS if isinstance(hf.get(k), int) and not isinstance(hf.get(k), bool)}
        if limits:
            key = "model_max_length" if "model_max_length" in limits else min(limits, key=limits.__getitem__)
            if length > limits[key]:
                raise UsageError(f"max_model_len {length} is above the model's limit ({key} {limits[key]} in "
                                 f"config.json): lower --max-model-len to {limits[key]} or less")


def _looks_like_path(model: str) -> bool:
    """A folder, not a Hugging Face id (`org/name`, `gpt2`): absolute, relative to here or home,
    or deeper than org/name."""
    return model.startswith(("/", "./", "../", "~")) or model.count("/") > 1


def _device_count() -> tuple[int, str] | None:
    """(devices, their name) of the backend vLLM will pick, from files alone; None if unknown."""
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.exists():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        count = len(list(gpus.iterdir()))
        if visible is not None:
            count = min(count, len([d for d in visible.split(",") if d.strip()]))
        return count, "GPUs"
    if Path("/dev/nvidiactl").exists():
        return None
    # vLLM's CPU backend: one OpenMP core group per TP worker (boot.bind_cpu_threads)
    return len(os.sched_getaffinity(0)), CPU_CORES


CPU_CORES = "CPU cores on the CPU backend"


def _check_node_memory(gmu: float, ranks: int = 1) -> None:
    """vLLM's CPU worker refuses to start where ceil(its NUMA node's total × GMU) is above what the node
    has available (vllm/v1/worker/cpu_worker.py init_device; both figures clamped by a container's memory
    limit: probes.host.node_meminfo), after the engine has started (a newcomer's `--gmu 0.95` failed 28 s
    in, exit 3): refused here, exit 2, from the node of this process's first CPU, the check being
    vLLM's own. The GMU it names shares what is available among this node's `ranks` (each worker
    reserves its own share), at least 0.01."""
    import math

    from kvaudit.engines.probes.host import current_node, node_meminfo
    from kvaudit.units import fmt_gib
    node = current_node()
    try:
        total, available = node_meminfo(node)
    except (OSError, KeyError, ValueError):  # no meminfo to read: vLLM's own check decides
        return
    requested = math.ceil(total * gmu)
    if total > 0 and requested > available:
        most = max(node_gmu_share(available, total, ranks), 0.01)
        raise UsageError(f"--gmu {gmu} asks {fmt_gib(requested)} of NUMA node {node}'s {fmt_gib(total)}, and "
                         f"{fmt_gib(available)} is available now: vLLM's CPU worker refuses that at start; pass "
                         f"--gmu {most} or less, or leave --gmu out for kvaudit's CPU default")


def _hub_model_config(model: str, revision: Any, token: Any = None) -> dict[str, Any]:
    """The config.json of a Hugging Face id, from the local Hugging Face cache only, {} where it is
    not there (online, the Hub is asked for it once: _check_hub_reachable). With HF_HUB_OFFLINE set
    vLLM looks nowhere else: EngineArgs.__post_init__ turns the id into its snapshot folder through
    transformers_utils.repo_utils.get_model_path
    (huggingface_hub's snapshot_download with local_files_only), so an id not in the cache is refused
    here, before the boot, as that call would refuse it after one. ModelScope ids and cloud URIs
    (s3://, gs://) are vLLM's alone."""
    if "://" in model or os.environ.get("VLLM_USE_MODELSCOPE", "").strip().lower() in ("1", "true"):
        return {}
    try:
        import huggingface_hub
        from huggingface_hub import constants
        from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
    except ImportError:  # no vLLM here either: the boot says so
        return {}
    rev = revision if isinstance(revision, str) else None
    if constants.HF_HUB_OFFLINE:
        try:
            folder = huggingface_hub.snapshot_download(repo_id=model, revision=rev, local_files_only=True,
                                                       ignore_patterns="*")
        except HFValidationError:
            raise UsageError(f"model {model} is neither a model folder nor a Hugging Face id (org/name)") from None
        except LocalEntryNotFoundError:
            at = f" at revision {rev}" if rev else ""
            raise UsageError(f"model {model}{at} is not in the Hugging Face cache "
                             f"({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set, so vLLM would "
                             f"not find it: download it first (hf download {model}), point HF_HUB_CACHE at the "
                             f"cache that has it, or pass its folder") from None
        return _model_config(folder)
    try:
        found = huggingface_hub.try_to_load_from_cache(model, "config.json", revision=rev)
    except (HFValidationError, ValueError, OSError):
        return {}
    if isinstance(found, str):
        return _model_config(str(Path(found).parent))
    if not (Path(constants.HF_HUB_CACHE) / ("models--" + model.replace("/", "--"))).exists():
        _check_hub_reachable(model, rev, token if isinstance(token, (str, bool)) else None)
    return {}  # in the cache without a config.json (Mistral's own format): vLLM's to read


UNREACHABLE = frozenset({"ConnectError", "ConnectTimeout", "ConnectionError"})
"""Exception class names (anywhere in its MRO) that mean no connection to the Hub was made: httpx's
(huggingface_hub 1.x and later), requests' (before; its ConnectTimeout is a ConnectionError), the
standard library's (ConnectionRefusedError). A read timeout or a dropped connection is not among
them: the Hub was there, and vLLM's download retries."""


def _check_hub_reachable(model: str, rev: str | None, token: str | bool | None) -> None:
    """An id of which the cache holds nothing, online: one HEAD of its config.json (with the token the
    boot passes vLLM, else HF_TOKEN as huggingface_hub reads it), with the timeout vLLM's own download
    would use (HF_HUB_ETAG_TIMEOUT, 10 s by default), and no retries. vLLM asks the same Hub after its
    10-second import and retries for about 25 s more before it fails (seen here with no route to
    huggingface.co: exit 3 after 38 s), so an id the Hub cannot give is refused now, exit 2: no
    connection at all, no such repository (or private, or gated without a token), no such revision.
    Everything else (no config.json, as in Mistral's own format; a server error; a slow answer) is
    vLLM's to try."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
    url = huggingface_hub.hf_hub_url(model, "config.json", revision=rev)
    at = f" at revision {rev}" if rev else ""
    head = f"model {model}{at} is not in the Hugging Face cache ({constants.HF_HUB_CACHE})"
    try:
        huggingface_hub.get_hf_file_metadata(url, token=token, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except GatedRepoError:
        raise UsageError(f"{head} and is gated on {constants.ENDPOINT}: accept its terms there and set HF_TOKEN "
                         f"(or --hf-token), or pass its folder") from None
    except RepositoryNotFoundError:
        raise UsageError(f"{head} and {constants.ENDPOINT} has no such model (or it is private: set HF_TOKEN): "
                         f"check the id, or pass its folder") from None
    except RevisionNotFoundError:
        raise UsageError(f"{head} and {constants.ENDPOINT} has no revision {rev} of it: check --revision") from None
    except Exception as exc:  # the Hub's other answers are vLLM's to meet; no answer at all is refused
        if not UNREACHABLE.intersection(c.__name__ for c in type(exc).__mro__):
            return
        why = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UsageError(f"{head} and {constants.ENDPOINT} could not be reached ({type(exc).__name__}: {why}), "
                         f"so vLLM could not fetch it: download it first (hf download {model}), point "
                         f"HF_HUB_CACHE at the cache that has it, or pass its folder") from None


def _model_config(model: str | None) -> dict[str, Any]:
    try:
        data = json.loads((Path(model).expanduser() / "config.json").read_text(encoding="utf-8")) if model else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def run_audit(config: AuditConfig, options: RunOptions, on_progress: ProgressFn = lambda rank, event: None,
              signals: StopSignals | None = None) -> Report:
    """Boot vLLM with the audit worker and return the report, complete or partial.

    SIGINT, SIGTERM and SIGHUP stop the boot and still return the partial report; pass the
    caller's StopSignals to keep them deferred until the report is written. The caller runs
    `preflight(config)` first (the CLI does, before any output)."""
    if options.trace:
        load_rules(options.owners)  # a bad rule file is a usage error now, not a dead worker later
    if options.repeat < 1:
        raise UsageError(f"--repeat must be at least 1 (boots of the config), got {options.repeat}")
    with StopSignals() if signals is None else contextlib.nullcontext(signals) as stop_signals:
        # the folder is never left behind, with or without --log (that file lives elsewhere)
        with workdir("kvaudit-run-") as root:
            reports: list[Report] = []
            for boot in range(1, options.repeat + 1):
                folder = root
                if options.repeat > 1:
                    on_progress(0, {"type": "stage", "stage": f"boot {boot} of {options.repeat}"
                                    + (" (cold caches)" if options.cold else "")})
                    folder = root / f"boot{boot}"
                    (folder / "journal").mkdir(parents=True)
                env = cold_cache_env(root / "cache") if options.cold else {}
                report = report_of(_run(config, options, on_progress, stop_signals, folder, env=env,
                                        log_path=_boot_log(options, boot)))
                if options.cold:
                    report = replace(report, warnings=(*report.warnings, COLD_NOTE))
                reports.append(report)
                if report.failure is not None or stop_signals.name:  # the rest would not finish either
                    break
            return reports[0] if options.repeat == 1 else combine(reports, boots=options.repeat, cold=options.cold)


COLD_NOTE = ("note: --cold: vLLM's, torch.compile's and the kernel caches were empty at the start of the boot "
             "(a private folder of kvaudit's, not the user's)")


def _boot_log(options: RunOptions, boot: int) -> Path | None:
    """--log FILE: one boot's log there; with --repeat, boot K's in FILE's name with `.bootK`."""
    path = options.log_path
    if path is None or options.repeat == 1:
        return path
    return path.with_name(f"{path.stem}.boot{boot}{path.suffix}")


def _run(config: AuditConfig, options: RunOptions, on_progress: ProgressFn, signals: StopSignals,
         folder: Path, *, env: Mapping[str, str] | None = None, log_path: Path | None = None) -> RunOutcome:
    finished, result, log_path = _boot(config, options, on_progress, signals, folder,
                                       verify=[s.value for s in options.verify], env=env, log_path=log_path)
    log_text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    sources: dict[int, str] = {}
    events = rank_events(result, folder / "journal", sources)
    return RunOutcome(config, result, events, log_text, finished, timeout_s=options.timeout_s, traced=options.trace,
                      stop_signal=signals.name, sources=sources)


def _boot(config: AuditConfig, options: RunOptions, on_progress: ProgressFn, signals: StopSignals, folder: Path, *,
          verify: list[str], env: Mapping[str, str] | None = None,
          log_path: Path | None = None) -> tuple[Finished, dict[str, Any], Path]:
    """The boot process (engines/vllm/boot.py) under the process runner: how it ended, its
    result.json and where vLLM's log is. It stops early when another node reports a rank dead
    or lost (`stop_when_gone`). `verify`: the scenarios' names ([] for none); `env`: variables
    for this boot alone (--cold's caches); `log_path`: vLLM's log (default: --log, else the folder)."""
    journal_dir = folder / "journal"
    result_path = folder / "result.json"
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps({"config": config.to_json(), "verify": verify,
                                     "journal_dir": str(journal_dir), "result": str(result_path)}))
    log_path = log_path or options.log_path or folder / "vllm.log"
    env = installed_only_env(dict(os.environ, VLLM_ENABLE_STARTUP_PLAN="0", PYTHONUNBUFFERED="1",
                                  **{JOURNAL_ENV: str(journal_dir)}, **(env or {}),
                                  **trace_env(options.trace, tuple(p.resolve() for p in options.owners))))
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # it fixes the CPU KV size and would bypass the audit
    if _device_count() == (len(os.sched_getaffinity(0)), CPU_CORES):  # vLLM's CPU backend: this host's cores
        if not host_allocator_chosen(env):
            # glibc's malloc moves its mmap threshold with what the process frees, so a CPU boot's RSS moved tens
            # of MiB from load to load, and `--verify` at the defaults failed by ~20 MiB on a 2-core EPYC (stop 50's
            # newcomer); held at its start value, boots repeat to 0.1 MiB. The report records it, and its safe
            # flags carry it (capacity.safe_serve_env) for the user's own vLLM.
            env[HOST_MMAP_THRESHOLD[0]] = HOST_MMAP_THRESHOLD[1]
        # oneDNN's and torch's kernel caches keep one kernel per GEMM row count (capacity.HOST_JIT_CACHES says how
        # much at their default): held at 32, the audit fills them before sizing (worker_cpu.fill_gemm_caches) and
        # the safe flags carry the setting.
        env.update(jit_caches_unset(env))
    if options.sweep:
        env["KVAUDIT_SWEEP"] = "1"  # engines.vllm.audit.SWEEP_ENV (that module imports vllm)
    finished = run_supervised("kvaudit.engines.vllm.boot", spec_path, log_path=log_path, journal_dir=journal_dir,
                              on_progress=on_progress, timeout_s=options.timeout_s, signals=signals, env=env,
                              stages=StageTailer(log_path, journal_dir / "boot.jsonl"), name="vLLM",
                              should_stop=stop_when_gone)
    try:
        result = json.loads(result_path.read_text(encoding="utf-8")) if result_path.exists() else {}
    except (json.JSONDecodeError, OSError):
        result = {}
    return finished, result, log_path


def stop_when_gone(tailer: JournalTailer) -> FailureKind | None:
    """A rank's journal ended from outside it (its node saw it die, its heartbeat stopped): the
    boot stops; the report names the rank (nodes.rank_gone)."""
    return FailureKind.WORKER_DIED if tailer.stopped else None


@dataclass(frozen=True)
class FollowerOutcome:
    """How node K > 0 of a multi-node boot ended: the exit code and one line for stderr."""

    exit_code: int
    message: str


def run_follower(config: AuditConfig, options: RunOptions, on_progress: ProgressFn,
                 signals: StopSignals) -> FollowerOutcome:
    """Node K > 0 (`-- --nnodes N --node-rank K`): serve this node's ranks until node 0, which
    writes the report, has every record (engines/vllm/multinode.py). Progress comes from this
    node's own journals; there is no report here."""
    with workdir("kvaudit-node-") as folder:
        finished, result, _ = _boot(config, options, on_progress, signals, folder, verify=[])
    where = f"node {node_rank(config)}"
    survivors = finished.survivors
    tail = f"; {len(survivors)} vLLM processes survived SIGKILL: {survivors}" if survivors else ""
    if finished.stop is not None:
        return FollowerOutcome(3, f"{where}: stopped ({signals.name or finished.stop.value}) before node 0 had every "
                                  f"record{tail}")
    error = result.get("error") if isinstance(result.get("error"), dict) else None
    if error and error.get("type") == "UsageError":
        return FollowerOutcome(2, f"{where}: {error.get('message')}")
    outcome = result.get("follower") if isinstance(result.get("follower"), dict) else {}
    if outcome.get("done"):
        ranks = outcome.get("ranks") or []
        return FollowerOutcome(0, f"{where}: ranks {', '.join(map(str, ranks))} served node 0's boot; "
                                  f"the report is written on node 0{tail}")
    message = outcome.get("message") or (f"{error.get('type')}: {_first_line(error.get('message'))}" if error
                                         else f"the boot process exited with status {finished.exit_code}")
    return FollowerOutcome(3, f"{where}: {message}{tail}")


# ------------------------------------------------------------------------------------------------
# What came back: result.json + journals + vLLM's log → BootRecord


def rank_events(result: dict[str, Any], journal_dir: Path,
                sources: dict[int, str] | None = None) -> dict[int, list[dict[str, Any]]]:
    """Per rank: the collective_rpc record when the boot lived to return it, else the journal
    (this node's file, or the copy relayed from another node). `sources` gets where each came
    from: `rpc`, `file` or `relay`."""
    where: dict[int, str] = {}
    out = read_journals(journal_dir, where)
    for events in result.get("records") or []:
        if isinstance(events, list):
            ranks = [e.get("rank") for e in events if isinstance(e, dict) and e.get("type") == "rank"]
            if ranks and isinstance(ranks[0], int):
                out[ranks[0]], where[ranks[0]] = [e for e in events if isinstance(e, dict)], "rpc"
    if sources is not None:
        sources.update(where)
    return dict(sorted(out.items()))


def _geometry(folded: list[measured_ranks.RankEvents], config: AuditConfig) -> KvGeometry | None:
    for rank in folded:
        bpb, bs = rank.get_int("kv_bytes_per_block"), rank.get_int("block_size")
        if bpb and bs:
            return KvGeometry(block_size=bs, bytes_per_block=bpb, dcp=config.decode_context_parallel_size or 1)
    return None


def _verify(data: dict[str, Any] | None, log_text: str = "") -> Verify | None:
    """RESULT.json's verify (engines/vllm/verify.py run's scenarios; a single step's figures in
    reports of older boot processes) as the report's."""
    if not data:
        return None
    if isinstance(data.get("scenarios"), list):
        return _verify_scenarios(data, log_text)
    peaks = [(r.get("rank"), r.get("true_peak_bytes"), r.get("requested_bytes")) for r in data.get("ranks") or []]
    error = data.get("error")
    return verify_summary([(rank, peak, req if isinstance(peak, int) and isinstance(req, int) else None)
                           for rank, peak, req in peaks],
                          error=error, prompt_tokens=data.get("prompt_tokens"), decode_tokens=data.get("decode_tokens"),
                          repeats=1, oom_count=int(bool(error and "memory" in error)))


def _verify_scenarios(data: dict[str, Any], log_text: str) -> Verify:
    scenarios, ooms = [], 0
    names = {s.value for s in Scenario}
    for entry in data["scenarios"]:
        if not isinstance(entry, dict) or entry.get("name") not in names:
            continue
        error = entry.get("error") if isinstance(entry.get("error"), str) else None
        if error and error.startswith(DEAD_ENGINE):  # its words say nothing: the worker's error is in the log
            cause = first_logged_error(log_text)
            error += f" (vLLM's log: {cause})" if cause else ""
        ooms += int(bool(error and "memory" in error.lower()))
        given = [r for r in entry.get("ranks") or [] if isinstance(r, dict) and isinstance(r.get("rank"), int)]
        ranks = [(r.get("rank"), r.get("true_peak_bytes"), r.get("requested_bytes")) for r in given]
        allocator = {r["rank"]: {k: r[k] for k in VERIFY_TORCH_KEYS if type(r.get(k)) is int and r[k] >= 0}
                     for r in given}
        seconds = entry.get("seconds")
        scenarios.append(scenario_summary(
            Scenario(entry["name"]), [(rank, peak, req if isinstance(peak, int) and isinstance(req, int) else None)
                                      for rank, peak, req in ranks], error=error,
            **{k: entry.get(k) if isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool) else None
               for k in ("requests", "tokens", "prompt_tokens", "decode_tokens", "step_tokens", "draft_tokens")},
            sampling=entry.get("sampling") if isinstance(entry.get("sampling"), str) else None,
            seconds=float(seconds) if isinstance(seconds, (int, float)) else None, allocator=allocator))
    error = data.get("error") if isinstance(data.get("error"), str) else None
    return verify_of_scenarios(scenarios, oom_count=ooms, error=error)


DEAD_ENGINE = "EngineDeadError"
"""vLLM's error when the engine core died in a request; the cause is in its log."""


@dataclass(frozen=True)
class RunOutcome:
    """What a vLLM boot left behind, as a `kvaudit.assemble.BootSource`."""

    config: AuditConfig
    """The config asked for (the boot's own, in result.json, wins)."""
    result: dict[str, Any]
    events: dict[int, list[dict[str, Any]]]
    """Per rank, its journal events (see rank_events)."""
    log_text: str
    finished: Finished
    timeout_s: float
    traced: bool = False
    stop_signal: str | None = None
    sources: Mapping[int, str] = field(default_factory=dict)
    """Per rank, how its events arrived (see rank_events): the report's `ranks[].node.journal`."""

    def record(self) -> BootRecord:
        result, config = self.result, self.config
        if isinstance(result.get("config"), dict):
            config = config_from_json(result["config"])
        folded = [measured_ranks.fold(rank, events) for rank, events in self.events.items()]
        asked = config
        config = resolved.apply(config, self.resolved_knobs(folded))
        where = nodes.rank_nodes(folded, self.sources)
        error = result.get("error") if isinstance(result.get("error"), dict) else None
        if error and error.get("type") == "UsageError":
            raise UsageError(error.get("message", "bad configuration"))
        failure = run_failure(folded, error, self.log_text, stop=self.finished.stop,
                              exit_code=self.finished.exit_code, timeout_s=self.timeout_s,
                              stop_signal=self.stop_signal, gone=nodes.rank_gone(folded, self.events))
        facts = folded[0].facts if folded else {}
        versions = result.get("versions") or {}
        return BootRecord(
            source=Source.RUN, config=config,
            ranks=tuple(measured_ranks.measured_rank(f, config.gpu_memory_utilization, where.get(f.rank))
                        for f in folded),
            engine=Engine(name="vllm", version=versions.get("vllm"), model_runner=facts.get("model_runner"),
                          attention_backend=next((x.facts.get("attention_backend") for x in folded
                                                  if x.facts.get("attention_backend")), None),
                          kv_cache_sizing=KvSizing.KVAUDIT),
            environment=Environment(device_name=facts.get("device_name"), driver=facts.get("driver"),
                                    cuda=versions.get("cuda") or facts.get("cuda"), torch=versions.get("torch"),
                                    vllm=versions.get("vllm"), env=result.get("env") or {}),
            geometry=_geometry(folded, config), verify=_verify(result.get("verify"), self.log_text), failure=failure,
            warnings=tuple(self._warnings(folded, facts, asked)),
            stated=Stated(max_feasible_model_len=estimated_max_model_len(self.log_text) if failure else None))

    def resolved_knobs(self, folded: list[measured_ranks.RankEvents]) -> dict[str, Any]:
        """The knobs vLLM resolved (engines/vllm/resolved.py): from the engine once LLM() returned,
        else from a rank that journaled them at init_device; {} when neither lived that long."""
        knobs = self.result.get("resolved")
        if not isinstance(knobs, dict):
            knobs = next((f.facts["resolved"] for f in folded if isinstance(f.facts.get("resolved"), dict)), {})
        return knobs

    def forced_changes(self, asked: AuditConfig, folded: list[measured_ranks.RankEvents]) -> list[str]:
        facts = folded[0].facts if folded else {}
        backend = next((f.facts.get("attention_backend") for f in folded if f.facts.get("attention_backend")), None)
        knobs = self.resolved_knobs(folded)
        if backend is None and facts.get("use_mla") and (facts.get("amx_tiles") is False
                                                         or knobs.get("attention_backend_asked") == "CPU_MLA"):
            # a boot that died before KV: the platform's rule, as the rank saw it (CpuPlatform.get_attn_backend_cls
            # runs CPU_MLA without AMX tiles, and where --attention-backend CPU_MLA asked for it on a CPU with them)
            backend = "CPU_MLA"
        return resolved.forced_changes(asked, knobs, facts.get("backend"), backend)

    def _warnings(self, folded: list[measured_ranks.RankEvents], facts: dict[str, Any],
                  asked: AuditConfig) -> list[str]:
        warnings = [n for n in self.result.get("notes") or [] if isinstance(n, str)]
        warnings += self.forced_changes(asked, folded)
        verified = self.result.get("verify") if isinstance(self.result.get("verify"), dict) else {}
        warnings += [w for w in verified.get("warnings") or [] if isinstance(w, str)]
        for f in folded:
            fill = f.facts.get("gemm_caches")
            if isinstance(fill, dict) and fill.get("error"):
                warnings.append(f"rank {f.rank}: filling the GEMM kernel caches failed ({fill['error']}): what oneDNN "
                                "compiles per row count while serving is not charged; check with --verify")
                break
            if isinstance(fill, dict) and isinstance(fill.get("rows"), int) and isinstance(fill.get("capacity"), int) \
                    and fill["rows"] < fill["capacity"]:
                names = " and ".join(names[0] for names, _ in HOST_JIT_CACHES)
                warnings.append(f"rank {f.rank}: the environment lets oneDNN's kernel caches keep {fill['capacity']} "
                                f"kernels per GEMM and kvaudit charged {fill['rows']}: what serving compiles beyond is "
                                f"not in the safe flags (leave {names} unset, and kvaudit holds them at "
                                f"{HOST_JIT_CACHES[0][1]})")
                break
        for f in folded:
            probe = f.facts.get("prefill_probe")
            if isinstance(probe, dict) and probe.get("error"):
                warnings.append(f"rank {f.rank}: the prefill probe failed ({probe['error']}): the activation peak "
                                f"has no attention at {probe.get('query_tokens')} tokens; check with --verify")
                break
        survivors = self.finished.survivors
        if survivors:
            warnings.append(f"{len(survivors)} vLLM processes survived SIGKILL: {survivors}")
        for f in folded:
            measured = f.get_int("graph_pool_measured_bytes")
            if f.get_int("vllm_graph_estimate_bytes") == 0 and measured:
                warnings.append(f"rank {f.rank}: vLLM's own graph memory estimate is 0 (MRv2 before 0.29 makes "
                                f"none, nor 0.34 with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0); kvaudit measured "
                                f"the pool ({fmt_bytes(measured)}) and budgeted it: plain vLLM with this config would "
                                f"over-allocate KV by at least that much")
                break
        for f in folded:
            if f.facts.get("warmup_errors"):
                warnings.append(f"rank {f.rank}: warmup retried: {'; '.join(f.facts['warmup_errors'])}")
        if self.traced and folded and all(f.sites is None for f in folded):
            warnings.append("--trace recorded no sites: it reads PyTorch's CUDA allocator history, which the "
                            f"{facts.get('backend') or 'this'} backend does not have")
        return warnings


# ------------------------------------------------------------------------------------------------
# Failures


def _last_phase(folded: list[measured_ranks.RankEvents]) -> tuple[Phase | None, int | None]:
    """Where the boot stopped: the earliest phase any rank failed or died in, else the phase
    after the last one every rank finished."""
    stopped = []
    for f in folded:
        failed = [p for p, rec in f.phases.items() if rec.status.value in ("failed", "interrupted")]
        for phase in failed + ([f.died_in] if f.died_in is not None else []):
            stopped.append((PHASE_ORDER.index(phase), f.rank, phase))
    if stopped:
        _, rank, phase = min(stopped)
        return phase, rank
    done = [(max(PHASE_ORDER.index(p) for p in f.phases), f.rank) for f in folded if f.phases]
    if not done:
        return None, None
    idx, rank = min(done)
    return (PHASE_ORDER[idx + 1] if idx + 1 < len(PHASE_ORDER) else None), rank


def run_failure(folded: list[measured_ranks.RankEvents], error: dict[str, Any] | None, log_text: str, *,
                stop: FailureKind | None, exit_code: int | None, timeout_s: float,
                stop_signal: str | None = None, gone: Failure | None = None) -> Failure | None:
    """A run's failure: its evidence as candidates (`gone`: a rank its node reported dead or lost,
    nodes.rank_gone), chosen by the one rule of every engine (failures.decide_failure)."""
    phase, rank = _last_phase(folded)
    candidates: list[Candidate[Failure]] = []
    if gone is not None:
        candidates.append(Candidate(Evidence.STOPPED, gone, position=(0,)))
    if stop is FailureKind.TIMEOUT:
        candidates.append(Candidate(Evidence.STOPPED, Failure(
            phase, rank, stop, f"no result after {timeout_s:.0f} s: raise --timeout if the boot is slow, or look at "
                               f"the vLLM log (--log) for a hang"), position=(1,)))
    if stop is FailureKind.INTERRUPTED:
        how = "Ctrl-C" if stop_signal in (None, "SIGINT") else stop_signal
        candidates.append(Candidate(Evidence.STOPPED, Failure(
            phase, rank, stop, f"interrupted ({how}): every vLLM process was stopped"), position=(1,)))
    for line in log_line_candidates(log_text):
        kind, message = line.item
        candidates.append(Candidate(line.evidence, Failure(Phase.KV if kind is FailureKind.DOES_NOT_FIT else phase,
                                                           rank, kind, message), line.priority, line.position))
    candidates += [rank_error_failure(f.rank, e, measured_ranks.phase_named(e.get("phase")))
                   for f in folded for e in f.errors]
    if error is not None:
        candidates.append(Candidate(Evidence.PROCESS_ERROR, Failure(
            phase, rank, FailureKind.CRASH, f"{error.get('type')}: {_first_line(error.get('message'))}")))
    if exit_code not in (0, None):
        last = last_error_line(log_text)
        candidates.append(Candidate(Evidence.EXIT_STATUS, Failure(
            phase, rank, FailureKind.WORKER_DIED, f"the boot process exited with status {exit_code}"
            + (f": {last}" if last else " and no error: see the vLLM log (--log)"))))
    if not folded:
        candidates.append(Candidate(Evidence.NO_RECORDS, Failure(
            None, None, FailureKind.CRASH, "vLLM produced no rank records: see the vLLM log (--log)")))
    chosen = decide_failure(candidates)
    return chosen.item if chosen is not None else None


_ERROR_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Interrupt)|[\w.]+\.\w+Error)\b.*")


def last_error_line(log_text: str) -> str | None:
    """The last line of the log that a Python traceback ends with (`ModuleNotFoundError: …`), on
    one line, or None: what a process that died without writing its result last said."""
    for line in reversed(log_text[-20_000:].splitlines()):
        line = line.strip()
        if _ERROR_LINE.match(line):
            return " ".join(line.split())[:400]
    return None


def first_logged_error(log_text: str) -> str | None:
    """The first exception vLLM logged at ERROR level (`RuntimeError: index … is out of bounds`,
    the end of a worker's traceback), on one line, or None: why an engine core died in a request,
    where the client only says EngineDeadError. Warnings that print a traceback are passed over."""
    from kvaudit.engines.logs.lines import parse_line
    for line in log_text.splitlines():
        if "ERROR" not in line[:200] or len(line) > 20_000:
            continue
        parsed = parse_line(line, 0)
        if parsed.level == "ERROR" and _ERROR_LINE.match(parsed.msg):
            return " ".join(parsed.msg.split())[:400]
    return None


def _first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0] if lines else ""
