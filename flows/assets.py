"""The store's products as Prefect assets, the one home of their keys and lineage: each day's logs (an input,
referenced), each day's parsed files, the dataset, the run (its checkpoints), the evaluation, the bundle and the
model's champion, each with its upstream assets, so a champion's events lead back to the days of logs it learned
from (Prefect 3.9's open-source server keeps assets as events: no assets API or page), and a deployment trigger on
``prefect.asset.materialization.succeeded`` of a model's champion key starts on each new champion
(docs/nightly.md, "Lineage").

A key is the product's URI (``file://`` and the absolute path for a local store, ``s3://...`` as is; a day's parsed
files, kept per input file under ``_files/``, are keyed ``<store>/_files/days/<day>``). A product a task makes from
keys known before it runs is that task made by ``@materialize`` (``materializing``: training, evaluation); one
known only after (the days and the dataset of the preprocess subflow, a promotion's bundle and champion) is the
same event built by the same Prefect helper (``record``: ``AssetContext.emit_events``, what the materializing
task's engine calls)."""

from __future__ import annotations

import datetime as dt
import functools
import os
import posixpath
from dataclasses import dataclass, field
from typing import Callable, Iterable

from prefect.assets import Asset, AssetProperties

from common.store import FILES, Store
from models import PROMOTING, registry
from nightly.night import Setup
from preprocessing.dated import fill_date
from training import Checkpointer, RunDir

BY = "dlrmflow"   # the tool named as the materializer (a related resource of role asset-materialized-by)
_REFUSED = " #?&%\"'<>[]{}|\\^`\n\r\t\0"   # characters Prefect refuses in an asset key (prefect.types.names)


@dataclass(frozen=True)
class Made:
    """One product: its asset, the assets it was made from, and what a person reads about it (read once made)."""

    asset: Asset
    upstream: tuple[Asset, ...] = ()
    metadata: Callable[[], dict] = field(default=lambda: {}, compare=False)


def key(uri: str) -> str:
    """``uri`` as an asset key: ``file://`` + the absolute path for a local one, a remote one as is; a character
    Prefect refuses in a key (a space, ``#``, ``%``...) becomes ``_``."""
    if "://" not in uri:
        uri = "file://" + os.path.abspath(uri)
    return "".join("_" if c in _REFUSED else c for c in uri.rstrip("/"))[:512]


def _asset(uri: str, name: str, description: str) -> Asset:
    return Asset(key=key(uri), properties=AssetProperties(name=name, description=description))


def logs(template: str, day: dt.date) -> Asset:
    """A day's raw logs: the input template filled for ``day`` (globs as given)."""
    return _asset(fill_date(template, day), f"logs {day}", f"the raw logs of {day} ({template})")


def parsed(store: Store, day: dt.date) -> Asset:
    """A day's parsed files: the parts of each of its input files under ``_files/``, shared by every window."""
    return _asset(store.join(FILES, "days", day.isoformat()), f"parsed {day}",
                  f"the parsed and counted files of {day} (_files/, shared by the windows that read the day)")


def dataset(uri: str) -> Asset:
    return _asset(uri, f"dataset {posixpath.basename(uri.rstrip('/'))}", "a preprocessed split_binary dataset")


def run(uri: str) -> Asset:
    return _asset(uri, f"run {posixpath.basename(uri.rstrip('/'))}", "a training run: its checkpoints and metrics")


def evaluation(run_uri: str, split: str) -> Asset:
    return _asset(RunDir(run_uri).eval_dir(split), f"evaluation {posixpath.basename(run_uri.rstrip('/'))} {split}",
                  f"the evaluation of a run's checkpoint on '{split}'")


def bundle(uri: str) -> Asset:
    return _asset(uri, f"bundle {posixpath.basename(uri.rstrip('/'))}", "a champion's serving bundle")


def champion(model: str) -> Asset:
    """A model's champion (``champion.json``): materialized on each promotion."""
    return _asset(posixpath.join(model, registry.CHAMPION_FILE), f"champion {posixpath.basename(model)}",
                  "the model's champion: the run, checkpoint and bundle it serves")


# ---------------------------------------------------------------- the products and their lineage

def preprocessed(setup: Setup, uri: str) -> list[Made]:
    """A night's products of preprocessing: a dated night's days' parsed files (each from its day's logs), then the
    dataset (from them; a plain run's dataset from no asset: its inputs are no dated logs)."""
    window, store = setup.window, setup.store
    days = window.days if window else ()
    made = [Made(parsed(store, day), tuple(logs(t, day) for t in window.templates),
                 lambda day=day: {"day": day.isoformat(), "inputs": [fill_date(t, day) for t in window.templates],
                                  "dataset": posixpath.basename(uri)}) for day in days]
    return made + [Made(dataset(uri), tuple(m.asset for m in made),
                        lambda: {"name": posixpath.basename(uri), "days": [d.isoformat() for d in days]})]


def trained(run_uri: str, dataset_uri: str) -> Made:
    """The run's checkpoints, from its dataset."""
    def about() -> dict:
        return {"run": posixpath.basename(run_uri), "step": Checkpointer(RunDir(run_uri)).step_of("latest"),
                "dataset": posixpath.basename(dataset_uri.rstrip("/"))}
    return Made(run(run_uri), (dataset(dataset_uri),), about)


def evaluated(run_uri: str, split: str) -> Made:
    """The evaluation of the run's checkpoint on ``split``, from the run."""
    def about() -> dict:
        metrics = RunDir(run_uri).eval_metrics(split) or {}
        return {"split": split, **{k: metrics.get(k) for k in ("step", "auc", "logloss", "rows", "positives")}}
    return Made(evaluation(run_uri, split), (run(run_uri),), about)


def promoted(model: str, entry: dict, split: str) -> list[Made]:
    """A promotion's bundle (from the run and its dataset) and the champion (from the bundle and the evaluation);
    nothing for a night that kept the champion."""
    if entry.get("decision") not in PROMOTING or (current := registry.load_champion(model)) is None:
        return []
    about = {"model": posixpath.basename(model), "date": current.date, "run": posixpath.basename(current.run),
             "step": current.step, **{k: current.metrics.get(k) for k in ("auc", "logloss", "rows")},
             "window": current.window, "decision": entry["decision"]}
    made = [] if not current.bundle else [Made(bundle(current.bundle), (run(current.run), dataset(current.dataset)),
                                               lambda: about)]
    upstream = (*(m.asset for m in made), evaluation(current.run, split), run(current.run))
    return made + [Made(champion(model), upstream, lambda: about)]


# ---------------------------------------------------------------- the events

def materializing(task, made: Made):
    """``task`` made by ``@materialize`` of ``made``'s asset from its upstream assets (same name, no cache), its
    metadata read when the task's function returns: a materialization event when it succeeds (or failed)."""
    from prefect.assets import add_asset_metadata, materialize
    from prefect.cache_policies import NONE
    from prefect.states import State

    fn = task.fn

    @functools.wraps(fn)
    def making(*args, **kwargs):
        out = fn(*args, **kwargs)
        if not isinstance(out, State):   # a UserError's Failed state (flows.errors.user_errors): nothing to read
            add_asset_metadata(made.asset, made.metadata())
        return out

    return materialize(made.asset, by=BY, asset_deps=list(made.upstream), name=task.name, cache_policy=NONE)(making)


def record(products: Iterable[Made]) -> None:
    """Each product's materialization now, in the running flow or task, as a materializing task's engine emits it
    (``AssetContext.emit_events``: a ``prefect.asset.referenced`` event per upstream asset, then
    ``prefect.asset.materialization.succeeded`` with them as related assets of role ``asset``)."""
    from prefect.context import AssetContext, TaskRunContext
    from prefect.states import Completed

    task_run = TaskRunContext.get()
    for made in products:
        AssetContext(downstream_assets={made.asset}, direct_asset_dependencies=set(made.upstream),
                     materialized_by=BY, task_run_id=task_run.task_run.id if task_run else None,
                     materialization_metadata={made.asset.key: made.metadata()}).emit_events(Completed())
