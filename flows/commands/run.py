"""`dlrmflow run`: the whole pipeline flow (ephemeral Prefect: no server needed)."""

from __future__ import annotations

HELP = "Run the pipeline: [synthetic data ->] preprocess -> train (torchrun) -> evaluate, as Prefect flows."
DESCRIPTION = HELP + """

With no arguments: generates 60,000 synthetic Criteo rows (or reuses them), preprocesses, trains on
2 CPU processes, evaluates on the test split, and prints where everything is and the metrics.
Running it again reuses the dataset and the finished (or resumes the interrupted) training run.

examples:
  dlrmflow run
  dlrmflow run --input data/day_*.gz --preset criteo-sample --store s3://bucket/dlrm
  dlrmflow run --input adult.parquet --spec examples/adult.yaml --split random:train=0.8,val=0.1,test=0.1,seed=0

Prefect runs in ephemeral mode unless PREFECT_API_URL points at a server (then the runs show in its UI).
S3 settings come from the AWS_* variables or --credentials-block.
"""


def add_arguments(p) -> None:
    g = p.add_argument_group("data and store")
    g.add_argument("--input", dest="inputs", action="append", default=[], metavar="[SPLIT=]PATH_OR_URI",
                   help="input files, folders or globs (repeatable); default: synthetic Criteo logs")
    g.add_argument("--rows", type=int, help="rows of synthetic data when no --input is given (default 60000)")
    g.add_argument("--store", metavar="URI", help="artifact store root (default $DLRMFLOW_STORE, else ./artifacts)")
    g.add_argument("--credentials-block", metavar="NAME", help="Prefect Secret block with the S3 settings")
    g.add_argument("--run-name", help="run folder name under <store>/runs/ (default: derived, so re-runs resume)")
    g = p.add_argument_group("preprocessing (as in `dlrmflow preprocess`)")
    g.add_argument("--spec", default="criteo", help="`criteo` or an input spec YAML")
    g.add_argument("--split", help="split rule, e.g. ordered:train=0.8,val=0.1,test=0.1")
    g.add_argument("--frequency-threshold", type=int, metavar="T")
    g.add_argument("--count-on", choices=["train", "all"])
    g.add_argument("--numerical-dtype", choices=["float16", "float32"])
    g.add_argument("--on-bad-row", choices=["error", "skip"])
    g.add_argument("--max-bad-fraction", type=float)
    g.add_argument("--workers", type=int, help="input files processed at once (default 1)")
    g = p.add_argument_group("training (as in `dlrmflow train`)")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--config", help="training config YAML")
    src.add_argument("--preset", help="built-in training preset (default: default)")
    g.add_argument("--nproc", type=int, default=2, help="training processes (default 2)")
    g.add_argument("--epochs", type=int)
    g.add_argument("--max-steps", type=int)
    g.add_argument("--checkpoint-every", type=int)
    g.add_argument("--seed", type=int)
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a training config field")
    g = p.add_argument_group("evaluation")
    g.add_argument("--eval-split", default="test", help="split to evaluate on (default test)")
    g.add_argument("--checkpoint", default="best", help="best, latest or a step (default best)")


def build_config(args):
    """The PipelineConfig of the command line."""
    import yaml
    from pydantic import ValidationError

    from common.errors import UserError
    from flows.config import PipelineConfig
    from training.config import TrainConfig

    train = TrainConfig.from_yaml(args.config) if args.config else TrainConfig.preset(args.preset or "default")
    overrides = {k: v for k, v in {"epochs": args.epochs, "max_steps": args.max_steps, "seed": args.seed,
                                   "checkpoint_every": args.checkpoint_every}.items() if v is not None}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--set {item!r}: expected KEY=VALUE, e.g. --set optimizer.dense.lr=0.1")
        overrides[key.strip()] = yaml.safe_load(value)
    given = {k: v for k, v in {"inputs": args.inputs, "spec": args.spec, "split": args.split,
                               "frequency_threshold": args.frequency_threshold, "count_on": args.count_on,
                               "numerical_dtype": args.numerical_dtype, "on_bad_row": args.on_bad_row,
                               "max_bad_fraction": args.max_bad_fraction, "workers": args.workers}.items()
             if v is not None}
    # the preset's preprocessing (e.g. criteo-sample's split and threshold) unless given here
    preprocess = {**(train.preprocess or {}), **given}
    data = {"preprocess": preprocess, "train": train.with_overrides(overrides).model_dump(), "nproc": args.nproc,
            "evaluate": {"split": args.eval_split, "checkpoint": args.checkpoint},
            "synthetic": {"rows": args.rows} if args.rows else {},
            "store": args.store, "run_name": args.run_name, "credentials_block": args.credentials_block}
    try:
        return PipelineConfig(**{k: v for k, v in data.items() if v is not None})
    except ValidationError as e:
        err = e.errors()[0]
        raise UserError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}.") from None


def run(args) -> int:
    import os
    import time

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.logging.configuration import setup_logging
    setup_logging()  # before torch: fbgemm's import-time logging.info() would install a plain root handler
    from flows.store import Store

    start = time.monotonic()
    config = build_config(args)
    if not config.credentials_block:
        Store(config.store).check()  # fail fast, before Prefect starts
    from flows.pipeline import pipeline
    from training.report import format_table

    out = pipeline(config)
    print(f"\ndlrmflow run finished in {time.monotonic() - start:.0f} s")
    for key in ("store", "dataset", "run", "evaluation"):
        print(f"  {key:<11} {out[key]}")
    print(f"{config.evaluate.split} metrics (checkpoint step {out['metrics'].get('step')}):")
    print(format_table(out["metrics"]))
    return 0
