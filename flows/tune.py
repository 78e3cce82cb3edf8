"""The tune flow: an Optuna search (TPE) over the training config, each trial a real training run (the train flow,
on the tune's launcher: here, Slurm or Kubernetes) judged on the validation split; trial 0 is the base config as
is. What the search decides is ``tuning.search``'s (Prefect-free: the study, the trials' configs, pruning, what each
run's outcome tells the study, the best config and its hand-off to the model); this flow adds what only Prefect has.
Trials run ``parallel`` at a time, each holding a slot of a Prefect global concurrency limit and training as a train
flow run; the search watches its validations and stops a hopeless one (a stop request in its run folder: it stops at
its next validation, as an early stop would). The study lives in the store (``tuning.study``): a killed tune resumes,
finished trials are kept, an interrupted one trains again with its values (its run resumes). The end: the base and
the best trial evaluated on the test split as evaluate flow runs, then the search's result published as artifacts
(the trials table, the summary, the best-so-far curve and the parameter importances)."""

from __future__ import annotations

import time
from contextlib import suppress

from prefect import flow, get_client, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.concurrency.sync import concurrency
from prefect.futures import as_completed

from common.errors import UserError
from flows import artifacts
from flows.errors import user_errors
from flows.evaluate import evaluate
from flows.train import train
from training import FlowTrainConfig, LauncherConfig, LocalLauncherConfig
from tuning.config import TuneConfig
from tuning.search import Outcome, Search, Trial, prepare
from tuning.study import TuneDir


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


@task(cache_policy=NONE, task_run_name="trial {number}")
def train_trial(number: int, search: Search, trial: Trial, launcher: LauncherConfig, limit: str) -> Outcome:
    """Train one trial's run as a train flow run (holding a slot of the concurrency limit) under the search's watch;
    returns its outcome (``Search.outcome``)."""
    log = get_run_logger()
    start = time.monotonic()
    with concurrency(limit, occupy=1, strict=True):
        log.info("trial %d: training %s", number, trial.run.uri)
        try:
            with search.watch(trial, log):
                train.with_options(flow_run_name=f"trial-{number}")(
                    trial.run.uri, trial.config.dataset, FlowTrainConfig.model_validate(trial.config.model_dump()),
                    launcher)
        except UserError as e:
            return search.outcome(trial, time.monotonic() - start, e)
    return search.outcome(trial, time.monotonic() - start)


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
    search = prepare(config, launcher)
    with search.open(log):
        limit = _trial_limit(config, search.tune_dir, log)
        pending = {}
        while True:
            while search.more(running=len(pending)):
                trial = search.ask(log)
                pending[train_trial.submit(trial.number, search, trial, launcher, limit)] = trial
            if not pending:
                break
            done = next(as_completed(list(pending)))
            search.record(pending.pop(done), done.result(), log)
            artifacts.tune_trials(search.table(), search.tune_dir.name)
        metrics = {e.name: evaluate.with_options(flow_run_name=f"evaluate-trial-{e.trial}")(e.run, e.config, launcher)
                   for e in search.evaluations(log)}
        result = search.finish(metrics)
    artifacts.tune_trials(result.table, search.tune_dir.name)
    artifacts.tune_result(result.summary, result.best_so_far_png, result.importances_png)
    return result.summary
