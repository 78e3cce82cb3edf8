"""The search without Prefect (``tuning.search``, the tune's one owner), on a real study in a store and real run
folders whose validations the test writes as a training would: trial 0 is the base config as is, a hopeless trial
is asked to stop at a validation and told to the study as pruned, a slot count and the trial budget stop the asking,
and the end hands the best config to the model."""

from __future__ import annotations

import json
import logging

import yaml
from optuna.trial import TrialState

from feature_spec import load, save
from helpers.datasets import write_dataset
from training import LocalLauncherConfig, RunDir, TrainConfig
from tuning.config import TuneConfig
from tuning.search import Trial, prepare
from tuning.study import TuneDir

LOG = logging.getLogger("test_search")
BASE = {"data": {"batch_size": 256}, "epochs": 2}   # 2048 training rows: 8 steps an epoch, 16 planned


def _trained(trial: Trial, validations: list[tuple[int, float]], last_step: int) -> None:
    """Write the trial's run as its training would: its config, a validation (step, AUC) at a time, its end."""
    trial.run.save_config(trial.config)
    records = [{"step": step, "eval_split": "val", "auc": auc, "logloss": 1 - auc} for step, auc in validations]
    trial.run.write_text("".join(json.dumps(r) + "\n" for r in records), RunDir.METRICS)
    trial.run.mark_complete({"latest_step": last_step})


def test_the_search_prunes_a_hopeless_trial_and_hands_the_best_config_to_the_model(tmp_path):
    ds = write_dataset(tmp_path / "ds")
    spec = load(str(ds))
    spec.metadata["rows"] = {"train": 2048, "val": 512, "test": 512}
    save(spec, str(ds))
    base, space = tmp_path / "base.yaml", tmp_path / "space.yaml"
    base.write_text(yaml.safe_dump(TrainConfig.preset("default").with_overrides({}).model_dump(mode="json") | BASE))
    space.write_text(yaml.safe_dump({"optimizer.dense.lr": {"choices": [0.00005]}}))
    config = TuneConfig(dataset=str(ds), store=str(tmp_path / "store"), model="ctr", config=str(base),
                        space=str(space), trials=2, prune_startup_trials=1, prune_warmup_evaluations=0)
    search = prepare(config, LocalLauncherConfig(nproc=1))
    assert search.train_rows == 2048 and search.splits == ["train", "val", "test"]

    with search.open(LOG):
        assert search.more(running=0)
        first = search.ask(LOG)
        assert first.number == 0 and first.config == search.base   # trial 0: the base config as is
        assert not search.more(running=1)   # parallel 1: its one slot is taken
        with search.watch(first, LOG):
            _trained(first, [(2, 0.70), (4, 0.72), (6, 0.74), (8, 0.75)], 16)
        search.record(first, search.outcome(first, 1.0), LOG)

        hopeless = search.ask(LOG)
        assert hopeless.config.optimizer.dense.lr == 0.00005 and hopeless.run.uri != first.run.uri
        watch = search.watch(hopeless, LOG)
        _trained(hopeless, [(2, 0.55)], 4)   # validated once below trial 0's median: asked to stop, stopped at 4
        watch.check()
        assert hopeless.run.exists(RunDir.STOP)
        outcome = search.outcome(hopeless, 1.0)
        assert (outcome.pruned, outcome.steps, outcome.planned) == (True, 4, 16)
        search.record(hopeless, outcome, LOG)
        assert not search.more(running=0)   # the budget: 2 trials

        states = [t.state for t in search.study.get_trials()]
        assert states == [TrialState.COMPLETE, TrialState.PRUNED]
        evaluations = search.evaluations(LOG)
        assert [(e.name, e.trial, e.run, e.config.split) for e in evaluations] == [
            ("base", 0, first.run.uri, "test"), ("best", 0, first.run.uri, "test")]
        result = search.finish({e.name: {"auc": 0.7, "logloss": 0.5, "rows": 512} for e in evaluations})

    summary = json.loads(search.tune_dir.read_text(TuneDir.SUMMARY))
    assert summary == result.summary and summary["best"]["trial"] == 0 and summary["val_gain"] == 0.0
    assert summary["pruning"]["pruned_trials"] == 1 and summary["pruning"]["samples_saved_by_pruning"] == 12 * 256
    best = search.tune_dir.read_text(TuneDir.BEST)
    assert TrainConfig.from_yaml(search.tune_dir.join(TuneDir.BEST)) == first.config.model_copy(
        update={"dataset": None, "eval_split": config.base().eval_split})
    assert (tmp_path / "store" / "models" / "ctr" / "tuned.yaml").read_text() == best
