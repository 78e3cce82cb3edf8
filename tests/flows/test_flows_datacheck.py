"""flows.datacheck.check_data's glue, no server: the window of a dated pipeline config, preprocessed for real, is
checked from its stored profiles; a failed check emits ``dlrmflow.data.check_failed`` and, with `fail`, fails the
night before training with day, check, value and threshold and records the night in the model's history; with
`warn` the night goes on (its summary goes to compete, which keeps the champion). A day whose parse fails on its own
file (``flows.datacheck.parse_failed``) is quarantined as well: its own night fails, later windows leave it out."""

from __future__ import annotations

import datetime as dt
import gzip
import logging
import shutil
from pathlib import Path

import pytest

from common.errors import UserError
from common.store import Store
from flows import datacheck as task_module
from flows import errors as flow_errors
from nightly.config import PipelineConfig
from nightly.night import set_up
from models import registry
from preprocessing import run
from preprocessing.errors import blame, blamed
from synthetic.generator import SynthConfig, write_days

DATE = dt.date(2026, 11, 5)


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    root = tmp_path_factory.mktemp("logs")
    write_days(SynthConfig(out=str(root), days=5, start="2026-11-01", rows_per_day=3000, seed=5, workers=1))
    return root


@pytest.fixture
def said(monkeypatch):
    """What the task tells: artifacts, events and log lines, kept."""
    told = {"events": [], "tables": [], "history": [], "warnings": []}
    log = logging.getLogger("test")
    monkeypatch.setattr(log, "warning", lambda msg, *a: told["warnings"].append(msg % a))
    monkeypatch.setattr(task_module, "get_run_logger", lambda: log)
    monkeypatch.setattr(flow_errors, "get_run_logger", lambda: log)   # where a failed task logs its error
    monkeypatch.setattr(task_module.events, "emit", lambda *a: told["events"].append(a))
    monkeypatch.setattr(task_module.artifacts, "data_checks", lambda checks, date, left_out=None: told["tables"].append(checks))
    monkeypatch.setattr(task_module.artifacts, "model_history", lambda *a: told["history"].append(a))
    monkeypatch.setattr(task_module.artifacts, "data_drift", lambda *a: None)
    return told


def _night(logs, tmp_path, mode: str = "fail"):
    config = PipelineConfig(store=str(tmp_path / "store"), model="ctr", window={"train_days": 4},
                            preprocess={"inputs": [f"{logs}/{{date}}/part-*"]}, on_data_check=mode)
    plan = set_up(config, Store(config.store), DATE)
    dataset = run(plan.preprocess)
    return lambda: task_module.check_data.fn(plan, dataset)


def test_normal_days_pass_and_every_check_is_shown(days, tmp_path, said):
    summary = _night(days, tmp_path)().summary
    [checks] = said["tables"]
    assert summary["failed"] == [] and summary["checks"] == len(checks) > 100 and not said["events"]
    assert {c["day"] for c in summary["test_day"]} == {DATE.isoformat()}
    assert registry.history(registry.model_uri(str(tmp_path / "store"), "ctr")) == []


@pytest.fixture
def no_labels(days, tmp_path):
    """The days with a test day whose labels are all 0."""
    logs = tmp_path / "logs"
    shutil.copytree(days, logs)
    part = next((logs / DATE.isoformat()).glob("part-*"))
    part.write_text("".join("0" + line[1:] for line in part.read_text().splitlines(keepends=True)))
    return logs


def test_a_failed_check_fails_the_night_and_is_recorded(no_labels, tmp_path, said):
    state = _night(no_labels, tmp_path)()   # the task fails with the UserError (flows.errors.user_errors)
    assert state.is_failed() and isinstance(state.data, UserError)
    message = state.message
    assert message.startswith(f"the night {DATE}: the test day {DATE} is quarantined: 2 data check(s) failed: day "
                              f"{DATE}: label_rate 0 outside [")
    assert f"day {DATE}: min_positives 0 < 10" in message and "--night.on-data-check warn" in message
    quarantined, (event, model, payload) = said["events"]
    assert quarantined[:2] == ("dlrmflow.data.day_quarantined", "ctr") and quarantined[2]["day"] == DATE.isoformat()
    assert (event, model, payload["failed"], payload["on_data_check"]) == \
        ("dlrmflow.data.check_failed", "ctr", 2, "fail")
    [line] = registry.history(registry.model_uri(str(tmp_path / "store"), "ctr"))
    assert line["decision"] == registry.DATA_FAILED and line["date"] == DATE.isoformat()
    assert (Path(line["dataset"]) / "_SUCCESS").is_file()   # named, so that gc removes it with its night
    assert [c["check"] for c in line["data_checks"]["failed"]] == ["label_rate", "min_positives"]
    assert line["reason"] in message and said["history"]


def test_a_gate_that_cannot_judge_records_its_night_as_failed(days, tmp_path, said):
    """Issue 46 §1: every night the gate stops writes its history line; one that cannot read the model's days.jsonl
    too (the flow's failure hook leaves the data check's stage to the gate)."""
    night = _night(days, tmp_path)
    model = registry.model_uri(str(tmp_path / "store"), "ctr")
    Path(model).mkdir(parents=True)
    (Path(model) / registry.DAYS_FILE).write_text("{not json\n")
    state = night()
    assert state.is_failed() and "days.jsonl line 1 is not JSON" in state.message
    [line] = registry.history(model)
    assert line["decision"] == registry.FAILED and line["reason"].startswith("failed at data check: ")
    assert "days.jsonl line 1 is not JSON" in line["reason"]


def test_warn_lets_the_night_go_on_with_the_failures(no_labels, tmp_path, said):
    summary = _night(no_labels, tmp_path, "warn")().summary
    assert [c["check"] for c in summary["failed"]] == ["label_rate", "min_positives"]
    assert summary["on_data_check"] == "warn" and len(said["events"]) == 2   # day_quarantined, check_failed
    assert registry.history(registry.model_uri(str(tmp_path / "store"), "ctr")) == []   # compete records it
    assert any("is not promoted" in w for w in said["warnings"])


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    """Nine drifting synthetic days, 11-01..11-09, 3000 rows each."""
    root = tmp_path_factory.mktemp("week")
    write_days(SynthConfig(out=str(root), days=9, start="2026-11-01", rows_per_day=3000, seed=7, workers=1))
    return root


def _labels_0(part: Path) -> None:
    part.write_text("".join("0" + line[1:] for line in part.read_text().splitlines(keepends=True)))


def _gate(logs, store, date: dt.date, **config):
    """A night's setup, preprocessing and data gate as the pipeline runs them (the task's body, no server)."""
    config = PipelineConfig(store=str(store), model="ctr", preprocess={"inputs": [f"{logs}/{{date}}/part-*"]},
                            window={"train_days": 3, "min_days": 2}, **config)
    plan = set_up(config, Store(config.store), date)
    state = task_module.check_data.fn(plan, run(plan.preprocess))
    return plan, state


def test_one_bad_day_is_judged_once_and_left_out_of_the_nights_after_it(week, tmp_path, said):
    """Issue 34's night: a day whose labels are all 0 fails its own night and only that one; the nights after it
    train without it on full windows (reaching back past it), naming it where it is left out, never blaming the
    good days; a re-uploaded
    (repaired) day is judged again; the operator's override stands; every verdict is recorded once."""
    logs = tmp_path / "logs"
    shutil.copytree(week, logs)
    bad = next((logs / "2026-11-05").glob("part-*"))
    good_bytes = bad.read_bytes()
    _labels_0(bad)
    store = tmp_path / "store"
    model = registry.model_uri(str(store), "ctr")

    plan, state = _gate(logs, store, dt.date(2026, 11, 5))   # its own night: the test day is quarantined
    assert state.is_failed() and state.message.startswith("the night 2026-11-05: the test day 2026-11-05 is "
                                                          "quarantined: 2 data check(s) failed: day 2026-11-05: "
                                                          "label_rate 0 outside [")
    assert "dlrmflow days --model ctr accept 2026-11-05" in state.message
    assert {v["day"]: v["verdict"] for v in registry.day_verdicts(model)} == {
        "2026-11-02": "accepted", "2026-11-03": "accepted", "2026-11-04": "accepted", "2026-11-05": "quarantined"}

    for day, train, val in ((6, ["2026-11-02", "2026-11-03"], ["2026-11-04"]),
                            (7, ["2026-11-03", "2026-11-04"], ["2026-11-06"]),
                            (8, ["2026-11-04", "2026-11-06"], ["2026-11-07"])):   # reached past, the windows full
        plan, gate = _gate(logs, store, dt.date(2026, 11, day))
        assert [d.isoformat() for d in plan.window.train] == train and [d.isoformat() for d in plan.window.val] == val
        assert not gate.failed and gate.summary["failed"] == [] and not gate.left_out
        assert list(gate.summary["left_out"]) == ["2026-11-05"]
        assert "label_rate 0 outside" in gate.summary["left_out"]["2026-11-05"]
        assert "past quarantined 2026-11-05 (day 2026-11-05: label_rate 0 outside" in plan.window.describe()
    lines = registry.day_verdicts(model)
    assert [v["day"] for v in lines] == ["2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05", "2026-11-06",
                                         "2026-11-07", "2026-11-08"]   # each day judged once
    assert all(v["verdict"] == "accepted" for v in lines if v["day"] != "2026-11-05")
    assert not any("2026-11-06" in w or "2026-11-07" in w for w in said["warnings"])   # no good day blamed

    bad.write_bytes(good_bytes)   # the repaired day re-uploaded: new files, judged again, accepted, read again
    plan, gate = _gate(logs, store, dt.date(2026, 11, 7))
    assert [d.isoformat() for d in plan.window.days] == ["2026-11-04", "2026-11-05", "2026-11-06", "2026-11-07"]
    assert [(v["day"], v["verdict"]) for v in registry.day_verdicts(model)][-1] == ("2026-11-05", "accepted")
    assert gate.summary["left_out"] == {}


def test_a_day_quarantined_mid_window_sets_the_night_up_again_and_an_operator_overrides(week, tmp_path, said):
    """A window day judged for the first time tonight (a first night) and quarantined is left out at once (the
    gate says so and the pipeline plans again); the operator's quarantine and acceptance stand (who and why
    recorded); a cut file re-uploaded in full is judged again."""
    logs = tmp_path / "logs"
    shutil.copytree(week, logs)
    part = next((logs / "2026-11-03").glob("part-*"))
    whole = part.read_bytes()
    part.write_bytes(b"".join(whole.splitlines(keepends=True)[:100]))   # cut: 100 of 3000 rows
    store = tmp_path / "store"
    model = registry.model_uri(str(store), "ctr")

    plan, gate = _gate(logs, store, dt.date(2026, 11, 5))   # first night: 11-02..11-04 and the test day judged now
    assert set(gate.left_out) == {dt.date(2026, 11, 3)} and "rows 100 outside" in gate.left_out[dt.date(2026, 11, 3)]
    assert not gate.failed   # the test day is fine: judged against the accepted days only
    replanned = set_up(plan.config, Store(str(store)), dt.date(2026, 11, 5))   # as the pipeline does
    assert [d.isoformat() for d in replanned.window.days] == ["2026-11-01", "2026-11-02", "2026-11-04",
                                                              "2026-11-05"]   # reached back past it

    part.write_bytes(whole)   # re-uploaded in full: judged again at the next night that reads it
    plan, gate = _gate(logs, store, dt.date(2026, 11, 6))
    assert dt.date(2026, 11, 3) in plan.window.days and gate.summary["left_out"] == {}
    assert [v["verdict"] for v in registry.day_verdicts(model) if v["day"] == "2026-11-03"] == ["quarantined",
                                                                                                 "accepted"]

    from nightly.config import DaysConfig
    from nightly.days import listing, run_days

    run_days(DaysConfig(store=str(store), model="ctr", action="quarantine", day="2026-11-04", why="bot traffic",
                        by="ana"))
    plan, gate = _gate(logs, store, dt.date(2026, 11, 6))
    assert dt.date(2026, 11, 4) not in plan.window.days
    assert gate.summary["left_out"]["2026-11-04"] == "bot traffic; by operator ana"
    rows = {r["day"]: r for r in listing(model)}
    assert (rows["2026-11-04"]["verdict"], rows["2026-11-04"]["by"], rows["2026-11-04"]["why"]) == (
        "quarantined", "operator ana", "bot traffic")
    run_days(DaysConfig(store=str(store), model="ctr", action="accept", day="2026-11-04", why="checked: real",
                        by="ana"))
    plan, _ = _gate(logs, store, dt.date(2026, 11, 6))
    assert dt.date(2026, 11, 4) in plan.window.days



def _cut_gzip(folder: Path) -> bytes:
    """The day's file replaced by its gzip cut in the middle (an upload cut short); returns the file's bytes."""
    part = next(folder.glob("part-*"))
    whole = part.read_bytes()
    packed = gzip.compress(whole)
    part.unlink()
    (folder / f"{part.name}.gz").write_bytes(packed[:len(packed) // 2])
    return whole


def _preprocessed(logs, store, date: dt.date, **preprocess):
    """A night's setup and preprocessing as the pipeline runs them (``flows.pipeline.preprocessed``, no server): a
    failed parse goes to the gate (``flows.datacheck.parse_failed``: it raises for the test day and for any error
    not of one day's file), the night is set up again without the day it quarantined."""
    config = PipelineConfig(store=str(store), model="ctr", window={"train_days": 3, "min_days": 2},
                            preprocess={"inputs": [f"{logs}/{{date}}/part-*"], **preprocess})
    left_out: dict = {}
    plan = set_up(config, Store(config.store), date)
    while True:
        try:
            return plan, run(plan.preprocess), left_out
        except UserError as e:
            left_out |= task_module.parse_failed(plan, e)
        plan = set_up(config, Store(config.store), date, left_out)


def test_a_test_day_whose_parse_fails_fails_its_night_and_is_left_out_after_it(week, tmp_path, said):
    """Issue 34 §1 for a day whose parse fails (a gzip cut short): the gate quarantines it by its files (no profile
    to judge), its own night fails naming it, the next night trains without it saying so, and the day re-uploaded
    whole (new files) is judged again and read."""
    from nightly.days import listing

    logs = tmp_path / "logs"
    shutil.copytree(week, logs)
    whole = _cut_gzip(logs / "2026-11-05")
    [cut] = (logs / "2026-11-05").glob("*.gz")
    store = tmp_path / "store"
    model = registry.model_uri(str(store), "ctr")

    with pytest.raises(UserError) as failed:
        _preprocessed(logs, store, dt.date(2026, 11, 5))
    assert str(failed.value).startswith(f"the night 2026-11-05: the test day 2026-11-05 is quarantined: its parse "
                                        f"failed: {cut}: cannot be read (EOFError: ")
    assert "Later windows leave the day out until its files change" in str(failed.value)
    [line] = registry.day_verdicts(model)
    assert (line["day"], line["verdict"], line["by"]) == ("2026-11-05", "quarantined", "data gate")
    assert list(line["files"]) == [str(cut)] and line["why"].startswith(f"its parse failed: {cut}: cannot be read")
    assert [(e[0], e[2]["day"]) for e in said["events"]] == [("dlrmflow.data.day_quarantined", "2026-11-05")]
    [row] = listing(model)   # dlrmflow days
    assert (row["day"], row["verdict"], row["by"], row["why"]) == ("2026-11-05", "quarantined", "data gate",
                                                                   line["why"])

    plan, dataset, left_out = _preprocessed(logs, store, dt.date(2026, 11, 6))   # trains without it
    assert not left_out and [d.isoformat() for d in plan.window.days] == ["2026-11-02", "2026-11-03", "2026-11-04",
                                                                          "2026-11-06"]
    assert f"reached back to 2026-11-02 past quarantined 2026-11-05 (its parse failed: {cut}: " \
        in plan.window.describe()
    gate = task_module.check_data.fn(plan, dataset)
    assert not gate.failed and list(gate.summary["left_out"]) == ["2026-11-05"]   # what its history line records
    assert gate.summary["left_out"]["2026-11-05"] == f"{line['why']}; by data gate"

    cut.unlink()
    (logs / "2026-11-05" / cut.stem).write_bytes(whole)   # re-uploaded whole: new files, judged again, read
    plan, dataset, left_out = _preprocessed(logs, store, dt.date(2026, 11, 7))
    assert dt.date(2026, 11, 5) in plan.window.days and not left_out
    gate = task_module.check_data.fn(plan, dataset)
    assert gate.summary["left_out"] == {} and not gate.failed
    assert [(v["verdict"], v["by"]) for v in registry.day_verdicts(model) if v["day"] == "2026-11-05"] == [
        ("quarantined", "data gate"), ("accepted", "data gate")]


def test_an_older_day_whose_parse_fails_is_left_out_tonight_and_only_its_own_file_is_blamed(week, tmp_path, said):
    """A window day whose rows are malformed beyond --max-bad-fraction (or any of them under --on-bad-row error) is
    quarantined and the night set up again without it (it trains); an operator's acceptance of it stands, so its
    parse error comes back as it is; an error not of one day's file (or with the gate off) quarantines nothing."""
    from nightly.config import DaysConfig
    from nightly.days import run_days

    logs = tmp_path / "logs"
    shutil.copytree(week, logs)
    part = next((logs / "2026-11-03").glob("part-*"))
    lines = part.read_bytes().splitlines(keepends=True)
    part.write_bytes(b"".join(b"a\tb\n" if k % 10 == 0 else line for k, line in enumerate(lines)))   # 10% bad
    store = tmp_path / "store"
    model = registry.model_uri(str(store), "ctr")

    with pytest.raises(UserError) as raised:   # --on-bad-row error (the default): blamed on its first bad row
        run(set_up(PipelineConfig(store=str(store), window={"train_days": 3},
                                  preprocess={"inputs": [f"{logs}/{{date}}/part-*"]}),
                   Store(str(store)), dt.date(2026, 11, 5)).preprocess)
    assert blamed(raised.value) == str(part) and str(raised.value).startswith(f"{part}: line 1: ")

    plan, dataset, left_out = _preprocessed(logs, store, dt.date(2026, 11, 5), on_bad_row="skip")
    assert list(left_out) == [dt.date(2026, 11, 3)]
    assert left_out[dt.date(2026, 11, 3)].startswith(f"its parse failed: input file {part}: 300 of 3000 rows are "
                                                     "malformed (10.00%), more than --max-bad-fraction 0.001.")
    assert [d.isoformat() for d in plan.window.days] == ["2026-11-01", "2026-11-02", "2026-11-04", "2026-11-05"]
    assert any("2026-11-03 is quarantined" in w and "set up again without it" in w for w in said["warnings"])
    gate = task_module.check_data.fn(plan, dataset)
    assert not gate.failed and list(gate.summary["left_out"]) == ["2026-11-03"]
    assert {v["day"]: v["verdict"] for v in registry.day_verdicts(model)} == {
        "2026-11-01": "accepted", "2026-11-02": "accepted", "2026-11-03": "quarantined", "2026-11-04": "accepted",
        "2026-11-05": "accepted"}

    recorded = registry.day_verdicts(model)
    for error in (UserError(f"no space left on the device of {part}"),   # names the file, blames none
                  blame(UserError("bad"), str(part))):   # blames it, but the gate is off
        config = {"night": {"on_data_check": "off"}} if blamed(error) else {}
        off = set_up(PipelineConfig(store=str(store), model="ctr", window={"train_days": 3, "min_days": 2},
                                    preprocess={"inputs": [f"{logs}/{{date}}/part-*"]}, **config),
                     Store(str(store)), dt.date(2026, 11, 4))
        with pytest.raises(UserError) as raised:
            task_module.parse_failed(off, error)
        assert raised.value is error
    assert registry.day_verdicts(model) == recorded

    run_days(DaysConfig(store=str(store), model="ctr", action="accept", day="2026-11-03", why="read it", by="ana"))
    with pytest.raises(UserError) as again:   # accepted: read again, and its parse fails again as it is
        _preprocessed(logs, store, dt.date(2026, 11, 6), on_bad_row="skip")
    assert str(again.value).startswith(f"input file {part}: 300 of 3000 rows are malformed")
    assert registry.day_verdicts(model)[-1]["by"] == "operator ana"   # nothing recorded after the acceptance


def test_the_days_command_lists_and_overrides_in_one_line_errors(tmp_path):
    import subprocess

    from helpers.processes import run_dlrmflow

    store = tmp_path / "store"
    model = registry.model_uri(str(store), "ctr")
    registry.record_verdicts(model, [{"day": "2026-11-05", "files": {"a": "1:2"}, "verdict": "quarantined",
                                      "failed": [], "by": "data gate", "why": "label_rate 0", "at": "t"}])

    def days(*args: str) -> subprocess.CompletedProcess:
        return run_dlrmflow("days", "--model", "ctr", "--store", store, *args, timeout=120)

    listed = days()
    assert listed.returncode == 0 and "2026-11-05  quarantined  data gate" in listed.stdout, listed.stderr
    refused = days("accept", "2026-11-05")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "needs the day and why" in refused.stderr
    accepted = days("accept", "2026-11-05", "--why", "a sale", "--by", "ana")
    assert accepted.returncode == 0 and "day 2026-11-05 accepted by operator ana (a sale)" in accepted.stderr
    assert registry.day_verdicts(model)[-1]["files"] == {"a": "1:2"}   # the files the gate judged
    unknown = run_dlrmflow("days", "--model", "nope", "--store", store, timeout=120)
    assert unknown.returncode == 2 and "model nope has no folder" in unknown.stderr and "Traceback" not in unknown.stderr
