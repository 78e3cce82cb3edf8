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
    from preprocessing.config import PreprocessConfig
    doc = {name: f.description for name, f in PreprocessConfig.model_fields.items()}
    parser.add_argument("--input", dest="inputs", action="append", required=True, metavar="[SPLIT=]PATH_OR_URI",
                        help=doc["inputs"] + " Repeat for more inputs.")
    parser.add_argument("--spec", default="criteo", help=doc["spec"])
    parser.add_argument("--split", help=doc["split"])
    parser.add_argument("--frequency-threshold", type=int, metavar="T", help=doc["frequency_threshold"])
    parser.add_argument("--count-on", choices=["train", "all"], default="train", help=doc["count_on"])
    parser.add_argument("--numerical-dtype", choices=["float16", "float32"], default="float16", help=doc["numerical_dtype"])
    parser.add_argument("--workers", type=int, default=1, metavar="W", help=doc["workers"])
    parser.add_argument("--on-bad-row", choices=["error", "skip"], default="error", help=doc["on_bad_row"])
    parser.add_argument("--max-bad-fraction", type=float, default=0.001, help=doc["max_bad_fraction"])
    parser.add_argument("--work-dir", help=doc["work_dir"])
    parser.add_argument("--no-progress", action="store_true", help="Do not show the progress bar.")
    parser.add_argument("--out", required=True, metavar="STORE_URI", help=doc["out"])


def run(args) -> int:
    from pydantic import ValidationError

    import preprocessing
    from common.errors import UserError
    try:
        config = preprocessing.PreprocessConfig(
            inputs=args.inputs, out=args.out, spec=args.spec, split=args.split,
            frequency_threshold=args.frequency_threshold, count_on=args.count_on,
            numerical_dtype=args.numerical_dtype, on_bad_row=args.on_bad_row,
            max_bad_fraction=args.max_bad_fraction, workers=args.workers, work_dir=args.work_dir,
            progress=not args.no_progress)
    except ValidationError as e:
        err = e.errors()[0]
        raise UserError(f"--{'-'.join(map(str, err['loc'])).replace('_', '-')}: {err['msg']}.") from None
    print(preprocessing.run(config))
    return 0
