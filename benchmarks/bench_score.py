"""Scoring throughput, raw rows in -> probabilities out: a serving bundle in one process (`score --bundle`)
vs the DCP model on 2 ranks (`score --run --nproc 2`), on the same raw rows.

Set-up (not timed): `dlrmflow synth` writes ROWS synthetic Criteo TSV rows, `dlrmflow preprocess` makes a
dataset of them (frequency threshold 2), `dlrmflow train` trains a default-shaped DLRM for a few steps on 1
rank, `dlrmflow export` writes its bundle. Timed: each `dlrmflow score` command end to end (process start,
encoding with the model's vocabularies, prediction, the output Parquet), wall clock, best of --repeat.
rows/s = rows / wall s. Prints JSON lines and a markdown row per measurement.

usage: python benchmarks/bench_score.py [--rows 200000] [--repeat 1] [--work /tmp/bench-score]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def cli(*args: str, env: dict | None = None) -> float:
    """Run `dlrmflow ARGS`; returns its wall seconds (fails loudly)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=REPO, env=env or ENV,
                          capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"dlrmflow {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", default="/tmp/bench-score")
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    cli("synth", "--rows", str(args.rows), "--files", "1", "--out", str(work / "raw"), "--quiet")
    raw = sorted(p for p in (work / "raw").iterdir() if not p.name.startswith("_"))
    cli("preprocess", "--input", *[str(p) for p in raw], "--out", str(work / "store"), "--frequency-threshold", "2",
        "--no-progress")
    dataset = next((work / "store" / "datasets").iterdir())
    run = work / "store" / "runs" / "r1"
    cli("train", "--dataset", str(dataset), "--run", str(run), "--set", "max_steps=20")
    cli("export", "--run", str(run), "--checkpoint", "latest", "--out", str(work / "bundle"))
    inputs = ["--input", *[str(p) for p in raw], "--no-progress"]
    results = {}
    for name, how in (("bundle, 1 process", ["--bundle", str(work / "bundle")]),
                      ("DCP model, 2 ranks (torchrun)", ["--run", str(run), "--checkpoint", "latest", "--nproc", "2"])):
        wall = min(cli("score", *how, *inputs, "--out", str(work / f"scores-{len(results)}.parquet"))
                   for _ in range(args.repeat))
        results[name] = wall
        print(json.dumps({"how": name, "rows": args.rows, "wall_s": round(wall, 2),
                          "rows_per_s": round(args.rows / wall)}), flush=True)
    print("\n| scoring | rows | wall s | rows/s |\n|---|---|---|---|")
    for name, wall in results.items():
        print(f"| {name} | {args.rows:,} | {wall:.1f} | {args.rows / wall:,.0f} |")


if __name__ == "__main__":
    main()
