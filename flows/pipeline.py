"""The pipeline flow: a straight line of tasks and subflows under one store: set up -> [synthesize] -> preprocess ->
[check the days] -> the run's settings -> train -> evaluate [-> compete -> gc]. What each decides is
``nightly.night``'s (Prefect-free); the flow adds the schedule, logs, artifacts and events.

A run may be for a date (inputs with ``{date}``, or a window of synthetic days): its days pass the data gate after
preprocessing (``flows.datacheck``; a day whose own file fails its parse is quarantined too), it trains on the window
of days before the date, tests on the date, and with a model name competes with that model's champion
(``flows.promote``). A re-run finds finished work: the synthetic data, the dataset (by fingerprint), a completed
training run (or its checkpoints, to resume) are reused, and the log says so. A failed or crashed run emits an event
and notifies (``flows.events``); ``night.catchup: latest`` skips a scheduled night made stale by a newer one
(``nightly.night.skip_reason``)."""

from __future__ import annotations

import datetime as dt
import os
import tempfile

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from common.errors import UserError
from common.s3 import BLOCK_KEYS
from common.store import Store, filesystem
from flows import artifacts, assets, events, landed
from flows.datacheck import check_data, parse_failed
from flows.errors import transient, user_errors
from flows.evaluate import evaluate
from flows.preprocess import preprocess
from flows.gc import gc
from flows.promote import compete
from flows.train import train
from models import registry
from nightly import night
from nightly.config import PipelineConfig, PipelineSyntheticConfig
from nightly.night import RunSettings, Setup
from nightly.window import run_date
from synthetic.generator import METADATA_FILE, SynthConfig, generate, write_days


def use_credentials_block(name: str) -> None:
    """Load a Prefect Secret block holding ``{"AWS_ACCESS_KEY_ID": ..., ...}`` (keys from ``BLOCK_KEYS``)
    into this process's environment, where s3fs and the torchrun ranks find it."""
    from prefect.blocks.system import Secret

    try:
        value = Secret.load(name).get()
    except ValueError as e:
        raise UserError(f"credentials block '{name}': {e}. Fix: create a Secret block with that name.") from None
    if not isinstance(value, dict) or not set(value) <= set(BLOCK_KEYS):
        raise UserError(f"credentials block '{name}' must be a JSON object with keys among {', '.join(BLOCK_KEYS)}.")
    os.environ.update({k: str(v) for k, v in value.items()})


@task(cache_policy=NONE, retries=2, retry_delay_seconds=5, retry_condition_fn=transient)  # remote writes
@user_errors
def synthesize(store: Store, options: PipelineSyntheticConfig, days: tuple[dt.date, ...] | None = None) -> None:
    """Synthetic Criteo logs in ``synthetic_inputs``' folder (reused when complete); with ``days``, those
    days of drifting synthetic logs, one folder per day."""
    if days:
        _synthesize_days(store, options, days)
        return

    folder = store.synthetic_uri(options.rows, options.seed)
    fs, path = filesystem(folder)
    if fs.exists(f"{path}/{METADATA_FILE}"):
        get_run_logger().info("synthetic data already complete, reusing: %s", folder)
        return
    with tempfile.TemporaryDirectory() as local:  # generated locally, then uploaded, the metadata last
        generate(local, rows=options.rows, files=options.files, seed=options.seed)
        fs.makedirs(path, exist_ok=True)
        for name in sorted(os.listdir(local), key=lambda n: n == METADATA_FILE):
            fs.put_file(os.path.join(local, name), f"{path}/{name}")
    get_run_logger().info("synthetic data written: %d rows in %s", options.rows, folder)


def _synthesize_days(store: Store, options: PipelineSyntheticConfig, days: tuple[dt.date, ...]) -> None:
    folder = store.synthetic_days_uri(options.rows, options.seed)
    write_days(SynthConfig(out=folder, days=(days[-1] - days[0]).days + 1, start=days[0],
                                     rows_per_day=options.rows, files=options.files, seed=options.seed))
    get_run_logger().info("synthetic days %s..%s in %s (%d rows a day)", days[0], days[-1], folder, options.rows)


def due_nights(config: PipelineConfig) -> list[dt.date]:
    """The days of this deployment's other unfinished scheduled runs whose time has come (none outside a
    deployment): what ``catchup: latest`` weighs a scheduled night against."""
    from prefect import get_client
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterDeploymentId,
                                                FlowRunFilterExpectedStartTime, FlowRunFilterState,
                                                FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType
    from prefect.runtime import deployment, flow_run

    if config.night.catchup == "all" or not deployment.id:
        return []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            deployment_id=FlowRunFilterDeploymentId(any_=[deployment.id]),
            state=FlowRunFilterState(type=FlowRunFilterStateType(
                any_=[StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING])),
            expected_start_time=FlowRunFilterExpectedStartTime(before_=dt.datetime.now(dt.timezone.utc))))
    return [run_date(None, r.expected_start_time, config.window) for r in runs
            if str(r.id) != flow_run.id and not (r.parameters or {}).get("date")]


def set_up(config: PipelineConfig, store: Store, day: dt.date | None,
           left_out: dict[dt.date, str] | None = None) -> Setup:
    """The run's setup (``nightly.night.set_up``; ``left_out``: days the data gate quarantined now), the
    model's records checked before any work. In the flow's own body, as ``run_settings``: a setting that cannot work
    is the flow's one error line, no task's."""
    setup = night.set_up(config, store, day, left_out)
    log = get_run_logger()
    for note in setup.notes:
        log.info(note)
    store.check()
    if setup.model:
        registry.check_records(setup.model)
    if setup.window:
        log.info(setup.window.describe())
    return setup


def preprocessed(config: PipelineConfig, store: Store, setup: Setup,
                 left_out: dict[dt.date, str]) -> tuple[Setup, str]:
    """The run's setup and its dataset (the ``preprocess`` subflow). A dated night whose preprocessing fails on one
    window day's own file has that day quarantined by the data gate (``flows.datacheck.parse_failed``: the test day
    fails the night) and is set up again without it (``left_out`` gets it), as for a day the checks quarantine."""
    while True:
        try:
            dataset = preprocess(setup.preprocess)
            assets.record(assets.preprocessed(setup, dataset))   # the days' parsed files, the dataset
            return setup, dataset
        except UserError as e:
            quarantined = parse_failed(setup, e)   # raises unless an older day of the window is to blame
            if set(quarantined) & set(left_out):   # left out already: never set up again in a loop
                raise
            left_out |= quarantined
        setup = set_up(config, store, setup.window.date, left_out)


def run_settings(setup: Setup, dataset: str) -> RunSettings:
    """The training run of the setup on its dataset (``Setup.training``), its pipeline.yaml written."""
    log = get_run_logger()
    run = setup.training(dataset, say=log.info)
    log.info("validation: %s", run.validation)
    run.write()
    return run


@flow(name="pipeline", log_prints=True, on_failure=[events.pipeline_failed], on_crashed=[events.pipeline_failed])
@user_errors
def pipeline(config: PipelineConfig = PipelineConfig(), date: dt.date | None = None) -> dict:
    """Preprocess, train and evaluate (for a dated run: on the window of days before `date`, tested on `date`,
    and promoted when it beats the champion); returns where everything is and the evaluation metrics.

    Args:
        config: Store, data, preprocessing, training and evaluation settings (defaults: synthetic data).
        date: The day a dated run tests on (it trains on the days before). Default: the run's scheduled day
            minus `window.lag_days`. Set it to backfill a day.
    """
    from prefect.runtime import flow_run

    log = get_run_logger()
    events.stage("setup")
    if config.credentials_block:
        use_credentials_block(config.credentials_block)
    store = Store(config.store)
    day = run_date(date, flow_run.scheduled_start_time, config.window) if config.dated else None
    if day:
        events.stage("setup", day.isoformat())
        if reason := landed.refused(config, store, day, date):   # the night ran: a duplicate event, the cron fallback
            log.info(reason)
            return {"store": store.uri, "date": day.isoformat(), "skipped": reason}
        if date is None and (reason := night.skip_reason(config, store, day, due_nights(config), events.flow_run_owner(),
                                                         say=log.info)):
            result = {"store": store.uri, "date": day.isoformat(), "skipped": reason}
            events.completed(config.model, result)
            return result
    setup = set_up(config, store, day)
    days = setup.window
    if setup.synthetic_inputs():
        events.stage("synthesize")
        synthesize(store, setup.config.synthetic, days.days if days else None, return_state=True).result()
    gate, left_out = None, {}
    events.stage("preprocess")
    setup, dataset = preprocessed(config, store, setup, left_out)
    days = setup.window
    while days and setup.config.night.on_data_check != "off":
        events.stage("data check")
        gate = check_data(setup, dataset, return_state=True).result()
        if not gate.left_out:
            break
        left_out |= gate.left_out   # days quarantined now: the night again without them (their parses are kept)
        events.stage("preprocess")
        setup, dataset = preprocessed(config, store, set_up(config, store, day, left_out), left_out)
        days = setup.window
    settings = run_settings(setup, dataset)
    run = settings.run
    events.stage("train")
    train(run.uri, dataset, settings.train, setup.config.launcher)
    events.stage("evaluate")
    metrics = evaluate(run.uri, setup.config.evaluate, setup.config.launcher)
    result = {"store": store.uri, "dataset": dataset, "run": run.uri,
              "evaluation": run.eval_dir(setup.config.evaluate.split), "metrics": metrics}
    if days:
        result["date"] = day.isoformat()
    artifacts.metrics_table(metrics, artifacts.PIPELINE_METRICS)
    artifacts.outputs({k: v for k, v in result.items() if k != "metrics"})
    if gate:
        result["data_checks"] = {"checks": gate.summary["checks"], "failed": len(gate.summary["failed"]),
                                 "left_out": gate.summary["left_out"]}
    if setup.model:
        events.stage("promote")
        result["decision"] = compete(setup, run, dataset, metrics, gate, return_state=True).result()
    if days:
        events.stage("gc")
        result["gc"] = gc(setup.config, store.uri, days)
    if unreadable := artifacts.runs(store.uri):   # after promotion and gc: a malformed run never blocks a model
        log.warning("runs table: %d run(s) of %s could not be read, listed as such: %s", len(unreadable),
                    store.uri, ", ".join(unreadable))
    events.completed(config.model, result)
    return result
