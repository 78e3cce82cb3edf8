"""The run folder (local path or s3://...) through fsspec: atomic text files and metrics.jsonl.

``RunDir`` names every file of a run folder (see its constants); the store's layout around it is
``common.store``'s. The run's config.yaml records its warm start's run store-relative when it lies in the run's
store (``training.config.InitFrom.recorded``), and ``load_config`` reads the places it names as they are now: that
run, and a dataset of the run's store recorded before the store moved (``common.store.Store.resolve``).
"""

from __future__ import annotations

import json
import os
from contextlib import suppress
from typing import Any, Callable

from fsspec.implementations.local import LocalFileSystem

from common.errors import UserError
from common.folder import Folder
from common.lease import lease
from common.store import RUNS, Store, store_of
from training.config import TrainConfig


def run_name(run_uri: str) -> str:
    """The name of a run folder given by its URI."""
    return run_uri.rstrip("/").rsplit("/", 1)[-1]


class RunDir(Folder):
    """One run folder: the single place that names its files; every write is atomic."""

    CONFIG = "config.yaml"        # the resolved TrainConfig (the ranks read it)
    PLAN = "plan.txt"             # the sharding plan
    PLAN_HEADER = "Sharding plan:"  # its first line starts with it (also the line the train flow waits for)
    PLAN_VERDICTS = ("FITS:", "DOES NOT FIT:")   # its last line starts with one of them
    METRICS = "metrics.jsonl"     # training log
    PIPELINE = "pipeline.yaml"    # the resolved PipelineConfig, when the pipeline made the run
    DONE = "_SUCCESS"             # written last by the worker: training finished
    STOP = "stop.request"         # asks the training to stop at its next validation, as an early stop would
    CHECKPOINTS = "checkpoints"   # <step>/ DCP folders and the latest/best pointers (training.checkpoint)
    COMPLETE = "_COMPLETE"        # checkpoints/<step>/_COMPLETE: written last, the checkpoint's files and checksums
    POINTERS = ("latest", "best")  # checkpoints/<name>: the step of the newest and of the best checkpoint
    EVAL = "eval"                 # eval/<split>/: the plots, then metrics.json (training.report)
    EVAL_METRICS = "metrics.json"  # written last: an evaluation is complete when it exists
    ROC, CALIBRATION = "roc.png", "calibration.png"
    CALIBRATION_FIT = "calibration.json"  # the Platt fit of each validated checkpoint, by step (training.calibration)
    LIBRARY_LOG = "logs/library.log"   # the known library warnings of its rank jobs (training.launchers.output)
    LEASE = "run.lease"           # while a training or an evaluation writes the run (``RunDir.lease``)
    SCORING = "scoring"           # scoring/<token>/: a scoring's scratch while ranks elsewhere predict (training.score)
    LEASE_STALE_S = 300.0         # renewed by a heartbeat every fifth of it: only a crashed holder's lease expires

    # ---- the run's lease ------------------------------------------------------------------------

    def lease(self, what: str, wait_s: float = 0.0, owner: str | None = None,
              say: Callable[[str], None] | None = None):
        """Hold the run folder's lease for the block (``what``: training, evaluation): one writer of a run at a
        time. Another holder: wait up to ``wait_s`` (default: fail at once, naming it: LeaseHeld)."""
        return lease(self.join(self.LEASE), owner, f"run lease ({what})", f"run {self.uri}", wait_s,
                     self.LEASE_STALE_S, say=say, heartbeat_s=self.LEASE_STALE_S / 5)

    @classmethod
    def is_marker(cls, rel: str) -> bool:
        """Whether the file at ``rel`` (a path inside a run folder) makes something in the run count as complete:
        the training's ``DONE``, an evaluation's metrics.json, a checkpoint's completion file or pointer. A removal
        deletes these first, so a run cut short by a kill never looks finished (``models.gc``)."""
        parts = rel.strip("/").split("/")
        return (parts == [cls.DONE] or (len(parts) == 3 and parts[0] == cls.EVAL and parts[2] == cls.EVAL_METRICS)
                or (len(parts) == 2 and parts[0] == cls.CHECKPOINTS and parts[1] in cls.POINTERS)
                or (len(parts) == 3 and parts[0] == cls.CHECKPOINTS and parts[2] == cls.COMPLETE))

    # ---- the training config -------------------------------------------------------------
    def has_config(self) -> bool:
        return self.exists(self.CONFIG)

    def save_config(self, cfg: TrainConfig) -> None:
        """Write the resolved TrainConfig (the ranks read it from here), its warm start's run store-relative when it
        lies in the run's store (``InitFrom.recorded``)."""
        if cfg.init_from is not None:
            with suppress(UserError):   # no store can hold the run (another scheme): as given
                cfg = cfg.model_copy(update={"init_from": cfg.init_from.recorded(self.uri)})
        self.write_text(cfg.to_yaml(), self.CONFIG)

    def load_config(self) -> TrainConfig:
        """The run's TrainConfig, the places it names as URIs where they are now: its warm start's run
        (``InitFrom.resolved``), and its dataset when the run's store moved since it was written (an absolute URI
        of the old place whose ``datasets/<name>`` is in the run's store now; a relative one is its writer's)."""
        cfg = TrainConfig.from_yaml(self.join(self.CONFIG), **self.options)
        with suppress(UserError):   # no store can hold the run (another scheme, an s3:// path with '..'): as written
            if cfg.init_from is not None:
                cfg = cfg.model_copy(update={"init_from": cfg.init_from.resolved(self.uri)})
            if cfg.dataset and ("://" in cfg.dataset or cfg.dataset.startswith("/")):
                dataset = Store(store_of(self.uri, RUNS)).resolve(cfg.dataset)
                if dataset != cfg.dataset:
                    cfg = cfg.model_copy(update={"dataset": dataset})
        return cfg

    # ---- completion ---------------------------------------------------------------------
    def is_complete(self) -> bool:
        """True when training finished (the worker wrote the completion marker)."""
        return self.exists(self.DONE)

    def completion(self) -> dict[str, Any] | None:
        """What the worker recorded when it marked the run complete (latest step, world size), or None."""
        return json.loads(self.read_text(self.DONE)) if self.is_complete() else None

    def mark_complete(self, info: dict[str, Any]) -> None:
        self.write_text(json.dumps(info) + "\n", self.DONE)

    def mark_incomplete(self) -> None:
        """Remove the completion marker (training continues a finished run)."""
        if self.is_complete():
            self.fs.rm(self.path(self.DONE))

    # ---- the training log ----------------------------------------------------------------
    def metrics(self) -> list[dict[str, Any]]:
        """The records of metrics.jsonl (none before the first flush)."""
        if not self.exists(self.METRICS):
            return []
        return [json.loads(line) for line in self.read_text(self.METRICS).splitlines() if line.strip()]

    # ---- evaluations ----------------------------------------------------------------------
    def eval_dir(self, split: str) -> str:
        """URI of ``eval/<split>/``."""
        return self.join(self.EVAL, split)

    def eval_metrics(self, split: str) -> dict[str, Any] | None:
        """The complete evaluation of ``split`` (its metrics.json), or None."""
        if not self.exists(self.EVAL, split, self.EVAL_METRICS):
            return None
        return json.loads(self.read_text(self.EVAL, split, self.EVAL_METRICS))

    def eval_plot(self, split: str, name: str) -> bytes:
        """PNG bytes of plot ``name`` (ROC or CALIBRATION) of the evaluation of ``split``."""
        return self.fs.cat_file(self.path(self.EVAL, split, name))

    def write_eval(self, split: str, metrics: dict[str, Any], plots: dict[str, bytes]) -> None:
        """Write an evaluation: the plots (name -> PNG bytes), then metrics.json, which marks it complete."""
        for name, data in plots.items():
            self.write_bytes(data, self.EVAL, split, name)
        self.write_text(json.dumps(metrics, indent=2) + "\n", self.EVAL, split, self.EVAL_METRICS)

    # ---- scratch --------------------------------------------------------------------------
    def scoring_dir(self, token: str) -> str:
        """URI of ``scoring/<token>/``: one scoring's scratch folder (its rows and the ranks' parts), for ranks
        that do not see the scoring process's files (``training.score.predict_parts``)."""
        return self.join(self.SCORING, token)

    def remove_scoring(self, token: str) -> None:
        """Remove the scratch folder ``scoring/<token>/`` (its scoring is done with it), and ``scoring/`` when that
        leaves it empty (a folder of a local run; never another scoring's)."""
        if self.fs.exists(self.path(self.SCORING, token)):
            self.fs.rm(self.path(self.SCORING, token), recursive=True)
        with suppress(OSError):   # not empty: another scoring's scratch is there (object stores have no folders)
            if isinstance(self.fs, LocalFileSystem):
                os.rmdir(self.path(self.SCORING))


class MetricsLog:
    """``metrics.jsonl``: one JSON object per line, kept in memory and rewritten atomically on flush
    (object stores cannot append). On resume, lines after the resumed step are dropped."""

    NAME = RunDir.METRICS

    def __init__(self, run: RunDir, resume_step: int | None = None):
        self.run = run
        self.records: list[dict[str, Any]] = []
        if resume_step is not None:
            self.records = [r for r in run.metrics() if r.get("step", 0) <= resume_step]

    def log(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def flush(self) -> None:
        self.run.write_text("".join(json.dumps(r) + "\n" for r in self.records), self.NAME)
