"""The boot process: `python -m kvaudit.engines.vllm.boot SPEC.json`.

It imports vLLM, boots `LLM(...)` with kvaudit's audit worker, gathers every rank's record
through collective_rpc, runs the optional verify step, writes RESULT.json and shuts vLLM down.
The supervisor (`kvaudit.engines.vllm.supervise`) starts it in a session of its own, so a
timeout or Ctrl-C can take down every vLLM process at once.

Everything this process learns goes into RESULT.json as soon as it is known (rewritten
atomically), so a boot that dies later still leaves what came before.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from kvaudit.capacity import ALLOCATOR_ENV
from kvaudit.config import CPU_RUN_REQUEST_BYTES, AuditConfig, config_from_json, cpu_default_gmu, cpu_gmu_note
from kvaudit.engines.journal import Journal
from kvaudit.engines.probes.host import current_node, node_meminfo
from kvaudit.engines.probes.nvml import OTHERS_ENV, nvml_used_by_device
from kvaudit.engines.trace import TRACE_ENV
from kvaudit.engines.vllm import multinode, resolved
from kvaudit.engines.vllm.adapter import dcp_refusal, support, uses_mla
from kvaudit.engines.vllm.engine_args import engine_kwargs, extensible_off_note

WORKERS = {"cpu": "kvaudit.engines.vllm.worker_cpu.AuditCPUWorker",
           "gpu": "kvaudit.engines.vllm.worker_gpu.AuditWorker"}
ENV_PREFIXES = ("VLLM_", "NCCL_", "PYTORCH_", "CUDA_", "TORCH_", "OMP_", "NVSHMEM_") + ALLOCATOR_ENV


def memory_env() -> dict[str, str]:
    """Environment variables that can change memory, for the report (no kvaudit internals, and
    not the private cache folders of `--cold`: temporary paths that differ from boot to boot)."""
    cold = set(filter(None, os.environ.get("KVAUDIT_COLD_CACHES", "").split(",")))
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith(ENV_PREFIXES) and k != "VLLM_CPU_OMP_THREADS_BIND_AUTO" and k not in cold}


def cpu_defaults(config: AuditConfig) -> tuple[AuditConfig, str | None]:
    """A GMU that fits this machine's node (config.cpu_default_gmu), and eager mode (torch.compile
    on two cores takes minutes and changes nothing kvaudit measures on CPU). The note says where
    a default GMU came from, for the report: it differs from machine to machine."""
    changes: dict[str, Any] = {}
    note = None
    if config.gpu_memory_utilization is None:
        node = current_node()  # the node vLLM's CPU worker sizes from
        total, available = node_meminfo(node)
        tp = config.tensor_parallel_size or 1
        gmu = cpu_default_gmu(total, available, tp, CPU_RUN_REQUEST_BYTES)
        changes["gpu_memory_utilization"] = gmu
        note = cpu_gmu_note(gmu, total, available, tp, CPU_RUN_REQUEST_BYTES, node)
    if config.enforce_eager is None:
        changes["enforce_eager"] = True
    return config.replace(**changes), note


def bind_cpu_threads(tp: int) -> None:
    """One OpenMP core group per TP worker ('0|1' on two cores), unless the user set one."""
    if tp <= 1 or os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < tp:
        raise ValueError(f"tensor_parallel_size {tp} needs {tp} CPU cores on the CPU backend; this machine "
                         f"allows {len(cores)}: lower --tp")
    per = len(cores) // tp
    groups = [cores[i * per:(i + 1) * per] for i in range(tp)]
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
        f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups)


class Result:
    """RESULT.json, rewritten atomically whenever something is added."""

    def __init__(self, path: Path):
        self.path, self.data = path, {}

    def set(self, **items: Any) -> None:
        self.data.update(items)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, default=str), encoding="utf-8")
        tmp.replace(self.path)


def refused_config(exc: BaseException, journal_dir: Path) -> bool:
    """vLLM checks its arguments in this process (EngineArgs, the pydantic configs) before any
    worker starts: a ValueError or TypeError then is the configuration's fault (exit 2), not a
    failed audit. Once a worker has written its journal, errors are the boot's (the does-not-fit
    check, a refused backend), and they are reported with the partial report."""
    return isinstance(exc, (ValueError, TypeError)) and not any(journal_dir.glob("rank*.jsonl"))


def reason(exc: BaseException) -> str:
    """The whole reason on one line: pydantic's "1 validation error for ModelConfig" is only the
    heading; what counts is each error's message (without the input echo, which can be huge)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            parts = []
            for e in errors():
                where = ".".join(str(x) for x in e.get("loc") or ())
                msg = str(e.get("msg", "")).removeprefix("Value error, ")
                parts.append(f"{where}: {msg}" if where and where != "__root__" else msg)
            if parts:
                title = getattr(exc, "title", None)
                return (f"{title}: " if title else "") + "; ".join(" ".join(p.split()) for p in parts)
        except Exception:
            pass
    return " ".join(str(exc).split())[:2000] or type(exc).__name__


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)[:4000], "traceback": traceback.format_exc()[-6000:]}


def run_verify(llm: Any, names: list[str], records: Any, journal: Journal, result: Result) -> dict[str, Any]:
    """The chosen `--verify` scenarios on the sized cache (engines/vllm/verify.py), each with its
    true peak per rank; each scenario is a stage of the progress line, and RESULT.json gets each
    one as it ends."""
    from kvaudit.engines.vllm import verify
    from kvaudit.schema import Scenario
    chosen = [Scenario(n) for n in names if n in {s.value for s in Scenario}]
    return verify.run(llm, chosen, records, on_stage=lambda text: journal.write({"type": "stage", "stage": text}),
                      on_update=lambda partial: result.set(verify=partial))


def shutdown(llm: Any) -> None:
    """vLLM 0.26 and 0.32 have no LLM.shutdown(); the engine-core client's shutdown stops the
    engine process and its workers."""
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:
        pass
    del llm
    gc.collect()


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    os.environ["VLLM_ENABLE_STARTUP_PLAN"] = "0"
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    result = Result(Path(spec["result"]))
    boot_journal = Journal(Path(spec["journal_dir"]) / "boot.jsonl")
    boot_journal.write({"type": "stage", "stage": "importing vLLM"})
    config = config_from_json(spec["config"])
    # Before any vLLM process exists, NVML's device-used is what other processes hold.
    os.environ[OTHERS_ENV] = json.dumps(nvml_used_by_device())
    try:
        import torch
        import vllm
        from vllm import LLM
        from vllm.platforms import current_platform
    except Exception as exc:
        result.set(error=_error(exc), stage="import")
        return 3
    backend = "cpu" if current_platform.is_cpu() else "gpu"
    notes: list[str] = []
    # before any boot: a vLLM (or a model on it) that kvaudit cannot audit is a usage error, exit 2
    mla = uses_mla(config.model)
    refusal, note = support(backend, mla=mla, multinode=config.extra_args.get("nnodes") not in (None, 1))
    if not refusal and backend == "cpu" and os.environ.get(TRACE_ENV) == "1":
        refusal = ("--trace needs a CUDA GPU: it reads PyTorch's CUDA allocator history, which vllm-cpu does not "
                   "have; run without --trace")
    if not refusal:  # vLLM would check this only after loading the model
        refusal = dcp_refusal(config.decode_context_parallel_size or 1, current_platform, mla,
                              config.extra_args.get("attention_backend"))
    if refusal:
        result.set(error={"type": "UsageError", "message": refusal}, stage="boot")
        return 2
    notes += [note] if note else []
    if backend == "cpu":
        config, note = cpu_defaults(config)
        notes += [note] if note else []
        try:
            bind_cpu_threads(multinode.local_world_size(config))
        except ValueError as exc:
            result.set(error={"type": "UsageError", "message": str(exc)}, stage="boot")
            return 2
    from vllm.engine.arg_utils import EngineArgs  # its fields, as imported: the extensible KV cache is among them
    fields = frozenset(getattr(EngineArgs, "__dataclass_fields__", {}))
    kwargs = engine_kwargs(config, WORKERS[backend], accepted=fields)
    note = extensible_off_note(kwargs, config, getattr(vllm, "__version__", "unknown"))
    notes += [note] if note else []
    versions = {"vllm": getattr(vllm, "__version__", None), "torch": torch.__version__,
                "cuda": getattr(torch.version, "cuda", None), "backend": backend}
    result.set(config=config.to_json(), versions=versions, env=memory_env(), notes=notes, stage="boot")
    refusal = multinode.refusal(config, current_platform)
    if refusal:
        result.set(error={"type": "UsageError", "message": refusal}, stage="boot")
        return 2
    multinode.carry_env_to_ray()
    if multinode.node_rank(config) > 0:  # another node of a multi-node boot: serve its ranks, no report
        boot_journal.write({"type": "stage", "stage": "vLLM: starting this node's workers"})
        try:
            return multinode.serve(config, WORKERS[backend], Path(spec["journal_dir"]), result.set)
        except BaseException as exc:
            if refused_config(exc, Path(spec["journal_dir"])):
                result.set(error={"type": "UsageError", "message": f"vLLM refused the configuration: {reason(exc)}"})
                return 2
            result.set(error=_error(exc))
            return 1
    boot_journal.write({"type": "boot", "config": config.to_json(), **versions, "stage": "vLLM: creating the engine"})
    try:
        llm = LLM(**kwargs)
    except BaseException as exc:
        if refused_config(exc, Path(spec["journal_dir"])):
            result.set(error={"type": "UsageError", "message": f"vLLM refused the configuration: {reason(exc)}"},
                       stage="boot")
            return 2
        result.set(error=_error(exc), stage="boot")
        return 1
    try:
        try:  # what vLLM runs, after its platform's adjustments (the supervisor names forced changes)
            result.set(resolved=resolved.read(llm.llm_engine.vllm_config))
        except Exception:  # an engine without the attribute: the report keeps the config as given
            pass
        result.set(records=llm.collective_rpc("kvaudit_record"), stage="booted")
        if spec.get("verify"):
            result.set(stage="verify")
            verified = run_verify(llm, list(spec["verify"]), result.data.get("records"), boot_journal, result)
            result.set(verify=verified, stage="verified")
            try:
                result.set(records=llm.collective_rpc("kvaudit_record"))
            except Exception:  # the engine died in a scenario (verify names it); the boot's records stand
                pass
    except BaseException as exc:
        result.set(error=_error(exc))
        return 1
    finally:
        boot_journal.write({"type": "stage", "stage": "vLLM: shutting down (the engine core stops its workers)"})
        multinode.release(llm)
        shutdown(llm)
        boot_journal.write({"type": "stage", "stage": "vLLM: stopped; the boot process is exiting"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
