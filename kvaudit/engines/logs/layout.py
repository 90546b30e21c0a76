"""The parallel layout one boot's logs show: each size as stated, as the worker names imply it, or
only bounded from below.

Sources, the first that says wins: the engine config line (what vLLM resolved), `non-default
args`, a pasted command line (`--tensor-parallel-size 8`, `-tp=8`), then the worker names.
vLLM names a worker `Worker[_DPd][_PPp][_PCPc][_TPt][_DCPd][_EPe]`, each suffix only when that
group is larger than 1 (WorkerProc.setup_proc_title_and_log_prefix in
vllm/v1/executor/multiproc_executor.py). So a worker name without `_TP` means TP = 1, and names up
to `_TP3` mean TP ≥ 4: exactly 4 when `_TP0` … `_TP3` all appear, "at least" otherwise (`_TP0` alone
says TP ≥ 2, the size not stated). An expert-parallel rank pins the TP size down: the EP group
spans DP × PCP × TP (distributed/parallel_state.py initialize_model_parallel: `all_ranks` reshaped
(-1, dp, pp, pcp, tp), the EP group over dp·pcp·tp), so without PCP a worker `_DPd_TPt_EPe` has
e = d × TP + t. Ray's actor names (`RayWorkerWrapper`) say nothing of the layout.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvaudit.engines.logs.lines import ProcTag, Role, proc_tag

DIMS = ("tp", "pp", "pcp", "dp", "dcp")
ARGS_NAMESPACE = "the api_server's `args: Namespace(…)`"
"""A source of stated knobs that lists every knob, defaults included: one it does not give (a paste
cut it, or a value before it was no literal) is unknown, not vLLM's default."""
ENGINE_LINE = "the engine config line"
"""The source name of the engine config line's knobs (ranks.boot_layout)."""
KEYS = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "pcp": "prefill_context_parallel_size",
        "dp": "data_parallel_size", "dcp": "decode_context_parallel_size"}
LABELS = {"tp": "TP", "pp": "PP", "pcp": "PCP", "dp": "DP", "dcp": "DCP"}
NAME_SCAN_CHARS = 4 << 20
"""Files up to this size have every worker name read (an excerpt's workers may print nothing
else); larger ones, the names on their memory lines (in a whole log every worker prints some)."""
_WORKER_NAME = re.compile(r"\((Worker_[A-Z0-9_]{1,80}|VllmWorker (?:[A-Z0-9_]{1,80}|rank=\d{1,6})) pid=\d{1,10}"
                          r"(?:, ip=[\w.:\-]{1,64})?\)")
"""A worker's name: 0.10's `VllmWorker PP0_TP0`, 0.8's `VllmWorker rank=3` (its global rank: real pastes round
twenty-two, vllm#16841's four workers printed no figure and gave no size)."""


@dataclass(frozen=True)
class Size:
    value: int | None
    """The size, when a line states it or the names pin it down; None: not known."""
    at_least: int
    """What the names show it is at least (1 when they show nothing)."""
    source: str | None
    """Where `value` comes from, in words."""


@dataclass(frozen=True)
class Layout:
    sizes: Mapping[str, Size]
    notes: tuple[str, ...]

    def size(self, dim: str) -> int | None:
        return self.sizes[dim].value

    def for_ranks(self, dim: str) -> int:
        """The size used to turn names into global ranks: known, else the least it can be."""
        size = self.sizes[dim]
        return size.value if size.value is not None else max(size.at_least, 1)

    def world(self) -> int | None:
        """TP × PP × PCP of one engine when all three are known (DCP reuses the TP ranks)."""
        values = [self.sizes[d].value for d in ("tp", "pp", "pcp")]
        if any(v is None for v in values):
            return None
        return values[0] * values[1] * values[2]  # type: ignore[operator]


def worker_names(text: str) -> set[str]:
    """Every vLLM worker name in a file small enough to read whole (NAME_SCAN_CHARS)."""
    if len(text) > NAME_SCAN_CHARS:
        return set()
    return {m.group(1) for m in _WORKER_NAME.finditer(text)}


def layout(names: Iterable[str], stated: Sequence[tuple[str, Mapping[str, Any]]],
           engine_ran_a_rank: bool = True, v0_workers: int = 0) -> Layout:
    """The layout from the process names seen and the stated knobs, `stated` in precedence order:
    (source in words, {vLLM's key: value}). An EngineCore and no worker name means one rank (the
    uni executor) only where the engine core printed a rank's own figure (`engine_ran_a_rank`):
    a paste that kept only its KV-size lines could come from any TP. `v0_workers`: V0's
    `VllmWorkerProcess` pids seen (beside its driver, rank 0)."""
    named = {n: proc_tag(n) for n in sorted(set(names))}
    tags = list(named.values())
    # 0.8's engine cores are `EngineCore_4`, with no DP in the name (lines._ENGINE_INDEX): a note quotes them
    # so, not as `_DP4` (real pastes round twenty-five, trl#3310: "process names show _DP4, _DP6"), unless another
    # name spells that rank `_DP4` (`EngineCore_DP4`, `Worker_DP4_TP0`)
    cores = {t.dp: n for n, t in named.items() if t.role is Role.ENGINE and n == f"EngineCore_{t.dp}"}
    bare_cores = {i: n for i, n in cores.items() if not any(t.dp == i and m != n for m, t in named.items())}
    workers = [t for t in tags if t.role is Role.WORKER and not t.provisional and not t.ray]
    named = {n: t for n, t in named.items() if t in workers}
    uni = (engine_ran_a_rank and any(t.role is Role.ENGINE for t in tags)
           and not any(t.role is Role.WORKER for t in tags))
    notes: list[str] = []
    sizes: dict[str, Size] = {}
    ep_tp = _tp_from_ep(workers)
    # A config line or a command line that states any knob leaves the others at vLLM's default, 1
    # (the engine line lists every size its release has; `non-default args` and a command line
    # omit the defaults; a Namespace lists every knob, so one it does not give is unknown).
    defaults = any(knobs for where, knobs in stated if where != ARGS_NAMESPACE)
    for dim in DIMS:
        key = KEYS[dim]
        seen = sorted({getattr(t, dim) for t in workers if getattr(t, dim) is not None})
        at_least = max(seen[-1] + 1, 2) if seen else 1  # a suffix at all means a group of 2 or more
        word = "worker"
        why = "vLLM adds the suffix only when the group has 2 or more ranks"
        cores = sorted({t.dp for t in tags if t.role is Role.ENGINE and t.dp is not None}) if dim == "dp" else []
        if cores and cores[-1] > 0:
            # one engine core per DP rank; every engine core is `EngineCore_DP0` at DP 1 too, so only a
            # higher one bounds DP (vllm-ascend#3022: `EngineCore_DP1`)
            at_least, word, why = max(at_least, cores[-1] + 1), "process", "one engine core per DP rank"
            seen = sorted(set(seen) | set(cores))
        given = [(int(v), where) for where, knobs in stated
                 if isinstance(v := knobs.get(key), int) and not isinstance(v, bool) and v > 0]
        if dim == "dp":
            # each engine of a non-MoE model runs as an independent DP rank, its config reset to
            # data_parallel_size 1 (config/parallel.py reconfigure_for_independent_dp_rank), which its
            # engine line prints: the size typed is the deployment's (real pastes round nineteen:
            # `'data_parallel_size': 2` in `non-default args`, `data_parallel_size=1` on the line)
            given.sort(key=lambda g: g[1] == ENGINE_LINE)
        value, source = given[0] if given else (None, None)
        if value is None and dim == "tp" and ep_tp is not None:
            value, source = ep_tp, "the expert-parallel ranks in the worker names"
        if value is None and dim != "dp":
            if seen and seen == list(range(at_least)) and at_least > 1:
                value, source = at_least, f"the worker names _{LABELS[dim]}0 … _{LABELS[dim]}{at_least - 1}"
            elif not seen and (workers or uni):
                value, source = 1, "the worker names (no _" + LABELS[dim] + " suffix)"
            elif not seen and defaults:
                value, source = 1, _DEFAULT
        if value is None and seen:  # DP only bounded: an engine of its own per rank, perhaps on another node
            quoted = [bare_cores[i] if dim == "dp" and i in bare_cores else f"_{LABELS[dim]}{i}" for i in seen[:8]]
            notes.append(f"{key}: ≥ {at_least}, size not stated ({word} names show "
                         f"{', '.join(quoted)}"
                         f"{' …' if len(seen) > 8 else ''}; {why})")
        if value is not None and value < at_least:
            notes.append(f"{key} {value} ({source}) is below what the {word} names show (≥ {at_least})"
                         + (": not known" if dim == "dp" else ""))
            if dim == "dp":
                value, source = None, None  # one engine's own view: the deployment's size is at least the names
        sizes[dim] = Size(value, at_least, source)
    _no_default_below_the_ranks(sizes, _least_world(tags, v0_workers)[0])
    notes.extend(_rank_numbers_assumed(named, sizes))
    notes.extend(_world_at_least(tags, sizes, v0_workers))
    notes.extend(_ranks_absent(workers, sizes))
    return Layout(sizes, tuple(notes))


def _ranks_absent(workers: Sequence[ProcTag], sizes: Mapping[str, Size]) -> list[str]:
    """Where every size is stated and the worker names show one node's share of DP × PP × PCP × TP ranks: the ranks
    absent, most often another node's (real pastes round twenty-two, vllm-ascend#5629: `--data-parallel-size 4
    --data-parallel-size-local 2 --tensor-parallel-size 4` on two nodes, this node's `Worker_DP0_*` and `Worker_DP1_*`
    only, and the report said nothing of ranks 8–15). Names with no suffix (TP 1) say nothing here."""
    values = {dim: sizes[dim].value for dim in ("dp", "pp", "pcp", "tp")}
    if not workers or any(v is None for v in values.values()) or not any(
            getattr(t, dim) is not None for t in workers for dim in ("dp", "pp", "pcp", "tp")):
        return []
    dp, pp, pcp, tp = (int(v) for v in values.values())  # type: ignore[arg-type]
    world = dp * pp * pcp * tp
    shown = {(((t.dp or 0) * pp + (t.pp or 0)) * pcp + (t.pcp or 0)) * tp + (t.tp or 0) for t in workers}
    shown = {r for r in shown if r < world}
    if not shown:
        return []
    first, last = min(shown), max(shown)
    block = last - first + 1
    # a node's share: an aligned run of 2 ranks or more that divides the world (an excerpt that kept a few workers'
    # lines shows ranks here and there, and one rank alone may be all a paste quotes)
    if len(shown) != block or block < 2 or world % block or first % block or block >= world:
        return []
    runs = [str(a) if a == b else f"{a}–{b}" for a, b in ((0, first - 1), (last + 1, world - 1)) if a <= b]
    sizes_text = " × ".join(f"{LABELS[d]} {v}" for d, v in values.items() if v > 1)
    return [f"the worker names show {len(shown)} of the {world} ranks of {sizes_text}: ranks "
            f"{' and '.join(runs)} are not in the log (another node's, or lines the "
            f"paste left out): their figures are not in the report"]


def _world_at_least(tags: Sequence[ProcTag], sizes: Mapping[str, Size], v0_workers: int) -> list[str]:
    """Where one engine's world (TP × PP × PCP) is not stated and the names give no suffix to bound a size, what the
    workers give: a name with the global rank (0.8's `VllmWorker rank=3`, the provisional `VllmWorker-3`: ≥ 4), or
    V0's driver and k `VllmWorkerProcess` workers (≥ k + 1), one process a rank (real pastes round twenty-two,
    vllm#16841: four `VllmWorker rank=N` and instructlab#2092: seven worker pids, each no size, no note)."""
    least, ranks = _least_world(tags, v0_workers)
    world = [sizes[d] for d in ("tp", "pp", "pcp")]
    if least < 2 or all(size.value is not None for size in world):
        return []
    if any(size.at_least > 1 for size in world):  # the suffixes bound it (the note above)
        return []
    processes = f"{v0_workers} worker process{'es' if v0_workers > 1 else ''}"
    shown = (f"worker names show rank {', '.join(map(str, ranks[:8]))}{' …' if len(ranks) > 8 else ''}"
             if ranks and ranks[-1] + 1 == least else f"V0's driver and {processes}")
    return [f"{KEYS['tp']} × {KEYS['pp']}: ≥ {least}, sizes not stated ({shown}; one process per rank)"]


def _least_world(tags: Sequence[ProcTag], v0_workers: int) -> tuple[int, list[int]]:
    """The least TP × PP × PCP the worker processes show (_world_at_least), and the global ranks their names give."""
    ranks = sorted({t.global_rank for t in tags if t.role is Role.WORKER and t.global_rank is not None})
    return max(ranks[-1] + 1 if ranks else 0, v0_workers + 1 if v0_workers else 0), ranks


_DEFAULT = "vLLM's default (no line states it)"


def _no_default_below_the_ranks(sizes: dict[str, Size], least: int) -> None:
    """No size is vLLM's default 1 where the sizes would then give fewer ranks than the worker processes show: the
    size is not known, and _world_at_least says what it is at least (real pastes round twenty-four, vllm-ascend DP
    notes: `VllmWorker rank=6` and a V0 `VllmWorkerProcess` in a paste whose command names `--model=` only, and
    `tensor_parallel_size` 1 from the default)."""
    world = 1
    for dim in ("tp", "pp", "pcp"):
        world *= sizes[dim].value or 1
    if world >= least:
        return
    for dim in ("tp", "pp"):
        if sizes[dim].source == _DEFAULT:
            sizes[dim] = Size(None, sizes[dim].at_least, None)


# vLLM's rank layout (distributed/parallel_state.py) nests dp ⊃ pp ⊃ pcp ⊃ tp: a worker's global
# rank multiplies its outer indices by the inner groups' sizes.
_OUTER = {"tp": ("pcp", "pp", "dp"), "pcp": ("pp", "dp"), "pp": ("dp",)}


def _rank_numbers_assumed(workers: Mapping[str, ProcTag], sizes: Mapping[str, Size]) -> list[str]:
    """Where an inner group's size is only a lower bound and a worker sits beyond the first outer
    group (`Worker_PP1_TP3` with TP ≥ 4 not stated), its global rank is computed with that bound:
    say so, since a larger group numbers it higher."""
    notes = []
    for dim, outer in _OUTER.items():
        size = sizes[dim]
        if size.value is not None or size.at_least < 2:
            continue
        beyond = [n for n, t in workers.items() if any((getattr(t, o) or 0) > 0 for o in outer)]
        if beyond:
            notes.append(f"global ranks of {', '.join(beyond[:4])}{' …' if len(beyond) > 4 else ''} assume "
                         f"{KEYS[dim]} {size.at_least}, the least the worker names allow; a larger group "
                         f"numbers them higher")
    return notes


def _tp_from_ep(workers: Sequence[ProcTag]) -> int | None:
    """TP from `_DPd_TPt_EPe` names without PCP: e = d × TP + t, for every such name that has d > 0."""
    found = set()
    for t in workers:
        if t.ep is None or t.dp is None or t.pcp is not None or t.dp <= 0:
            continue
        tp = t.tp or 0
        if (t.ep - tp) % t.dp or (t.ep - tp) // t.dp <= tp:
            return None  # names that do not fit the layout: say nothing
        found.add((t.ep - tp) // t.dp)
    return found.pop() if len(found) == 1 else None
