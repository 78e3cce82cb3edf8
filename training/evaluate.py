"""Evaluate a checkpoint of a run on a held-out split, from the launcher's side.

``evaluate_run(run, EvaluateConfig(...), launcher=...)`` checks the inputs (``check_inputs``), runs
``training.evaluate_worker`` (``evaluate_job``) on the ranks of the launcher (local torchrun by default, or
Slurm/Kubernetes: ``training.launchers``) and returns the metrics that rank 0 wrote to
``<run>/eval/<split>/metrics.json`` (``training.report``). What ``dlrmflow evaluate`` and the Prefect flow call.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any, Callable

from common.errors import UserError
from common.store import RUNS, Store, store_of
from feature_spec import load as load_spec
from training.checkpoint import checkpoint_of
from training.config import TEST_SPLIT, EvaluateConfig
from training.launchers import RankJob, RankOutput, build_launcher
from training.rundir import RunDir


def check_inputs(run: RunDir, config: EvaluateConfig) -> dict[str, Any]:
    """Fail early, with a clear message, on an unknown run, a split the dataset lacks, a missing checkpoint or
    the test split of a run that validated on it (its checkpoint was chosen on those rows). Returns ``{"dataset",
    "step", "warning"}``: the dataset and the checkpoint step to use, and a warning when ``best`` fell back to
    ``latest`` (a run that never validated) or the split is the one the run validated on, else None."""
    info = checkpoint_of(run, config.checkpoint, config.dataset, check=lambda dataset: config.check_split(
        load_spec(dataset).splits, dataset))
    if not config.dataset and config.split in {r["eval_split"] for r in run.metrics() if "eval_split" in r}:
        chosen = (f"training validated on split '{config.split}' (its best checkpoint and early stopping were chosen "
                  "on those rows), so its metrics there are not held out")
        if config.split == TEST_SPLIT:   # a run of before the holdout, which fell back to 'test'
            raise UserError(f"{run}: {chosen}. Fix: train the run again (a dataset without 'val' now validates on "
                            "the last data.holdout_fraction of its train rows, never on 'test'), or evaluate "
                            "another split.")
        info["warning"] = "; ".join(w for w in (info["warning"], chosen) if w)
    if config.slice_by or config.gauc_by:
        from training.evaluate_slices import check_feature

        spec = load_spec(info["dataset"])
        check_feature(spec, config.slice_by, "slice_by", info["dataset"])
        check_feature(spec, config.gauc_by, "gauc_by", info["dataset"])
    return info


def completed(run: RunDir, config: EvaluateConfig, wanted: dict[str, Any]) -> dict[str, Any] | None:
    """The run's evaluation on ``config.split`` when it is already the one ``wanted`` (``check_inputs``: the same
    checkpoint step and dataset, and the same slices and GAUC asked for; a dataset of the run's store recorded before
    the store moved is found where it is now, ``common.store.Store.resolve``), else None. A record without a log
    loss is of an evaluation before non-finite predictions were refused: it is done again."""
    previous = run.eval_metrics(config.split) or {}
    dataset = previous.get("dataset")
    if isinstance(dataset, str) and dataset != wanted["dataset"]:
        with suppress(UserError):   # no store can hold the run (another scheme): as recorded
            dataset = Store(store_of(run.uri, RUNS)).resolve(dataset)
    same = (previous.get("step"), dataset) == (wanted["step"], wanted["dataset"])
    sliced = ((previous.get("slices") or {}).get("by"), (previous.get("slices") or {}).get("top", config.slice_top),
              (previous.get("gauc") or {}).get("by")) == (config.slice_by, config.slice_top, config.gauc_by)
    return previous if same and sliced and previous.get("logloss") is not None else None


def evaluate_job(config: EvaluateConfig) -> RankJob:
    """The evaluation's rank job: ``training.evaluate_worker RUN --config EVALUATE_CONFIG_JSON``."""
    return RankJob("evaluate", "training.evaluate_worker", ("--config", config.model_dump_json()))


def evaluate_run(run: RunDir | str, config: EvaluateConfig, *, launcher=None, env: dict[str, str] | None = None,
                 on_line: Callable[[str], None] | None = None, wait_s: float = 0.0,
                 reuse: bool = False) -> dict[str, Any]:
    """Evaluate checkpoint ``config.checkpoint`` of a run on ``config.split`` on the ranks of ``launcher`` (a
    ``LauncherConfig`` or its dict; None: local torchrun, one rank). Returns the content of
    ``<run>/eval/<split>/metrics.json``; raises UserError on bad inputs or a failed evaluation (naming the failing
    rank's error). Output goes to this process's stdout or to ``on_line``. A training or another evaluation of the
    run is waited for up to ``wait_s`` (default: fail at once, naming it); with ``reuse``, an evaluation of the same
    checkpoint that one of them finished meanwhile is returned, checked under the lease taken with the wait."""
    run = RunDir(run)
    runner = build_launcher(launcher)
    output = RankOutput(on_line or (lambda line: print(line, flush=True)), run=run, job="evaluation")
    if warning := check_inputs(run, config)["warning"]:
        output(f"warning: {warning}")
    # never while a training or another evaluation writes the run (a stale lease's job is stopped first)
    with runner.lease(run, "evaluation", wait_s, say=output) as held:
        if reuse and (done := completed(run, config, check_inputs(run, config))) is not None:
            output(f"evaluation of this checkpoint on '{config.split}' already complete (by another run while this "
                   "one waited), reusing it")
            return done
        rc = runner.run_ranks(evaluate_job(config), run, env=env, on_line=output, lease=held)
    output.close()
    if rc != 0:
        raise UserError(output.failure(f"evaluation of {run} on '{config.split}'", rc))
    return run.eval_metrics(config.split)
