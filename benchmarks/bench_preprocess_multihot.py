"""Preprocessing throughput of MLPerf-like multi-hot synthetic Criteo rows next to one-hot rows, in one run.

Generates the same rows (``dlrmflow synth --seed 0``) twice: one-hot, and with ``--multi-hot-sizes`` (MLPerf
DLRMv2's sizes by default: ~240 ids a row); preprocesses both with threshold 3 and an ordered train/val/test
split (``--spec criteo`` for one-hot, the written ``_synth_spec.yaml`` for multi-hot), end to end with
start-up. Prints one JSON line per measurement and a markdown table for benchmarks/RESULTS.md ("Multi-hot
preprocessing"). (A script of its own: bench_preprocess.py compares one-hot runs with TorchRec's utilities.)

usage: python benchmarks/bench_preprocess_multihot.py [--rows 1000000] [--files 4] [--workers 2]
                                                      [--multi-hot-sizes 3,2,1,...] [--work DIR]
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
from measure import checked, load_average, run_measured  # noqa: E402
from synthetic.generator import METADATA_FILE, SPEC_FILE  # noqa: E402

BIN = Path(sys.executable).parent
MLPERF = "3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1"




def _synth(rows: int, files: int, out: Path, sizes: str | None) -> dict:
    if not (out / METADATA_FILE).exists():
        extra = ["--multi-hot-sizes", sizes] if sizes else []
        checked(run_measured([str(BIN / "dlrmflow"), "synth", "--rows", str(rows), "--files", str(files), "--seed",
                             "0", "--quiet", "--out", str(out), *extra]), "synth")
    return json.loads((out / METADATA_FILE).read_text())


def _preprocess(data: Path, spec: str, store: Path, workers: int, rows: int, kind: str) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    m = checked(run_measured([str(BIN / "dlrmflow"), "preprocess", "--input", str(data), "--spec", spec,
                             "--split", "ordered:train=0.8,val=0.1,test=0.1", "--frequency-threshold", "3",
                             "--workers", str(workers), "--no-progress", "--out", str(store)]), "dlrmflow preprocess")
    ids = sum(f.stat().st_size for f in data.glob("part-*"))
    shutil.rmtree(store, ignore_errors=True)
    return {"data": kind, "rows": rows, "input_mb": round(ids / 2**20), "workers": workers,
            "wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2), "cpu_pct": round(100 * m.cpu_s / m.wall_s),
            "rows_per_s": round(rows / m.wall_s), "peak_rss_mb": round(m.peak_rss_mb), "load": load_average()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--multi-hot-sizes", default=MLPERF)
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one, removed at the end)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_multihot_"))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results = []
    for kind, sizes in (("one-hot", None), ("multi-hot", args.multi_hot_sizes)):
        data = work / f"{kind}_{args.rows}"
        meta = _synth(args.rows, args.files, data, sizes)
        spec = str(data / SPEC_FILE) if sizes else "criteo"
        results.append(_preprocess(data, spec, work / "store", args.workers, args.rows, kind))
        results[-1]["ids_per_row"] = sum((meta.get("multi_hot_sizes") or {"all": 26}).values())
        print(json.dumps(results[-1]), flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    import polars
    print(f"\nmachine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"polars {polars.__version__}; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| data | ids/row | rows | input MB | workers | wall s | CPU s | CPU % | rows/s | ids/s | peak RSS MB "
          "| load (1 min) |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['data']} | {r['ids_per_row']} | {r['rows']:,} | {r['input_mb']} | {r['workers']} | {r['wall_s']} "
              f"| {r['cpu_s']} | {r['cpu_pct']} | {r['rows_per_s']:,} | {r['rows_per_s'] * r['ids_per_row']:,} "
              f"| {r['peak_rss_mb']} | {r['load']} |")


if __name__ == "__main__":
    main()
