"""Deployments of the flows for `dlrmflow serve`: the pipeline on a cron schedule, the others on demand.

Each deployment's parameter form in the Prefect UI comes from the flow's typed config models;
the defaults below point the forms at the served store. (Work-pool deployments: see prefect.yaml.)
"""

from __future__ import annotations

from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.client.schemas.schedules import CronSchedule

from training import EvaluateConfig, default_train
from flows.config import ServeConfig
from flows.days import days
from flows.evaluate import evaluate
from flows.pipeline import pipeline
from flows.preprocess import preprocess
from flows.score import score
from flows.serving import serve_until_stopped
from flows.train import train
from flows.tune import tune

TAGS = ["dlrmflow"]
# one pipeline run at a time: two nights of one model never write the same folders at once (queued, not dropped)
PIPELINE_CONCURRENCY = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE)


def deployment_name(flow_name: str, model: str | None) -> str:
    """``dlrmflow-<flow>``, with ``-<model>`` when the served pipeline is a named model's: two `dlrmflow serve`
    of two models on one Prefect server then register distinct deployments (and concurrency limits)."""
    return f"dlrmflow-{flow_name}" + (f"-{model}" if model else "")


def deployments(config: ServeConfig) -> list:
    """The RunnerDeployments (names: dlrmflow-pipeline, -preprocess, -train, -evaluate, -score, -tune, and -days with
    a model; each followed by ``-<model>`` when the pipeline has a model name)."""
    store = config.store

    def name(flow_name: str) -> str:
        return deployment_name(flow_name, config.pipeline.model)

    return [
        pipeline.to_deployment(name("pipeline"), tags=TAGS,
                               schedules=[CronSchedule(cron=config.cron, timezone=config.timezone)],
                               concurrency_limit=PIPELINE_CONCURRENCY,
                               parameters={"config": config.pipeline_parameters(store)},
                               description="Preprocess, train and evaluate (synthetic data unless inputs are set); "
                                           "dated runs train on a window of days and promote the better model."),
        preprocess.to_deployment(name("preprocess"), tags=TAGS, parameters={"config": {"inputs": [], "out": store}},
                                 description="Raw click logs -> split-binary dataset."),
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
                                         "or quarantine one.")] if config.pipeline.model else [])


def serve_all(config: ServeConfig) -> None:
    """Register the deployments on the configured Prefect server and run their flow runs until stopped."""
    serve_until_stopped(deployments(config))
