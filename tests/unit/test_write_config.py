"""The way out to the deployment (issue 30 item 4): `--write-config FILE` writes the user's vllm serve
YAML back (or one built from the flags) with the safe kv-cache-memory-bytes, gpu-memory-utilization and
max-model-len applied and a comment naming the report and kvaudit's version; only a report that fits
is written. tests/vllm/test_serve_config_vllm.py parses the files with vLLM's own parser."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from factories import write_text as write

from kvaudit import __version__
from kvaudit.config import AuditConfig
from kvaudit.errors import UsageError
from kvaudit.schema import Verdict
from kvaudit.serve_config import read_deployment
from kvaudit.write_config import (
    check_target,
    config_refusal,
    patch_yaml,
    plan_config,
    render,
    run_config,
    safe_values,
)

DATA = Path(__file__).parent / "data"


@pytest.fixture
def ok_report(real_reports):
    report = real_reports["run1"]
    assert report.verdict is Verdict.OK and report.failure is None
    return report


# ------------------------------------------------------------------------------------------
# which reports are written


def test_only_a_report_that_fits_is_written(real_reports):
    assert config_refusal(real_reports["run1"], 0) is None
    run2 = real_reports["run2"]   # over-committed: fail, with safe flags
    assert config_refusal(run2, 1) == f"the verdict is fail: {run2.verdict_reason}"
    run3 = real_reports["run3"]   # a boot that died
    assert config_refusal(run3, 3).startswith(f"the boot failed ({run3.failure.kind.value}): ")
    no_flags = replace(real_reports["run1"], capacity=replace(real_reports["run1"].capacity, safe_serve_flags=()))
    assert config_refusal(no_flags, 0) == "the report has no safe KV bytes"


def test_the_safe_values_are_the_reports_safe_flags(ok_report):
    assert ok_report.capacity.safe_serve_flags == (
        "--kv-cache-memory-bytes=6883835904", "--gpu-memory-utilization=0.3", "--max-model-len=4096")
    assert safe_values(ok_report) == {"kv_cache_memory_bytes": 6883835904, "gpu_memory_utilization": 0.3,
                                      "max_model_len": 4096}


@pytest.mark.parametrize("name", ["safe.toml", "safe", "safe.json", "-"])
def test_the_target_must_be_a_file_vllm_reads(name):
    with pytest.raises(UsageError):
        check_target(name)
    check_target("safe.yaml")
    check_target("SAFE.YML")


# ------------------------------------------------------------------------------------------
# patching the user's YAML


ORIGINAL = """\
# production, reviewed by ops
model: org/model            # the checkpoint
tensor_parallel_size: 8
max_model_len: 32K  # long context
gpu_memory_utilization: 0.95
speculative_config:
  method: mtp
  num_speculative_tokens: 1
num_gpu_blocks_override: 100
compilation_config.mode: 3
enforce_eager:
port: 8000
"""


def test_the_yaml_is_patched_in_place_comments_and_spelling_kept():
    values = {"kv_cache_memory_bytes": 123, "gpu_memory_utilization": 0.9, "max_model_len": 4096,
              "max_num_seqs": 16, "enable_prefix_caching": False, "compilation_config": {"mode": 0},
              "enforce_eager": True}
    text = patch_yaml(ORIGINAL, values, ["num_gpu_blocks_override"])
    assert text == """\
# production, reviewed by ops
model: org/model            # the checkpoint
tensor_parallel_size: 8
max_model_len: 4096  # long context
gpu_memory_utilization: 0.9
speculative_config:
  method: mtp
  num_speculative_tokens: 1
enforce_eager: true
port: 8000
kv_cache_memory_bytes: 123
max_num_seqs: 16
enable-prefix-caching: false
compilation_config: {"mode": 0}
"""
    # the dotted key is gone (vLLM would merge it over the whole value), and so is the override
    data = yaml.safe_load(text)
    assert data["compilation_config"] == {"mode": 0} and "num_gpu_blocks_override" not in data


def test_a_block_value_is_replaced_whole_and_what_follows_it_stays():
    text = patch_yaml("a: 1\nspeculative-config:\n  method: eagle\n  num_speculative_tokens: 3\n# next\nb: 2\n",
                      {"speculative_config": {"method": "mtp"}}, [])
    assert text == 'a: 1\nspeculative-config: {"method": "mtp"}\n# next\nb: 2\n'


def test_a_block_scalar_and_a_flow_mapping_are_handled():
    text = patch_yaml("chat-template: |\n  {{ x }}\n  more\nmax-model-len: 1\n", {"chat_template": "y"}, [])
    assert yaml.safe_load(text) == {"chat-template": "y", "max-model-len": 1}
    text = patch_yaml("{max-model-len: 1, port: 8000}\n", {"max_model_len": 2048, "kv_cache_memory_bytes": 5}, [])
    assert yaml.safe_load(text) == {"port": 8000, "max-model-len": 2048, "kv-cache-memory-bytes": 5}


@pytest.mark.parametrize("value", [0, 7, 0.97, True, False, "fp8", "a: b # not a comment", [1, 2, 4],
                                   {"method": "mtp", "num_speculative_tokens": 1}, "é", "null", "true", "0x10"])
def test_a_rendered_value_reads_back_as_itself(value):
    assert yaml.safe_load(f"k: {render(value)}\n")["k"] == value


# ------------------------------------------------------------------------------------------
# run --write-config and plan --write-config


def test_run_patches_the_users_yaml_with_the_command_lines_knobs_and_the_safe_values(tmp_path, ok_report):
    path = write(tmp_path, "# prod\nmodel: org/model\nmax-model-len: 4K\nmax-num-seqs: 8\nport: 8000\n"
                           "kv-cache-memory-bytes: 8G\n")
    deployment = read_deployment(config_file=path, line=["serve", "--max-num-seqs", "16"], use_grammar=False)
    asked = AuditConfig(model="org/model", max_model_len=4096, max_num_seqs=16)
    written = run_config(asked=asked, deployment=deployment, report=ok_report, report_name="r.json")
    lines = written.text.splitlines()
    assert lines[0].startswith(f"# Written by kvaudit {__version__} (kvaudit run --write-config) from r.json (")
    assert lines[0].endswith("): verdict ok.")
    assert lines[1] == ("# kvaudit's safe values: kv-cache-memory-bytes 6883835904 (was 8589934592), "
                        "gpu-memory-utilization 0.3 (new), max-model-len 4096 (unchanged).")
    assert "# Also set, as audited: max-num-seqs." in lines
    body = written.text[written.text.index("# prod"):]
    assert body == ("# prod\nmodel: org/model\nmax-model-len: 4K\nmax-num-seqs: 16\nport: 8000\n"
                    "kv-cache-memory-bytes: 6883835904\ngpu-memory-utilization: 0.3\n")


def test_run_builds_the_file_from_the_flags_when_there_is_no_yaml(ok_report):
    asked = AuditConfig(model="/models/x", tensor_parallel_size=2, max_model_len=8192, load_format="dummy",
                        speculative_method="mtp", num_speculative_tokens=1, extra_args={"enable_expert_parallel": True})
    written = run_config(asked=asked, deployment=None, report=ok_report, report_name="r.json")
    body = [line for line in written.text.splitlines() if not line.startswith("#")]
    assert body == ['model: "/models/x"', "tensor-parallel-size: 2", "decode-context-parallel-size: 1",
                    "max-model-len: 4096", 'speculative-config: {"method": "mtp", "num_speculative_tokens": 1}',
                    "enable-expert-parallel: true", "kv-cache-memory-bytes: 6883835904",
                    "gpu-memory-utilization: 0.3"]
    assert ("# The audit ran on random weights (load-format dummy); the file leaves that out."
            in written.text.splitlines())


def test_a_yaml_without_a_model_audited_on_the_embedded_one_is_not_written(tmp_path, ok_report):
    from kvaudit.config import embedded_model_path
    deployment = read_deployment(config_file=write(tmp_path, "max-model-len: 4096\n"), use_grammar=False)
    with pytest.raises(UsageError, match="names no model, so the audit would run kvaudit's embedded model"):
        run_config(asked=AuditConfig(model=embedded_model_path()), deployment=deployment, report=ok_report,
                   report_name="r.json")


@pytest.fixture
def no_boot_returning(monkeypatch):
    import kvaudit.engines.vllm as engine

    def returning(report):
        monkeypatch.setattr(engine, "run_audit", lambda *args, **kwargs: report)
        monkeypatch.setattr(engine, "preflight", lambda config: None)
    return returning


def test_a_yaml_without_a_model_is_refused_before_the_boot(cli, tmp_path, monkeypatch):
    import kvaudit.engines.vllm as engine

    def no_boot(*args, **kwargs):
        raise AssertionError("booted")
    monkeypatch.setattr(engine, "run_audit", no_boot)
    monkeypatch.setattr(engine, "preflight", no_boot)
    deploy, target = write(tmp_path, "max-model-len: 2048\nmax-num-seqs: 4\n"), tmp_path / "safe.yaml"
    result = cli("run", "--config", str(deploy), "--write-config", str(target))
    assert result.code == 2 and not target.exists()
    assert result.stderr_lines[-1] == (
        f"kvaudit: error: {deploy} names no model, so the audit would run kvaudit's embedded model, whose safe "
        f"values are not the deployment's: add model: to it, or pass --model or -- vllm serve MODEL")


def test_a_run_that_does_not_fit_writes_no_config_and_says_so(cli, tmp_path, real_reports, no_boot_returning):
    no_boot_returning(real_reports["run2"])
    target = tmp_path / "safe.yaml"
    result = cli("run", "--write-config", str(target), "-f", "json")
    assert result.code == 1 and not target.exists()
    assert (f"kvaudit: no config written to {target} (left as it was): the verdict is fail: "
            f"{real_reports['run2'].verdict_reason}") in result.stderr_lines


def test_a_run_that_fits_writes_the_config_naming_the_report(cli, tmp_path, real_reports, no_boot_returning):
    no_boot_returning(real_reports["run1"])
    target, report = tmp_path / "safe.yaml", tmp_path / "r.json"
    result = cli("run", "--write-config", str(target), "-o", str(report), "-f", "json", "--max-model-len", "2k")
    assert result.code == 0, result.stderr
    text = target.read_text(encoding="utf-8")
    assert text.startswith(f"# Written by kvaudit {__version__} (kvaudit run --write-config) from {report} (")
    data = yaml.safe_load(text)
    assert (data["kv-cache-memory-bytes"], data["gpu-memory-utilization"], data["max-model-len"]) == (
        6883835904, 0.3, 4096)
    assert f"kvaudit: config written to {target}" in result.stderr_lines


def test_plan_writes_the_deployments_yaml_with_its_edits(cli, tmp_path):
    deploy = write(tmp_path, "# deploy\nmodel: org/model\nmax-model-len: 4096\ngpu-memory-utilization: 0.25\n"
                             "max-num-seqs: 4\nport: 8000\n")
    target = tmp_path / "safe.yaml"
    result = cli("plan", str(DATA / "run1.json"), "--config", str(deploy), "--write-config", str(target),
                 "-f", "json")
    assert result.code == 0, result.stderr
    import json
    planned = json.loads(result.stdout)
    assert planned["config"]["gpu_memory_utilization"] == 0.25 and planned["config"]["max_num_seqs"] == 4
    text = target.read_text(encoding="utf-8")
    flags = dict(f.lstrip("-").split("=") for f in planned["capacity"]["safe_serve_flags"])
    assert yaml.safe_load(text) == {"model": "org/model", "max-model-len": 4096, "gpu-memory-utilization": 0.25,
                                    "max-num-seqs": 4, "port": 8000,
                                    "kv-cache-memory-bytes": int(flags["kv-cache-memory-bytes"])}
    assert "# Planned from the measured report, without a boot" in text


def test_plan_refuses_a_deployment_it_cannot_plan(cli, tmp_path):
    deploy = write(tmp_path, "tensor-parallel-size: 8\n")
    result = cli("plan", str(DATA / "run1.json"), "--config", str(deploy))
    assert result.code == 2 and result.stderr_lines == [
        f"kvaudit: error: {deploy} sets tensor-parallel-size 8, the measured boot ran 1: kvaudit plan does not change "
        f"it; boot it: kvaudit run --config {deploy}"]


def test_plan_without_yaml_builds_from_the_measured_config(real_reports):
    from kvaudit.plan import Edits, plan_report
    plan = plan_report(real_reports["run1"], Edits(gpu_memory_utilization=0.28))
    written = plan_config(plan=plan, deployment=None, report_name="run1.json")
    data = yaml.safe_load(written.text)
    assert data["gpu-memory-utilization"] == 0.28 and data["max-num-seqs"] == real_reports["run1"].config.max_num_seqs
    assert "load-format" not in data


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is None, reason="the grammar is vLLM's")
def test_a_built_file_keeps_the_serve_lines_api_options_but_no_secrets(ok_report, monkeypatch):
    from kvaudit.config import build_run
    monkeypatch.delenv("HF_TOKEN", raising=False)
    line = "vllm serve org/m --port 8001 --api-key k1 --hf-token hf_secret".split()
    config, deployment = build_run(model=None, dummy_weights=False, preset=None, passthrough=line, mtp=None,
                                   cudagraph_sizes=None)
    import os
    assert "hf_token" not in config.extra_args and os.environ["HF_TOKEN"] == "hf_secret"   # not in the report
    written = run_config(asked=config, deployment=deployment, report=ok_report, report_name="r.json")
    data = yaml.safe_load(written.text)
    assert data["port"] == 8001 and "api-key" not in data and "hf-token" not in data
    assert "hf_secret" not in written.text and "k1" not in written.text
    assert "# Left out: api-key (secrets; pass them on the command line or through the environment)." in written.text


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is None, reason="the option names are vLLM's")
def test_an_abbreviated_key_is_the_option_it_abbreviates():
    # argparse lets vLLM read `max-model` as --max-model-len: the safe length replaces that value
    assert patch_yaml("# x\nmax-model: 32K\ntensor_parallel: 2\n", {"max_model_len": 4096, "tensor_parallel_size": 4},
                      []) == "# x\nmax-model: 4096\ntensor_parallel: 4\n"


def test_plan_warns_of_a_pinned_kv_size_above_the_planned_safe_one(cli, tmp_path):
    deploy = write(tmp_path, "model: org/model\nmax-model-len: 2K\ngpu-memory-utilization: 0.35\n"
                             "kv-cache-memory-bytes: 8G\n")
    target = tmp_path / "safe.yaml"
    result = cli("plan", str(DATA / "run1.json"), "--config", str(deploy), "--write-config", str(target), "-f", "json")
    assert result.code == 0, result.stderr
    import json
    safe = int(dict(f.lstrip("-").split("=") for f in json.loads(result.stdout)["capacity"]["safe_serve_flags"])[
        "kv-cache-memory-bytes"])
    assert 0 < safe < 8 * 2**30
    from kvaudit.units import fmt_bytes
    assert ("kvaudit: note: kv-cache-memory-bytes 8589934592 is set aside: kvaudit plans the KV cache itself and "
            "compares the result after the plan") in result.stderr_lines
    assert (f"kvaudit: warning: the deployment's kv-cache-memory-bytes 8589934592 is {fmt_bytes(8 * 2**30 - safe)} "
            f"above kvaudit's safe {safe}: lower it (--write-config writes the safe value)") in result.stderr_lines
    assert yaml.safe_load(target.read_text(encoding="utf-8"))["kv-cache-memory-bytes"] == safe


@pytest.mark.parametrize(("terminal", "args", "on_stderr"), [(True, (), False), (True, ("-f", "json"), True),
                                                             (False, (), True), (True, ("-o", "-"), False),
                                                             (False, ("-o", "-"), False)])
def test_a_runs_warnings_reach_stderr_unless_the_table_shows_them_on_the_terminal(cli, monkeypatch, real_reports,
                                                                                no_boot_returning, terminal, args,
                                                                                on_stderr):
    import kvaudit.cli
    report = dataclasses.replace(real_reports["run1"], warnings=("a retried warmup was counted once",))
    no_boot_returning(report)
    monkeypatch.setattr(kvaudit.cli, "_stdout_is_terminal", lambda: terminal)
    result = cli("run", *args)
    assert ("kvaudit: warning: a retried warmup was counted once" in result.stderr_lines) is on_stderr
    # the user reads it once: `-o -` puts the table (with it) on stderr, the JSON on stdout
    once_on_stderr = on_stderr or args == ("-o", "-")
    assert " ".join(result.stderr.split()).count("a retried warmup was counted once") == int(once_on_stderr)
    assert "a retried warmup was counted once" in " ".join((result.stdout + result.stderr).split())
