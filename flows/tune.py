"""The tune flow: an Optuna search (TPE) over the training config, each trial a real training run (the train flow,
on the tune's launcher: here, Slurm or Kubernetes) judged on the validation split; trial 0 is the base config as
is. Trials run ``parallel`` at a time, each holding a slot of a Prefect global concurrency limit; a trial reports its
validation AUC at each validation and a hopeless one is stopped (a stop request in its run folder: it stops at its
next validation, as an early stop would). The study lives in the store (``tuning.study``): a killed tune resumes,
finished trials are kept, an interrupted one trains again with its values (its run resumes). The end: the base and
the best trial evaluated on the test split, the best config as a training YAML (and as the model's tuned config),
the trials table, the best-so-far curve and the parameter importances."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from contextlib import suppress

import optuna
from prefect import flow, get_client, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.concurrency.sync import concurrency
from prefect.futures import as_completed

import feature_spec as fspec
from common.errors import UserError
from common.store import Store
from flows import artifacts
from flows.errors import user_errors
from flows.evaluate import evaluate
from flows.train import train
from models import registry
from training import (EvaluateConfig, FlowTrainConfig, HOLDOUT, LauncherConfig, LocalLauncherConfig, RunDir,
                      TrainConfig, build_launcher, hashed_run)
from tuning import plots, trials as tt
from tuning.config import SearchSpace, TuneConfig
from tuning.study import RESUMES, TuneDir, counted, is_baseline, open_study

POLL_S = 2.0   # how often a trial's validations are read for pruning


def tune_dataset(config: TuneConfig, store: Store) -> str:
    """The dataset the trials train on: ``config.dataset``, else the dataset of the model's champion."""
    if config.dataset:
        return config.dataset
    champion = registry.champion_to_load(registry.model_uri(store.uri, config.model))
    if champion is None:
        raise UserError(f"model {config.model} has no champion yet, so there is no dataset to tune on. Fix: pass "
                        "--dataset, or tune once a night has promoted a model.")
    return RunDir(champion.run).load_config().dataset


def setup(config: TuneConfig, launcher: LauncherConfig) -> tuple:
    """Everything a tune checks before its first trial (the command line calls it before Prefect starts): the store,
    the dataset and its splits, the base config, the space against both and the ranks; returns (store, dataset,
    base config, space, feature spec, training rows)."""
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
    return store, dataset, base, space, spec, train_rows


def _pruner(config: TuneConfig) -> optuna.pruners.BasePruner:
    if config.pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=config.prune_startup_trials,
                                       n_warmup_steps=config.prune_warmup_evaluations)


def _trial_limit(config: TuneConfig, tune_dir: TuneDir, log) -> str:
    """The name of the global concurrency limit the trials hold slots of: ``config.concurrency_limit`` (created with
    ``parallel`` slots when the server has none of that name), else the tune's own ``tune-NAME``, made anew with
    ``parallel`` slots (the tune's lease is ours: a slot still taken is a killed run's)."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    name = config.concurrency_limit or f"tune-{tune_dir.name}"
    with get_client(sync_client=True) as client:
        if config.concurrency_limit is None:
            with suppress(ObjectNotFound):
                client.delete_global_concurrency_limit_by_name(name)
        try:
            limit = client.read_global_concurrency_limit_by_name(name)
            log.info("trials hold slots of the concurrency limit '%s' (%d slots)", name, limit.limit)
        except ObjectNotFound:
            with suppress(ObjectAlreadyExists):   # another tune made it meanwhile
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=config.parallel))
            log.info("trials hold slots of the concurrency limit '%s' (%d slots)", name, config.parallel)
    return name


class _Watch:
    """Reads a trial's validations while it trains, reports each to Optuna at its point, and asks the run to stop
    (``RunDir.STOP``) once the pruner says so (never trial 0)."""

    def __init__(self, trial: optuna.Trial, run: RunDir, cfg: TrainConfig, config: TuneConfig, train_rows: int, log):
        self.trial, self.run, self.cfg, self.config, self.rows, self.log = trial, run, cfg, config, train_rows, log
        self.reported: set[int] = set()
        self.seen = 0
        self.pruned = run.exists(RunDir.STOP)   # a resumed trial's run the tune asked to stop before the kill
        self.stop = threading.Event()

    def check(self, prune: bool = True) -> None:
        """Report the validations written since the last check (``prune``: and stop the run if the pruner says so;
        not once it has finished)."""
        records = tt.validations(self.run)
        for ordinal, record in enumerate(records[self.seen:], start=self.seen + 1):
            point = self.config.report_point(ordinal, record["step"], self.cfg.data.batch_size, self.rows,
                                             sampled=not is_baseline(self.trial))
            if point in self.reported:   # two validations at one point: the first counts
                continue
            self.trial.report(float(record["auc"]), point)
            self.reported.add(point)
            # asked at each point: the earlier trials' values exist at some points only (trial 0's cadence)
            if prune and not self.pruned and not is_baseline(self.trial) and self.trial.should_prune():
                self.run.write_text("pruned by the tune\n", RunDir.STOP)
                self.pruned = True
                self.log.info("trial %d pruned at validation %d (best validation AUC so far %.4f): it stops at its "
                              "next validation", self.trial.number, ordinal, max(r["auc"] for r in records[:ordinal]))
        self.seen = len(records)

    def __enter__(self) -> "_Watch":
        def loop():
            while not self.stop.wait(POLL_S):
                try:
                    self.check()
                except Exception as e:   # noqa: BLE001  (a failed read: the next poll tries again)
                    self.log.warning("trial %d: reading its validations failed: %s", self.trial.number, e)

        self.thread = threading.Thread(target=loop, daemon=True, name=f"watch-trial-{self.trial.number}")
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


@task(cache_policy=NONE, task_run_name="trial {number}")
def train_trial(number: int, trial: optuna.Trial, cfg: TrainConfig, run_uri: str, config: TuneConfig,
                launcher: LauncherConfig, train_rows: int, limit: str) -> dict:
    """Train one trial's run (holding a slot of the concurrency limit), reporting its validations; returns its
    outcome: value, pruned, steps, planned steps, duration, or the error that failed it."""
    log = get_run_logger()
    run = RunDir(run_uri)
    start = time.monotonic()
    with concurrency(limit, occupy=1, strict=True):
        log.info("trial %d: training %s", number, run_uri)
        try:
            with _Watch(trial, run, cfg, config, train_rows, log) as watch:
                train.with_options(flow_run_name=f"trial-{number}")(
                    run_uri, cfg.dataset, FlowTrainConfig.model_validate(cfg.model_dump()), launcher)
            watch.check(prune=False)   # the validations written after the last poll; the run has finished
        except UserError as e:
            return {"error": str(e), "duration": time.monotonic() - start}
    planned = cfg.epochs * max(1, train_rows // cfg.data.batch_size)
    planned = min(planned, cfg.max_steps) if cfg.max_steps else planned
    steps = tt.steps_trained(run)
    # asked to stop but trained to its end anyway (the request came after its last validation): complete
    return {"value": tt.value(run, cfg.best_metric), "pruned": run.exists(RunDir.STOP) and steps < planned,
            "steps": steps, "planned": planned, "duration": time.monotonic() - start}


def _record(study: optuna.Study, trial: optuna.Trial, outcome: dict, log) -> None:
    """Tell the study a trial's outcome."""
    trial.set_user_attr(tt.DURATION, outcome["duration"])
    if "error" in outcome:
        trial.set_user_attr(tt.ERROR, outcome["error"])
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        log.warning("trial %d failed: %s", trial.number, outcome["error"])
        return
    for key, name in ((tt.STEPS, "steps"), (tt.PLANNED_STEPS, "planned")):
        trial.set_user_attr(key, outcome[name])
    if outcome["pruned"]:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        log.info("trial %d pruned at step %d of %d", trial.number, outcome["steps"], outcome["planned"])
    elif outcome["value"] is None:
        trial.set_user_attr(tt.ERROR, "the run validated never (eval_split null?)")
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    else:
        study.tell(trial, outcome["value"])
        log.info("trial %d complete: validation AUC %.4f", trial.number, outcome["value"])


def _dotted(cfg: TrainConfig, keys: list[str]) -> dict:
    data = cfg.model_dump(mode="json")
    out = {}
    for key in keys:
        node = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[key] = node
    return out


def _run_trials(study: optuna.Study, base: TrainConfig, space: SearchSpace, config: TuneConfig, store: Store,
                tune_dir: TuneDir, launcher: LauncherConfig, train_rows: int, limit: str, log) -> None:
    """Ask, train and tell until the study holds ``config.trials`` trials (or ``timeout_s`` has passed)."""
    start, pending = time.monotonic(), {}
    keys = list(space.dimensions)

    def more() -> bool:
        timed_out = config.timeout_s is not None and time.monotonic() - start > config.timeout_s
        return not timed_out and counted(study.get_trials(deepcopy=False)) < config.trials

    while True:
        while len(pending) < config.parallel and more():
            trial = study.ask()
            cfg = base if is_baseline(trial) else config.trial_config(base, space, space.sample(trial), train_rows)
            run_uri = store.run_uri(hashed_run(store, tune_dir.name, cfg))
            for key, value in ((tt.RUN, run_uri), (tt.CONFIG, _dotted(cfg, keys)), (tt.BATCH, cfg.data.batch_size)):
                trial.set_user_attr(key, value)
            if RESUMES in trial.user_attrs:
                log.info("trial %d trains again the values of trial %d, which a kill interrupted", trial.number,
                         trial.user_attrs[RESUMES])
            future = train_trial.submit(trial.number, trial, cfg, run_uri, config, launcher, train_rows, limit)
            pending[future] = trial
        if not pending:
            return
        done = next(as_completed(list(pending)))
        _record(study, pending.pop(done), done.result(), log)
        artifacts.tune_trials(tt.table(study.get_trials(), keys), tune_dir.name)


def _run_of(trial: optuna.trial.FrozenTrial, store: Store) -> str:
    """The URI of ``trial``'s run where the store is now (the journal keeps the one it had when the trial started:
    a store moved since finds it by its ``runs/<name>``, ``Store.resolve``)."""
    return store.resolve(trial.user_attrs[tt.RUN])


def _evaluations(config: TuneConfig, spec_splits: list[str], trials: dict[str, optuna.trial.FrozenTrial],
                 store: Store, launcher: LauncherConfig, log) -> dict[str, dict]:
    """The metrics of each named trial's best checkpoint on ``evaluate_split`` (none when the dataset lacks it)."""
    split = config.evaluate_split
    if not split:
        return {}
    if split not in spec_splits:
        log.warning("the dataset has no split '%s' (it has %s): the trials are compared on validation only", split,
                    ", ".join(spec_splits))
        return {}
    return {name: evaluate.with_options(flow_run_name=f"evaluate-trial-{t.number}")(
        _run_of(t, store), EvaluateConfig(split=split), launcher) for name, t in trials.items() if t is not None}


def _finish(study: optuna.Study, space: SearchSpace, config: TuneConfig, tune_dir: TuneDir, store: Store,
            dataset: str, spec_splits: list[str], launcher: LauncherConfig, log) -> dict:
    """Evaluate the base and best trials, write the best config, the summary, the table and the pictures."""
    trials = study.get_trials()
    best, base = tt.best_trial(trials), tt.baseline(trials)
    if best is None:
        errors = sorted({t.user_attrs.get(tt.ERROR, "") for t in trials} - {""})
        raise UserError(f"tune {tune_dir.name}: no trial trained to its end ({len(trials)} trials). "
                        + (f"Errors: {'; '.join(errors)[:800]}. " if errors else "")
                        + "Fix: see the trials' logs; narrow the space (--space) or fix the base config.")
    metrics = _evaluations(config, spec_splits, {"base": base, "best": best}, store, launcher, log)
    best_cfg = RunDir(_run_of(best, store)).load_config().model_copy(update={"dataset": None})
    given = config.base()   # the validation as the base gave it, not as resolved for this dataset (its holdout's rows)
    best_cfg = best_cfg.model_copy(update={"eval_split": given.eval_split, "data": best_cfg.data.model_copy(
        update={"holdout_rows": given.data.holdout_rows})})
    head = (f"# The best of tune {tune_dir.name} (trial {best.number} of {len(trials)}) on {dataset}:\n"
            f"# validation AUC {best.value:.4f}" + (f" (trial 0, the base config: {base.value:.4f})" if base else "")
            + "".join(f"; {config.evaluate_split} AUC {m['auc']:.4f} ({name})" for name, m in metrics.items())
            + "\n# Use it with `dlrmflow train --config`, `dlrmflow run --config` or the pipeline's tuned_config.\n")
    best_yaml = head + best_cfg.to_yaml()
    tune_dir.write(best_yaml, TuneDir.BEST)
    summary = {"tune": tune_dir.uri, "dataset": dataset, "trials": counted(trials),
               "best": {"trial": best.number, "val_auc": best.value, "run": _run_of(best, store),
                        "values": best.user_attrs.get(tt.CONFIG)},
               "base": None if base is None else {"trial": 0, "val_auc": base.value, "run": _run_of(base, store)},
               "val_gain": None if base is None else best.value - base.value,
               "pruning": tt.savings(trials), "best_config": tune_dir.join(TuneDir.BEST)}
    if metrics:
        summary["test_split"] = config.evaluate_split
        summary |= {f"{name}_test": {k: m.get(k) for k in ("auc", "logloss", "rows")} for name, m in metrics.items()}
        if "base" in metrics:
            summary["test_gain"] = metrics["best"]["auc"] - metrics["base"]["auc"]
    if config.model:
        summary["model_tuned_config"] = registry.save_tuned(registry.model_uri(store.uri, config.model), best_yaml)
    importances = plots.importances(study)
    summary["importances"] = importances
    curve = plots.best_so_far_png(tt.best_so_far(trials), base.value if base else None, tune_dir.name)
    bars = plots.importances_png(importances, tune_dir.name)
    table = tt.table(trials, list(space.dimensions))
    tune_dir.write(curve, TuneDir.BEST_SO_FAR)
    tune_dir.write(bars, TuneDir.IMPORTANCES)
    tune_dir.write(_csv(table), TuneDir.TRIALS)
    tune_dir.write(json.dumps(summary, indent=2) + "\n", TuneDir.SUMMARY)
    artifacts.tune_trials(table, tune_dir.name)
    artifacts.tune_result(summary, curve, bars)
    return summary


def _csv(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, keys)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


@flow(name="tune", log_prints=True)
@user_errors
def tune(config: TuneConfig, launcher: LauncherConfig = LocalLauncherConfig(nproc=1)) -> dict:
    """Search the training config for the dataset (Optuna TPE; trial 0 is the base config as is); returns the
    summary: the best trial, its gain over trial 0 on validation and test, where its config is, what pruning saved.

    Args:
        config: Dataset, trials, base config, search space, pruning and parallelism.
        launcher: Where each trial's ranks run: `local` (default: torchrun here, 1 rank), `slurm` or `kubernetes`.
    """
    log = get_run_logger()
    store, dataset, base, space, spec, train_rows = setup(config, launcher)
    tune_dir = TuneDir(store.tune_uri(config.study_name(dataset, base, space, store)))
    with tune_dir.lease(say=log.info):
        study = open_study(tune_dir, config.seed, _pruner(config))
        done = counted(study.get_trials(deepcopy=False))
        log.info("tune %s: %d of %d trials done, %d at a time, on %s", tune_dir.uri, done, config.trials,
                 config.parallel, dataset)
        limit = _trial_limit(config, tune_dir, log)
        _run_trials(study, base, space, config, store, tune_dir, launcher, train_rows, limit, log)
        return _finish(study, space, config, tune_dir, store, dataset, spec.splits, launcher, log)
