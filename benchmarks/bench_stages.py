"""Where `dlrmflow preprocess`'s time goes: wall and CPU seconds per stage, in one process.

Runs ``preprocessing.Preprocessing`` on the given inputs (criteo spec, threshold 3, ordered
train=0.8,val=0.1,test=0.1, default workers unless --workers) with an executor that times each stage
(parse, count, build_vocabulary = the merge, encode, write_dataset) by wall clock and by the CPU of the
whole process (all threads: ``resource.getrusage(RUSAGE_SELF)``), plus the imports and the set-up before
the first stage. Prints one JSON line per run and a markdown table with CPU s per 1M rows.
``--perf`` wraps the run in ``perf record`` (if installed) and prints the top symbols by CPU share.

    python benchmarks/bench_stages.py --input '/data/synth_20M/part-*.tsv' [--workers N] [--repeat 2] [--perf]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import timed_executor


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_once(inputs: list[str], workers: int | None, store: str) -> dict:
    """One timed run in this process (imports measured here, so call it once per process)."""
    t0, c0 = time.perf_counter(), _cpu()
    import preprocessing
    from preprocessing.pipeline import Preprocessing
    times = {"imports": (time.perf_counter() - t0, _cpu() - c0)}

    config = preprocessing.PreprocessConfig(inputs=inputs, spec="criteo", out=store, frequency_threshold=3,
                                            split="ordered:train=0.8,val=0.1,test=0.1", workers=workers,
                                            progress=False)
    w, c = time.perf_counter(), _cpu()
    job = Preprocessing(config)
    rows: list[int] = []
    executor = timed_executor(config.threads())
    times["set-up"] = (time.perf_counter() - w, _cpu() - c)
    job.run(executor, say=lambda m: rows.append(int(m.split()[1])) if m.startswith("parsed ") else None)
    times |= executor.times
    total = (time.perf_counter() - t0, _cpu() - c0)
    staged = sum(v[0] for v in times.values()), sum(v[1] for v in times.values())
    times["other"] = (total[0] - staged[0], total[1] - staged[1])
    times["total"] = total
    return {"rows": rows[0], "workers": config.threads(),
            "stages": {k: {"wall_s": round(v[0], 3), "cpu_s": round(v[1], 3)} for k, v in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", nargs="+", required=True)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--perf", action="store_true", help="also profile one run with perf record")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_once(args.input, args.workers, args.store)))
        return
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    runs = []
    for k in range(args.repeat + (1 if args.perf else 0)):
        store = tempfile.mkdtemp(prefix="bench_stages_")
        cmd = [sys.executable, __file__, "--child", "--store", store, "--input", *args.input] + \
              (["--workers", str(args.workers)] if args.workers else [])
        perf = args.perf and k == args.repeat and shutil.which("perf")
        if perf:
            data = Path(store).with_suffix(".perf")
            cmd = ["perf", "record", "-q", "-F", "499", "-g", "-o", str(data), "--"] + cmd
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        shutil.rmtree(store, ignore_errors=True)
        if perf:
            report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,sym",
                                     "--stdio", "-g", "none", "--percent-limit", "0.7"],
                                    capture_output=True, text=True).stdout
            data.unlink()
            print("\n".join(line for line in report.splitlines() if line and not line.startswith("#")))
            continue
        runs.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(runs[-1]), flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    if not runs:
        return
    rows = runs[0]["rows"]
    print(f"{rows:,} rows, {runs[0]['workers']} workers; per stage: wall s / CPU s (CPU s per 1M rows)\n")
    print("| stage | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |")
    print("|---|" + "---|" * len(runs))
    for stage in runs[0]["stages"]:
        cells = [f"{r['stages'][stage]['wall_s']:.2f} / {r['stages'][stage]['cpu_s']:.2f} "
                 f"({r['stages'][stage]['cpu_s'] * 1e6 / rows:.2f})" for r in runs]
        print(f"| {stage} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
