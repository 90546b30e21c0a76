"""A document that names vLLM's wordings is not a log; a post around a real log still is.

A newcomer ran `kvaudit show README.md`: exit 0, "kvaudit log · vllm · tp 2 pp 2 … failure: crash on rank 0",
read from the README's sentence that quotes `EngineCore failed to start` and from its example commands
(`kvaudit run --tp 8 -- --pipeline-parallel-size 2 …`); docs/design.md read as a ROCm log with owners. The rule
(parse._mentions_only): a text is a log only where one of its lines is a log line, a record with vLLM's prefix
or one that states a fact of the log, read without the quotations inside a person's sentences
(unwrap.without_quotations) and not counting a command's flags. The other side matters more: a real paste
is markdown too (prose around a fenced or `> `-quoted log, an error line in backticks, a write-up retelling
the records as bullets), and none of it may be refused, let alone read as a boot that fit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text
from kvaudit.engines.logs.unwrap import without_quotations
from kvaudit.errors import BadInputError
from kvaudit.input_text import read_text
from kvaudit.schema import FailureKind

ROOT = Path(__file__).parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
DATA = Path(__file__).parent / "data"
TP2_OK = FIXTURES / "gpu-0.32-v1-tp2-ok.log"
OOM_CAPTURE = FIXTURES / "gpu-0.32-v1-tp2-oom-capture.log"
LOAD_CRASH = FIXTURES / "cpu-0.32-load-crash.log"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_A_LOG = "no vLLM log lines found"
QUOTED_RECORDS = {"vllm-startup.md": "the logs of two engine runs in one file"}
"""The catalogue of vLLM's wordings lists some messages whole, one a list item (`` - ``No available memory for
the cache blocks. …`` ``), as the round-eighteen write-up retells its records (`- `# rocm blocks: 40178, …`: …`):
those are quoted records, the log's lines, and the one-boot check refuses the file (the two served lengths its
examples state)."""


def _one_line_refusal(result, name: str, why: str) -> None:
    assert result.code == 2
    assert result.stdout == ""
    assert len(result.stderr_lines) == 1
    assert result.stderr_lines[0].startswith(f"kvaudit: error: {name}")
    assert why in result.stderr_lines[0]


def test_the_projects_own_documents_are_found() -> None:
    names = [p.name for p in DOCUMENTS]
    assert "README.md" in names and "design.md" in names and len(names) >= 6


@pytest.mark.parametrize("verb", ["show", "ingest", "diff"])
@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_a_document_that_names_vllms_wordings_is_refused_in_one_line(cli, doc: Path, verb: str) -> None:
    args = (verb, str(doc), str(TP2_OK)) if verb == "diff" else (verb, str(doc))
    _one_line_refusal(cli(*args), str(doc), QUOTED_RECORDS.get(doc.name, NOT_A_LOG))


def test_the_refusal_names_the_readmes_lines_that_mention_vllms_wordings(cli) -> None:
    line = cli("show", str(ROOT / "README.md")).stderr_lines[0]
    readme = read_text(ROOT / "README.md").splitlines()
    named = [int(n) for n in line.split("no vLLM log lines found (lines ")[1].split(" and the like")[0].split(", ")]
    assert len(named) == 3
    assert any("EngineCore failed to start" in readme[n - 1] or "`ingest` also read logs" in readme[n - 1]
               for n in named)


# ---------------------------------------------------------------------------------------------------------
# The rule fires: wordings quoted inside sentences, commands


def test_a_sentence_that_quotes_a_failure_is_no_failure() -> None:
    text = ("A boot that died is never `ok` (`EngineCore failed to start`, a cut traceback, a dead worker).\n"
            "It says \"Available KV cache memory: 12.3 GiB\" on the worker's line.\n")
    with pytest.raises(BadInputError, match=r"no vLLM log lines found \(lines 1, 2 and the like"):
        report_from_log_text(text, "x")


def test_kvaudits_own_commands_are_no_log_and_a_vllm_command_alone_is_read() -> None:
    # the README's examples: kvaudit's command lines pass vLLM's flags, and name no boot a person ran
    text = ("```bash\n"
            "kvaudit run --tp 8 -- --pipeline-parallel-size 2 --nnodes 2 --node-rank 1 --master-addr HEAD_IP\n"
            "kvaudit run -o r2.json -- vllm serve Qwen/Qwen3-8B -tp 2 --max-model-len 32K\n"
            "```\n")
    with pytest.raises(BadInputError, match=NOT_A_LOG + r" \(line 2 and the like"):
        report_from_log_text(text, "x")
    # a paste of the command a person ran, alone (real pastes round twenty), is read as before: the boot it asked for
    command = text.replace("kvaudit run -o r2.json -- ", "").replace("kvaudit run --tp 8 -- ", "vllm serve M ")
    assert report_from_log_text(command, "x").config.tensor_parallel_size == 2


def test_a_command_beside_wordings_quoted_in_sentences_is_a_documents_example() -> None:
    text = ("A boot that died is never `ok` (`EngineCore failed to start`, a dead worker).\n\n"
            "```bash\nvllm serve Qwen/Qwen3-8B -tp 2 --max-model-len 32K\n```\n")
    with pytest.raises(BadInputError, match=NOT_A_LOG + r" \(lines 1, 4 and the like"):
        report_from_log_text(text, "x")
    # the same command before a log's line is read with it
    logged = text + ("(Worker_TP1 pid=41) ERROR 11-30 14:00:35 [multiproc_executor.py:953] torch.OutOfMemoryError: "
                     "CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    report = report_from_log_text(logged, "x")
    assert report.failure is not None and report.config.tensor_parallel_size == 2


def test_without_quotations_blanks_a_sentences_quotes_and_keeps_a_quoted_record() -> None:
    def blank(words: str) -> str:
        return " " * len(words)

    cases = [
        ('it raises "No available memory" and `EngineCore failed to start`, then',
         f'it raises "{blank("No available memory")}" and `{blank("EngineCore failed to start")}`, then'),
        ("Failures: `No available memory for the cache blocks`, `Cannot auto-fit max_model_len`.",
         f"Failures: `{blank('No available memory for the cache blocks')}`, `{blank('Cannot auto-fit max_model_len')}`."),
        ("  --max-model-len 8192 (cli.run)          \"Available KV cache memory: 12.3 GiB\" (cli.ingest)",
         f"  --max-model-len 8192 (cli.run)          \"{blank('Available KV cache memory: 12.3 GiB')}\" (cli.ingest)"),
        # a record quoted whole: alone on its line, after a list's bullet, at a line's end (after a label's colon)
        ("`ValueError: No available memory for the cache blocks.`", None),
        ("- `# GPU blocks: 507`: the KV blocks", None),
        ("I get `torch.OutOfMemoryError: CUDA out of memory.`", None),
        ("- vLLM 0.2.5 and `main`: `# GPU blocks: 112, # CPU blocks: 1310`",
         f"- vLLM 0.2.5 and `{blank('main')}`: `# GPU blocks: 112, # CPU blocks: 1310`"),
        # a figure set as code; data's strings; a traceback frame's path
        ("Model loading took `12.3` GiB", None),
        ('{"log": "INFO 12-06 10:00:10 [gpu_worker.py:298] Available KV cache memory: 16.83 GiB"}', None),
        ('  File "/x/vllm/worker.py", line 3, in load_model', None),
    ]
    text = "\n\n".join(line for line, _ in cases)
    quiet = without_quotations(text)
    assert len(quiet) == len(text)
    assert quiet.split("\n\n") == [line if quieted is None else quieted for line, quieted in cases]


def test_a_quotation_goes_on_past_a_line_break_within_its_paragraph() -> None:
    # a hard-wrapped paragraph whose code span opens at one line's end (docs/vllm-startup.md §5.4)
    text = ("the auto-fit ends `; the final length is set\n"
            "after CUDA graph capture and warmup`); a KV page the driver cannot map raises `RuntimeError: GPU\n"
            "driver error 2: out of memory` (utils/vmm_driver.py).\n")
    with pytest.raises(BadInputError, match=NOT_A_LOG):
        report_from_log_text(text, "x")
    # a blank line ends the paragraph: a stray mark before it quotes nothing after it
    stray = "it ends with `\n\nValueError: No available memory for the cache blocks.\n"
    assert report_from_log_text(stray, "x").failure is not None


# ---------------------------------------------------------------------------------------------------------
# The rule must not fire: real pastes are markdown too


def _failure(text: str):
    failure = report_from_log_text(text, "x").failure
    assert failure is not None
    return failure


def test_an_issue_body_around_a_fenced_crash_still_reads_as_the_crash() -> None:
    log = read_text(OOM_CAPTURE)
    body = ("### Your current environment\n\nvLLM 0.32, 2× H100, `--tensor-parallel-size 2`.\n\n"
            "### 🐛 Describe the bug\n\nThe server dies during CUDA graph capture with `CUDA out of memory`; "
            "I expected `EngineCore failed to start` to say why. Full log:\n\n```text\n" + log + "```\n")
    alone = _failure(log)
    in_post = _failure(body)
    assert (in_post.kind, in_post.phase, in_post.rank) == (FailureKind.OOM, alone.phase, 1) == (
        alone.kind, alone.phase, alone.rank)


def test_a_sentence_quoting_enginecore_failed_to_start_then_a_bare_traceback_is_a_failure() -> None:
    traceback = _bare_traceback()
    assert "pid=" not in traceback and " ERROR " not in traceback
    post = "My server says `EngineCore failed to start` and then \"Engine core initialization failed\":\n\n" + traceback
    alone = _failure(traceback)
    assert _failure(post) == alone
    assert alone.kind is FailureKind.CRASH


def _bare_traceback() -> str:
    """The raw traceback of a CPU boot that died loading, as the terminal printed it: no vLLM prefix."""
    lines = read_text(LOAD_CRASH).splitlines()
    return "\n".join(lines[lines.index("Process EngineCore:"):]) + "\n"


@pytest.mark.parametrize("log", [
    read_text(OOM_CAPTURE),                                # vLLM's records, prefixed
    _bare_traceback(),                                     # no prefix at all
    read_text(FIXTURES / "excerpts" / "v19-boots.txt"),    # `[file.py:N] message` heads only
], ids=["prefixed", "bare-traceback", "file-heads"])
@pytest.mark.parametrize("quote", ["> ", "> > "])
def test_a_quoted_fenced_log_is_still_read(log: str, quote: str) -> None:
    # a reply that quotes the post's fenced log (CRLF line ends, as a Windows browser sends them)
    quoted = "You wrote:\n\n" + "".join(quote + line for line in ("```text\n" + log + "```\n").splitlines(keepends=True))
    got, expected = report_from_log_text(quoted.replace("\n", "\r\n"), "x"), report_from_log_text(log, "x")
    assert (got.ranks, got.failure, got.verdict) == (expected.ranks, expected.failure, expected.verdict)


@pytest.mark.parametrize("paste", [
    # one record of the fixture, as printed
    "(Worker_TP1 pid=41) ERROR 11-30 14:00:35 [multiproc_executor.py:953] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which 1.25 GiB is free.\n",
    # the exception line alone, in backticks on a line of its own, after a sentence
    "I get this when it starts:\n`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has "
    "a total capacity of 79.19 GiB of which 1.25 GiB is free.`\n",
    # the same after a list's bullet, and inside a `> ` quote
    "- `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.`: what the worker said\n",
    "> `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.`\n",
], ids=["prefixed", "backticks-own-line", "bullet", "quote-marker"])
def test_a_single_error_line_is_still_a_failure(paste: str) -> None:
    assert _failure(paste).kind is FailureKind.OOM


@pytest.mark.parametrize("name, kv_tokens", [("round_eighteen/quoted_records_bullets.log", 642_848),
                                             ("round_twenty/docker_json_file.log", 1_629_520)])
def test_records_quoted_as_bullets_and_dockers_json_strings_are_still_read(name: str, kv_tokens: int) -> None:
    # a write-up that retells each record in backticks after a bullet (`   - `# rocm blocks: 40178, …`: 根据…`);
    # Docker's json-file log, each line a JSON object whose string after `"log": ` is the record
    assert report_from_log_text(read_text(DATA / name), name).capacity.kv_tokens == kv_tokens


def test_a_log_that_quotes_in_its_own_records_reads_as_before(cli) -> None:
    # vLLM's messages hold backticks (`gpu_memory_utilization`): the fixture's report is byte for byte the same
    # with a prose paragraph in front, which changes nothing but the input
    log = read_text(TP2_OK)
    assert "`" in log and json.loads(cli("show", str(TP2_OK), "-f", "json").stdout)["verdict"] == "ok"
    report = report_from_log_text("Here is `my` log, \"as printed\":\n\n" + log, "x")
    assert report.ranks == report_from_log_text(log, "x").ranks and report.verdict.value == "ok"
