"""`dlrmflow run`: the whole pipeline flow (ephemeral Prefect: no server needed)."""

from __future__ import annotations

import sys
import time

from common.errors import UserError
from common.store import Store
from flows.options import NPROC_ALIAS, add_options, add_set_option, build, collect
from nightly.config import PipelineConfig, refuse_renamed
from nightly.night import record_setup_failed, set_up
from nightly.window import run_date
from training import RunDir, TrainConfig, format_table, library_note

DESCRIPTION = """\
With no arguments: generates 60,000 synthetic Criteo rows (or reuses them), preprocesses, trains on
2 CPU processes, evaluates on the test split, and prints where everything is and the metrics.
Running it again reuses the dataset and the finished (or resumes the interrupted) training run.

examples:
  dlrmflow run
  dlrmflow run --input data/day_*.gz --preset criteo-sample --store s3://bucket/dlrm
  dlrmflow run --input adult.parquet --spec examples/adult.yaml --split random:train=0.8,val=0.1,test=0.1,seed=0
  dlrmflow run --date 2026-11-05 --input 'logs/{date}/part-*' --train-days 3 --model demo

A dated run (--train-days, inputs with {date} or {date:%Y/%m/%d}) trains on the days before --date
(default: yesterday), validates on the last of them, tests on --date, and with --model promotes the
new model when it beats the champion (store/models/NAME). Without inputs it uses drifting synthetic days.

Prefect runs in ephemeral mode unless PREFECT_API_URL points at a server (then the runs show in its UI).
S3 settings come from the AWS_* variables or --credentials-block.
"""

EVERYDAY = ("--inputs", "--spec", "--split", "--frequency-threshold", "--preset", "--config", "--store", "--epochs",
            "--data.batch-size", "--nproc", "--launcher", "--date", "--train-days", "--model", "--set")


def add_arguments(p) -> None:
    p.add_argument("--config", metavar="TRAIN.yaml", help="a training config YAML file of yours (sections arch, "
                   "optimizer, data, ...; instead of a preset's training settings)")
    p.add_argument("--date", help="the day a dated run tests on, YYYY-MM-DD (default: today minus --lag-days)")
    add_options(p, PipelineConfig, root="pipeline", flatten={"preprocess", "train", "window"},
                aliases=NPROC_ALIAS)
    add_set_option(p, "pipeline", "train.optimizer.dense.lr=0.1")


def build_config(args):
    """The PipelineConfig of the command line: the preset (or --config), then the options given."""
    given = collect(args, "pipeline")
    refuse_renamed(given)
    base = PipelineConfig().model_dump(mode="json")
    if args.config:
        if given.get("preset"):
            raise UserError("--preset and --config exclude each other. Fix: pass one of the two.")
        base["train"] = TrainConfig.from_yaml(args.config).model_dump(mode="json")
    config, notes = build(PipelineConfig, args, base, root="pipeline").with_preset(given)
    for note in notes:
        _say(note)
    return config


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args) -> int:
    start = time.monotonic()
    config = build_config(args)
    from flows.pipeline import pipeline   # heavy: Prefect, after the config is checked

    store = Store(config.store)
    date = run_date(args.date, None, config.window) if config.dated else None
    if args.date and not date:
        raise UserError("--date is for dated runs. Fix: pass --train-days N (and inputs with {date}).")
    try:
        set_up(config, store, date)  # fail fast, before Prefect starts
    except UserError as e:   # the night's history says so, as the flow's failure hook would
        record_setup_failed(config, store, date, e, owner="dlrmflow run (failed)", say=_say)
        raise
    if not config.credentials_block:
        store.check()

    out = pipeline(config, date)
    run_dir, evaluation = RunDir(out["run"]), out["evaluation"]
    where = {**{key: out[key] for key in ("date", "store", "dataset") if key in out}, "run": run_dir.uri,
             "checkpoint": run_dir.join(RunDir.CHECKPOINTS, str(out["metrics"].get("step"))),
             "metrics": f"{evaluation}/{RunDir.EVAL_METRICS}",
             "plots": f"{evaluation}/{RunDir.ROC}, {RunDir.CALIBRATION}"}
    print(f"\ndlrmflow run finished in {time.monotonic() - start:.0f} s")
    for key, location in where.items():
        print(f"  {key:<11} {location}")
    print(f"  {'validation':<11} {run_dir.load_config().validation_text()}")
    print(f"{config.evaluate.split} metrics (checkpoint step {out['metrics'].get('step')}):")
    print(format_table(out["metrics"]))
    if decision := out.get("decision"):
        print(f"model {config.model}: {decision['decision']} ({decision['reason']})")
    if note := library_note(run_dir):
        print(note)
    return 0
