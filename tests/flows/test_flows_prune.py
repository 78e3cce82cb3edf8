"""Prune after a night (issue 19, section 3), no server: it keeps what any model's window still needs (the
union over models/*/ of their latest recorded windows, plus retain_days) and the parts a running job's lease
records, and runs under the store lease. Real files: stored file entries, a recorded history, a held lease."""

from __future__ import annotations

import datetime as dt
import threading

from common import lease
from common.store import Store
from flows.config import PipelineConfig
from flows.promote import prune
from nightly import registry
from nightly.config import WindowConfig
from nightly.window import fill_date, window
from preprocessing.work import FileParts, Mirror, file_parts, release_dataset_lease, take_dataset_lease

DATE = dt.date(2026, 11, 20)
DAYS = [DATE - dt.timedelta(days=k) for k in range(10, -1, -1)]   # 11-10 .. 11-20


def _setup(tmp_path):
    template = str(tmp_path / "logs" / "{date}" / "part-0.tsv")
    store = tmp_path / "store"
    mirror = Mirror.locate(None, str(store))
    parts = {}
    for day in DAYS:   # each day's input file and its stored parts entry (what a parse leaves)
        uri = fill_date(template, day)
        (tmp_path / "logs" / day.isoformat()).mkdir(parents=True)
        (tmp_path / "logs" / day.isoformat() / "part-0.tsv").write_text("")
        parts[day] = FileParts.locate(mirror, f"key-{day.isoformat()}")
        parts[day].create({"uri": uri, "size": 0, "version": None})
    config = PipelineConfig(store=str(store), model="short", preprocess={"inputs": [template]},
                            window=WindowConfig(train_days=2))
    return config, Store(str(store)), window([template], DATE, config.window), template, parts


def _record(store, name: str, day: dt.date, first: dt.date) -> None:
    window_days = [(first + dt.timedelta(days=k)).isoformat() for k in range((day - first).days + 1)]
    registry.record(registry.model_uri(store.uri, name),
                    {"run": f"{store.uri}/runs/{name}-{day}", "step": 1, "dataset": "d", "vocab": "d/vocab",
                     "date": day.isoformat(), "window": window_days,
                     "metrics": {"auc": 0.7, "logloss": 0.5, "rows": 10}})


def test_prune_keeps_any_models_window_and_a_running_jobs_parts(tmp_path):
    config, store, days, template, parts = _setup(tmp_path)
    _record(store, "short", DATE, DATE - dt.timedelta(days=2))            # this model: its config decides
    _record(store, "long", DATE - dt.timedelta(days=1), DATE - dt.timedelta(days=7))   # reads from 11-13
    _record(store, "long", DATE - dt.timedelta(days=3), DATE - dt.timedelta(days=9))   # an older night (backfill)
    running = [parts[DATE - dt.timedelta(days=9)]]                         # a job preprocessing 11-11 right now
    held = take_dataset_lease(store.uri, "backfill-key", running, owner="backfill of 11-11")
    said = []
    try:
        removed = prune(config, store, days, say=said.append)
    finally:
        release_dataset_lease(held, store.uri)
    kept_days = {DATE - dt.timedelta(days=9)} | {d for d in DAYS if d >= DATE - dt.timedelta(days=7)}
    assert removed == sorted(fill_date(template, d) for d in DAYS if d not in kept_days)
    assert file_parts(store.uri) == sorted(fill_date(template, d) for d in kept_days)
    assert any("model long's window reads from 2026-11-13" in s for s in said)
    assert any("a running preprocessing job uses them" in s for s in said)
    assert not (tmp_path / "store" / "_store.lease").exists()


def test_prune_adds_retain_days_to_the_union_and_waits_for_the_store_lease(tmp_path):
    config, store, days, template, parts = _setup(tmp_path)
    _record(store, "long", DATE, DATE - dt.timedelta(days=5))               # reads from 11-15
    config = config.model_copy(update={"window": WindowConfig(train_days=2, retain_days=1)})
    other = lease.acquire(f"{store.uri}/_store.lease", "another prune", "store lease (prune)", store.uri, 0, 60)
    threading.Timer(0.5, other.release).start()
    said = []
    removed = prune(config, store, days, say=said.append)   # waits for the other removal first
    assert any(s.startswith("waiting for the store lease (prune of parsed parts)") and "another prune" in s
               for s in said)
    assert file_parts(store.uri) == sorted(fill_date(template, d) for d in DAYS if d >= DATE - dt.timedelta(days=6))
    assert len(removed) == 4


def test_prune_of_the_model_alone_is_unchanged(tmp_path):
    config, store, days, template, parts = _setup(tmp_path)
    removed = prune(config, store, days, say=lambda _: None)   # no other model: before the next window (11-19)
    assert file_parts(store.uri) == [fill_date(template, d) for d in DAYS if d >= DATE - dt.timedelta(days=1)]
    assert len(removed) == 9
