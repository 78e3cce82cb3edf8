"""The Trainer: builds the sharded DLRM from a TrainConfig and trains it (a Stateful object for DCP).

``Trainer(cfg, env, run)`` builds data, model, sharding plan, DistributedModelParallel and the
optimizers; ``train()`` runs TrainPipelineSparseDist between validation/checkpoint boundaries;
``predict(split)`` and ``validate(split)`` run over a split on all ranks. ``from_run`` rebuilds the
model of a finished run and loads one of its checkpoints with its calibration (what evaluation and scoring build
on: ``training.calibration``; each validation of a training fits the calibration of its step).
"""

from __future__ import annotations

import math
import time
from functools import cached_property
from itertools import islice
from typing import Any, Iterator

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.stateful import Stateful
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
from tqdm import tqdm

from common.errors import UserError
from common.progress import progress
from training import calibration, metrics
from training.checkpoint import Checkpointer
from training.config import HOLDOUT, DenseOptimizerConfig, EmbeddingOptimizerConfig, OptimizerConfig, TrainConfig
from training.data import SplitBinaryDataset
from training.distributed import DistEnv, all_gather_cat, all_reduce_sum, init
from training.dlrm import IdHasher, build_model, embedding_tables, init_embeddings, table_name
from training.rundir import MetricsLog, RunDir
from training.sharding import format_plan, plan_tables, sharders
from training.topology import build_topology, profile_to_load_on, resolve_profile

EMBEDDING_OPTIMIZERS = {"rowwise_adagrad": RowWiseAdagrad, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}
EBC_PATH = "model.sparse_arch.embedding_bag_collection"  # the tables' module inside DLRMTask
DENSE_OPTIMIZERS = {"adagrad": torch.optim.Adagrad, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def optimizer_kwargs(cfg: EmbeddingOptimizerConfig | DenseOptimizerConfig) -> dict[str, float]:
    """The keyword arguments of an optimizer's constructor (the fused FBGEMM one takes the same names). The
    embeddings' weight decay is a loss penalty (``DLRMTask``), not the optimizer's."""
    kwargs = {"lr": cfg.lr} if cfg.type == "sgd" else {"lr": cfg.lr, "eps": cfg.eps}
    if isinstance(cfg, DenseOptimizerConfig) and cfg.weight_decay:   # only when set: older runs keep their optimizer
        kwargs["weight_decay"] = cfg.weight_decay
    return kwargs


def lr_factor(cfg: OptimizerConfig, step: int) -> float:
    """Multiplier of the peak learning rates at ``step``: linear warmup, then polynomial (power 2) decay to 0."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.decay_start is not None and cfg.decay_steps > 0 and step >= cfg.decay_start:
        return (1 - min(step - cfg.decay_start, cfg.decay_steps) / cfg.decay_steps) ** 2
    return 1.0


def per_rank(global_batch: int, world_size: int, what: str = "data.batch_size") -> int:
    """Rows per rank of a global batch size (which must divide evenly)."""
    if global_batch % world_size:
        raise UserError(f"{what}={global_batch} is a GLOBAL batch size and must be divisible by the number of "
                        f"ranks ({world_size}). Fix: use a multiple of {world_size}.")
    return global_batch // world_size


class Trainer(Stateful):
    """A sharded DLRM, its optimizers, its data and its position in training."""

    def __init__(self, cfg: TrainConfig, env: DistEnv, run: RunDir | None = None):
        if not cfg.dataset:
            raise UserError("no dataset given. Fix: pass --dataset DATASET_URI (a folder written by `dlrmflow preprocess`).")
        self.cfg, self.env, self.run = cfg, env, run
        self._datasets: dict[str, SplitBinaryDataset] = {}
        self.train_data = self.dataset(cfg.data.train_split)
        self.spec = self.train_data.spec
        if self.eval_split == HOLDOUT:   # the split's last rows validate, the rows before them train
            whole = self.train_data
            cut = whole.num_rows - min(cfg.data.holdout_size(whole.num_rows), whole.num_rows)
            self.train_data, self._datasets[HOLDOUT] = whole.rows(0, cut), whole.rows(cut, whole.num_rows)
        self.batch_size = per_rank(cfg.data.batch_size, env.world_size)
        self.eval_batch_size = per_rank(cfg.data.eval_batch_size, env.world_size, "data.eval_batch_size")
        self.tables = embedding_tables(cfg.arch, self.spec, cfg.precision)
        self.hasher = IdHasher(self.tables, self.spec)
        self.dmp, self.plan_text = self._build_model()
        self.optimizer = self._build_optimizer()
        self.step = self.epoch = self.step_in_epoch = 0
        self.best: dict[str, Any] | None = None
        self.bad_evals = 0
        self.stopped_early = False
        self.last_finite: tuple[int, float] | None = None  # (step, loss) of the last finite per-step loss read
        self.calibration: calibration.Calibration | None = None   # applied by predict_stream (from_run sets it)

    # ---- building ------------------------------------------------------------------------
    def dataset(self, split: str) -> SplitBinaryDataset:
        """A split of the dataset (opened once); ``HOLDOUT``: the last rows of the training split, which it then
        does not train on (eval_split 'holdout')."""
        if split not in self._datasets:
            data = self.cfg.data
            self._datasets[split] = SplitBinaryDataset(
                self.cfg.dataset, split, cache_dir=data.cache_dir,
                cache_max_bytes=None if data.cache_max_gib is None else int(data.cache_max_gib * 2**30))
        return self._datasets[split]

    @cached_property
    def eval_split(self) -> str | None:
        """The split validated on during training (``eval_split``, or ``HOLDOUT`` for a missing default)."""
        return self.cfg.check_splits(self.spec.splits)

    def pooling_factors(self) -> dict[str, float]:
        """Table name -> mean ids per row of the train split, for each multi-valued feature (the planner's input)."""
        return {table_name(f): v for f, v in self.train_data.pooling_factors().items()}

    def _build_model(self) -> tuple[DistributedModelParallel, str]:
        cfg, env = self.cfg, self.env
        torch.manual_seed(cfg.seed)
        task = build_model(cfg.arch, self.spec, device=env.device, precision=cfg.precision,
                           embedding_l2=cfg.optimizer.embedding.weight_decay)
        emb = cfg.optimizer.embedding
        kwargs = optimizer_kwargs(emb)
        apply_optimizer_in_backward(EMBEDDING_OPTIMIZERS[emb.type], task.model.sparse_arch.parameters(), kwargs)
        factors = self.pooling_factors()
        profile, why = resolve_profile(cfg.sharding.profile, env.device)  # every rank: the same error everywhere
        plan = plan_tables(self.tables, cfg.sharding, env.world_size, env.local_world_size, self.batch_size,
                           pg=dist.GroupMember.WORLD, optimizer=emb.type, module_path=EBC_PATH, profile=profile,
                           pooling_factors=factors)
        topology = build_topology(profile, env.world_size, env.local_world_size)
        text = format_plan(plan, self.tables, topology, emb.type, factors, why)
        dmp = DistributedModelParallel(task, device=env.device, plan=plan, sharders=sharders())
        init_embeddings(dmp.state_dict(), self.tables, cfg.seed)
        return dmp, text

    def _build_optimizer(self) -> CombinedOptimizer:
        dense = self.cfg.optimizer.dense
        cls = DENSE_OPTIMIZERS[dense.type]
        kwargs = optimizer_kwargs(dense)
        params = dict(in_backward_optimizer_filter(self.dmp.named_parameters()))
        self.dense_optimizer = KeyedOptimizerWrapper(params, lambda p: cls(p, **kwargs))
        return CombinedOptimizer([self.dmp.fused_optimizer, self.dense_optimizer])

    # ---- state (DCP) ------------------------------------------------------------------------
    def state_dict(self, model_only: bool = False) -> dict[str, Any]:
        """Sharded model, optimizer state, data position and RNG state."""
        if model_only:
            return {"model": self.dmp.state_dict()}
        progress = {"step": self.step, "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
                    "bad_evals": self.bad_evals, "stopped_early": int(self.stopped_early),
                    "best_step": -1 if self.best is None else self.best["step"],
                    "best_value": math.nan if self.best is None else self.best["value"]}
        return {"model": self.dmp.state_dict(), "optim": self.optimizer.state_dict(), "progress": progress,
                "rng": torch.get_rng_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dmp.load_state_dict(state["model"])
        if "optim" not in state:
            return
        self.optimizer.load_state_dict(state["optim"])
        p = state["progress"]
        self.step, self.epoch, self.step_in_epoch = int(p["step"]), int(p["epoch"]), int(p["step_in_epoch"])
        self.bad_evals, self.stopped_early = int(p["bad_evals"]), bool(p["stopped_early"])
        self.best = None if p["best_step"] < 0 else {"step": int(p["best_step"]), "value": float(p["best_value"])}
        torch.set_rng_state(state["rng"])

    def load(self, checkpointer: Checkpointer, which: str | int = "latest", model_only: bool = False) -> int:
        """Load checkpoint ``best|latest|STEP`` (resharded to this run's plan); returns its step."""
        if not model_only:
            self.optimizer.init_state()  # materialise lazy optimizer state so DCP can load into it
        state = self.state_dict(model_only)
        step = checkpointer.load(which, state)
        self.load_state_dict(state)
        return step

    @classmethod
    def from_run(cls, run: RunDir | str, which: str | int = "best", env: DistEnv | None = None,
                 overrides: dict[str, Any] | None = None) -> "Trainer":
        """The model of a run folder with checkpoint ``best|latest|STEP`` loaded (model weights only).

        Call on every rank (it joins the process group if needed). ``overrides`` change the run's
        config, e.g. ``{"dataset": ..., "sharding.constraints": ...}`` (DCP reshards on load). The plan is for
        this rank's device (``topology.profile_to_load_on``), whatever the device the run trained on."""
        run = RunDir(run)
        cfg = run.load_config().with_overrides(overrides or {})
        env = env or init(cfg.pg_timeout_s)
        cfg = cfg.with_overrides({"sharding.profile": profile_to_load_on(cfg.sharding.profile, env.device)})
        trainer = cls(cfg, env)
        step = trainer.load(Checkpointer(run), which, model_only=True)
        trainer.calibration = calibration.of_step(run, step)
        return trainer

    # ---- prediction and validation ---------------------------------------------------------
    @torch.no_grad()
    def predict_stream(self, split: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's (click probabilities, labels) per batch of ``split`` (``eval_batch_size`` rows each, of
        the rows ``training.batches.rank_slice`` gives this rank; padded rows at the end, label -1); not gathered.
        The logits go through ``self.calibration`` (``training.calibration.apply``; None: raw) before the sigmoid.
        All ranks must consume it to the end (the sharded model communicates)."""
        data = self.dataset(split)
        self.dmp.eval()
        try:
            for batch in self._batches(data, self.eval_batch_size):
                _, (_, logits, y) = self.dmp(batch.to(self.env.device, non_blocking=self._pinned))
                yield torch.sigmoid(calibration.apply(logits, self.calibration)), y
        finally:
            self.dmp.train()

    def predict(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Click probabilities and labels of every row of ``split``, gathered on every rank
        (all ranks must call it; padded rows removed; row order is not the file's order)."""
        probs, labels = [], []
        for p, y in self.predict_stream(split):
            probs.append(p)
            labels.append(y)
        p = all_gather_cat(torch.cat(probs)).cpu().numpy()
        y = all_gather_cat(torch.cat(labels)).cpu().numpy()
        keep = y >= 0
        return p[keep], y[keep]

    def validate(self, split: str) -> dict[str, float]:
        """ROC AUC, log loss and row count on ``split`` (all ranks)."""
        return _validation(*self.predict(split))

    # ---- training ----------------------------------------------------------------------------
    def steps_per_epoch(self) -> int:
        return self.train_data.num_batches(self.batch_size, self.env.world_size, drop_last=True)

    def total_steps(self) -> int:
        """Global steps of the whole run (before any early stop)."""
        total = self.cfg.epochs * self.steps_per_epoch()
        return min(total, self.cfg.max_steps) if self.cfg.max_steps else total

    def train(self) -> None:
        """Train until ``epochs``/``max_steps`` or early stopping; checkpoint and validate on the way."""
        if self.steps_per_epoch() == 0:
            held = (f" left to train on after the holdout of {self._datasets[HOLDOUT].num_rows}"
                    if self.eval_split == HOLDOUT else "")
            raise UserError(f"split '{self.cfg.data.train_split}' has {self.train_data.num_rows} rows{held}, fewer than "
                            f"one global batch ({self.cfg.data.batch_size}). Fix: use a smaller data.batch_size.")
        if self.step == 0 and self.cfg.init_from is not None:  # a fresh run; a resumed one has its own weights
            from training.warmstart import warm_start

            warm_start(self, self.cfg.init_from)
        total = self.total_steps()
        log = MetricsLog(self.run, resume_step=self.step) if self._writes() else None
        ckpt = Checkpointer(self.run, self.cfg.keep_checkpoints) if self.run else None
        # a bar on a terminal, else a line per tenth of the run or per 30 s ($DLRMFLOW_PROGRESS: what the launcher saw)
        bar = progress(total, "train", "step", initial=self.step, disable=not self.env.is_main)
        self._window = (time.perf_counter(), self.step, [])  # start, start step, this rank's losses (device)
        try:
            while self.step < total and not self.stopped_early:
                batches, epoch = self._epoch_batches(), self.epoch
                try:
                    while self.epoch == epoch and self.step < total and not self.stopped_early:
                        self._segment(batches, self._segment_length(total), bar, log)
                        self._after_segment(log, ckpt)
                finally:
                    getattr(batches, "close", lambda: None)()
            if ckpt:
                self._check_finite()
                ckpt.save(self.step, self.state_dict())
        finally:
            bar.close()
            if log:
                log.flush()

    def _writes(self) -> bool:
        return self.run is not None and self.env.is_main

    @property
    def _pinned(self) -> bool:
        """Host batches are pinned (and copied with non_blocking) when the device is a GPU."""
        return self.env.device.type == "cuda"

    def _batches(self, data: SplitBinaryDataset, batch_size: int, **kwargs) -> Iterator:
        """This rank's batches of ``data``, ids hashed and pinned in the loader's thread."""
        return data.batches(batch_size, rank=self.env.rank, world_size=self.env.world_size, transform=self.hasher,
                            pin_memory=self._pinned, **kwargs)

    def _epoch_batches(self) -> Iterator:
        d = self.cfg.data
        return self._batches(self.train_data, self.batch_size, epoch=self.epoch, shuffle=d.shuffle,
                             seed=self.cfg.seed, drop_last=True, start_step=self.step_in_epoch)

    def _segment_length(self, total: int) -> int:
        """Steps until the next boundary: end of epoch, end of run, validation or checkpoint."""
        n = min(self.steps_per_epoch() - self.step_in_epoch, total - self.step)
        for every in (self.cfg.eval_every, self.cfg.checkpoint_every):
            if every:
                n = min(n, every - self.step % every)
        return n

    def _segment(self, batches: Iterator, n: int, bar: tqdm, log: MetricsLog | None) -> None:
        """``n`` steps through a fresh TrainPipelineSparseDist, drained and detached at the end
        (so that the DMP can be called directly for validation).

        A step never waits on the host: its loss stays on the device until the next log point."""
        pipeline = TrainPipelineSparseDist(self.dmp, self.optimizer, self.env.device, execute_all_batches=True)
        feed = islice(batches, n)
        try:
            for _ in range(n):
                self._set_lr()
                loss, _, _ = pipeline.progress(feed)
                self.step += 1
                self.step_in_epoch += 1
                self._window[2].append(loss)
                bar.update(1)
                if self.step % self.cfg.log_every == 0:
                    self._log_window(bar, log)
        finally:
            pipeline.detach()

    def _set_lr(self) -> None:
        f = lr_factor(self.cfg.optimizer, self.step)
        for group in self.dmp.fused_optimizer.param_groups:
            group["lr"] = self.cfg.optimizer.embedding.lr * f
        for group in self.dense_optimizer.param_groups:
            group["lr"] = self.cfg.optimizer.dense.lr * f

    def _log_window(self, bar: tqdm, log: MetricsLog | None) -> None:
        """A log point (all ranks): the window's losses are reduced and read, the one host sync of the window;
        its rate is timed after that read, so it counts the device's work, not just the launches."""
        start, start_step, losses = self._window
        # one all-reduce of the stacked per-step losses: the same float32 sums as one all-reduce per step,
        # divided and averaged on the host in float64 as before (logged values stay bit-identical)
        steps = self._window_losses()
        loss = float(np.mean(steps))
        rate = (self.step - start_step) * self.cfg.data.batch_size / max(time.perf_counter() - start, 1e-9)
        bar.set_postfix({"rows/s": f"{rate:,.0f}", "loss": f"{loss:.4f}"}, refresh=False)
        f = lr_factor(self.cfg.optimizer, self.step - 1)
        if log:
            log.log({"step": self.step, "epoch": self.epoch, "loss": loss, "samples_per_s": rate,
                     "lr_embedding": self.cfg.optimizer.embedding.lr * f, "lr_dense": self.cfg.optimizer.dense.lr * f})
        self._window = (time.perf_counter(), self.step, [])

    def _window_losses(self) -> list[float]:
        """The per-step losses of the window so far, averaged over the ranks (one all-reduce, one host sync);
        a UserError at the first step whose loss is not finite (on every rank: the values are all-reduced)."""
        start_step, losses = self._window[1], self._window[2]
        if not losses:
            return []
        steps = [v / self.env.world_size for v in all_reduce_sum(torch.stack(losses)).tolist()]
        for i, v in enumerate(steps):
            if not math.isfinite(v):
                raise self._diverged(start_step + i + 1, f"the loss is {v}")
            self.last_finite = (start_step + i + 1, v)
        return steps

    def _diverged(self, step: int, what: str) -> UserError:
        last = (f"last finite loss {self.last_finite[1]:.4f} at step {self.last_finite[0]}" if self.last_finite
                else "no finite loss read before it")
        kept = ""
        if self.run is not None:
            latest = Checkpointer(self.run).step_of("latest")
            kept = (f" Checkpoint 'latest' stays step {latest}, the last one saved (its weights are finite)."
                    if latest is not None else " No checkpoint was saved.")
        return UserError(
            f"training diverged at step {step}: {what} ({last}); the run stops here.{kept} Likely cause: "
            "numerical features above float16's 65504 become inf (preprocess with a log1p/log3p transform or "
            "--numerical-dtype float32), or a learning rate too high (lower optimizer.dense.lr / "
            "optimizer.embedding.lr, or add optimizer.warmup_steps).")

    def _check_finite(self) -> None:
        """Before a validation or a checkpoint: the window's losses so far and the model's weights are finite,
        else UserError (so a checkpoint never holds non-finite weights, and ``latest`` stays the last good one).
        Two all-reduces and one pass over the weights, once per validation or checkpoint."""
        self._window_losses()
        names, flags = [], []  # one flag per key, the same keys on every rank (a rank may hold no shard of one)
        for name, t in self.dmp.state_dict().items():
            flag = torch.zeros((), dtype=torch.int64, device=self.env.device)
            for local in [s.tensor for s in t.local_shards()] if hasattr(t, "local_shards") else [t]:
                if local.is_floating_point() and local.numel():
                    flag = flag + (~torch.isfinite(local)).any().to(device=flag.device, dtype=torch.int64)
            names.append(name)
            flags.append(flag)
        counts = all_reduce_sum(torch.stack(flags)).tolist() if flags else []
        if any(counts):
            bad = sorted({n for n, c in zip(names, counts) if c})
            raise self._diverged(self.step, f"non-finite weights in {', '.join(bad[:4])}"
                                 + (f" and {len(bad) - 4} more" if len(bad) > 4 else ""))

    def _after_segment(self, log: MetricsLog | None, ckpt: Checkpointer | None) -> None:
        epoch_end = self.step_in_epoch == self.steps_per_epoch()
        if epoch_end:
            self.epoch, self.step_in_epoch = self.epoch + 1, 0
        every = self.cfg.eval_every
        best = None
        validate_due = self.eval_split and ((self.step % every == 0) if every else epoch_end)
        checkpoint_due = self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0
        if validate_due or (ckpt and checkpoint_due):
            self._check_finite()
        if validate_due:
            best = self._validate(log)
            if not self.stopped_early and self._stop_requested():
                self.stopped_early = True
                if self.env.is_main:
                    tqdm.write(f"stopped at step {self.step}: the run folder holds a stop request ({RunDir.STOP})")
        if log:   # before the checkpoint: a run killed once it is complete resumes with these lines
            log.flush()
        if ckpt and (best is not None or checkpoint_due):
            ckpt.save(self.step, self.state_dict(), best=best)

    def _validate(self, log: MetricsLog | None) -> dict[str, Any] | None:
        """Validate on the eval split; update best / patience. Returns the metrics when they are a new best."""
        split = self.eval_split
        probs, labels = self.predict(split)
        result = _validation(probs, labels)
        self._fit_calibration(probs, labels, split)
        if log:  # flushed before the line below: a reader of that line finds the evaluation in metrics.jsonl
            log.log({"step": self.step, "epoch": self.epoch, "eval_split": split, **result})
            log.flush()
        if self.env.is_main:
            tqdm.write(f"step {self.step}: {split} auc {result['auc']:.4f} logloss {result['logloss']:.4f}")
        value = result[self.cfg.best_metric]
        higher = self.cfg.best_metric == "auc"
        if self.best is None or (value > self.best["value"] if higher else value < self.best["value"]):
            self.best, self.bad_evals = {"step": self.step, "value": value}, 0
            return {"metric": self.cfg.best_metric, **result}
        self.bad_evals += 1
        if self.cfg.early_stopping_patience and self.bad_evals >= self.cfg.early_stopping_patience:
            self.stopped_early = True
            if self.env.is_main:
                tqdm.write(f"early stop at step {self.step}: no better {self.cfg.best_metric} for {self.bad_evals} evaluations "
                           f"(best at step {self.best['step']})")
        return None

    def _fit_calibration(self, probs: np.ndarray, labels: np.ndarray, split: str) -> None:
        """Rank 0 fits the calibration of this step on its validation predictions (raw: ``self.calibration`` is
        None while training) and records it in the run folder, before the step's checkpoint is saved
        (``training.calibration``); nothing with ``calibrate: false``."""
        if not (self.cfg.calibrate and self._writes()):
            return
        fit = calibration.fit(probs, labels, step=self.step, split=split)
        if fit is None or not calibration.is_finite(fit):
            tqdm.write(f"step {self.step}: no calibration fitted ('{split}' holds one class, or the fit diverged)")
            return
        calibration.record(self.run, fit)
        tqdm.write(f"step {self.step}: {calibration.describe(fit)}")

    def _stop_requested(self) -> bool:
        """Whether the run folder holds a stop request (``RunDir.STOP``: a tune prunes a trial): rank 0 looks, every
        rank learns it (one all-reduce), so all stop at the same step."""
        found = int(self._writes() and self.run.exists(RunDir.STOP))
        return bool(all_reduce_sum(torch.tensor(found, dtype=torch.int64, device=self.env.device)).item())


def _validation(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """A validation's metrics of gathered predictions: ROC AUC, log loss and row count."""
    return {"auc": metrics.roc_auc(probs, labels), "logloss": metrics.log_loss(probs, labels), "rows": int(len(labels))}
