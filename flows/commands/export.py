"""`dlrmflow export`: a model's champion or a run's checkpoint as a serving bundle (see training.export)."""

from __future__ import annotations

import argparse

from flows.options import add_options, build
from models import ExportConfig, scoring

DESCRIPTION = """Export a named model's champion (--model STORE/models/NAME) or a training run's checkpoint
(--run RUN, with --checkpoint best|latest|STEP) as a serving bundle in --out (a local folder or s3://):

  weights.pt         the unsharded weights, one plain state dict (whatever world size wrote the checkpoint)
  model.pt           TorchScript: (categorical [B, n_cat] int64, numerical [B, n_num] float32) -> [B]
  model.json         model config, feature order, table sizes, source run and step
  feature_spec.yaml  the dataset's feature spec; vocab/*.parquet its vocabularies
  input_spec.yaml    the input spec the dataset was preprocessed with (numerical transforms, hash buckets)
  manifest.json      sha256 of every file (written last)

Score raw rows with it in one process: dlrmflow score --bundle OUT --input RAW --out SCORES.
Exporting the same checkpoint to the same folder again does nothing.

examples:
  dlrmflow export --model store/models/ctr --out store/models/ctr/bundle
  dlrmflow export --run store/runs/r1 --checkpoint latest --out s3://bucket/bundles/r1
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_options(p, ExportConfig, root="export")


def run(args: argparse.Namespace) -> int:
    config = build(ExportConfig, args, root="export")
    manifest = scoring.export(config)
    source = manifest["source"]
    print(f"bundle of {source['run']} (step {source['step']}) -> {config.out}: {len(manifest['files'])} files")
    return 0
