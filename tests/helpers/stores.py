"""A store as the nightly runs leave it, written by the code's own writers (no torchrun, no preprocessing): datasets
(``preprocessing.writer``), runs (``training.rundir.RunDir``: config, metrics, a checkpoint with its completion
file and pointer, an evaluation, the completion marker), nights of a named model (``models.registry.record``, with
a bundle) and a snapshot of what a store holds. Local folders and s3:// URIs alike."""

from __future__ import annotations

import json
import os
import posixpath
import tempfile
import time
from pathlib import Path

from common.atomic import write_uri
from common.store import DATASETS, RUNS, filesystem
from feature_spec import Chunk, Feature, FeatureSpec
from models import registry
from preprocessing import writer
from training.config import TrainConfig
from training.rundir import RunDir

DAY_S = 86400.0
SPEC = FeatureSpec(feature_spec={"click": Feature(dtype="bool"), "c0": Feature(dtype="int8", cardinality=3)},
                   source_spec={"train": [Chunk(type="split_binary", features=["click"], files=["train/label.bin"]),
                                          Chunk(type="split_binary", features=["c0"], files=["train/cat_c0.bin"])]},
                   channel_spec={"label": ["click"], "numerical": [], "categorical": ["c0"]})


def age(uri: str, days: float) -> None:
    """Make everything under the local ``uri`` last written ``days`` days ago (nothing for a remote one)."""
    fs, path = filesystem(uri)
    if "://" in uri or days == 0:
        return
    when = time.time() - days * DAY_S
    for found in [path, *fs.find(path, withdirs=True)]:
        os.utime(found, (when, when))


def dataset(store: str, name: str, days_old: float = 0, rows: int = 100) -> str:
    """A finished dataset ``datasets/<name>`` (split files, feature spec, ``_SUCCESS`` last)."""
    uri = posixpath.join(store, DATASETS, name)
    with tempfile.TemporaryDirectory() as part:
        (Path(part) / "train").mkdir()
        (Path(part) / "train" / "label.bin").write_bytes(bytes(rows))
        (Path(part) / "train" / "cat_c0.bin").write_bytes(bytes(rows))
        writer.write_splits(uri, [Path(part)], ["train"], ["label.bin", "cat_c0.bin"])
    writer.finish(uri, SPEC)
    age(uri, days_old)
    return uri


def run(store: str, name: str, dataset_uri: str, days_old: float = 0, complete: bool = True) -> str:
    """A trained run ``runs/<name>`` on ``dataset_uri``: config, metrics, checkpoint 4 (complete, ``latest``), a
    test evaluation and, when ``complete``, the completion marker."""
    r = RunDir(posixpath.join(store, RUNS, name))
    r.save_config(TrainConfig(dataset=dataset_uri))
    r.write_text(json.dumps({"step": 4, "loss": 0.5}) + "\n", RunDir.METRICS)
    r.write_bytes(bytes(4096), RunDir.CHECKPOINTS, "4", "__0_0.distcp")
    r.write_text("", RunDir.CHECKPOINTS, "4", RunDir.COMPLETE)
    r.write_text(json.dumps({"step": 4}), RunDir.CHECKPOINTS, "latest")
    r.write_eval("test", {"auc": 0.7, "logloss": 0.5}, {RunDir.ROC: b"png"})
    if complete:
        r.mark_complete({"step": 4, "world_size": 1})
    age(r.uri, days_old)
    return r.uri


def metrics(auc: float) -> dict:
    """A model's test-day metrics (1000 rows, a quarter positive, the same rows for every model)."""
    return {"auc": auc, "logloss": 0.45, "rows": 1000, "positives": 250, "base_logloss": 0.5623, "calibration": 1.0,
            "fingerprint": "f"}


def export_bundle(run_uri: str, step: int, out: str) -> str:
    """A stand-in for training.export.export_verified: a bundle folder with its manifest."""
    write_uri(posixpath.join(out, "manifest.json"), json.dumps({"source": {"run": run_uri, "step": step}}))
    return "sha-" + posixpath.basename(run_uri)


def night(store: str, model: str, day: str, run_uri: str, dataset_uri: str, auc: float) -> dict:
    """Record the night ``day`` of ``model`` whose challenger is ``run_uri`` (AUC ``auc``; the champion keeps the
    AUC it was promoted with): its history line (promoted or kept), champion.json and bundle as the pipeline's."""
    folder = registry.model_uri(store, model)
    candidate = {"run": run_uri, "step": 4, "dataset": dataset_uri, "vocab": posixpath.join(dataset_uri, "vocab"),
                 "date": day, "window": [day], "metrics": metrics(auc)}
    return registry.record(folder, registry.NightRecord(
        candidate, score_champion=lambda champion: dict(champion.metrics), export=export_bundle))


def snapshot(root: str) -> dict[str, int]:
    """Every file under ``root`` (relative path -> size)."""
    fs, path = filesystem(root)
    path = path.rstrip("/")
    return {f[len(path) + 1:]: int(info.get("size") or 0) for f, info in fs.find(path, detail=True).items()}
