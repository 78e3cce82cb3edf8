"""The pipeline flow: [synthetic data] -> preprocess -> train -> evaluate [-> champion vs challenger], as
subflows and tasks, all under one store.

A run may be for a date (inputs with ``{date}``, or a window of synthetic days): its days pass the data checks
after preprocessing (``flows.datacheck``), it trains on the window of days before the date, tests on the date, and
with a model name competes with that model's champion (``flows.promote``). A re-run finds finished work: the synthetic data, the dataset (by fingerprint), a
completed training run (or its checkpoints, to resume) are reused, and the log says so. A failed or crashed run
emits an event and notifies (``flows.events``); ``catchup: latest`` skips a scheduled night made stale by a newer
one (``nightly.window.catchup_skip``)."""

from __future__ import annotations

import datetime as dt
import os
import tempfile

import yaml
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from common.errors import UserError
from common.store import BLOCK_KEYS, Store, filesystem
from flows import artifacts, events
from flows.config import FlowTrainConfig, PipelineConfig, PipelineSyntheticConfig
from flows.datacheck import check_data
from flows.errors import transient, user_errors
from flows.evaluate import evaluate
from flows.preprocess import preprocess
from flows.gc import gc
from flows.promote import compete
from flows.train import train
from nightly import registry
from nightly.registry import model_uri
from nightly.window import Window, catchup_skip, run_date, window
from preprocessing import PreprocessConfig
from synthetic.generator import METADATA_FILE, SynthConfig, generate, write_days
from training.config import InitFrom
from training.rundir import RunDir


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


def synthetic_inputs(store: Store, options: PipelineSyntheticConfig, dated: bool = False) -> list[str]:
    """The input glob of the synthetic logs (written by ``synthesize``); a template with {date} for dated runs."""
    if dated:
        return [f"{store.synthetic_days_uri(options.rows, options.seed)}/{{date}}/part-*"]
    return [f"{store.synthetic_uri(options.rows, options.seed)}/part-*"]


def checked_preprocess_config(config: PipelineConfig, store: Store,
                              date: dt.date | None = None) -> tuple[PreprocessConfig, Window | None]:
    """The run's preprocessing config (synthetic inputs unless inputs are given; for a dated run the window's
    days as the `files` split rule) and the window, its split names checked against what training and
    evaluation use: a wrong split name, a bad template or a missing day fails before any work."""
    config.check_dated()
    inputs = config.preprocess.inputs or synthetic_inputs(store, config.synthetic, config.dated)
    days = None
    if config.dated:
        days = window(inputs, date, config.window, check=bool(config.preprocess.inputs))
        inputs = days.inputs()
    preprocess_config = config.preprocess_config(inputs, store.uri)
    config.check_splits(preprocess_config)
    return preprocess_config, days


def warm_started(config: PipelineConfig, store: Store, day: dt.date, log) -> FlowTrainConfig:
    """The training settings of a dated run: with a model and ``warm_start``, initialised from the champion (of an
    earlier day, of the same architecture; the run's name does not depend on it, so a re-run of the date finds the
    same run)."""
    if not (config.model and config.warm_start) or config.train.init_from:
        return config.train
    champion, absent = registry.usable_champion(model_uri(store.uri, config.model), day.isoformat())
    if absent:
        log.warning("no warm start from model %s: %s; training from scratch", config.model, absent)
    if champion is None or champion.date == day.isoformat():   # the same night's model: a re-run trains as the first
        return config.train
    arch = RunDir(champion.run).load_config().arch
    if arch != config.train.arch:   # e.g. a tuned config changed it: its weights do not fit this night's model
        log.warning("no warm start: the champion of model %s (%s) has another architecture than this night's "
                    "(%s vs %s; a tuned config may have changed it); training from scratch", config.model,
                    champion.run, arch.model_dump(exclude_defaults=True),
                    config.train.arch.model_dump(exclude_defaults=True))
        return config.train
    log.info("warm start from the champion of model %s: %s step %d (tested on %s)", config.model, champion.run,
             champion.step, champion.date)
    return config.train.model_copy(update={"init_from": InitFrom(run=champion.run, checkpoint=str(champion.step))})


def skip_reason(config: PipelineConfig, store: Store, day: dt.date, log) -> str | None:
    """Why this scheduled night is skipped under ``config.catchup`` (None: it runs), recorded in the model's
    history: the due nights are those of the deployment's other unfinished scheduled runs whose time has come."""
    from prefect import get_client
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterDeploymentId,
                                                FlowRunFilterExpectedStartTime, FlowRunFilterState,
                                                FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType
    from prefect.runtime import deployment, flow_run

    if config.catchup == "all":
        return None
    due = []
    if deployment.id:
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                deployment_id=FlowRunFilterDeploymentId(any_=[deployment.id]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(
                    any_=[StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING])),
                expected_start_time=FlowRunFilterExpectedStartTime(before_=dt.datetime.now(dt.timezone.utc))))
        due = [run_date(None, r.expected_start_time, config.window) for r in runs
               if str(r.id) != flow_run.id and not (r.parameters or {}).get("date")]
    model = model_uri(store.uri, config.model) if config.model else None
    decided = [dt.date.fromisoformat(d) for d in registry.decided_dates(model)] if model else []
    reason = catchup_skip(day, config.catchup, due, decided)
    if reason:
        log.info("night %s skipped (%s)", day, reason)
        if model:
            registry.record_skipped(model, day.isoformat(), reason, owner=f"flow run {flow_run.name}", say=log.info)
    return reason


@flow(name="pipeline", log_prints=True, on_failure=[events.night_failed], on_crashed=[events.night_failed])
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
    config, notes = config.with_preset()
    for note in notes:
        log.info(note)
    if config.credentials_block:
        use_credentials_block(config.credentials_block)
    store = Store(config.store)
    day = run_date(date, flow_run.scheduled_start_time, config.window) if config.dated else None
    if day:
        events.stage("setup", day.isoformat())
        if date is None and (reason := skip_reason(config, store, day, log)):
            result = {"store": store.uri, "date": day.isoformat(), "skipped": reason}
            events.completed(config.model, result)
            return result
    preprocess_config, days = checked_preprocess_config(config, store, day)
    store.check()
    if days and config.model:
        registry.check_records(model_uri(store.uri, config.model))
    if days:
        log.info(days.describe())
    if not config.preprocess.inputs:
        events.stage("synthesize")
        synthesize(store, config.synthetic, days.days if days else None, return_state=True).result()  # raises its error
    events.stage("preprocess")
    dataset = preprocess(preprocess_config)
    data_checks = None
    if days and config.on_data_check != "off":
        events.stage("data check")
        data_checks = check_data(config, store, days, preprocess_config, dataset, return_state=True).result()
    # validation made explicit (a dataset without 'val': the holdout's rows), so the run's name says it too
    trained = config.train.on(dataset).resolved()
    config.check_held_out(trained.eval_split)
    run = RunDir(store.run_uri(config.run_id(dataset, trained, day)))
    train_settings = warm_started(config, store, day, log) if days else config.train
    train_settings = FlowTrainConfig.model_validate(train_settings.on(dataset).resolved().model_dump())
    log.info("validation: %s", trained.validation_text())
    preprocessing = config.preprocess.model_copy(update={"inputs": preprocess_config.inputs})
    resolved = config.model_copy(update={"store": store.uri, "train": train_settings, "preprocess": preprocessing})
    resolved = resolved.model_dump(mode="json")
    # the dataset the flow filled in is no dumped field: it follows the training settings
    resolved |= {"train": resolved["train"] | {"dataset": dataset}, "date": day.isoformat() if day else None}
    run.write_text(yaml.safe_dump(resolved, sort_keys=False), RunDir.PIPELINE)
    events.stage("train")
    train(run.uri, dataset, train_settings, config.launcher)
    events.stage("evaluate")
    metrics = evaluate(run.uri, config.evaluate, config.launcher)
    result = {"store": store.uri, "dataset": dataset, "run": run.uri,
              "evaluation": run.eval_dir(config.evaluate.split), "metrics": metrics}
    if days:
        result["date"] = day.isoformat()
    artifacts.metrics_table(metrics, artifacts.PIPELINE_METRICS)
    artifacts.outputs({k: v for k, v in result.items() if k != "metrics"})
    if data_checks:
        result["data_checks"] = {"checks": data_checks["checks"], "failed": len(data_checks["failed"])}
    if config.model and days:
        events.stage("promote")
        result["decision"] = compete(config, store, days, run, dataset, metrics, data_checks,
                                     return_state=True).result()
    if days:
        events.stage("gc")
        result["gc"] = gc(config, store.uri, days)
    if unreadable := artifacts.runs(store.uri):   # after promotion and gc: a malformed run never blocks a model
        log.warning("runs table: %d run(s) of %s could not be read, listed as such: %s", len(unreadable),
                    store.uri, ", ".join(unreadable))
    events.completed(config.model, result)
    return result
