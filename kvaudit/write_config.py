"""`--write-config FILE` (`kvaudit run`, `kvaudit plan`): the deployment's `vllm serve` config, with
kvaudit's safe values applied, ready for `vllm serve --config FILE`.

The safe values are the report's safe serve flags (capacity.safe_serve_flags): `kv-cache-memory-bytes`
(whole KV blocks of the binding rank), `gpu-memory-utilization` and `max-model-len`. Besides them,
the file gets every knob the command line set over the user's file (a serve line's `-tp 8`, kvaudit's
`--gmu`), or a plan's edits, so that it describes what was audited.

The user's YAML is patched where it stands (PyYAML's node positions): comments, order and spelling
are kept, a changed value is replaced in place, a missing key is appended in the file's own style
(`max-model-len` or `max_model_len`; a `false` always with dashes, the only spelling vLLM's --config
reader can turn into `--no-…`, which `vllm serve` 0.32 never does: the header says which flags to
pass on the command line instead). `num-gpu-blocks-override` is removed (it would override the safe bytes)
and so are dotted keys of a mapping that is replaced (vLLM merges them last, over the whole value).
With no YAML, the file is built from the run's flags (a plan: the measured report's config and the
edits). A comment at the top names kvaudit's version, the report and what was set.

Written only when the audit says the configuration fits (exit 0): a boot that failed, a verdict
that is not ok, or a report with no safe flags writes nothing, and says so (config_refusal).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kvaudit.config import EMBEDDED_DEFAULTS, MODELLED_KEYS, AuditConfig, embedded_model_path
from kvaudit.errors import UsageError
from kvaudit.printable import one_line
from kvaudit.schema import Report, Verdict, from_log
from kvaudit.serve_config import YAML_SUFFIXES, Deployment

SAFE_KEYS = ("kv_cache_memory_bytes", "gpu_memory_utilization", "max_model_len")
"""The engine arguments kvaudit's safe serve flags set, in the order it prints them."""
REMOVED_KEYS = ("num_gpu_blocks_override",)
"""Engine arguments that would override the safe KV bytes: taken out of the written file."""
SECRETS = ("api_key", "hf_token")
"""Never written into a file kvaudit builds (a file the user gave keeps what it had)."""


def check_target(path: Any) -> None:
    """vLLM's load_config_file reads only .yaml/.yml files: any other name is refused now, exit 2."""
    name = str(path)
    if name == "-":
        raise UsageError("--write-config needs a file name: vllm serve --config reads a file")
    if not name.lower().endswith(YAML_SUFFIXES):
        raise UsageError(f"--write-config {name}: vllm serve --config reads only .yaml or .yml files; name one so")


def safe_values(report: Report) -> dict[str, Any]:
    """The report's safe serve flags as engine arguments: {kv_cache_memory_bytes: int, …}."""
    out: dict[str, Any] = {}
    for flag in report.capacity.safe_serve_flags:
        name, _, value = flag.partition("=")
        key = name.lstrip("-").replace("-", "_")
        if key not in SAFE_KEYS:
            continue
        try:
            out[key] = float(value) if key == "gpu_memory_utilization" else int(value)
        except ValueError:
            continue
    return out


def config_refusal(report: Report, exit_code: int) -> str | None:
    """Why no config is written for this report, or None: only a report that fits (exit 0) with
    safe flags is written to a deployment's config."""
    if from_log(report):
        return ("its KV figure is a vLLM log's (vLLM's own one-pass sizing, not audited): boot the config with "
                "`kvaudit run --write-config`")
    if report.failure is not None:
        return f"the boot failed ({report.failure.kind.value}): {report.verdict_reason}"
    if report.verdict is not Verdict.OK or exit_code != 0:
        return f"the verdict is {report.verdict.value}: {report.verdict_reason}"
    if "kv_cache_memory_bytes" not in safe_values(report):
        return "the report has no safe KV bytes"
    return None


# --------------------------------------------------------------------------------------------
# What the file should say


def config_values(config: AuditConfig) -> dict[str, Any]:
    """An audited config as vllm serve engine arguments (vLLM's underscore names, JSON values):
    the knobs kvaudit models (speculation as speculative_config) and extra_args."""
    out: dict[str, Any] = {}
    for key in MODELLED_KEYS:
        value = getattr(config, key)
        if value is None or key in ("speculative_method", "num_speculative_tokens"):
            continue
        out[key] = list(value) if isinstance(value, tuple) else value
    if config.speculative_method is not None:
        spec = {"method": config.speculative_method}
        if config.num_speculative_tokens is not None:
            spec["num_speculative_tokens"] = config.num_speculative_tokens
        out["speculative_config"] = spec
    for key, value in config.extra_args.items():
        if key == "speculative_config" and isinstance(value, dict):
            out[key] = {**value, **out.get(key, {})}
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class Written:
    """The file's text and what kvaudit set in it (for the message on stderr)."""

    text: str
    changes: tuple[str, ...]


def check_run_target(asked: AuditConfig, deployment: Deployment | None) -> None:
    """`kvaudit run --config FILE --write-config` on a file that names no model would audit the
    embedded model and write its safe values into the user's deployment: refused, before the boot."""
    if (deployment is not None and deployment.yaml_text is not None and deployment.model is None
            and asked.model == embedded_model_path()):
        raise UsageError(f"{deployment.yaml_path} names no model, so the audit would run kvaudit's embedded model, "
                         f"whose safe values are not the deployment's: add model: to it, or pass --model or "
                         f"-- vllm serve MODEL")


def run_config(*, asked: AuditConfig, deployment: Deployment | None, report: Report, report_name: str,
               grammar: Any = None) -> Written:
    """The config `kvaudit run --write-config` writes: the user's YAML (or one built from the run's
    flags), with the command line's knobs and the safe values."""
    values = config_values(asked)
    notes: list[str] = []
    if values.get("load_format") == "dummy" and not _file_has(deployment, "load_format", "dummy"):
        del values["load_format"]
        notes.append("the audit ran on random weights (load-format dummy); the file leaves that out")
    if deployment is not None and deployment.yaml_text is not None:
        check_run_target(asked, deployment)
        file_has = dict(deployment.file_values)
        if deployment.model_from_file:
            file_has["model"] = deployment.model
        changes = {k: v for k, v in values.items() if k not in file_has or not _same(file_has[k], v)}
        for key in ("tensor_parallel_size", "decode_context_parallel_size"):  # AuditConfig's 1 is vLLM's default
            if changes.get(key) == 1 and key not in file_has:
                del changes[key]
        if asked.model == embedded_model_path():
            for key, value in EMBEDDED_DEFAULTS.items():
                if changes.get(key) == value and key not in file_has:
                    del changes[key]
        return _written(deployment, changes, report, report_name, "kvaudit run", notes, grammar)
    if deployment is not None:  # a serve line: its API server's options belong to the deployment too
        values.update({k: v for k, v in deployment.api_server_values.items() if _renderable(v)})
    secret = [k for k in SECRETS if isinstance(values.get(k), str) or isinstance(values.get(k), list)]
    if secret:
        notes.append("left out: " + ", ".join(k.replace("_", "-") for k in secret)
                     + " (secrets; pass them on the command line or through the environment)")
        values = {k: v for k, v in values.items() if k not in secret}
    return _written(None, values, report, report_name, "kvaudit run", notes, grammar)


def _renderable(value: Any) -> bool:
    """A value a YAML file can carry as vLLM reads it back (JSON values)."""
    return value is None or isinstance(value, (bool, int, float, str)) or (
        isinstance(value, (list, tuple)) and all(_renderable(v) for v in value)) or (
        isinstance(value, dict) and all(isinstance(k, str) and _renderable(v) for k, v in value.items()))


def plan_config(*, plan: Any, deployment: Deployment | None, report_name: str, grammar: Any = None) -> Written:
    """The config `kvaudit plan --write-config` writes: the user's YAML with the plan's edits and
    safe values, or (no YAML) the measured report's config as vLLM ran it, edited."""
    from kvaudit.units import fmt_bytes
    report: Report = plan.report
    notes = ["planned from the measured report, without a boot"
             + (f"; the planned KV has a stated error of ±{fmt_bytes(plan.kv_error_bytes)}"
                if plan.kv_error_bytes else "")]
    if deployment is not None and deployment.yaml_text is not None:
        changes = {edit.knob: list(edit.b) if isinstance(edit.b, tuple) else edit.b for edit in plan.edits}
        return _written(deployment, changes, report, report_name, "kvaudit plan", notes, grammar)
    values = config_values(report.config)
    notes.append("built from the measured report's config, as vLLM ran it")
    if values.get("load_format") == "dummy":
        del values["load_format"]
        notes.append("the measured boot ran on random weights (load-format dummy); the file leaves that out")
    return _written(None, values, report, report_name, "kvaudit plan", notes, grammar)


def _file_has(deployment: Deployment | None, key: str, value: Any) -> bool:
    return deployment is not None and deployment.file_values.get(key) == value


def _same(a: Any, b: Any) -> bool:
    """The file already says this value (a list is a tuple, 1 is 1.0, true is not 1)."""
    a = list(a) if isinstance(a, tuple) else a
    b = list(b) if isinstance(b, tuple) else b
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def _written(deployment: Deployment | None, changes: Mapping[str, Any], report: Report, report_name: str,
             verb: str, notes: list[str], grammar: Any) -> Written:
    safe = safe_values(report)
    values = {**changes, **safe}
    patched = deployment is not None and deployment.yaml_text is not None
    was = {**deployment.pinned, **deployment.file_values} if deployment is not None else {}
    said = []
    for key in SAFE_KEYS:
        if key in safe:
            before = was.get(key)
            said.append(f"{key.replace('_', '-')} {safe[key]}" + (
                "" if not patched else " (new)" if before is None else " (unchanged)" if _same(before, safe[key])
                else f" (was {before})"))
    others = [k for k in changes if k not in SAFE_KEYS] if patched else []  # a built file sets every key
    dropped = [k for k, v in values.items() if v is False]
    if dropped:
        notes.append("vllm serve --config drops every false value (vLLM 0.32, FlexibleArgumentParser."
                     "load_config_file): pass " + " ".join("--no-" + k.replace("_", "-") for k in dropped)
                     + " on vllm serve's command line")
    if report.capacity.safe_serve_env:
        notes.append("the safe values were measured with " + " ".join(report.capacity.safe_serve_env)
                     + " in the environment: set that where vllm serve runs too (a config file cannot)")
    header = _header(report, report_name, verb, said, others, notes)
    if patched:
        assert deployment is not None and deployment.yaml_text is not None
        # a value the file already says stays as written (`4K` is not rewritten as 4096)
        values = {k: v for k, v in values.items() if k not in was or not _same(was[k], v)}
        text = patch_yaml(deployment.yaml_text, values, REMOVED_KEYS, grammar)
    else:
        text = "".join(f"{_key(k, '-', v)}: {render(v)}\n" for k, v in values.items())
    return Written(text=header + text, changes=tuple(said + [_key(k, "-", None) for k in others]))


def _header(report: Report, report_name: str, verb: str, said: list[str], others: list[str],
            notes: list[str]) -> str:
    from kvaudit import __version__
    engine = report.environment.vllm or report.engine.version
    what = ", ".join(x for x in (f"vLLM {engine}" if engine else "", report.engine.attention_backend or "",
                                 report.environment.device_name or "") if x)
    lines = [f"Written by kvaudit {__version__} ({verb} --write-config) from {report_name}"
             + (f" ({what})" if what else "") + f": verdict {report.verdict.value}.",
             "kvaudit's safe values: " + ", ".join(said) + ".",
             "vLLM sizes the KV cache to kv-cache-memory-bytes, not to gpu-memory-utilization's budget; re-run "
             "kvaudit after any change of image, model or flags."]
    if others:
        lines.append("Also set, as audited: " + ", ".join(_key(k, "-", None) for k in others) + ".")
    lines += [n[0].upper() + n[1:] + "." for n in notes]
    return "".join(f"# {one_line(line)}\n" for line in lines)


# --------------------------------------------------------------------------------------------
# YAML text


def render(value: Any) -> str:
    """A value as YAML that vLLM's load_config_file turns back into the same argument: numbers
    and booleans plain, strings double-quoted (JSON escapes are YAML's), lists and mappings as
    JSON flow collections."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(render(v) for v in value) + "]"
    if isinstance(value, dict):
        return json.dumps(value)
    if value is None:
        return "null"
    raise UsageError(f"cannot write {value!r} to a vllm serve config")  # pragma: no cover - JSON values only


def _key(dest: str, style: str, value: Any) -> str:
    """An engine argument's name as a key: with dashes (vLLM's long option) or the file's underscores;
    `false` always dashed (vLLM's reader looks for --no-KEY as written)."""
    if style == "_" and value is not False:
        return dest
    return dest.replace("_", "-")


def _key_dest(key: str, grammar: Any) -> tuple[str, bool]:
    """A file key's destination (vLLM's option it names, abbreviations included) and whether it
    is a dotted part of a JSON option (`speculative-config.method`)."""
    dotted = "." in key
    head = key.split(".", 1)[0]
    word = "--" + head.replace("_", "-")
    if grammar is not None:
        if word in grammar.options:
            return grammar.options[word].dest, dotted
        matches = [o for o in grammar.options if o.startswith(word)]
        if len(matches) == 1:
            return grammar.options[matches[0]].dest, dotted
    return head.replace("-", "_"), dotted


def patch_yaml(text: str, values: Mapping[str, Any], remove: Iterable[str], grammar: Any = None) -> str:
    """`text` (a YAML mapping) with each of `values` set in place or appended, and the keys of
    `remove` (and dotted keys of a replaced mapping) taken out; the rest is left as written."""
    import yaml
    if grammar is None:  # the installed vLLM's option names resolve abbreviated keys (`max-model: 4K`)
        from kvaudit.serve_args import serve_grammar
        grammar = serve_grammar()
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    remove = set(remove)
    if not isinstance(root, yaml.MappingNode) or root.flow_style or not root.value:
        return _rebuilt(text, values, remove)
    style = _style([k.value for k, _ in root.value if isinstance(k, yaml.ScalarNode)])
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), applied from the end
    placed: set[str] = set()
    for key_node, value_node in root.value:
        dest, dotted = _key_dest(str(key_node.value), grammar)
        if dest in remove or (dotted and dest in values):
            start = text.rfind("\n", 0, key_node.start_mark.index) + 1
            end = _line_end(text, _value_end(text, value_node))
            edits.append((start, min(len(text), end + 1), ""))
            continue
        if dest not in values or dotted:
            continue
        colon = text.index(":", key_node.end_mark.index)
        empty = isinstance(value_node, yaml.ScalarNode) and value_node.start_mark.index == value_node.end_mark.index
        end = colon + 1 if empty else _value_end(text, value_node)
        replacement = " " + render(values[dest])
        if end > colon + 1 and text[end - 1] == "\n":
            replacement += "\n"
        edits.append((colon + 1, max(end, colon + 1), replacement))
        placed.add(dest)
    missing = [(k, v) for k, v in values.items() if k not in placed]
    if missing:
        last_key, last_value = root.value[-1]
        at = _line_end(text, _value_end(text, last_value))
        indent = " " * root.value[0][0].start_mark.column
        block = "".join(f"\n{indent}{_key(k, style, v)}: {render(v)}" for k, v in missing)
        edits.append((at, at, block))
    for start, end, replacement in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:start] + replacement + text[end:]
    return text if text.endswith("\n") else text + "\n"


def _style(keys: list[str]) -> str:
    """The file's spelling of long names: underscores when it uses them and never dashes."""
    heads = [k.split(".", 1)[0] for k in keys]
    return "_" if any("_" in h for h in heads) and not any("-" in h for h in heads) else "-"


def _value_end(text: str, node: Any) -> int:
    """Where a value's own text ends: a scalar's or flow collection's end mark; for a block
    collection, the end of its last scalar (its end mark lies at the next key, past comments)."""
    import yaml
    if isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False):
        return min(node.end_mark.index, len(text))
    children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
    return max((_value_end(text, c) for c in children), default=node.start_mark.index)


def _line_end(text: str, index: int) -> int:
    """The end of the line holding `index - 1` (a value ending at a line break ends that line)."""
    if index > 0 and text[index - 1] == "\n":
        return index - 1
    newline = text.find("\n", index)
    return len(text) if newline < 0 else newline


def _rebuilt(text: str, values: Mapping[str, Any], remove: set[str]) -> str:
    """A flow-style or empty mapping cannot take a line: the file is written out again, block style."""
    import yaml
    data = yaml.safe_load(text) or {}
    out = {k: v for k, v in data.items() if k.replace("-", "_").split(".", 1)[0] not in remove | set(values)}
    lines = [f"{k}: {render(v)}" for k, v in out.items()]
    lines += [f"{_key(k, '-', v)}: {render(v)}" for k, v in values.items()]
    return "".join(line + "\n" for line in lines)

