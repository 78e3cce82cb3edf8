"""After a dated run: the new model (challenger) against the named model's champion on the test day's raw rows
(``nightly.night.compete``: scored, decided and recorded by ``models.registry``), shown as artifacts."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from flows import artifacts, assets, events
from flows.errors import user_errors
from nightly import night
from nightly.night import DataGate, NightPlan
from training import RunDir


@task(cache_policy=NONE)
@user_errors
def compete(planned: NightPlan, run: RunDir, dataset: str, metrics: dict, gate: DataGate | None = None) -> dict:
    """The night's new model against its model's champion on the test day (``nightly.night.compete``), with the
    night's data gate (a failed check keeps the champion). Returns the history line, also shown as artifacts."""
    entry = night.compete(planned, run, dataset, metrics, gate, owner=events.flow_run_owner(),
                          say=get_run_logger().info)
    events.degraded(planned.config.model, entry, planned.config.night.notify_block, get_run_logger())
    artifacts.model_history(planned.model, planned.config.model, entry)
    assets.record(assets.promoted(planned.model, entry, planned.config.evaluate.split))   # bundle, champion
    if gate is not None:
        artifacts.data_drift(planned.model, planned.config.model)
    return entry
