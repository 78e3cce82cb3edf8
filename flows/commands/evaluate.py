"""`dlrmflow evaluate`: metrics and plots of a run's checkpoint on a held-out split (torchrun)."""

from __future__ import annotations

import argparse

from flows.options import NPROC_ALIAS, add_options, build
from training import EvaluateConfig, RanksConfig, RunDir, evaluate_run, format_table, library_note

DESCRIPTION = """Evaluate checkpoint best|latest|STEP of a training run on a split of its dataset.

Every rank (--nproc of them here, torchrun; or on Slurm or Kubernetes with --launcher, as for training)
predicts its share of the split; the predictions are gathered and
the metrics computed exactly over all rows (the same numbers on any number of ranks):
ROC AUC, log loss, normalized entropy (log loss / entropy of the base rate), base-rate log loss,
PR AUC (average precision), accuracy at 0.5 and calibration (mean prediction / base rate).

Writes <run>/eval/<split>/metrics.json, roc.png and calibration.png.

examples:
  dlrmflow evaluate --run runs/r1
  dlrmflow evaluate --run s3://b/runs/r2 --split val --checkpoint latest --nproc 2
  dlrmflow evaluate --run s3://b/runs/r3 --launcher slurm --launcher.nodes 2 --launcher.partition mi300x
"""

EVERYDAY = ("--run", "--split", "--checkpoint", "--dataset", "--nproc", "--launcher")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run folder or URI written by `dlrmflow train`")
    add_options(p, EvaluateConfig, root="evaluate")
    add_options(p, RanksConfig, root="launch", title="where the ranks run", aliases=NPROC_ALIAS)


def run(args: argparse.Namespace) -> int:
    config = build(EvaluateConfig, args, root="evaluate")
    launch = build(RanksConfig, args, root="launch")
    run = RunDir(args.run)
    record = evaluate_run(run, config, launcher=launch.launcher)
    where = run.eval_dir(config.split)
    print(f"\n{config.split} metrics of {run} (checkpoint {record['checkpoint']}, step {record['step']}):")
    print(format_table(record))
    print(f"\nwrote {where}/{RunDir.EVAL_METRICS}, {where}/{RunDir.ROC}, {where}/{RunDir.CALIBRATION}")
    if note := library_note(run):
        print(note)
    return 0
