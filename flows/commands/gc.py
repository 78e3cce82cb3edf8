"""`dlrmflow gc`: remove from a store what no champion, recent night, lease or window needs (see models.gc)."""

from __future__ import annotations

import sys

from flows.options import add_options, build
from models import GcConfig, gc

DESCRIPTION = """\
Kept: every model's champion (its run, dataset and bundles: models/ is never touched), the runs of each
model's last --keep-nights decided nights and their datasets, anything under a live lease (a training, an
evaluation, a preprocessing job), the parsed parts of every day a model's next window reads (of the dated
--inputs templates, less --retain-days), and any run, dataset or work folder no model names for --keep-nights
days after its last write. Everything else goes, with the .tmp-* leftovers of killed writes (after an hour);
raw inputs never. It runs under the store lease; a kill midway leaves nothing that looks complete, and the next
gc finishes it. Prints what went (with --dry-run: what would go), its size and why. The nightly pipeline runs it
after each night's decision (--gc.keep-nights, --gc.dry-run).

examples:
  dlrmflow gc --store artifacts --dry-run
  dlrmflow gc --store s3://bucket/dlrm --keep-nights 7 --input 's3://logs/{date}/*.gz' --retain-days 2
"""


def add_arguments(parser) -> None:
    add_options(parser, GcConfig, root="gc")


def run(args) -> int:
    config = build(GcConfig, args, root="gc")
    report = gc.collect(config, say=lambda line: print(line, file=sys.stderr, flush=True))
    print(report.table())
    return 0
