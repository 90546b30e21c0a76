"""kvaudit's reading of `vllm serve` configs and lines against the installed vLLM's own parser
(issue 30 items 1 and 4), offline and without a boot: the serve subcommand's FlexibleArgumentParser,
built as `vllm serve` builds it (ServeSubcommand.subparser_init), and EngineArgs.from_cli_args.

- the grammar kvaudit reads from vLLM's source with ast (kvaudit/serve_args.py) has every
  option string of the real parser, with its destination and arity;
- serve lines and YAML files give the values vLLM's parser gives;
- kvaudit's human_readable_int is vLLM's, on generated text;
- the files --write-config writes parse, `vllm serve --config FILE` style, into the safe values.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvaudit.serve_args import serve_grammar  # noqa: E402
from kvaudit.serve_config import (  # noqa: E402
    human_readable_int,
    human_readable_int_or_auto,
    read_deployment,
    serve_line,
)

DATA = Path(__file__).parents[1] / "unit" / "data"


@pytest.fixture(scope="module")
def vllm_parser():
    """`vllm`'s top-level parser with the serve subcommand, as vllm/entrypoints/cli/main.py builds it."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    serve = ServeSubcommand().subparser_init(subparsers)
    return parser, serve


def vllm_args(parser, argv: list[str]):
    args = parser.parse_args(argv)
    if getattr(args, "model_tag", None) is not None:  # ServeSubcommand.cmd: the positional wins
        args.model = args.model_tag
    return args


def test_the_grammar_has_every_option_of_vllm_serve(vllm_parser):
    _, serve = vllm_parser
    grammar = serve_grammar()
    assert grammar is not None
    real = {s: a for s, a in serve._option_string_actions.items() if s not in ("-h", "--help")}
    assert set(grammar.options) == set(real)
    nargs = {None: 1, "*": "+"}
    wrong = {s: (grammar.options[s].dest, grammar.options[s].nargs, a.dest, nargs.get(a.nargs, a.nargs))
             for s, a in real.items()
             if (grammar.options[s].dest, grammar.options[s].nargs) != (a.dest, nargs.get(a.nargs, a.nargs))}
    assert wrong == {}
    assert len(real) > 400


LINES = [  # (serve line, whether vLLM reads it)
    ("vllm serve org/m -tp 4 --max-model-len 32K --gpu-memory-utilization .95 --enforce-eager", True),
    ("vllm serve --max-model 4k org/m --max-num-batched-tokens 8k --max-num-seqs=16 --block-size 16", True),
    ("vllm serve org/m --cudagraph-capture-sizes 1 2 4 8 --kv-cache-dtype fp8 --no-enable-prefix-caching", True),
    ("vllm serve org/m --speculative-config.method mtp --speculative-config.num_speculative_tokens 2 -dcp 2", True),
    ('vllm serve org/m --hf-overrides {"num_hidden_layers":2} --seed -1 --max_num_seqs 4 --enable-expert-parallel',
     True),
    ("vllm serve --tensor-parallel-size 2 --model org/m --max-model-len auto --load-format dummy", True),
    ("vllm serve org/m -pp 2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --enable-chunked-prefill", True),
    ("vllm serve org/m --max-model-len -1 --max-num-scheduled-tokens 2K --hf-token --quantization None", True),
    ("vllm serve org/m --swap-space-gb 4", False),
    ("vllm serve org/m --max-model-len 8GiB", False),
    ("vllm serve org/m --enforce-eager=true", False),
    ("vllm serve org/m --max 4", False),
    ("vllm serve org/m --cudagraph-capture-sizes", False),
]


@pytest.mark.parametrize("line, readable", LINES)
def test_a_serve_line_gives_what_vllms_parser_gives(vllm_parser, line, readable):
    from kvaudit.errors import UsageError
    parser, _ = vllm_parser
    words = line.split()
    if not readable:
        with pytest.raises(SystemExit):
            vllm_args(parser, words[1:])
        with pytest.raises(UsageError):
            read_deployment(line=serve_line(words))
        return
    real = vllm_args(parser, words[1:])
    d = read_deployment(line=serve_line(words))
    assert d.model == real.model
    mine = {**d.line_values, **d.pinned}
    assert len(mine) >= 2
    for dest, value in mine.items():
        assert getattr(real, dest) == value, dest


def test_a_yaml_config_gives_what_vllms_parser_gives(vllm_parser, tmp_path):
    parser, _ = vllm_parser
    path = tmp_path / "config.yaml"
    path.write_text("""
model: org/m
tensor_parallel_size: 2
max-model-len: 32K
max_num_batched_tokens: 8k
gpu-memory-utilization: 0.9
enforce-eager: true
enable-prefix-caching: false
enable_chunked_prefill: false
cudagraph-capture-sizes: [1, 2, 4]
speculative-config: {method: mtp, num_speculative_tokens: 1}
kv-cache-memory-bytes: 8G
port: 8001
""", encoding="utf-8")
    real = vllm_args(parser, ["serve", "--config", str(path), "-tp", "4"])
    d = read_deployment(config_file=path, line=["serve", "-tp", "4"])
    assert d.model == real.model == "org/m"
    for dest, value in {**d.file_values, **d.line_values, **d.pinned}.items():
        assert getattr(real, dest) == value, dest
    assert real.tensor_parallel_size == d.line_values["tensor_parallel_size"] == 4   # the command line wins
    # vllm serve drops every `false` of a config file (the top-level parser reads the file)
    assert real.enable_chunked_prefill is None and real.enable_prefix_caching is None
    assert "enable_chunked_prefill" not in d.file_values and "enable_prefix_caching" not in d.file_values
    assert real.port == 8001 and d.api_server == ("port",)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789.kKmMgGtTiB _-+ax", max_size=8))
def test_human_readable_int_is_vllms(text):
    from vllm.utils.argparse_utils import human_readable_int as real
    from vllm.utils.argparse_utils import human_readable_int_or_auto as real_auto
    for mine, theirs in ((human_readable_int, real), (human_readable_int_or_auto, real_auto)):
        try:
            expected = theirs(text)
        except Exception:
            with pytest.raises((ValueError, OverflowError)):
                mine(text)
            continue
        assert mine(text) == expected


def written_files(tmp_path: Path) -> dict[str, Path]:
    """One file of each kind --write-config writes, from the example report run1 (verdict ok)."""
    from kvaudit.config import AuditConfig
    from kvaudit.engines.inputs import load_report
    from kvaudit.plan import Edits, plan_report
    from kvaudit.write_config import plan_config, run_config
    report = load_report(DATA / "run1.json")
    user = tmp_path / "deploy.yaml"
    user.write_text("# prod\nmodel: org/m\nmax_model_len: 8K  # long\ngpu_memory_utilization: 0.95\n"
                    "enable-prefix-caching: false\nkv-cache-memory-bytes: 8G\nnum-gpu-blocks-override: 7\n"
                    "port: 8000\n", encoding="utf-8")
    deployment = read_deployment(config_file=user)
    asked = AuditConfig(model="org/m", max_model_len=8192, gpu_memory_utilization=0.95,
                        extra_args={"enable_prefix_caching": False})
    out = {
        "patched": run_config(asked=asked, deployment=deployment, report=report, report_name="r.json"),
        "built": run_config(asked=AuditConfig(model="org/m", tensor_parallel_size=1, max_num_seqs=8,
                                              speculative_method="mtp", num_speculative_tokens=1),
                            deployment=None, report=report, report_name="r.json"),
        "plan": plan_config(plan=plan_report(report, Edits(gpu_memory_utilization=0.28)), deployment=None,
                            report_name="run1.json"),
    }
    from kvaudit.serve_config import plan_deployment
    deploy = tmp_path / "plan-deploy.yaml"   # `kvaudit plan run1.json --config plan-deploy.yaml --write-config …`
    deploy.write_text("# prod\nmodel: org/m\nmax_model_len: 2K  # long\ngpu_memory_utilization: 0.35\n"
                      "kv-cache-memory-bytes: 8G\nnum-gpu-blocks-override: 7\nport: 8000\n", encoding="utf-8")
    planned_deployment, edits = plan_deployment(deploy, report, Edits())
    out["plan-patched"] = plan_config(plan=plan_report(report, edits), deployment=planned_deployment,
                                      report_name="run1.json")
    paths = {}
    for name, written in out.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(written.text, encoding="utf-8")
    return paths


def test_written_configs_round_trip_through_vllm_serve_config(vllm_parser, tmp_path):
    from vllm.engine.arg_utils import EngineArgs

    from kvaudit.engines.inputs import load_report
    from kvaudit.write_config import safe_values
    parser, _ = vllm_parser
    files = written_files(tmp_path)
    safe = safe_values(load_report(DATA / "run1.json"))
    for name in ("patched", "built"):
        args = vllm_args(parser, ["serve", "--config", str(files[name])])   # as `vllm serve --config FILE`
        engine = EngineArgs.from_cli_args(args)
        assert (engine.kv_cache_memory_bytes, engine.gpu_memory_utilization, engine.max_model_len) == (
            safe["kv_cache_memory_bytes"], safe["gpu_memory_utilization"], safe["max_model_len"]), name
        assert engine.model == "org/m" and engine.num_gpu_blocks_override is None, name
    patched = vllm_args(parser, ["serve", "--config", str(files["patched"])])
    assert patched.enable_prefix_caching is None and patched.port == 8000   # vLLM dropped the false, as said
    assert "pass --no-enable-prefix-caching on vllm serve's command line" in files["patched"].read_text()
    built = EngineArgs.from_cli_args(vllm_args(parser, ["serve", "--config", str(files["built"])]))
    assert built.speculative_config == {"method": "mtp", "num_speculative_tokens": 1} and built.max_num_seqs == 8
    # a model on the command line, the file for the rest: the usual `vllm serve MODEL --config safe.yaml`
    plan = EngineArgs.from_cli_args(vllm_args(parser, ["serve", "other/m", "--config", str(files["plan"])]))
    from kvaudit.plan import Edits, plan_report
    planned = safe_values(plan_report(load_report(DATA / "run1.json"), Edits(gpu_memory_utilization=0.28)).report)
    assert plan.model == "other/m" and (plan.kv_cache_memory_bytes, plan.gpu_memory_utilization,
                                        plan.max_model_len) == tuple(planned[k] for k in (
                                            "kv_cache_memory_bytes", "gpu_memory_utilization", "max_model_len"))
    assert planned["gpu_memory_utilization"] == 0.28
    # the deployment's own YAML, planned: its knobs are the plan's edits, its pinned 8G the planned safe bytes
    text = files["plan-patched"].read_text(encoding="utf-8")
    assert text.startswith("# Written by kvaudit ") and "(kvaudit plan --write-config) from run1.json" in text
    args = vllm_args(parser, ["serve", "--config", str(files["plan-patched"])])
    engine = EngineArgs.from_cli_args(args)
    safe_planned = safe_values(plan_report(load_report(DATA / "run1.json"),
                                           Edits(gpu_memory_utilization=0.35, max_model_len=2048)).report)
    assert (engine.model, engine.kv_cache_memory_bytes, engine.gpu_memory_utilization, engine.max_model_len,
            engine.num_gpu_blocks_override, args.port) == (
        "org/m", safe_planned["kv_cache_memory_bytes"], 0.35, 2048, None, 8000)
    assert 0 < safe_planned["kv_cache_memory_bytes"] < 8 * 2**30


# --------------------------------------------------------------------------------------------
# Pasted commands in logs (kvaudit/engines/logs/facts.py): the knobs a log's command states are
# the values vLLM's parser gives for it, in vLLM's other spellings too


PASTED = [
    "vllm serve org/m --tensor_parallel_size 2 --gpu_memory_utilization 0.85 --max_model_len 8192 --block_size 32",
    "vllm serve org/m --gpu-memory-util 0.9 --max-model 4096 --tensor-parallel 4 --pipeline-parallel 2",
    "vllm serve org/m --max-model-len 32k --decode_context_parallel_size 2 --data_parallel_size 2",
    "vllm serve org/m --max-model-len 32K --enforce_eager -tp 2",
]


@pytest.mark.parametrize("line", PASTED)
def test_a_pasted_command_in_a_log_states_what_vllms_parser_gives(vllm_parser, line):
    from kvaudit.engines.logs.facts import FactKind, facts_from_message
    parser, _ = vllm_parser
    real = vllm_args(parser, line.split()[1:])
    stated = dict(f.value for f in facts_from_message(line) if f.kind is FactKind.COMMAND_ARG)
    assert len(stated) >= 3
    assert {knob: getattr(real, knob) for knob in stated} == stated


def test_each_shortest_flag_prefix_a_log_is_read_with_names_its_flag_alone_in_vllm_serve(vllm_parser):
    from kvaudit.engines.logs.facts import FLAG_PREFIXES
    parser, serve = vllm_parser
    flags = [s for s in serve._option_string_actions if s.startswith("--")]
    for flag, shortest in FLAG_PREFIXES.items():
        assert [f for f in flags if f.startswith(shortest)] == [flag]
        dest = serve._option_string_actions[flag].dest
        assert getattr(vllm_args(parser, ["serve", "org/m", shortest, "2"]), dest) in (2, 2.0)
    # the one knob without a prefix: a longer flag starts with its whole name
    assert [f for f in flags if f.startswith("--data-parallel-size")] == ["--data-parallel-size",
                                                                          "--data-parallel-size-local"]
