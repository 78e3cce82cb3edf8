"""Does dlrmflow work on this machine's accelerator, and how fast: one run, one JSON line per phase, a table last.

Phases (``--phases``, all by default; each guarded: a failure is its line's ``error`` and the run goes on):

- env: versions (python, torch, fbgemm_gpu, torchrec, CUDA/HIP, driver), the device (name, memory,
  capability or gcnArchName), one fused row-wise Adagrad TBE forward/backward on it, and the parity of the two TBE
  kernels the plans use against FBGEMM's CPU kernels on the same weights and input (fused row-wise Adagrad: the
  rows after one step; dense, data_parallel tables: the weights' gradient).
- quality: the real Criteo sample (10,000 rows) trained the shipped way: ``dlrmflow preprocess`` with the
  ``criteo-sample`` preset's preprocessing (nightly/presets.yaml), ``dlrmflow train --preset criteo-sample``,
  ``dlrmflow evaluate``; test AUC beside the CPU's 0.7414. Skipped where the sample is absent.
- bare: TorchRec's DLRM + DistributedModelParallel in a bare loop (fused row-wise Adagrad tables via
  apply_optimizer_in_backward, dense Adagrad, 4 pre-made device batches, no data loading, losses read once at the
  end): samples/s per batch size and precision.
- ours: ``dlrmflow train`` (1 rank) on a written Criteo-like dataset, the same model (26 tables x 100k rows x dim 64,
  bottom MLP 512-256-64, top MLP 512-256-1), fp32 and bf16 (``precision.dense``), batch 4096 and 32768: steady
  samples/s from metrics.jsonl after the warmup steps (bench_train.py's rule) and the ratio ours / bare.
- resume: the Criteo sample trained again, SIGKILLed (its process group) once a checkpoint is complete,
  ``dlrmflow train --resume`` to the same end, evaluated, and exported as a serving bundle (``dlrmflow export``,
  in WORK/bundle): where it resumed, its steps, test AUC, the bundle's files.
- sync: our Trainer in one process under ``torch.cuda.set_sync_debug_mode("warn")``: host synchronizations per
  step between log points (the goal: none), at log points, and the source lines they come from.
- memory: peak device memory (``torch.cuda.max_memory_allocated``) of ours (from the sync run) and of the bare loop.

The sharding profile is the config's default throughout. ``--device cpu`` runs every phase at tiny sizes (1,000-row
tables, batch 256, a few steps; quality capped at 20 steps), so it runs anywhere (tests/training/test_bench_gpu.py);
sync and memory then say "n/a on cpu" (the Trainer still runs under the sync counter).

How to run on a lent GPU: from the project root, commit first (the kit takes ``git archive HEAD``), then build the
kit with ``bash ../shared/tools/gpu/build-kit.sh`` (``.gpu/``: fbgemm-gpu and torchrec for the GPU image's torch,
this checkout's packages in ``.gpu/main``, the Criteo sample preprocessed in ``.gpu/data/criteo-sample``, which the
quality phase trains on where the raw sample is absent; that machine has no package registry, so nothing is
preprocessed there). On the GPU machine, with ``.gpu`` carried: ``bash .gpu/run.sh env && PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 540 python3 .gpu/main/benchmarks/bench_gpu.py --out $OUT/bench_gpu.jsonl`` (run.sh
unpacks the kit into /tmp/site and runs gpu_check.py's env phase; this script should then take about 5 minutes on one
H100, an estimate: it has not run on a GPU yet; ``--phases`` and ``--steps`` shorten it).

usage: python benchmarks/bench_gpu.py [--device auto|cuda|cpu] [--phases env,quality,bare,ours,sync,memory]
       [--steps N] [--batches 4096,32768] [--out FILE] [--work DIR] [--criteo FILE_OR_DATASET]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bench_train as bt   # noqa: E402  the Criteo-like model's sizes, its dataset and training config
from measure import Measurement, run_measured   # noqa: E402

PHASES = ("env", "quality", "resume", "bare", "ours", "sync", "memory")
PRECISIONS = ("fp32", "bf16")
PRESET = "criteo-sample"
CPU_AUC = 0.7414   # the preset's test AUC on CPU (training/presets/criteo-sample.yaml, seed 0)
CRITEO_FILE = "criteo_kaggle_train_head10k.txt.gz"
WORKER_TAG = "BENCH_GPU_WORKER "
NA_CPU = "n/a on cpu"


@dataclass(frozen=True)
class Sizes:
    table_rows: int
    batches: tuple[int, ...]
    warmup: int
    steps: int
    log_every: int
    quality_max_steps: int | None   # None: the preset's own stopping rule
    resume_steps: int               # the resume phase's run: its steps, a checkpoint every resume_steps // 6


SIZES = {"cuda": Sizes(bt.ROWS_PER_TABLE, (4096, 32768), warmup=20, steps=100, log_every=10, quality_max_steps=None,
                      resume_steps=120),
         "cpu": Sizes(1_000, (64,), warmup=2, steps=4, log_every=2, quality_max_steps=10,
                     resume_steps=12)}


@dataclass
class Bench:
    device: str
    sizes: Sizes
    work: Path
    criteo: Path | None
    timeout_s: int
    results: dict[str, dict] = field(default_factory=dict)
    _dataset: Path | None = None
    _criteo_dataset: Path | None = None
    _trainer_runs: dict | None = None

    @property
    def configs(self) -> list[tuple[int, str]]:
        return [(b, d) for b in self.sizes.batches for d in PRECISIONS]

    @property
    def total_steps(self) -> int:
        return self.sizes.warmup + self.sizes.steps

    @property
    def env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        return env

    def command(self, name: str, argv: list[str]) -> Measurement:
        """``argv`` under ``timeout``, measured; its output kept in WORK/logs/NAME.log. Raises with the output's end
        when it fails."""
        m = run_measured(["timeout", "-k", "10", str(self.timeout_s), *map(str, argv)], env=self.env, cwd=str(REPO))
        logs = self.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{name}.log").write_text(m.output)
        if m.returncode:
            why = f"timed out after {self.timeout_s} s" if m.returncode == 124 else f"exit {m.returncode}"
            raise RuntimeError(f"{name} failed ({why}); output ends:\n{m.output[-2500:]}")
        return m

    def cli(self, name: str, *args) -> Measurement:
        """``dlrmflow ARGS`` as ``python -m flows.cli`` (the GPU kit has no console script), after
        ``$DLRMFLOW_LAUNCH_PREFIX`` as the product starts its rank jobs and export child (a wrapper such as numactl;
        the test suite's warm launcher forks it, saving a torch start-up on the export). The resume phase's killed
        job starts plainly: its process group is killed whole."""
        from common.process import launch_command

        return self.command(name, launch_command([sys.executable, "-m", "flows.cli", *map(str, args)]))

    def worker(self, kind: str, spec: dict) -> dict:
        """This script's ``kind`` worker in a process of its own (it joins a process group; its device memory and
        the sync debug mode stay its own)."""
        script = str(Path(__file__).resolve())
        m = self.command(f"worker-{kind}", [sys.executable, script, "--worker", kind, json.dumps(spec)])
        line = next(x for x in reversed(m.output.splitlines()) if x.startswith(WORKER_TAG))
        return json.loads(line[len(WORKER_TAG):]) | {"peak_host_rss_mb": round(m.peak_rss_mb)}

    def dataset(self) -> Path:
        """The Criteo-like 'train' split (bench_train.write_dataset), one epoch long enough for every config."""
        if self._dataset is None:
            root = self.work / "criteo-like"
            shutil.rmtree(root, ignore_errors=True)
            rows = max(self.sizes.batches) * (self.total_steps + 1)
            self._dataset = bt.write_dataset(root, rows, self.sizes.table_rows)
        return self._dataset

    def criteo_dataset(self) -> tuple[Path, float | None]:
        """The Criteo sample as a dataset: ``criteo`` itself when preprocessed already (the GPU kit's, by `dlrmflow
        run --preset criteo-sample`), else preprocessed once here with the preset's settings (and the seconds
        that took)."""
        if (self.criteo / "feature_spec.yaml").exists():
            return self.criteo, None
        if self._criteo_dataset is None:
            from common.store import DATASETS
            from nightly.config import PipelinePreset   # polars, which the GPU image lacks: only here


            store = self.work / "criteo-sample"
            shutil.rmtree(store, ignore_errors=True)
            hint = PipelinePreset.named(PRESET).preprocess.model_dump(exclude_unset=True)
            flags = [x for k, v in hint.items() for x in (f"--{k.replace('_', '-')}", str(v))]
            m = self.cli("preprocess", "preprocess", "--input", self.criteo, "--spec", "criteo", *flags,
                         "--out", store)
            (self._criteo_dataset,) = [p.parent for p in (store / DATASETS).glob("*/feature_spec.yaml")]
            return self._criteo_dataset, round(m.wall_s, 1)
        return self._criteo_dataset, None

    def trainer_runs(self) -> dict:
        """Our Trainer in one process over every config (the sync and memory phases' measurement, made once)."""
        if self._trainer_runs is None:
            self._trainer_runs = self.worker("trainer", {
                "dataset": str(self.dataset()), "configs": self.configs, "steps": self.total_steps,
                "log_every": self.sizes.log_every})
        return self._trainer_runs


# ---- phases (each returns its JSON line's fields) -------------------------------------------------------------
def phase_env(b: Bench) -> dict:
    import importlib.metadata

    import fbgemm_gpu
    import torch
    import torchrec

    def version(module) -> str:
        try:
            return importlib.metadata.version(module.__name__.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            return getattr(module, "__version__", "?")

    info = {"python": platform.python_version(), "torch": torch.__version__, "fbgemm_gpu": version(fbgemm_gpu),
            "torchrec": version(torchrec), "cuda": torch.version.cuda, "hip": torch.version.hip,
            "driver": driver_version(), "device": device_info(b.device), "tbe": tbe_check(b.device),
            "parity": kernel_parity(b.device)}
    if b.device == "cuda":
        torch.cuda.empty_cache()   # the workers' processes get the device
    if not info["tbe"]["updated"] or not info["parity"]["ok"]:
        info["ok"] = False
    return info


def driver_version() -> str | None:
    for cmd in (["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                ["rocm-smi", "--showdriverversion", "--csv"]):
        if shutil.which(cmd[0]):
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                return None
            return out.splitlines()[-1].split(",")[-1].strip() if out else None
    return None


def device_info(device: str) -> dict:
    import torch

    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        arch = getattr(p, "gcnArchName", None) if torch.version.hip else f"sm_{p.major}{p.minor}"
        return {"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1), "arch": arch,
                "multiprocessors": p.multi_processor_count, "count": torch.cuda.device_count()}
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((x.split(":", 1)[1].strip() for x in cpuinfo.splitlines() if x.startswith("model name")),
                platform.processor())
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"name": name, "memory_gib": round(mem, 1), "arch": platform.machine(), "cores": os.cpu_count()}


def tbe_check(device: str) -> dict:
    """One forward/backward of FBGEMM's table-batched embedding with fused row-wise Adagrad: do the rows move?"""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, EmbeddingLocation, SplitTableBatchedEmbeddingBagsCodegen)

    cuda = device == "cuda"
    where = (EmbeddingLocation.DEVICE, ComputeDevice.CUDA) if cuda else (EmbeddingLocation.HOST, ComputeDevice.CPU)
    tbe = SplitTableBatchedEmbeddingBagsCodegen([(1000, 64, *where)] * 2, optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
                                                learning_rate=0.1)
    idx = torch.randint(0, 1000, (2 * 64,), device=device)
    offsets = torch.arange(0, 2 * 64 + 1, device=device)
    before = tbe.split_embedding_weights()[0].clone()
    out = tbe(idx, offsets)
    out.sum().backward()
    return {"out": list(out.shape), "updated": not torch.equal(before, tbe.split_embedding_weights()[0])}


def kernel_parity(device: str, tolerance: float = 1e-4) -> dict:
    """FBGEMM's two TBE kernels that the sharding plans use, on ``device`` against its CPU kernels with the same
    weights, indices and output gradient: fused row-wise Adagrad (max |difference| of the rows after one step) and
    the dense kernel of data_parallel tables (of the weights' gradient, the step being the dense optimizer's).
    On cpu both sides are the CPU kernel (the check runs; the differences are 0). Also says whether the dense
    kernel's backward raised PyTorch's 'autograd kernel was not registered' warning (seen with fbgemm-gpu 1.6.0
    on torch 2.11 CUDA): a right gradient here is what makes training silence it."""
    import warnings

    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, DenseTableBatchedEmbeddingBagsCodegen, EmbeddingLocation, SplitTableBatchedEmbeddingBagsCodegen)

    rows, dim, tables, batch, hot = 1000, 64, 2, 64, 3
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, rows, (tables * batch * hot,), generator=gen)
    offsets = torch.arange(0, tables * batch * hot + 1, hot)
    grad = torch.randn(batch, tables * dim, generator=gen)
    init = torch.rand(tables, rows, dim, generator=gen) - 0.5
    on = {"cpu": (EmbeddingLocation.HOST, ComputeDevice.CPU),
          "cuda": (EmbeddingLocation.DEVICE, ComputeDevice.CUDA)}

    def fused_step(where: str) -> list[torch.Tensor]:
        tbe = SplitTableBatchedEmbeddingBagsCodegen([(rows, dim, *on[where])] * tables, learning_rate=0.1,
                                                    optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD)
        with torch.no_grad():
            for w, x in zip(tbe.split_embedding_weights(), init):
                w.copy_(x)
        tbe(idx.to(where), offsets.to(where)).backward(grad.to(where))
        return [w.detach().cpu() for w in tbe.split_embedding_weights()]

    def dense_grad(where: str) -> tuple[torch.Tensor, bool]:
        tbe = DenseTableBatchedEmbeddingBagsCodegen([(rows, dim)] * tables, use_cpu=where == "cpu")
        if where != "cpu":
            tbe = tbe.to(where)
        with torch.no_grad():
            tbe.weights.copy_(init.reshape(-1).to(where))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            tbe(idx.to(where), offsets.to(where)).backward(grad.to(where))
        return tbe.weights.grad.detach().cpu(), any("autograd kernel was not registered" in str(w.message)
                                                     for w in seen)

    fused = max((a - c).abs().max().item() for a, c in zip(fused_step("cpu"), fused_step(device)))
    (cpu_grad, _), (dev_grad, warned) = dense_grad("cpu"), dense_grad(device)
    dense = (cpu_grad - dev_grad).abs().max().item()
    return {"fused_rowwise_adagrad_max_diff": fused, "dense_grad_max_diff": dense, "dense_grad_norm":
            round(cpu_grad.norm().item(), 3), "autograd_fallback_warning": warned,
            "ok": fused <= tolerance and dense <= tolerance and cpu_grad.abs().sum().item() > 0}


def phase_quality(b: Bench) -> dict:
    from common.store import RUNS
    from training.rundir import RunDir

    if b.criteo is None or not b.criteo.exists():
        return {"skipped": f"no Criteo sample (raw {CRITEO_FILE} or a preprocessed dataset): {b.criteo}"}
    store = b.work / "quality"
    shutil.rmtree(store, ignore_errors=True)
    out: dict = {"data": str(b.criteo), "cpu_auc": CPU_AUC}
    ds, preprocess_s = b.criteo_dataset()
    if preprocess_s is not None:
        out["preprocess_s"] = preprocess_s
    run = store / RUNS / PRESET
    cap = [] if b.sizes.quality_max_steps is None else ["--max-steps", b.sizes.quality_max_steps]
    m = b.cli("quality-train", "train", "--dataset", ds, "--run", run, "--preset", PRESET, "--nproc", 1, *cap)
    out["train_s"] = round(m.wall_s, 1)
    m = b.cli("quality-evaluate", "evaluate", "--run", run, "--nproc", 1)
    out["eval_s"] = round(m.wall_s, 1)
    rundir = RunDir(str(run))
    test = rundir.eval_metrics("test")
    steps = max((r["step"] for r in rundir.metrics()), default=None)
    out |= {"auc": test["auc"], "logloss": test["logloss"], "rows": test["rows"], "best_step": test["step"],
            "steps": steps, "max_steps": b.sizes.quality_max_steps}
    if out["auc"] is None or not math.isfinite(out["auc"]):
        out["ok"] = False
    return out


def phase_resume(b: Bench) -> dict:
    from common.store import RUNS
    from training.rundir import RunDir

    if b.criteo is None or not b.criteo.exists():
        return {"skipped": f"no Criteo sample (raw {CRITEO_FILE} or a preprocessed dataset): {b.criteo}"}
    ds, _ = b.criteo_dataset()
    steps = b.sizes.resume_steps
    every = steps // 6
    run = b.work / "resume" / RUNS / PRESET
    shutil.rmtree(run.parent.parent, ignore_errors=True)
    rundir = RunDir(str(run))
    argv = [sys.executable, "-m", "flows.cli", "train", "--dataset", ds, "--run", run, "--preset", PRESET,
            "--nproc", 1, "--max-steps", steps, "--set", f"checkpoint_every={every}"]
    log = b.work / "logs" / "resume-killed.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        job = subprocess.Popen(list(map(str, argv)), env=b.env, cwd=str(REPO), stdout=f, stderr=subprocess.STDOUT,
                               start_new_session=True)
    deadline = time.monotonic() + b.timeout_s
    try:
        while not (complete := complete_steps(run)) and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)   # the launcher and its rank: the whole job, as kill -9 of a node
        job.wait()
    if not complete:
        raise RuntimeError(f"no complete checkpoint before the kill (exit {job.returncode}); "
                           f"{log.read_text()[-1500:]}")
    killed = {"killed_after_checkpoints": complete, "finished_before_kill": job.returncode == 0}
    m = b.cli("resume-train", "train", "--run", run, "--resume", "--nproc", 1)
    resumed = [int(x) for x in re.findall(r"resumed from step (\d+)", m.output)]
    b.cli("resume-evaluate", "evaluate", "--run", run, "--nproc", 1)
    bundle = b.work / "bundle"
    shutil.rmtree(bundle, ignore_errors=True)
    b.cli("resume-export", "export", "--run", run, "--checkpoint", "best", "--out", bundle)
    test = rundir.eval_metrics("test")
    out = killed | {"resumed_from": resumed[0] if resumed else None, "steps": max(complete_steps(run), default=None),
                    "max_steps": steps, "auc": test["auc"], "best_step": test["step"],
                    "bundle": sorted(p.name for p in bundle.iterdir())}
    out["ok"] = (out["resumed_from"] is not None and out["steps"] == steps and math.isfinite(out["auc"])
                 and "manifest.json" in out["bundle"])
    return out


def complete_steps(run: Path) -> list[int]:
    """The run's complete checkpoints (a ``_COMPLETE`` marker in ``checkpoints/STEP``), read from the file system."""
    return sorted(int(p.parent.name) for p in (run / "checkpoints").glob("*/_COMPLETE") if p.parent.name.isdigit())


def phase_bare(b: Bench) -> dict:
    r = b.worker("bare", {"table_rows": b.sizes.table_rows, "configs": b.configs, "warmup": b.sizes.warmup,
                          "steps": b.sizes.steps})
    return r | {"ok": all("error" not in x for x in r["runs"])}


def phase_ours(b: Bench) -> dict:
    import yaml

    from common.store import RUNS
    from training.rundir import RunDir

    ds, s = b.dataset(), b.sizes
    bare = {(x["batch"], x["dense"]): x.get("samples_per_s") for x in b.results.get("bare", {}).get("runs", [])}
    runs = []
    for batch, dense in b.configs:
        name = f"ours-{batch}-{dense}"
        entry: dict = {"batch": batch, "dense": dense}
        try:
            cfg = b.work / f"{name}.yaml"
            cfg.write_text(yaml.safe_dump(bt.train_config(batch, b.total_steps, s.log_every, None, dense)))
            run = b.work / RUNS / name
            shutil.rmtree(run, ignore_errors=True)
            m = b.cli(name, "train", "--dataset", ds, "--run", run, "--config", cfg, "--nproc", 1)
            rate, windows = steady_rate(RunDir(str(run)).metrics(), s.warmup, s.log_every, batch)
            entry |= {"samples_per_s": rate, "window_rates": windows, "wall_s": round(m.wall_s, 1),
                      "peak_host_rss_mb": round(m.peak_rss_mb)}
            if bare.get((batch, dense)):
                entry |= {"bare_samples_per_s": bare[(batch, dense)], "ratio": round(rate / bare[(batch, dense)], 3)}
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
        runs.append(entry)
    return {"runs": runs, "ok": all("error" not in x for x in runs)}


def steady_rate(records: list[dict], warmup: int, log_every: int, batch: int) -> tuple[int, list[int]]:
    """All samples / all time of the metrics.jsonl windows that start at or after ``warmup`` (the trainer's timing:
    wall clock between log points, data loading included)."""
    windows = [r["samples_per_s"] for r in records if "samples_per_s" in r and r["step"] - log_every >= warmup]
    if not windows:
        raise RuntimeError(f"no metrics.jsonl window after the {warmup} warmup steps")
    seconds = sum(log_every * batch / r for r in windows)
    return round(len(windows) * log_every * batch / seconds), [round(r) for r in windows]


def phase_sync(b: Bench) -> dict:
    r = b.trainer_runs()
    runs = [{k: v for k, v in x.items() if k != "peak_gib"} for x in r["runs"]]
    out = {"runs": runs, "ok": all("error" not in x for x in runs)}
    if b.device == "cpu":
        for x in runs:
            for k in ("syncs", "between_log_points_per_step", "where"):
                x.pop(k, None)
        return out | {"syncs": NA_CPU}
    between = sum(x.get("syncs", {}).get("step", 0) for x in runs)
    # a sync warned by C++ outside Python's warnings (so not placed) is printed to the worker's log instead
    log = (b.work / "logs" / "worker-trainer.log").read_text()
    return out | {"between_log_points": between, "none_between_log_points": between == 0,
                  "unplaced_syncs": log.count("called a synchronizing CUDA operation")}


def phase_memory(b: Bench) -> dict:
    if b.device == "cpu":
        return {"peak": NA_CPU}
    ours = {(x["batch"], x["dense"]): x.get("peak_gib") for x in b.trainer_runs()["runs"]}
    bare = {(x["batch"], x["dense"]): x.get("peak_gib") for x in b.results.get("bare", {}).get("runs", [])}
    runs = [{"batch": k[0], "dense": k[1], "ours_gib": v, "bare_gib": bare.get(k)} for k, v in ours.items()]
    return {"runs": runs, "ok": all(x["ours_gib"] is not None for x in runs)}


PHASE_FUNCTIONS = {"env": phase_env, "quality": phase_quality, "resume": phase_resume, "bare": phase_bare,
                   "ours": phase_ours,
                   "sync": phase_sync, "memory": phase_memory}


# ---- workers (in processes of their own) ---------------------------------------------------------------------------
def bare_worker(spec: dict) -> dict:
    """TorchRec's DLRM + DMP (default plan, 1 rank), fused row-wise Adagrad tables, dense Adagrad; per config a plain
    loop over 4 pre-made device batches, timed between two device synchronizations."""
    import torch
    import torch.nn.functional as F
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.models.dlrm import DLRM
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

    from training import distributed

    dev = distributed.init(600).device
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    rows = spec["table_rows"]
    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=bt.DIM, num_embeddings=rows, feature_names=[f"f{i}"])
              for i in range(bt.TABLES)]
    model = DLRM(embedding_bag_collection=EmbeddingBagCollection(tables=tables, device=torch.device("meta")),
                 dense_in_features=bt.N_NUM, dense_arch_layer_sizes=bt.BOTTOM, over_arch_layer_sizes=bt.TOP,
                 dense_device=dev)
    apply_optimizer_in_backward(RowWiseAdagrad, model.sparse_arch.parameters(), {"lr": 0.02})
    dmp = DistributedModelParallel(model, device=dev)
    dense = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                  lambda p: torch.optim.Adagrad(p, lr=0.02))
    opt = CombinedOptimizer([dmp.fused_optimizer, dense])
    keys = [f"f{i}" for i in range(bt.TABLES)]

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def run(batch: int, precision: str) -> dict:
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        batches = [(torch.rand(batch, bt.N_NUM, device=dev),
                    KeyedJaggedTensor(keys=keys, values=torch.randint(0, rows, (bt.TABLES * batch,), device=dev),
                                      lengths=torch.ones(bt.TABLES * batch, dtype=torch.int32, device=dev)),
                    (torch.rand(batch, device=dev) < 0.25).float()) for _ in range(4)]
        losses = []
        for i in range(spec["warmup"] + spec["steps"]):
            if i == spec["warmup"]:
                sync()
                start = time.perf_counter()
            x, kjt, y = batches[i % len(batches)]
            with torch.autocast(dev.type, torch.bfloat16, enabled=precision == "bf16"):
                logits = dmp(x, kjt).squeeze(-1)
            loss = F.binary_cross_entropy_with_logits(logits.float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        sync()
        seconds = time.perf_counter() - start
        mean_loss = torch.stack(losses).mean().item()
        out = {"batch": batch, "dense": precision, "samples_per_s": round(batch * spec["steps"] / seconds),
               "mean_loss": round(mean_loss, 4)}
        if not math.isfinite(mean_loss):
            out["error"] = f"loss {mean_loss}"
        if cuda:
            out["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        return out

    runs = []
    for batch, precision in spec["configs"]:
        try:
            runs.append(run(batch, precision))
        except Exception as e:
            runs.append({"batch": batch, "dense": precision, "error": f"{type(e).__name__}: {e}"[:2000]})
    return {"runs": runs, "table_rows": rows, "threads": torch.get_num_threads()}


class SyncCounter:
    """Counts the host synchronizations that ``torch.cuda.set_sync_debug_mode("warn")`` reports, by what
    ``Trainer._segment`` was doing: ``log_point`` (in ``_log_window``), ``segment`` (building or detaching the
    pipeline: once per segment), ``step`` (anything else in a segment: between log points), ``other`` (outside
    the segments: validation, checkpoints, the loader's thread); and by source line."""

    def __init__(self):
        self.kinds = {"step": 0, "log_point": 0, "segment": 0, "other": 0}
        self.where: dict[str, int] = {}

    def show(self, message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" not in str(message):
            return
        stack = [f for f in traceback.extract_stack()[:-1] if not f.filename.endswith("warnings.py")]
        segment = max((i for i, f in enumerate(stack) if f.name == "_segment"), default=None)
        if segment is None:
            kind = "other"
        else:   # what _segment called
            callee = stack[segment + 1].name if segment + 1 < len(stack) else ""
            kind = {"_log_window": "log_point", "__init__": "segment", "detach": "segment"}.get(callee, "step")
        self.kinds[kind] += 1
        ours = next((f for f in reversed(stack) if f.filename.startswith(str(REPO))), None)
        inner = stack[-1] if stack else None
        parts = [f"{Path(f.filename).relative_to(REPO)}:{f.lineno} {f.name}" for f in [ours] if f]
        if inner is not None and inner is not ours:
            parts.append(f"{'/'.join(Path(inner.filename).parts[-2:])}:{inner.lineno} {inner.name}")
        key = f"{kind}: " + " <- ".join(parts)
        self.where[key] = self.where.get(key, 0) + 1


def trainer_worker(spec: dict) -> dict:
    """Our Trainer (no run folder: no checkpoints, no log file) in this process, once per config: host syncs during
    ``train()`` by kind and place, and the peak device memory of building and training."""
    import gc
    import warnings

    import torch

    from training import distributed
    from training.config import TrainConfig
    from training.trainer import Trainer

    env = distributed.init(600)
    cuda = env.device.type == "cuda"
    runs = []
    for batch, precision in spec["configs"]:
        entry: dict = {"batch": batch, "dense": precision, "steps": spec["steps"], "log_every": spec["log_every"]}
        trainer = None
        try:
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            cfg = bt.train_config(batch, spec["steps"], spec["log_every"], None, precision)
            trainer = Trainer(TrainConfig.from_dict(cfg | {"dataset": spec["dataset"]}), env)
            counter = SyncCounter()
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = counter.show
                if cuda:
                    torch.cuda.set_sync_debug_mode("warn")
                try:
                    trainer.train()
                finally:
                    if cuda:
                        torch.cuda.set_sync_debug_mode(0)
            entry |= {"trained_steps": trainer.step, "s": round(time.perf_counter() - start, 1),
                      "syncs": counter.kinds,
                      "between_log_points_per_step": round(counter.kinds["step"] / max(trainer.step, 1), 3),
                      "where": sorted(counter.where.items(), key=lambda kv: -kv[1])[:12]}
            if cuda:
                entry["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"[:2000]
        trainer = None   # freed before the next config's peak is taken
        gc.collect()
        runs.append(entry)
    return {"runs": runs}


WORKERS = {"bare": bare_worker, "trainer": trainer_worker}


# ---- the table ---------------------------------------------------------------------------------------------
def summary(phase: str, r: dict) -> str:
    """One line of the phase's result."""
    if "error" in r and not r.get("runs"):
        return r["error"].splitlines()[0][:110]
    if "skipped" in r:
        return f"skipped: {r['skipped']}"
    if phase == "env":
        d = r["device"]
        acc = f"CUDA {r['cuda']}" if r["cuda"] else f"HIP {r['hip']}" if r["hip"] else "no CUDA/HIP"
        par = r["parity"]
        return (f"{d['name']} ({d['memory_gib']} GiB, {d['arch']}); python {r['python']}, torch {r['torch']}, "
                f"fbgemm_gpu {r['fbgemm_gpu']}, torchrec {r['torchrec']}, {acc}, driver {r['driver']}; "
                f"TBE rows updated: {r['tbe']['updated']}; vs the CPU kernels: fused row-wise Adagrad "
                f"{par['fused_rowwise_adagrad_max_diff']:.1e}, dense gradient {par['dense_grad_max_diff']:.1e}")
    if phase == "quality":
        cap = f" (capped at {r['max_steps']})" if r.get("max_steps") else ""
        return (f"test AUC {r['auc']:.4f} (CPU {r['cpu_auc']}), log loss {r['logloss']:.4f}, best step "
                f"{r['best_step']} of {r['steps']}{cap}; train {r['train_s']} s, evaluate {r['eval_s']} s")
    if phase == "resume":
        return (f"killed after checkpoints {r['killed_after_checkpoints']}, resumed "
                f"from {r['resumed_from']} to {r['steps']} of {r['max_steps']}; test AUC {r['auc']:.4f}; bundle "
                f"{len(r['bundle'])} files")
    if phase == "sync":
        if r.get("syncs") == NA_CPU:
            return f"{NA_CPU} (Trainer ran {', '.join(str(x.get('trained_steps', 'error')) for x in r['runs'])} steps)"
        parts = []
        for x in r["runs"]:
            if "error" in x:
                parts.append(f"{x['batch']}/{x['dense']}: {x['error'][:60]}")
            else:
                top = x["where"][0][0] if x["where"] else "-"
                parts.append(f"{x['batch']}/{x['dense']}: {x['between_log_points_per_step']}/step between log points, "
                             f"{x['syncs']['log_point']} at log points, {x['syncs']['segment']} per segment, "
                             f"{x['syncs']['other']} other; top: {top}")
        return "; ".join(parts)
    if phase == "memory" and r.get("peak") == NA_CPU:
        return NA_CPU
    errors = [f"{x['batch']}/{x['dense']}: {x['error'][:80]}" for x in r.get("runs", []) if "error" in x]
    return "; ".join(errors) or "see the throughput table"


def table(b: Bench) -> str:
    lines = [f"bench_gpu on {b.device}", "", "| phase | ok | s | result |", "|---|---|---|---|"]
    for phase, r in b.results.items():
        lines.append(f"| {phase} | {'ok' if r['ok'] else 'FAILED'} | {r['s']} | {summary(phase, r)} |")
    rows = {}
    for phase, key in (("bare", "samples_per_s"), ("ours", "samples_per_s"), ("ours", "ratio")):
        for x in b.results.get(phase, {}).get("runs", []):
            rows.setdefault((x["batch"], x["dense"]), {})[f"{phase}_{key}"] = x.get(key)
    for phase, key in (("bare", "peak_gib"), ("memory", "ours_gib")):
        for x in b.results.get(phase, {}).get("runs", []):
            rows.setdefault((x["batch"], x["dense"]), {})[f"{phase}_{key}"] = x.get(key)
    if rows:
        def cell(v, fmt="{:,}"):
            return "-" if v is None else fmt.format(v)

        lines += ["", "| batch | dense | bare samples/s | ours samples/s | ours / bare | peak GiB bare | "
                  "peak GiB ours |", "|---|---|---|---|---|---|---|"]
        for (batch, dense), v in rows.items():
            lines.append(f"| {batch} | {dense} | {cell(v.get('bare_samples_per_s'))} | "
                         f"{cell(v.get('ours_samples_per_s'))} | {cell(v.get('ours_ratio'), '{:.2f}')} | "
                         f"{cell(v.get('bare_peak_gib'))} | {cell(v.get('memory_ours_gib'))} |")
    return "\n".join(lines)


# ---- main ----------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: cuda when a GPU is visible (ROCm too), else cpu (tiny sizes)")
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    p.add_argument("--steps", type=int, help="timed steps per config (after the warmup; default 100 on cuda, 4 on cpu)")
    p.add_argument("--batches", help="comma-separated batch sizes (default 4096,32768 on cuda, 256 on cpu)")
    p.add_argument("--out", help="also write the JSON lines to this file")
    p.add_argument("--work", help="folder for datasets, runs and logs (default: a temporary one, removed at the end)")
    p.add_argument("--criteo", type=Path, help=f"the raw Criteo sample ({CRITEO_FILE}) or a dataset preprocessed "
                   "from it (default: ../shared/data/criteo or $DLRMFLOW_SHARED_DATA, else the GPU kit's)")
    p.add_argument("--timeout", type=int, default=420, help="seconds each subprocess may take")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def default_criteo() -> Path | None:
    """The raw sample where the tests find it (tests/helpers/paths.py), else the GPU kit's preprocessed copy."""
    shared = Path(os.environ.get("DLRMFLOW_SHARED_DATA", REPO.parent / "shared" / "data"))
    candidates = [shared / "criteo" / CRITEO_FILE, REPO.parent / "data" / PRESET]
    return next((p for p in candidates if p.exists()), candidates[0])


def resolve_device(choice: str) -> str:
    if choice == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""   # before torch: this process and every subprocess see no GPU
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if choice == "cuda":
        raise SystemExit("--device cuda: no GPU visible to torch (torch.cuda.is_available() is False)")
    return "cpu"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        from training import distributed

        kind, spec = args.worker
        result = WORKERS[kind](json.loads(spec))
        print(WORKER_TAG + json.dumps(result), flush=True)
        distributed.destroy()
        distributed.exit_rank(0)   # no interpreter teardown (where a rank was seen to abort)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if unknown := set(phases) - set(PHASES):
        raise SystemExit(f"unknown phase(s) {', '.join(sorted(unknown))}; use {', '.join(PHASES)}")
    device = resolve_device(args.device)
    sizes = SIZES[device]
    if args.steps:
        sizes = replace(sizes, steps=-(-args.steps // sizes.log_every) * sizes.log_every)   # whole log windows
    if args.batches:
        sizes = replace(sizes, batches=tuple(int(x) for x in args.batches.split(",")))
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    bench = Bench(device, sizes, work, args.criteo or default_criteo(), args.timeout)
    out = open(args.out, "w") if args.out else None
    try:
        for phase in phases:
            start = time.perf_counter()
            try:
                result = {"phase": phase, "ok": True} | PHASE_FUNCTIONS[phase](bench)
            except Exception as e:
                result = {"phase": phase, "ok": False, "error": f"{type(e).__name__}: {e}"[-3000:]}
            result["s"] = round(time.perf_counter() - start, 1)
            bench.results[phase] = result
            line = json.dumps(result)
            print(line, flush=True)
            if out:
                out.write(line + "\n")
                out.flush()
    finally:
        if out:
            out.close()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(bench))
    return 0 if all(r["ok"] for r in bench.results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
