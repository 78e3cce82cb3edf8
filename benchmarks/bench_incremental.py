"""Incremental preprocessing of a rolling window: from scratch vs the next night's window in the same store.

Writes 8 synthetic Criteo days (``synthetic.generator.generate`` with seed = day), then preprocesses
window 1 (train days 1-5, val day 6, test day 7) in a fresh store and window 2 (days 2-8: only day 8 new) in
the same store, with threshold 3. Times each stage (wall and process CPU, in-process, 2 worker threads) and
prints the ratio of the two runs' wall times, and a markdown table for benchmarks/RESULTS.md.

usage: python benchmarks/bench_incremental.py [--rows-per-day 1000000] [--workers 2] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from preprocessing import PreprocessConfig, Preprocessing
from synthetic.generator import generate

from measure import timed_executor

STAGES = ("parse", "count", "build_vocabulary", "encode", "write_dataset")


def _days(root: Path, rows: int) -> list[str]:
    paths = []
    for d in range(1, 9):
        folder = root / f"day{d}"
        if not (folder / "part-00000.tsv").exists():
            generate(str(folder), rows, 1, seed=d)
        paths.append(str(folder / "part-00000.tsv"))
    return paths


def _window(days: list[str], first: int, store: Path, workers: int) -> tuple[float, float, dict]:
    inputs = [f"train={d}" for d in days[first:first + 5]] + [f"val={days[first + 5]}", f"test={days[first + 6]}"]
    config = PreprocessConfig(inputs=inputs, out=str(store), frequency_threshold=3, workers=workers, progress=False)
    executor = timed_executor(workers)
    wall, cpu = time.perf_counter(), time.process_time()
    Preprocessing(config).run(executor, say=lambda _: None)
    return time.perf_counter() - wall, time.process_time() - cpu, executor.times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows-per-day", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default=None, help="folder for the days and the store (default: a temp folder)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-incremental-"))
    days = _days(work / "days", args.rows_per_day)
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    load = [os.getloadavg()[0]]
    runs = {"window 1 (from scratch)": _window(days, 0, store, args.workers)}
    load.append(os.getloadavg()[0])
    runs["window 2 (1 new day)"] = _window(days, 1, store, args.workers)
    load.append(os.getloadavg()[0])
    print(f"rows/day {args.rows_per_day}, workers {args.workers}, 1-min load {' / '.join(f'{x:.2f}' for x in load)}")
    print("| run | " + " | ".join(STAGES) + " | total wall s | total CPU s |")
    print("|---" * (len(STAGES) + 3) + "|")
    for name, (wall, cpu, times) in runs.items():
        cells = [f"{times[s][0]:.2f} ({times[s][1]:.2f})" if s in times else "-" for s in STAGES]
        print(f"| {name} | " + " | ".join(cells) + f" | **{wall:.2f}** | {cpu:.2f} |")
    (w1, c1, _), (w2, c2, _) = runs.values()
    print(f"incremental / from scratch: wall {w2 / w1:.0%}, CPU {c2 / c1:.0%}")


if __name__ == "__main__":
    main()
