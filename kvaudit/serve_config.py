"""A `vllm serve` deployment as kvaudit reads it: a `--config` YAML file, a serve line pasted
after `--` (`kvaudit run -- vllm serve MODEL -tp 4 …`), or both, read the way vLLM reads them.

vLLM 0.32's FlexibleArgumentParser (vllm/utils/argparse_utils.py) does, in this order:

1. `vllm serve … --model M …`: M is moved to the front, as the positional model (`parse_args`);
2. `--config FILE` (two words; `--config=FILE` is stored and never read): the file's keys become
   options, inserted after the model and before every other argument, so the command line wins
   (`_pull_args_from_config`, `load_config_file`: `true` is `--key`, `false` is `--no-key` only
   when the parser reading the file has that option, which under `vllm serve` it never has, so
   every `false` is dropped there; a list is `--key a b`, a mapping one JSON value, anything else
   `str(value)`);
3. `--a_b` is `--a-b` up to the first dot; `-O3` is `--optimization-level 3`;
4. `--json-arg.key value` (and `--json-arg.list+ a,b`) are merged into one JSON value per option,
   appended after everything else;
5. argparse: abbreviations of long options, values by each option's arity, the last one wins.

kvaudit mirrors each step (kvaudit/kvaudit/serve_args.py reads the options, their arity and
their types from the installed vLLM's source without importing it), so an option vLLM does not
know is refused here, before any boot, naming it. The YAML is read with PyYAML's safe loader only,
at most MAX_CONFIG_BYTES, without aliases and at most MAX_DEPTH deep (an alias can make a small
file expand without bound once its values are turned into text, as vLLM does).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvaudit.errors import UsageError
from kvaudit.printable import clipped

MAX_CONFIG_BYTES = 1 << 20
"""A vllm serve config is a few hundred bytes; a file larger than 1 MiB is refused unread."""
MAX_DEPTH = 32
"""Nesting deeper than this (a mapping in a list in a mapping …) is refused before it is built."""
YAML_SUFFIXES = (".yaml", ".yml")
"""vLLM's load_config_file reads a config only with one of these (it refuses any other)."""

PINNED = ("kv_cache_memory_bytes", "num_gpu_blocks_override")
"""Engine arguments that fix the KV size (config.REFUSED_ARGS): in a deployment's file or serve line
they are set aside, not passed to the audit, and compared with the audit's safe bytes afterwards."""

API_SERVER_MODULES = ("vllm.entrypoints.openai.api_server",)
"""`python -m vllm.entrypoints.openai.api_server …`, the older way to start the same server."""


@dataclass(frozen=True)
class Deployment:
    """What a vllm serve configuration sets, read as vLLM reads it, in vLLM's underscore names."""

    model: str | None = None
    """The model (positional or `--model`/`model:`), as given: a folder or a Hugging Face id."""
    model_from_file: bool = False
    file_values: Mapping[str, Any] = field(default_factory=dict)
    """Engine arguments the config file sets (the last setting of each): kvaudit's flags override them."""
    line_values: Mapping[str, Any] = field(default_factory=dict)
    """Engine arguments the serve line sets: they override the file and kvaudit's flags, as the
    command line overrides the file in vLLM."""
    api_server: tuple[str, ...] = ()
    """Options of vllm serve's API server (`--port`, `--host`) as written: no engine memory, not passed to the audit."""
    api_server_values: Mapping[str, Any] = field(default_factory=dict)
    """Their values (destination → value, the serve line's over the file's), for a config --write-config builds."""
    pinned: Mapping[str, Any] = field(default_factory=dict)
    """PINNED arguments the deployment sets, set aside."""
    yaml_path: Path | None = None
    yaml_text: str | None = None
    """The config file as read (UTF-8), for --write-config."""
    notes: tuple[str, ...] = ()
    """What vLLM's reading does that the user may not expect (a `false` it drops)."""


# --------------------------------------------------------------------------------------------
# Sizes and numbers, as vLLM's parser reads them

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
SIZE_FORMS = "4096, 8k (8,000), 8K (8,192), 25.6k, 8g (8×10^9), 8G (8 GiB)"


def size_hint(text: str, auto: bool = False) -> str:
    """What to write instead of a size vLLM does not read: `8GiB` is vLLM's `8G`."""
    unit = re.fullmatch(r"\s*(\d{1,20})\s*([KMGT])i?B\s*", text)
    if unit:
        return f"vLLM writes {unit.group(1)}{unit.group(2)} for {unit.group(1)} {unit.group(2)}iB"
    return f"write one of vLLM's forms: {SIZE_FORMS}" + (", or auto" if auto else "")


def human_readable_int(text: str) -> int:
    """vLLM's reading of a size or token count (vllm/utils/argparse_utils.py human_readable_int,
    0.32, for max_num_batched_tokens, kv_cache_memory_bytes and the like): a lower-case suffix
    is decimal (`25.6k` → 25,600, `8g` → 8×10^9), an upper-case one binary and whole
    (`8K` → 8,192, `8G` → 8 GiB); anything else is Python's int() of the stripped text (`4096`,
    `4_096`). ValueError otherwise: `8GiB`, `1.5G`, `8 G` are not vLLM's forms."""
    value = text.strip()
    match = _HUMAN.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        return int(number) * _BINARY[suffix]  # int("1.5"): ValueError, as vLLM refuses decimals here
    return int(value)


def human_readable_int_or_auto(text: str) -> int:
    """vLLM's reading of max_model_len: -1 or `auto` (any case) is -1 (fit to memory), else human_readable_int."""
    value = text.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


# --------------------------------------------------------------------------------------------
# The YAML file


def read_yaml(path: Path | str, what: str = "config file") -> tuple[dict[str, Any], str]:
    """A vllm serve `--config` file: its top-level mapping (PyYAML's safe loader) and its text.
    UsageError, one line, for a file that is missing, too large, not UTF-8, not YAML, holds an
    alias or nests too deep, or whose top level is not a mapping with string keys."""
    import yaml
    text = read_config_text(path, what)
    try:
        depth = 0
        fast = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML was built with it
        for event in yaml.parse(text, Loader=fast):
            if isinstance(event, yaml.AliasEvent):
                raise UsageError(f"{what} {path}: line {event.start_mark.line + 1}: YAML aliases (*name) are not "
                                 f"read: write the value out")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise UsageError(f"{what} {path}: nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        data = yaml.load(text, Loader=fast)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise UsageError(f"{what} {path} is not valid YAML: {where}{problem}") from None
    except RecursionError:
        raise UsageError(f"{what} {path}: nested too deep to read") from None
    if data is None:
        raise UsageError(f"{what} {path} is empty: vLLM's --config reads a mapping of option: value")
    if not isinstance(data, dict):
        raise UsageError(f"{what} {path}: vLLM's --config reads a mapping of option: value at the top, "
                         f"not a {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            raise UsageError(f"{what} {path}: the key {key!r} is not an option name (vLLM reads each key as --KEY)")
    return data, text


def read_config_text(path: Path | str, what: str) -> str:
    """The file's text, UTF-8 (a BOM allowed), refused unread above MAX_CONFIG_BYTES; opened so
    that a FIFO cannot block."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{what} {path}: is a directory; name a YAML file")
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{what} {path}: not a regular file: save it to a file first")
    if info.st_size > MAX_CONFIG_BYTES:
        raise UsageError(f"{what} {path}: {info.st_size:,} bytes, more than the {MAX_CONFIG_BYTES >> 20} MiB a "
                         f"vllm serve config can reasonably be")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise UsageError(f"{what} {path}: not a regular file: save it to a file first")
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise UsageError(f"{what} {path}: more than the {MAX_CONFIG_BYTES >> 20} MiB a vllm serve config can "
                         f"reasonably be")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None


def is_yaml_config(path: Path | str) -> bool:
    """Whether `kvaudit run --config PATH` is a vllm serve YAML (else a kvaudit TOML preset): by
    the suffix (.yaml/.yml, .toml); without either, by the content (a TOML document that parses is a preset)."""
    suffix = Path(path).suffix.lower()
    if suffix in YAML_SUFFIXES:
        return True
    if suffix == ".toml":
        return False
    import tomllib
    try:
        tomllib.loads(read_config_text(path, "config file"))
    except tomllib.TOMLDecodeError:
        return True
    return False


def _config_tokens(data: Mapping[str, Any], options: Mapping[str, Any] | None, where: str,
                   notes: list[str], serve: bool) -> list[str]:
    """vLLM's load_config_file: each key and value as command-line words. A `false` becomes
    `--no-KEY` only where the parser reading the file has that option: under `vllm serve` that
    parser is `vllm`'s own (vllm/entrypoints/cli/main.py calls parse_args on it, and the serve
    options live in its subparser), so vLLM 0.32 drops every `false` there; the api_server entry
    point reads the file with the serve options themselves."""
    words: list[str] = []
    for key, value in data.items():
        if isinstance(value, bool):
            if value:
                words.append("--" + key)
            elif not serve and (options is None or f"--no-{key}" in options):
                words.append(f"--no-{key}")
            elif options is not None and "--no-" + _dashed(key) in options and serve:
                notes.append(f"{where}: vllm serve --config drops `{key}: false` (vLLM looks for --no-{key} among "
                             f"`vllm`'s own options, not `vllm serve`'s), so vLLM keeps its default, and so does "
                             f"the audit; to turn it off pass --no-{_dashed(key)} on the command line")
            elif options is not None and "--no-" + _dashed(key) in options:
                notes.append(f"{where}: vLLM's --config reader drops `{key}: false` (it looks for --no-{key}, which "
                             f"does not exist), and so does the audit: write `{_dashed(key)}: false`")
        elif isinstance(value, list):
            if value:
                words += ["--" + key, *(str(item) for item in value)]
        elif isinstance(value, dict):
            try:
                words += ["--" + key, json.dumps(value)]
            except (TypeError, ValueError) as exc:
                raise UsageError(f"{where}: {key}: vLLM cannot write this mapping as JSON: {exc}") from None
        else:
            words += ["--" + key, str(value)]
    return words


def _dashed(key: str) -> str:
    head, dot, rest = key.partition(".")
    return head.replace("_", "-") + dot + rest


# --------------------------------------------------------------------------------------------
# The serve line


def serve_line(tokens: Sequence[str]) -> list[str] | None:
    """The arguments of a pasted serve line after `--` (`vllm serve M -tp 4` → ["serve", "M", "-tp",
    "4"]; `python -m vllm.entrypoints.openai.api_server --model M` → ["--model", "M"]), or None
    when the words are plain engine flags (`-- --enable-expert-parallel`)."""
    if not tokens:
        return None
    first = tokens[0]
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", first):
        raise UsageError(f"the serve line starts with the environment assignment {clipped(first.split('=', 1)[0])}=…: "
                         f"put it before kvaudit (VAR=value kvaudit run -- vllm serve …)")
    if Path(first).name == "vllm":
        if len(tokens) < 2 or tokens[1] != "serve":
            raise UsageError(f"kvaudit run reads a `vllm serve` line after --, not "
                             f"`vllm {clipped(' '.join(tokens[1:2]))}`")
        return ["serve", *tokens[2:]]
    if re.fullmatch(r"python[0-9.]*", Path(first).name) and len(tokens) >= 3 and tokens[1] == "-m":
        if tokens[2] not in API_SERVER_MODULES:
            raise UsageError(f"kvaudit run reads `vllm serve` or `python -m {API_SERVER_MODULES[0]}` after --, "
                             f"not `python -m {clipped(tokens[2])}`")
        return list(tokens[3:])
    return None


def line_config_path(tokens: Sequence[str]) -> str | None:
    """The file a pasted serve line names with `--config FILE`, for the checks before any work."""
    args = list(tokens)
    if serve_line(args) is None or "--config" not in args:
        return None
    index = args.index("--config")
    return args[index + 1] if index + 1 < len(args) else None


def deployment_notes(deployment: Deployment, model_given: bool, planned: bool = False) -> list[str]:
    """What kvaudit says on stderr about a deployment it read, before the boot (or, `planned`, the plan)."""
    out = list(deployment.notes)
    if deployment.api_server:
        out.append("left out (options of vllm serve's API server, no engine memory): "
                   + ", ".join(deployment.api_server))
    for key, value in deployment.pinned.items():
        out.append(f"{_dashed(key).replace('_', '-')} {value} is set aside: kvaudit "
                   + ("plans the KV cache itself and compares the result after the plan" if planned else
                      "sizes the KV cache itself and compares the result after the boot"))
    if deployment.model is None and not model_given:
        where = f"{deployment.yaml_path}" if deployment.yaml_path is not None else "the serve line"
        out.append(f"{where} names no model: kvaudit audits its embedded tiny model; pass --model MODEL or "
                   f"-- vllm serve MODEL for the deployment's")
    return out


def pinned_warnings(deployment: Deployment | None, safe_kv_bytes: int | None) -> list[str]:
    """After the audit: a deployment's own kv-cache-memory-bytes above kvaudit's safe bytes over-commits."""
    if deployment is None or safe_kv_bytes is None:
        return []
    pinned = deployment.pinned.get("kv_cache_memory_bytes")
    if isinstance(pinned, int) and not isinstance(pinned, bool) and pinned > safe_kv_bytes:
        from kvaudit.units import fmt_bytes
        return [f"the deployment's kv-cache-memory-bytes {pinned} is {fmt_bytes(pinned - safe_kv_bytes)} above "
                f"kvaudit's safe {safe_kv_bytes}: lower it (--write-config writes the safe value)"]
    return []


@dataclass
class _Word:
    text: str
    from_file: bool
    given: str = ""
    """The word as the user wrote it (before vLLM's `_` → `-`), for messages."""

    def __post_init__(self) -> None:
        self.given = self.given or self.text


def read_deployment(*, config_file: Path | str | None = None, line: Sequence[str] | None = None,
                    grammar: Any = None, use_grammar: bool = True,
                    takes_name: Callable[[str, str], bool] | None = None) -> Deployment:
    """What a config file and/or a serve line (serve_line's arguments) set, with vLLM's precedence.
    `grammar` is kvaudit/serve_args.ServeGrammar (the installed vLLM's, looked up when not given
    and `use_grammar`). Without one, values are read as JSON where they parse, else as strings, and
    `takes_name(dest, where)` says whether a name goes to LLM(...) (config.engine_name_check: a
    near miss of a name LLM(...) takes is refused; any other name is taken for the API server's and
    left out); without it every name goes."""
    if grammar is None and use_grammar:
        from kvaudit.serve_args import serve_grammar
        grammar = serve_grammar()
    options = grammar.options if grammar is not None else None
    notes: list[str] = []
    args = list(line) if line is not None else ["serve"]
    serve = bool(args) and args[0] == "serve"
    where_line = "the serve line"
    if serve:
        args = _model_to_front(args)
    config_path: Path | str | None = None
    if any(a.startswith("--config=") for a in args):
        raise UsageError(f"{where_line}: vLLM reads a config file only as `--config FILE` (two words); "
                         f"`--config=FILE` is stored and never read: write --config FILE")
    if args.count("--config") > 1:
        raise UsageError(f"{where_line}: more than one --config: vLLM reads one config file")
    if "--config" in args:
        index = args.index("--config")
        if index == len(args) - 1:
            raise UsageError(f"{where_line}: --config needs a file")
        config_path = args[index + 1]
        if config_file is not None:
            raise UsageError(f"two config files, kvaudit's --config {config_file} and the serve line's --config "
                             f"{clipped(str(config_path))}: vLLM reads one; give one of them")
        if Path(str(config_path)).suffix.lower() not in YAML_SUFFIXES:
            raise UsageError(f"{where_line}: --config {clipped(str(config_path))}: vLLM reads a config file only "
                             f"with a .yaml or .yml suffix (load_config_file)")
        del args[index:index + 2]
    path = config_file if config_file is not None else config_path
    data, text = read_yaml(path) if path is not None else ({}, None)
    file_words = [_Word(w, True) for w in _config_tokens(data, options, f"config file {path}", notes, serve)]
    words = _insert_config([_Word(a, False) for a in args], file_words, serve)
    if words and words[0].text == "serve":
        words = words[1:]
    words = _spelled(words)
    words = _merge_dotted(words, path)
    parsed = _parse(words, grammar, path)
    return _deployment(parsed, grammar, path, text, notes, takes_name)


def _model_to_front(args: list[str]) -> list[str]:
    """vLLM's parse_args: `serve … --model M …` → `serve M …`."""
    index = next((i for i, a in enumerate(args) if re.match(r"^--model(=.+|$)", a)), None)
    if index is None:
        return args
    if args[index] == "--model":
        if index + 1 >= len(args):
            raise UsageError("the serve line: --model needs a model")
        model, rest = args[index + 1], index + 2
    else:
        model, rest = args[index].removeprefix("--model="), index + 1
    return ["serve", model, *args[1:index], *args[rest:]]


def _insert_config(args: list[_Word], file_words: list[_Word], serve: bool) -> list[_Word]:
    """vLLM's _pull_args_from_config: the file's words after the subcommand and the positional
    model, before the rest of the command line."""
    if not file_words:
        return args
    if not serve:
        return file_words + args
    model_in_line = len(args) > 1 and not args[1].text.startswith("-")
    at = 2 if model_in_line else 1
    return args[:at] + file_words + args[at:]


_DASHES = re.compile(r"(?<=--)[^\.]*")


def _spelled(words: list[_Word]) -> list[_Word]:
    """vLLM's parse_args: `--a_b` → `--a-b` up to the first dot, `-O3`/`-O 3` → `--optimization-level 3`."""
    out: list[_Word] = []
    for i, w in enumerate(words):
        arg = w.text
        if arg.startswith("--help"):
            raise UsageError("the serve line asks for --help: kvaudit runs the serve line; see vllm serve --help")
        if arg.startswith("--"):
            if "=" in arg:
                key, value = arg.split("=", 1)
                out.append(_Word(_DASHES.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + "=" + value,
                                 w.from_file, w.given))
            else:
                out.append(_Word(_DASHES.sub(lambda m: m.group(0).replace("_", "-"), arg, count=1), w.from_file,
                                 w.given))
        elif arg.startswith("-O") and arg != "-O":
            level = arg[3:] if arg[2] == "=" else arg[2:]
            out += [_Word("--optimization-level", w.from_file), _Word(level, w.from_file)]
        elif arg == "-O" and i + 1 < len(words) and words[i + 1].text in {"0", "1", "2", "3"}:
            out.append(_Word("--optimization-level", w.from_file))
        else:
            out.append(w)
    return out


def _merge_dotted(words: list[_Word], path: Path | str | None = None) -> list[_Word]:
    """vLLM's parse_args: `--cfg.a.b v` and `--cfg.list+ a,b` merged into one JSON value per option,
    appended after every other word (so they win over a whole `--cfg '{…}'`)."""
    delete: set[int] = set()
    merged: dict[str, dict[str, Any]] = {}
    merged_from_file: dict[str, bool] = {}
    for i, w in enumerate(words):
        if i in delete:
            continue
        arg = w.text
        if arg.startswith("--") and "." not in arg:
            continue
        if not (arg.startswith("-") and "." in arg):
            continue
        if "=" in arg:
            arg, value_text = arg.split("=", 1)
            if "." not in arg:
                continue
        else:
            if i + 1 >= len(words):
                raise UsageError(f"{_where(w.from_file, path)}: {clipped(arg)} needs a value (vLLM reads a word with a "
                                 f"dot after a dash as a --json-arg.key)")
            value_text = words[i + 1].text
            delete.add(i + 1)
        if arg.endswith("+"):
            arg = arg[:-1]
            value_text = json.dumps(value_text.split(","))
        key, *keys = arg.split(".")
        if len(keys) > MAX_DEPTH:
            raise UsageError(f"{_where(w.from_file, path)}: {clipped(w.given)} nests deeper than {MAX_DEPTH} levels")
        try:
            value: Any = json.loads(value_text)
        except RecursionError:
            raise UsageError(f"{_where(w.from_file, path)}: {clipped(w.given)}: a JSON value nested too deep") from None
        except json.JSONDecodeError:
            try:
                value = human_readable_int(value_text)
            except (ValueError, OverflowError):
                value = value_text
        for k in reversed(keys):
            value = {k: value}
        _update(merged.setdefault(key, {}), value)
        merged_from_file[key] = merged_from_file.get(key, True) and w.from_file
        delete.add(i)
    out = [w for i, w in enumerate(words) if i not in delete]
    for key, value in merged.items():
        out += [_Word(key, merged_from_file[key]), _Word(json.dumps(value), merged_from_file[key])]
    return out


def _update(original: dict[str, Any], update: Mapping[str, Any]) -> None:
    """vLLM's recursive_dict_update: nested mappings merge, lists concatenate, the rest is replaced."""
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _update(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] += v
        else:
            original[k] = v


# --------------------------------------------------------------------------------------------
# argparse's reading of the words

_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass
class _Parsed:
    values: dict[tuple[str, bool], tuple[Any, str, str]] = field(default_factory=dict)
    """(dest, from the file) → (raw value, the option string, the option as the user wrote it): the
    last setting of each origin."""
    positionals: list[_Word] = field(default_factory=list)


def _where(from_file: bool, path: Path | str | None) -> str:
    return f"config file {path}" if from_file else "the serve line"


def _shown(option: str, from_file: bool) -> str:
    """How the user wrote it: a file's key without the dashes vLLM adds."""
    return clipped(option[2:] if from_file and option.startswith("--") else option)


def _resolve(word: _Word, options: Mapping[str, Any] | None, path: Path | str | None) -> tuple[str, str | None] | None:
    """argparse's _parse_optional: (option string, explicit value) for an option-like word, None
    for a value. An unknown option is refused here, naming it (as written) and the nearest known one."""
    text, from_file = word.text, word.from_file
    if not text or text[0] != "-" or len(text) == 1:
        return None
    if options is None:
        if _NEGATIVE.match(text) or " " in text:
            return None
        name, eq, value = text.partition("=")
        return (name, value if eq else None)
    if text in options:
        return text, None
    if "=" in text:
        name, value = text.split("=", 1)
        if name in options:
            return name, value
    matches = _abbreviations(text, options)
    if len(matches) > 1:
        shown = ", ".join(_shown(m[0], from_file) for m in matches[:6]) + (", …" if len(matches) > 6 else "")
        given = _shown(word.given.split("=", 1)[0], from_file)
        raise UsageError(f"{_where(from_file, path)}: {given} is ambiguous in vLLM: {shown}; write the whole name")
    if matches:
        return matches[0]
    if _NEGATIVE.match(text) or " " in text:
        return None
    raise UsageError(_unknown(text.split("=", 1)[0], word.given.split("=", 1)[0], options, from_file, path))


def _abbreviations(text: str, options: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """argparse's _get_option_tuples (Python 3.11), with allow_abbrev on as vLLM leaves it; the
    option strings that start with a prefix are found by bisection, not by a scan of all of them."""
    if text.startswith("--"):
        prefix, eq, value = text.partition("=")
        return [(o, value if eq else None) for o in _starting_with(prefix, options)]
    short, attached = text[:2], text[2:]
    out: list[tuple[str, str | None]] = [(short, attached)] if short in options else []
    return out + [(o, None) for o in _starting_with(text, options) if o != short]


_SORTED: dict[int, tuple[Any, list[str]]] = {}


def _starting_with(prefix: str, options: Mapping[str, Any]) -> list[str]:
    import bisect
    cached = _SORTED.get(id(options))
    if cached is None or cached[0] is not options:
        cached = (options, sorted(options))
        _SORTED[id(options)] = cached
    names = cached[1]
    out = []
    for name in names[bisect.bisect_left(names, prefix):]:
        if not name.startswith(prefix):
            break
        out.append(name)
    return out


def _unknown(name: str, given: str, options: Mapping[str, Any], from_file: bool, path: Path | str | None) -> str:
    import difflib

    from kvaudit.vllm_source import vllm_version_text
    shown = _shown(given, from_file)
    candidates = [o for o in options if o.startswith("--") and not o.startswith("--no-")]
    near = difflib.get_close_matches(name if name.startswith("--") else "--" + name.lstrip("-"), candidates, n=1,
                                     cutoff=0.75)
    hint = f": did you mean {_shown(near[0], from_file)}?" if near else ""
    return f"{_where(from_file, path)}: {shown} is not an option of vllm serve ({vllm_version_text()}){hint}"


def _parse(words: list[_Word], grammar: Any, path: Path | str | None) -> _Parsed:
    """argparse over the words: each word is classified once (an option, or a value), then each
    option takes the values its arity allows; linear in the number of words."""
    options = grammar.options if grammar is not None else None
    parsed = _Parsed()
    end = next((i for i, w in enumerate(words) if w.text == "--"), len(words))
    found = [_resolve(w, options, path) for w in words[:end]]
    values_after = [0] * (end + 1)  # how many value words follow word i before the next option
    for i in range(end - 1, -1, -1):
        values_after[i] = 0 if i + 1 >= end or found[i + 1] is not None else 1 + values_after[i + 1]
    i = 0
    while i < end:
        w = words[i]
        if found[i] is None:
            parsed.positionals.append(w)
            i += 1
            continue
        name, explicit = found[i]  # type: ignore[misc]
        following = [x.text for x in words[i + 1:i + 1 + values_after[i]]]
        option = options[name] if options is not None else None
        where = _where(w.from_file, path)
        shown = _shown(w.given.split("=", 1)[0] if w.given.startswith("-") else name, w.from_file)
        if option is None:  # without vLLM's grammar: every value up to the next option
            taken = [explicit] if explicit is not None else following
            if not taken:
                value: Any = not name.startswith("--no-")
                dest = name.lstrip("-").removeprefix("no-").replace("-", "_")
            else:
                value = taken[0] if len(taken) == 1 else taken
                dest = name.lstrip("-").replace("-", "_")
            parsed.values[dest, w.from_file] = (value, name, shown)
            i += 1 + (0 if explicit is not None else len(taken))
            continue
        nargs = option.nargs
        if nargs == 0:
            if explicit is not None:
                raise UsageError(f"{where}: {shown} takes no value: got {clipped(explicit)!r} (vLLM refuses it)")
            parsed.values[option.dest, w.from_file] = (option.const, name, shown)
            i += 1
            continue
        if explicit is not None:
            taken = [explicit]
        elif nargs == "?":
            taken = following[:1]
        elif nargs == "+":
            taken = following
        else:
            taken = following[:int(nargs)]
            if len(taken) < int(nargs):
                raise UsageError(f"{where}: {shown} needs {'a value' if nargs == 1 else f'{nargs} values'}")
        if nargs == "+" and not taken:
            raise UsageError(f"{where}: {shown} needs at least one value")
        if nargs == "?" and not taken:
            value = option.const
        elif nargs == "+" or (isinstance(nargs, int) and nargs > 1):
            value = list(taken)
        else:
            value = taken[0]
        parsed.values[option.dest, w.from_file] = (value, name, shown)
        i += 1 + (0 if explicit is not None else len(taken))
    parsed.positionals += words[end + 1:]
    return parsed


# --------------------------------------------------------------------------------------------
# Values, as vLLM's types convert them


def _convert(dest: str, raw: Any, option: Any, grammar: Any, where: str, shown: str) -> Any:
    """A raw value (a word, a list of words, or a flag's True/False) as vLLM's type for it."""
    if isinstance(raw, bool) or raw is None:
        return raw
    if isinstance(raw, list):
        return [_convert_one(dest, x, option, grammar, where, shown, element=True) for x in raw]
    return _convert_one(dest, raw, option, grammar, where, shown)


def _convert_one(dest: str, text: str, option: Any, grammar: Any, where: str, shown: str,
                 element: bool = False) -> Any:
    kind = option.kind if option is not None else "auto"
    if option is not None and option.optional and not element and text in ("", "None"):
        return None
    try:
        if grammar is not None and dest in grammar.human_readable_or_auto:
            return human_readable_int_or_auto(text)
        if grammar is not None and dest in grammar.human_readable:
            return human_readable_int(text)
        if grammar is None and dest == "max_model_len":
            return human_readable_int_or_auto(text)
        if grammar is None and dest in ("max_num_batched_tokens", "kv_cache_memory_bytes"):
            return human_readable_int(text)
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind in ("str", "flag"):
            return text
        if kind == "json":
            return json.loads(text)
        if kind == "config":
            return json.loads(_expand_numbers(text))
        if kind == "dict_or_str":
            return json.loads(text) if re.match(r"(?s)^\s*{.*}\s*$", text) else text
    except (ValueError, OverflowError):
        raise UsageError(_bad_value(dest, text, kind, grammar, where, shown)) from None
    except RecursionError:
        raise UsageError(f"{where}: {shown}: a JSON value nested too deep") from None
    try:
        return json.loads(text)
    except ValueError:
        return text
    except RecursionError:
        raise UsageError(f"{where}: {shown}: a JSON value nested too deep") from None


def _bad_value(dest: str, text: str, kind: str, grammar: Any, where: str, shown: str) -> str:
    readable = grammar is not None and (dest in grammar.human_readable or dest in grammar.human_readable_or_auto)
    readable = readable or (grammar is None and dest in ("max_model_len", "max_num_batched_tokens",
                                                         "kv_cache_memory_bytes"))
    if readable:
        hint = size_hint(text, dest == "max_model_len")
        return f"{where}: {shown} {clipped(text)!r} is not a number vLLM reads: {hint}"
    what = {"int": "an integer", "float": "a number", "json": "JSON", "config": "JSON",
            "dict_or_str": "JSON"}.get(kind, "a value")
    return f"{where}: {shown} {clipped(text)!r} is not {what}, as vLLM reads it"


def _expand_numbers(text: str) -> str:
    """vLLM's _expand_json_human_readable_numbers: `80m` outside JSON strings is its number."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", lambda m: str(human_readable_int(m.group())), parts[i])
    return "".join(parts)


def _deployment(parsed: _Parsed, grammar: Any, path: Path | str | None, text: str | None,
                notes: list[str], takes_name: Callable[[str, str], bool] | None = None) -> Deployment:
    options = grammar.options if grammar is not None else None
    model: str | None = None
    model_from_file = False
    if parsed.positionals:
        if len(parsed.positionals) > 1:
            extra = " ".join(w.text for w in parsed.positionals[1:])
            raise UsageError(f"{_where(parsed.positionals[1].from_file, path)}: vLLM would not read "
                             f"{clipped(extra)!r}: one model, then options")
        model = parsed.positionals[0].text
    file_values: dict[str, Any] = {}
    line_values: dict[str, Any] = {}
    api_server: list[str] = []
    api_server_values: dict[str, Any] = {}
    pinned: dict[str, Any] = {}
    # the file's settings first: a model on the serve line (`--model M`, moved to the front as the
    # positional) wins over the file's, as ServeSubcommand.cmd lets the positional win
    for (dest, from_file), (raw, name, shown) in sorted(parsed.values.items(), key=lambda item: not item[0][1]):
        option = options.get(name) if options is not None else None
        value = _convert(dest, raw, option, grammar, _where(from_file, path), shown)
        if dest == "model":
            if parsed.positionals:
                continue
            model, model_from_file = value, from_file
            continue
        if dest == "config":
            notes.append(f"{_where(from_file, path)}: vLLM does not read a --config named inside a config file")
            continue
        if dest in PINNED:
            pinned[dest] = value
            continue
        if (grammar is not None and dest not in grammar.engine) or (
                grammar is None and takes_name is not None and not takes_name(dest, _where(from_file, path))):
            api_server.append(shown)
            api_server_values[dest] = value
            continue
        (file_values if from_file else line_values)[dest] = value
    if model is not None and not isinstance(model, str):
        raise UsageError(f"{_where(model_from_file, path)}: the model must be a folder or a Hugging Face id")
    return Deployment(model=model, model_from_file=model_from_file, file_values=file_values,
                      line_values=line_values, api_server=tuple(api_server), api_server_values=api_server_values,
                      pinned=pinned,
                      yaml_path=Path(path) if path is not None else None, yaml_text=text, notes=tuple(notes))


# --------------------------------------------------------------------------------------------
# kvaudit plan --config

PLAN_FIXED = ("tensor_parallel_size", "decode_context_parallel_size", "block_size")
"""Knobs kvaudit plan cannot change (a different value needs a boot)."""


def plan_deployment(path: Path | str, measured: Any, edits: Any,
                    takes_name: Callable[[str, str], bool] | None = None) -> tuple[Deployment, Any]:
    """`kvaudit plan REPORT --config deploy.yaml`: the file's knobs that plan can change become
    edits where the command line gives none (the command line wins, as in vLLM); a knob it cannot
    change (tensor parallelism, DCP, block size, speculation) that differs from the measured boot
    is refused, exit 2, naming the boot that would measure it."""
    import dataclasses
    if not is_yaml_config(path):
        raise UsageError(f"--config {path}: kvaudit plan reads a vllm serve YAML config (a TOML preset is "
                         f"kvaudit run's)")
    deployment = read_deployment(config_file=path, takes_name=takes_name)
    values = deployment.file_values
    config = measured.config
    for key in PLAN_FIXED:
        if key in values and values[key] != getattr(config, key):
            raise UsageError(f"{path} sets {_dashed(key).replace('_', '-')} {values[key]}, the measured boot ran "
                             f"{getattr(config, key)}: kvaudit plan does not change it; boot it: "
                             f"kvaudit run --config {path}")
    spec = values.get("speculative_config")
    method = spec.get("method") if isinstance(spec, dict) else None
    tokens = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
    if "speculative_config" in values and (method, tokens) != (config.speculative_method,
                                                               config.num_speculative_tokens):
        raise UsageError(f"{path} sets speculative-config {spec}, the measured boot ran "
                         f"{config.speculative_method or 'none'}: kvaudit plan does not change speculation; boot it: "
                         f"kvaudit run --config {path}")
    changes = {}
    for f in dataclasses.fields(edits):
        if getattr(edits, f.name) is not None or f.name not in values:
            continue
        value = values[f.name]
        value = tuple(value) if isinstance(value, list) else value
        if value != getattr(config, f.name):
            changes[f.name] = value
    return deployment, dataclasses.replace(edits, **changes)
