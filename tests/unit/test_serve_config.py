"""vLLM's own ways in (issue 30 item 1): a `vllm serve` YAML config through `kvaudit run --config`,
a pasted serve line after `--`, Hugging Face ids, and sizes in vLLM's forms, read as vLLM 0.32's
FlexibleArgumentParser reads them (kvaudit/serve_config.py). The grammar (options, arity, types)
comes from the installed vLLM's source without importing it; tests/vllm/test_serve_config_vllm.py
holds it against vLLM's real parser."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from factories import write_text as write

from kvaudit.config import AuditConfig, build_run, embedded_model_path, engine_name_check, load_preset
from kvaudit.errors import ExitCode, UsageError
from kvaudit.serve_config import (
    MAX_CONFIG_BYTES,
    human_readable_int,
    human_readable_int_or_auto,
    is_yaml_config,
    read_deployment,
    read_yaml,
    serve_line,
)

vllm_source = pytest.mark.skipif(
    __import__("importlib").util.find_spec("vllm") is None, reason="vLLM's source is where the grammar comes from")


def build(**kw):
    args = dict(model=None, dummy_weights=False, preset=None, passthrough=[], mtp=None, cudagraph_sizes=None)
    args.update(kw)
    return build_run(**args)


def usage_error(fn, *args, **kwargs) -> str:
    with pytest.raises(UsageError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code is ExitCode.USAGE
    return message


# ------------------------------------------------------------------------------------------
# sizes: vLLM 0.32's human_readable_int, case by case (vllm/utils/argparse_utils.py)


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), (" 4096 ", 4096), ("4_096", 4096),             # Python's int() of the stripped text
    ("1k", 1000), ("1K", 1024), ("25.6k", 25600),                   # lower case decimal, upper case binary
    ("8g", 8 * 10**9), ("8G", 8 << 30), ("2M", 2 << 20), ("1t", 10**12), ("1T", 1 << 40),
    ("-1", -1),
])
def test_sizes_read_as_vllm_reads_them(text, expected):
    assert human_readable_int(text) == expected


@pytest.mark.parametrize("text", ["8GiB", "8 G", "1.5G", "8Gb", "8x", "", "eight"])
def test_sizes_vllm_does_not_read_are_refused(text):
    with pytest.raises(ValueError):
        human_readable_int(text)


def test_max_model_len_also_reads_auto():
    assert [human_readable_int_or_auto(t) for t in ("auto", "AUTO", "-1", "32K")] == [-1, -1, -1, 32768]


# ------------------------------------------------------------------------------------------
# the YAML file


@vllm_source
def test_a_yaml_config_is_read_with_vllms_names_and_types(tmp_path):
    path = write(tmp_path, """
# the deployment
model: deepseek-ai/DeepSeek-V3
tensor-parallel-size: 8
gpu_memory_utilization: 0.95
max-model-len: 32K
max_num_batched_tokens: 8k
enforce-eager: true
cudagraph-capture-sizes: [1, 2, 4, 8]
speculative-config:
  method: mtp
  num_speculative_tokens: 1
hf-overrides: {num_hidden_layers: 2}
port: 8000
""")
    d = read_deployment(config_file=path)
    assert d.model == "deepseek-ai/DeepSeek-V3" and d.model_from_file
    assert d.file_values == {
        "tensor_parallel_size": 8, "gpu_memory_utilization": 0.95, "max_model_len": 32768,
        "max_num_batched_tokens": 8000, "enforce_eager": True, "cudagraph_capture_sizes": [1, 2, 4, 8],
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
        "hf_overrides": {"num_hidden_layers": 2}}
    assert d.api_server == ("port",) and d.line_values == {}
    config, _ = build(preset=path)
    assert config.model == "deepseek-ai/DeepSeek-V3"   # a Hugging Face id goes to vLLM as it is
    assert (config.tensor_parallel_size, config.max_model_len, config.max_num_batched_tokens) == (8, 32768, 8000)
    assert (config.speculative_method, config.num_speculative_tokens) == ("mtp", 1)
    assert config.cudagraph_capture_sizes == (1, 2, 4, 8)
    assert config.extra_args == {"hf_overrides": {"num_hidden_layers": 2}}  # port is the API server's


@vllm_source
def test_vllm_serve_drops_every_false_and_kvaudit_says_which_ones_matter(tmp_path):
    # load_config_file turns `false` into --no-KEY only where the parser reading the file has that
    # option; under `vllm serve` it is `vllm`'s top-level parser, which has none of them
    path = write(tmp_path, "enable-prefix-caching: false\nenable_chunked_prefill: false\nheadless: false\n")
    d = read_deployment(config_file=path)
    assert d.file_values == {} and d.api_server == ()
    assert [n.split(" (")[0] for n in d.notes] == [
        f"config file {path}: vllm serve --config drops `enable-prefix-caching: false`",
        f"config file {path}: vllm serve --config drops `enable_chunked_prefill: false`"]
    assert d.notes[0].endswith("so vLLM keeps its default, and so does the audit; to turn it off pass "
                               "--no-enable-prefix-caching on the command line")
    # the api_server entry point reads the file with the serve options: --no-KEY, as written
    d = read_deployment(config_file=path, line=["--model", "m"])
    assert d.file_values == {"enable_prefix_caching": False}
    assert d.notes == (f"config file {path}: vLLM's --config reader drops `enable_chunked_prefill: false` (it looks "
                       f"for --no-enable_chunked_prefill, which does not exist), and so does the audit: write "
                       f"`enable-chunked-prefill: false`",)


@vllm_source
def test_the_command_line_wins_over_the_file_as_in_vllm(tmp_path):
    path = write(tmp_path, "tensor-parallel-size: 2\nmax-model-len: 2048\nmax-num-seqs: 4\nenforce-eager: true\n")
    config, _ = build(preset=path)
    assert (config.tensor_parallel_size, config.max_model_len, config.max_num_seqs) == (2, 2048, 4)
    config, _ = build(preset=path, tensor_parallel_size=1, max_model_len=1024)   # kvaudit's flags over the file
    assert (config.tensor_parallel_size, config.max_model_len, config.max_num_seqs) == (1, 1024, 4)
    line = ["vllm", "serve", "--max-model-len", "4k", "--no-enforce-eager"]   # the serve line over both
    config, deployment = build(preset=path, passthrough=line, max_model_len=1024)
    assert (config.max_model_len, config.enforce_eager, config.tensor_parallel_size) == (4000, False, 2)
    assert deployment.file_values["max_model_len"] == 2048 and deployment.line_values["max_model_len"] == 4000


@vllm_source
def test_a_config_named_in_the_serve_line_is_read_in_vllms_place(tmp_path):
    path = write(tmp_path, "max-model-len: 2048\nmodel: from/file\n")
    d = read_deployment(line=serve_line(["vllm", "serve", "org/model", "--config", str(path), "--max-model-len",
                                         "1024"]))
    assert d.model == "org/model" and not d.model_from_file   # the positional wins (ServeSubcommand.cmd)
    assert d.file_values == {"max_model_len": 2048} and d.line_values == {"max_model_len": 1024}
    assert build(passthrough=["vllm", "serve", "org/model", "--config", str(path), "--max-model-len", "1024"]
                 )[0].max_model_len == 1024
    d = read_deployment(line=serve_line(["vllm", "serve", "--config", str(path)]))
    assert (d.model, d.model_from_file, d.file_values) == ("from/file", True, {"max_model_len": 2048})


@vllm_source
def test_dotted_keys_merge_into_one_json_value_after_everything_else(tmp_path):
    # vLLM appends the merged dotted keys last: they replace a whole --speculative-config given earlier
    d = read_deployment(line=serve_line([
        "vllm", "serve", "m", "--speculative-config", '{"method": "eagle", "num_speculative_tokens": 3}',
        "--speculative-config.method", "mtp", "--speculative_config.num_speculative_tokens=2",
        "--compilation-config.cudagraph_capture_sizes+", "1,2"]))
    assert d.line_values["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert d.line_values["compilation_config"] == {"cudagraph_capture_sizes": ["1", "2"]}


@pytest.mark.parametrize("text, message", [
    ("a: &x [1]\nb: *x\n", "line 2: YAML aliases (*name) are not read: write the value out"),
    ("[1, 2]\n", "vLLM's --config reads a mapping of option: value at the top, not a list"),
    ("", "is empty: vLLM's --config reads a mapping of option: value"),
    ("1: 2\n", "the key 1 is not an option name (vLLM reads each key as --KEY)"),
    ("a: [\n", "is not valid YAML: line 2:"),
    ("a: " + "[" * 40 + "]" * 40 + "\n", "nested deeper than 32 levels"),
    ("a: !!python/object:os.system {}\n", "is not valid YAML"),   # the safe loader builds no Python objects
])
def test_a_yaml_file_kvaudit_cannot_read_is_one_line_and_exit_2(tmp_path, text, message):
    assert message in usage_error(read_yaml, write(tmp_path, text))


@pytest.mark.parametrize("text, message", [
    ("hf-overrides" + ".a" * 40 + ": 1\n", "nests deeper than 32 levels"),
    ("hf-overrides: '" + '{"a": ' * 5000 + "1" + "}" * 5000 + "'\n", "hf-overrides: a JSON value nested too deep"),
    ("hf-overrides.a: '" + "[" * 5000 + "]" * 5000 + "'\n", "a JSON value nested too deep"),
])
def test_nesting_in_keys_and_json_values_is_bounded(tmp_path, text, message):
    assert message in usage_error(build, preset=write(tmp_path, text))


def test_a_yaml_file_is_size_bounded_and_must_be_utf8(tmp_path):
    big = write(tmp_path, "a: " + "x" * MAX_CONFIG_BYTES + "\n")
    assert "more than the 1 MiB" in usage_error(read_yaml, big)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("model: caf\xe9\n".encode("latin-1"))
    assert "is not UTF-8 text (byte 10): save it as UTF-8" in usage_error(read_yaml, latin)
    assert usage_error(read_yaml, tmp_path) == f"config file {tmp_path}: is a directory; name a YAML file"
    assert usage_error(read_yaml, tmp_path / "nope.yaml") == f"config file {tmp_path / 'nope.yaml'} does not exist"


def test_a_billion_laughs_file_is_refused_in_linear_time(tmp_path):
    import time
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 30)]
    start = time.perf_counter()
    message = usage_error(read_yaml, write(tmp_path, "\n".join(lines) + "\n"))
    assert "YAML aliases" in message and time.perf_counter() - start < 1


@vllm_source
def test_a_file_at_the_size_cap_is_read_in_time_linear_in_it(tmp_path):
    # 1 MiB: about 130,000 list items, or 150,000 words that look like options (`-1`); each word is
    # classified once, and abbreviations are found by bisection (1.4 s each on the 2-core machine)
    import time
    items, size = [], 0
    while size < MAX_CONFIG_BYTES - 100:
        items.append(f"  - {len(items) % 1000 + 1}\n")
        size += len(items[-1])
    start = time.perf_counter()
    d = read_deployment(config_file=write(tmp_path, "cudagraph-capture-sizes:\n" + "".join(items)))
    assert len(d.file_values["cudagraph_capture_sizes"]) == len(items)
    negatives = "[" + ", ".join(["-1"] * 150_000) + "]\n"
    d = read_deployment(config_file=write(tmp_path, "cudagraph-capture-sizes: " + negatives))
    assert d.file_values["cudagraph_capture_sizes"] == [-1] * 150_000   # validated() refuses them later
    message = usage_error(read_deployment, config_file=write(tmp_path, "seed: " + negatives))  # a list for one value
    assert "vLLM would not read '-1 -1 -1" in message and message.endswith("…': one model, then options")
    assert len(message) < 300   # the message quotes the file, bounded
    assert time.perf_counter() - start < 20


@vllm_source
def test_a_key_vllm_does_not_know_is_refused_naming_it(tmp_path):
    path = write(tmp_path, "max-modle-len: 4096\n")
    assert usage_error(build, preset=path) == (f"config file {path}: max-modle-len is not an option of vllm serve "
                                               f"({_vllm()}): did you mean max-model-len?")
    path = write(tmp_path, "no_such_thing: 1\n")
    assert usage_error(build, preset=path) == (f"config file {path}: no_such_thing is not an option of vllm serve "
                                               f"({_vllm()})")


@vllm_source
def test_a_size_vllm_does_not_read_names_its_forms(tmp_path):
    path = write(tmp_path, "max-model-len: 8GiB\n")
    assert usage_error(build, preset=path) == (f"config file {path}: max-model-len '8GiB' is not a number vLLM "
                                               f"reads: vLLM writes 8G for 8 GiB")
    path = write(tmp_path, "max-num-batched-tokens: lots\n")
    assert usage_error(build, preset=path).endswith(
        "write one of vLLM's forms: 4096, 8k (8,000), 8K (8,192), 25.6k, 8g (8×10^9), 8G (8 GiB)")
    path = write(tmp_path, "max-model-len: auto\n")
    assert usage_error(build, preset=path).startswith("max_model_len auto (-1) lets vLLM fit the length to memory")


def _vllm() -> str:
    from kvaudit.vllm_source import vllm_version_text
    return vllm_version_text()


# ------------------------------------------------------------------------------------------
# TOML presets still work


def test_toml_presets_are_told_from_yaml_by_suffix_or_content(tmp_path):
    toml = write(tmp_path, "tensor_parallel_size = 2\n", "preset.toml")
    assert not is_yaml_config(toml) and load_preset(toml).tensor_parallel_size == 2
    assert not is_yaml_config(write(tmp_path, "tensor_parallel_size = 2\n", "preset"))
    assert is_yaml_config(write(tmp_path, "tensor-parallel-size: 2\n", "config"))
    assert is_yaml_config(write(tmp_path, "x", "config.yml"))


def test_the_shipped_presets_still_build(tmp_path):
    root = Path(__file__).parents[2] / "configs"
    config, deployment = build(preset=root / "embedded-cpu.toml")
    assert deployment is None and config.max_model_len == 4096 and config.enforce_eager is True


def test_a_toml_preset_takes_vllms_size_forms(tmp_path):
    config = load_preset(write(tmp_path, 'max_model_len = "32K"\nmax_num_batched_tokens = "8k"\n', "p.toml"))
    assert (config.max_model_len, config.max_num_batched_tokens) == (32768, 8000)


# ------------------------------------------------------------------------------------------
# a pasted serve line


@vllm_source
def test_a_pasted_serve_line_is_read_as_vllm_reads_it():
    line = ("vllm serve deepseek-ai/DeepSeek-V3 -tp 8 --max-model 32K --gpu-memory-utilization .95 --enforce-eager "
            "--cudagraph-capture-sizes 1 2 4 --kv-cache-dtype fp8 --enable-expert-parallel --port 8000 "
            "--host 0.0.0.0 --max-num-seqs=16").split()
    config, deployment = build(passthrough=line)
    assert config.model == "deepseek-ai/DeepSeek-V3"
    assert (config.tensor_parallel_size, config.max_model_len, config.gpu_memory_utilization) == (8, 32768, 0.95)
    assert (config.enforce_eager, config.cudagraph_capture_sizes, config.kv_cache_dtype, config.max_num_seqs) == (
        True, (1, 2, 4), "fp8", 16)
    assert config.extra_args == {"enable_expert_parallel": True}
    assert deployment.api_server == ("--port", "--host")


@vllm_source
@pytest.mark.parametrize("line, model", [
    (["vllm", "serve", "-tp", "2", "org/m"], "org/m"),                    # argparse takes the model after options
    (["vllm", "serve", "--tensor-parallel-size", "2", "--model", "org/m"], "org/m"),   # --model moves to the front
    (["/opt/venv/bin/vllm", "serve", "org/m", "-tp=2"], "org/m"),
    ([sys.executable.rsplit("/", 1)[-1], "-m", "vllm.entrypoints.openai.api_server", "--model", "org/m", "-tp", "2"],
     "org/m"),
])
def test_every_way_of_writing_the_serve_line(line, model):
    config, _ = build(passthrough=line)
    assert (config.model, config.tensor_parallel_size) == (model, 2)


@vllm_source
@pytest.mark.parametrize("line, message", [
    ("vllm serve m --max-modle-len 4", "the serve line: --max-modle-len is not an option of vllm serve ({v}): did you "
                                       "mean --max-model-len?"),
    ("vllm serve m --max 4", "the serve line: --max is ambiguous in vLLM: "),
    ("vllm serve m --enforce-eager=yes", "the serve line: --enforce-eager takes no value: got 'yes' (vLLM refuses it)"),
    ("vllm serve m --cudagraph-capture-sizes", "the serve line: --cudagraph-capture-sizes needs at least one value"),
    ("vllm serve m -tp", "the serve line: -tp needs a value"),
    ("vllm serve m -tp two", "the serve line: -tp 'two' is not an integer, as vLLM reads it"),
    ("vllm serve m n", "the serve line: vLLM would not read 'n': one model, then options"),
    ("vllm bench m", "kvaudit run reads a `vllm serve` line after --, not `vllm bench`"),
    ("CUDA_VISIBLE_DEVICES=0 vllm serve m", "the serve line starts with the environment assignment "
                                            "CUDA_VISIBLE_DEVICES=…: put it before kvaudit"),
    ("vllm serve m --config=c.yaml", "vLLM reads a config file only as `--config FILE` (two words)"),
    ("vllm serve m --config c.json", "--config c.json: vLLM reads a config file only with a .yaml or .yml suffix"),
    ("vllm serve m --help", "the serve line asks for --help"),
])
def test_a_serve_line_vllm_would_refuse_is_refused_here(line, message):
    assert message.format(v=_vllm()) in usage_error(build, passthrough=line.split())


@vllm_source
def test_the_fixed_kv_size_of_a_deployment_is_set_aside_not_refused(tmp_path):
    # A deployment's own kv-cache-memory-bytes (a file --write-config wrote) can be audited again:
    # vLLM would size nothing, so kvaudit leaves it out and compares it after the boot
    path = write(tmp_path, "kv-cache-memory-bytes: 8G\nnum-gpu-blocks-override: 100\n")
    config, deployment = build(preset=path)
    assert deployment.pinned == {"kv_cache_memory_bytes": 8 << 30, "num_gpu_blocks_override": 100}
    assert "kv_cache_memory_bytes" not in config.extra_args
    from kvaudit.serve_config import pinned_warnings
    assert pinned_warnings(deployment, 4 << 30) == [
        "the deployment's kv-cache-memory-bytes 8589934592 is 4.00 GiB above kvaudit's safe 4294967296: lower it "
        "(--write-config writes the safe value)"]
    assert pinned_warnings(deployment, 8 << 30) == []
    # as kvaudit's own pass-through flags (not a deployment) they are still refused
    assert usage_error(build, passthrough=["--kv-cache-memory-bytes", "1000"]).startswith(
        "refusing --kv-cache-memory-bytes")


def test_plain_pass_through_flags_keep_their_meaning(tmp_path):
    config, deployment = build(passthrough=["--enable-expert-parallel", "--max-model-len", "2k"])
    assert deployment is None and config.extra_args == {"enable_expert_parallel": True}
    assert config.max_model_len == 2000
    # with a YAML file too: the flags after -- still come last
    path = write(tmp_path, "max-model-len: 1024\nmax-num-seqs: 4\n")
    config, deployment = build(preset=path, passthrough=["--max-model-len", "2048"])
    assert deployment is not None and (config.max_model_len, config.max_num_seqs) == (2048, 4)


def test_without_vllms_grammar_the_file_is_still_read_and_typos_still_caught(tmp_path):
    path = write(tmp_path, "max-model-len: 2K\nenforce-eager: true\nport: 8000\nmax_modle_len: 3\n")
    engine = frozenset({"max_model_len", "enforce_eager", "model", "gpu_memory_utilization"})
    with pytest.raises(UsageError, match="max_modle_len is not a kvaudit key nor an argument vLLM's LLM"):
        read_deployment(config_file=path, use_grammar=False, takes_name=engine_name_check(engine))
    path = write(tmp_path, "max-model-len: 2K\nenforce-eager: true\nport: 8000\n")
    d = read_deployment(config_file=path, use_grammar=False, takes_name=engine_name_check(engine))
    assert d.file_values == {"max_model_len": 2048, "enforce_eager": True} and d.api_server == ("port",)


# ------------------------------------------------------------------------------------------
# the CLI: refused before any boot


@pytest.fixture
def no_boot(monkeypatch):
    import kvaudit.engines.vllm as engine

    def boom(*args, **kwargs):  # pragma: no cover - must not be reached
        raise AssertionError("vLLM would have booted")

    monkeypatch.setattr(engine, "run_audit", boom)
    monkeypatch.setattr(engine, "preflight", lambda config: None)


@vllm_source
def test_an_unknown_key_is_exit_2_before_any_boot(cli, no_boot, tmp_path):
    path = write(tmp_path, "tensor-parallel-size: 1\nmax-modle-len: 4096\n")
    result = cli("run", "--config", str(path))
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines == [f"kvaudit: error: config file {path}: max-modle-len is not an option of vllm "
                                   f"serve ({_vllm()}): did you mean max-model-len?"]
    result = cli("run", "--", "vllm", "serve", "m", "--max-modle-len", "4096")
    assert result.code == 2 and "the serve line: --max-modle-len is not an option" in result.stderr


def test_write_config_paths_are_checked_before_any_boot(cli, no_boot, tmp_path):
    result = cli("run", "--write-config", str(tmp_path / "safe.toml"))
    assert result.code == 2 and result.stderr_lines == [
        f"kvaudit: error: --write-config {tmp_path / 'safe.toml'}: vllm serve --config reads only .yaml or .yml "
        f"files; name one so"]
    result = cli("run", "--write-config", str(tmp_path / "nodir" / "safe.yaml"))
    assert result.code == 2 and "the folder" in result.stderr and "does not exist" in result.stderr
    config = write(tmp_path, "max-model-len: 2048\n")
    result = cli("run", "--config", str(config), "--write-config", str(config))
    assert result.code == 2 and "is the input" in result.stderr


def test_a_hugging_face_id_goes_to_vllm_as_it_is():
    config, _ = build(model="deepseek-ai/DeepSeek-V3", dummy_weights=True)
    assert config.model == "deepseek-ai/DeepSeek-V3" and config.model != embedded_model_path()
    assert isinstance(config, AuditConfig)


def test_the_readme_s_example_serve_config_names_the_tiny_model_with_dummy_weights():
    # the README's "In and out" runs `kvaudit run --config configs/examples/serve-tiny.yaml`: a newcomer had
    # to write a config.yaml by trial and error before
    path = Path(__file__).resolve().parents[2] / "configs" / "examples" / "serve-tiny.yaml"
    d = read_deployment(config_file=path)
    assert d.model == "kvaudit/data/tiny-deepseek" and d.model_from_file
    assert d.file_values == {"load_format": "dummy", "max_model_len": 4096, "max_num_seqs": 8}


@pytest.mark.parametrize("tokens", [-1, 0, True])
def test_a_speculative_config_with_no_positive_token_count_is_refused_before_the_boot(tmp_path, tokens):
    # vLLM's SpeculativeConfig takes num_speculative_tokens > 0 and said so after its import; --mtp -1 was refused,
    # the same count from a config file went to the boot
    from kvaudit.errors import UsageError
    path = tmp_path / "c.yaml"
    path.write_text(f"model: m\nspeculative-config: {{method: mtp, num_speculative_tokens: {json.dumps(tokens)}}}\n")
    with pytest.raises(UsageError, match=r"num_speculative_tokens must be a positive integer"):
        build(preset=path)
