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


def test_a_quarantined_day_is_reached_past_and_the_window_stays_full(tmp_path):
    _days(tmp_path, *(D - dt.timedelta(days=k) for k in range(12)))
    template = str(tmp_path / "{date}" / "part-*")
    plain = window([template], D, WindowConfig(train_days=3))
    assert plain.days[0] == dt.date(2026, 11, 5) and not plain.reached and plain.next_start() == dt.date(2026, 11, 6)
    bad = {dt.date(2026, 11, 6): "label_rate 0 outside [0.1, 0.3]", dt.date(2026, 11, 3): "bot traffic"}
    w = window([template], D, WindowConfig(train_days=3), quarantined=bad)
    assert w.train == (dt.date(2026, 11, 4), dt.date(2026, 11, 5)) and w.val == (dt.date(2026, 11, 7),)
    assert w.quarantined == ((dt.date(2026, 11, 6), bad[dt.date(2026, 11, 6)]),) and w.reached   # 11-03: not needed
    assert w.describe() == ("window for 2026-11-08: train 2026-11-04..2026-11-05 (2 days), val 2026-11-07, test "
                            "2026-11-08; reached back to 2026-11-04 past quarantined 2026-11-06 (label_rate 0 outside "
                            "[0.1, 0.3])")
    assert w.next_start() == dt.date(2026, 11, 5)   # the next night reaches past 11-06 too: gc keeps 11-05's parts
    two = window([template], D, WindowConfig(train_days=3), quarantined=bad | {dt.date(2026, 11, 5): "rows 10"})
    assert two.days == (dt.date(2026, 11, 2), dt.date(2026, 11, 4), dt.date(2026, 11, 7), D)
    assert "reached back to 2026-11-02 past quarantined 2026-11-03 (bot traffic), 2026-11-05 (rows 10), 2026-11-06 (" \
        in two.describe()


def test_the_look_back_limits_how_far_a_window_reaches(tmp_path):
    _days(tmp_path, *(D - dt.timedelta(days=k) for k in range(12)))
    template = str(tmp_path / "{date}" / "part-*")
    assert WindowConfig(train_days=3).reach() == 10 and WindowConfig(train_days=3, lookback_days=4).reach() == 4
    bad = {dt.date(2026, 11, 7): "a", dt.date(2026, 11, 6): "b"}
    with pytest.raises(UserError) as short:
        window([template], D, WindowConfig(train_days=3, lookback_days=4), quarantined=bad)
    assert str(short.value) == (
        "the window for 2026-11-08 needs 3 of the 3 days before it, but found 2 back to 2026-11-04 (its look-back, "
        "--lookback-days 4): 2 quarantined: 2026-11-06 (b); 2026-11-07 (a). Fix: accept a quarantined day (dlrmflow "
        "days --model NAME accept DATE), raise --lookback-days, or lower --min-days.")
    w = window([template], D, WindowConfig(train_days=3, lookback_days=4, min_days=2), quarantined=bad)
    assert w.days == (dt.date(2026, 11, 4), dt.date(2026, 11, 5), D)   # min_days: the floor
    assert w.describe().endswith("reached back to 2026-11-04 past quarantined 2026-11-06 (b), 2026-11-07 (a); 2 of its "
                                 "3 days (looked back to 2026-11-04)")
    assert window([template], D, WindowConfig(train_days=3), quarantined=bad).days[0] == dt.date(2026, 11, 3)
    with pytest.raises(ValueError, match=r"lookback_days \(2\) is less than train_days \(3\)"):
        WindowConfig(train_days=3, lookback_days=2)


def test_a_missing_day_fails_unless_skip_missing_reaches_past_it(tmp_path):
    _days(tmp_path, *(D - dt.timedelta(days=k) for k in range(12) if k != 2))   # 11-06 missing (late, maybe)
    template = str(tmp_path / "{date}" / "part-*")
    uri = f"{tmp_path}/2026-11-06/part-*"
    with pytest.raises(UserError) as failed:
        window([template], D, WindowConfig(train_days=3), quarantined={dt.date(2026, 11, 7): "rows 10"})
    assert str(failed.value) == (
        f"the window for 2026-11-08 needs 3 of the 3 days before it, but found 2 back to 2026-11-04: 1 missing: "
        f"2026-11-06 ({uri}) and 1 quarantined: 2026-11-07 (rows 10). Fix: add the missing days' logs (or pass "
        "--skip-missing to reach back past them), accept a quarantined day (dlrmflow days --model NAME accept DATE), "
        "or lower --min-days.")
    w = window([template], D, WindowConfig(train_days=3, skip_missing=True))
    assert w.days == (dt.date(2026, 11, 4), dt.date(2026, 11, 5), dt.date(2026, 11, 7), D)
    assert w.missing == ((dt.date(2026, 11, 6), uri),)
    assert w.describe().endswith(f"; reached back to 2026-11-04 past missing 2026-11-06 ({uri})")
    held = window([template], D, WindowConfig(train_days=3, min_days=2))   # its place held: the window shrinks
    assert held.days == (dt.date(2026, 11, 5), dt.date(2026, 11, 7), D) and not held.reached
    assert held.describe().endswith(f"; missing days left out: 2026-11-06 ({uri}); 2 of its 3 days (looked back to "
                                    "2026-11-05)")
    assert held.next_start() == dt.date(2026, 11, 6)   # the late day may still come: its parts are not removed


def test_set_up_leaves_out_standing_verdicts_over_the_whole_look_back(tmp_path):
    from common.store import Store
    from models import registry
    from nightly import datacheck
    from nightly.night import set_up
    from preprocessing.inputs import expand

    _days(tmp_path / "logs", *(D - dt.timedelta(days=k) for k in range(12)))
    store = str(tmp_path / "store")
    verdicts = [datacheck.unparsed(day, {f.uri: f.identity for f in expand([str(tmp_path / "logs" / day / "*")])},
                                   "cut short") for day in ("2026-11-07", "2026-11-04")]   # by their files now
    registry.record_verdicts(registry.model_uri(store, "ctr"), verdicts)   # 11-04: before the plain window
    config = PipelineConfig(store=store, model="ctr", window={"train_days": 3},
                            preprocess={"inputs": [str(tmp_path / "logs" / "{date}" / "part-*")]})
    plan = set_up(config, Store(store), D)
    assert [d.isoformat() for d in plan.window.days] == ["2026-11-03", "2026-11-05", "2026-11-06", "2026-11-08"]
    assert [d.isoformat() for d, _ in plan.window.quarantined] == ["2026-11-04", "2026-11-07"]
    again = set_up(config, Store(store), D, {dt.date(2026, 11, 6): "rows 10"})   # the gate's verdict tonight
    assert [d.isoformat() for d in again.window.days] == ["2026-11-02", "2026-11-03", "2026-11-05", "2026-11-08"]


def test_a_warm_started_night_trains_only_on_the_days_its_champion_never_learned(tmp_path):
    """Issue 41: the window slides by a day, so a warm start re-learned the days its champion had trained on (each
    day learned twice along the models' line: its logits twice too sharp, its log loss worse than the click rate's).
    A warm-started night trains only on its days after the champion's last training day; its validation and test
    days stay; a re-run of the decided night reads the same days; `window` keeps the whole window."""
    from common.store import Store
    from helpers import stores
    from models import registry
    from nightly.night import set_up

    _days(tmp_path / "logs", *(D - dt.timedelta(days=k) for k in range(8)))
    store = str(tmp_path / "store")
    model = registry.model_uri(store, "ctr")
    run = stores.run(store, "night-07", stores.dataset(store, "d7"))
    champion = {"run": run, "step": 4, "dataset": f"{store}/datasets/d7", "vocab": f"{store}/datasets/d7/vocab",
                "date": "2026-11-07", "window": ["2026-11-04", "2026-11-05", "2026-11-06", "2026-11-07"],
                "metrics": stores.metrics(0.7)}   # trained on 11-04 and 11-05, validated on 11-06
    assert registry.record(model, registry.NightRecord(champion, export=stores.export_bundle))["decision"] == "first"
    config = PipelineConfig(store=store, model="ctr", window={"train_days": 3},
                            preprocess={"inputs": [str(tmp_path / "logs" / "{date}" / "part-*")]})

    plan = set_up(config, Store(store), D)
    assert [d.isoformat() for d in plan.window.train] == ["2026-11-06"]   # 11-05: the champion learned it
    assert [d.isoformat() for d in plan.window.val] == ["2026-11-07"]
    assert plan.window.next_start() == dt.date(2026, 11, 6)
    assert plan.window.describe() == ("window for 2026-11-08: train 2026-11-06, val 2026-11-07, test 2026-11-08; "
                                      "trains only on what the champion has not learned: 2026-11-05 left out (it "
                                      "trained on them)")
    assert [i.split("=")[0] for i in plan.preprocess.inputs] == ["train", "val", "test"]
    whole = config.model_copy(update={"promote": config.promote.model_copy(update={"warm_start_days": "window"})})
    assert [d.isoformat() for d in set_up(whole, Store(store), D).window.train] == ["2026-11-05", "2026-11-06"]
    cold = config.model_copy(update={"promote": config.promote.model_copy(update={"warm_start": False})})
    assert len(set_up(cold, Store(store), D).window.train) == 2

    tonight = {**champion, "run": stores.run(store, "night-08", stores.dataset(store, "d8")), "date": "2026-11-08",
               "window": [d.isoformat() for d in plan.window.days], "metrics": stores.metrics(0.8)}
    assert registry.record(model, registry.NightRecord(
        tonight, score_champion=lambda c: dict(c.metrics), export=stores.export_bundle))["decision"] == "promoted"
    assert set_up(config, Store(store), D).window == plan.window   # a re-run reads what the night read


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
