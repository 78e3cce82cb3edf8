"""flows.datacheck.check_data's glue, no server: the window of a dated pipeline config, preprocessed for real, is
checked from its stored profiles; a failed check emits ``dlrmflow.data.check_failed`` and, with `fail`, fails the
night before training with day, check, value and threshold and records the night in the model's history; with
`warn` the night goes on (its summary goes to compete, which keeps the champion)."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from pathlib import Path

import pytest

from common.errors import UserError
from common.store import Store
from flows import datacheck as task_module
from flows import errors as flow_errors
from nightly.config import PipelineConfig
from nightly.night import plan_night
from models import registry
from preprocessing import run
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
    monkeypatch.setattr(task_module.artifacts, "data_checks", lambda checks, date: told["tables"].append(checks))
    monkeypatch.setattr(task_module.artifacts, "model_history", lambda *a: told["history"].append(a))
    monkeypatch.setattr(task_module.artifacts, "data_drift", lambda *a: None)
    return told


def _night(logs, tmp_path, mode: str = "fail"):
    config = PipelineConfig(store=str(tmp_path / "store"), model="ctr", window={"train_days": 4},
                            preprocess={"inputs": [f"{logs}/{{date}}/part-*"]}, on_data_check=mode)
    plan = plan_night(config, Store(config.store), DATE)
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
    assert message.startswith(f"the night {DATE}: 2 data check(s) failed: day {DATE}: label_rate 0 outside [")
    assert f"day {DATE}: min_positives 0 < 10" in message and "--on-data-check warn" in message
    [(event, model, payload)] = said["events"]
    assert (event, model, payload["failed"], payload["on_data_check"]) == \
        ("dlrmflow.data.check_failed", "ctr", 2, "fail")
    [line] = registry.history(registry.model_uri(str(tmp_path / "store"), "ctr"))
    assert line["decision"] == registry.DATA_FAILED and line["date"] == DATE.isoformat()
    assert (Path(line["dataset"]) / "_SUCCESS").is_file()   # named, so that gc removes it with its night
    assert [c["check"] for c in line["data_checks"]["failed"]] == ["label_rate", "min_positives"]
    assert line["reason"] in message and said["history"]


def test_warn_lets_the_night_go_on_with_the_failures(no_labels, tmp_path, said):
    summary = _night(no_labels, tmp_path, "warn")().summary
    assert [c["check"] for c in summary["failed"]] == ["label_rate", "min_positives"]
    assert summary["on_data_check"] == "warn" and len(said["events"]) == 1
    assert registry.history(registry.model_uri(str(tmp_path / "store"), "ctr")) == []   # compete records it
    assert any("is not promoted" in w for w in said["warnings"])
