"""`kvaudit run --repeat N` and `--cold`, pure parts: folding N reports into the worst one with
the spread (kvaudit/repeat.py), the private caches of --cold, the contract and the renderers."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from factories import MiB, gib, real_json

from kvaudit.diff import diff_reports
from kvaudit.engines.vllm import supervise
from kvaudit.errors import BadInputError
from kvaudit.render import Format, reporter
from kvaudit.repeat import combine, worst_index
from kvaudit.schema import Failure, FailureKind, Owner, Phase, Verdict, dumps
from kvaudit.validate import diff_from_json, report_from_json


def base():
    return report_from_json(real_json("run1"))  # a real TP1 run that fits


def boot(kv_tokens: int, safe: int, *, activation: int = gib(0.5), verdict: Verdict = Verdict.OK, failure=None):
    r = base()
    rank = r.ranks[0]
    owners = dict(rank.owners)
    owners[Owner.ACTIVATION_PEAK] = activation
    cap = replace(r.capacity, kv_tokens=kv_tokens, kv_available_bytes=safe + MiB,
                  safe_serve_flags=(f"--kv-cache-memory-bytes={safe}", "--gpu-memory-utilization=0.13",
                                    "--max-model-len=4096"))
    return replace(r, ranks=(replace(rank, owners=owners),), capacity=cap, verdict=verdict, failure=failure)


def test_the_report_is_the_boot_with_the_fewest_safe_bytes_and_the_spread_is_every_boot_s():
    boots = [boot(834_560, gib(2), activation=gib(0.375)), boot(778_496, gib(1.5), activation=gib(0.625)),
             boot(800_000, gib(1.75), activation=gib(0.5))]
    out = combine(boots, boots=3, cold=True)
    assert out.repeat.worst_boot == 2 and out.capacity == boots[1].capacity  # its safe flags, its owners
    r = out.repeat
    assert (r.kv_tokens_min, r.kv_tokens_median, r.kv_tokens_max, r.kv_tokens_spread) == (778_496, 800_000, 834_560,
                                                                                          56_064)
    act = next(o for o in r.owners if o.owner is Owner.ACTIVATION_PEAK and o.rank == 0)
    assert (act.min_bytes, act.median_bytes, act.max_bytes) == (gib(0.375), gib(0.5), gib(0.625))
    assert [b.safe_kv_cache_memory_bytes for b in r.runs] == [gib(2), gib(1.5), gib(1.75)]
    assert r.cold and r.boots == 3 and any("the worst of 3 boots (boot 2)" in w for w in out.warnings)


def test_a_failed_verdict_is_worse_than_fewer_bytes_and_a_boot_that_did_not_finish_worst():
    ok_small = boot(700_000, gib(1.25))
    failed = boot(900_000, gib(2.25), verdict=Verdict.FAIL)
    crashed = boot(900_000, gib(2.25), verdict=Verdict.UNKNOWN,
                   failure=Failure(Phase.KV, 0, FailureKind.CRASH, "RuntimeError: x"))
    assert worst_index([ok_small, failed]) == 1
    assert worst_index([ok_small, failed, crashed]) == 2
    out = combine([ok_small, crashed], boots=3, cold=False)
    assert out.verdict is Verdict.UNKNOWN and out.repeat.runs[1].failure == "crash: RuntimeError: x"
    assert any("boot 2 did not finish, so the other 1 were not run" in w for w in out.warnings)


def test_the_safe_bytes_are_the_fewest_of_any_boot_even_when_the_worst_verdict_left_more():
    # seen in the suite's --repeat 2 on the EPYC: boot 1's verify failed and held back its overrun,
    # boot 2 held with fewer safe bytes; the failed boot stays the report, its flags take boot 2's bytes
    failed = boot(900_000, gib(2.25), verdict=Verdict.FAIL)
    ok_small = boot(700_000, gib(1.25))
    out = combine([failed, ok_small], boots=2, cold=True)
    assert out.repeat.worst_boot == 1 and out.verdict is Verdict.FAIL
    assert out.capacity.safe_serve_flags == (f"--kv-cache-memory-bytes={gib(1.25)}", "--gpu-memory-utilization=0.13",
                                             "--max-model-len=4096")
    assert any(f"lowered to {gib(1.25)}, the fewest safe bytes of any boot (boot 2)" in w for w in out.warnings)
    # where the worst boot's own bytes are the fewest, they stand
    tight = boot(900_000, gib(1), verdict=Verdict.FAIL)
    out = combine([ok_small, tight], boots=2, cold=True)
    assert out.capacity == tight.capacity and not any("lowered to" in w for w in out.warnings)


def test_the_median_of_an_even_count_is_a_boot_s_own_figure():
    out = combine([boot(10, gib(1)), boot(30, gib(1.125)), boot(20, gib(1.25)), boot(40, gib(1.375))], boots=4, cold=False)
    assert out.repeat.kv_tokens_median == 20


def test_the_repeat_section_round_trips_and_is_checked():
    out = combine([boot(834_560, gib(2)), boot(778_496, gib(1.5))], boots=2, cold=True)
    data = json.loads(dumps(out))
    assert report_from_json(data) == out
    assert "repeat" not in json.loads(dumps(base()))  # one boot: absent, the old bytes
    bad = json.loads(dumps(out))
    bad["repeat"]["worst_boot"] = 3
    with pytest.raises(BadInputError, match=r"report\.repeat: names a boot above boots \(2\)"):
        report_from_json(bad)
    bad = json.loads(dumps(out))
    bad["repeat"]["owners"][0]["rank"] = 5
    with pytest.raises(BadInputError, match=r"repeat\.owners\[0\]\.rank: names rank 5"):
        report_from_json(bad)


def render(obj, fmt=Format.TABLE, diff=False) -> str:
    out = io.StringIO()
    r = reporter(fmt, width=100, color=False)
    (r.diff if diff else r.report)(obj, out)
    return out.getvalue()


def test_show_renders_the_spread_compactly():
    out = combine([boot(834_560, gib(2), activation=gib(0.375)), boot(778_496, gib(1.5), activation=gib(0.625))],
                  boots=2, cold=True)
    text = render(out)
    assert "spread over the boots (GiB)" in text
    assert "0.375–0.625" in text  # activation_peak's range on rank 0
    assert ("2 of 2 boots with cold caches; KV tokens 778,496 to 834,560 (spread 56,064, 7.2% of the median "
            "778,496); this report is boot 2, the worst") in " ".join(text.split())
    md = render(out, Format.MARKDOWN)
    assert "| spread over the boots (GiB) | rank 0 |" in md


def test_diff_renders_each_side_s_spread_and_judges_the_kv_change_against_it():
    a = combine([boot(834_560, gib(2)), boot(778_496, gib(1.5))], boots=2, cold=True)
    b = boot(777_000, gib(1.375))
    diff = diff_reports(a, b, "a.json", "b.json")
    assert diff.repeat == {"a": a.repeat, "b": None}
    text = " ".join(render(diff, diff=True).split())
    assert "spread: a.json: 2 boots (cold), KV tokens 778,496 to 834,560 (spread 56,064); b.json: one boot" in text
    assert "the KV change (-1,496 tokens) is within the boot-to-boot spread (56,064 tokens)" in text
    assert diff_from_json(json.loads(dumps(diff))) == diff
    # neither side repeated: the diff's bytes are as before
    assert "repeat" not in json.loads(dumps(diff_reports(base(), base())))


def test_cold_caches_live_in_a_private_folder_emptied_before_each_boot(tmp_path):
    root = tmp_path / "cache"
    env = supervise.cold_cache_env(root)
    (root / "vllm" / "torch_compile_cache").mkdir()
    (root / "vllm" / "torch_compile_cache" / "x").write_text("warm")
    again = supervise.cold_cache_env(root)
    assert env == again and not (root / "vllm" / "torch_compile_cache").exists()
    for var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH"):
        assert env[var].startswith(str(root)), var
    assert "HF_HOME" not in env and "XDG_CACHE_HOME" not in env  # the weights are not a cache to empty
    assert set(env[supervise.COLD_ENV].split(",")) == set(supervise.COLD_CACHE_VARS)


def test_the_boot_process_leaves_the_private_cache_paths_out_of_the_report(monkeypatch):
    from kvaudit.engines.vllm.boot import memory_env
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/tmp/kvaudit-run-x/cache/vllm")
    monkeypatch.setenv("VLLM_USE_V1", "1")
    assert memory_env()["VLLM_CACHE_ROOT"] == "/tmp/kvaudit-run-x/cache/vllm"  # the user's own: reported
    monkeypatch.setenv(supervise.COLD_ENV, ",".join(supervise.COLD_CACHE_VARS))
    env = memory_env()
    assert "VLLM_CACHE_ROOT" not in env and env["VLLM_USE_V1"] == "1"


def test_the_host_allocators_settings_are_reported(monkeypatch):
    # they move a CPU boot's RSS by tens of MiB: two reports that differ in them are not comparable
    from kvaudit.engines.vllm.boot import memory_env
    for var, value in (("MALLOC_MMAP_THRESHOLD_", "131072"), ("GLIBC_TUNABLES", "glibc.malloc.arena_max=1"),
                       ("LD_PRELOAD", "/usr/lib/libtcmalloc_minimal.so.4"), ("MALLOC_CONF", "background_thread:true"),
                       ("TCMALLOC_RELEASE_RATE", "10")):
        monkeypatch.setenv(var, value)
        assert memory_env()[var] == value
    monkeypatch.setenv("LDFLAGS", "-L/x")
    assert "LDFLAGS" not in memory_env()


def test_repeat_logs_go_one_per_boot(tmp_path):
    opts = supervise.RunOptions(log_path=tmp_path / "v.log", repeat=3)
    assert supervise._boot_log(opts, 2) == tmp_path / "v.boot2.log"
    assert supervise._boot_log(supervise.RunOptions(log_path=tmp_path / "v.log"), 1) == tmp_path / "v.log"


# a real report with both sections: tests/vllm/test_verify_cpu.py's `--verify --repeat 2 --cold` boot
RESULTS = __import__("pathlib").Path(__file__).parents[1] / "benchmarks" / "results"
from test_render import SUFFIX  # noqa: E402  (every format's golden suffix)


@pytest.mark.parametrize("fmt", list(Format), ids=str)
def test_a_real_verify_and_repeat_report_matches_its_golden(golden, fmt):
    from kvaudit.engines.inputs import load_report
    report = load_report(RESULTS / "cpu-verify-repeated.json")
    assert report.repeat is not None and report.verify.scenarios
    golden(f"verify_repeat.{SUFFIX[fmt]}", render(report, fmt))


@pytest.mark.parametrize("fmt", [Format.TABLE, Format.JSON, Format.PROM], ids=str)
def test_a_real_diff_of_repeated_boots_matches_its_golden(golden, fmt):
    from kvaudit.engines.inputs import load_report
    a = load_report(RESULTS / "cpu-verify-repeated.json")
    b = load_report(RESULTS / "cpu-verify-mtp.json")
    diff = diff_reports(a, b, "cpu-verify-repeated.json", "cpu-verify-mtp.json")
    golden(f"diff_verify_repeat.{SUFFIX[fmt]}", render(diff, fmt, diff=True))
