"""The data gate of a dated run, after preprocessing and before training: each day of the window against the days
before it (``nightly.datacheck``), from the profiles its parse stored per input file (no pass over the data).
Every night's checks go into a ``data-checks`` table artifact and the model's history; a failed check emits
``dlrmflow.data.check_failed`` and, with ``on_data_check: fail``, fails the night naming day, feature, check, value
and threshold (``warn``: the night trains, and ``compete`` refuses the promotion)."""

from __future__ import annotations

import datetime as dt

from prefect import get_run_logger, task
from prefect.cache_policies import NONE
from prefect.context import FlowRunContext

from common.errors import UserError
from common.store import Store
from flows import artifacts, events
from flows.config import PipelineConfig
from flows.errors import user_errors
from nightly import datacheck, registry
from nightly.window import Window
from preprocessing import PreprocessConfig
from preprocessing.profile import StoredProfiles

SHOWN = 5   # failed checks named in the error and the log (all are in the artifact and the history)


@task(cache_policy=NONE)
@user_errors
def check_data(config: PipelineConfig, store: Store, days: Window, preprocessing: PreprocessConfig,
               dataset: str | None = None) -> dict:
    """Check the window's days (``preprocessing``: the run's config, whose stored parts hold the profiles; ``dataset``
    its dataset, named in a failed night's history line); returns the night's ``datacheck.summary``, or raises a
    UserError when a check failed and ``on_data_check`` is fail."""
    log = get_run_logger()
    stored = StoredProfiles(preprocessing)
    files: dict[dt.date, list[tuple[str, dict | None]]] = {}
    for uri, profile in stored.profiles():
        if (day := days.owns(uri)) is not None:
            files.setdefault(day, []).append((uri, profile))
    unchecked = [d for d in days.days if any(p is None for _, p in files.get(d, [(None, None)]))]
    for day in unchecked:
        log.warning("data check: no stored profile for %s (its parsed parts were removed, or parsed before the data "
                    "gate): that day is not checked", day)
    checked = [d for d in days.days if d not in unchecked]
    stats = [datacheck.day_stats(d.isoformat(), [p for _, p in files[d]]) for d in checked]
    unseen = _unseen(config, store, days, stored, files, checked, log) if checked and checked[-1] == days.date \
        else ({}, {}, None)
    test_day = days.date.isoformat()
    checks = datacheck.check(stats, config.data_check, *unseen, test_day=test_day)
    summary = datacheck.summary(checks, config.on_data_check, test_day, [d.isoformat() for d in unchecked])
    artifacts.data_checks(checks, test_day)
    failed = datacheck.failed(checks)
    log.info("data check of %s: %d checks over %d days, %d failed", days.date, len(checks), len(stats), len(failed))
    if not failed:
        return summary
    texts = [c.text() for c in failed]
    for text in texts[:SHOWN]:
        log.warning("data check failed: %s", text)
    events.emit(events.DATA_CHECK_FAILED, config.model, {"date": days.date.isoformat(), "on_data_check":
                                                        config.on_data_check, "failed": len(failed),
                                                        "checks": summary["failed"][:20]})
    more = f"; and {len(texts) - SHOWN} more (the data-checks artifact lists them)" if len(texts) > SHOWN else ""
    reason = f"{len(failed)} data check(s) failed: {'; '.join(texts[:SHOWN])}{more}"
    if config.on_data_check == "warn":
        log.warning("on_data_check warn: the night trains, but its model is not promoted (%s)", reason)
        return summary
    if config.model:
        fr = FlowRunContext.get()
        owner = f"flow run {fr.flow_run.name}" if fr and fr.flow_run else None
        model = registry.model_uri(store.uri, config.model)
        registry.record_data_failed(model, days.date.isoformat(), [d.isoformat() for d in days.days], summary,
                                    reason, owner=owner, say=log.info, dataset=dataset)
        artifacts.model_history(model, config.model)
        artifacts.data_drift(model, config.model)
    raise UserError(f"the night {days.date}: {reason}. Fix: correct or replace those days' logs (a missing day is "
                    "left out of the window, down to --min-days), loosen the threshold (--data-check.*), or pass "
                    "--on-data-check warn to train without promoting.")


def _unseen(config: PipelineConfig, store: Store, days: Window, stored: StoredProfiles, files: dict,
            checked: list[dt.date], log) -> tuple[dict, dict, str | None]:
    """(the test day's unseen shares, those of the newest earlier day the champion never trained on, that day)
    by the champion's vocabulary; ({}, {}, None) without a champion older than the test day or such a day."""
    if not config.model:
        return {}, {}, None
    champion, _ = registry.usable_champion(registry.model_uri(store.uri, config.model), days.date.isoformat())
    if champion is None:
        return {}, {}, None
    before = datacheck.unseen_reference([d.isoformat() for d in checked], champion.window, champion.date)
    if before is None:
        log.info("data check: no day of the window before %s that the champion (tested on %s) never trained on: "
                 "no unseen check", days.date, champion.date)
        return {}, {}, None
    shares = stored.unseen({"test": [u for u, _ in files[days.date]],
                            "before": [u for u, _ in files[dt.date.fromisoformat(before)]]}, champion.dataset)
    return shares.get("test", {}), shares.get("before", {}), before
