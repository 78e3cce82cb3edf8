"""`dlrmflow score`: raw rows -> click probabilities with a model's own vocabulary (see models.scoring)."""

from __future__ import annotations

import argparse

from flows.options import NPROC_ALIAS, add_options, build
from models import ScoreConfig, scoring
from training import RanksConfig, format_table

DESCRIPTION = """Score raw rows with a named model's champion (--model STORE/models/NAME) or a training
run's checkpoint (--run RUN, with --checkpoint best|latest|STEP).

The rows are read in the format of the input spec that made the model's dataset (Criteo TSV, or the
CSV/Parquet its spec describes) and encoded with THAT dataset's vocabularies and numerical transforms:
values the model never kept map to index 0, hash-bucket features hash the same way, bad rows follow the
dataset's --on-bad-row/--max-bad-fraction unless given here. --nproc ranks predict (torchrun); or ranks on
Slurm or Kubernetes (--launcher, as for training): the encoded rows and their predictions then go through a
scratch folder in the run folder (RUN/scoring/), which those nodes reach.

With --bundle (a serving bundle written by `dlrmflow export`, checked against its manifest) the rows are
encoded with the bundle's vocabularies and input spec and its torch.export program (model.pt2, the model its
raw.pt2 serves: docs/serving.md) predicts them in this process: no torchrun, no TorchRec sharding. --model
scores with the bundle its champion.json pins, when it pins one.

The output Parquet has one row per scored row: file (the input URI), row (0-based position among the
file's data rows, bad rows counted, the header line not), the id column when the input spec names one
(metadata.id), probability (float32) and label when the rows carry one; with labels, the AUC and log
loss are printed too.

examples:
  dlrmflow score --model store/models/ctr --input 'logs/2026-11-20/*.gz' --out scores/2026-11-20.parquet
  dlrmflow score --run store/runs/r1 --checkpoint latest --input test.tsv --out s3://b/scores.parquet --nproc 2
  dlrmflow score --bundle store/models/ctr/bundle --input test.tsv --out scores.parquet
"""

EVERYDAY = ("--model", "--run", "--checkpoint", "--bundle", "--inputs", "--out", "--on-bad-row", "--max-bad-fraction",
            "--nproc", "--launcher")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_options(p, ScoreConfig, root="score")
    add_options(p, RanksConfig, root="launch", title="where the ranks run (with --model or --run)",
                aliases=NPROC_ALIAS)


def run(args: argparse.Namespace) -> int:
    summary = scoring.score(build(ScoreConfig, args, root="score"), launcher=build(RanksConfig, args, root="launch").launcher)
    print(f"\n{summary['rows']:,} rows scored with {summary['run']} (step {summary['step']}) -> {summary['out']}")
    if "auc" in summary:
        print(format_table(summary))
    return 0
