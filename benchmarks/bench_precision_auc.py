"""Quality of ``precision.dense: bf16`` vs fp32, trained the shipped way: the test AUC and log loss of the same
preset, data and seed with the dense part in fp32 and in bf16.

- criteo-sample: the 10,000 real Criteo rows (``shared/data/criteo/criteo_kaggle_train_head10k.txt.gz``)
  preprocessed with the ``criteo-sample`` preset's hint (ordered 70/10/20, frequency threshold 12), then
  ``dlrmflow train --preset criteo-sample`` (best checkpoint by validation log loss) and ``evaluate`` on test.
- synthetic: ``dlrmflow synth`` rows (``--synthetic-rows``, generator seed 0; labels from a planted model whose
  AUC the generator records as ``best_auc``) with the ``synthetic`` preset's hint and training preset.

Each training seed (``seed``) is trained in fp32 and bf16 back to back. Prints one JSON line per run, then a
table: AUC, log loss, the gap to the best AUC (synthetic) and bf16 - fp32 per seed and their mean.

usage: python benchmarks/bench_precision_auc.py [--criteo-seeds 0,1,2] [--synthetic-seeds 0,1]
       [--synthetic-rows 500000] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CRITEO_10K = REPO.parent / "shared" / "data" / "criteo" / "criteo_kaggle_train_head10k.txt.gz"


def preprocess(inputs: list[str], preset: str, out: Path) -> str:
    from nightly.config import PipelinePreset
    from preprocessing import PreprocessConfig, run

    hint = PipelinePreset.named(preset).preprocess.model_dump(exclude_unset=True)
    return run(PreprocessConfig(inputs=inputs, out=str(out), spec="criteo", progress=False, **hint))


def train_and_evaluate(ds: str, preset: str, run: Path, seed: int, dense: str, threads: int) -> dict:
    """``dlrmflow train --preset`` with ``seed`` and ``precision.dense``, then ``evaluate`` of its best checkpoint."""
    from training.config import EvaluateConfig
    from training.evaluate import evaluate_run

    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "flows.cli", "train", "--dataset", ds, "--run", str(run), "--preset", preset,
           "--set", f"seed={seed}", "--set", f"precision.dense={dense}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{run.name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    train_s = time.perf_counter() - start
    test = evaluate_run(str(run), EvaluateConfig(), env={"OMP_NUM_THREADS": str(threads)}, on_line=lambda _: None)
    return {"auc": test["auc"], "logloss": test["logloss"], "step": test["step"], "train_wall_s": round(train_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--criteo-seeds", default="0,1,2", help="training seeds on criteo-sample ('' to skip)")
    parser.add_argument("--synthetic-seeds", default="0,1", help="training seeds on synthetic ('' to skip)")
    parser.add_argument("--synthetic-rows", type=int, default=500_000)
    parser.add_argument("--threads", type=int, default=2, help="OMP threads of each training process")
    args = parser.parse_args()
    seeds = {"criteo-sample": [int(s) for s in args.criteo_seeds.split(",") if s],
             "synthetic": [int(s) for s in args.synthetic_seeds.split(",") if s]}
    print(json.dumps({"what": "machine", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "load_average_before": os.getloadavg()[0]}), flush=True)
    results: dict[str, dict[int, dict[str, dict]]] = {}
    best_auc = None
    with tempfile.TemporaryDirectory(prefix="bench-precision-auc-") as tmp:
        tmp = Path(tmp)
        for preset, preset_seeds in seeds.items():
            if not preset_seeds:
                continue
            if preset == "criteo-sample":
                ds = preprocess([str(CRITEO_10K)], preset, tmp / "store-criteo")
            else:
                from synthetic.generator import generate

                meta = generate(str(tmp / "raw-synth"), args.synthetic_rows, seed=0)
                best_auc = meta["best_auc"]
                ds = preprocess([str(tmp / "raw-synth" / "part-*")], preset, tmp / "store-synth")
            for i, seed in enumerate(preset_seeds):
                for dense in ("fp32", "bf16") if i % 2 == 0 else ("bf16", "fp32"):
                    r = train_and_evaluate(ds, preset, tmp / f"run-{preset}-{seed}-{dense}", seed, dense, args.threads)
                    results.setdefault(preset, {}).setdefault(seed, {})[dense] = r
                    print(json.dumps({"preset": preset, "seed": seed, "dense": dense, **r}), flush=True)
    print(json.dumps({"what": "machine", "load_average_after": os.getloadavg()[0]}), flush=True)
    print()
    print("| preset | seed | fp32 AUC | bf16 AUC | bf16 - fp32 AUC | fp32 log loss | bf16 log loss | fp32 / bf16 train s |")
    print("|---|---|---|---|---|---|---|---|")
    for preset, by_seed in results.items():
        diffs = []
        for seed, r in by_seed.items():
            f, b = r["fp32"], r["bf16"]
            diffs.append(b["auc"] - f["auc"])
            print(f"| {preset} | {seed} | {f['auc']:.4f} | {b['auc']:.4f} | {diffs[-1]:+.4f} | {f['logloss']:.4f} | "
                  f"{b['logloss']:.4f} | {f['train_wall_s']:.0f} / {b['train_wall_s']:.0f} |")
        print(f"| {preset} | mean | | | {np.mean(diffs):+.4f} | | | |")
    if best_auc is not None:
        print(f"\nsynthetic: the generator's best_auc {best_auc:.4f} ({args.synthetic_rows:,} rows, generator seed 0)")


if __name__ == "__main__":
    main()
