"""Real pastes, round thirty-four (pages and projects that embed vLLM). The data are the files as the round saved
them (tests/unit/data/round_thirty_four), each finding's must-not-fire case beside it."""
from __future__ import annotations

from tests.unit.factories import log_report, pasted

OOM_TWO_LISTED = "07_vlmevalkit1031_4090_wrapped_torch_oom_23_64_other_process_19_19_padded.log"
"""VLMEvalKit#1031 (RTX 4090): `Process 250179 has 19.19 GiB memory in use. Process 259318 has 4.36 GiB memory in use.
Of the allocated memory 3.82 GiB is allocated by PyTorch, and 102.20 MiB is reserved by PyTorch but unallocated.`,
no `this process has`."""


def _oom_notes(text: str) -> list[str]:
    return [w for w in log_report(text, "x").warnings if "out-of-memory message" in w]


def test_the_boot_is_the_least_listed_process_that_holds_what_pytorch_reserved() -> None:
    """G2. The caller holds what PyTorch reserved in it (3.92 GiB) and a CUDA context: 259318 at 4.36 GiB; 250179
    would need 15.27 GiB outside PyTorch. Before: 250179 (the largest) was the boot, 259318 the other process."""
    assert _oom_notes(pasted("round_thirty_four", OOM_TWO_LISTED)) == [
        "torch's out-of-memory message names 1 other process on the device holding 19.19 GiB (Process 259318, "
        "4.36 GiB, is the boot itself: the message has no `this process has`, as in a container's PID namespace, "
        "and it holds least of the 2 that hold the 3.92 GiB PyTorch reserved)"]


def test_a_listed_process_below_what_pytorch_reserved_is_never_the_boot() -> None:
    """Must not fire: with 259318 below the 3.92 GiB PyTorch reserved (3.90 GiB, though above the 3.82 GiB it
    allocated) the largest is the only one that can be the boot; with its own `this process has` clause the message
    lists only others."""
    text = pasted("round_thirty_four", OOM_TWO_LISTED)
    assert _oom_notes(text.replace("Process 259318 has 4.36 GiB", "Process 259318 has 3.90 GiB")) == [
        "torch's out-of-memory message names 1 other process on the device holding 3.90 GiB (Process 250179, "
        "19.19 GiB, is the boot itself: the message has no `this process has`, as in a container's PID namespace, "
        "and it holds the 3.92 GiB PyTorch reserved)"]
    own = text.replace("Process 259318 has 4.36 GiB memory in use.",
                       "Including non-PyTorch memory, this process has 4.36 GiB memory in use.")
    assert _oom_notes(own) == ["torch's out-of-memory message names 1 other process on the device holding 19.19 GiB"]


MY_COMMAND = "15_lmcache2306_v1_enginecore_failed_to_start_blend_gmu08_cut.log"
"""LMCache#2306: `My command is LMCACHE_CONFIG_FILE=lmcache_blend.yaml vllm serve Meta-Llama-3.1-8B-Instruct
--gpu-memory-utilization 0.8 --port 8000 …`, then `EngineCore failed to start.`"""


def test_a_sentence_that_says_the_command_is_ones_own_names_its_model() -> None:
    """G3. Before: its GMU was read and its model dropped as a sentence's."""
    report = log_report(pasted("round_thirty_four", MY_COMMAND), MY_COMMAND)
    assert (report.config.model, report.config.gpu_memory_utilization) == ("Meta-Llama-3.1-8B-Instruct", 0.8)


def test_advice_that_names_a_command_names_no_model() -> None:
    """Must not fire: advice, an example, a sentence (round nine's `I ran vllm serve meta-llama/X and it crashed`), or
    the label's words inside a sentence rather than opening it."""
    failed = "(EngineCore_DP0 pid=2010453) ERROR 12-24 11:38:48 [core.py:866] EngineCore failed to start.\n"
    for said in ("You can try CUDA_VISIBLE_DEVICES=0 vllm serve M --gpu-memory-utilization 0.8",
                 "For example, vllm serve M --gpu-memory-utilization 0.8",
                 "It fails when my command is vllm serve M --gpu-memory-utilization 0.8",
                 "I ran vllm serve M --gpu-memory-utilization 0.8"):
        assert log_report(said + "\n" + failed, "x").config.model is None, said
    for said in ("> The command was vllm serve M", "my launch command is HF_HOME=/data vllm serve M --port 8000"):
        assert log_report(said + "\n" + failed, "x").config.model == "M", said


LM_EVAL_CONTINUED = "05_llmcompressor1151_lm_eval_model_args_tp2_dp4_gmu08_lm_eval_records_cut.log"
"""llm-compressor#1151: `lm_eval --model vllm \\` then `--model_args pretrained="./Llama-3.2-1B-Instruct-W8A8-Dynamic-
Per-Token",add_bos_token=true,tensor_parallel_size=2,gpu_memory_utilization=0.8,data_parallel_size=4 \\`."""
LM_EVAL_ONE_LINE = "06_lmeval2779_tp8_runtime_oom_sampler_get_logprobs_79_19_total_cut.log"
"""lm-eval#2779: `lm_eval --model vllm --model_args pretrained=Qwen/Qwen2.5-72B-Instruct,tensor_parallel_size=8,
dtype=bfloat16,gpu_memory_utilization=0.8,data_parallel_size=1 --seed 42 …`, then a TP8 OOM."""


def test_lm_evals_model_args_are_the_engine_arguments() -> None:
    """G1. Before: the config was empty (model, TP, DP and GMU of the command dropped)."""
    report = log_report(pasted("round_thirty_four", LM_EVAL_CONTINUED), LM_EVAL_CONTINUED)
    config = report.config
    assert (config.model, config.tensor_parallel_size, config.gpu_memory_utilization,
            config.extra_args.get("data_parallel_size")) == ("./Llama-3.2-1B-Instruct-W8A8-Dynamic-Per-Token", 2, 0.8, 4)
    config = log_report(pasted("round_thirty_four", LM_EVAL_ONE_LINE), LM_EVAL_ONE_LINE).config
    assert (config.model, config.tensor_parallel_size, config.gpu_memory_utilization,
            config.extra_args.get("data_parallel_size")) == ("Qwen/Qwen2.5-72B-Instruct", 8, 0.8, 1)


def test_model_args_without_vllms_keywords_are_no_engines() -> None:
    """Must not fire: lm-eval's Hugging Face backend (`--model hf --model_args pretrained=M,parallelize=True`) passes
    none of vLLM's keywords, so its model is no vLLM engine's."""
    failed = "(EngineCore_DP0 pid=2010453) ERROR 12-24 11:38:48 [core.py:866] EngineCore failed to start.\n"
    hf = "lm_eval --model hf --model_args pretrained=EleutherAI/pythia-160m,parallelize=True,dtype=float16 --tasks x\n"
    assert log_report(hf + failed, "x").config.model is None
    quoted = "lm_eval --model vllm --model_args 'pretrained=M,max_model_len=4096,block_size=16' --tasks x\n"
    config = log_report(quoted + failed, "x").config
    assert (config.model, config.max_model_len, config.block_size) == ("M", 4096, 16)


def test_lm_eval_reading_leaves_the_rest_of_a_paste_and_other_backends_alone() -> None:
    """A review's cases (2026-12-08): a served vLLM evaluated through lm-eval's API backend keeps its serve command's
    reading; lm-eval's SGLang backend, advice to rerun, and a sentence that names `--model_args` are no vLLM engine."""
    failed = "(EngineCore_DP0 pid=2010453) ERROR 12-24 11:38:48 [core.py:866] EngineCore failed to start.\n"
    served = ("vllm serve Qwen/Qwen2-7B --max-model-len 8192 --tensor-parallel-size 2 &\n"
              "lm_eval --model local-completions --model_args model=Qwen/Qwen2-7B,base_url=http://h:8000 --tasks y\n")
    config = log_report(served + failed, "x").config
    assert (config.model, config.tensor_parallel_size, config.max_model_len) == ("Qwen/Qwen2-7B", 2, 8192)
    for said in ("lm_eval --model sglang --model_args pretrained=Q,tp_size=2,max_model_len=4096 --tasks x",
                 "please rerun with lm_eval --model vllm --model_args pretrained=Q,tensor_parallel_size=4",
                 "You could try --model_args pretrained=Q,tensor_parallel_size=4"):
        config = log_report(said + "\n" + failed, "x").config
        assert (config.model, config.tensor_parallel_size, config.max_model_len) == (None, None, None), said
    prompt = "user@h:~$ HF_HOME=/d lm_eval --model vllm --model_args pretrained=Q,tensor_parallel_size=4 --tasks x\n"
    assert log_report(prompt + failed, "x").config.tensor_parallel_size == 4


def test_a_backticked_command_after_its_label_names_its_model() -> None:
    failed = "(EngineCore_DP0 pid=2010453) ERROR 12-24 11:38:48 [core.py:866] EngineCore failed to start.\n"
    assert log_report("My command was `vllm serve M --port 8000`\n" + failed, "x").config.model == "M"
