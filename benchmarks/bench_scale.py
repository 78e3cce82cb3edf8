"""Scale evidence for `dlrmflow preprocess`: rows/s, CPU and peak RSS from 1M to 100M rows.

For each size N: synthetic Criteo TSV (``dlrmflow synth --rows N``, in ``ceil(N / rows-per-file)`` files, at
least ``--min-files``; reused when ``<work>/data-N`` is complete), then ``dlrmflow preprocess`` with threshold 3,
an ordered split and default settings otherwise, measured by ``measure.run_measured`` (wall, CPU, peak RSS of
the process tree). Its store is deleted after each size. The table gives the distinct values the counting
stage holds (the generator's expected count over all rows) and the values kept (cardinalities - 1 from the
dataset's feature spec), so that peak RSS per million distinct values can be read off; ``--scaling N`` also
runs size N with 1 and 2 workers (the parallel scaling), ``--clean`` deletes the work folder at the end.
``--link 100M=20M`` makes size 100M from size 20M's files, each hard-linked 5 times (no generation, no disk):
5x the rows with the distinct values of 20M, which separates what grows with rows from what grows with them.

    python benchmarks/bench_scale.py --sizes 1M 4M 20M 100M --work /work/bench-data/scale [--scaling 4M] [--clean]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from measure import checked, run_measured  # noqa: E402
from synthetic import columns as sc  # noqa: E402
from synthetic.generator import METADATA_FILE, _row_count  # noqa: E402

BIN = Path(sys.executable).parent



def _synth(rows: int, files: int, out: Path) -> float | None:
    """Generate ``rows`` rows in ``files`` files unless already there; the wall seconds it took (None: reused)."""
    if (out / METADATA_FILE).exists() and json.loads((out / METADATA_FILE).read_text())["rows"] == rows:
        return None
    shutil.rmtree(out, ignore_errors=True)
    m = checked(run_measured([str(BIN / "dlrmflow"), "synth", "--rows", str(rows), "--files", str(files),
                             "--seed", "0", "--quiet", "--out", str(out)]), "synth")
    return m.wall_s


def _link(rows: int, source: Path, out: Path) -> None:
    """Size ``rows`` as hard links to ``source``'s part files, repeated (``rows`` a multiple of its rows)."""
    meta = json.loads((source / METADATA_FILE).read_text())
    copies, rest = divmod(rows, meta["rows"])
    if rest:
        raise SystemExit(f"--link: {rows:,} rows is not a multiple of {meta['rows']:,}")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    parts = sorted(source.glob("part-*.tsv"))
    for i in range(copies):
        for j, part in enumerate(parts):
            os.link(part, out / f"part-{i * len(parts) + j:05d}.tsv")


@functools.lru_cache(maxsize=None)
def expected_distinct(rows: int) -> int:
    """Distinct categorical values in ``rows`` synthetic rows, all 26 columns (the generator's expectation)."""
    total = 0.0
    for prof in sc.CATEGORICAL.values():
        fitted, vocab = sc.fit(prof, rows)
        total += sc.expected_distinct(fitted, vocab, rows * (1 - prof.missing))
    return round(total)


def kept_values(store: Path) -> int:
    """Values kept by the thresholds, all categorical features: sum of (cardinality - 1) in the feature spec."""
    (spec,) = store.glob("datasets/*/feature_spec.yaml")
    features = yaml.safe_load(spec.read_text())["feature_spec"]
    return sum(f["cardinality"] - 1 for f in features.values() if "cardinality" in f)


def preprocess(data: Path, store: Path, rows: int, workers: int | None) -> dict:
    """One measured `dlrmflow preprocess` run (default workers unless ``workers``)."""
    shutil.rmtree(store, ignore_errors=True)
    cmd = [str(BIN / "dlrmflow"), "preprocess", "--input", str(data / "part-*.tsv"), "--spec", "criteo",
           "--split", "ordered:train=0.8,val=0.1,test=0.1", "--frequency-threshold", "3", "--no-progress",
           "--out", str(store)]
    if workers:
        cmd += ["--workers", str(workers)]
    m = checked(run_measured(cmd), "dlrmflow preprocess")
    result = {"rows": rows, "workers": workers or "default", "wall_s": round(m.wall_s, 1),
              "cpu_s": round(m.cpu_s, 1), "cpu_s_per_1m_rows": round(m.cpu_s / rows * 1e6, 2),
              "rows_per_s": round(rows / m.wall_s), "peak_rss_mb": round(m.peak_rss_mb),
              "kept": kept_values(store), "load": f"{os.getloadavg()[0]:.2f}"}
    shutil.rmtree(store, ignore_errors=True)
    return result


def _disk(path: Path) -> str:
    return subprocess.run(["df", "-h", str(path)], capture_output=True, text=True).stdout.splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["1M", "4M", "20M", "100M"], help="row counts (1M, 4e6, 250k)")
    ap.add_argument("--work", default="/work/bench-data/scale", help="folder for the data and the stores")
    ap.add_argument("--rows-per-file", default="2.5M", help="rows per input file (default 2.5M: 100M in 40 files)")
    ap.add_argument("--min-files", type=int, default=4)
    ap.add_argument("--scaling", help="also run this size with --workers 1 and --workers 2")
    ap.add_argument("--link", action="append", default=[], metavar="N=M",
                    help="make size N from size M's files (hard links; M earlier in --sizes)")
    ap.add_argument("--drop-data", action="store_true", help="delete the input data at the end")
    ap.add_argument("--clean", action="store_true", help="delete the work folder at the end")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    per_file = _row_count(args.rows_per_file)
    print(f"# {platform.node()} {os.cpu_count()} cores, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
          flush=True)
    links = {_row_count(n): _row_count(m) for n, m in (x.split("=") for x in args.link)}
    results = []
    for size in map(_row_count, args.sizes):
        files = max(args.min_files, math.ceil(size / per_file))
        data = work / f"data-{size}"
        print(f"# {size:,} rows; disk: {_disk(work)}", flush=True)
        if size in links:
            _link(size, work / f"data-{links[size]}", data)
            synth_s, files = None, len(list(data.glob("part-*.tsv")))
        else:
            synth_s = _synth(size, files, data)
        runs = [None] + ([1, 2] if args.scaling and _row_count(args.scaling) == size else [])
        for workers in runs:
            r = preprocess(data, work / "store", size, workers)
            r.update(files=files, synth_s=None if synth_s is None else round(synth_s, 1),
                     distinct=expected_distinct(links.get(size, size)), linked_from=links.get(size))
            print(json.dumps(r), flush=True)
            results.append(r)
    if args.drop_data:
        for size in map(_row_count, args.sizes):
            shutil.rmtree(work / f"data-{size}", ignore_errors=True)
    print("\n| rows | files | workers | wall s | CPU s | CPU s / 1M rows | rows/s | peak RSS MB | distinct values "
          "(expected) | kept at T=3 | RSS MB per 1M distinct (vs previous size) |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    previous = None
    for r in results:
        slope = ""
        if r["workers"] == "default":
            if previous and r["distinct"] > previous["distinct"]:
                slope = f"{(r['peak_rss_mb'] - previous['peak_rss_mb']) / ((r['distinct'] - previous['distinct']) / 1e6):.0f}"
            previous = r
        rows = f"{r['rows']:,}" + (f" (= {r['linked_from']:,} x {r['rows'] // r['linked_from']})" if r["linked_from"] else "")
        print(f"| {rows} | {r['files']} | {r['workers']} | {r['wall_s']} | {r['cpu_s']} | "
              f"{r['cpu_s_per_1m_rows']} | {r['rows_per_s']:,} | {r['peak_rss_mb']:,} | {r['distinct']:,} | "
              f"{r['kept']:,} | {slope} |")
    if args.clean:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
