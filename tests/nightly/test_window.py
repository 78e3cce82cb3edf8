"""Dated inputs and rolling windows (nightly/window.py) and the pipeline settings they exclude."""

import datetime as dt

import pytest

from common.errors import UserError
from nightly.config import PipelineConfig
from nightly.config import WindowConfig
from nightly.window import run_date, window
from preprocessing.dated import day_of, fill_date

D = dt.date(2026, 11, 8)


def _days(root, *days, name="part-0.tsv"):
    for day in days:
        folder = root / day.isoformat()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x\n")


def test_templates_resolve_iso_and_strftime_forms():
    assert fill_date("s3://logs/{date}/part-*.gz", D) == "s3://logs/2026-11-08/part-*.gz"
    assert fill_date("/logs/{date:%Y/%m/%d}/x-{date:%Y%m%d}.tsv", D) == "/logs/2026/11/08/x-20261108.tsv"
    with pytest.raises(UserError, match=r"\{day\}.*Fix"):
        window(["/logs/{day}/*"], D, WindowConfig(train_days=3))
    with pytest.raises(UserError, match="no strftime field"):
        window(["/logs/{date:YYYY}/*"], D, WindowConfig(train_days=3))


def test_run_date_from_the_schedule_in_its_time_zone_minus_the_lag():
    scheduled = dt.datetime(2026, 11, 23, 23, 30, tzinfo=dt.timezone.utc)   # 00:30 next day in Berlin
    assert run_date(None, scheduled, WindowConfig()) == dt.date(2026, 11, 22)
    assert run_date(None, scheduled, WindowConfig(timezone="Europe/Berlin")) == dt.date(2026, 11, 23)
    assert run_date(None, scheduled, WindowConfig(lag_days=0)) == dt.date(2026, 11, 23)
    assert run_date("2026-11-20", scheduled, WindowConfig()) == dt.date(2026, 11, 20)
    with pytest.raises(UserError, match="YYYY-MM-DD"):
        run_date("20/11/2026", None, WindowConfig())


def test_window_trains_before_the_date_validates_on_the_last_days_and_tests_on_the_date(tmp_path):
    _days(tmp_path, *(D - dt.timedelta(days=k) for k in range(5)))
    w = window([str(tmp_path / "{date}" / "part-*")], D, WindowConfig(train_days=4, val_days=1))
    assert w.train == (dt.date(2026, 11, 4), dt.date(2026, 11, 5), dt.date(2026, 11, 6))
    assert w.val == (dt.date(2026, 11, 7),) and w.date == D
    inputs = w.inputs()
    assert inputs[0] == f"train={tmp_path}/2026-11-04/part-*" and inputs[-1] == f"test={tmp_path}/2026-11-08/part-*"
    assert [i.split("=")[0] for i in inputs] == ["train"] * 3 + ["val", "test"]
    assert w.owns(f"{tmp_path}/2026-11-05/part-0.tsv") == dt.date(2026, 11, 5)
    assert w.owns(f"{tmp_path}/other/part-0.tsv") is None


def test_a_missing_day_fails_before_any_work_naming_the_date_and_uri_unless_min_days_allows(tmp_path):
    _days(tmp_path, D, D - dt.timedelta(days=1), D - dt.timedelta(days=3))
    template = str(tmp_path / "{date}" / "part-*")
    with pytest.raises(UserError, match=rf"2026-11-06 \({tmp_path}/2026-11-06/part-\*\).*--min-days"):
        window([template], D, WindowConfig(train_days=3))
    w = window([template], D, WindowConfig(train_days=3, min_days=2))
    assert w.train == (dt.date(2026, 11, 5),) and w.val == (dt.date(2026, 11, 7),)
    assert w.missing == ((dt.date(2026, 11, 6), f"{tmp_path}/2026-11-06/part-*"),)
    with pytest.raises(UserError, match="test day 2026-11-09"):
        window([template], D + dt.timedelta(days=1), WindowConfig(train_days=3, min_days=2))


def test_a_date_whose_window_starts_before_year_one_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"window for 0001-01-02 would start 3 days before it, before the first date "
                                        r"there is \(0001-01-01\)\. Fix: pass a later --date"):
        window([str(tmp_path / "{date}" / "part-*")], dt.date(1, 1, 2), WindowConfig(train_days=3))


def test_day_of_reads_the_date_back_from_a_file_of_the_template():
    assert day_of(["s3://b/{date:%Y/%m/%d}/p-*.gz"], "s3://b/2026/11/05/p-1.gz") == dt.date(2026, 11, 5)
    assert day_of(["s3://b/{date:%Y/%m/%d}/p-*.gz"], "s3://b/2026/11/05/q-1.gz") is None
    assert day_of(["/a/{date}/*"], "/a/not-a-date/x") is None


@pytest.mark.parametrize("settings, message", [
    ({"preprocess": {"inputs": ["/l/{date}/*"], "split": "ordered:train=0.8,test=0.2"},
      "window": {"train_days": 3}}, "--split .* dated run"),
    ({"preprocess": {"inputs": ["train=/l/{date}/*"]}, "window": {"train_days": 3}}, "maps files to a split"),
    ({"preprocess": {"inputs": ["/l/all/*"]}, "window": {"train_days": 3}}, "no {date} placeholder"),
    ({"model": "ctr"}, "not dated"),
])
def test_settings_a_dated_run_cannot_combine_fail_clearly(settings, message):
    with pytest.raises(UserError, match=message):
        PipelineConfig.model_validate(settings).check_dated()


def test_window_settings_are_checked():
    with pytest.raises(ValueError, match="must exceed val_days"):
        WindowConfig(train_days=2, val_days=2)
    with pytest.raises(ValueError, match="time zone"):
        WindowConfig(timezone="Mars/Olympus")
    with pytest.raises(ValueError, match="pattern"):
        PipelineConfig(model="bad name/..")
