"""Deployments of the flows for `dlrmflow serve`: the pipeline on a cron schedule (and, with a model and dated inputs,
on its day-landed trigger), the day-landed sensor on a short interval, the others on demand.

Each deployment's parameter form in the Prefect UI comes from the flow's typed config models;
the defaults below point the forms at the served store. (Work-pool deployments: see prefect.yaml.)
"""

from __future__ import annotations

import datetime as dt

from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule

from training import EvaluateConfig, default_train
from flows.config import ServeConfig
from flows.days import days
from flows.evaluate import evaluate
from flows.landed import day_landed, trigger
from flows.pipeline import pipeline
from flows.preprocess import preprocess
from flows.score import score
from flows.serving import serve_until_stopped
from flows.spec import spec_draft
from flows.train import train
from flows.tune import tune
from nightly.config import NO_PRESET
from preprocessing.dated import is_dated

TAGS = ["dlrmflow"]
# one pipeline run at a time: two nights of one model never write the same folders at once (queued, not dropped)
PIPELINE_CONCURRENCY = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE)
# one look of the sensor at a time (landed.jsonl has one writer); a look due while one runs is dropped
SENSOR_CONCURRENCY = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW)


def deployment_name(flow_name: str, model: str | None) -> str:
    """``dlrmflow-<flow>``, with ``-<model>`` when the served pipeline is a named model's: two `dlrmflow serve`
    of two models on one Prefect server then register distinct deployments (and concurrency limits)."""
    return f"dlrmflow-{flow_name}" + (f"-{model}" if model else "")


def _form(parameters: dict) -> dict:
    """The pipeline's defaults as its form takes them: no preset is the choice ``none`` (``nightly.config``)."""
    return parameters | {"preset": parameters.get("preset") or NO_PRESET}


def deployments(config: ServeConfig) -> list:
    """The RunnerDeployments (names: dlrmflow-pipeline, -preprocess, -spec-draft, -train, -evaluate, -score, -tune,
    and -days with a model, -day-landed with a model's sensor (``config.sensor``); each followed by ``-<model>`` when
    the pipeline has a model name)."""
    store, model, sensor = config.store, config.pipeline.model, config.sensor()

    def name(flow_name: str) -> str:
        return deployment_name(flow_name, model)

    return [
        pipeline.to_deployment(name("pipeline"), tags=TAGS,
                               schedules=[CronSchedule(cron=config.cron, timezone=config.timezone)],
                               triggers=[trigger(model, name("pipeline"))] if sensor else [],
                               concurrency_limit=PIPELINE_CONCURRENCY,
                               parameters={"config": _form(config.pipeline_parameters(store))},
                               description="Preprocess, train and evaluate (synthetic data unless inputs are set); "
                                           "dated runs train on a window of days and promote the better model."),
        preprocess.to_deployment(name("preprocess"), tags=TAGS, parameters={"config": {"inputs": [], "out": store}},
                                 description="Raw click logs -> split-binary dataset."),
        spec_draft.to_deployment(name("spec-draft"), tags=TAGS, parameters={"config": {"inputs": [], "store": store}},
                                 description="Draft an input spec from a sample of the data into the store "
                                             "(specs/NAME.yaml), for `spec: store:NAME` in the other forms."),
        train.to_deployment(name("train"), tags=TAGS,
                            parameters={"config": default_train().model_dump(mode="json")},
                            description="Distributed DLRM training under torchrun (resumes a run with checkpoints)."),
        evaluate.to_deployment(name("evaluate"), tags=TAGS,
                               parameters={"config": EvaluateConfig().model_dump(mode="json")},
                               description="Metrics and plots of a run's checkpoint on a held-out split."),
        # score (batch scoring, issue 9): its form starts empty (inputs, out and a model or run are required)
        score.to_deployment(name("score"), tags=TAGS,
                            description="Raw rows -> click probabilities with a model's own vocabulary."),
        tune.to_deployment(name("tune"), tags=TAGS, parameters=config.tune_parameters(store),
                           schedules=[CronSchedule(cron=config.tune_cron, timezone=config.timezone)]
                           if config.tune_cron else [],
                           description="Search the training config (Optuna); with a model, its tuned config for "
                                       "the nightly runs."),
    ] + ([days.to_deployment(name("days"), tags=TAGS,
                             parameters={"config": {"store": store, "model": config.pipeline.model}},
                             description="The days the nights read and the data gate's verdicts: list them, accept "
                                         "or quarantine one.")] if model else []) + ([day_landed.to_deployment(
        name("day-landed"), tags=TAGS, schedules=[IntervalSchedule(interval=dt.timedelta(seconds=sensor.every_s))],
        concurrency_limit=SENSOR_CONCURRENCY,
        parameters={"store": store, "model": model, "inputs": list(config.pipeline.preprocess.inputs),
                    "landing": sensor.model_dump(mode="json")},
        description="The day-landed sensor: each day of the dated inputs that is complete (by its rule) starts the "
                    "pipeline's night for that day, once.")] if sensor else [])


def described(found: list) -> list[str]:
    """One line per deployment: ``flow/name`` and its schedules (cron and time zone, an interval) and triggers (the
    event), or ``on demand``."""
    def when(d) -> str:
        said = [f"cron '{s.schedule.cron}' {s.schedule.timezone or 'UTC'}" if hasattr(s.schedule, "cron")
                else f"every {s.schedule.interval.total_seconds():.0f} s" for s in d.schedules or []]
        said += [f"on {', '.join(sorted(t.expect))}" for t in d.triggers or []]
        return ", ".join(said) or "on demand"

    return [f"  {d.flow_name}/{d.name}: {when(d)}" for d in found]


def serve_all(config: ServeConfig, say=lambda line: print(line, flush=True)) -> None:
    """Register the deployments on the configured Prefect server, say where its UI is and what was registered
    (``say``), and run their flow runs until stopped."""
    from prefect.settings import get_current_settings

    from flows.artifacts import model_page_key
    from nightly.landing import check, rule_text

    if sensor := config.sensor():
        check(list(config.pipeline.preprocess.inputs), sensor)   # one line, nothing registered
    found = deployments(config)
    ui = get_current_settings().ui_url
    say(f"{len(found)} deployments:")
    for line in described(found):
        say(line)
    if sensor:
        say(f"a day is complete with {rule_text(sensor)}: its night starts then (once a day; the cron schedule is the "
            "fallback)")
    elif config.landing.every_s and not config.pipeline.model and \
            any(is_dated(uri) for uri in config.pipeline.preprocess.inputs):
        say("no day-landed sensor: it needs the model (--model NAME), whose history runs each day's night once")
    if ui:
        say(f"Prefect UI: {ui} (deployments: {ui}/deployments" + (
            f"; the model's page: {ui}/artifacts/key/{model_page_key(config.pipeline.model)}"
            if config.pipeline.model else "") + ")")
    serve_until_stopped(found)
