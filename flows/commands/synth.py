"""`dlrmflow synth`: write synthetic Criteo-format TSV files with a known best achievable AUC."""

from __future__ import annotations

import argparse

from common.progress import progress
from flows.options import add_options, build
from synthetic.generator import METADATA_FILE, SynthConfig, day_dates, day_folder, read_day, write, write_days

DESCRIPTION = """\
Writes part-NNNNN.tsv[.gz] (40 tab-separated fields, like the Kaggle DAC train.txt) and, last,
_synth_metadata.json with the label rate, the best achievable ROC AUC and log loss, and the
planted model. The same --seed and --rows give identical bytes, whatever --files or --workers.

With --days, writes one folder per date, OUT/YYYY-MM-DD/part-NNNNN.tsv[.gz] and its own
_synth_metadata.json (the day's best AUC and drift state), whose planted model drifts slowly
from day to day (effects move, new ids appear, old ones fade; --drift 0: none). A day's bytes
depend only on its date, --seed, --rows-per-day, --files, --gzip and the model options, not on
--start or --days; a day folder already complete for these settings is kept, not rewritten.

With --multi-hot-sizes (MLPerf DLRMv2-like), each categorical field is a '|'-separated list of N hex
ids, and _synth_spec.yaml, the input spec for `dlrmflow preprocess --spec`, is written beside the data.

examples:
  dlrmflow synth --rows 1M --files 4 --gzip --out data/synth
  dlrmflow synth --rows 1M --files 4 --out data/mh --multi-hot-sizes 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1
  dlrmflow synth --days 7 --start 2026-11-01 --rows-per-day 100k --files 2 --out data/days
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, SynthConfig, skip=("start",))
    # text, not YAML: the model's own date check gives the message for a bad date
    parser.add_argument("--start", dest="@config:start", default=argparse.SUPPRESS, metavar="START",
                        help=SynthConfig.model_fields["start"].description)
    parser.add_argument("--quiet", action="store_true", help="No progress bar; print only the metadata path(s).")


def run(args: argparse.Namespace) -> int:
    config = build(SynthConfig, args)
    if config.days is None:
        total, kept = config.rows, set()
    else:
        total = config.days * config.rows_per_day
        kept = {d.isoformat() for d in day_dates(config) if read_day(config, d) is not None}
    with progress(total, "synth", "rows", disable=args.quiet) as bar:   # a bar on a terminal, else a line per tenth
        if config.days is None:
            written = [(config.out, write(config, progress=bar.update))]
        else:
            written = [(day_folder(config.out, m["date"]), m) for m in write_days(config, progress=bar.update)]
    for folder, metadata in written:
        target = folder.rstrip("/") + "/" + METADATA_FILE
        if args.quiet:
            print(target)
        else:
            done = "kept (already complete)" if metadata.get("date") in kept else "wrote"
            print(f"{done} {len(metadata['files'])} file(s) and {target}: {metadata['rows']:,} rows, label rate "
                  f"{metadata['label_rate']:.2%}, best achievable ROC AUC {metadata['best_auc']:.4f}, log loss "
                  f"{metadata['best_logloss']:.4f}")
    return 0
