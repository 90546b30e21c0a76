"""Config: TOML presets, build_run_config's precedence (embedded defaults < preset < flags <
pass-through), pass-through parsing, refused arguments and validation, each a one-line UsageError."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import write_text

from kvaudit.config import (
    BOOL_KEYS,
    CONFIG_KEYS,
    EMBEDDED_DEFAULTS,
    FLOAT_KEYS,
    INT_KEYS,
    INT_LIST_KEYS,
    MODELLED_KEYS,
    STABLE_KEYS,
    STR_KEYS,
    AuditConfig,
    build_run_config,
    config_from_json,
    embedded_model_path,
    load_preset,
    parse_passthrough,
)
from kvaudit.errors import ExitCode, UsageError


def preset(tmp_path: Path, text: str, name: str = "preset.toml") -> Path:
    return write_text(tmp_path, text, name)


def build(**kw):
    args = dict(model=None, dummy_weights=False, preset=None, passthrough=[], mtp=None, cudagraph_sizes=None)
    args.update(kw)
    return build_run_config(**args)


def one_line_usage_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and excinfo.value.exit_code is ExitCode.USAGE
    return message


# ------------------------------------------------------------------------------------------
# presets


def test_a_preset_reads_vllm_field_names_and_sends_the_rest_to_extra_args(tmp_path):
    path = preset(tmp_path, """
model = "/models/DeepSeek-V3"
tensor_parallel_size = 8
gpu_memory_utilization = 0.97
max_model_len = 163840
cudagraph_capture_sizes = [1, 2, 4, 8]
enforce_eager = false
enable_expert_parallel = true

[extra_args]
swap_space = 4
""")
    cfg = load_preset(path)
    assert cfg.model == "/models/DeepSeek-V3" and cfg.tensor_parallel_size == 8
    assert cfg.gpu_memory_utilization == 0.97 and cfg.max_model_len == 163840
    assert cfg.cudagraph_capture_sizes == (1, 2, 4, 8) and cfg.enforce_eager is False
    assert cfg.extra_args == {"enable_expert_parallel": True, "swap_space": 4}
    assert cfg.decode_context_parallel_size == 1   # not in the preset: AuditConfig's default


def test_a_missing_preset_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"config file .*nope.toml does not exist") as info:
        load_preset(tmp_path / "nope.toml")
    one_line_usage_error(info)


def test_invalid_toml_is_a_one_line_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"is not valid TOML") as info:
        load_preset(preset(tmp_path, "tensor_parallel_size = = 2\n"))
    one_line_usage_error(info)


def test_capture_sizes_must_be_integers(tmp_path):
    with pytest.raises(UsageError, match=r"cudagraph_capture_sizes must be a list of integers"):
        load_preset(preset(tmp_path, 'cudagraph_capture_sizes = ["1", 2]\n'))


# ------------------------------------------------------------------------------------------
# precedence


def test_embedded_defaults_fill_in_when_no_model_is_given():
    cfg = build()
    assert cfg.model == embedded_model_path() and Path(cfg.model, "config.json").exists()
    for key, value in EMBEDDED_DEFAULTS.items():
        assert getattr(cfg, key) == value
    assert cfg.load_format == "dummy" and cfg.max_model_len == 4096


def test_a_preset_beats_the_embedded_defaults(tmp_path):
    cfg = build(preset=preset(tmp_path, "max_model_len = 8192\nmax_num_seqs = 2\n"))
    assert cfg.max_model_len == 8192 and cfg.max_num_seqs == 2
    assert cfg.max_num_batched_tokens == EMBEDDED_DEFAULTS["max_num_batched_tokens"]   # not in the preset


def test_flags_beat_the_preset(tmp_path):
    path = preset(tmp_path, "max_model_len = 8192\ngpu_memory_utilization = 0.9\ntensor_parallel_size = 4\n")
    cfg = build(preset=path, max_model_len=2048, gpu_memory_utilization=0.5)
    assert (cfg.max_model_len, cfg.gpu_memory_utilization, cfg.tensor_parallel_size) == (2048, 0.5, 4)


def test_flags_not_given_leave_the_preset_alone(tmp_path):
    cfg = build(preset=preset(tmp_path, "kv_cache_dtype = 'fp8'\n"), kv_cache_dtype=None, enforce_eager=None)
    assert cfg.kv_cache_dtype == "fp8" and cfg.enforce_eager is None


def test_pass_through_arguments_beat_the_preset_extra_args(tmp_path):
    path = preset(tmp_path, "swap_space = 4\nenable_prefix_caching = true\n")
    cfg = build(preset=path, passthrough=["--swap-space", "8", "--no-enable-prefix-caching", "--seed=7"])
    assert cfg.extra_args == {"swap_space": 8, "enable_prefix_caching": False, "seed": 7}


def test_a_pass_through_knob_kvaudit_models_beats_the_flag():
    cfg = build(max_model_len=4096, passthrough=["--max-model-len", "2048"])
    assert cfg.max_model_len == 2048
    assert "max_model_len" not in cfg.extra_args


def test_mtp_sets_and_clears_speculation(tmp_path):
    cfg = build(mtp=2)
    assert (cfg.speculative_method, cfg.num_speculative_tokens) == ("mtp", 2)
    path = preset(tmp_path, "speculative_method = 'mtp'\nnum_speculative_tokens = 3\n")
    cfg = build(preset=path, mtp=0)
    assert (cfg.speculative_method, cfg.num_speculative_tokens) == (None, None)


def test_cudagraph_sizes_flag_is_sorted_and_deduplicated():
    assert build(cudagraph_sizes="8,1, 2,4,2").cudagraph_capture_sizes == (1, 2, 4, 8)
    with pytest.raises(UsageError, match=r"--cudagraph-sizes takes integers"):
        build(cudagraph_sizes="1,two")


@pytest.mark.parametrize("text", ["1 2 3", "1_000", "１,２", "-4", "1e3"])
def test_cudagraph_sizes_are_plain_ascii_integers(text):
    # "1 2 3" once became the one size 123
    with pytest.raises(UsageError, match=r"--cudagraph-sizes takes integers separated by commas"):
        build(cudagraph_sizes=text)


def test_a_model_folder_needs_a_config_and_weights_or_dummy_weights(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(UsageError, match=r"has no config.json") as info:
        build(model=str(folder))
    one_line_usage_error(info)
    (folder / "config.json").write_text("{}")
    with pytest.raises(UsageError, match=r"has no weights: pass --dummy-weights"):
        build(model=str(folder))
    cfg = build(model=str(folder), dummy_weights=True)
    assert cfg.load_format == "dummy" and cfg.max_model_len is None   # embedded defaults are for the embedded model
    (folder / "model.safetensors").write_bytes(b"")
    assert build(model=str(folder)).load_format is None


# ------------------------------------------------------------------------------------------
# pass-through parsing


@pytest.mark.parametrize("args, expected", [
    (["--enable-prefix-caching"], {"enable_prefix_caching": True}),
    (["--no-enable-prefix-caching"], {"enable_prefix_caching": False}),
    (["--swap-space", "4"], {"swap_space": 4}),
    (["--swap-space=4"], {"swap_space": 4}),
    (["--tokenizer-mode", "slow"], {"tokenizer_mode": "slow"}),
    (["--seed", "-1"], {"seed": -1}),
    (["--hf-overrides", '{"num_hidden_layers": 2}'], {"hf_overrides": {"num_hidden_layers": 2}}),
    (['--hf-overrides={"a": [1, 2]}'], {"hf_overrides": {"a": [1, 2]}}),
    (["--trust-remote-code", "--max-num-seqs", "16"], {"trust_remote_code": True, "max_num_seqs": 16}),
    (["--gpu-memory-utilization", "0.9"], {"gpu_memory_utilization": 0.9}),
    (["--disable-log-stats", "true"], {"disable_log_stats": True}),
    ([], {}),
])
def test_parse_passthrough(args, expected):
    assert parse_passthrough(args) == expected


@pytest.mark.parametrize("args", [["stray"], ["--"], ["--ok", "value", "stray"]])
def test_parse_passthrough_refuses_what_is_not_a_flag(args):
    with pytest.raises(UsageError, match=r"after --: pass vLLM engine flags as --name \[value\]") as info:
        parse_passthrough(args)
    one_line_usage_error(info)


# ------------------------------------------------------------------------------------------
# refused arguments


@pytest.mark.parametrize("passthrough, flag", [
    (["--kv-cache-memory-bytes", "1000000"], "--kv-cache-memory-bytes"),
    (["--kv-cache-memory-bytes=1000000"], "--kv-cache-memory-bytes"),
    (["--num-gpu-blocks-override", "512"], "--num-gpu-blocks-override"),
    (["--num_gpu_blocks_override=512"], "--num-gpu-blocks-override"),
])
def test_arguments_that_bypass_the_audit_are_refused(passthrough, flag):
    with pytest.raises(UsageError) as info:
        build(passthrough=passthrough)
    message = one_line_usage_error(info)
    assert message.startswith(f"refusing {flag}: it fixes the KV size and bypasses the audit")


@pytest.mark.parametrize("passthrough", [["--enable-extensible-kv-cache"], ["--enable-extensible-kv-cache", "true"],
                                         ["--enable_extensible_kv_cache=1"]])
def test_vllm_sizing_the_kv_cache_itself_after_warmup_is_refused(passthrough):
    """vLLM 0.34's extensible KV cache sizes the cache in vLLM's order, after warmup: not audited."""
    with pytest.raises(UsageError) as info:
        build(passthrough=passthrough)
    assert one_line_usage_error(info).startswith("refusing --enable-extensible-kv-cache: with it vLLM sizes the "
                                                 "KV cache itself after warmup")


def test_the_extensible_kv_cache_turned_off_is_what_kvaudit_runs_and_passes():
    config = build(passthrough=["--no-enable-extensible-kv-cache"])
    assert config.extra_args == {"enable_extensible_kv_cache": False}


def test_a_preset_cannot_smuggle_a_refused_argument(tmp_path):
    with pytest.raises(UsageError, match=r"refusing --kv-cache-memory-bytes"):
        build(preset=preset(tmp_path, "kv_cache_memory_bytes = 1000\n"))


def test_the_cli_refuses_with_one_line_and_exit_2_before_booting(cli, monkeypatch):
    import kvaudit.engines.vllm as engine

    def boom(*args, **kwargs):  # pragma: no cover - must not be reached
        raise AssertionError("vLLM would have booted")

    monkeypatch.setattr(engine, "run_audit", boom)
    result = cli("run", "--", "--kv-cache-memory-bytes", "1000")
    assert result.code == 2
    assert len(result.stderr_lines) == 1
    assert result.stderr.startswith("kvaudit: error: refusing --kv-cache-memory-bytes")
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("args, text", [
    (["show", "--bogus", "x.json"], "kvaudit show has no option --bogus (see kvaudit show --help)"),
    (["show"], "Missing"),
    (["diff", "only-one.json"], "Missing"),
    (["run", "--tp", "two"], "two"),
])
def test_a_command_line_kvaudit_cannot_parse_is_a_usage_error(cli, args, text):
    result = cli(*args)
    assert result.code == 2
    assert "Traceback" not in result.stderr and text in result.stderr and result.stdout == ""


def test_an_internal_error_is_one_line_and_exit_3(cli, monkeypatch, tmp_path):
    import kvaudit.engines.inputs

    def broken(path):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(kvaudit.engines.inputs, "load_report", broken)
    monkeypatch.delenv("KVAUDIT_DEBUG", raising=False)
    report = tmp_path / "whatever.json"  # show checks its input exists before reading it
    report.write_text("{}", encoding="utf-8")
    result = cli("show", str(report))
    assert result.code == 3
    assert result.stderr.startswith("kvaudit: internal error: RuntimeError: boom")
    assert "Traceback" not in result.stderr


# ------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize("changes, pattern", [
    (dict(tensor_parallel_size=4, decode_context_parallel_size=3),
     r"decode_context_parallel_size 3 must divide tensor_parallel_size 4"),
    (dict(decode_context_parallel_size=2), r"decode_context_parallel_size 2 must divide tensor_parallel_size 1"),
    (dict(gpu_memory_utilization=0.0), r"gpu_memory_utilization must be in \(0, 1\], got 0.0"),
    (dict(gpu_memory_utilization=1.01), r"gpu_memory_utilization must be in \(0, 1\], got 1.01"),
    (dict(gpu_memory_utilization=-0.5), r"gpu_memory_utilization must be in"),
    (dict(tensor_parallel_size=0), r"tensor_parallel_size must be a positive integer, got 0"),
    (dict(max_model_len=-1), r"max_model_len must be a positive integer"),
    (dict(block_size=True), r"block_size must be a positive integer, got True"),
    (dict(num_speculative_tokens=2), r"num_speculative_tokens needs a speculative method"),
])
def test_validation_refuses_bad_values_in_one_line(changes, pattern):
    with pytest.raises(UsageError, match=pattern) as info:
        AuditConfig(**changes).validated()
    one_line_usage_error(info)


@pytest.mark.parametrize("changes", [
    dict(tensor_parallel_size=8, decode_context_parallel_size=8),
    dict(tensor_parallel_size=8, decode_context_parallel_size=2, gpu_memory_utilization=1.0),
    dict(speculative_method="mtp", num_speculative_tokens=1),
    dict(),
])
def test_validation_accepts_good_values(changes):
    cfg = AuditConfig(**changes)
    assert cfg.validated() is cfg


def test_flags_are_validated_too():
    with pytest.raises(UsageError, match=r"must divide"):
        build(tensor_parallel_size=2, decode_context_parallel_size=4)


# vLLM's DCP size rule (ParallelConfig._validate_parallel_config): without PCP, DCP divides TP;
# with PCP (a pass-through argument), DCP is 1, PCP or TP × PCP.

@pytest.mark.parametrize("tp, dcp, message", [
    (2, 4, "decode_context_parallel_size 4 must divide tensor_parallel_size 2: DCP reuses the TP ranks; "
           "pass a --dcp that divides --tp 2"),
    (4, 3, "decode_context_parallel_size 3 must divide tensor_parallel_size 4: DCP reuses the TP ranks; "
           "pass a --dcp that divides --tp 4"),
])
def test_a_dcp_larger_than_tp_or_not_dividing_it_is_refused_naming_the_fix(tp, dcp, message):
    with pytest.raises(UsageError) as info:
        build(tensor_parallel_size=tp, decode_context_parallel_size=dcp)
    assert str(info.value) == message
    one_line_usage_error(info)


def test_with_pcp_dcp_must_be_off_span_pcp_or_span_tp_times_pcp():
    with pytest.raises(UsageError) as info:
        build(tensor_parallel_size=4, decode_context_parallel_size=2,
              passthrough=["--prefill-context-parallel-size", "3"])
    assert str(info.value) == (
        "decode_context_parallel_size 2 with prefill_context_parallel_size 3 and tensor_parallel_size 4: with PCP, "
        "vLLM's DCP is off, spans the PCP axis or spans all of TP × PCP; pass --dcp 1 or 3 or 12")
    # DCP across the PCP axis, or across TP × PCP, need not divide TP: vLLM accepts both
    for tp, dcp in ((1, 2), (2, 4)):
        config = build(tensor_parallel_size=tp, decode_context_parallel_size=dcp,
                       passthrough=["--prefill-context-parallel-size", "2"])
        assert config.decode_context_parallel_size == dcp


def test_a_preset_with_a_string_gmu_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"gpu_memory_utilization"):
        build(preset=preset(tmp_path, 'gpu_memory_utilization = "0.9"\n'))


# ------------------------------------------------------------------------------------------
# JSON form


def test_config_json_round_trip():
    cfg = AuditConfig(model="m", tensor_parallel_size=4, cudagraph_capture_sizes=(1, 2), extra_args={"a": {"b": 1}})
    data = cfg.to_json()
    assert data["cudagraph_capture_sizes"] == [1, 2] and data["extra_args"] == {"a": {"b": 1}}
    assert config_from_json(data) == cfg


# ------------------------------------------------------------------------------------------
# the config keys: AuditConfig's fields, one list


def test_every_modelled_key_has_exactly_one_kind():
    # a new field of a kind no list names would reach reports unchecked by the loader
    kinds = (INT_KEYS, STR_KEYS, FLOAT_KEYS, BOOL_KEYS, INT_LIST_KEYS)
    assert sorted(k for keys in kinds for k in keys) == sorted(MODELLED_KEYS)
    assert INT_KEYS == ("tensor_parallel_size", "decode_context_parallel_size", "num_speculative_tokens",
                        "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size")
    assert (FLOAT_KEYS, BOOL_KEYS, INT_LIST_KEYS) == (("gpu_memory_utilization",),
                                                      ("enforce_eager", "enable_chunked_prefill"),
                                                      ("cudagraph_capture_sizes",))


def test_the_stable_keys_are_the_modelled_keys_but_the_extensions():
    assert STABLE_KEYS == tuple(k for k in CONFIG_KEYS
                                if k not in ("load_format", "enable_chunked_prefill", "extra_args"))
    assert CONFIG_KEYS[-1] == "extra_args" and MODELLED_KEYS == CONFIG_KEYS[:-1]


def test_a_log_config_fills_every_modelled_key():
    # the log engine builds its AuditConfig from the same list: a knob the log states is never dropped
    from kvaudit.engines.logs.knobs import knobs_from_args
    args = {"model": "/m", "tensor_parallel_size": 2, "max_model_len": 4096, "gpu_memory_utilization": 0.5,
            "enforce_eager": True, "cudagraph_capture_sizes": [1, 2], "kv_cache_dtype": "fp8",
            "load_format": "dummy", "block_size": 32, "max_num_seqs": 4, "max_num_batched_tokens": 256,
            "decode_context_parallel_size": 1, "enable_chunked_prefill": False, "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
            "swap_space": 4}
    known, extra = knobs_from_args(args)
    assert set(known) == set(MODELLED_KEYS)
    assert extra == {"swap_space": 4, "speculative_config": {"method": "mtp", "num_speculative_tokens": 1}}


def test_a_pass_through_knob_that_overrides_a_flag_is_said():
    """A newcomer's `kvaudit run --max-model-len 2048 -- --max-model-len 1024` booted 1024 without a word."""
    from kvaudit.config import passthrough_overrides
    assert passthrough_overrides(["--max-model-len", "1024"], max_model_len=2048, gpu_memory_utilization=None) == [
        "--max-model-len 2048 is overridden by --max-model-len 1024 after -- (what follows -- comes last)"]
    # the same value twice, a knob the flags left alone, and an engine argument kvaudit does not model: nothing
    assert passthrough_overrides(["--max-model-len", "2048", "--gpu-memory-utilization", "0.5", "--seed", "7"],
                                 max_model_len=2048, gpu_memory_utilization=None) == []


def test_a_report_given_as_the_config_is_refused_as_a_report(tmp_path):
    """A newcomer's report passed to --config read as a serve YAML: "source is not an option of vllm serve"."""
    report = tmp_path / "r.json"
    report.write_text('{"source": "run", "ranks": [], "schema": "kvaudit.report/1"}\n', encoding="utf-8")
    from kvaudit.cli import config_not_a_report
    with pytest.raises(UsageError) as info:
        config_not_a_report(report)
    assert one_line_usage_error(info) == (f"config file {report} is a kvaudit report, not a config: --config takes a "
                                          f"vllm serve YAML or a TOML preset (a report goes to kvaudit show, plan or "
                                          f"diff)")
    other = tmp_path / "serve.json"  # JSON that is no report stays a serve config (YAML holds JSON)
    other.write_text('{"max-model-len": 2048}\n', encoding="utf-8")
    config_not_a_report(other)
    assert build(preset=other).max_model_len == 2048
