"""Quieter wrong answers from logs (issue 32, item 10), one test each: a figure with thousands
separators or a decimal comma was dropped without a word; a negative GiB became a negative owner;
the same log given twice was called "two different engine runs"."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvaudit.engines.logs import report_from_log_text, report_from_logs
from kvaudit.errors import BadInputError
from kvaudit.schema import Owner

LOG = Path(__file__).parent.parent / "fixtures" / "logs" / "gpu-0.32-v1-tp2-ok.log"
LOAD = "Model loading took 65.5 GiB memory and 42.123456 seconds"
AVAILABLE = "Available KV cache memory: 4.75 GiB"


def rank0(text: str):
    return next(r for r in report_from_log_text(text, "x.log").ranks if r.rank == 0)


@pytest.mark.parametrize("load, available", [
    ("Model loading took 65,5 GiB memory and 42,123456 seconds", "Available KV cache memory: 4,75 GiB"),
    ("Model loading took 65.50 GiB memory and 42.123456 seconds", "Available KV cache memory: 4.75 GiB"),
], ids=["decimal comma", "plain"])
def test_a_figure_with_a_decimal_comma_reads_as_the_plain_one(load, available):
    text = LOG.read_text().replace(LOAD, load, 1).replace(AVAILABLE, available, 1)
    rank = rank0(text)
    assert rank.owners[Owner.WEIGHTS] == round(65.5 * 2**30)
    assert rank.kv_available_bytes == round(4.75 * 2**30)


def test_a_figure_with_thousands_separators_reads_as_the_plain_one():
    # on a device that holds it: weights past every device the log states are another run's, and left unknown
    log = LOG.read_text().replace("(139.25/139.75 GiB)", "(139.25/1399.75 GiB)")
    plain = rank0(log.replace(LOAD, "Model loading took 1234.56 GiB memory and 42.1 seconds", 1))
    for figure in ("1,234.56", "1.234,56"):
        text = log.replace(LOAD, f"Model loading took {figure} GiB memory and 42.1 seconds", 1)
        assert rank0(text).owners[Owner.WEIGHTS] == plain.owners[Owner.WEIGHTS] == round(1234.56 * 2**30)


def test_a_negative_weight_is_no_owner_and_says_so():
    report = report_from_log_text(LOG.read_text().replace(LOAD, "Model loading took -65.5 GiB memory and 42.1 "
                                                                "seconds", 1), "x.log")
    rank = next(r for r in report.ranks if r.rank == 0)
    assert rank.owners[Owner.WEIGHTS] is None  # was -65.5 GiB
    assert all(v is None or v >= 0 for o, v in rank.owners.items()
               if o in (Owner.WEIGHTS, Owner.ACTIVATION_PEAK, Owner.KV_CACHE))
    assert "rank 0: the log states weights -65.50 GiB, below zero, which no memory can be: weights left unknown" \
        in report.warnings


def test_the_same_log_given_twice_is_named_so():
    text = LOG.read_text()
    with pytest.raises(BadInputError) as caught:
        report_from_logs([(text, "a.log"), (text, "b.log")])
    assert str(caught.value) == "a.log and b.log are the same log, given twice: pass it once"
    # two different runs are still told as such
    other = text.replace(LOAD, "Model loading took 60.5 GiB memory and 42.1 seconds")
    with pytest.raises(BadInputError, match="logs of two different engine runs"):
        report_from_logs([(text, "a.log"), (other, "b.log")])
