"""The data gate (issue 19, section 5) on real preprocessing, no server: drifting synthetic days and the real Criteo
sample pass every check with the defaults; each injected fault fails its check, named by day, feature, check, value
and threshold, with the numbers the raw rows give; a failed check in `warn` mode keeps the champion."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import shutil
import statistics
from pathlib import Path

import pytest

from helpers.paths import CRITEO_10K, need
from models import registry
from nightly import datacheck
from nightly.config import DataCheckConfig
from models.decision import decide
from preprocessing import PreprocessConfig, run
from preprocessing.profile import StoredProfiles
from synthetic.generator import SynthConfig, write_days

START = dt.date(2026, 11, 1)
DAYS = [(START + dt.timedelta(days=k)).isoformat() for k in range(5)]   # train 1..3, val 4, test 5
TEST = DAYS[-1]
LABEL, INTS, CATS = 0, range(1, 14), range(14, 40)


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    write_days(SynthConfig(out=str(root / "normal"), days=5, start=START, rows_per_day=3000, seed=5, workers=1))
    return root / "normal"


def _rows(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines()]


def _faulty(logs: Path, tmp: Path, change) -> Path:
    """A copy of the days whose test day's rows went through ``change``."""
    root = tmp / "logs"
    shutil.copytree(logs, root, ignore=shutil.ignore_patterns(TEST))
    test = next((logs / TEST).glob("part-*"))
    (root / TEST).mkdir()
    (root / TEST / test.name).write_text("".join("\t".join(r) + "\n" for r in change(_rows(test))))
    return root


def _inputs(root: Path, days: list[str]) -> list[str]:
    splits = ["train"] * (len(days) - 2) + ["val", "test"]
    return [f"{s}={root}/{d}/part-*" for s, d in zip(splits, days)]


def _check(root: Path, store: Path, days: list[str] = DAYS, champion: str | None = None) -> list[datacheck.Check]:
    """The window's checks as the pipeline makes them: preprocessing, then the stored profiles (and the stored
    counts against the champion's vocabulary for the unseen shares)."""
    config = PreprocessConfig(inputs=_inputs(root, days), out=str(store), progress=False)
    run(config)
    stored = StoredProfiles(config)
    files: dict[str, list] = {}
    for uri, profile in stored.profiles():
        files.setdefault(Path(uri).parent.name, []).append((uri, profile))
    stats = [datacheck.day_stats(d, [p for _, p in files[d]]) for d in days]
    unseen = {}, {}, None
    if champion:   # the champion's run read 11-01..11-04 and was tested on 11-04, as compete records it
        before = datacheck.unseen_reference(days, DAYS[:4], DAYS[3])
        shares = stored.unseen({"test": [u for u, _ in files[days[-1]]], "before": [u for u, _ in files[before]]},
                               champion)
        unseen = shares["test"], shares["before"], before
    return datacheck.judge(stats, {}, [], DataCheckConfig(), *unseen).checks


def _summary(checks: list[datacheck.Check], mode: str, test_day: str = TEST) -> dict:
    """The night's summary of ``checks`` as ``judge`` leaves them: a day with a failed check quarantined."""
    verdicts = {c.day: {"verdict": datacheck.QUARANTINED if any(not o.passed for o in checks if o.day == c.day)
                        else datacheck.ACCEPTED, "by": datacheck.GATE} for c in checks}
    return datacheck.summary(datacheck.Judgment(checks, verdicts, []), mode, test_day)


def _one(checks, day: str, feature: str | None, check: str) -> datacheck.Check:
    [found] = [c for c in checks if (c.day, c.feature, c.check) == (day, feature, check)]
    return found


def _before_days(logs: Path) -> list[list[list[str]]]:
    """The rows of each day before the test day."""
    return [_rows(next((logs / d).glob("part-*"))) for d in DAYS[:-1]]


def test_drifting_synthetic_days_pass_every_check(logs, tmp_path):
    checks = _check(logs, tmp_path / "store")
    assert not datacheck.failed(checks), [c.text() for c in datacheck.failed(checks)]
    kinds = {c.check for c in checks}
    assert kinds == set(datacheck.CHECKS) - {"unseen"}   # (no champion)
    assert {c.day for c in checks} == set(DAYS[1:])   # the first day has no day before it
    assert {c.feature for c in checks if c.check == "missing" and c.day == TEST} == \
        {f"I{k}" for k in range(1, 14)} | {f"C{k}" for k in range(1, 27)}
    rows = _one(checks, TEST, None, "rows")   # each day against the days before it: the median of four
    assert (rows.value, rows.threshold) == (3000, [1500, 6000]) and "the median 3000 of the 4 accepted days before" in rows.text()


def test_a_day_with_all_labels_0_fails_the_label_rate_and_the_positives(logs, tmp_path):
    root = _faulty(logs, tmp_path, lambda rows: [["0", *r[1:]] for r in rows])
    checks = _check(root, tmp_path / "store")
    rate = statistics.median(sum(r[LABEL] == "1" for r in day) / len(day) for day in _before_days(logs))
    label = _one(checks, TEST, None, "label_rate")
    assert not label.passed and label.value == 0 and label.threshold == pytest.approx([rate * 0.5, rate * 1.5])
    assert label.text() == (f"day {TEST}: label_rate 0 outside [{rate * 0.5:.4g}, {rate * 1.5:.4g}] "
                            f"(the median {rate:.4g} of the 4 accepted days before +-50%)")
    positives = _one(checks, TEST, None, "min_positives")
    assert positives.text() == f"day {TEST}: min_positives 0 < 10" and not positives.passed
    assert all(c.passed for c in checks if c.day != TEST)


def test_a_day_with_5_percent_of_the_rows_fails_the_rows_check(logs, tmp_path):
    root = _faulty(logs, tmp_path, lambda rows: rows[:150])
    checks = _check(root, tmp_path / "store")
    rows = _one(checks, TEST, None, "rows")
    assert rows.text() == f"day {TEST}: rows 150 outside [1500, 6000] (0.5x-2x the median 3000 of the 4 accepted days before)"


def _renamed(value: str) -> str:
    """Another id for a categorical value (the same distribution, none of its ids)."""
    return hashlib.sha1(value.encode()).hexdigest()[:8] if value else value


def test_a_replaced_categorical_fails_its_drift_and_unseen_checks(logs, tmp_path):
    c = CATS[5]   # C6
    root = _faulty(logs, tmp_path, lambda rows: [[*r[:c], _renamed(r[c]), *r[c + 1:]] for r in rows])
    store = tmp_path / "store"
    champion = run(PreprocessConfig(inputs=_inputs(root, DAYS[:-1]), out=str(store), progress=False))  # up to 11-04
    checks = _check(root, store, champion=champion)
    days = [[r[c] for r in day if r[c]] for day in _before_days(logs)]
    before = [v for day in days for v in day]
    today = [r[c] for r in _rows(next((root / TEST).glob("part-*"))) if r[c]]
    top = max(set(before), key=before.count)   # gone from the day; renamed, it is new there
    gaps = {int(top, 16): statistics.median(day.count(top) / len(day) for day in days),
            int(_renamed(top), 16): today.count(_renamed(top)) / len(today)}
    drift = _one(checks, TEST, "C6", "drift")
    assert not drift.passed and drift.value == pytest.approx(max(gaps.values()))
    assert drift.text() == (f"day {TEST}, feature C6: drift {drift.value:.4g} > 0.1 (largest change of a top-20 "
                            f"value's share against the median of the 4 accepted days before, at value "
                            f"{max(gaps, key=gaps.get)})")
    unseen = _one(checks, TEST, "C6", "unseen")   # against 11-04, which the champion never trained on
    assert not unseen.passed and unseen.value == 1.0 and "on 2026-11-04 + 0.2" in unseen.text()
    assert [f.feature for f in datacheck.failed(checks)] == ["C6", "C6"]


def test_a_numerical_shift_fails_its_psi(logs, tmp_path):
    i = INTS[4]   # I5
    root = _faulty(logs, tmp_path, lambda rows: [[*r[:i], str(int(r[i]) * 10) if r[i] else "", *r[i + 1:]]
                                                 for r in rows])
    checks = _check(root, tmp_path / "store")
    psi = _one(checks, TEST, "I5", "psi")
    assert not psi.passed and psi.value > 0.5   # 0.72: the zeros stay
    assert psi.text() == (f"day {TEST}, feature I5: psi {psi.value:.4g} > 0.2 (PSI over fixed bins against the median "
                          "of the 4 accepted days "
                        "before)")
    assert [f.feature for f in datacheck.failed(checks)] == ["I5"]


def test_a_missing_share_jump_fails_the_missing_check(logs, tmp_path):
    i, c = INTS[1], CATS[2]   # I2 (never missing), C3
    root = _faulty(logs, tmp_path, lambda rows: [[*r[:i], "" if k % 2 else r[i], *r[i + 1:c], "" if k % 3 else r[c],
                                                  *r[c + 1:]] for k, r in enumerate(rows)])
    checks = _check(root, tmp_path / "store")
    test = _rows(next((root / TEST).glob("part-*")))
    for name, col in (("I2", i), ("C3", c)):
        share = sum(not r[col] for r in test) / len(test)
        theirs = statistics.median(sum(not r[col] for r in day) / len(day) for day in _before_days(logs))
        found = _one(checks, TEST, name, "missing")
        assert not found.passed and found.value == pytest.approx(share)
        assert found.text() == (f"day {TEST}, feature {name}: missing {share:.4g} outside "
                                f"[{max(0, theirs - 0.1):.4g}, {theirs + 0.1:.4g}] (the median {theirs:.4g} of the 4 accepted "
                                "days before "
                                "+-0.1)")
    assert {f.feature for f in datacheck.failed(checks)} == {"I2", "C3"}


def test_real_criteo_rows_split_into_days_pass(tmp_path):
    lines = gzip.decompress(need(CRITEO_10K).read_bytes()).decode().splitlines(keepends=True)
    root = tmp_path / "criteo"
    for k, day in enumerate(DAYS):   # 2,000 rows a day
        (root / day).mkdir(parents=True)
        (root / day / "part-0.tsv").write_text("".join(lines[2000 * k:2000 * (k + 1)]))
    champion = run(PreprocessConfig(inputs=_inputs(root, DAYS[:-1]), out=str(tmp_path / "store"), progress=False))
    checks = _check(root, tmp_path / "store", champion=champion)
    assert not datacheck.failed(checks), [c.text() for c in datacheck.failed(checks)]
    assert {c.check for c in checks if c.day == TEST} >= {"unseen", "drift", "psi", "missing"}


def test_a_failed_check_in_warn_mode_keeps_the_champion(tmp_path):
    failed = datacheck.Check(TEST, "I5", "psi", 1.7, "<=", 0.2, False, "PSI over fixed bins against the 4 days before")
    summary = _summary([failed, datacheck.Check(TEST, None, "rows", 3000, "in", [1500, 6000], True)], "warn")
    refusal = f"gate data_check: 1 data check(s) failed ({failed.text()})"
    model = registry.model_uri(str(tmp_path), "m")
    metrics = {"auc": 0.7, "logloss": 0.45, "rows": 3000, "positives": 750, "base_logloss": 0.56, "calibration": 1.0,
               "fingerprint": "f"}

    def night(date: str, auc: float, checks: dict | None, champion: dict | None = None) -> dict:
        return registry.record(model, {"run": f"{tmp_path}/runs/{date}", "step": 1, "dataset": "d", "vocab": "d/vocab",
                                       "date": date, "window": [date], "metrics": metrics | {"auc": auc}},
                               champion, f"{tmp_path}/runs/2026-11-05", data_checks=checks,
                               failed_checks=tuple(datacheck.refusals(checks)))

    first = night("2026-11-04", 0.7, summary)   # a first champion is refused too
    assert first["decision"] == "kept" and registry.load_champion(model) is None
    assert first["reason"].endswith(f"fails {refusal}")
    assert first["data_checks"]["failed"] == [failed.row()] and first["data_checks"]["on_data_check"] == "warn"
    assert night("2026-11-05", 0.7, _summary([], "warn"))["decision"] == "first"
    better = night("2026-11-06", 0.8, summary, metrics)   # better than the champion on the same rows, but
    assert better["decision"] == "kept" and better["reason"].startswith(f"champion kept: {refusal}; log loss")
    assert registry.load_champion(model).date == "2026-11-05"
    unknown = night("2026-11-07", 0.8, summary)   # no metrics of the champion on that day
    assert unknown["reason"].endswith(f"champion kept; {refusal}")
    nan = decide({"auc": float("nan"), "logloss": 0.2}, None, failed_checks=[failed.text()])   # e.g. all labels 0
    assert nan == ("kept", f"no champion yet, but the challenger's metrics are not finite (AUC nan, log loss 0.2000): "
                           f"not promoted; {refusal}")


def test_a_night_failed_on_data_is_recorded_once_and_decides_nothing(tmp_path):
    model = registry.model_uri(str(tmp_path), "m")
    summary = _summary([datacheck.Check(TEST, None, "rows", 150, "in", [1500, 6000], False)], "fail")
    line = registry.record_data_failed(model, TEST, DAYS, summary, "1 data check(s) failed: ...")
    assert registry.record_data_failed(model, TEST, DAYS, summary, "1 data check(s) failed: ...") == line
    assert registry.history(model) == [line] and line["decision"] == registry.DATA_FAILED
    assert registry.decided_dates(model) == [] and registry.windows_in_use(str(tmp_path)) == {"m": DAYS[0]}


def test_the_unseen_shares_are_compared_with_the_newest_day_the_champion_never_trained_on():
    assert datacheck.unseen_reference(DAYS, DAYS[:4], DAYS[3]) == DAYS[3]   # its own test day, the val day now
    assert datacheck.unseen_reference(DAYS, ["2026-10-30", "2026-10-31", DAYS[0]], DAYS[0]) == DAYS[3]
    assert datacheck.unseen_reference(DAYS, DAYS, TEST) is None   # not older than the test day
    assert datacheck.unseen_reference(DAYS[3:], DAYS[:5], "2026-11-06") is None


def test_psi_and_top_distance():
    assert datacheck.psi({"0": 500, "4": 500}, {"0": 500, "4": 500}) == 0
    assert datacheck.psi({"0": 900, "4": 100}, {"0": 100, "4": 900}) > 1
    assert datacheck.top_distance({1: 60, 2: 40}, 100, {1: 50, 3: 50}, 100, 20) == (pytest.approx(0.5), 3)


def test_drift_by_night_is_drawn_from_the_history():
    from models.plots import data_drift_png

    def line(date: str, value: float | None) -> dict:
        checks = [datacheck.Check(date, "C1", "drift", value, "<=", 0.1, value <= 0.1),
                  datacheck.Check(date, "I1", "psi", value * 2, "<=", 0.2, True)] if value is not None else []
        return {"date": date, "decision": "kept", "data_checks": _summary(checks, "warn", date) if checks else None}

    for lines in ([line("2026-11-04", 0.02), line("2026-11-05", None), line("2026-11-06", 0.3)], []):
        png = data_drift_png(lines, "ctr")
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
