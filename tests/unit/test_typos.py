"""A typo in kvaudit's own flag or in a preset key is refused at once (exit 2, one line, a
suggestion), not after vLLM's 10-second import. The names vLLM's LLM(...) takes come from the
installed vLLM's source (engines/vllm/engine_args.py); the pure checks take them as a set."""

from __future__ import annotations

import time

import pytest

from kvaudit.config import check_engine_arg_names, check_run_options, load_preset
from kvaudit.errors import UsageError

VLLM = frozenset({"max_model_len", "enable_expert_parallel", "attention_backend", "nnodes", "block_size"})
OPTIONS = ["--max-model-len", "--max-num-seqs", "--verify", "--gmu", "--tp"]


@pytest.mark.parametrize("tokens, message", [
    (["--max-modle-len"], "kvaudit run has no option --max-modle-len: did you mean --max-model-len?"),
    (["--verifyy"], "kvaudit run has no option --verifyy: did you mean --verify?"),
    (["--enable-expert-paralel"], "did you mean the vLLM engine argument --enable-expert-parallel (after --)?"),
    (["--foo-bar"], "kvaudit run has no option --foo-bar; vLLM engine arguments go after --"),
])
def test_an_option_run_does_not_have_is_refused_with_what_it_resembles(tokens, message):
    with pytest.raises(UsageError) as err:
        check_run_options(tokens, OPTIONS, VLLM)
    assert message in str(err.value)


def test_a_vllm_argument_before_the_dashes_still_goes_to_vllm():
    check_run_options(["--enable-expert-parallel", "--no-enable-expert-parallel", "--nnodes=2"], OPTIONS, VLLM)


def test_without_vllm_s_names_only_a_near_miss_of_kvaudit_s_own_is_refused():
    check_run_options(["--some-vllm-flag"], OPTIONS, None)
    with pytest.raises(UsageError, match="did you mean --max-model-len"):
        check_run_options(["--max-modle-len"], OPTIONS, None)


def test_a_passthrough_name_llm_does_not_take_is_refused():
    check_engine_arg_names(["attention_backend", "max_model_len"], VLLM, "after --")
    with pytest.raises(UsageError, match="after --: attention_backnd is not a kvaudit key nor an argument vLLM's "
                                         "LLM\\(...\\) takes: did you mean attention_backend\\?"):
        check_engine_arg_names(["attention_backnd"], VLLM, "after --")


def test_an_unknown_preset_key_is_refused_with_a_suggestion(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("max_modle_len = 100\n")
    with pytest.raises(UsageError, match="p.toml: max_modle_len is not a kvaudit key .* did you mean max_model_len"):
        load_preset(path, VLLM)
    path.write_text("enable_expert_parallel = true\nmax_model_len = 100\n")
    config = load_preset(path, VLLM)
    assert (config.max_model_len, dict(config.extra_args)) == (100, {"enable_expert_parallel": True})


def test_the_cli_refuses_a_typo_at_once(cli):
    start = time.perf_counter()
    result = cli("run", "--max-modle-len", "1024")
    assert time.perf_counter() - start < 5  # no vLLM import, no boot
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines == ["kvaudit: error: kvaudit run has no option --max-modle-len: did you mean "
                                   "--max-model-len?"]


def test_the_installed_vllm_s_names_are_read_without_importing_it():
    pytest.importorskip("vllm")
    import subprocess
    import sys
    code = ("import sys; from kvaudit.engines.vllm.engine_args import engine_arg_names; n = engine_arg_names(); "
            "print(len(n), 'max_model_len' in n, 'enable_expert_parallel' in n, 'worker_cls' in n, "
            "'vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.split()
    assert int(out[0]) > 100 and out[1:] == ["True", "True", "True", "False"]


@pytest.mark.parametrize("args, line", [
    (["show", "--formt", "json", "r.json"], "kvaudit show has no option --formt: did you mean --format? "
                                            "(see kvaudit show --help)"),
    (["diff", "--jsn", "a", "b"], "kvaudit diff has no option --jsn (see kvaudit diff --help)"),
    (["plan", "--gmuu", "0.9", "r.json"], "kvaudit plan has no option --gmuu: did you mean --gmu? "
                                          "(see kvaudit plan --help)"),
])
def test_every_verb_refuses_an_option_it_lacks_as_run_does(cli, args, line):
    # a newcomer met `kvaudit run has no option --gmuu: did you mean --gmu?` but click's `No such option:
    # --formt (Possible options: --format)` from show: one wording for one mistake
    result = cli(*args)
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines == [f"kvaudit: error: {line}"]


@pytest.mark.parametrize("argv, where", [
    (["run", "--write-config"], "kvaudit run"), (["show", "--width"], "kvaudit show"), (["--width"], "kvaudit")])
def test_an_option_missing_its_value_points_to_its_verbs_help(argv, where, monkeypatch, capsys):
    """Click refuses a missing value before the verb's context exists; a newcomer was sent to `kvaudit --help`."""
    from kvaudit import cli
    monkeypatch.setattr("sys.argv", ["kvaudit", *argv])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"(see {where} --help)") and err.count("\n") == 0
