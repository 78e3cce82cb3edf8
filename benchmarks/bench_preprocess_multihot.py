"""Preprocessing throughput of MLPerf-like multi-hot synthetic Criteo rows next to one-hot rows, in one run.

Generates the same rows (``dlrmflow synth --seed 0``) twice: one-hot, and with ``--multi-hot-sizes`` (MLPerf
DLRMv2's sizes by default: 214 ids a row); preprocesses both with threshold 3 and an ordered train/val/test
split (``--spec criteo`` for one-hot, the written ``_synth_spec.yaml`` for multi-hot), end to end with
start-up. The multi-hot rows are preprocessed ``--rounds`` times each way, alternating: with the C list parse
(``preprocessing._lists``, the default) and without it (``--no-fast-parse``: the polars path, the reference);
the script prints each round's ratio of ids/s and checks that both ways write the same dataset bytes.
``--stages ROWS``: also times each stage (wall and process CPU s, in-process) on the first ROWS multi-hot rows,
both ways. ``--before DIR``: each round also preprocesses the multi-hot rows with the code of an older commit
checked out in DIR (issue 21's reference, "today's ids per second": the code before the C list parse), run from
DIR with ``PYTHONPATH=DIR`` and its C extensions built in place::

    git worktree add /tmp/before 2c2d5a3^ && cd /tmp/before && python -c "from setuptools import setup; setup()" build_ext --inplace

and checks that it writes the same data files (vocabularies and split files: the checksums in feature_spec.yaml
changed algorithm since). Prints one JSON line per measurement and markdown tables for benchmarks/RESULTS.md
("Multi-hot preprocessing"). (A script of its own: bench_preprocess.py compares one-hot runs with TorchRec's utilities.)

usage: python benchmarks/bench_preprocess_multihot.py [--rows 1000000] [--files 4] [--workers 2]
                                                      [--multi-hot-sizes 3,2,1,...] [--rounds 1]
                                                      [--stages ROWS] [--before DIR] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import checked, load_average, run_measured, timed_executor  # noqa: E402
from synthetic.generator import METADATA_FILE, SPEC_FILE  # noqa: E402

BIN = Path(sys.executable).parent
MLPERF = "3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1"
STAGES = ("parse", "count", "build_vocabulary", "encode", "write_dataset")


def _synth(rows: int, files: int, out: Path, sizes: str | None) -> dict:
    if not (out / METADATA_FILE).exists():
        extra = ["--multi-hot-sizes", sizes] if sizes else []
        checked(run_measured([str(BIN / "dlrmflow"), "synth", "--rows", str(rows), "--files", str(files), "--seed",
                             "0", "--quiet", "--out", str(out), *extra]), "synth")
    return json.loads((out / METADATA_FILE).read_text())


def _digest(dataset: Path, data_only: bool = False) -> str:
    """One digest of every file of a dataset (names and bytes); ``data_only``: of its split files and vocabularies."""
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(q for q in dataset.rglob("*") if q.is_file()):
        if not data_only or p.parent != dataset:
            h.update(str(p.relative_to(dataset)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _preprocess(data: Path, spec: str, store: Path, workers: int, rows: int, kind: str, extra=(),
                before: Path | None = None) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    load = load_average()
    cli = [sys.executable, "-m", "flows.cli"] if before else [str(BIN / "dlrmflow")]
    env = {**os.environ, "PYTHONPATH": str(before)} if before else None
    m = checked(run_measured([*cli, "preprocess", "--input", str(data), "--spec", spec,
                             "--split", "ordered:train=0.8,val=0.1,test=0.1", "--frequency-threshold", "3",
                             "--workers", str(workers), "--no-progress", "--out", str(store), *extra],
                             env=env, cwd=str(before) if before else None), "dlrmflow preprocess")
    ids = sum(f.stat().st_size for f in data.glob("part-*"))
    dataset = next((store / "datasets").iterdir())
    digest, data_digest = _digest(dataset), _digest(dataset, data_only=True)
    shutil.rmtree(store, ignore_errors=True)
    return {"data": kind, "rows": rows, "input_mb": round(ids / 2**20), "workers": workers,
            "wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2), "cpu_pct": round(100 * m.cpu_s / m.wall_s),
            "rows_per_s": round(rows / m.wall_s), "peak_rss_mb": round(m.peak_rss_mb), "load_before": load,
            "load": load_average(), "digest": digest, "data_digest": data_digest}


def _stages(data: Path, rows: int, store: Path, workers: int) -> list[dict]:
    """Each stage's wall and process CPU s, in-process, on the first ``rows`` rows of ``data``'s first file, with
    the C list parse and without it (the polars path)."""
    from preprocessing import PreprocessConfig, Preprocessing

    head = store.parent / f"head_{rows}"
    if not (head / "part-00000.tsv").exists():
        head.mkdir(parents=True, exist_ok=True)
        with open(sorted(data.glob("part-*"))[0], "rb") as src, open(head / "part-00000.tsv", "wb") as dst:
            dst.writelines(line for _, line in zip(range(rows), src))
    out = []
    for fast in (False, True):
        shutil.rmtree(store, ignore_errors=True)
        config = PreprocessConfig(inputs=[str(head)], spec=str(data / SPEC_FILE), out=str(store), workers=workers,
                                  frequency_threshold=3, split="ordered:train=0.8,val=0.1,test=0.1", progress=False,
                                  fast_parse=fast)
        executor, load = timed_executor(workers), load_average()
        Preprocessing(config).run(executor, say=lambda _: None)
        shutil.rmtree(store, ignore_errors=True)
        out.append({"path": "C list parse" if fast else "polars (reference)", "rows": rows, "load_before": load,
                    "load": load_average(), **{s: [round(x, 2) for x in executor.times[s]] for s in STAGES}})
        print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--multi-hot-sizes", default=MLPERF)
    ap.add_argument("--rounds", type=int, default=1, help="multi-hot runs each way (C list parse, polars)")
    ap.add_argument("--stages", type=int, default=0, metavar="ROWS", help="also time each stage on ROWS rows")
    ap.add_argument("--before", default=None, metavar="DIR",
                    help="also run an older commit's code checked out in DIR (its extensions built in place)")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one, removed at the end)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_multihot_"))
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results = []
    before = Path(args.before).resolve() if args.before else None
    runs = [("one-hot", None, (), None)]
    for _ in range(args.rounds):
        runs += [("multi-hot, polars", args.multi_hot_sizes, ("--no-fast-parse",), None),
                 ("multi-hot, C list parse", args.multi_hot_sizes, (), None)]
        if before:
            runs.append((f"multi-hot, before ({before.name})", args.multi_hot_sizes, (), before))
    for kind, sizes, extra, tree in runs:
        data = work / f"{'multi-hot' if sizes else 'one-hot'}_{args.rows}"
        meta = _synth(args.rows, args.files, data, sizes)
        spec = str(data / SPEC_FILE) if sizes else "criteo"
        results.append(_preprocess(data, spec, work / "store", args.workers, args.rows, kind, extra, tree))
        results[-1]["ids_per_row"] = sum((meta.get("multi_hot_sizes") or {"all": 26}).values())
        print(json.dumps(results[-1]), flush=True)
    stages = _stages(work / f"multi-hot_{args.rows}", args.stages, work / "store", args.workers) if args.stages else []
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    import polars
    print(f"\nmachine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"polars {polars.__version__}; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| data | ids/row | rows | input MB | workers | wall s | CPU s | CPU % | rows/s | ids/s | peak RSS MB "
          "| load (1 min) before, after |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['data']} | {r['ids_per_row']} | {r['rows']:,} | {r['input_mb']} | {r['workers']} | {r['wall_s']} "
              f"| {r['cpu_s']} | {r['cpu_pct']} | {r['rows_per_s']:,} | {r['rows_per_s'] * r['ids_per_row']:,} "
              f"| {r['peak_rss_mb']} | {r['load_before']}, {r['load']} |")
    step = 3 if before else 2
    rounds = [results[1 + k:1 + k + step] for k in range(0, len(results) - 1, step)]
    pairs = [(r[0], r[1]) for r in rounds]
    for k, r in enumerate(rounds, 1):
        ref, new = r[0], r[1]
        print(f"\nround {k}: C list parse / polars: ids/s x{ref['wall_s'] / new['wall_s']:.2f}, CPU s "
              f"x{ref['cpu_s'] / new['cpu_s']:.2f}; same dataset bytes: {ref['digest'] == new['digest']}")
        if before:
            old = r[2]
            print(f"round {k}: C list parse / before: ids/s x{old['wall_s'] / new['wall_s']:.2f}, CPU s "
                  f"x{old['cpu_s'] / new['cpu_s']:.2f}; same data files: {old['data_digest'] == new['data_digest']}")
    if stages:
        print("\n| path | rows | " + " | ".join(STAGES) + " | total | load before, after |\n|---|---|"
              + "---|" * (len(STAGES) + 2))
        for r in stages:
            cells = " | ".join(f"{r[s][0]} ({r[s][1]})" for s in STAGES)
            total = (round(sum(r[s][0] for s in STAGES), 2), round(sum(r[s][1] for s in STAGES), 2))
            print(f"| {r['path']} | {r['rows']:,} | {cells} | {total[0]} ({total[1]}) | {r['load_before']}, "
                  f"{r['load']} |")
    if any(ref["digest"] != new["digest"] for ref, new in pairs):
        sys.exit("the C list parse wrote other dataset bytes than the polars path")
    if before and any(r[2]["data_digest"] != r[1]["data_digest"] for r in rounds):
        sys.exit(f"the code in {before} wrote other data files than this one")


if __name__ == "__main__":
    main()
