"""The data gate (issue 19, section 5) on real preprocessing, no server: drifting synthetic days and the real Criteo
sample pass every check with the defaults; each injected fault fails its check, named by day, feature, check, value
and threshold, with the numbers the raw rows give; a failed check in `warn` mode keeps the champion. Issue 46 §1:
the reference is the model's history (days.jsonl's stats), a fresh model's first days judged against each other, a
chmod keeps a verdict, a lasting shift is a new normal (asked or adopted), a slow drift fails the long reference,
rows ingested twice fail the duplicates check, and the days command refuses what it cannot judge."""

from __future__ import annotations

import dataclasses
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


def _stored(root: Path, store: Path, days: list[str] = DAYS) -> tuple[StoredProfiles, dict[str, list]]:
    """The days preprocessed: their stored profiles, and day -> [(input URI, its profile)]."""
    config = PreprocessConfig(inputs=_inputs(root, days), out=str(store), progress=False)
    run(config)
    stored = StoredProfiles(config)
    files: dict[str, list] = {}
    for uri, profile in stored.profiles():
        files.setdefault(Path(uri).parent.name, []).append((uri, profile))
    return stored, files


def _stats(root: Path, store: Path, days: list[str] = DAYS) -> list[datacheck.DayStats]:
    """Each day's stats from its stored profiles, as the night sums them."""
    _, files = _stored(root, store, days)
    return [datacheck.day_stats(d, [p for _, p in files[d]]) for d in days]


def _check(root: Path, store: Path, days: list[str] = DAYS, champion: str | None = None) -> list[datacheck.Check]:
    """The window's checks as the pipeline makes them: preprocessing, then the stored profiles (and the stored
    counts against the champion's vocabulary for the unseen shares)."""
    stored, files = _stored(root, store, days)
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
    assert kinds == set(datacheck.CHECKS) - {"unseen", "rows_long", "label_rate_long"}   # no champion, no long past
    assert {c.day for c in checks} == set(DAYS)   # a fresh model's first days: judged against each other
    assert "5 days judged together, itself included" in _one(checks, DAYS[0], None, "rows").text()
    assert max(c.value for c in checks if c.check == "duplicates") < 0.02
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
        return registry.record(model, registry.NightRecord(
            {"run": f"{tmp_path}/runs/{date}", "step": 1, "dataset": "d", "vocab": "d/vocab", "date": date,
             "window": [date], "metrics": metrics | {"auc": auc}},
            champion_metrics=champion, champion_run=f"{tmp_path}/runs/2026-11-05", data_checks=checks,
            failed_checks=tuple(datacheck.refusals(checks))))

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
    assert nan[:2] == ("kept", f"no champion yet, but the challenger's metrics are not finite (AUC nan, log loss 0.2000): "
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


# --- issue 46 §1: the reference is the model's history -----------------------------------------------------------

def _day(stats: datacheck.DayStats, day: str, rate: float | None = None) -> datacheck.DayStats:
    """``stats`` as another day's (its positives set to ``rate`` of its rows, where given)."""
    positives = stats.positives if rate is None else round(stats.rows * rate)
    return dataclasses.replace(stats, day=day, positives=positives)


def _next(day: str, k: int = 1) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=k)).isoformat()


def _nights(stats: list[datacheck.DayStats], lines: list[dict], config: DataCheckConfig,
            window: int = 4) -> list[datacheck.Judgment]:
    """Each day of ``stats`` the test day of a night whose window is the ``window`` days up to it, the verdicts
    recorded in ``lines`` as the night records them (a quarantined day is left out of the windows after it)."""
    out = []
    for k, day in enumerate(stats):
        quarantined = {d for d, line in datacheck.History(lines).last.items() if line["verdict"] == "quarantined"}
        days = [d for d in stats[max(0, k - window + 1):k] if d.day not in quarantined] + [day]
        out.append(datacheck.judge(days, {}, lines, config, at="t"))
        lines += out[-1].new
    return out


def test_a_fresh_models_bad_first_day_is_the_one_quarantined_and_the_reference_is_the_history(logs, tmp_path):
    """A first window whose first day has 3x the click rate: that day is quarantined (judged with the others, the
    median of them), the good days after it are accepted; the next night judges its new day against the accepted
    days recorded in days.jsonl (their stats), the quarantined one no one's reference."""
    root = tmp_path / "logs"
    shutil.copytree(logs, root)
    first = next((root / DAYS[0]).glob("part-*"))
    rows = _rows(first)
    rate = sum(r[LABEL] == "1" for r in rows) / len(rows)
    first.write_text("".join("\t".join(["1" if k % 4 < 3 else r[0], *r[1:]]) + "\n" for k, r in enumerate(rows)))
    stats = _stats(root, tmp_path / "store")
    lines: list[dict] = []
    judged = datacheck.judge(stats, {}, lines, DataCheckConfig(), at="t")
    assert {d: v["verdict"] for d, v in judged.verdicts.items()} == {DAYS[0]: "quarantined"} | {
        d: "accepted" for d in DAYS[1:]}
    bad = _one(judged.checks, DAYS[0], None, "label_rate")
    assert not bad.passed and bad.value > 2.5 * rate and "5 days judged together, itself included" in bad.text()
    assert all(c.passed for c in judged.checks if c.day != DAYS[0])
    lines += judged.new
    assert all(line["stats"]["rows"] == 3000 for line in lines)   # what later nights judge against

    later = _day(stats[2], _next(TEST))   # the next night: only its new day is judged, against the history
    again = datacheck.judge([*stats[2:], later], {}, lines, DataCheckConfig(), at="t")
    assert [line["day"] for line in again.new] == [later.day] and again.new[0]["verdict"] == "accepted"
    rows_check = _one(again.checks, later.day, None, "rows")
    assert "the median 3000 of the 4 accepted days before" in rows_check.text()   # 11-02..11-05, not 11-01
    assert _one(again.checks, DAYS[2], None, "rows").passed   # a standing day's checks are shown too


def test_a_chmod_keeps_a_quarantined_days_verdict_a_new_content_does_not(logs, tmp_path):
    from preprocessing.inputs import expand

    part = tmp_path / "part-0"
    shutil.copy(next((logs / DAYS[0]).glob("part-*")), part)
    part.chmod(0o644)
    before = {f.uri: f.identity for f in expand([str(part)])}
    lines = [{"day": DAYS[0], "files": before, "verdict": "quarantined", "failed": [], "by": datacheck.GATE,
              "why": "label_rate", "at": "t"}]
    part.chmod(0o640)   # metadata only: the ctime changes (the parse's cache key), the content does not
    after = {f.uri: f.identity for f in expand([str(part)])}
    assert after != before and datacheck.standing(lines, DAYS[0], after) == lines[0]
    part.write_bytes(part.read_bytes()[:-100])   # new content: judged again
    assert datacheck.standing(lines, DAYS[0], {f.uri: f.identity for f in expand([str(part)])}) is None


@pytest.fixture(scope="module")
def normal(logs, tmp_path_factory) -> list[datacheck.DayStats]:
    """The five normal days' stats (one preprocessing for the tests that only read them)."""
    return _stats(logs, tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def shifted(logs, tmp_path_factory) -> list[datacheck.DayStats]:
    """Three real days whose click rate rose to about 1.9x (each row's label 1 one time in three, its own
    otherwise): a lasting shift."""
    root = tmp_path_factory.mktemp("shifted")
    for d in DAYS[1:4]:
        part = next((logs / d).glob("part-*"))
        (root / d).mkdir()
        (root / d / part.name).write_text("".join("\t".join(["1" if k % 3 == 0 else r[0], *r[1:]]) + "\n"
                                                  for k, r in enumerate(_rows(part))))
    config = PreprocessConfig(inputs=[f"{root}/{d}/part-*" for d in DAYS[1:4]],
                              out=str(tmp_path_factory.mktemp("store")), progress=False)
    run(config)
    profiles = dict(StoredProfiles(config).profiles())
    return [datacheck.day_stats(d, [p for u, p in profiles.items() if f"/{d}/" in u]) for d in DAYS[1:4]]


@pytest.mark.parametrize("on_shift", ["ask", "adopt"])
def test_a_lasting_shift_is_a_new_normal_adopted_or_asked(normal, tmp_path, shifted, on_shift):
    config = DataCheckConfig(on_shift=on_shift)
    lines: list[dict] = []
    nights = _nights(normal, lines, config)
    assert all(v["verdict"] == "accepted" for n in nights for v in n.verdicts.values())
    days = [_day(s, _next(TEST, k + 1)) for k, s in enumerate(shifted)]   # 11-06..11-08
    nights = _nights(days, lines, config)
    assert [n.verdicts[d.day]["verdict"] for n, d in zip(nights[:2], days)] == ["quarantined", "quarantined"]
    assert [n.shift for n in nights[:2]] == [None, None]   # two days: not yet a new normal
    shift = nights[2].shift
    assert shift == {"since": days[0].day, "days": [d.day for d in days], "on_shift": on_shift,
                     "adopted": on_shift == "adopt"}
    said = datacheck.shift_text(shift, "ctr")
    model = registry.model_uri(str(tmp_path / "store"), "ctr")
    registry.record_verdicts(model, lines)
    if on_shift == "ask":
        assert nights[2].verdicts[days[2].day]["verdict"] == "quarantined"
        assert f"dlrmflow days --model ctr accept-shift {days[0].day} --why" in said
        from nightly.config import DaysConfig
        from nightly.days import run_days

        run_days(DaysConfig(store=str(tmp_path / "store"), model="ctr", action="accept-shift", day=days[0].day,
                            why="the new ranking", by="ana"))
    else:
        assert nights[2].verdicts[days[2].day]["verdict"] == "accepted" and "adopted" in said
        assert [(line["day"], line["verdict"], line["new_normal"]) for line in nights[2].new] == [
            (d.day, "accepted", days[0].day) for d in days]
    lines = registry.day_verdicts(model)
    assert [line["verdict"] for line in datacheck.History(lines).last.values()] == ["accepted"] * 8
    after = _day(shifted[0], _next(TEST, 4))   # the days after: judged against the new normal alone
    judged = datacheck.judge([*days, after], {}, lines, config, at="t")
    assert judged.new[0]["verdict"] == "accepted" and judged.shift is None
    assert "of the 3 accepted days before" in _one(judged.checks, after.day, None, "label_rate").text()


def test_a_slow_fall_of_the_click_rate_is_caught_by_the_long_reference(normal):
    """20% fewer clicks a day: each day within +-50% of the median of the 3 before it, but not of the 10."""
    config = DataCheckConfig(reference_days=3, long_reference_days=10)
    history = [_day(normal[k % 5], _next(DAYS[0], k)) for k in range(10)]   # 11-01..11-10
    rate = statistics.median(d.positives / d.rows for d in history)
    falling = [_day(normal[k % 5], _next(DAYS[0], 10 + k), rate * 0.8 ** (k + 1)) for k in range(3)]
    lines: list[dict] = []
    nights = _nights(history + falling, lines, config)
    verdicts = [n.verdicts[d.day] for n, d in zip(nights[10:], falling)]
    assert [v["verdict"] for v in verdicts] == ["accepted", "quarantined", "quarantined"]
    assert [c["check"] for c in verdicts[1]["failed"]] == ["label_rate_long"]   # 0.64: the short band passes
    long = _one(nights[11].checks, falling[1].day, None, "label_rate_long")
    assert long.threshold == pytest.approx([rate * 0.7, rate * 1.3], rel=0.02)
    assert "of the 10 accepted days before +-30%" in long.text()


def test_rows_ingested_1_9x_fail_the_duplicates_check(logs, tmp_path):
    root = _faulty(logs, tmp_path, lambda rows: rows + rows[:int(len(rows) * 0.9)])
    checks = _check(root, tmp_path / "store")
    found = _one(checks, TEST, None, "duplicates")
    assert not found.passed and found.value == pytest.approx(0.9 / 1.9, abs=0.06)
    assert [c.check for c in datacheck.failed(checks)] == ["duplicates"]
    assert found.text().startswith(f"day {TEST}: duplicates {found.value:.4g} > ")


def test_the_days_command_refuses_unknown_models_and_days_never_judged(tmp_path):
    from common.errors import UserError
    from nightly.config import DaysConfig
    from nightly.days import run_days

    store = tmp_path / "store"
    registry.record_verdicts(registry.model_uri(str(store), "m"), [
        {"day": DAYS[0], "files": {"a": "1:2"}, "verdict": "quarantined", "failed": [], "by": datacheck.GATE,
         "why": "rows", "at": "t"}])

    def days(model: str, action: str, day: str) -> str:
        with pytest.raises(UserError) as refused:
            run_days(DaysConfig(store=str(store), model=model, action=action, day=day, why="w"))
        return str(refused.value)

    assert "model mm has no folder" in days("mm", "accept", DAYS[0]) and "Did you mean m?" in \
        days("mm", "accept", DAYS[0]) and not (store / "models" / "mm").exists()
    assert days("m", "accept", "2030-01-01").startswith("day 2030-01-01 (a day to come) of model ")
    assert "has no verdict yet" in days("m", "quarantine", DAYS[1])
    assert "not a day the data gate quarantined by its checks" in days("m", "accept-shift", DAYS[0])   # no stats
    assert len(registry.day_verdicts(registry.model_uri(str(store), "m"))) == 1
