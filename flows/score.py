"""The score flow: raw rows -> click probabilities with a model's own vocabulary (``models.scoring.score``; the
ranks start through the launcher the flow is given, as training's do), written as Parquet; a summary artifact
(rows, output, metrics when the rows had labels)."""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from common.s3 import redact
from flows import artifacts
from flows.errors import user_errors
from flows.evaluate import rank_env
from models import ScoreConfig, scoring
from training import LauncherConfig, LocalLauncherConfig


@task(cache_policy=NONE)  # no retries: a failed scoring is a bug or bad input, a retry would hide it
@user_errors
def run_scoring(config: ScoreConfig, launcher: LauncherConfig | None = None) -> dict:
    log = get_run_logger()
    return scoring.score(config, launcher=launcher, env=rank_env(launcher),
                      on_line=lambda line: (log.warning if line.startswith("warning: ") else log.info)(redact(line)))


@flow(name="score", log_prints=True)
@user_errors
def score(config: ScoreConfig, launcher: LauncherConfig = LocalLauncherConfig()) -> dict:
    """Score raw rows with a named model's champion or a run's checkpoint; returns the summary.

    Args:
        config: The model (STORE/models/NAME) or run, the raw inputs and the output Parquet.
        launcher: Where the ranks run (a checkpoint's scoring): `local` (default: torchrun here, `nproc` ranks),
            `slurm` (sbatch --wait) or `kubernetes`; the encoded rows go through the run folder to remote ranks.
    """
    summary = run_scoring(config.model_copy(update={"progress": False}), launcher, return_state=True).result()
    artifacts.score_summary(summary)
    get_run_logger().info("%s rows scored -> %s", f"{summary['rows']:,}", summary["out"])
    return {k: v for k, v in summary.items() if k != "calibration_bins"}
