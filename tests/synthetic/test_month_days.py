"""The simulated month's changes to a written synthetic day (benchmarks/month.py, issue 46 §1's gate cases): each
changes what its case needs and nothing else, so that the data gate's verdict on the day tells about the gate."""

from __future__ import annotations

import collections
import datetime as dt
import sys

import pytest

from helpers.paths import REPO
from synthetic.generator import SynthConfig, write_days

sys.path.insert(0, str(REPO / "benchmarks"))
import month  # noqa: E402

DAY = dt.date(2026, 10, 1)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("days")
    write_days(SynthConfig(out=str(out), start=DAY, days=1, rows_per_day=4_000, workers=1, seed=11))
    return month.day_file(out, DAY).read_bytes()


@pytest.fixture
def day(tmp_path, written):
    path = month.day_file(tmp_path, DAY)
    path.parent.mkdir(parents=True)
    path.write_bytes(written)
    return path


def split(path) -> list[tuple[bytes, bytes]]:
    """(label, the rest of the line) of each row."""
    return [(x[:x.index(b"\t")], x[x.index(b"\t"):]) for x in path.read_bytes().splitlines()]


@pytest.mark.parametrize("factor", [month.FIRST_CLICKS, month.SHIFT_CLICKS, month.DRIFT_DAILY ** 2])
def test_scale_clicks_changes_the_click_rate_and_no_feature(day, factor):
    before = split(day)
    done = month.scale_clicks(day, factor, "seed")
    after = split(day)
    assert [rest for _, rest in after] == [rest for _, rest in before]   # every feature as written, in order
    rate = sum(y == b"1" for y, _ in after) / len(after)
    assert done == {"rows": 4_000, "rate_before": pytest.approx(sum(y == b"1" for y, _ in before) / 4_000, abs=1e-4),
                    "rate_after": pytest.approx(rate, abs=1e-4)}
    assert rate == pytest.approx(factor * done["rate_before"], rel=0.08)
    turned = [(a, b) for (a, _), (b, _) in zip(before, after) if a != b]
    assert {a for a, _ in turned} == ({b"0"} if factor > 1 else {b"1"})   # only one way


def test_duplicates_ingest_each_of_90_percent_of_the_rows_twice(day):
    before = day.read_bytes().splitlines()
    what, _ = month.inject(day, "duplicates")
    after = day.read_bytes().splitlines()
    assert len(after) == 4_000 + 3_600 and what.startswith("3600 of its 4000 rows ingested twice (1.9x")
    assert collections.Counter(after) == collections.Counter(before) + collections.Counter(before[:3_600])


def test_permuted_labels_keep_the_marginals_and_lose_the_rows_labels(day):
    before = split(day)
    month.inject(day, "permuted")
    after = split(day)
    assert [rest for _, rest in after] == [rest for _, rest in before]
    assert collections.Counter(y for y, _ in after) == collections.Counter(y for y, _ in before)
    rate = sum(y == b"1" for y, _ in before) / len(before)
    moved = sum(a != b for (a, _), (b, _) in zip(before, after)) / len(before)
    assert moved == pytest.approx(2 * rate * (1 - rate), abs=0.03)   # as for labels drawn anew at the same rate
