"""The README a newcomer reads first (issue 15 item 13): every file it names is in this
repository (nothing outside it, like the project workspace's own design notes), and the set-up time it
promises is the measured one."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_every_path_the_readme_names_is_in_the_repository():
    named = {m for m in re.findall(r"`([^`\s]+)`", README)
             if "/" in m and not m.startswith(("-", "http")) and re.search(r"\.(py|md|json|toml|sh|log)$|/run$", m)}
    assert "configs/examples/cpu-batch512.json" in named
    missing = sorted(m for m in named if not (REPO / m).exists())
    assert missing == []


def test_no_link_leaves_the_repository():
    assert "../" not in README


def test_the_set_up_time_is_the_measured_one():
    assert "about a minute" not in README
    assert "set-up and the first run together took 1 min 51 s to 2 min 37 s" in README


def _outside_code_blocks(text: str) -> list[str]:
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def test_no_line_outside_code_blocks_is_wider_than_120():
    assert [line for line in _outside_code_blocks(README) if len(line) > 120] == []


def test_the_quick_start_comes_first_and_the_evidence_lives_in_docs():
    headings = [line for line in README.splitlines() if line.startswith("## ")]
    assert headings[0].startswith("## Quick start")
    assert "docs/evidence.md" in README and (REPO / "docs" / "evidence.md").exists()
    assert len(README.splitlines()) < 280  # it was 412 lines with every proof in it; the benchmark table stays


def test_the_set_up_says_where_torch_cpu_comes_from_before_the_local_wheel_folder():
    setup = README.split("## Quick start")[1].split("```")[1]
    assert 'pip install -e ".[cpu,test]" --extra-index-url https://download.pytorch.org/whl/cpu' in setup
    after = README.split("## Quick start")[1].split("```")[2]
    assert after.index("local wheel folder") > 0  # the alternative is said after the command that works anywhere


def test_the_test_command_names_the_venv_it_needs_in_the_same_block():
    block = README.split("## Tests")[1].split("```")[1]
    assert ". .venv/bin/activate" in block and "python -m pytest -q tests" in block
    assert "bash .ci/run" in README.split("## Tests")[1]  # the self-contained way


def test_the_example_output_names_its_machine_and_is_the_recorded_one():
    section = README.split("## Example output")[1].split("## ")[0]
    assert "AMD EPYC without AMX" in section and "CPU_MLA" in section
    recorded = (REPO / "tests" / "benchmarks" / "results" / "cpu-mla-epyc-run.txt").read_text(encoding="utf-8")
    assert section.split("```")[1].strip("\n") == recorded.rstrip("\n")
    assert "(V1, CPU_MLA)" in recorded.splitlines()[0]
    assert "AMX_MLA" in section  # the other kind of CPU is labelled, not shown as this one
