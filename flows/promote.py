"""After a dated run: the new model (challenger) against the named model's champion on the test day's raw rows
(``nightly.night.compete``: scored, decided and recorded by ``models.registry``), shown as artifacts."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from flows import artifacts, assets, events
from flows.errors import user_errors
from nightly import night
from nightly.night import DataGate, Setup
from training import RunDir


@task(cache_policy=NONE)
@user_errors
def compete(setup: Setup, run: RunDir, dataset: str, metrics: dict, gate: DataGate | None = None) -> dict:
    """The night's new model against its model's champion on the test day (``nightly.night.compete``), with the
    night's data gate (a failed check keeps the champion). Returns the history line, also shown as artifacts."""
    entry = night.compete(setup, run, dataset, metrics, gate, owner=events.flow_run_owner(),
                          say=get_run_logger().info)
    events.degraded(setup.config.model, entry, setup.config.night.notify_block, get_run_logger())
    artifacts.model_history(setup.model, setup.config.model, entry)
    assets.record(assets.promoted(setup.model, entry, setup.config.evaluate.split))   # bundle, champion
    if gate is not None:
        artifacts.data_drift(setup.model, setup.config.model)
    return entry
