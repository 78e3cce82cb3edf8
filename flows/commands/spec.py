"""`dlrmflow spec check SPEC [--input URI]` and `dlrmflow spec draft --input URI --out spec.yaml`."""

from __future__ import annotations

import sys

from common.atomic import write_uri
from common.errors import UserError
from common.store import read_text
from feature_spec import SpecError, spec_uri
from preprocessing.draft import draft_spec
from preprocessing.spec_check import check_spec_with_inputs

DESCRIPTION = """\
check: every problem of a spec YAML at once, each with its line and a fix (unknown keys with a did-you-mean, a
feature in no channel, values of a wrong type, rules across sections); with --input also against a sample of the
data (missing columns, text under numerical, a label that is not 0/1, a Parquet text column read as a list...).
Exit code 2 when there is a problem.

draft: read a sample of the inputs and write a commented spec that preprocesses without edits: the layout of a
text file (its separator, a header row or none, the marks of missing values: found from its first lines), the
label, each column's channel, transform, threshold or hash buckets, list columns, and the columns left out with
the reason. JSON lines are refused with the command that converts them to Parquet.

examples:
  dlrmflow spec draft --input data/ratings.parquet --label 'rating>=4' --out ratings.yaml
  dlrmflow spec check ratings.yaml --input data/ratings.parquet
  dlrmflow spec draft --input 'day_*.gz' --out day.yaml                 # raw Criteo: headerless TSV
  dlrmflow spec draft --input export.txt --no-header --names user,item,clicked --label clicked --out e.yaml
  dlrmflow preprocess --input data/ratings.parquet --spec ratings.yaml --out artifacts

See docs/spec.md for every key of a spec.
"""


def add_arguments(parser) -> None:
    # one parser for both verbs (not nested subcommands): the command line's unknown-option check sees every option
    parser.add_argument("verb", choices=("check", "draft"), help="check a spec, or draft one from the data")
    parser.add_argument("spec", nargs="?", metavar="SPEC", help="check: the spec YAML (a path or URI)")
    parser.add_argument("--input", action="append", default=[], metavar="URI",
                        help="input files, folders or globs, repeatable (CSV/TSV/other delimited text, with or "
                        "without a header, maybe compressed, or Parquet; local or s3): check compares the spec with "
                        "a sample of them, draft drafts from one")
    parser.add_argument("--rows", type=int, default=100_000, help="rows to sample (default 100000)")
    parser.add_argument("--label", metavar="COLUMN", help="draft: the label column, or a rule: 'rating>=4', "
                        "'income==>50K' (default: a column of two values named label, click, target...; in a headerless file a 0/1 "
                        "column, else the first or last of two values)")
    parser.add_argument("--name", help="draft: the dataset's name (metadata.name; default: the first file's name)")
    parser.add_argument("--out", metavar="PATH", help="draft: where to write the spec YAML ('-': stdout)")
    parser.add_argument("--header", dest="header", action="store_true", default=None,
                        help="draft: the text files' first line names the columns (default: found from the data)")
    parser.add_argument("--no-header", dest="header", action="store_false",
                        help="draft: the text files have no header row (columns c0, c1, ... or --names)")
    parser.add_argument("--names", metavar="A,B,...", help="draft: a headerless text file's column names, "
                        "comma-separated in file order")


def run(args) -> int:
    if args.verb == "draft" and (args.spec or not args.input or not args.out):
        raise UserError("spec draft takes --input URI and --out PATH (no SPEC). Fix: e.g. dlrmflow spec draft "
                        "--input data.parquet --label 'rating>=4' --out spec.yaml.")
    header, names = getattr(args, "header", None), getattr(args, "names", None)
    if args.verb == "check" and (not args.spec or args.label or args.out or args.name or header is not None
                                 or names):
        raise UserError("spec check takes SPEC and optionally --input URI. Fix: e.g. dlrmflow spec check spec.yaml "
                        "--input data.parquet.")
    if args.verb == "draft":
        text = draft_spec(args.input, args.label, args.rows, args.name, header,
                          [n.strip() for n in names.split(",")] if names else None)
        if args.out == "-":
            sys.stdout.write(text)
        else:
            write_uri(args.out, text)
            print(f"wrote {args.out}: check it with `dlrmflow spec check {args.out}"
                  f"{''.join(f' --input {i}' for i in args.input)}`", file=sys.stderr)
        return 0

    try:
        text = read_text(spec_uri(args.spec))   # a dataset folder: its feature_spec.yaml
    except FileNotFoundError:
        raise SpecError(f"feature spec '{args.spec}' does not exist.", fix="pass the path of a spec YAML.") from None
    spec, problems = check_spec_with_inputs(args.spec, text, args.input, args.rows)
    for p in problems:
        print(f"{args.spec}: {p}")
    if problems:
        print(f"{len(problems)} problem(s).", file=sys.stderr)
        return 2
    assert spec is not None
    print(f"{args.spec}: no problems: label {spec.label_feature}, {len(spec.numerical_features)} numerical, "
          f"{len(spec.categorical_features)} categorical" + (f"; checked against {len(args.input)} input(s)"
                                                              if args.input else ""))
    return 0
