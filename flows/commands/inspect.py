"""`dlrmflow inspect DATASET_URI`: print a dataset's summary."""

from __future__ import annotations

HELP = "Print a preprocessed dataset's summary (rows per split, cardinalities, dtypes, share of index 0, " \
    "hotness and mean/max list length)."


def add_arguments(parser) -> None:
    parser.add_argument("dataset", metavar="DATASET_URI", help="dataset folder (or its feature_spec.yaml), local or s3://")


def run(args) -> int:
    from preprocessing.inspect import summary
    print(summary(args.dataset))
    return 0
