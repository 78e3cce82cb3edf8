"""`dlrmflow preprocess`: raw click logs -> NVIDIA split-binary dataset (see preprocessing.PreprocessConfig)."""

from __future__ import annotations

HELP = "Turn raw click logs (Criteo TSV, CSV, Parquet) into a split-binary dataset with vocabularies."
DESCRIPTION = HELP + """

Examples:
  dlrmflow preprocess --input data/day_*.gz --spec criteo --frequency-threshold 3 --out artifacts
  dlrmflow preprocess --input train=data/day_0.gz --input test=data/day_1.gz --out s3://bucket/store
  dlrmflow preprocess --input adult.parquet --spec examples/adult.yaml --split random:train=0.8,test=0.2,seed=0 --out artifacts

Options on the command line override the spec's metadata.preprocessing defaults. Running again with
the same inputs and options reuses the finished dataset; an interrupted run resumes where it stopped.
S3 endpoints and credentials come from the standard AWS_* environment variables.
"""


def add_arguments(parser) -> None:
    from flows.options import add_options
    from preprocessing.config import PreprocessConfig

    add_options(parser, PreprocessConfig)


def run(args) -> int:
    import preprocessing
    from flows.options import build

    print(preprocessing.run(build(preprocessing.PreprocessConfig, args)))
    return 0
