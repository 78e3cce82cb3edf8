"""Evaluate a checkpoint of a run on a held-out split: metrics.json, roc.png, calibration.png.

Runs under torchrun like training: every rank loads the checkpoint (DCP reshards it to this
world size), predicts its share of the split, and the predictions are gathered; rank 0 computes
``training.metrics.compute_metrics`` and writes ``<run>/eval/<split>/`` (plots first, then
``metrics.json`` atomically, so a complete metrics.json means a complete evaluation).

- ``python -m torch.distributed.run --standalone --nproc-per-node N -m training.evaluate RUN
  --split test --checkpoint best`` is the per-rank entry point (``main``);
- ``evaluate_run(run_uri, split, checkpoint, nproc)`` checks the inputs, launches that and
  returns the metrics dict (what ``dlrmflow evaluate`` and the Prefect flow call).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Callable

from common.errors import UserError
from training.rundir import RunDir

METRICS_FILE, ROC_FILE, CALIBRATION_FILE = "metrics.json", "roc.png", "calibration.png"
# (key, label) of the metrics table, in print order
TABLE = [("auc", "ROC AUC"), ("logloss", "log loss"), ("normalized_entropy", "normalized entropy"),
         ("base_logloss", "base-rate log loss"), ("pr_auc", "PR AUC (average precision)"),
         ("accuracy", "accuracy @ 0.5"), ("calibration", "calibration (mean pred / rate)"),
         ("base_rate", "base rate"), ("mean_prediction", "mean prediction"), ("rows", "rows"),
         ("positives", "positives")]


def eval_dir(run_uri: str, split: str) -> str:
    """URI of ``<run>/eval/<split>``."""
    return RunDir(run_uri).join("eval", split)


def parse_checkpoint(which: str | int) -> str | int:
    """``best``, ``latest`` or a step number (given as int or digits)."""
    if isinstance(which, int) or (isinstance(which, str) and which.strip().isdigit()):
        return int(which)
    if which in ("best", "latest"):
        return which
    raise UserError(f"checkpoint {which!r} is not 'best', 'latest' or a step number. Fix: e.g. --checkpoint best.")


def check(run_uri: str, split: str = "test", checkpoint: str | int = "best", dataset: str | None = None) -> dict[str, Any]:
    """Fail early, with a clear message, on an unknown run, a split the dataset lacks or a missing
    checkpoint. Returns ``{"dataset", "step", "checkpoint"}`` (the step that will be loaded)."""
    from feature_spec import load
    from training.checkpoint import Checkpointer
    from training.config import TrainConfig
    from training.rundir import storage_options

    which = parse_checkpoint(checkpoint)
    run = RunDir(run_uri)
    if not run.exists("config.yaml"):
        raise UserError(f"{run_uri}: not a training run (no config.yaml there). "
                        "Fix: pass the --run folder of a `dlrmflow train`.")
    cfg = TrainConfig.from_yaml(run.join("config.yaml"), **run.options)
    dataset = dataset or cfg.dataset
    if not dataset:
        raise UserError(f"{run_uri}/config.yaml names no dataset. Fix: pass --dataset DATASET_URI.")
    spec = load(dataset, **storage_options(dataset))
    if split not in spec.splits:
        raise UserError(f"{dataset}: the dataset has no split '{split}' (it has: {', '.join(spec.splits) or 'none'}). "
                        f"Fix: evaluate one of those, e.g. --split {next(iter(spec.splits), 'test')}.")
    ckpt = Checkpointer(run)
    step = ckpt.resolve(which)
    if step is None and which == "best":
        step = ckpt.resolve("latest")  # a run that never evaluated has no best: use its last checkpoint
    if step is None:
        raise UserError(f"{run.join('checkpoints')}: no complete checkpoint '{which}' (complete steps: "
                        f"{ckpt.steps() or 'none'}). Fix: train the run first, or pass --checkpoint "
                        "best, latest or one of those steps.")
    return {"dataset": dataset, "step": step, "checkpoint": which}


def _json_value(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def write_evaluation(run_uri: str, split: str, probs, labels, info: dict[str, Any]) -> dict[str, Any]:
    """Compute the metrics of gathered predictions and write ``eval/<split>/``: plots, then
    ``metrics.json`` (the metrics plus ``info``: split, checkpoint, step, dataset). Returns the record."""
    from training import metrics, plots

    m = metrics.compute_metrics(probs, labels)
    run = RunDir(run_uri)
    title = f"split '{split}', step {info.get('step')}"
    run.write_bytes(plots.roc_png(probs, labels, title, m), "eval", split, ROC_FILE)
    run.write_bytes(plots.calibration_png(probs, labels, title, m), "eval", split, CALIBRATION_FILE)
    record = {**{k: _json_value(v) for k, v in m.items()}, "split": split, **info,
              "calibration_bins": metrics.calibration_bins(probs, labels)}
    run.write_text(json.dumps(record, indent=2) + "\n", "eval", split, METRICS_FILE)
    return record


def format_table(record: dict[str, Any]) -> str:
    """The metrics as an aligned two-column table."""
    lines = []
    for key, label in TABLE:
        v = record.get(key)
        text = "n/a" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:.4f}"
        lines.append(f"  {label:<32}{text:>10}")
    return "\n".join(lines)


# ---- per-rank entry point (torchrun) -----------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="run folder or URI (holds config.yaml and checkpoints/)")
    parser.add_argument("--split", default="test", help="split to evaluate (default test)")
    parser.add_argument("--checkpoint", default="best", help="best (default), latest or a step number")
    parser.add_argument("--dataset", help="evaluate on this dataset instead of the run's own")
    args = parser.parse_args(argv)

    from training import distributed

    try:
        info = check(args.run, args.split, args.checkpoint, args.dataset)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = distributed.init()
    try:
        from training.trainer import Trainer

        overrides = {"dataset": args.dataset} if args.dataset else None
        trainer = Trainer.from_run(args.run, info["step"], env=env, overrides=overrides)
        probs, labels = trainer.predict(args.split)
        if env.is_main:
            record = write_evaluation(args.run, args.split, probs, labels,
                                      {"checkpoint": str(info["checkpoint"]), "step": info["step"],
                                       "dataset": info["dataset"], "run": args.run, "world_size": env.world_size})
            print(f"evaluated step {info['step']} on '{args.split}' ({record['rows']:,} rows, {env.world_size} "
                  f"rank(s)): auc {record['auc']:.4f} logloss {record['logloss']:.4f} -> "
                  f"{eval_dir(args.run, args.split)}", flush=True)
        return 0
    except UserError as e:
        print(f"error (rank {env.rank}): {e}", file=sys.stderr)
        return 2
    finally:
        distributed.destroy()


# ---- Python API ----------------------------------------------------------------------------
def evaluate_run(run_uri: str, split: str = "test", checkpoint: str | int = "best", nproc: int = 1, *,
                 dataset: str | None = None, env: dict[str, str] | None = None,
                 on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Evaluate checkpoint ``best|latest|STEP`` of a run on ``split`` with ``nproc`` ranks (torchrun,
    in a subprocess). Returns the content of ``<run>/eval/<split>/metrics.json``; raises UserError
    on bad inputs or a failed evaluation. Output goes to this process's stdout or to ``on_line``."""
    from training.launchers.local import run_command, torchrun_command

    if nproc < 1:
        raise UserError(f"nproc must be at least 1 (got {nproc}).")
    check(run_uri, split, checkpoint, dataset)
    args = ["--split", split, "--checkpoint", str(checkpoint)] + (["--dataset", dataset] if dataset else [])
    cmd = torchrun_command(run_uri, nproc=nproc, module="training.evaluate", args=args)
    lines: list[str] = []

    def keep(line: str) -> None:
        lines.append(line)
        if on_line:
            on_line(line)
        else:
            print(line, flush=True)

    rc = run_command(cmd, env=env, on_line=keep)
    if rc != 0:
        errors = [ln for ln in lines if ln.startswith("error")] or lines[-20:]
        raise UserError(f"evaluation of {run_uri} on '{split}' failed (torchrun exit code {rc}):\n" + "\n".join(errors))
    run = RunDir(run_uri)
    return json.loads(run.read_text("eval", split, METRICS_FILE))


if __name__ == "__main__":
    code = main()  # the process group is destroyed and every file written by now
    sys.stdout.flush()
    sys.stderr.flush()
    # skip interpreter teardown: a rank was seen to abort there (SIGABRT) after finishing its work
    os._exit(code)
