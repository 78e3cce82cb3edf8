"""`dlrmflow preprocess`: raw click logs -> NVIDIA split-binary dataset (see preprocessing.PreprocessConfig)."""

from __future__ import annotations

import preprocessing
from flows.options import add_options, build
from preprocessing.config import FlowPreprocessConfig

DESCRIPTION = """\
Examples:
  dlrmflow preprocess --input data/day_*.gz --spec criteo --frequency-threshold 3 --out artifacts
  dlrmflow preprocess --input train=data/day_0.gz --input test=data/day_1.gz --out s3://bucket/store
  dlrmflow preprocess --input adult.parquet --spec examples/adult.yaml --split random:train=0.8,test=0.2,seed=0 --out artifacts
  dlrmflow preprocess --input s3://logs/day_*.gz --out s3://bucket/store --task-runner dask --dask-address tcp://scheduler:8786

--store STORE and --out STORE are one option (the store the dataset is written into, as --store of the other
commands). Options on the command line override the spec's metadata.preprocessing defaults. Running again with
the same inputs and options reuses the finished dataset; an interrupted run resumes where it stopped.
S3 endpoints and credentials come from the standard AWS_* environment variables. With --task-runner dask
the preprocess flow runs (Prefect) and sends its per-file tasks to the Dask cluster (see docs/deploy.md).
"""


def add_arguments(parser) -> None:
    add_options(parser, FlowPreprocessConfig, aliases={"out": "--store"})   # --store: as every other command names it


def run(args) -> int:
    config = build(FlowPreprocessConfig, args)
    if config.task_runner == "threads":
        print(preprocessing.run(config))   # no Prefect needed
    else:
        from flows.preprocess import preprocess   # heavy: Prefect, for the dask task runner only

        print(preprocess(config))
    return 0
