"""`dlrmflow inspect DATASET_URI [--verify]`: print a dataset's summary (and check every file)."""

from __future__ import annotations

from preprocessing.inspect import summary, verify


def add_arguments(parser) -> None:
    parser.add_argument("dataset", metavar="DATASET_URI", help="dataset folder (or its feature_spec.yaml), local or s3://")
    parser.add_argument("--verify", action="store_true",
                        help="re-read every file and compare its size and checksum with the dataset's metadata "
                        "(exit code 2 naming each file that differs)")


def run(args) -> int:
    print(summary(args.dataset))
    if args.verify:
        print(verify(args.dataset))
    return 0
