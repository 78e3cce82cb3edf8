"""Issue 42's proof: a spec drafted by ``dlrmflow spec draft`` trains as well as the hand-written one.

- adult: ``shared/data/byo/adult.parquet`` with ``examples/adult.yaml`` vs the draft of ``--label 'income==>50K'``.
- movielens-like: a synthetic joined table (``tests/helpers/movielens.py``: users x items x ratings, genres a
  Parquet list, a timestamp and a row id) with its ``HAND_SPEC`` vs the draft of ``--label 'rating>=4'``.

Both specs of a table are preprocessed with the same split (``random:train=0.8,val=0.1,test=0.1,seed=0``) and
trained with the same config (the ``default`` preset, ``--set epochs=...``), per seed; the best checkpoint (by
validation AUC) is evaluated on test. Prints one JSON line per run and a table of test AUCs.

usage: python benchmarks/bench_spec_draft.py [--seeds 0,1] [--movielens-rows 200000] [--epochs 3] [--threads 2]
       [--tables adult,movielens-like]
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
ADULT = REPO.parent / "shared" / "data" / "byo" / "adult.parquet"
SPLIT = "random:train=0.8,val=0.1,test=0.1,seed=0"


def preprocess(data: Path, spec: Path, out: Path) -> str:
    from preprocessing import PreprocessConfig, run

    return run(PreprocessConfig(inputs=[str(data)], spec=str(spec), out=str(out), split=SPLIT, progress=False))


def train_and_evaluate(ds: str, run: Path, seed: int, epochs: int, threads: int) -> dict:
    from training.config import EvaluateConfig
    from training.evaluate import evaluate_run

    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "flows.cli", "train", "--dataset", ds, "--run", str(run), "--preset", "default",
           "--set", f"seed={seed}", "--set", f"epochs={epochs}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{run.name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    train_s = time.perf_counter() - start
    test = evaluate_run(str(run), EvaluateConfig(), env={"OMP_NUM_THREADS": str(threads)}, on_line=lambda _: None)
    return {"auc": test["auc"], "logloss": test["logloss"], "step": test["step"], "train_wall_s": round(train_s, 1)}


def main() -> None:
    from helpers.movielens import HAND_SPEC, movielens_like
    from preprocessing.draft import draft_spec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--movielens-rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tables", default="adult,movielens-like")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    print(json.dumps({"what": "machine", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "load_average_before": os.getloadavg()[0]}), flush=True)
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-spec-draft-") as tmp:
        tmp = Path(tmp)
        ml = tmp / "ratings.parquet"
        movielens_like(args.movielens_rows, users=3000, items=1500).write_parquet(ml)
        (tmp / "ml-hand.yaml").write_text(HAND_SPEC)
        tables = {"adult": (ADULT, REPO / "examples" / "adult.yaml", "income==>50K"),
                  "movielens-like": (ml, tmp / "ml-hand.yaml", "rating>=4")}
        for table, (data, hand, label) in tables.items():
            if table not in args.tables.split(","):
                continue
            drafted = tmp / f"{table}-draft.yaml"
            start = time.perf_counter()
            drafted.write_text(draft_spec([str(data)], label))
            print(json.dumps({"table": table, "draft_s": round(time.perf_counter() - start, 2)}), flush=True)
            for which, spec in (("hand", hand), ("draft", drafted)):
                ds = preprocess(data, spec, tmp / f"store-{table}-{which}")
                for seed in seeds:
                    r = train_and_evaluate(ds, tmp / f"run-{table}-{which}-{seed}", seed, args.epochs, args.threads)
                    results.setdefault(table, {}).setdefault(seed, {})[which] = r
                    print(json.dumps({"table": table, "spec": which, "seed": seed, **r}), flush=True)
            print(drafted.read_text(), flush=True)
    print(json.dumps({"what": "machine", "load_average_after": os.getloadavg()[0]}), flush=True)
    print("\n| table | seed | hand-written AUC | drafted AUC | drafted - hand | hand / drafted log loss |")
    print("|---|---|---|---|---|---|")
    for table, by_seed in results.items():
        for seed, r in by_seed.items():
            h, d = r["hand"], r["draft"]
            print(f"| {table} | {seed} | {h['auc']:.4f} | {d['auc']:.4f} | {d['auc'] - h['auc']:+.4f} | "
                  f"{h['logloss']:.4f} / {d['logloss']:.4f} |")


if __name__ == "__main__":
    main()
