"""Overlapping nights (issue 19, section 3) at the config level, no server: a fixed run name on a dated
pipeline is refused before any work; two served models register distinct deployments."""

from __future__ import annotations

import datetime as dt

import pytest

from common.errors import UserError
from nightly.config import PipelineConfig
from flows.config import ServeConfig
from nightly.night import set_up
from common.store import Store

DATED = {"window": {"train_days": 3}, "preprocess": {"inputs": ["logs/{date}/part-*"]}}


def test_a_dated_pipeline_with_a_fixed_run_name_is_refused_before_any_work(tmp_path):
    config = PipelineConfig(store=str(tmp_path), run_name="nightly", **DATED)
    with pytest.raises(UserError, match=r"run_name 'nightly' is fixed, but the run is dated.*'nightly-\{date\}'"):
        set_up(config, Store(str(tmp_path)), dt.date(2026, 11, 2))
    assert not list(tmp_path.iterdir())
    with pytest.raises(UserError, match=r"holds \{date\}, but the run is not dated"):
        PipelineConfig(store=str(tmp_path), run_name="r-{date}").check_dated()


def test_a_dated_run_name_is_filled_per_night(tmp_path):
    config = PipelineConfig(run_name="ctr-{date}", **DATED)
    config.check_dated()
    store = Store(str(tmp_path / "s"))
    names = {config.run_id(store, store.dataset_uri("d-1"), config.train, dt.date(2026, 11, day)) for day in (2, 3)}
    assert names == {"ctr-2026-11-02", "ctr-2026-11-03"}
    assert PipelineConfig(run_name="fixed").run_id(store, store.dataset_uri("d-1"), PipelineConfig().train) == "fixed"


def test_two_served_models_register_distinct_deployments(tmp_path):
    from flows.deploy import deployments

    def names(model):
        pipeline = PipelineConfig(model=model, **DATED) if model else PipelineConfig()
        found = deployments(ServeConfig(store=str(tmp_path), pipeline=pipeline))
        return {(d.flow_name, d.name) for d in found}

    ctr, cvr = names("ctr"), names("cvr")
    assert not ctr & cvr and len(ctr) == len(cvr) == 9   # days too: a model's verdicts; day-landed: its sensor
    assert {("pipeline", "dlrmflow-pipeline-ctr"), ("day-landed", "dlrmflow-day-landed-ctr")} <= ctr
    off = ServeConfig(store=str(tmp_path), pipeline=PipelineConfig(model="ctr", **DATED), landing={"every_s": 0})
    assert len(deployments(off)) == 8   # the cron schedule only
    assert {n for _, n in names(None)} == {"dlrmflow-pipeline", "dlrmflow-preprocess", "dlrmflow-train",
                                          "dlrmflow-evaluate", "dlrmflow-score", "dlrmflow-tune",
                                          "dlrmflow-spec-draft"}
