"""The evaluate flow: metrics and plots of one checkpoint of a run on a held-out split
(``training.evaluate``; the ranks start through the launcher the flow is given, as training's do; the report
lands in ``<run>/eval/<split>/``). An evaluation of the same checkpoint step that is already complete is found,
not redone."""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from common.s3 import redact
from flows import artifacts, assets
from flows.errors import user_errors
from flows.train import OVERLAP_WAIT_S
from training import (NOISE, EvaluateConfig, LauncherConfig, LocalLauncherConfig, RunDir, check_inputs, completed,
                      evaluate_run)


@task(cache_policy=NONE)  # no retries: a failed evaluation is a bug or bad input, a retry would hide it
@user_errors
def run_evaluation(run: RunDir, config: EvaluateConfig, launcher: LauncherConfig | None = None) -> None:
    log = get_run_logger()   # library warnings at WARNING (the known ones go to the run's library log instead)
    evaluate_run(run, config, launcher=launcher, env=rank_env(launcher), wait_s=OVERLAP_WAIT_S, reuse=True,
                 on_line=lambda line: (log.warning if line.startswith("warning: ") or NOISE.match(line)
                                       else log.info)(redact(line)))


def rank_env(launcher: LauncherConfig | None) -> dict[str, str]:
    """The environment of an evaluation's or a scoring's ranks: one thread each on this machine."""
    env = {"PYTHONWARNINGS": "ignore::FutureWarning"}
    if launcher is None or launcher.kind == "local":  # remote nodes set their own
        env["OMP_NUM_THREADS"] = "1"
    return env


@flow(name="evaluate", log_prints=True)
@user_errors
def evaluate(run_uri: str, config: EvaluateConfig = EvaluateConfig(),
             launcher: LauncherConfig = LocalLauncherConfig()) -> dict:
    """Evaluate the run's ``config.checkpoint`` on ``config.split``; returns the metrics.

    Args:
        run_uri: A training run folder (local path or s3://...), e.g. STORE/runs/my-run.
        config: Split, checkpoint and (optionally) another dataset of the evaluation.
        launcher: Where the ranks run: `local` (default: torchrun here, `nproc` ranks), `slurm` (sbatch --wait) or
            `kubernetes`.
    """
    log = get_run_logger()
    run = RunDir(run_uri)
    wanted = check_inputs(run, config)
    if completed(run, config, wanted) is not None:   # else evaluated, after any training or evaluation of the run
        log.info("evaluation of this checkpoint on '%s' already complete, reusing it", config.split)
        if wanted["warning"]:
            log.warning("warning: %s", wanted["warning"])
    else:
        assets.materializing(run_evaluation, assets.evaluated(run_uri, config.split))(
            run, config, launcher, return_state=True).result()  # raises its error (flows.errors)
    metrics = artifacts.evaluation(run, config.split)
    auc = metrics.get("auc")   # the table is the artifact's (and `dlrmflow run` prints it once, at its end)
    log.info("'%s' metrics of checkpoint step %s: ROC AUC %s; all of them: artifact '%s'", config.split,
             metrics.get("step"), "n/a" if auc is None else f"{auc:.4f}", artifacts.EVALUATION_METRICS)
    return metrics
