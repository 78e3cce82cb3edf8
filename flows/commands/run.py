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


# fields the pipeline fills in itself: not options
_FILLED_IN = {"train.dataset", "preprocess.out", "preprocess.progress"}


def add_arguments(p) -> None:
    from flows.config import PipelineConfig
    from flows.options import add_options, add_set_option

    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help="pipeline preset (flows/presets.yaml): a training preset and the preprocessing "
                     "it was tuned with, applied where the options given here do not conflict (default: default)")
    src.add_argument("--config", help="training config YAML (instead of a preset)")
    add_options(p, PipelineConfig, root="pipeline", flatten={"preprocess", "train"}, skip=_FILLED_IN)
    add_set_option(p, "pipeline", "train.optimizer.dense.lr=0.1")


def build_config(args):
    """The PipelineConfig of the command line: the preset (or --config), then the options given."""
    from flows.config import PipelineConfig, PipelinePreset
    from flows.options import build, collect
    from training.config import TrainConfig

    preset = PipelinePreset.named(args.preset or "default")
    train = TrainConfig.from_yaml(args.config) if args.config else TrainConfig.preset(preset.train)
    given = {k.split(".", 1)[1]: v for k, v in collect(args, "pipeline").items() if k.startswith("preprocess.")}
    applied, skipped = ({}, {}) if args.config else preset.hints(given)
    for key, value in applied.items():
        _say(f"preset {args.preset or 'default'}: preprocess.{key} = {value!r}")
    for key, why in skipped.items():
        _say(f"preset {args.preset}: preprocess.{key} not applied ({why})")
    base = PipelineConfig().model_dump(mode="json")
    base.update(train=train.model_dump(mode="json"), preprocess={**base["preprocess"], **applied})
    return build(PipelineConfig, args, base, root="pipeline")


def _say(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def run(args) -> int:
    import time

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
