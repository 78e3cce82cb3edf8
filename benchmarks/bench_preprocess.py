"""Preprocessing throughput and memory: `dlrmflow preprocess` vs TorchRec's Criteo utilities.

Generates synthetic Criteo TSV (``dlrmflow synth``), preprocesses it with threshold 3 and an
ordered train/val/test split (both passes, end to end, including start-up), and in the same run
processes the same 1M rows with TorchRec's ``tsv_to_npys`` + ``sparse_to_contiguous``.
Prints one JSON line per measurement and a markdown table for benchmarks/RESULTS.md.

usage: python benchmarks/bench_preprocess.py [--rows 1000000 4000000] [--files 4] [--workers 2]
                                             [--skip-reference] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from preprocessing.synthetic import METADATA_FILE  # noqa: E402
from measure import run_measured  # noqa: E402

BIN = Path(sys.executable).parent


def _check(m, what: str):
    if m.returncode != 0:
        raise SystemExit(f"{what} failed ({m.returncode}):\n{m.output[-3000:]}")
    return m


def _load() -> str:
    """The 1-minute load average after a measurement (above the core count, timings are provisional)."""
    return f"{os.getloadavg()[0]:.2f}"


def _synth(rows: int, files: int, out: Path) -> None:
    if (out / METADATA_FILE).exists():
        return
    _check(run_measured([str(BIN / "dlrmflow"), "synth", "--rows", str(rows), "--files", str(files),
                         "--seed", "0", "--out", str(out)]), "synth")


def _ours(data: Path, store: Path, workers: int, rows: int) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    m = _check(run_measured([str(BIN / "dlrmflow"), "preprocess", "--input", str(data / "part-*.tsv"), "--spec", "criteo",
                             "--split", "ordered:train=0.8,val=0.1,test=0.1", "--frequency-threshold", "3",
                             "--workers", str(workers), "--no-progress", "--out", str(store)]),
               "dlrmflow preprocess")
    return {"tool": "dlrmflow preprocess", "rows": rows, "workers": workers, "wall_s": round(m.wall_s, 2),
            "cpu_s": round(m.cpu_s, 2), "cpu_pct": round(100 * m.cpu_s / m.wall_s),
            "rows_per_s": round(rows / m.wall_s),
            "peak_rss_mb": round(m.peak_rss_mb), "load": _load()}


def _reference(data: Path, work: Path, rows: int) -> dict:
    one = work / "reference_input.tsv"
    if not one.exists():
        with open(one, "wb") as out:
            for part in sorted(data.glob("part-*.tsv")):
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out)
    out_dir = work / "reference_out"
    shutil.rmtree(out_dir, ignore_errors=True)
    script = Path(__file__).resolve().parent / "torchrec_criteo_reference.py"
    m = _check(run_measured([sys.executable, str(script), str(one), str(out_dir), "3"]), "torchrec reference")
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"tool": "torchrec BinaryCriteoUtils", "rows": rows, "workers": 1, "wall_s": round(m.wall_s, 2),
            "cpu_s": round(m.cpu_s, 2), "cpu_pct": round(100 * m.cpu_s / m.wall_s),
            "rows_per_s": round(rows / m.wall_s),
            "peak_rss_mb": round(m.peak_rss_mb), "load": _load(),
            "detail": m.output.strip().splitlines()[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one, removed at the end)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_preprocess_"))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results = []
    for rows in args.rows:
        data = work / f"synth_{rows}"
        _synth(rows, args.files, data)
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
    print("| tool | rows | workers | wall s | CPU s | CPU % | rows/s | peak RSS MB | load (1 min) |\n"
          "|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['tool']} | {r['rows']:,} | {r['workers']} | {r['wall_s']} | {r['cpu_s']} | {r['cpu_pct']} "
              f"| {r['rows_per_s']:,} | {r['peak_rss_mb']} | {r['load']} |")
    ours = next((r for r in results if r["tool"].startswith("dlrmflow") and r["rows"] == args.rows[0]), None)
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
