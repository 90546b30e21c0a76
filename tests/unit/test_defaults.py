"""Defaults a first run meets (issue 15 item 11): the CPU selftest asks for a small share of the
host, says how it chose it, and an over-commit within the tolerance is a note, not a warning."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from factories import real_json, write_json

from kvaudit.config import CPU_SELFTEST_REQUEST_BYTES, cpu_default_gmu
from kvaudit.engines.selftest.supervise import SelftestOptions, default_gmu

GiB = 1 << 30


def test_the_cpu_default_gmu_asks_for_the_wanted_bytes_capped_by_what_is_available():
    assert cpu_default_gmu(24 * GiB, 22 * GiB, 1, 2 * GiB) == 0.09  # 2/24 = 0.083, rounded up
    assert cpu_default_gmu(24 * GiB, 2 * GiB, 1, 3 * GiB) == 0.06  # 80 % of 2 GiB available
    assert cpu_default_gmu(24 * GiB, 22 * GiB, 2, 3 * GiB) == 0.13
    assert cpu_default_gmu(24 * GiB, 0, 1, 3 * GiB) == 0.01


@pytest.mark.parametrize("available, gmu", [(22 * GiB, 0.09),   # plenty free: 2 GiB of 24, rounded up
                                            (2 * GiB, 0.06)])   # little free: 80 % of it
def test_selftest_on_cpu_defaults_to_a_small_share_of_the_host_and_says_so(monkeypatch, available, gmu):
    # the node's memory is given (this machine's free memory changes while the suite runs)
    from kvaudit.engines.probes import host
    monkeypatch.setattr(host, "node_meminfo", lambda node=0: (24 * GiB, available))
    opts, note = default_gmu(SelftestOptions(device="cpu"))
    assert opts.gpu_memory_utilization == gmu == cpu_default_gmu(24 * GiB, available, 1, CPU_SELFTEST_REQUEST_BYTES)
    assert note == (f"note: gpu_memory_utilization {gmu} is kvaudit's CPU default here: about 2.00 GiB per rank of "
                    f"NUMA node 0's 24.00 GiB, at most 80% of its {available / GiB:.2f} GiB available / tp 1, in steps "
                    f"of 0.01; pass --gmu to set it")


def test_selftest_on_cuda_keeps_0_98_and_an_explicit_gmu_wins():
    assert default_gmu(SelftestOptions(device="cuda")) == (SelftestOptions(device="cuda", gpu_memory_utilization=0.98),
                                                           None)
    given = SelftestOptions(device="cpu", gpu_memory_utilization=0.1)
    assert default_gmu(given) == (given, None)


def test_the_gmu_help_states_the_cpu_rule(cli):
    run = " ".join(cli("run", "--help").stdout.split())
    assert "about 3 GiB per worker and at most 80% of the node's available memory / tp" in run
    selftest = " ".join(cli("selftest", "--help").stdout.split())
    assert "about 2 GiB per rank and at most 80% of the available memory / tp" in selftest


@pytest.mark.parametrize("fmt, shown", [("table", "note: a rank used 70.00 KiB more"),
                                        ("markdown", "- note: a rank used 70.00 KiB more")])
def test_an_overcommit_within_the_tolerance_is_a_note_not_a_warning(tmp_path, cli, fmt, shown):
    data = real_json("run1")
    data["warnings"] = ["a rank used 70.00 KiB more than it requested after KV was sized (within the 16.00 MiB "
                        "tolerance)"]
    path = write_json(tmp_path / "r.json", data)
    out = cli("show", str(path), "-f", fmt, "--width", "200").stdout
    assert shown in out
    assert "warning" not in out


def test_a_selftest_on_cpu_reports_its_default(tmp_path):
    out = tmp_path / "st.json"
    proc = subprocess.run([sys.executable, "-m", "kvaudit", "selftest", "--device", "cpu", "-o", str(out), "-f",
                           "json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    gmu = report["config"]["gpu_memory_utilization"]
    assert gmu < 0.98
    # the bound is the one the run saw, as its note states it (the free memory read here, later, may differ)
    note = report["warnings"][0]
    seen = re.fullmatch(rf"note: gpu_memory_utilization {gmu} is kvaudit's CPU default here: about 2\.00 GiB per "
                        rf"rank of NUMA node \d+'s ([\d.]+) GiB, at most 80% of its ([\d.]+) GiB available / tp 1, "
                        rf"in steps of 0\.01; pass --gmu to set it", note)
    assert seen, note
    total, available = float(seen.group(1)) * GiB, float(seen.group(2)) * GiB
    assert abs(report["ranks"][0]["device_total_bytes"] - total) <= 0.005 * GiB
    assert report["ranks"][0]["requested_bytes"] <= max(0.8 * (available + 0.005 * GiB), 0.01 * total + 1)
