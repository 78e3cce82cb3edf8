"""`dlrmflow synth`: write synthetic Criteo-format TSV files with a known best achievable AUC."""

from __future__ import annotations

import argparse
import json

from common.errors import UserError

HELP = "Generate synthetic Criteo-format click logs (labels from a planted model with a known best AUC)."
DESCRIPTION = HELP + """

Writes part-NNNNN.tsv[.gz] (40 tab-separated fields, like the Kaggle DAC train.txt) and, last,
_synth_metadata.json with the label rate, the best achievable ROC AUC and log loss, and the
planted model. The same --seed and --rows give identical bytes, whatever --files or --workers.

example: dlrmflow synth --rows 1M --files 4 --gzip --out data/synth
"""

_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9}


def _count(text: str) -> int:
    """An integer such as 1000000, 1e6, 250k or 10M."""
    t = text.strip().lower().replace("_", "")
    scale = _SUFFIXES.get(t[-1:], 1)
    try:
        value = float(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a row count: {text!r} (use e.g. 1000000, 1e6 or 1M)") from None
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number of rows: {text!r}")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from preprocessing.synthetic import SynthConfig

    fields = SynthConfig.model_fields
    for name, field in fields.items():
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            parser.add_argument(flag, action="store_true", help=field.description)
            continue
        kind = _count if name == "rows" else field.annotation
        default = None if field.is_required() else field.default
        extra = "" if default is None else f" (default: {default})"
        parser.add_argument(flag, type=kind, required=field.is_required(), default=default,
                            metavar=name.upper(), help=field.description + extra)
    parser.add_argument("--quiet", action="store_true", help="No progress bar; print only the metadata path.")


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError
    from tqdm import tqdm

    from preprocessing.synthetic import METADATA_FILE, SynthConfig, write

    try:
        config = SynthConfig(**{name: getattr(args, name) for name in SynthConfig.model_fields})
    except ValidationError as e:
        problems = "; ".join(f"--{'-'.join(map(str, err['loc'])).replace('_', '-')}: {err['msg']}" for err in e.errors())
        raise UserError(f"invalid synth options: {problems}") from None
    with tqdm(total=config.rows, unit="rows", unit_scale=True, disable=args.quiet, desc="synth") as bar:
        metadata = write(config, progress=bar.update)
    target = config.out.rstrip("/") + "/" + METADATA_FILE
    if args.quiet:
        print(target)
    else:
        summary = {k: metadata[k] for k in ("rows", "label_rate", "best_auc", "best_logloss")}
        print(f"wrote {len(metadata['files'])} file(s) and {target}: {json.dumps(summary)}")
    return 0
