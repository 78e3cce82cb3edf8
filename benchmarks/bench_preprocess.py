"""Preprocessing throughput and memory: `dlrmflow preprocess` vs TorchRec's Criteo utilities.

Preprocesses Criteo TSV with threshold 3 and an ordered train/val/test split (all passes, end to end,
including start-up) with the default settings (workers: the machine's cores) unless --workers is given,
and in the same run processes the first row count's rows with TorchRec's ``tsv_to_npys`` +
``sparse_to_contiguous`` (one file). Prints one JSON line per measurement and a markdown table for
benchmarks/RESULTS.md.

Inputs: ``--data synth`` (``dlrmflow synth`` rows, generated into the work folder) or ``--data kaggle-like
--data-dir DIR`` (the files DIR/part-*.tsv of ``../shared/tools/kaggle_like_cardinalities.py``; the first
N rows of their concatenation are used). ``--layout files`` splits the rows into ``--files`` files,
``one-file`` keeps them in one; ``--gz`` gzips the inputs.

usage: python benchmarks/bench_preprocess.py [--rows 1000000 4000000] [--files 4] [--layout files|one-file]
                                             [--data synth|kaggle-like] [--data-dir DIR] [--gz]
                                             [--workers N] [--skip-reference] [--work DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic.generator import METADATA_FILE  # noqa: E402
from measure import checked, load_average, run_measured  # noqa: E402

BIN = Path(sys.executable).parent




def _synth(rows: int, files: int, gz: bool, out: Path) -> None:
    if (out / METADATA_FILE).exists():
        return
    checked(run_measured([str(BIN / "dlrmflow"), "synth", "--rows", str(rows), "--files", str(files),
                         "--seed", "0", "--out", str(out)] + (["--gzip"] if gz else [])), "synth")


def _from_dir(source: Path, rows: int, files: int, gz: bool, out: Path) -> None:
    """The first ``rows`` rows of source/part-*.tsv (concatenated) as ``files`` files of equal row counts."""
    if (out / "_DONE").exists():
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    per = [rows // files + (k < rows % files) for k in range(files)]
    lines = (line for part in sorted(source.glob("part-*.tsv")) for line in open(part, "rb"))
    for k, n in enumerate(per):
        name = out / f"part-{k:05d}.tsv{'.gz' if gz else ''}"
        with (gzip.open(name, "wb", compresslevel=6) if gz else open(name, "wb")) as f:
            for _ in range(n):
                line = next(lines, None)
                if line is None:
                    raise SystemExit(f"{source} holds fewer than {rows} rows")
                f.write(line)
    (out / "_DONE").write_text("")


def _ours(data: Path, store: Path, workers: int | None, rows: int) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    m = checked(run_measured([str(BIN / "dlrmflow"), "preprocess", "--input", str(data / "part-*.tsv*"), "--spec",
                             "criteo", "--split", "ordered:train=0.8,val=0.1,test=0.1", "--frequency-threshold", "3",
                             "--no-progress", "--out", str(store)]
                            + (["--workers", str(workers)] if workers else [])),
               "dlrmflow preprocess")
    return {"tool": "dlrmflow preprocess", "rows": rows, "files": len(list(data.glob("part-*.tsv*"))),
            "workers": workers or "default", "wall_s": round(m.wall_s, 2),
            "cpu_s": round(m.cpu_s, 2), "cpu_pct": round(100 * m.cpu_s / m.wall_s),
            "rows_per_s": round(rows / m.wall_s),
            "peak_rss_mb": round(m.peak_rss_mb), "load": load_average()}


def _reference(data: Path, work: Path, rows: int) -> dict:
    one = work / f"reference_input_{data.name}.tsv"
    if not one.exists():
        with open(one, "wb") as out:
            for part in sorted(data.glob("part-*.tsv*")):
                with (gzip.open if part.suffix == ".gz" else open)(part, "rb") as f:
                    shutil.copyfileobj(f, out)
    out_dir = work / "reference_out"
    shutil.rmtree(out_dir, ignore_errors=True)
    script = Path(__file__).resolve().parent / "torchrec_criteo_reference.py"
    m = checked(run_measured([sys.executable, str(script), str(one), str(out_dir), "3"]), "torchrec reference")
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"tool": "torchrec BinaryCriteoUtils", "rows": rows, "files": 1, "workers": 1, "wall_s": round(m.wall_s, 2),
            "cpu_s": round(m.cpu_s, 2), "cpu_pct": round(100 * m.cpu_s / m.wall_s),
            "rows_per_s": round(rows / m.wall_s),
            "peak_rss_mb": round(m.peak_rss_mb), "load": load_average(),
            "detail": m.output.strip().splitlines()[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--files", type=int, default=4, help="files per row count with --layout files")
    ap.add_argument("--layout", choices=["files", "one-file"], default="files")
    ap.add_argument("--data", choices=["synth", "kaggle-like"], default="synth")
    ap.add_argument("--data-dir", default=None, help="with --data kaggle-like: the folder of its part-*.tsv")
    ap.add_argument("--gz", action="store_true", help="gzip-compressed inputs")
    ap.add_argument("--workers", type=int, default=None, help="default: dlrmflow's default (the cores)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of dlrmflow per row count (the machine is shared)")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one, removed at the end)")
    args = ap.parse_args()
    if args.data == "kaggle-like" and not args.data_dir:
        ap.error("--data kaggle-like needs --data-dir DIR (see ../shared/tools/kaggle_like_cardinalities.py)")
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_preprocess_"))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    files = 1 if args.layout == "one-file" else args.files
    results = []
    for rows in args.rows:
        data = work / f"{args.data}_{rows}_{files}{'_gz' if args.gz else ''}"
        if args.data == "synth":
            _synth(rows, files, args.gz, data)
        else:
            _from_dir(Path(args.data_dir), rows, files, args.gz, data)
        for _ in range(args.repeat):
            results.append(_ours(data, work / "store", args.workers, rows))
            print(json.dumps(results[-1]), flush=True)
        if rows == args.rows[0] and not args.skip_reference:
            results.append(_reference(data, work, rows))
            print(json.dumps(results[-1]), flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    import polars
    print(f"\nmachine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"polars {polars.__version__}; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print(f"data: {args.data}, layout: {args.layout}{', gzip' if args.gz else ''}\n")
    print("| tool | rows | files | workers | wall s | CPU s | CPU % | rows/s | peak RSS MB | load (1 min) |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['tool']} | {r['rows']:,} | {r['files']} | {r['workers']} | {r['wall_s']} | {r['cpu_s']} "
              f"| {r['cpu_pct']} | {r['rows_per_s']:,} | {r['peak_rss_mb']} | {r['load']} |")
    first = [r for r in results if r["tool"].startswith("dlrmflow") and r["rows"] == args.rows[0]]
    ours = max(first, key=lambda r: r["rows_per_s"]) if first else None   # the best of the repeats
    ref = next((r for r in results if r["tool"].startswith("torchrec")), None)
    if ours and ref:
        print(f"\nratio (ours / TorchRec, {args.rows[0]:,} rows): "
              f"{ours['rows_per_s'] / ref['rows_per_s']:.1f}x by rows/s, "
              f"{ref['cpu_s'] / ours['cpu_s']:.1f}x by CPU s")
    big = next((r for r in results if r["tool"].startswith("dlrmflow") and r["rows"] == args.rows[-1]), None)
    if ours and big and big is not ours:
        print(f"peak RSS {big['rows']:,} / {ours['rows']:,} rows: {big['peak_rss_mb'] / ours['peak_rss_mb']:.2f}x")


if __name__ == "__main__":
    main()
