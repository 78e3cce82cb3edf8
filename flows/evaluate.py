"""The evaluate flow: metrics and plots of one checkpoint of a run on a held-out split
(``training.evaluate`` writes ``<run>/eval/<split>/{metrics.json, roc.png, calibration.png}``).
An evaluation of the same checkpoint step that is already complete is found, not redone."""

from __future__ import annotations

import json

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from flows import artifacts
from flows.config import EvaluateConfig
from flows.store import redact
from training import evaluate as ev
from training.rundir import RunDir


@task(cache_policy=NONE)  # no retries: a failed evaluation is a bug or bad input, a retry would hide it
def run_evaluation(run_uri: str, config: EvaluateConfig) -> None:
    log = get_run_logger()
    ev.evaluate_run(run_uri, config.split, config.checkpoint, config.nproc,
                    env={"PYTHONWARNINGS": "ignore::FutureWarning", "OMP_NUM_THREADS": "1"},
                    on_line=lambda line: log.info(redact(line)))


def _done(run_uri: str, config: EvaluateConfig) -> bool:
    """True when eval/<split>/metrics.json exists for the checkpoint step that would be evaluated."""
    run = RunDir(run_uri)
    if not run.exists("eval", config.split, ev.METRICS_FILE):
        return False
    previous = json.loads(run.read_text("eval", config.split, ev.METRICS_FILE))
    return previous.get("step") == ev.check(run_uri, config.split, config.checkpoint)["step"]


@flow(name="evaluate", log_prints=True)
def evaluate(run_uri: str, config: EvaluateConfig = EvaluateConfig()) -> dict:
    """Evaluate the run's ``config.checkpoint`` on ``config.split``; returns the metrics.

    Args:
        run_uri: A training run folder (local path or s3://...), e.g. STORE/runs/my-run.
        config: Split, checkpoint and ranks of the evaluation.
    """
    log = get_run_logger()
    if _done(run_uri, config):
        log.info("evaluation of this checkpoint on '%s' already complete, reusing it", config.split)
    else:
        run_evaluation(run_uri, config)
    metrics = artifacts.evaluation(ev.eval_dir(run_uri, config.split), config.split)
    log.info("'%s' metrics (checkpoint step %s):\n%s", config.split, metrics.get("step"), ev.format_table(metrics))
    return metrics
