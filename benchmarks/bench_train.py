"""Training throughput on CPU: our trainer (`dlrmflow train`, 1 and 2 processes) vs a plain PyTorch
DLRM of the same shape, and the fraction of the machine's dense matmul FLOP/s that each reaches.

Model (Criteo-like): 26 tables x 100,000 rows x dim 64, 13 numericals, bottom MLP 512-256-64,
dot interaction, top MLP 512-256-1, batch 4096 per process.

- ours: a generated split_binary dataset (26 int32 categoricals of cardinality 100k, 13 float16
  numericals), then the real ``python -m flows.cli train`` -> torchrun -> ``training.worker`` ->
  ``Trainer`` (TrainPipelineSparseDist, fused row-wise Adagrad tables, dense Adagrad MLPs).
  Steady-state samples/s = all samples / all time of the metrics.jsonl windows after the warmup
  steps (the trainer's own timing: wall clock between log lines, data loading included).
  1 process uses 2 OMP threads; 2 processes use 1 thread each (the machine has 2 cores).
- plain: one ``nn.EmbeddingBag(mode="sum")`` per table + the same MLPs and dot interaction, one
  ``torch.optim.Adagrad`` over all parameters (dense embedding gradients), in this process with 2
  threads, batches from the same dataset.
- matmul: ``torch.mm`` float32, 2 threads, best of 7, on each MLP layer's shape (batch 4096) and on
  2048^3. "At MLP shapes" = the layers' FLOPs / the time they take at those rates (what the MLP's
  matmuls can reach); 2048^3 is the machine's peak.
- raw TorchRec: TorchRec's DLRM + DMP in a bare loop over pre-made random batches, 1 process x 2
  threads (the loop of stack.md section 3), to compare with ours under the same load.

MLP FLOPs per sample = 3 x forward matmul FLOPs (forward + 2x for backward) of bottom MLP, top MLP
and the interaction's 27x64 @ 64x27 product. Prints one JSON line per measurement, then a
markdown table. Takes ~2-3 minutes on a 2-core machine.

usage: python benchmarks/bench_train.py [--steps 20] [--warmup 5] [--plain-steps 6] [--skip-2proc]
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
TABLES, ROWS_PER_TABLE, DIM, N_NUM = 26, 100_000, 64, 13
BOTTOM, TOP, BATCH = [512, 256, 64], [512, 256, 1], 4096


# ---- FLOPs ------------------------------------------------------------------------------------
def linear_shapes() -> list[tuple[int, int]]:
    """(in, out) of every Linear of the bottom and top MLPs."""
    n_vec = TABLES + 1
    top_in = DIM + n_vec * (n_vec - 1) // 2  # dense vector + upper-triangle dot products (TorchRec's DLRM)
    shapes, last = [], N_NUM
    for size in BOTTOM:
        shapes.append((last, size))
        last = size
    last = top_in
    for size in TOP:
        shapes.append((last, size))
        last = size
    return shapes


def flops_per_sample() -> dict[str, int]:
    """Forward+backward matmul FLOPs per sample (3x forward: the backward computes two products per one)."""
    n_vec = TABLES + 1
    bottom = sum(2 * i * o for i, o in linear_shapes()[:len(BOTTOM)])
    top = sum(2 * i * o for i, o in linear_shapes()[len(BOTTOM):])
    interaction = 2 * n_vec * n_vec * DIM  # bmm (27 x 64) @ (64 x 27) per sample
    return {"bottom": 3 * bottom, "top": 3 * top, "interaction": 3 * interaction,
            "total": 3 * (bottom + top + interaction)}


def matmul_flops(threads: int = 2, repeat: int = 7) -> dict[str, float]:
    """Best FLOP/s of torch.mm on each MLP layer shape (M=BATCH) and on 2048^3."""
    import torch

    torch.set_num_threads(threads)
    shapes = {f"{BATCH}x{i}x{o}": (BATCH, i, o) for i, o in linear_shapes()} | {"2048^3": (2048, 2048, 2048)}
    out = {}
    for name, (m, k, n) in shapes.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        c = torch.empty(m, n)
        reps = max(1, int(2e9 / (2 * m * k * n)))  # ~2 GFLOP per timing
        best = 0.0
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b, out=c)
            best = max(best, 2 * m * k * n * reps / (time.perf_counter() - start))
        out[name] = best
    return out


# ---- dataset -------------------------------------------------------------------------------------
def write_dataset(root: Path, rows: int) -> Path:
    """A 'train' split: 26 int32 categoricals of cardinality 100k, 13 float16 numericals."""
    from feature_spec import Chunk, Feature, FeatureSpec, save

    rng = np.random.default_rng(0)
    split = root / "train"
    split.mkdir(parents=True)
    num, cats = [f"num_{i}" for i in range(N_NUM)], [f"cat_{i}" for i in range(TABLES)]
    (rng.random(rows) < 0.25).tofile(split / "label.bin")
    rng.random((rows, N_NUM), dtype=np.float32).astype(np.float16).tofile(split / "numerical.bin")
    features = {"label": Feature(dtype="bool"), **{n: Feature(dtype="float16") for n in num}}
    chunks = [Chunk(type="split_binary", features=["label"], files=["train/label.bin"]),
              Chunk(type="split_binary", features=num, files=["train/numerical.bin"])]
    for name in cats:
        rng.integers(0, ROWS_PER_TABLE, rows, dtype=np.int32).tofile(split / f"{name}.bin")
        features[name] = Feature(dtype="int32", cardinality=ROWS_PER_TABLE)
        chunks.append(Chunk(type="split_binary", features=[name], files=[f"train/{name}.bin"]))
    save(FeatureSpec(feature_spec=features, source_spec={"train": chunks},
                     channel_spec={"label": ["label"], "numerical": num, "categorical": cats}), str(root))
    return root


# ---- our trainer ------------------------------------------------------------------------------------
def train_config(batch: int, steps: int, log_every: int) -> dict:
    return {"model": {"interaction": "dot", "embedding_dim": DIM, "bottom_mlp": BOTTOM, "top_mlp": TOP},
            "optimizer": {"embedding": {"type": "rowwise_adagrad", "lr": 0.02},
                          "dense": {"type": "adagrad", "lr": 0.02}},
            "data": {"batch_size": batch, "shuffle": True}, "max_steps": steps, "log_every": log_every,
            "keep_checkpoints": 1, "seed": 0, "eval_split": None}  # the dataset has only 'train'


def run_ours(ds: Path, tmp: Path, nproc: int, threads: int, global_batch: int, warmup: int, steps: int,
             log_every: int) -> dict:
    """`dlrmflow train` under torchrun; steady-state samples/s from metrics.jsonl after ``warmup`` steps."""
    import yaml

    name = f"ours-{nproc}p-{global_batch}"
    cfg, run = tmp / f"{name}.yaml", tmp / name
    cfg.write_text(yaml.safe_dump(train_config(global_batch, warmup + steps, log_every)))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "flows.cli", "train", "--dataset", str(ds), "--run", str(run), "--config", str(cfg),
           "--nproc", str(nproc)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    windows = [r for r in records if "samples_per_s" in r and r["step"] - log_every >= warmup]
    samples = sum(log_every * global_batch for _ in windows)
    seconds = sum(log_every * global_batch / r["samples_per_s"] for r in windows)
    return {"what": "ours", "nproc": nproc, "threads_per_proc": threads, "global_batch": global_batch,
            "batch_per_proc": global_batch // nproc, "timed_steps": len(windows) * log_every,
            "samples_per_s": round(samples / seconds), "window_rates": [round(r["samples_per_s"]) for r in windows],
            "wall_s_incl_startup": round(wall, 1)}


# ---- raw TorchRec reference (no dlrmflow code in the step) ----------------------------------------------
def torchrec_reference(warmup: int, steps: int) -> dict:
    """TorchRec's DLRM + DistributedModelParallel (1 rank, default plan), fused row-wise Adagrad tables,
    dense Adagrad, a plain loop over 4 pre-made random batches: what stack.md section 3 measured."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.models.dlrm import DLRM
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

    from training import distributed

    distributed.init(120)
    torch.manual_seed(0)
    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=DIM, num_embeddings=ROWS_PER_TABLE,
                                 feature_names=[f"f{i}"]) for i in range(TABLES)]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    model = DLRM(embedding_bag_collection=ebc, dense_in_features=N_NUM, dense_arch_layer_sizes=BOTTOM,
                 over_arch_layer_sizes=TOP, dense_device=torch.device("cpu"))
    apply_optimizer_in_backward(RowWiseAdagrad, model.sparse_arch.parameters(), {"lr": 0.02})
    dmp = DistributedModelParallel(model, device=torch.device("cpu"))
    dense = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                  lambda p: torch.optim.Adagrad(p, lr=0.02))
    opt = CombinedOptimizer([dmp.fused_optimizer, dense])
    keys = [f"f{i}" for i in range(TABLES)]
    batches = [(torch.rand(BATCH, N_NUM),
                KeyedJaggedTensor(keys=keys, values=torch.randint(0, ROWS_PER_TABLE, (TABLES * BATCH,)),
                                  lengths=torch.ones(TABLES * BATCH, dtype=torch.int32)),
                (torch.rand(BATCH) < 0.25).float()) for _ in range(4)]
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        x, kjt, y = batches[i % len(batches)]
        loss = F.binary_cross_entropy_with_logits(dmp(x, kjt).squeeze(-1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - start)
    dist.destroy_process_group()
    return {"what": "torchrec", "nproc": 1, "threads_per_proc": torch.get_num_threads(), "global_batch": BATCH,
            "batch_per_proc": BATCH, "timed_steps": steps, "samples_per_s": round(BATCH * steps / sum(times[warmup:]))}


def run_torchrec_reference(threads: int, warmup: int, steps: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    proc = subprocess.run([sys.executable, __file__, "--torchrec-reference-worker", str(warmup), str(steps)],
                          cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"torchrec reference failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- plain PyTorch DLRM ----------------------------------------------------------------------------------
def plain_model():
    import torch
    from torch import nn

    class PlainDLRM(nn.Module):
        """The usual simple DLRM: EmbeddingBag per table, MLPs, pairwise dot interaction."""

        def __init__(self):
            super().__init__()
            self.tables = nn.ModuleList(nn.EmbeddingBag(ROWS_PER_TABLE, DIM, mode="sum") for _ in range(TABLES))
            layers, last = [], N_NUM
            for size in BOTTOM:
                layers += [nn.Linear(last, size), nn.ReLU()]
                last = size
            self.bottom = nn.Sequential(*layers)
            n_vec = TABLES + 1
            self.register_buffer("triu", torch.triu_indices(n_vec, n_vec, offset=1), persistent=False)
            layers, last = [], DIM + n_vec * (n_vec - 1) // 2
            for size in TOP[:-1]:
                layers += [nn.Linear(last, size), nn.ReLU()]
                last = size
            self.top = nn.Sequential(*layers, nn.Linear(last, TOP[-1]))

        def forward(self, dense, ids):  # ids: [TABLES, B]
            x = self.bottom(dense)
            embs = [t(ids[i].unsqueeze(1)) for i, t in enumerate(self.tables)]
            vecs = torch.stack([x, *embs], dim=1)  # [B, 27, 64]
            dots = torch.bmm(vecs, vecs.transpose(1, 2))[:, self.triu[0], self.triu[1]]
            return self.top(torch.cat([x, dots], dim=1)).squeeze(1)

    return PlainDLRM()


def run_plain(ds: Path, threads: int, warmup: int, steps: int) -> dict:
    import torch
    import torch.nn.functional as F

    from training.data import SplitBinaryDataset

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = plain_model()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.02)
    data = SplitBinaryDataset(str(ds), "train")
    batches = data.batches(BATCH, shuffle=True, drop_last=True)
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        b = next(batches)
        ids = b.sparse_features.values().view(TABLES, -1)
        loss = F.binary_cross_entropy_with_logits(model(b.dense_features, ids), b.labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    batches.close()
    timed = times[warmup:]
    return {"what": "plain", "nproc": 1, "threads_per_proc": threads, "global_batch": BATCH,
            "batch_per_proc": BATCH, "timed_steps": steps, "samples_per_s": round(BATCH * steps / sum(timed)),
            "step_ms": [round(t * 1000) for t in timed], "optimizer": "torch.optim.Adagrad (dense, all params)"}


# ---- main -------------------------------------------------------------------------------------------
def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps of each trainer run")
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each trainer run")
    parser.add_argument("--log-every", type=int, default=5)
    parser.add_argument("--plain-warmup", type=int, default=2)
    parser.add_argument("--plain-steps", type=int, default=5)
    parser.add_argument("--skip-2proc", action="store_true")
    parser.add_argument("--skip-torchrec", action="store_true", help="skip the raw TorchRec reference loop")
    parser.add_argument("--torchrec-reference-worker", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--also-2proc-global-4096", action="store_true",
                        help="also 2 processes x 2048 rows (same global batch as 1 process)")
    args = parser.parse_args()
    if args.torchrec_reference_worker:
        print(json.dumps(torchrec_reference(*args.torchrec_reference_worker)))
        return
    if (args.warmup % args.log_every) or (args.steps % args.log_every):
        parser.error("--warmup and --steps must be multiples of --log-every")

    import torch
    import torchrec

    info = {"what": "machine", "cpus": os.cpu_count(), "torch": torch.__version__, "torchrec": torchrec.__version__,
            "load_average_before": load_average()}
    print(json.dumps(info), flush=True)
    fl = flops_per_sample()
    print(json.dumps({"what": "flops_per_sample", **fl}), flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        steps = args.warmup + args.steps
        ds = write_dataset(tmp / "ds", max(2 * BATCH * steps, BATCH * (args.plain_warmup + args.plain_steps)) + BATCH)
        runs = [(1, 2, BATCH)]
        if not args.skip_2proc:
            runs.append((2, 1, 2 * BATCH))
            if args.also_2proc_global_4096:
                runs.append((2, 1, BATCH))
        for nproc, threads, global_batch in runs:
            r = run_ours(ds, tmp, nproc, threads, global_batch, args.warmup, args.steps, args.log_every)
            print(json.dumps(r), flush=True)
            results.append(r)
        if not args.skip_torchrec:
            r = run_torchrec_reference(2, args.warmup, args.steps)
            print(json.dumps(r), flush=True)
            results.append(r)
        r = run_plain(ds, 2, args.plain_warmup, args.plain_steps)
        print(json.dumps(r), flush=True)
        results.append(r)
    mm = matmul_flops()
    peak = mm["2048^3"]
    layer_flops = {f"{BATCH}x{i}x{o}": 2 * BATCH * i * o for i, o in linear_shapes()}
    # what the MLP's own matmuls can reach: their FLOPs over the time they take at the measured rates
    mlp_rate = sum(layer_flops.values()) / sum(f / mm[k] for k, f in layer_flops.items())
    print(json.dumps({"what": "matmul", "threads": 2, "gflop_s": {k: round(v / 1e9, 1) for k, v in mm.items()},
                      "mlp_shapes_gflop_s": round(mlp_rate / 1e9, 1), "peak_2048_gflop_s": round(peak / 1e9, 1)}),
          flush=True)
    info_after = load_average()
    print(json.dumps({"what": "machine", "load_average_after": info_after}), flush=True)

    plain = next(r for r in results if r["what"] == "plain")["samples_per_s"]
    print()
    print(f"MLP FLOPs/sample (fwd+bwd): {fl['total'] / 1e6:.2f} M (bottom {fl['bottom'] / 1e6:.2f}, "
          f"top {fl['top'] / 1e6:.2f}, interaction {fl['interaction'] / 1e6:.2f}); torch.mm fp32, 2 threads: "
          f"{mlp_rate / 1e9:.1f} GFLOP/s at the MLP's layer shapes (batch {BATCH}), {peak / 1e9:.1f} GFLOP/s at 2048^3")
    print()
    print("| run | processes x threads | batch per process | samples/s | vs plain PyTorch | MLP GFLOP/s "
          "| of mm at MLP shapes | of mm 2048^3 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        name = {"ours": "ours (dlrmflow train)", "torchrec": "raw TorchRec loop (reference)",
                "plain": "plain PyTorch DLRM"}[r["what"]]
        achieved = r["samples_per_s"] * fl["total"]
        print(f"| {name} | {r['nproc']} x {r['threads_per_proc']} | {r['batch_per_proc']} | {r['samples_per_s']:,} | "
              f"{r['samples_per_s'] / plain:.2f}x | {achieved / 1e9:.1f} | {achieved / mlp_rate:.0%} | {achieved / peak:.0%} |")
    print()
    print(f"load average before: {info['load_average_before']}; after: {info_after}")


if __name__ == "__main__":
    main()
