"""A tune's search without Prefect, its one owner (as ``nightly.night`` is the night's): ``prepare`` checks what a
tune needs before its first trial (the store, the dataset and its splits, the base config, the space against both
and the ranks) and returns the ``Search``; ``Search.open`` holds the tune's lease and opens its study (Optuna TPE,
resumed after a kill); ``Search.more`` says whether to start another trial, ``Search.ask`` gives the next one (its
training config and run), ``Search.watch`` reports its validations to Optuna while it trains and asks its run to stop
once the pruner says so, ``Search.outcome`` is what its run says at its end and ``Search.record`` tells the study;
``Search.evaluations`` are the base and best trials to evaluate on the tested split, and ``Search.finish`` writes
the best config (handed to the model as its tuned config), the summary, the table and the pictures. The tune flow
(``flows.tune``) calls these and adds what only Prefect has: the trials' concurrency slots, the train and evaluate
flow runs, logs and artifacts."""

from __future__ import annotations

import csv
import io
import json
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import optuna

import feature_spec as fspec
from common.errors import UserError
from common.store import Store
from models import registry
from training import EvaluateConfig, HOLDOUT, LauncherConfig, RunDir, TrainConfig, build_launcher, hashed_run
from tuning import plots, trials as tt
from tuning.config import SearchSpace, TuneConfig
from tuning.study import RESUMES, TuneDir, counted, is_baseline, open_study

POLL_S = 2.0   # how often a trial's validations are read for pruning
Log = logging.Logger | logging.LoggerAdapter


@dataclass(frozen=True)
class Trial:
    """A trial the study gave: Optuna's trial, the training config it trains and its run folder."""

    optuna: optuna.Trial
    config: TrainConfig
    run: RunDir

    @property
    def number(self) -> int:
        return self.optuna.number


@dataclass(frozen=True)
class Outcome:
    """What a trial's run says at its end: the error that failed it, or its value, whether it was pruned, the steps
    it trained and would have trained; and its wall time."""

    duration: float
    error: str | None = None
    value: float | None = None
    pruned: bool = False
    steps: int = 0
    planned: int = 0


@dataclass(frozen=True)
class Evaluation:
    """A trial evaluated after the search (``name``: base or best): its number, run and evaluation."""

    name: str
    trial: int
    run: str
    config: EvaluateConfig


@dataclass(frozen=True)
class Result:
    """A finished search: the summary (also ``summary.json``), the trials table and the two pictures."""

    summary: dict
    table: list[dict]
    best_so_far_png: bytes
    importances_png: bytes


def tune_dataset(config: TuneConfig, store: Store) -> str:
    """The dataset the trials train on: ``config.dataset``, else the dataset of the model's champion."""
    if config.dataset:
        return config.dataset
    champion = registry.champion_to_load(registry.model_uri(store.uri, config.model))
    if champion is None:
        raise UserError(f"model {config.model} has no champion yet, so there is no dataset to tune on. Fix: pass "
                        "--dataset, or tune once a night has promoted a model.")
    return RunDir(champion.run).load_config().dataset


def prepare(config: TuneConfig, launcher: LauncherConfig) -> "Search":
    """Everything a tune checks before its first trial (the command line calls it before Prefect starts): the store,
    the dataset and its splits, the base config, the space against both and the ranks; one line for what fails."""
    store = Store(config.store)
    if config.model:
        registry.model_uri(store.uri, config.model)   # a bad name fails now, not when the result is written
    dataset = tune_dataset(config, store)
    base = config.base().model_copy(update={"dataset": dataset})
    space = SearchSpace.from_yaml(config.space)
    spec = fspec.load(dataset)
    base.check_splits(spec.splits)
    train_rows = (spec.metadata.get("rows") or {}).get(base.data.train_split) or 0
    if not train_rows:
        raise UserError(f"{dataset}: its feature spec records no row count of split '{base.data.train_split}'. "
                        "Fix: preprocess it again with `dlrmflow preprocess`.")
    base = base.resolved(spec)   # a dataset without 'val': every trial validates on the same holdout of train
    if base.eval_split is not None and base.eval_split == config.evaluate_split:
        raise UserError(f"eval_split '{base.eval_split}' is the tune's evaluate_split: the trials would be judged on "
                        "the split that reports the best one. Fix: validate on another split (the default 'val'; a "
                        "dataset without one validates on the last data.holdout_fraction of its train rows), or set "
                        "evaluate_split to another split.")
    if base.eval_split == HOLDOUT:
        train_rows -= base.data.holdout_rows   # the rows a trial trains on
    space.check(base, build_launcher(launcher).world_size, train_rows)
    return Search(config, store, dataset, base, space, list(spec.splits), train_rows)


class Search:
    """One tune's search: its settings, store, dataset, base config, space and the rows a trial trains on; its
    folder, and once open its study. Not a dataclass: Prefect walks a dataclass task argument's fields."""

    def __init__(self, config: TuneConfig, store: Store, dataset: str, base: TrainConfig, space: SearchSpace,
                 splits: list[str], train_rows: int):
        self.config, self.store, self.dataset, self.base, self.space = config, store, dataset, base, space
        self.splits, self.train_rows = splits, train_rows
        self.tune_dir = TuneDir(store.tune_uri(config.study_name(dataset, base, space, store)))
        self.keys = list(space.dimensions)
        self.study: optuna.Study | None = None
        self.started = 0.0

    @contextmanager
    def open(self, log: Log) -> Iterator["Search"]:
        """Hold the tune's lease and open its study for the block (a killed tune's finished trials kept, its
        interrupted ones queued again); the timeout counts from here."""
        with self.tune_dir.lease(say=log.info):
            self.study = open_study(self.tune_dir, self.config.seed, self._pruner())
            self.started = time.monotonic()
            log.info("tune %s: %d of %d trials done, %d at a time, on %s", self.tune_dir.uri,
                     counted(self.study.get_trials(deepcopy=False)), self.config.trials, self.config.parallel,
                     self.dataset)
            yield self

    def _pruner(self) -> optuna.pruners.BasePruner:
        if self.config.pruner == "none":
            return optuna.pruners.NopPruner()
        return optuna.pruners.MedianPruner(n_startup_trials=self.config.prune_startup_trials,
                                           n_warmup_steps=self.config.prune_warmup_evaluations)

    def more(self, running: int) -> bool:
        """Whether to start another trial while ``running`` train: fewer than ``parallel``, the timeout not passed,
        fewer than ``trials`` in the study."""
        timed_out = self.config.timeout_s is not None and time.monotonic() - self.started > self.config.timeout_s
        return (running < self.config.parallel and not timed_out
                and counted(self.study.get_trials(deepcopy=False)) < self.config.trials)

    def ask(self, log: Log) -> Trial:
        """The next trial: trial 0 the base config as is, else values sampled from the space (a trial a kill
        interrupted: its values again, in its run folder); its run, config and batch size kept in the study."""
        trial = self.study.ask()
        cfg = self.base if is_baseline(trial) else self.config.trial_config(self.base, self.space,
                                                                             self.space.sample(trial), self.train_rows)
        run = RunDir(self.store.run_uri(hashed_run(self.store, self.tune_dir.name, cfg)))
        for key, value in ((tt.RUN, run.uri), (tt.CONFIG, _dotted(cfg, self.keys)), (tt.BATCH, cfg.data.batch_size)):
            trial.set_user_attr(key, value)
        if RESUMES in trial.user_attrs:
            log.info("trial %d trains again the values of trial %d, which a kill interrupted", trial.number,
                     trial.user_attrs[RESUMES])
        return Trial(trial, cfg, run)

    def watch(self, trial: Trial, log: Log) -> "Watch":
        """The trial's watch while its run trains (``with search.watch(trial, log): train``)."""
        return Watch(trial, self.config, self.train_rows, log)

    def outcome(self, trial: Trial, duration: float, error: UserError | None = None) -> Outcome:
        """What the trial's run says now that it has ended (``error``: what failed it)."""
        if error is not None:
            return Outcome(duration, error=str(error))
        cfg, run = trial.config, trial.run
        planned = cfg.epochs * max(1, self.train_rows // cfg.data.batch_size)
        planned = min(planned, cfg.max_steps) if cfg.max_steps else planned
        steps = tt.steps_trained(run)
        # asked to stop but trained to its end anyway (the request came after its last validation): complete
        return Outcome(duration, value=tt.value(run, cfg.best_metric), pruned=run.exists(RunDir.STOP) and
                       steps < planned, steps=steps, planned=planned)

    def record(self, trial: Trial, outcome: Outcome, log: Log) -> None:
        """Tell the study the trial's outcome: failed, pruned or complete with its value."""
        study, t = self.study, trial.optuna
        t.set_user_attr(tt.DURATION, outcome.duration)
        if outcome.error is not None:
            t.set_user_attr(tt.ERROR, outcome.error)
            study.tell(t, state=optuna.trial.TrialState.FAIL)
            log.warning("trial %d failed: %s", t.number, outcome.error)
            return
        t.set_user_attr(tt.STEPS, outcome.steps)
        t.set_user_attr(tt.PLANNED_STEPS, outcome.planned)
        if outcome.pruned:
            study.tell(t, state=optuna.trial.TrialState.PRUNED)
            log.info("trial %d pruned at step %d of %d", t.number, outcome.steps, outcome.planned)
        elif outcome.value is None:
            t.set_user_attr(tt.ERROR, "the run validated never (eval_split null?)")
            study.tell(t, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(t, outcome.value)
            log.info("trial %d complete: validation AUC %.4f", t.number, outcome.value)

    def table(self) -> list[dict]:
        """The trials table as the study has it now."""
        return tt.table(self.study.get_trials(), self.keys)

    def _finalists(self) -> dict[str, optuna.trial.FrozenTrial]:
        """The best trial and trial 0 (when it finished), by name; one line when no trial trained to its end."""
        trials = self.study.get_trials()
        best, base = tt.best_trial(trials), tt.baseline(trials)
        if best is None:
            errors = sorted({t.user_attrs.get(tt.ERROR, "") for t in trials} - {""})
            raise UserError(f"tune {self.tune_dir.name}: no trial trained to its end ({len(trials)} trials). "
                            + (f"Errors: {'; '.join(errors)[:800]}. " if errors else "")
                            + "Fix: see the trials' logs; narrow the space (--space) or fix the base config.")
        return {"base": base, "best": best} if base else {"best": best}

    def evaluations(self, log: Log) -> list[Evaluation]:
        """The trials to evaluate on ``evaluate_split`` (base and best: whether the gain holds); none when it is
        unset or the dataset lacks it."""
        split = self.config.evaluate_split
        if not split:
            return []
        if split not in self.splits:
            log.warning("the dataset has no split '%s' (it has %s): the trials are compared on validation only",
                        split, ", ".join(self.splits))
            return []
        return [Evaluation(name, t.number, self.run_of(t), EvaluateConfig(split=split))
                for name, t in self._finalists().items()]

    def run_of(self, trial: optuna.trial.FrozenTrial) -> str:
        """The URI of ``trial``'s run where the store is now (the journal keeps the one it had when the trial
        started: a store moved since finds it by its ``runs/<name>``, ``Store.resolve``)."""
        return self.store.resolve(trial.user_attrs[tt.RUN])

    def finish(self, metrics: dict[str, dict]) -> Result:
        """Write the best config (also the model's tuned config), the summary, the table and the pictures;
        ``metrics``: the evaluations' metrics by name."""
        config, tune_dir, trials = self.config, self.tune_dir, self.study.get_trials()
        finalists = self._finalists()
        best, base = finalists["best"], finalists.get("base")
        best_cfg = RunDir(self.run_of(best)).load_config().model_copy(update={"dataset": None})
        given = config.base()   # the validation as the base gave it, not as resolved for this dataset (its holdout)
        best_cfg = best_cfg.model_copy(update={"eval_split": given.eval_split, "data": best_cfg.data.model_copy(
            update={"holdout_rows": given.data.holdout_rows})})
        head = (f"# The best of tune {tune_dir.name} (trial {best.number} of {len(trials)}) on {self.dataset}:\n"
                f"# validation AUC {best.value:.4f}"
                + (f" (trial 0, the base config: {base.value:.4f})" if base else "")
                + "".join(f"; {config.evaluate_split} AUC {m['auc']:.4f} ({name})" for name, m in metrics.items())
                + "\n# Use it with `dlrmflow train --config`, `dlrmflow run --config` or the pipeline's "
                  "tuned_config.\n")
        best_yaml = head + best_cfg.to_yaml()
        tune_dir.write(best_yaml, TuneDir.BEST)
        summary = {"tune": tune_dir.uri, "dataset": self.dataset, "trials": counted(trials),
                   "best": {"trial": best.number, "val_auc": best.value, "run": self.run_of(best),
                            "values": best.user_attrs.get(tt.CONFIG)},
                   "base": None if base is None else {"trial": 0, "val_auc": base.value, "run": self.run_of(base)},
                   "val_gain": None if base is None else best.value - base.value,
                   "pruning": tt.savings(trials), "best_config": tune_dir.join(TuneDir.BEST)}
        if metrics:
            summary["test_split"] = config.evaluate_split
            summary |= {f"{name}_test": {k: m.get(k) for k in ("auc", "logloss", "rows")}
                        for name, m in metrics.items()}
            if "base" in metrics:
                summary["test_gain"] = metrics["best"]["auc"] - metrics["base"]["auc"]
        if config.model:
            summary["model_tuned_config"] = registry.save_tuned(registry.model_uri(self.store.uri, config.model),
                                                                best_yaml)
        importances = plots.importances(self.study)
        summary["importances"] = importances
        result = Result(summary, tt.table(trials, self.keys),
                        plots.best_so_far_png(tt.best_so_far(trials), base.value if base else None, tune_dir.name),
                        plots.importances_png(importances, tune_dir.name))
        tune_dir.write(result.best_so_far_png, TuneDir.BEST_SO_FAR)
        tune_dir.write(result.importances_png, TuneDir.IMPORTANCES)
        tune_dir.write(_csv(result.table), TuneDir.TRIALS)
        tune_dir.write(json.dumps(summary, indent=2) + "\n", TuneDir.SUMMARY)
        return result


class Watch:
    """Reads a trial's validations while it trains, reports each to Optuna at its point, and asks the run to stop
    (``RunDir.STOP``) once the pruner says so (never trial 0); on leaving the block without an error, reports the
    validations written after the last poll."""

    def __init__(self, trial: Trial, config: TuneConfig, train_rows: int, log: Log):
        self.trial, self.config, self.rows, self.log = trial, config, train_rows, log
        self.reported: set[int] = set()
        self.seen = 0
        self.pruned = trial.run.exists(RunDir.STOP)   # a resumed trial's run the tune asked to stop before the kill
        self.stop = threading.Event()

    def check(self, prune: bool = True) -> None:
        """Report the validations written since the last check (``prune``: and stop the run if the pruner says so;
        not once it has finished)."""
        trial, run = self.trial.optuna, self.trial.run
        records = tt.validations(run)
        for ordinal, record in enumerate(records[self.seen:], start=self.seen + 1):
            point = self.config.report_point(ordinal, record["step"], self.trial.config.data.batch_size, self.rows,
                                             sampled=not is_baseline(trial))
            if point in self.reported:   # two validations at one point: the first counts
                continue
            trial.report(float(record["auc"]), point)
            self.reported.add(point)
            # asked at each point: the earlier trials' values exist at some points only (trial 0's cadence)
            if prune and not self.pruned and not is_baseline(trial) and trial.should_prune():
                run.write_text("pruned by the tune\n", RunDir.STOP)
                self.pruned = True
                self.log.info("trial %d pruned at validation %d (best validation AUC so far %.4f): it stops at its "
                              "next validation", trial.number, ordinal, max(r["auc"] for r in records[:ordinal]))
        self.seen = len(records)

    def __enter__(self) -> "Watch":
        def loop():
            while not self.stop.wait(POLL_S):
                try:
                    self.check()
                except Exception as e:   # noqa: BLE001  (a failed read: the next poll tries again)
                    self.log.warning("trial %d: reading its validations failed: %s", self.trial.number, e)

        self.thread = threading.Thread(target=loop, daemon=True, name=f"watch-trial-{self.trial.number}")
        self.thread.start()
        return self

    def __exit__(self, kind, *_) -> None:
        self.stop.set()
        self.thread.join()
        if kind is None:
            self.check(prune=False)   # the run has finished: what it validated after the last poll


def _dotted(cfg: TrainConfig, keys: list[str]) -> dict[str, Any]:
    """The values of the dotted ``keys`` in ``cfg``."""
    data = cfg.model_dump(mode="json")
    out = {}
    for key in keys:
        node = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[key] = node
    return out


def _csv(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, keys)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
