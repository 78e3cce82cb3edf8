"""Warm start (``init_from``): its cost, and what it buys on drifting days.

cost: an old run and a new dataset with 26 tables x ROWS rows x dim 64 whose vocabularies share 90% of
  their values (the new one lost 10% of the old values and gained as many), both as real datasets
  (split_binary + vocab/<f>.parquet) and a real DCP checkpoint (1 rank). Times ``warm_start`` (DCP read
  of each table, the join of both vocabularies, the row writes, optimizer state included), in process.
auc: synthetic drifting Criteo days (``write_days``); dataset A = train days 1-2 / test day 3, B = train
  days 2-3 / test day 4 (the next night's window). The old model is trained on A (1 epoch); then, per
  seed, K steps on B from a cold start, a warm start (optimizer state carried) and a warm start
  (optimizer state reset), each's AUC on day 4 (the next day). In process, 1 rank.

usage: python benchmarks/bench_warmstart.py [--rows 100000] [--rows-per-day 20000] [--steps 20 50] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

os.environ.setdefault("OMP_NUM_THREADS", "2")

from feature_spec import Chunk, Feature, FeatureSpec, categorical_dtype, save  # noqa: E402
from training.checkpoint import Checkpointer  # noqa: E402
from training.config import TrainConfig  # noqa: E402
from training.distributed import init  # noqa: E402
from training.rundir import RunDir  # noqa: E402
from training.trainer import Trainer  # noqa: E402
from training.warmstart import warm_start  # noqa: E402

TABLES, DIM, N_NUM = 26, 64, 13


def _dataset(root: Path, rows: int, offset: int, n: int = 4096) -> Path:
    """A dataset whose feature C<i> has values offset..offset+rows-2 at indices 1..rows-1 (random rows)."""
    rng = np.random.default_rng(offset)
    cats = [f"C{i}" for i in range(TABLES)]
    num = [f"I{i}" for i in range(N_NUM)]
    (root / "train").mkdir(parents=True)
    (root / "vocab").mkdir()
    (rng.random(n) < 0.3).tofile(root / "train" / "label.bin")
    rng.normal(size=(n, N_NUM)).astype(np.float16).tofile(root / "train" / "numerical.bin")
    for c in cats:
        rng.integers(0, rows, n).astype(categorical_dtype(rows)).tofile(root / "train" / f"cat_{c}.bin")
        values = np.arange(offset, offset + rows - 1, dtype=np.int64)
        rng.shuffle(values)
        pl.DataFrame({"value": values, "count": np.full(rows - 1, 5), "index": np.arange(1, rows)}).write_parquet(
            root / "vocab" / f"{c}.parquet")
    source = {"train": [Chunk(type="split_binary", features=["label"], files=["train/label.bin"]),
                        Chunk(type="split_binary", features=num, files=["train/numerical.bin"])]
              + [Chunk(type="split_binary", features=[c], files=[f"train/cat_{c}.bin"]) for c in cats]}
    features = {"label": Feature(dtype="bool"), **{x: Feature(dtype="float16") for x in num},
                **{c: Feature(dtype=categorical_dtype(rows), cardinality=rows) for c in cats}}
    save(FeatureSpec(feature_spec=features, source_spec=source,
                     channel_spec={"label": ["label"], "numerical": num, "categorical": cats},
                     metadata={"vocab": {c: f"vocab/{c}.parquet" for c in cats}}), str(root))
    return root


def cost(rows: int, tmp: Path) -> dict:
    arch = {"embedding_dim": DIM, "bottom_mlp": [512, 256, DIM], "top_mlp": [512, 256, 1]}
    old_ds, new_ds = _dataset(tmp / "old-ds", rows, 0), _dataset(tmp / "new-ds", rows, rows // 10)
    env = init(600)
    cfg = TrainConfig.from_dict({"dataset": str(old_ds), "arch": arch, "eval_split": None})
    run = RunDir(str(tmp / "old-run"))
    run.save_config(cfg)
    old = Trainer(cfg, env)
    old.optimizer.init_state()
    Checkpointer(run).save(1, old.state_dict())
    del old
    new_cfg = cfg.with_overrides({"dataset": str(new_ds), "init_from": f"{run}@1"})
    out = {}
    for state in ("carry", "reset"):
        new = Trainer(new_cfg, env)
        init_from = new_cfg.init_from.model_copy(update={"optimizer_state": state})
        t = time.perf_counter()
        summary = warm_start(new, init_from)
        out[state] = {"seconds": round(time.perf_counter() - t, 2),
                      "rows_copied": sum(summary["tables"].values())}
        del new
    return {"what": "cost", "tables": TABLES, "rows": rows, "dim": DIM, **out}


def auc(rows_per_day: int, steps: list[int], seeds: list[int], tmp: Path) -> list[dict]:
    from preprocessing import PreprocessConfig, run as preprocess
    from synthetic.generator import SynthConfig, write_days

    write_days(SynthConfig(out=str(tmp / "logs"), days=4, start="2026-03-01", rows_per_day=rows_per_day, seed=3))

    def dataset(train_days, test_day) -> str:
        inputs = [f"train={tmp}/logs/2026-03-0{d}/part-00000.tsv" for d in train_days]
        return preprocess(PreprocessConfig(inputs=inputs + [f"test={tmp}/logs/2026-03-0{test_day}/part-00000.tsv"],
                                           out=str(tmp / "store"), frequency_threshold=3, progress=False))

    a, b = dataset((1, 2), 3), dataset((2, 3), 4)
    env = init(600)
    base = {"data": {"batch_size": 256}, "eval_split": None}
    old_run = RunDir(str(tmp / "auc-old"))
    old_cfg = TrainConfig.from_dict({**base, "dataset": a})
    old_run.save_config(old_cfg)
    old = Trainer(old_cfg, env, old_run)
    old.train()
    results = [{"what": "auc", "model": "old (trained on days 1-2, tested on day 3)", "steps": old.step, "seed": 0,
                "auc_next_day": round(old.validate("test")["auc"], 4)}]
    del old
    for k in steps:
        for seed in seeds:
            row = {"what": "auc", "steps": k, "seed": seed}
            for name, init_from in (("cold", None), ("warm_carry", {"run": str(old_run), "optimizer_state": "carry"}),
                                    ("warm_reset", {"run": str(old_run), "optimizer_state": "reset"})):
                cfg = TrainConfig.from_dict({**base, "dataset": b, "seed": seed, "max_steps": k, "init_from": init_from})
                t = Trainer(cfg, env)
                t.train()
                row[name] = round(t.validate("test")["auc"], 4)
                del t
            results.append(row)
            print(json.dumps(row), flush=True)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--rows-per-day", type=int, default=20_000)
    p.add_argument("--steps", type=int, nargs="+", default=[20, 50])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--skip-cost", action="store_true")
    p.add_argument("--skip-auc", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        if not args.skip_cost:
            print(json.dumps(cost(args.rows, Path(d))), flush=True)
        if not args.skip_auc:
            results = auc(args.rows_per_day, args.steps, args.seeds, Path(d))
            print("| K steps | seed | cold | warm, state carried | warm, state reset |\n|---|---|---|---|---|")
            for r in results[1:]:
                print(f"| {r['steps']} | {r['seed']} | {r['cold']} | {r['warm_carry']} | {r['warm_reset']} |")
            print(f"the old model: {results[0]}")


if __name__ == "__main__":
    main()
