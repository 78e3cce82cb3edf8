"""`dlrmflow synth`: write synthetic Criteo-format TSV files with a known best achievable AUC."""

from __future__ import annotations

import argparse
import json

HELP = "Generate synthetic Criteo-format click logs (labels from a planted model with a known best AUC)."
DESCRIPTION = HELP + """

Writes part-NNNNN.tsv[.gz] (40 tab-separated fields, like the Kaggle DAC train.txt) and, last,
_synth_metadata.json with the label rate, the best achievable ROC AUC and log loss, and the
planted model. The same --seed and --rows give identical bytes, whatever --files or --workers.

example: dlrmflow synth --rows 1M --files 4 --gzip --out data/synth
"""

def add_arguments(parser: argparse.ArgumentParser) -> None:
    from flows.options import add_options
    from preprocessing.synthetic import SynthConfig

    add_options(parser, SynthConfig)
    parser.add_argument("--quiet", action="store_true", help="No progress bar; print only the metadata path.")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from flows.options import build
    from preprocessing.synthetic import METADATA_FILE, SynthConfig, write

    config = build(SynthConfig, args)
    with tqdm(total=config.rows, unit="rows", unit_scale=True, disable=args.quiet, desc="synth") as bar:
        metadata = write(config, progress=bar.update)
    target = config.out.rstrip("/") + "/" + METADATA_FILE
    if args.quiet:
        print(target)
    else:
        summary = {k: metadata[k] for k in ("rows", "label_rate", "best_auc", "best_logloss")}
        print(f"wrote {len(metadata['files'])} file(s) and {target}: {json.dumps(summary)}")
    return 0
