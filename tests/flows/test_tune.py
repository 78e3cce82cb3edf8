"""The tune flow on real Criteo rows, as `dlrmflow tune` against the session's Prefect API: killed (SIGKILL, its
whole process group) while a trial trains, then run again: the finished trial is kept and not trained again, the
interrupted one trains again with its values in its own run folder, hopeless trials are pruned (stopped at a
validation, their samples saved), the base and best trials are evaluated on the test split, and the best config is
a training YAML that the pipeline picks up from the model's folder."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess

import optuna
import pytest
import yaml
from optuna.storages.journal import JournalStorage
from optuna.trial import TrialState

from nightly.config import PipelineConfig
from common.errors import UserError
from feature_spec import load, save
from helpers.datasets import write_dataset
from helpers.paths import BIN
from helpers.processes import process_group, run_dlrmflow, until
from training.config import TrainConfig
from training.rundir import RunDir
from tuning.study import RESUMES, STUDY, StoreJournal, TuneDir
from tuning.trials import RUN

BASE = {"arch": {"embedding_dim": 8, "bottom_mlp": [16, 8], "top_mlp": [16, 1]},
        "data": {"batch_size": 256, "eval_batch_size": 1024}, "epochs": 2, "eval_every": 4, "log_every": 4,
        "checkpoint_every": None}
# every sampled trial is hopeless (learning rates 1000x too small) and trains its own run (its own seed). Three
# trials are the fewest that show everything: the base (trial 0), the one the kill interrupts (trial 1, trained again
# as trial 2 by the resumed tune) and one the resumed tune samples anew (trial 3), the last two at once (--parallel 2)
SPACE = {"optimizer.dense.lr": {"choices": [0.00005]}, "optimizer.embedding.lr": {"choices": [0.00005]},
         "seed": {"low": 1, "high": 100_000}}


def _trials(tune: str) -> list:
    return optuna.load_study(study_name=STUDY, storage=JournalStorage(StoreJournal(TuneDir(tune)))).get_trials()


def test_a_killed_tune_resumes_prunes_and_hands_its_best_config_to_the_pipeline(prefect_harness, criteo, tmp_path):
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.settings import PREFECT_API_URL

    store, base, space = tmp_path / "store", tmp_path / "base.yaml", tmp_path / "space.yaml"
    base.write_text(yaml.safe_dump(TrainConfig.preset("default").with_overrides({}).model_dump(mode="json") | BASE))
    space.write_text(yaml.safe_dump(SPACE))
    tune = str(store / "tunes" / "t")
    command = [str(BIN / "dlrmflow"), "tune", "--dataset", str(criteo["dataset"]), "--store", str(store),
               "--name", "t", "--model", "ctr", "--config", str(base), "--space", str(space), "--trials", "3",
               "--prune-startup-trials", "1", "--prune-warmup-evaluations", "0"]
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore::FutureWarning"}
    log = open(tmp_path / "tune.log", "w")

    def second_trial_training():
        trials = _trials(tune) if (store / "tunes" / "t" / TuneDir.JOURNAL).exists() else []
        running = [t for t in trials if t.state == TrialState.RUNNING and t.number >= 1 and RUN in t.user_attrs]
        return running and RunDir(running[0].user_attrs[RUN]).has_config() and running[0]

    with process_group(command + ["--parallel", "1"], stdout=log, stderr=subprocess.STDOUT, env=env) as proc:
        killed = until(second_trial_training, 240, "trial 1 training", proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    first = _trials(tune)[0]
    assert first.state == TrialState.COMPLETE and first.user_attrs["baseline"]
    done = RunDir(first.user_attrs[RUN])
    finished_at = os.stat(done.path(RunDir.DONE)).st_mtime_ns

    out = run_dlrmflow(*command[1:], "--parallel", "2", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       timeout=300)   # (killed above: the console script, plainly; here through the warm launcher)
    assert out.returncode == 0, out.stdout[-3000:]
    trials = _trials(tune)

    # the finished trial is kept, not trained again; the interrupted one trains again in its run folder
    assert trials[0].value == first.value and os.stat(done.path(RunDir.DONE)).st_mtime_ns == finished_at
    interrupted = trials[killed.number]
    assert interrupted.state == TrialState.FAIL and not interrupted.user_attrs.get("error")
    again = [t for t in trials if t.user_attrs.get(RESUMES) == killed.number]
    assert len(again) == 1 and again[0].params == killed.params and again[0].user_attrs[RUN] == killed.user_attrs[RUN]
    assert again[0].state in (TrialState.COMPLETE, TrialState.PRUNED)
    assert sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials) == 3
    runs = [t.user_attrs[RUN] for t in trials if t.number != killed.number]
    assert len(set(runs)) == len(runs)   # the resumed tune samples new values, not those of its first trials again
    # hopeless trials are stopped at a validation (a stop request in the run folder), before their planned steps
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned, [(t.number, t.state, t.intermediate_values) for t in trials]
    for t in pruned:
        assert RunDir(t.user_attrs[RUN]).exists(RunDir.STOP) and t.user_attrs["steps"] < t.user_attrs["planned_steps"]
        assert min(t.intermediate_values.values()) < max(first.intermediate_values.values())

    summary = json.loads((store / "tunes" / "t" / TuneDir.SUMMARY).read_text())
    assert summary["trials"] == 3 and summary["best"]["trial"] == 0 and summary["val_gain"] == 0.0
    assert summary["pruning"]["pruned_trials"] == len(pruned) and summary["pruning"]["samples_saved_by_pruning"] > 0
    assert summary["best_test"]["rows"] == 777 and summary["test_gain"] == 0.0   # best = base: evaluated once
    assert done.eval_metrics("test")["auc"] == summary["best_test"]["auc"]
    rows = list(csv.DictReader(open(store / "tunes" / "t" / TuneDir.TRIALS)))
    assert [r["state"] for r in rows][:2] == ["base complete", "interrupted"] and len(rows) == len(trials)

    # the best config: a training YAML, also the model's tuned config, which the pipeline picks up
    best = TrainConfig.from_yaml(str(store / "tunes" / "t" / TuneDir.BEST))
    assert best == done.load_config().model_copy(update={"dataset": None})
    pipeline, notes = PipelineConfig(store=str(store), model="ctr", tuned_config="model").with_preset(
        {"train.epochs": 3})
    assert pipeline.train.on("d") == best.model_copy(update={"epochs": 3, "dataset": "d"})
    assert any(str(store / "models" / "ctr" / "tuned.yaml") in n for n in notes)

    with get_client(sync_client=True) as client:
        keys = {a.key for a in client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[
            "tune-trials", "tune-result", "tune-best-so-far", "tune-importances"])))}
        limit = client.read_global_concurrency_limit_by_name("tune-t")   # the tune's own, made anew: 2 slots
    assert keys == {"tune-trials", "tune-result", "tune-best-so-far", "tune-importances"}
    assert (limit.limit, limit.active_slots) == (2, 0)


def test_without_val_every_trial_validates_on_one_holdout_of_train_never_on_the_tested_split(tmp_path):
    """A dataset of train and test only: the trials validate on the last 10% of the train rows (the same rows for
    all: resolved once, in the base), train on the rest, and are compared there; validating on the split the tune
    reports its best trial on is refused before any trial."""
    from training.launchers import LocalLauncherConfig
    from tuning.config import TuneConfig
    from tuning.search import prepare

    ds = write_dataset(tmp_path / "ds", {"train": 2000, "test": 500})
    spec = load(str(ds))
    spec.metadata["rows"] = {"train": 2000, "test": 500}
    save(spec, str(ds))
    config = TuneConfig(dataset=str(ds), store=str(tmp_path / "store"))
    search = prepare(config, LocalLauncherConfig(nproc=1))
    assert (search.base.eval_split, search.base.data.holdout_rows, search.train_rows) == ("holdout", 200, 1800)
    with pytest.raises(UserError, match="eval_split 'test' would choose the checkpoint"):
        prepare(config.model_copy(update={"config": _yaml(tmp_path, {"eval_split": "test"})}), LocalLauncherConfig())
    with pytest.raises(UserError, match="eval_split 'holdout' is the tune's evaluate_split"):
        prepare(config.model_copy(update={"evaluate_split": "holdout"}), LocalLauncherConfig())


def _yaml(tmp_path, overrides: dict) -> str:
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(TrainConfig.preset("default").with_overrides(overrides).model_dump(mode="json")))
    return str(path)


def test_a_night_whose_tuned_architecture_differs_from_the_champions_trains_from_scratch(tmp_path):
    """A weekly re-tune may change the architecture: the nights after it cannot load the champion's weights into
    the new model, so they train from scratch (a warm start would fail every night) until a new champion."""
    import datetime as dt
    from common.atomic import write_uri
    from common.store import Store
    from nightly.night import set_up
    from models.registry import CHAMPION_FILE, Champion, model_uri

    store = Store(str(tmp_path / "store"))
    champion_run = RunDir(store.run_uri("ctr-2026-11-04-x"))
    champion_run.save_config(TrainConfig.preset("default"))
    write_uri(f"{model_uri(store.uri, 'ctr')}/{CHAMPION_FILE}", Champion(
        name="ctr", run=champion_run.uri, step=8, dataset="d", vocab="d/vocab", date="2026-11-04",
        metrics={"auc": 0.7, "logloss": 0.5}, promoted_at="2026-11-05T02:00:00+00:00").model_dump_json())
    night = dt.date(2026, 11, 5)
    same = PipelineConfig(store=store.uri, model="ctr", train=TrainConfig.preset("default").model_dump(),
                          window={"train_days": 3})
    assert set_up(same, store, night).warm_started().init_from.run == champion_run.uri
    tuned = TrainConfig.preset("default").with_overrides({"arch.embedding_dim": 32, "arch.bottom_mlp": [64, 32]})
    other = PipelineConfig(store=store.uri, model="ctr", train=tuned.model_dump(), window={"train_days": 3})
    assert set_up(other, store, night).warm_started().init_from is None
