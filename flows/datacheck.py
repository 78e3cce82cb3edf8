"""The data gate of a dated run, after preprocessing and before training: each day of the window not judged before
against its reference in the model's history (``nightly.night.check_days``), from the profiles its parse stored per
input file (no pass over the data). Every night's checks go into a ``data-checks`` table artifact and the model's history;
a day quarantined now emits ``dlrmflow.data.day_quarantined`` (the pipeline sets the night up again without it); a
quarantined test day emits ``dlrmflow.data.check_failed`` and, with ``night.on_data_check: fail``, fails the night
naming day, feature, check, value and threshold (``warn``: the night trains, and ``compete`` refuses the
promotion). A day whose parse fails on its own file is quarantined as well (``parse_failed``): the test day fails
the night naming it, an older day is left out when the pipeline sets the night up again."""

from __future__ import annotations

import datetime as dt

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from common.errors import UserError
from flows import artifacts, events
from flows.errors import user_errors
from nightly import datacheck, night
from nightly.night import DataGate, Setup


@task(cache_policy=NONE)
@user_errors
def check_data(setup: Setup, dataset: str | None = None) -> DataGate:
    """Check the night's days (``dataset``: its dataset, named in a failed night's history line); returns the
    gate's verdict, or raises a UserError when a check failed and ``night.on_data_check`` is fail."""
    log = get_run_logger()
    config, days = setup.config, setup.window
    gate = night.check_days(setup, owner=events.flow_run_owner(), say=log.info)
    for line in gate.new:
        if line["verdict"] == datacheck.QUARANTINED:
            events.emit(events.DAY_QUARANTINED, config.model, {"day": line["day"], "why": line["why"],
                                                              "date": days.date.isoformat()})
    for day, why in gate.left_out.items():
        log.warning("data gate: day %s is quarantined (%s): the night is set up again without it", day, why)
    for day in gate.unchecked:
        log.warning("data check: no stored profile for %s (its parsed parts were removed, or parsed before the data "
                    "gate): that day is not checked", day)
    artifacts.data_checks(gate.checks, days.date.isoformat(), gate.summary["left_out"])
    log.info("data check of %s: %d checks over %d days, %d failed", days.date, len(gate.checks),
             len(days.days) - len(gate.unchecked), len(gate.failed))
    if not gate.failed:
        return gate
    for text in gate.refusals[:gate.SHOWN]:
        log.warning("data check failed: %s", text)
    mode = config.night.on_data_check
    events.emit(events.DATA_CHECK_FAILED, config.model, {"date": days.date.isoformat(), "on_data_check": mode,
                                                        "failed": len(gate.failed),
                                                        "checks": gate.summary["failed"][:20]})
    if mode == "warn":
        log.warning("on_data_check warn: the night trains, but its model is not promoted (%s)", gate.reason)
        return gate
    if setup.model:
        night.record_gate_failed(setup, gate, dataset, events.flow_run_owner(), say=log.info)
        artifacts.model_history(setup.model, config.model)
        artifacts.data_drift(setup.model, config.model)
    raise UserError(f"the night {days.date}: {gate.reason}. Fix: replace that day's logs (a changed file is judged "
                    f"again), accept it (dlrmflow days --model {config.model or 'NAME'} accept {days.date} --why "
                    "'...'), loosen the threshold (--data-check.*), or pass --night.on-data-check warn to train "
                    "without promoting.")


def parse_failed(setup: Setup, error: UserError) -> dict[dt.date, str]:
    """After the night's preprocessing failed with ``error``: the window day whose own input file it blames,
    quarantined by the data gate (``nightly.night.parse_failed``; ``dlrmflow.data.day_quarantined``), as day -> why
    (the pipeline sets the night up again without it); a test day so quarantined fails the night naming it. Any other
    error (not one day's file, the gate off, a day judged before) is raised again as it is."""
    failure = night.parse_failed(setup, error, owner=events.flow_run_owner(), say=get_run_logger().info)
    if failure is None:
        raise error
    events.emit(events.DAY_QUARANTINED, setup.config.model, {"day": failure.line["day"], "why": failure.line["why"],
                                                             "date": setup.window.date.isoformat()})
    if failure.reason:
        raise UserError(f"the night {setup.window.date}: {failure.reason}.")
    get_run_logger().warning("data gate: day %s is quarantined (%s): the night is set up again without it",
                             failure.day, failure.line["why"])
    return {failure.day: failure.line["why"]}
