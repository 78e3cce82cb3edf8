"""What `dlrmflow tune` gains over the preset a user would have used (issue 22's proofs), each as real tunes
(`dlrmflow tune`, ephemeral Prefect, 1 rank per trial, trials ``--parallel`` at a time on this machine).

criteo:    the 10,000 real Criteo Kaggle rows (../shared/data/criteo), ordered train/val/test 70/10/20, threshold 12
           (the criteo-sample preset's preprocessing); per seed S, a tune whose base is the criteo-sample preset
           trained with seed S (trial 0) and whose sampler has seed S: the best trial's validation and test AUC
           against trial 0's.
synthetic: `dlrmflow synth` rows (a planted logistic model with a recorded best AUC), the synthetic preset's
           preprocessing (ordered 80/10/10, threshold 100); the tuned model's test AUC against the best AUC.
lists:     the real list table the tests build (helpers/list_table.py: the same rows with a [C5, C6] pair and a bag
           of C19..C26) against the same rows one-hot (26 columns), both split ordered 80/10/10 and tuned alike:
           flat vs list, trial 0 and tuned.

Each tune's summary.json is kept under --work; the results are printed as markdown rows and appended to --out
(JSON lines).

usage: python benchmarks/bench_tune.py criteo [--trials 24] [--parallel 2] [--seeds 0 1 2]
       python benchmarks/bench_tune.py synthetic [--rows 500000] [--trials 16] [--timeout S] [--space FILE]
       python benchmarks/bench_tune.py lists [--trials 16]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
CRITEO_10K = SHARED / "criteo" / "criteo_kaggle_train_head10k.txt.gz"
BIN = Path(sys.executable).parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore::FutureWarning",
       "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def _run(*args: str) -> str:
    out = subprocess.run([str(BIN / "dlrmflow"), *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    if out.returncode:
        sys.exit(f"dlrmflow {args[0]} failed:\n{out.stdout[-4000:]}")
    return out.stdout


def _dataset(store: Path, *args: str) -> str:
    """Preprocess into ``store`` (reused when done); the dataset's URI."""
    return _run("preprocess", "--out", str(store), *args).strip().splitlines()[-1]   # it prints the URI last


def _tune(store: Path, dataset: str, base: Path, trials: int, parallel: int, seed: int, *extra: str) -> dict:
    start = time.monotonic()
    _run("tune", "--dataset", dataset, "--store", str(store), "--config", str(base), "--trials", str(trials),
         "--parallel", str(parallel), "--seed", str(seed), *extra)
    tune = max((store / "tunes").iterdir(), key=lambda p: p.stat().st_mtime)
    summary = json.loads((tune / "summary.json").read_text())
    summary["wall_s"] = round(time.monotonic() - start, 1)
    return summary


def _base(work: Path, preset: str, seed: int) -> Path:
    from training.config import TrainConfig

    path = work / f"{preset}-seed{seed}.yaml"
    path.write_text(TrainConfig.preset(preset).with_overrides({"seed": seed}).to_yaml())
    return path


def _row(name: str, s: dict, extra: str = "") -> str:
    base, best = s.get("base_test", {}).get("auc"), s["best_test"]["auc"]
    return (f"| {name} | {s['trials']} | {s['pruning']['pruned_trials']} ({s['pruning']['share_saved']:.0%}) | "
            f"{s['base']['val_auc']:.4f} | {s['best']['val_auc']:.4f} | {s['val_gain']:+.4f} | {base:.4f} | "
            f"{best:.4f} | {s['test_gain']:+.4f} | {s['wall_s']:.0f} |{extra}")


HEADER = ("| tune | trials | pruned (samples saved) | val AUC trial 0 | val AUC best | val gain | test AUC trial 0 | "
          "test AUC best | test gain | wall s |")


def criteo(args) -> list[dict]:
    store = args.work / "criteo"
    dataset = _dataset(store, "--inputs", str(CRITEO_10K), "--split", "ordered:train=0.7,val=0.1,test=0.2",
                       "--frequency-threshold", "12")
    print(HEADER)
    results = []
    for seed in args.seeds:
        s = _tune(store, dataset, _base(args.work, "criteo-sample", seed), args.trials, args.parallel, seed)
        print(_row(f"criteo-sample, seed {seed}", s), flush=True)
        results.append({"bench": "criteo", "seed": seed, **s})
    return results


def planted_auc(raw: Path, lo: float, hi: float) -> float:
    """The planted model's AUC (its true probabilities vs the labels) on rows [lo, hi) x rows of the synth folder
    ``raw`` (rows mode: the blocks regenerated from its seed), e.g. the rows an ordered test split holds."""
    import numpy as np

    from synthetic.generator import BLOCK_ROWS, SynthConfig, SyntheticData
    from training.metrics import roc_auc

    meta = json.loads((raw / "_synth_metadata.json").read_text())
    data, rows = SyntheticData(SynthConfig(**meta["config"])), meta["rows"]
    first, stop = int(lo * rows), int(hi * rows)
    p, y = [], []
    for b in range(first // BLOCK_ROWS, (stop - 1) // BLOCK_ROWS + 1):
        block, start = data.block(b), b * BLOCK_ROWS
        a, z = max(first - start, 0), min(stop - start, len(block.label))
        p.append(block.probability[a:z])
        y.append(block.label[a:z])
    return float(roc_auc(np.concatenate(p), np.concatenate(y).astype(np.float32)))


def synthetic(args) -> list[dict]:
    raw = args.work / f"synth-{args.rows}"
    if not (raw / "_synth_metadata.json").exists():
        _run("synth", "--out", str(raw), "--rows", str(args.rows), "--files", "2", "--seed", "0", "--quiet")
    best_auc = json.loads((raw / "_synth_metadata.json").read_text())["best_auc"]
    test_best = planted_auc(raw, 0.9, 1.0)   # the planted model on the test split's own rows
    store = args.work / "synthetic"
    dataset = _dataset(store, "--inputs", f"{raw}/part-*", "--split", "ordered:train=0.8,val=0.1,test=0.1",
                       "--frequency-threshold", "100")
    print(HEADER + " best AUC (planted: all rows / test rows) | best - tuned test AUC (all / test rows) |")
    results = []
    extra = ((("--timeout", str(args.timeout)) if args.timeout else ())
             + (("--space", str(args.space)) if args.space else ()))
    for seed in args.seeds:
        s = _tune(store, dataset, _base(args.work, "synthetic", seed), args.trials, args.parallel, seed, *extra)
        tuned = s["best_test"]["auc"]
        print(_row(f"synthetic {args.rows:,} rows, seed {seed}", s,
                   f" {best_auc:.4f} / {test_best:.4f} | {best_auc - tuned:.4f} / {test_best - tuned:.4f} |"),
              flush=True)
        results.append({"bench": "synthetic", "seed": seed, "best_auc": best_auc, "best_auc_test_rows": test_best,
                        **s})
    return results


def lists(args) -> list[dict]:
    sys.path.insert(0, str(REPO / "tests"))
    from helpers.list_table import real_list_table

    root = args.work / "lists"
    root.mkdir(parents=True, exist_ok=True)
    spec, data = real_list_table(root)
    flat = root / "flat.tsv"
    with gzip.open(CRITEO_10K, "rt") as f:
        flat.write_text(f.read())
    store = args.work / "lists-store"
    datasets = {"flat (26 one-hot)": _dataset(store, "--inputs", str(flat), "--split",
                                              "ordered:train=0.8,val=0.1,test=0.1", "--frequency-threshold", "2"),
                "lists (pair + bag)": _dataset(store, "--inputs", str(data), "--spec", str(spec))}
    print(HEADER)
    results = []
    for seed in args.seeds:
        for name, dataset in datasets.items():
            s = _tune(store, dataset, _base(args.work, "criteo-sample", seed), args.trials, args.parallel, seed)
            print(_row(f"{name}, seed {seed}", s), flush=True)
            results.append({"bench": "lists", "model": name, "seed": seed, **s})
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["criteo", "synthetic", "lists"])
    p.add_argument("--trials", type=int, default=24)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rows", type=int, default=500_000, help="synthetic rows")
    p.add_argument("--timeout", type=int, help="each tune's --timeout (seconds: no trial starts after it)")
    p.add_argument("--space", type=Path, help="the synthetic tunes' --space (default: dlrmflow's default space)")
    p.add_argument("--work", type=Path, default=Path("/tmp/bench-tune"))
    p.add_argument("--out", type=Path, default=Path("/tmp/bench-tune/results.jsonl"))
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    start = time.monotonic()
    results = {"criteo": criteo, "synthetic": synthetic, "lists": lists}[args.what](args)
    print(f"\n{args.what}: {time.monotonic() - start:.0f} s; load (1 min) {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with args.out.open("a") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
