"""The train flow: torchrun as a subprocess, its output streamed into the Prefect logs, a progress
artifact, the sharding plan (as soon as it is computed) and the training curve (at each evaluation). A
complete run (the worker marked it) is skipped; one with complete checkpoints resumes from the latest; a
failed launch fails the task with the failing rank's last lines. A run folder that another training or evaluation
holds (its lease) is waited for first, then reused or resumed."""

from __future__ import annotations

import os
import re

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from common.errors import UserError
from common.s3 import redact
from common.store_errors import store_error
from flows import artifacts, assets
from flows.errors import user_errors
from models import champion_init
from training import (Checkpointer, FlowTrainConfig, LauncherConfig, LocalLauncherConfig, RankOutput, RunDir,
                      TrainConfig, build_launcher, default_train)

OVERLAP_WAIT_S = 12 * 3600.0   # how long a run waits for another training or evaluation of its run folder
_BAR = re.compile(r"^train:.*?\|\s*(\d+)/(\d+) \[[^\]]*\]")  # rank 0's tqdm bar, up to its closing bracket
_EVAL = re.compile(r"^step (\d+): \S+ auc ")  # Trainer._validate's line: metrics.jsonl holds the result by then


class TrainingFailed(UserError):
    """torchrun exited with an error (the message holds the failing rank's last lines)."""


class _Stream(RankOutput):
    """Consumes torchrun's merged output (``RankOutput``: it keeps each rank's tail for the failure message):
    progress bars drive the progress artifact, known library warnings go to the run's library log (``RankOutput``),
    other library warnings are logged at WARNING, other text at INFO, each
    tagged ``[rank 1]`` (``[rank 1 on n2]`` on several nodes); the sharding plan is published (not logged) as soon
    as rank 0 has written it, the training curve at each evaluation."""

    def __init__(self, logger, progress: artifacts.Progress, run: RunDir, curve: artifacts.TrainingCurve):
        super().__init__(run=run, job="training")   # known library warnings: RUN/logs/library.log
        self.logger, self.progress, self.run, self.curve = logger, progress, run, curve
        self.plan_lines: set[str] = set()  # the published plan's lines, not logged

    def __call__(self, line: str) -> None:
        super().__call__(redact(line))

    def segment(self, rank: int | None, text: str) -> None:
        if rank is None:
            if text.strip():
                self.keep(None, text)
                self.logger.info(text)
            return
        if bar := _BAR.match(text.lstrip()):
            self.progress.update(int(bar.group(1)), int(bar.group(2)))
            text = text.lstrip()[bar.end():]
        body = text.strip()
        if not body:
            return
        self.keep(rank, text)
        if self.noise(rank, text):
            self.logger.warning("[%s] %s", self.tag(rank), text)
        elif rank == 0 and body.startswith(RunDir.PLAN_HEADER):
            self.plan_lines = {line.strip() for line in artifacts.plan(self.run).splitlines()}
            self.logger.info("sharding plan published (artifact '%s'): %s", artifacts.SHARDING_PLAN,
                             next((line for line in self.plan_lines if line.startswith(RunDir.PLAN_VERDICTS)), body))
        elif body not in self.plan_lines:
            self.logger.info("[%s] %s", self.tag(rank), text)
            if rank == 0 and (evaluation := _EVAL.match(body)):
                self.curve.update(upto_step=int(evaluation.group(1)))


@task(cache_policy=NONE)  # no retries: a crash is a bug or a lost machine; the next run resumes
@user_errors
def launch_torchrun(run: RunDir, config: TrainConfig, resume: bool, launcher: LauncherConfig | None = None) -> None:
    """Run the training's ranks (here, or on Slurm/Kubernetes per ``launcher``) and stream their output;
    raises TrainingFailed on failure. Another training of the run folder (a second run of the same night) is waited
    for under the run's lease, taken in one step with the wait, and then reused or resumed
    (``Launcher.launch(reuse=True)``)."""
    launcher = launcher or LocalLauncherConfig()
    runner = build_launcher(launcher)
    logger = get_run_logger()
    logger.info("launching training: %s", runner.describe())
    stream = _Stream(logger, artifacts.Progress(f"training {run}"), run,
                     artifacts.TrainingCurve(run, config.best_metric))
    env = {"PET_TEE": "3", "PYTHONUNBUFFERED": "1", "TQDM_MININTERVAL": "2", "PYTHONWARNINGS": "ignore::FutureWarning",
           "DLRMFLOW_PROGRESS": "bar"}   # rank 0's tqdm bar drives the progress artifact (_BAR), never logged
    if launcher.kind == "local":  # this machine's cores; remote nodes set their own
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) //
                                                                                launcher.nproc))
    code = runner.launch(run, config, resume=resume, env=env, on_line=stream, wait_s=OVERLAP_WAIT_S, reuse=True)
    stream.close()
    if code == 0:
        _publish(stream, run)
        return
    # the ranks' own failure first (it may be the store's: a store that stopped answering would then take one
    # bounded wait per read below, and a read's error would replace the rank's line); the reads are best-effort
    failure = stream.failure("training", code)
    resume_from = "the latest complete checkpoint"
    try:
        _publish(stream, run)
        step = Checkpointer(run).step_of("latest")
        resume_from = f"the checkpoint at step {step}" if step is not None else "the start (no complete checkpoint)"
    except Exception as e:   # noqa: BLE001  a store that cannot be used: the failure says what to do
        if store_error(e) is None:
            raise
    raise TrainingFailed(failure + f"Run the pipeline again to resume from {resume_from}.")


def _publish(stream: _Stream, run: RunDir) -> None:
    """The training curve with the loss after the last evaluation, and the plan when rank 0's output lacked it."""
    stream.curve.update()
    if not stream.plan_lines and run.exists(RunDir.PLAN):  # output without rank 0's plan (e.g. a lost log)
        artifacts.plan(run)


@flow(name="train", log_prints=True)
@user_errors
def train(run_uri: str, dataset: str, config: FlowTrainConfig = default_train(),
          launcher: LauncherConfig = LocalLauncherConfig(nproc=2)) -> str:
    """Train ``config`` on ``dataset`` into the run folder ``run_uri`` (resuming when it has checkpoints); returns it.

    Args:
        run_uri: Run folder (local path or s3://...), e.g. STORE/runs/my-run; reusing one resumes it.
        dataset: A dataset folder written by the preprocess flow (local path or s3://...), e.g. STORE/datasets/NAME.
        config: The training settings.
        launcher: Where the ranks run: `local` (default: torchrun here, `nproc` ranks), `slurm` (sbatch --wait) or
            `kubernetes`.
    """
    log = get_run_logger()
    config = config.on(dataset)
    config = config.model_copy(update={"init_from": champion_init(config.init_from)})
    run = RunDir(run_uri)
    if run.is_complete():
        log.info("training already complete, skipping: %s", run_uri)
        artifacts.plan(run)
        artifacts.TrainingCurve(run, config.best_metric).update()
    else:
        step = Checkpointer(run).step_of("latest")
        if step is not None:
            log.info("resuming training from the checkpoint at step %d: %s", step, run_uri)
        # the state's result() raises a failure (flows.errors)
        assets.materializing(launch_torchrun, assets.trained(run_uri, dataset))(
            run, config, step is not None, launcher, return_state=True).result()
        if not run.is_complete():
            raise TrainingFailed(f"{run_uri}: the launcher reported success but training did not mark the run "
                                 "complete. Fix: see the ranks' logs; run the flow again to resume.")
        log.info("training complete: %s", run_uri)
    return run_uri
