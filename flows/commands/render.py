"""`dlrmflow render`: print the sbatch script or Kubernetes manifest a launcher would submit (nothing is submitted)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.config import load_yaml
from common.errors import UserError
from flows.options import add_options, build
from training import RanksConfig, build_launcher, train_job

DESCRIPTION = """\
Evaluation and scoring on Slurm or Kubernetes submit the same script or manifest, with their own rank module
(training.evaluate_worker, training.score_worker) and arguments, and their job's name (dlrmflow-evaluate-RUN).

examples:
  dlrmflow render --run s3://bucket/runs/r1 --launcher slurm --launcher.nodes 4 --launcher.partition mi300x
  dlrmflow render --run s3://bucket/runs/r1 --launcher kubernetes --launcher.nodes 2 --launcher.image REGISTRY/dlrmflow-rocm:0.1.0
  dlrmflow render --run s3://bucket/runs/r1 --config launcher.yaml > job.yaml
"""

EVERYDAY = ("--run", "--config", "--resume", "--launcher", "--launcher.nodes", "--launcher.gpus-per-node",
            "--launcher.partition", "--launcher.image", "--launcher.namespace")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run folder URI the ranks read config.yaml from")
    p.add_argument("--config", metavar="LAUNCHER.yaml", help="a launcher config YAML file of yours (kind: slurm|kubernetes, ...)")
    p.add_argument("--resume", action="store_true", help="render the --resume variant")
    add_options(p, RanksConfig, root="launch", skip={"launcher.nproc"})


def run(args: argparse.Namespace) -> int:
    launcher = load_yaml(Path(args.config).read_text(), args.config) if args.config else {"kind": "slurm"}
    config = build(RanksConfig, args, {"launcher": launcher}, root="launch")
    if config.launcher.kind == "local":
        raise UserError("the local launcher submits nothing to render. Fix: --launcher slurm or --launcher kubernetes.")
    sys.stdout.write(build_launcher(config.launcher).render(train_job(args.resume), args.run))
    return 0
