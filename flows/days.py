"""The `days` flow: a model's days and the data gate's verdicts, in the UI (a form: list, accept or quarantine a
day, with why, or adopt a new normal since a day); ``nightly.days`` does the work, the flow shows the listing as a
table artifact."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows import artifacts
from flows.errors import user_errors
from nightly.config import DaysConfig
from nightly.days import run_days


@flow(name="days", log_prints=True)
@user_errors
def days(config: DaysConfig) -> list[dict]:
    """List a model's days and their verdicts, accept or quarantine one, or accept a new normal since one (who and why
    recorded).

    Args:
        config: The store, the model, what to do and, to accept, quarantine or accept a shift, the day and why.
    """
    rows = run_days(config, say=get_run_logger().info)
    artifacts.model_days(rows, config.model)
    return rows
