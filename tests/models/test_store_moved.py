"""A store that moved (issue 34 §4): a store restored at another path (a renamed folder) or copied to another
prefix keeps its champion. champion.json, history.jsonl and a run's config.yaml record the places in the store
store-relative; records written before, with absolute URIs of the old place, are found in the store as it is now.
A night's pieces use the moved store as they used the old one: the champion to load and to warm-start from, its
history, scoring it, and gc, which lists the same removals and removes nothing the champion needs. An s3:// store
with '..' in its prefix is refused in one line before anything is written (S3 takes '..' literally)."""

from __future__ import annotations

import datetime as dt
import json
import os
import posixpath

import pytest

from common.atomic import write_uri
from common.errors import UserError
from common.store import Store, filesystem, read_text
from helpers import stores
from models import gc, registry, scoring
from models.config import GcConfig, ScoreConfig
from nightly.config import PipelineConfig
from nightly.night import set_up
from training.config import InitFrom, TrainConfig
from training.rundir import RunDir

CHAMPION = "ctr-2026-11-01"   # night 1's run made the champion; nights 2-4 kept it
WARM = "ctr-2026-11-05"       # a run warm-started from the champion (its config.yaml records init_from)
GONE = {("run", "runs/ctr-2026-11-02"), ("dataset", "datasets/ctr-d2")}   # gc with keep_nights 2


def _made(root: str, nights: int = 4) -> None:
    """Model ctr's nights, each with its run and dataset, and a run warm-started from the champion."""
    store = Store(root)
    for i in range(1, nights + 1):
        d = stores.dataset(root, f"ctr-d{i}")
        r = stores.run(root, f"ctr-2026-11-0{i}", d)
        stores.night(root, "ctr", f"2026-11-0{i}", r, d, auc=0.7 if i == 1 else 0.6)
    warm = RunDir(stores.run(root, WARM, store.dataset_uri(f"ctr-d{nights}")))
    warm.save_config(TrainConfig(dataset=store.dataset_uri(f"ctr-d{nights}"),
                                 init_from=InitFrom(run=store.run_uri(CHAMPION), checkpoint="4", store=root)))


def _absolute(root: str) -> None:
    """The records as they were written before they were store-relative: absolute URIs of ``root``."""
    model = Store(root).model_uri("ctr")

    def old(record: dict, keys: tuple[str, ...]) -> dict:
        return {**record, **{k: posixpath.join(root, record[k]) for k in keys if isinstance(record.get(k), str)}}

    champion = json.loads(read_text(f"{model}/{registry.CHAMPION_FILE}"))
    champion = old(champion, registry.LOCATIONS) | {"line": old(champion["line"], registry.LINE_LOCATIONS)}
    write_uri(f"{model}/{registry.CHAMPION_FILE}", json.dumps(champion, indent=2))
    lines = [json.loads(line) for line in read_text(f"{model}/{registry.HISTORY_FILE}").splitlines()]
    write_uri(f"{model}/{registry.HISTORY_FILE}",
              "".join(json.dumps(old(line, registry.LINE_LOCATIONS)) + "\n" for line in lines))
    warm = RunDir(Store(root).run_uri(WARM))
    warm.write_text(warm.read_text(RunDir.CONFIG).replace(f"run: runs/{CHAMPION}", f"run: {root}/runs/{CHAMPION}"),
                    RunDir.CONFIG)


def _gc_removals(root: str) -> set[tuple[str, str]]:
    """What gc would remove from the store ``root`` (keep_nights 2), store-relative."""
    return {(r.kind, Store(root).relative(r.uri)) for r in gc.removals(GcConfig(store=root, keep_nights=2))}


def _records(root: str) -> dict[str, str]:
    model = Store(root).model_uri("ctr")
    return {name: read_text(f"{model}/{name}") for name in (registry.CHAMPION_FILE, registry.HISTORY_FILE)}


@pytest.mark.parametrize("records", ["store-relative", "absolute"])
def test_a_local_store_restored_at_another_path_keeps_its_champion(tmp_path, records):
    old, new = str(tmp_path / "store"), str(tmp_path / "restored" / "store")
    _made(old)
    champion_json = json.loads(_records(old)[registry.CHAMPION_FILE])
    assert (champion_json["run"], champion_json["dataset"], champion_json["bundle"]) == (
        f"runs/{CHAMPION}", "datasets/ctr-d1", f"models/ctr/bundles/{CHAMPION}")   # as written now
    assert f"run: runs/{CHAMPION}" in RunDir(Store(old).run_uri(WARM)).read_text(RunDir.CONFIG)
    assert "  store: null" in RunDir(Store(old).run_uri(WARM)).read_text(RunDir.CONFIG)   # its own: the default
    if records == "absolute":
        _absolute(old)
    assert _gc_removals(old) == GONE
    written = _records(old)
    (tmp_path / "restored").mkdir()
    os.rename(old, new)

    store = Store(new)
    model = store.model_uri("ctr")
    champion = registry.champion_to_load(model)
    assert (champion.run, champion.dataset, champion.vocab, champion.bundle) == (
        store.run_uri(CHAMPION), store.dataset_uri("ctr-d1"), f"{store.dataset_uri('ctr-d1')}/vocab",
        f"{model}/bundles/{CHAMPION}")
    assert registry.usable_champion(model, "2026-11-05") == (champion, None)
    registry.check_records(model)
    assert [(h["run"], h["dataset"], h["champion_run"]) for h in registry.history(model)] == [
        (store.run_uri(f"ctr-2026-11-0{i}"), store.dataset_uri(f"ctr-d{i}"), store.run_uri(CHAMPION) if i > 1 else None)
        for i in range(1, 5)]
    assert registry.decided(model, "2026-11-04", store.run_uri("ctr-2026-11-04"))["decision"] == "kept"

    # the next night warm-starts from the champion, whose run's config names its dataset where it is now
    said: list[str] = []
    plan = set_up(PipelineConfig(store=new, model="ctr", window={"train_days": 2}), store, dt.date(2026, 11, 5))
    assert plan.warm_started(said.append).init_from == InitFrom(run=champion.run, checkpoint="4"), said
    assert RunDir(champion.run).load_config().dataset == champion.dataset
    assert RunDir(store.run_uri(WARM)).load_config().init_from == InitFrom(run=champion.run, checkpoint="4")

    # scoring the champion finds its run, checkpoint and vocabularies in the store as it is
    found = scoring.locate_checkpoint(ScoreConfig(model=model, inputs=["x"], out=str(tmp_path / "o.parquet")))
    assert found == {"run": champion.run, "step": 4, "dataset": champion.dataset, "warning": None}

    # gc lists what it listed before the move, and removes nothing the champion needs
    assert _gc_removals(new) == GONE
    report = gc.collect(GcConfig(store=new, keep_nights=2))
    assert {(r.kind, store.relative(r.uri)) for r in report.removals} == GONE
    assert all(os.path.isdir(p) for p in (champion.run, champion.dataset, champion.bundle, store.run_uri(WARM)))
    assert registry.champion_to_load(model) == champion
    assert _records(new) == written   # reading rewrote nothing


def test_a_warm_start_from_another_store_is_recorded_as_given(tmp_path):
    run = RunDir(Store(str(tmp_path)).run_uri("r2"))
    other = InitFrom(run="s3://other/dlrm/runs/r1", checkpoint="4", store="s3://other/dlrm")
    run.save_config(TrainConfig(dataset="s3://other/dlrm/datasets/d", init_from=other))
    assert "run: s3://other/dlrm/runs/r1" in run.read_text(RunDir.CONFIG)
    assert run.load_config().init_from == other and run.load_config().dataset == "s3://other/dlrm/datasets/d"


def test_an_old_record_of_a_run_the_moved_store_lacks_is_refused_in_one_line(tmp_path):
    old, new = str(tmp_path / "store"), str(tmp_path / "moved")
    _made(old, nights=1)
    _absolute(old)
    os.rename(old, new)
    fs, _ = filesystem(new)
    fs.rm(Store(new).run_uri(CHAMPION), recursive=True)
    with pytest.raises(UserError) as refused:
        registry.champion_to_load(Store(new).model_uri("ctr"))
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{new}/models/ctr/champion.json: the champion's run "
                                                      f"{old}/runs/{CHAMPION} lies outside the model's store {new}")
    assert "Fix: restore champion.json from a backup, or remove it" in message


def test_an_s3_store_copied_to_another_prefix_keeps_its_champion(s3_server):
    old, new = "s3://store/dlrm", "s3://store/restored/dlrm"
    _made(old, nights=2)
    _absolute(old)
    fs, _ = filesystem(old)
    fs.copy("store/dlrm", "store/restored/dlrm", recursive=True)
    fs.rm("store/dlrm", recursive=True)
    fs.invalidate_cache()

    store = Store(new)
    model = store.model_uri("ctr")
    champion = registry.champion_to_load(model)
    assert (champion.run, champion.dataset, champion.bundle) == (store.run_uri(CHAMPION), store.dataset_uri("ctr-d1"),
                                                                 f"{model}/bundles/{CHAMPION}")
    assert [h["run"] for h in registry.history(model)] == [store.run_uri(CHAMPION), store.run_uri("ctr-2026-11-02")]
    assert RunDir(champion.run).load_config().dataset == champion.dataset
    assert scoring.locate_checkpoint(ScoreConfig(model=model, inputs=["x"], out="o.parquet"))["run"] == champion.run


def test_an_s3_store_with_dot_segments_is_refused_in_one_line(s3_server):
    uri = "s3://store/a/../dlrm"
    expected = (f"store '{uri}' has '.' or '..' segments, which s3:// takes literally (a key segment named '..', not "
                "the folder above), so the store would refuse its own records. Fix: name it without them "
                "(s3://store/dlrm).")
    for attempt in (lambda: Store(uri).check(),
                    lambda: set_up(PipelineConfig(store=uri, model="ctr", window={"train_days": 2}),
                                   date=dt.date(2026, 11, 5)),
                    lambda: registry.champion_to_load(f"{uri}/models/ctr"),
                    lambda: gc.removals(GcConfig(store=uri, keep_nights=2))):
        with pytest.raises(UserError) as refused:
            attempt()
        assert str(refused.value) == expected
    assert s3_server.list_objects_v2(Bucket="store")["KeyCount"] == 0   # nothing was written


def test_a_night_planned_again_in_the_moved_store_finds_its_run(tmp_path):
    """A night's run is named by its training settings with the dataset's store-relative location: the night planned
    again in the store restored at another path (a re-run, or `dlrmflow run` resuming it) finds its run. A run made
    before (named by the hash of the dataset's absolute URI), in a store that has not moved, is still found."""
    from training.config import config_hash

    old, new, day = str(tmp_path / "store"), str(tmp_path / "restored" / "store"), dt.date(2026, 11, 5)

    def planned(root: str) -> tuple[RunDir, TrainConfig]:
        store = Store(root)
        plan = set_up(PipelineConfig(store=root, model="ctr", window={"train_days": 2}), store, day)
        dataset = store.dataset_uri("ctr-d5")
        return plan.training(dataset).run, plan.config.train.on(dataset).resolved()

    stores.dataset(old, "ctr-d5")
    run, trained = planned(old)
    legacy = RunDir(Store(old).run_uri(f"ctr-2026-11-05-{config_hash(trained)}"))
    assert run.name == f"ctr-2026-11-05-{config_hash(trained, Store(old))}" != legacy.name
    legacy.save_config(trained)   # a run the night made before the upgrade: resumed, or reused, in its folder
    assert planned(old)[0].uri == legacy.uri
    filesystem(old)[0].rm(legacy.uri, recursive=True)

    run.save_config(trained)
    (tmp_path / "restored").mkdir()
    os.rename(old, new)
    again, _ = planned(new)
    assert again.name == run.name and again.uri == Store(new).run_uri(run.name) and again.has_config()
