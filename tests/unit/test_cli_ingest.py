"""`kvaudit ingest LOG [LOG…]`: raw vLLM startup logs of one boot → a kvaudit.report/1 (source log),
written with -o and rendered on stdout like `show`; the exit code is the report's."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvaudit.input_text import read_text

FIXTURES = Path(__file__).parent.parent / "fixtures" / "logs"
PUBLIC = FIXTURES / "public"
TP2_OK = FIXTURES / "gpu-0.32-v1-tp2-ok.log"


def test_ingest_writes_a_log_report_and_prints_json(cli, tmp_path):
    # GIVEN the log of a TP=2 boot that fit
    out = tmp_path / "x.json"
    # WHEN it is ingested as JSON with -o
    result = cli("ingest", str(TP2_OK), "-o", str(out), "-f", "json")
    # THEN stdout is the report, the file holds the same, chatter is on stderr only, and it fits
    assert result.code == 0
    data = json.loads(result.stdout)
    assert data["schema"] == "kvaudit.report/1" and data["source"] == "log"
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert json.loads(out.read_text(encoding="utf-8")) == data
    assert result.stderr_lines == [f"kvaudit: report written to {out}"]


def test_the_written_report_loads_with_show(cli, tmp_path):
    out = tmp_path / "x.json"
    assert cli("ingest", str(TP2_OK), "-o", str(out), "-f", "csv").code == 0
    shown = cli("show", str(out), "-f", "json")
    assert shown.code == 0 and json.loads(shown.stdout) == json.loads(out.read_text(encoding="utf-8"))


def test_ingest_without_output_renders_a_table(cli):
    result = cli("ingest", str(TP2_OK), "--width", "100")
    assert result.code == 0 and result.stderr == ""
    assert result.stdout.startswith("kvaudit log") and result.stdout.rstrip().splitlines()[-1].startswith("OK")


def test_one_file_per_node_gives_one_report(cli, tmp_path):
    # GIVEN the same boot split into two files (one per node), the second one gzipped
    lines = read_text(TP2_OK).splitlines()
    node0, node1 = tmp_path / "node0.log", tmp_path / "node1.log.gz"
    node0.write_text("\n".join(line for line in lines if "Worker_TP1" not in line), encoding="utf-8")
    node1.write_bytes(gzip.compress("\n".join(line for line in lines if "Worker_TP1" in line).encode()))
    # WHEN both are ingested together THEN the ranks of both are in one report, as from the whole log
    merged = cli("ingest", str(node0), str(node1), "-f", "json")
    whole = cli("ingest", str(TP2_OK), "-f", "json")
    assert merged.code == 0
    assert json.loads(merged.stdout)["ranks"] == json.loads(whole.stdout)["ranks"]


@pytest.mark.parametrize("name, code", [
    ("gpu-0.32-v1-tp4-does-not-fit.log", 1),   # a finding
    ("cpu-0.32-load-crash.log", 3),            # the boot never got far enough to decide
])
def test_the_exit_code_is_the_reports(cli, name, code):
    result = cli("ingest", str(FIXTURES / name), "-f", "json")
    assert result.code == code
    assert json.loads(result.stdout)["source"] == "log"


@pytest.mark.parametrize("content", ["just some text\nno vllm here\n", '{"schema": "kvaudit.report/1"}'])
def test_a_file_that_is_not_a_log_is_bad_input(cli, tmp_path, content):
    path = tmp_path / "notes.txt"
    path.write_text(content, encoding="utf-8")
    out = tmp_path / "x.json"
    result = cli("ingest", str(path), "-o", str(out))
    assert result.code == 2
    assert len(result.stderr_lines) == 1 and result.stderr.startswith("kvaudit: error: ")
    assert str(path) in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == "" and not out.exists()


def test_a_missing_log_and_no_log_are_usage_errors(cli, tmp_path):
    missing = cli("ingest", str(tmp_path / "nope.log"))
    assert missing.code == 2 and missing.stderr_lines == [f"kvaudit: error: {tmp_path / 'nope.log'}: no such file"]
    none = cli("ingest")
    assert none.code == 2 and len(none.stderr_lines) == 1 and "Missing argument" in none.stderr


def test_an_unwritable_output_is_one_line(cli, tmp_path):
    result = cli("ingest", str(TP2_OK), "-o", str(tmp_path / "no-such-dir" / "x.json"))
    assert result.code == 2 and result.stderr_lines == [
        f"kvaudit: error: -o {tmp_path / 'no-such-dir' / 'x.json'}: the folder {tmp_path / 'no-such-dir'} does not "
        f"exist; create it or name another"]


def test_ingest_imports_neither_torch_nor_vllm(tmp_path):
    # a fresh interpreter: whatever other tests imported does not count
    probe = ("import sys; sys.argv = ['kvaudit', 'ingest', sys.argv[1], '-f', 'json']\n"
             "from kvaudit.cli import main\n"
             "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
             "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm')]\n"
             "print(code, heavy, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe, str(TP2_OK)], capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "0 []"


def zeros_gzip(path: Path, chunks: int, chunk: int = 1 << 24) -> None:
    """A gzip file of one member (deflate at level 9) that expands to `chunks` × `chunk` zero bytes, written
    without deflating them all: the chunk is deflated once and ends with a full flush, which leaves the
    deflater as it started (byte-aligned, no history), so every chunk deflates to the same bytes. Deflating
    2.2 GiB through gzip.open took 12.8-14.0 s of the CI's 2-core EPYC, this 0.9-1.1 s (the CRC of the zeros)."""
    import struct
    import zlib
    zeros = bytes(chunk)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    assert deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH) == block
    end = deflater.flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(chunks):
        crc = zlib.crc32(zeros, crc)
    # RFC 1952: magic, deflate, no flags, mtime 0, maximum compression, OS unknown; the deflate stream; the
    # CRC-32 and the size modulo 2^32 of what it expands to
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + block * chunks + end
                     + struct.pack("<II", crc, chunk * chunks & 0xFFFFFFFF))


def test_zeros_gzip_is_one_gzip_member_of_that_many_zeros(tmp_path):
    import zlib
    path = tmp_path / "z.gz"
    zeros_gzip(path, 5, 1 << 16)
    assert gzip.decompress(path.read_bytes()) == bytes(5 << 16)  # its CRC and size checked too
    member = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert member.decompress(path.read_bytes()) == bytes(5 << 16)
    assert member.eof and member.unused_data == b""  # one member, the whole file


def test_a_gzip_bomb_is_refused_without_expanding_it(tmp_path):
    """A 3 MB gzip that expands past the 2 GiB cap is refused in constant memory: the first pass
    only counts (issue 15 item 4: it took 3.2 GB of RSS when the expansion was kept)."""
    import subprocess
    import sys
    bomb = tmp_path / "bomb.log.gz"
    zeros_gzip(bomb, 140)  # 2.2 GiB of zeros
    # VmHWM, not ru_maxrss: Linux carries the forking parent's (pytest's) peak into ru_maxrss across exec
    code = ("import re, sys\n"
            "from kvaudit.input_text import read_text\n"
            "from kvaudit.errors import BadInputError\n"
            "try:\n    read_text(sys.argv[1])\nexcept BadInputError as e:\n    print(e)\n"
            "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n")
    out = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True, text=True, timeout=120)
    message, peak_kib = out.stdout.strip().splitlines()
    assert "larger than 2 GiB" in message
    assert int(peak_kib) < 500 * 1024, f"peak RSS {int(peak_kib) >> 10} MiB"


def test_gzip_logs_expand_whole_through_many_small_steps(tmp_path):
    import gzip

    from kvaudit.input_text import read_text
    text = "INFO 12-01 10:00:00 [gpu_worker.py:1] " + "x" * 5000 + "\n"
    path = tmp_path / "log.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(text * 3000)  # 15 MB expanded: many 1 MiB steps
    assert read_text(path) == text * 3000


def test_ingest_exits_by_the_verdict_while_show_only_renders_it(cli):
    # README "Exit codes": a log whose boot did not fit is a finding to ingest (1); show draws the
    # same FAIL and exits 0, as a viewer does
    failing = FIXTURES / "public" / "02-v0.6-10517-29k-fails.log"
    ingested, shown = cli("ingest", str(failing)), cli("show", str(failing))
    assert ingested.code == 1 and shown.code == 0
    assert "FAIL: does not fit" in ingested.stdout and "FAIL: does not fit" in shown.stdout


def test_reading_a_closed_standard_input_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "kvaudit", "show", "-"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, preexec_fn=lambda: __import__("os").close(0))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "kvaudit: error: - reads standard input, which is closed: pass a file"


def test_a_json_document_larger_than_any_report_is_refused_before_it_is_parsed(cli, tmp_path, monkeypatch):
    # parsed JSON takes about 25x its size: a 1 GB "report" would exhaust the machine's memory
    import kvaudit.report as report
    monkeypatch.setattr(report, "MAX_REPORT_CHARS", 1 << 20)
    big = tmp_path / "big.json"
    big.write_text('{"x": [' + ",".join(["{}"] * (1 << 19)) + "]}", encoding="utf-8")
    result = cli("show", str(big))
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: {big}: 1 MiB of JSON, far larger than any kvaudit report "
                                   f"(at most 1 MiB are read)"]


def test_a_file_of_nothing_but_memory_lines_is_refused_not_read_for_minutes(cli, tmp_path, monkeypatch):
    # each fact line is read as a record; 6 million of them took 8 minutes and 5.6 GB
    import kvaudit.engines.logs.parse as parse
    monkeypatch.setattr(parse, "MAX_FACT_LINES", 1000)
    flood = tmp_path / "flood.log"
    flood.write_text("# GPU blocks: 1\n" * 1001, encoding="utf-8")
    result = cli("show", str(flood))
    assert result.code == 2
    assert result.stderr_lines == [f"kvaudit: error: {flood}: more than 1,000 lines state memory figures, where one "
                                   f"vLLM startup states a few hundred: pass the startup log of one boot"]
    flood.write_text("# GPU blocks: 1\n" * 1000, encoding="utf-8")
    assert cli("show", str(flood)).code == 0


def test_two_boots_appended_into_one_file_are_refused_not_mixed(cli, tmp_path):
    # a TP=2 boot that fit, then a TP=4 boot that did not: read as one, it said "OK: fits", exit 0
    both = tmp_path / "two.log"
    both.write_text((FIXTURES / "gpu-0.32-v1-tp2-ok.log").read_text(encoding="utf-8")
                    + (FIXTURES / "gpu-0.32-v1-tp4-does-not-fit.log").read_text(encoding="utf-8"), encoding="utf-8")
    result = cli("ingest", str(both))
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines == [f"kvaudit: error: {both}: the logs of two engine runs in one file (max_model_len "
                                   f"16384, then 524288): split it and ingest each run on its own, or compare them "
                                   f"with kvaudit diff"]
    # the same boot twice (a restart with the same config) is still one run: the last figures win
    again = tmp_path / "again.log"
    again.write_text((FIXTURES / "gpu-0.32-v1-tp2-ok.log").read_text(encoding="utf-8") * 2, encoding="utf-8")
    assert cli("ingest", str(again)).code == 0


def test_two_served_lengths_in_one_paste_are_two_runs_not_one(cli, tmp_path):
    # vllm#25350 pasted bare lines of a run that served 100,000 tokens, then the KV check of a run
    # at 221,000: read as one boot it said "needs 10.12 GiB KV, 10.55 GiB available … free -0.43 GiB"
    both = tmp_path / "two.log"
    both.write_text("\n".join(
        (PUBLIC / name).read_text(encoding="utf-8") for name in ("03-v1-25350-fp8-ok.log", "04-v1-25350-fp8-fails.log")),
        encoding="utf-8")
    result = cli("show", str(both))
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines == [f"kvaudit: error: {both}: the logs of two engine runs in one file (served length "
                                   f"100000, then 221000): split it and ingest each run on its own, or compare them "
                                   f"with kvaudit diff"]
    # each on its own is read as before
    assert cli("show", str(PUBLIC / "03-v1-25350-fp8-ok.log")).code == 0
