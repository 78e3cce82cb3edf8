"""`dlrmflow train`: distributed TorchRec DLRM training under torchrun."""

from __future__ import annotations

import argparse

import yaml

from common.errors import UserError

HELP = "train a sharded TorchRec DLRM on a dataset (torchrun; checkpoints; resume)"
DESCRIPTION = """Train a TorchRec DLRM (dot or DCN-v2 interaction) on a split_binary dataset.

The config comes from --config TRAIN.yaml or --preset NAME (default preset: 'default');
flags below override it, and --set KEY=VALUE overrides any field (e.g. --set optimizer.dense.lr=0.1).
data.batch_size is the GLOBAL batch: each of the N ranks reads batch_size/N rows per step.

The run folder (local path or s3://...) receives config.yaml, plan.txt, metrics.jsonl and
checkpoints/<step>/ with 'latest' and 'best' pointers. --resume continues from the latest
complete checkpoint (on any number of ranks), reusing the run's config.yaml unless one is given.

examples:
  dlrmflow train --dataset data/criteo --run runs/r1 --preset criteo-sample
  dlrmflow train --dataset s3://b/ds --run s3://b/runs/r2 --config train.yaml --nproc 8
  dlrmflow train --dataset D --run R --nproc 8 --nnodes 2 --rdzv-endpoint host0:29500   # on each node
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", help="dataset folder or URI written by `dlrmflow preprocess` (default: the config's)")
    p.add_argument("--run", required=True, help="run folder or URI (s3://bucket/prefix) for config, plan, metrics, checkpoints")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--config", help="training config YAML (see training/presets/ for examples)")
    src.add_argument("--preset", help="built-in config preset name")
    p.add_argument("--nproc", type=int, default=1, help="processes (ranks) on this node (default 1)")
    p.add_argument("--nnodes", type=int, default=1, help="number of nodes (>1 needs --rdzv-endpoint)")
    p.add_argument("--rdzv-endpoint", help="HOST:PORT of the c10d rendezvous for multi-node runs")
    p.add_argument("--node-rank", type=int, help="this node's rank (optional with c10d rendezvous)")
    p.add_argument("--checkpoint-every", type=int, help="save a checkpoint every STEPS steps")
    p.add_argument("--resume", action="store_true", help="continue from the run's latest complete checkpoint")
    p.add_argument("--seed", type=int, help="seed of the initial weights and the data order")
    p.add_argument("--epochs", type=int, help="passes over the training split")
    p.add_argument("--max-steps", type=int, help="stop after this many global steps")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field by its dotted name (repeatable)")


def resolve_config(args: argparse.Namespace):
    """The config of this run: file, preset, or the run's own (on --resume), plus the overrides."""
    from training.config import TrainConfig
    from training.rundir import RunDir

    run = RunDir(args.run)
    if args.config:
        cfg = TrainConfig.from_yaml(args.config)
    elif args.preset:
        cfg = TrainConfig.preset(args.preset)
    elif args.resume and run.exists("config.yaml"):
        cfg = TrainConfig.from_yaml(run.join("config.yaml"), **run.options)
    else:
        cfg = TrainConfig.preset("default")
    overrides = {"dataset": args.dataset, "checkpoint_every": args.checkpoint_every, "seed": args.seed,
                 "epochs": args.epochs, "max_steps": args.max_steps}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--set {item!r}: expected KEY=VALUE, e.g. --set optimizer.dense.lr=0.1")
        overrides[key.strip()] = yaml.safe_load(value)
    return cfg.with_overrides(overrides)


def run(args: argparse.Namespace) -> int:
    from training.checkpoint import Checkpointer
    from training.launch import launch
    from training.rundir import RunDir

    if args.nnodes > 1 and not args.rdzv_endpoint:
        raise UserError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the c10d rendezvous, same on every node).")
    cfg = resolve_config(args)
    if not cfg.dataset:
        raise UserError("no dataset. Fix: pass --dataset DATASET_URI (a folder written by `dlrmflow preprocess`).")
    existing = Checkpointer(RunDir(args.run)).steps()
    if existing and not args.resume:
        raise UserError(f"{args.run}: run folder already has checkpoints (steps {existing}). "
                        "Fix: pass --resume to continue it, or choose a new --run.")
    return launch(args.run, cfg, nproc=args.nproc, nnodes=args.nnodes, rdzv_endpoint=args.rdzv_endpoint,
                  node_rank=args.node_rank, resume=args.resume)
