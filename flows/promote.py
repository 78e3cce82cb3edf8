"""After a dated run: the new model (challenger) against the named model's champion on the test day's raw rows,
each with its own vocabulary; the better one is the champion (``flows.models`` records it under a lock). Then the
parsed parts of days no later window needs are removed."""

from __future__ import annotations

import datetime as dt

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from flows import artifacts, models
from flows.config import PipelineConfig
from flows.errors import user_errors
from flows.store import Store
from flows.window import Window
from training.rundir import RunDir


@task(cache_policy=NONE)
@user_errors
def compete(config: PipelineConfig, store: Store, days: Window, run: RunDir, dataset: str,
            metrics: dict) -> dict:
    """Score the champion on the test day, decide and record (promote or keep); returns the history entry."""
    raise NotImplementedError


def prune(config: PipelineConfig, store: Store, days: Window) -> list[str]:
    """Remove the stored parsed parts of the days before the next night's window (less ``retain_days``)."""
    from preprocessing import prune_file_parts

    cutoff = days.date + dt.timedelta(days=1 - config.window.train_days - config.window.retain_days)

    def old(uri: str) -> bool:
        day = days.owns(uri)
        return day is not None and day < cutoff

    removed = prune_file_parts(store.uri, old, work_dir=config.preprocess.work_dir)
    if removed:
        get_run_logger().info("removed the parsed parts of %d input file(s) older than %s", len(removed), cutoff)
    return removed
