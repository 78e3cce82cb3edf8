"""`dlrmflow train`: distributed TorchRec DLRM training, launched here (torchrun), on Slurm or on Kubernetes."""

from __future__ import annotations

import argparse
import re
import sys

from common.errors import UserError
from common.progress import ENV as PROGRESS_ENV
from flows.options import NPROC_ALIAS, add_options, add_set_option, build
from models import champion_init
from training import (Checkpointer, RankOutput, RanksConfig, RunDir, TrainConfig, build_launcher, library_note,
                      preset_names)

_BAR = re.compile(r"^(\[default0\]:)?train:.*\|")   # rank 0's tqdm bar (training.trainer), on a terminal

DESCRIPTION = """Train a TorchRec DLRM (dot or DCN-v2 interaction) on a split_binary dataset.

The config comes from --config TRAIN.yaml (a file of yours) or --preset NAME (shipped with dlrmflow;
default: 'default'); every field of it has a flag (--optimizer.dense.lr 0.1; or --set optimizer.dense.lr=0.1).
data.batch_size is the GLOBAL batch: each of the N ranks reads batch_size/N rows per step.

The run folder (local path or s3://...) receives config.yaml, plan.txt, metrics.jsonl,
checkpoints/<step>/ with 'latest' and 'best' pointers, and _SUCCESS when training finished.
--resume continues from the latest complete checkpoint (on any number of ranks), reusing the
run's config.yaml unless one is given.

Validation (the best checkpoint, early stopping) reads eval_split (default 'val'), never 'test'; a dataset
without 'val' validates on the last data.holdout_fraction (10%) of the train rows and trains on the rest
(config.yaml: eval_split holdout, data.holdout_rows N). The log says which, first and last.

examples:
  dlrmflow train --dataset data/criteo --run runs/r1 --preset criteo-sample
  dlrmflow train --dataset s3://b/ds --run s3://b/runs/r2 --config train.yaml --nproc 8
  dlrmflow train --dataset D --run R --nproc 8 --launcher.nnodes 2 --launcher.rdzv-endpoint host0:29500   # each node
  dlrmflow train --dataset s3://b/ds --run s3://b/runs/r3 --launcher slurm --launcher.nodes 4 --launcher.partition mi300x
"""

EVERYDAY = ("--run", "--dataset", "--config", "--preset", "--resume", "--nproc", "--launcher", "--epochs",
            "--max-steps", "--data.batch-size", "--optimizer.embedding.lr", "--optimizer.dense.lr",
            "--arch.embedding-dim", "--init-from.run", "--set")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run folder or URI (s3://bucket/prefix) for config, plan, metrics, "
                   "checkpoints")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--config", metavar="TRAIN.yaml", help="a training config YAML file of yours (sections arch, "
                     "optimizer, data, ...; training/presets/ has examples)")
    src.add_argument("--preset", metavar="NAME", help=f"a preset shipped with dlrmflow ({', '.join(preset_names())}): "
                     "its training settings (default: default)")
    p.add_argument("--resume", action="store_true", help="continue from the run's latest complete checkpoint")
    add_options(p, RanksConfig, root="launch", title="where the ranks run", aliases=NPROC_ALIAS)
    add_options(p, TrainConfig, root="train", defaults=TrainConfig.preset("default"), title="training config "
                "(defaults: the 'default' preset)")
    add_set_option(p, "train")


def resolve_config(args: argparse.Namespace):
    """The config of this run: file, preset, or the run's own (on --resume), plus the options given."""
    run = RunDir(args.run)
    if args.config:
        base = TrainConfig.from_yaml(args.config)
    elif args.preset:
        base = TrainConfig.preset(args.preset)
    elif args.resume and run.has_config():
        base = run.load_config()
    else:
        base = TrainConfig.preset("default")
    return build(TrainConfig, args, base.model_dump(mode="json"), root="train")


def run(args: argparse.Namespace) -> int:
    launch = build(RanksConfig, args, root="launch")
    cfg = resolve_config(args)
    cfg = cfg.model_copy(update={"init_from": champion_init(cfg.init_from)})
    run_dir = RunDir(args.run)
    existing = Checkpointer(run_dir).steps()
    if existing and not args.resume:
        raise UserError(f"{args.run}: run folder already has checkpoints (steps {existing}). "
                        "Fix: pass --resume to continue it, or choose a new --run.")
    console = Console(sys.stdout)
    output = RankOutput(console, run=run_dir, job="training")
    env = {PROGRESS_ENV: "bar" if console.tty else "lines",   # the ranks' own output is a pipe: they are told
           "PYTHONWARNINGS": "ignore::FutureWarning"}   # torch's deprecations of TorchRec's calls (as the train flow)
    code = build_launcher(launch.launcher).launch(run_dir, cfg, resume=args.resume, env=env, on_line=output)
    output.close()
    console.end_bar()
    if note := library_note(run_dir, output.library.count):
        print(note)
    return code


class Console:
    """The ranks' lines on this process's stdout; on a terminal, rank 0's tqdm bar redrawn in place (its redraws
    come as lines of their own, the pipe's reader ends a line at each "\\r")."""

    def __init__(self, stream):
        self.stream, self.tty, self.bar = stream, stream.isatty(), False

    def __call__(self, line: str) -> None:
        if self.tty and _BAR.match(line):
            self.stream.write("\r" + line.rstrip() + "\x1b[K")
            self.bar = True
        elif line.strip() or not self.tty:
            self.end_bar()
            self.stream.write(line + "\n")
        self.stream.flush()

    def end_bar(self) -> None:
        if self.bar:
            self.stream.write("\r\x1b[K")
            self.bar = False
