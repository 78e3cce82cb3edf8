"""Training throughput on CPU: our trainer (`dlrmflow train`, 1 and 2 processes) vs a bare TorchRec loop and
a DLRM trained the way facebookresearch/dlrm trains it, and the fraction of the machine's dense matmul
FLOP/s that each reaches.

Model (Criteo-like): 26 tables x 100,000 rows x dim 64, 13 numericals, bottom MLP 512-256-64,
dot interaction, top MLP 512-256-1, batch 4096 per process.

- ours: a generated split_binary dataset (26 int32 categoricals of cardinality 100k, 13 float16
  numericals), then the real ``python -m flows.cli train`` -> torchrun -> ``training.train_worker`` ->
  ``Trainer`` (TrainPipelineSparseDist, fused row-wise Adagrad tables, dense Adagrad MLPs).
  Steady-state samples/s = all samples / all time of the metrics.jsonl windows after the warmup
  steps (the trainer's own timing: wall clock between log lines, data loading included).
  1 process uses 2 OMP threads; 2 processes use 1 thread each (the machine has 2 cores).
- raw TorchRec: TorchRec's DLRM + DMP in a bare loop over pre-made random batches, 1 process x 2
  threads (the loop of stack.md section 3), to compare with ours under the same load.
- dlrm-style: the training loop of facebookresearch/dlrm's dlrm_s_pytorch.py (``--optimizer adagrad
  --loss-function bce``), written anew: one ``nn.EmbeddingBag(mode="sum", sparse=True)`` per table,
  MLPs with a sigmoid output, dot interaction, one ``torch.optim.Adagrad`` over all parameters with
  sparse table gradients, BCELoss, the loss read every step; in this process with 2 threads, batches
  from the same dataset through our loader.
- matmul: ``torch.mm`` float32, 2 threads, best of 7, on each MLP layer's shape (batch 4096) and on
  2048^3. "At MLP shapes" = the layers' FLOPs / the time they take at those rates (what the MLP's
  matmuls can reach); 2048^3 is the machine's peak.

MLP FLOPs per sample = 3 x forward matmul FLOPs (forward + 2x for backward) of bottom MLP, top MLP
and the interaction's 27x64 @ 64x27 product. Prints one JSON line per measurement, then a
markdown table of medians over ``--rounds`` (ratios taken within a round, then their median: the
machine is shared and noisy). One round takes ~2-3 minutes on a 2-core machine.

Multi-hot (``--multi-hot-sizes 3,2,1,...``, MLPerf DLRMv2's sizes by default with a bare flag): instead of the
above, our trainer on ``dlrmflow synth`` rows twice in each round, the same rows one-hot and multi-hot (the
multi-hot rows are the one-hot rows with N ids per field, the first the one-hot id), both preprocessed the same
way (ordered split, train only, frequency threshold ``--multi-hot-threshold``): samples/s and their ratio.

Precision (``--precision``): instead of the above, our trainer with ``precision.dense`` fp32 and bf16 back to back
in each round (the order alternating), 1 process x 2 threads, on the Criteo-like model (batch 4096) and on the
presets' small one (dim 16, MLPs 64-16 / 64-1, batch 512, 8x the steps); the oneDNN primitives one step of each
runs (``ONEDNN_VERBOSE=1``: the ISA and kernel names, e.g. ``brg_matmul:avx512_core_bf16`` or ``..._amx``); and
``torch.mm`` fp32 vs bf16 at the MLP's shapes.

usage: python benchmarks/bench_train.py [--rounds 3] [--steps 20] [--warmup 5] [--skip-2proc]
       python benchmarks/bench_train.py --multi-hot-sizes [3,2,1,...] [--rounds 3] [--skip-2proc]
       python benchmarks/bench_train.py --precision [--rounds 3]
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


def matmul_flops(threads: int = 2, repeat: int = 7, dtype: str = "float32") -> dict[str, float]:
    """Best FLOP/s of torch.mm on each MLP layer shape (M=BATCH) and on 2048^3, in ``dtype``."""
    import torch

    torch.set_num_threads(threads)
    shapes = {f"{BATCH}x{i}x{o}": (BATCH, i, o) for i, o in linear_shapes()} | {"2048^3": (2048, 2048, 2048)}
    out = {}
    for name, (m, k, n) in shapes.items():
        a, b = torch.randn(m, k, dtype=getattr(torch, dtype)), torch.randn(k, n, dtype=getattr(torch, dtype))
        c = torch.empty(m, n, dtype=getattr(torch, dtype))
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
def write_dataset(root: Path, rows: int, rows_per_table: int = ROWS_PER_TABLE) -> Path:
    """A 'train' split: 26 int32 categoricals of cardinality ``rows_per_table`` (100k), 13 float16 numericals."""
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
        rng.integers(0, rows_per_table, rows, dtype=np.int32).tofile(split / f"{name}.bin")
        features[name] = Feature(dtype="int32", cardinality=rows_per_table)
        chunks.append(Chunk(type="split_binary", features=[name], files=[f"train/{name}.bin"]))
    save(FeatureSpec(feature_spec=features, source_spec={"train": chunks},
                     channel_spec={"label": ["label"], "numerical": num, "categorical": cats}), str(root))
    return root


# ---- our trainer ------------------------------------------------------------------------------------
CRITEO_ARCH = {"interaction": "dot", "embedding_dim": DIM, "bottom_mlp": BOTTOM, "top_mlp": TOP}


def train_config(batch: int, steps: int, log_every: int, arch: dict | None = None, dense: str = "fp32") -> dict:
    return {"arch": arch or CRITEO_ARCH, "precision": {"dense": dense},
            "optimizer": {"embedding": {"type": "rowwise_adagrad", "lr": 0.02},
                          "dense": {"type": "adagrad", "lr": 0.02}},
            "data": {"batch_size": batch, "shuffle": True}, "max_steps": steps, "log_every": log_every,
            "keep_checkpoints": 1, "seed": 0, "eval_split": None}  # the dataset has only 'train'


def run_ours(ds: Path, tmp: Path, nproc: int, threads: int, global_batch: int, warmup: int, steps: int,
             log_every: int, tag: str = "", arch: dict | None = None, dense: str = "fp32") -> dict:
    """`dlrmflow train` under torchrun; steady-state samples/s from metrics.jsonl after ``warmup`` steps."""
    import yaml

    name = f"ours-{nproc}p-{global_batch}{tag}"
    cfg, run = tmp / f"{name}.yaml", tmp / name
    cfg.write_text(yaml.safe_dump(train_config(global_batch, warmup + steps, log_every, arch, dense)))
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


# ---- DLRM as facebookresearch/dlrm trains it ---------------------------------------------------------
def dlrm_reference_model():
    """The reference DLRM's structure (dlrm_s_pytorch.py, written anew here): one
    ``nn.EmbeddingBag(mode="sum", sparse=True)`` per table fed (indices, offsets), MLPs of Linear+ReLU with
    a sigmoid on the top MLP's output, dot interaction over the strictly lower triangle of Z = T T^T."""
    import torch
    from torch import nn

    def mlp(sizes: list[int], sigmoid_last: bool) -> nn.Sequential:
        layers = []
        for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
            layers.append(nn.Linear(n_in, n_out))
            last = i == len(sizes) - 2
            layers.append(nn.Sigmoid() if last and sigmoid_last else nn.ReLU())
        return nn.Sequential(*layers)

    class ReferenceDLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb_l = nn.ModuleList(nn.EmbeddingBag(ROWS_PER_TABLE, DIM, mode="sum", sparse=True)
                                       for _ in range(TABLES))
            for table in self.emb_l:  # the reference's initialisation: U(-sqrt(1/n), sqrt(1/n))
                bound = (1 / ROWS_PER_TABLE) ** 0.5
                nn.init.uniform_(table.weight, -bound, bound)
            n_vec = TABLES + 1
            self.bot_l = mlp([N_NUM, *BOTTOM], sigmoid_last=False)
            self.top_l = mlp([DIM + n_vec * (n_vec - 1) // 2, *TOP], sigmoid_last=True)
            li, lj = torch.tril_indices(n_vec, n_vec, offset=-1)
            self.register_buffer("li", li, persistent=False)
            self.register_buffer("lj", lj, persistent=False)

        def forward(self, dense, indices, offsets):  # indices: one [B] tensor per table
            x = self.bot_l(dense)
            ly = [table(idx, offsets) for table, idx in zip(self.emb_l, indices)]
            t = torch.cat([x, *ly], dim=1).view(-1, TABLES + 1, DIM)
            z = torch.bmm(t, t.transpose(1, 2))
            return self.top_l(torch.cat([x, z[:, self.li, self.lj]], dim=1))

    return ReferenceDLRM()


def run_dlrm_reference(ds: Path, threads: int, warmup: int, steps: int) -> dict:
    """facebookresearch/dlrm's training loop (``--optimizer adagrad --loss-function bce``): one
    torch.optim.Adagrad over all parameters, the tables' gradients sparse (only the batch's rows are
    updated), BCELoss on the sigmoid output, the loss read every step as the reference does; batches from
    the same dataset through our loader, with 2 threads in this process."""
    import torch

    from training.data import SplitBinaryDataset

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = dlrm_reference_model()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.02)
    loss_fn = torch.nn.BCELoss(reduction="mean")
    offsets = torch.arange(BATCH)
    data = SplitBinaryDataset(str(ds), "train")
    batches = data.batches(BATCH, shuffle=True, drop_last=True)
    times = []
    for _ in range(warmup + steps):
        start = time.perf_counter()
        b = next(batches)
        indices = b.sparse_features.values().view(TABLES, -1).unbind(0)
        loss = loss_fn(model(b.dense_features, indices, offsets), b.labels.view(-1, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.detach().cpu().numpy()
        times.append(time.perf_counter() - start)
    batches.close()
    timed = times[warmup:]
    return {"what": "dlrm_reference", "nproc": 1, "threads_per_proc": threads, "global_batch": BATCH,
            "batch_per_proc": BATCH, "timed_steps": steps, "samples_per_s": round(BATCH * steps / sum(timed)),
            "step_ms": [round(t * 1000) for t in timed],
            "optimizer": "torch.optim.Adagrad, sparse embedding gradients"}


# ---- multi-hot vs one-hot --------------------------------------------------------------------------------
MLPERF_SIZES = "3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1"


def synth_pair(tmp: Path, rows: int, sizes: list[int], threshold: int) -> dict[str, Path]:
    """The same ``dlrmflow synth`` rows one-hot and multi-hot, each preprocessed into a train-only dataset."""
    from preprocessing import PreprocessConfig, run as preprocess
    from synthetic.generator import SPEC_FILE, generate

    out = {}
    for name, options in (("one-hot", {}), ("multi-hot", {"multi_hot_sizes": sizes})):
        raw = tmp / f"raw-{name}"
        generate(str(raw), rows, seed=0, **options)
        spec = str(raw / SPEC_FILE) if options else "criteo"
        out[name] = Path(preprocess(PreprocessConfig(inputs=[str(raw)], spec=spec, out=str(tmp / f"store-{name}"),
                                                     split="ordered:train=1", frequency_threshold=threshold,
                                                     progress=False)))
    return out


def multi_hot_main(args) -> None:
    """Our trainer on one-hot and multi-hot rows of the same synthetic data, back to back in each round."""
    import feature_spec as fspec

    sizes = [int(x) for x in args.multi_hot_sizes.split(",")]
    info = {"what": "machine", "cpus": os.cpu_count(), "load_average_before": load_average(), "sizes": sizes}
    print(json.dumps(info), flush=True)
    runs = [(1, 2, BATCH)] + ([] if args.skip_2proc else [(2, 1, 2 * BATCH)])
    rows_needed = max(g for _, _, g in runs) * (args.warmup + args.steps) + BATCH
    results: dict[tuple, list[int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-train-mh-") as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        datasets = synth_pair(tmp, rows_needed, sizes, args.multi_hot_threshold)
        for name, ds in datasets.items():
            spec = fspec.load(str(ds))
            ids = sum(spec.feature_spec[f].values_per_row for f in spec.categorical_features)
            rows = sum(spec.cardinality(f) for f in spec.categorical_features)
            print(json.dumps({"what": "dataset", "name": name, "rows": spec.metadata["rows"]["train"],
                              "ids_per_row": ids, "embedding_rows": rows,
                              "synth_and_preprocess_s": round(time.perf_counter() - start, 1)}), flush=True)
        for index in range(args.rounds):
            for nproc, threads, global_batch in runs:
                for name, ds in datasets.items():
                    r = run_ours(ds, tmp, nproc, threads, global_batch, args.warmup, args.steps, args.log_every,
                                 f"-{name}-round{index}")
                    print(json.dumps({**r, "data": name}), flush=True)
                    results.setdefault((name, nproc, threads, global_batch // nproc), []).append(r["samples_per_s"])
    after = load_average()
    print(json.dumps({"what": "machine", "load_average_after": after}), flush=True)
    print()
    print(f"medians over {args.rounds} round(s); model: 26 tables (the datasets' vocabularies) x dim {DIM}, "
          f"bottom MLP {BOTTOM}, top MLP {TOP}")
    print()
    print("| data | processes x threads | batch per process | samples/s | multi-hot / one-hot |")
    print("|---|---|---|---|---|")
    for (name, nproc, threads, batch), rates in results.items():
        one = results[("one-hot", nproc, threads, batch)]
        ratio = float(np.median([m / o for m, o in zip(rates, one)]))
        print(f"| {name} | {nproc} x {threads} | {batch} | {np.median(rates):,.0f} | {ratio:.2f}x |")
    print()
    print(f"load average before: {info['load_average_before']}; after: {after}")


# ---- bf16 vs fp32 dense part ---------------------------------------------------------------------------
SMALL_ARCH = {"interaction": "dot", "embedding_dim": 16, "bottom_mlp": [64, 16], "top_mlp": [64, 1]}  # the presets'
SMALL_BATCH, SMALL_STEPS_FACTOR = 512, 8   # the presets' batch; 8x the steps, so as many rows are timed
PRECISION_MODELS = {"criteo-like": (CRITEO_ARCH, BATCH, 1), "small": (SMALL_ARCH, SMALL_BATCH, SMALL_STEPS_FACTOR)}


def kernels_worker(dense: str) -> None:
    """One forward + backward of TorchRec's DLRM (the Criteo-like model, 1,000-row tables) in this process with
    ``ONEDNN_VERBOSE=1`` set by the caller: oneDNN prints every primitive it runs."""
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.models.dlrm import DLRM

    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=DIM, num_embeddings=1000, feature_names=[f"f{i}"])
              for i in range(TABLES)]
    model = DLRM(embedding_bag_collection=EmbeddingBagCollection(tables=tables), dense_in_features=N_NUM,
                 dense_arch_layer_sizes=BOTTOM, over_arch_layer_sizes=TOP)
    kjt = KeyedJaggedTensor(keys=[f"f{i}" for i in range(TABLES)], values=torch.randint(0, 1000, (TABLES * BATCH,)),
                            lengths=torch.ones(TABLES * BATCH, dtype=torch.int32))
    with torch.autocast("cpu", torch.bfloat16, enabled=dense == "bf16"):
        out = model(torch.rand(BATCH, N_NUM), kjt)
    out.float().sum().backward()


def cpu_worker(ds: str, model: str, dense: str, warmup: int, steps: int) -> dict:
    """Our Trainer in this process (1 rank; the caller sets 1 OMP thread): process CPU seconds per step over
    ``steps`` steps after ``warmup`` (the loader's thread included). Waiting for a core costs no CPU time, so
    this is what a shared machine's load does not distort."""
    from training import distributed
    from training.config import TrainConfig
    from training.trainer import Trainer

    arch, batch, _ = PRECISION_MODELS[model]
    cfg = TrainConfig(dataset=ds, arch=arch, precision={"dense": dense}, data={"batch_size": batch},
                      optimizer={"embedding": {"type": "rowwise_adagrad", "lr": 0.02},
                                 "dense": {"type": "adagrad", "lr": 0.02}},
                      max_steps=warmup + steps, log_every=warmup + steps, eval_split=None, seed=0)
    trainer = Trainer(cfg, distributed.init(120))
    marks = {}
    set_lr = trainer._set_lr

    def mark_then_set_lr():  # called at the start of every step
        marks[trainer.step] = time.process_time()
        set_lr()

    trainer._set_lr = mark_then_set_lr
    trainer.train()
    cpu = time.process_time() - marks[warmup]
    distributed.destroy()
    return {"what": "cpu_time", "model": model, "dense": dense, "batch": batch, "timed_steps": steps,
            "cpu_ms_per_step": round(1000 * cpu / steps, 1), "samples_per_cpu_s": round(batch * steps / cpu)}


def run_cpu_worker(ds: Path, model: str, dense: str, warmup: int, steps: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    proc = subprocess.run([sys.executable, __file__, "--cpu-worker", str(ds), model, dense, str(warmup), str(steps)],
                          cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"cpu worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def onednn_kernels(dense: str) -> dict:
    """The oneDNN ISA line and {primitive kind: implementation: count} of one step (``kernels_worker``)."""
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "OMP_NUM_THREADS": "2", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, __file__, "--kernels-worker", dense], cwd=REPO, env=env,
                          capture_output=True, text=True, check=True)
    isa, counts = None, {}
    for line in proc.stdout.splitlines():
        f = line.split(",")
        if f[:4] == ["onednn_verbose", "v1", "info", "cpu"] and f[4].startswith("isa:"):
            isa = f[4][4:]
        elif f[:5] == ["onednn_verbose", "v1", "primitive", "exec", "cpu"]:
            kind = counts.setdefault(f[5], {})
            kind[f[6]] = kind.get(f[6], 0) + 1
    return {"what": "onednn_kernels", "dense": dense, "isa": isa, "primitives": counts}


def dense_part_cpu_ms(dense: str, model: str, reps: int = 10) -> float:
    """CPU ms (this thread, 1 OMP thread) of one forward + backward of the DLRM's dense part alone (bottom MLP,
    dot interaction with random pooled embeddings, top MLP, fp32 loss): what bf16 can speed up, without the
    tables, the optimizers and the loader."""
    import torch
    import torch.nn.functional as F
    from torchrec.models.dlrm import DenseArch, InteractionArch, OverArch

    arch, batch, _ = PRECISION_MODELS[model]
    dim, n = arch["embedding_dim"], TABLES
    torch.set_num_threads(1)
    torch.manual_seed(0)
    bottom = DenseArch(N_NUM, arch["bottom_mlp"])
    inter = InteractionArch(n)
    top = OverArch(dim + n * (n + 1) // 2, arch["top_mlp"])
    x, emb = torch.rand(batch, N_NUM), torch.rand(batch, n, dim, requires_grad=True)
    y = (torch.rand(batch) < 0.25).float()
    times = []
    for _ in range(reps + 2):
        start = time.thread_time()
        with torch.autocast("cpu", torch.bfloat16, enabled=dense == "bf16"):
            logits = top(inter(bottom(x), emb)).squeeze(-1)
        F.binary_cross_entropy_with_logits(logits.float(), y).backward()
        times.append(time.thread_time() - start)
    return 1000 * float(np.median(times[2:]))


def cpu_flags() -> list[str]:
    flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), [])
    return sorted(f for f in flags if f.startswith(("avx512_bf16", "avx512_vnni", "amx")))


def precision_main(args) -> None:
    """Our trainer (1 process x 2 threads) with ``precision.dense`` fp32 and bf16, back to back in each round,
    on the Criteo-like model and on the presets' small one; the oneDNN kernels each runs; mm fp32 vs bf16."""
    import torch

    info = {"what": "machine", "cpus": os.cpu_count(), "torch": torch.__version__, "cpu_flags": cpu_flags(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_average_before": load_average()}
    print(json.dumps(info), flush=True)
    for dense in ("fp32", "bf16"):
        print(json.dumps(onednn_kernels(dense)), flush=True)
    models = PRECISION_MODELS
    results: dict[tuple, list[int]] = {}
    cpu: dict[tuple, list[float]] = {}
    dense_cpu: dict[tuple, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-train-bf16-") as tmp:
        tmp = Path(tmp)
        ds = write_dataset(tmp / "ds", BATCH * (args.warmup + args.steps) + BATCH)
        for index in range(args.rounds):
            for model, (arch, batch, factor) in models.items():
                # alternate which precision goes first, so that a drift in the load favours neither
                for dense in ("fp32", "bf16") if index % 2 == 0 else ("bf16", "fp32"):
                    r = run_ours(ds, tmp, 1, 2, batch, args.warmup * factor, args.steps * factor,
                                 args.log_every * factor, f"-{model}-{dense}-round{index}", arch, dense)
                    print(json.dumps({**r, "model": model, "dense": dense, "round": index}), flush=True)
                    results.setdefault((model, dense), []).append(r["samples_per_s"])
                    c = run_cpu_worker(ds, model, dense, args.warmup * factor, args.steps * factor)
                    print(json.dumps({**c, "round": index}), flush=True)
                    cpu.setdefault((model, dense), []).append(c["cpu_ms_per_step"])
                    d = dense_part_cpu_ms(dense, model)
                    print(json.dumps({"what": "dense_part_cpu", "model": model, "dense": dense, "round": index,
                                      "cpu_ms": round(d, 1)}), flush=True)
                    dense_cpu.setdefault((model, dense), []).append(d)
    mm = {dtype: matmul_flops(dtype=dtype) for dtype in ("float32", "bfloat16")}
    print(json.dumps({"what": "matmul", "threads": 2, "gflop_s": {d: {k: round(v / 1e9, 1) for k, v in m.items()}
                                                                  for d, m in mm.items()}}), flush=True)
    after = load_average()
    print(json.dumps({"what": "machine", "load_average_after": after}), flush=True)
    print()
    print(f"per-round bf16/fp32 ratios, then their median over {args.rounds} round(s); wall: `dlrmflow train`, "
          "1 process x 2 threads; CPU: in-process Trainer, 1 thread, process CPU ms per step; dense part: its "
          "forward + backward alone, 1 thread, CPU ms")
    print()
    print("| model | batch | fp32 samples/s | bf16 samples/s | bf16 / fp32 (wall) | per round | fp32 CPU ms/step "
          "| bf16 CPU ms/step | fp32 / bf16 CPU | per round | dense part fp32 -> bf16 CPU ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model, (_, batch, _) in models.items():
        fp32, bf16 = results[(model, "fp32")], results[(model, "bf16")]
        ratios = [b / f for b, f in zip(bf16, fp32)]
        cf, cb = cpu[(model, "fp32")], cpu[(model, "bf16")]
        cratios = [f / b for f, b in zip(cf, cb)]
        print(f"| {model} | {batch} | {np.median(fp32):,.0f} | {np.median(bf16):,.0f} | {np.median(ratios):.2f}x | "
              f"{' '.join(f'{r:.2f}' for r in ratios)} | {np.median(cf):.0f} | {np.median(cb):.0f} | "
              f"{np.median(cratios):.2f}x | {' '.join(f'{r:.2f}' for r in cratios)} | "
              f"{np.median(dense_cpu[(model, 'fp32')]):.1f} -> {np.median(dense_cpu[(model, 'bf16')]):.1f} |")
    print()
    print("torch.mm, 2 threads, GFLOP/s fp32 -> bf16: " + ", ".join(
        f"{k} {mm['float32'][k] / 1e9:.0f} -> {mm['bfloat16'][k] / 1e9:.0f}" for k in mm["float32"]))
    print(f"load average before: {info['load_average_before']}; after: {after}")


# ---- main -------------------------------------------------------------------------------------------
def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1].strip()


NAMES = {"ours": "ours (dlrmflow train)", "torchrec": "raw TorchRec loop (reference)",
         "dlrm_reference": "facebookresearch/dlrm-style loop"}


def one_round(ds: Path, tmp: Path, args, index: int) -> list[dict]:
    """Every configuration once, back to back (so that their ratios share the machine's load)."""
    runs = [(1, 2, BATCH)]
    if not args.skip_2proc:
        runs.append((2, 1, 2 * BATCH))
        if args.also_2proc_global_4096:
            runs.append((2, 1, BATCH))
    results = []
    for nproc, threads, global_batch in runs:
        results.append(run_ours(ds, tmp, nproc, threads, global_batch, args.warmup, args.steps, args.log_every,
                                f"-round{index}"))
        print(json.dumps(results[-1]), flush=True)
    if not args.skip_torchrec:
        results.append(run_torchrec_reference(2, args.warmup, args.steps))
        print(json.dumps(results[-1]), flush=True)
    results.append(run_dlrm_reference(ds, 2, args.dlrm_warmup, args.dlrm_steps))
    print(json.dumps(results[-1]), flush=True)
    return results


def key(r: dict) -> tuple:
    return r["what"], r["nproc"], r["threads_per_proc"], r["batch_per_proc"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps of each trainer run")
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each trainer run")
    parser.add_argument("--log-every", type=int, default=5)
    parser.add_argument("--dlrm-warmup", type=int, default=3)
    parser.add_argument("--dlrm-steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1, help="repeat every run this many times; medians reported")
    parser.add_argument("--skip-2proc", action="store_true")
    parser.add_argument("--skip-torchrec", action="store_true", help="skip the raw TorchRec reference loop")
    parser.add_argument("--torchrec-reference-worker", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--kernels-worker", choices=("fp32", "bf16"), help=argparse.SUPPRESS)
    parser.add_argument("--cpu-worker", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--precision", action="store_true",
                        help="measure precision.dense fp32 vs bf16 (1 process x 2 threads, two models) instead")
    parser.add_argument("--also-2proc-global-4096", action="store_true",
                        help="also 2 processes x 2048 rows (same global batch as 1 process)")
    parser.add_argument("--multi-hot-sizes", nargs="?", const=MLPERF_SIZES, metavar="N,N,...",
                        help="measure one-hot vs multi-hot synthetic rows instead (default sizes: MLPerf DLRMv2's)")
    parser.add_argument("--multi-hot-threshold", type=int, default=3,
                        help="frequency threshold of the multi-hot comparison's preprocessing")
    args = parser.parse_args()
    if args.torchrec_reference_worker:
        print(json.dumps(torchrec_reference(*args.torchrec_reference_worker)))
        return
    if args.kernels_worker:
        return kernels_worker(args.kernels_worker)
    if args.cpu_worker:
        ds, model, dense, warmup, steps = args.cpu_worker
        print(json.dumps(cpu_worker(ds, model, dense, int(warmup), int(steps))))
        return
    if (args.warmup % args.log_every) or (args.steps % args.log_every):
        parser.error("--warmup and --steps must be multiples of --log-every")
    if args.multi_hot_sizes:
        return multi_hot_main(args)
    if args.precision:
        return precision_main(args)

    import torch
    import torchrec

    info = {"what": "machine", "cpus": os.cpu_count(), "torch": torch.__version__, "torchrec": torchrec.__version__,
            "load_average_before": load_average()}
    print(json.dumps(info), flush=True)
    fl = flops_per_sample()
    print(json.dumps({"what": "flops_per_sample", **fl}), flush=True)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        steps = args.warmup + args.steps
        ds = write_dataset(tmp / "ds", max(2 * BATCH * steps, BATCH * (args.dlrm_warmup + args.dlrm_steps)) + BATCH)
        for index in range(args.rounds):
            rounds.append(one_round(ds, tmp, args, index))
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

    # per-round ratios to the two references of the same round, then medians over the rounds
    rows: dict[tuple, dict[str, list[float]]] = {}
    for results in rounds:
        ref = {r["what"]: r["samples_per_s"] for r in results if r["what"] != "ours"}
        for r in results:
            row = rows.setdefault(key(r), {"rate": [], "torchrec": [], "dlrm": []})
            row["rate"].append(r["samples_per_s"])
            if "torchrec" in ref:
                row["torchrec"].append(r["samples_per_s"] / ref["torchrec"])
            row["dlrm"].append(r["samples_per_s"] / ref["dlrm_reference"])
    med = lambda xs: float(np.median(xs)) if xs else float("nan")
    print()
    print(f"MLP FLOPs/sample (fwd+bwd): {fl['total'] / 1e6:.2f} M (bottom {fl['bottom'] / 1e6:.2f}, "
          f"top {fl['top'] / 1e6:.2f}, interaction {fl['interaction'] / 1e6:.2f}); torch.mm fp32, 2 threads: "
          f"{mlp_rate / 1e9:.1f} GFLOP/s at the MLP's layer shapes (batch {BATCH}), {peak / 1e9:.1f} GFLOP/s at 2048^3")
    print(f"medians over {args.rounds} round(s); ratios are taken within each round, then their median")
    print()
    print("| run | processes x threads | batch per process | samples/s | vs raw TorchRec | vs dlrm-style "
          "| MLP GFLOP/s | of mm at MLP shapes |")
    print("|---|---|---|---|---|---|---|---|")
    for (what, nproc, threads, batch), row in rows.items():
        achieved = med(row["rate"]) * fl["total"]
        print(f"| {NAMES[what]} | {nproc} x {threads} | {batch} | {med(row['rate']):,.0f} | "
              f"{med(row['torchrec']):.2f}x | {med(row['dlrm']):.2f}x | {achieved / 1e9:.1f} | {achieved / mlp_rate:.0%} |")
    print()
    print(f"load average before: {info['load_average_before']}; after: {info_after}")


if __name__ == "__main__":
    main()
