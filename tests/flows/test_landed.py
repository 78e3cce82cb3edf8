"""The served pipeline's refusal of a second night for a day (issue 44 §3, ``flows.landed.refused``), in process: a
night the schedule starts (no date: the cron fallback) for a day the model's history holds ends at once; a person's
Run with the date re-runs it; a failed night and a model-less pipeline run. (The trigger's run: the served test.)"""

from __future__ import annotations

import datetime as dt

from common.store import Store
from flows.landed import refused, trigger
from models import registry
from nightly.config import PipelineConfig
from nightly.landing import once

D = dt.date(2026, 11, 5)


def test_the_cron_fallback_never_starts_a_second_night_for_a_day(tmp_path):
    store = Store(str(tmp_path / "store"))
    config = PipelineConfig(store=store.uri, model="demo", window={"train_days": 3},
                            preprocess={"inputs": [f"{tmp_path}/logs/{{date}}/part-*"]})
    model = registry.model_uri(store.uri, "demo")
    assert refused(config, store, D, None) is None   # nothing ran yet
    registry.record_failed(model, D.isoformat(), "preprocess", "the disk was full")
    assert refused(config, store, D, None) is None   # a failed night runs again: a retry
    ran = registry.record_data_failed(model, D.isoformat(), [D.isoformat()], {"checks": 1}, "the test day is bad",
                                      owner="flow run calm-otter (1234)")
    said = refused(config, store, D, None)   # the schedule's night of a day that ran
    assert said == once(model, D) and said.startswith(f"the night {D} already ran (data_failed by flow run calm-otter "
                                                      f"(1234) at {ran['at']}): ")
    assert refused(config, store, D, D) is None   # a person's Run with the date set re-runs it
    assert refused(config, store, D + dt.timedelta(days=1), None) is None
    assert refused(config.model_copy(update={"model": None}), store, D, None) is None   # no history: no refusal


def test_the_trigger_runs_the_pipeline_for_the_event_s_day():
    spec = trigger("demo", "dlrmflow-pipeline-demo")
    assert spec.expect == {"dlrmflow.day.landed"} and spec.parameters == {"date": "{{ event.payload.day }}"}
    assert spec.match.model_dump() == {"prefect.resource.id": "dlrmflow.model.demo"}
    assert spec.name == "dlrmflow-pipeline-demo: the day landed"
