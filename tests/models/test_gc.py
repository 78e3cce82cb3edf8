"""The store's clean-up (issue 19, section 7: bounded store), ``models.gc``, on real stores written by the code's
own writers (tests/helpers/stores.py): it never removes a champion, its run, dataset or bundle; it removes the runs
and datasets beyond each model's last ``keep_nights`` nights and those no model names once they are old; it leaves
what a live lease covers; it sweeps stale ``.tmp-*`` leftovers and finished or abandoned work folders; a dry run
lists the same and removes nothing; a gc cut short leaves nothing that looks complete, and the next one finishes
it. The parsed parts follow the rule prune had (the union over models/*/ of their next windows, plus retain_days,
less the parts a running job's lease records), under the store lease. One case runs on S3 (moto's server)."""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import threading
import time
from pathlib import Path

import pytest

from common import lease
from common.atomic import write_atomic
from common.errors import UserError
from helpers import stores
from models import gc, registry
from models.config import GcConfig
from preprocessing.dated import fill_date
from preprocessing.work import FileParts, Mirror, WorkFolder, file_parts, release_dataset_lease, take_dataset_lease
from training.rundir import RunDir

OLD = 20   # days: older than keep_nights


def _store(root: str) -> dict:
    """Model ctr's five nights (night 1 made the champion, nights 2-5 kept it), each with its run and dataset;
    a manual run and dataset written long ago and recently; datasets no run uses, old and new."""
    made = {"store": root, "runs": {}, "datasets": {}}
    for i in range(1, 6):
        d = stores.dataset(root, f"ctr-d{i}")
        r = stores.run(root, f"ctr-2026-11-0{i}", d)
        stores.night(root, "ctr", f"2026-11-0{i}", r, d, auc=0.7 if i == 1 else 0.6)
    for name, days in (("manual-old", OLD), ("manual-new", 0)):
        stores.run(root, name, stores.dataset(root, f"{name}-d", days_old=OLD), days_old=days)
    stores.dataset(root, "orphan-old", days_old=OLD)
    stores.dataset(root, "orphan-new")
    return made


GONE = {("run", "ctr-2026-11-02"), ("run", "ctr-2026-11-03"), ("run", "manual-old"), ("dataset", "ctr-d2"),
        ("dataset", "ctr-d3"), ("dataset", "manual-old-d"), ("dataset", "orphan-old")}   # with keep_nights 2
KEPT_RUNS = {"ctr-2026-11-01", "ctr-2026-11-04", "ctr-2026-11-05", "manual-new"}
KEPT_DATASETS = {"ctr-d1", "ctr-d4", "ctr-d5", "manual-new-d", "orphan-new"}


def _names(root: Path, top: str) -> set[str]:
    return {p.name for p in (root / top).iterdir()} if (root / top).exists() else set()


def _removed(report: gc.Report) -> set[tuple[str, str]]:
    return {(r.kind, posixpath.basename(r.uri)) for r in report.removals}


def test_gc_keeps_the_champion_and_the_last_nights_and_removes_the_rest(tmp_path):
    root = tmp_path / "store"
    _store(str(root))
    models = stores.snapshot(str(root / "models"))
    champion = registry.load_champion(registry.model_uri(str(root), "ctr"))
    assert champion.run.endswith("ctr-2026-11-01")
    assert [e["decision"] for e in registry.history(registry.model_uri(str(root), "ctr"))] == ["first"] + ["kept"] * 4
    said = []
    report = gc.collect(GcConfig(store=str(root), keep_nights=2), say=said.append)
    assert _removed(report) == GONE
    assert all(r.bytes > 0 for r in report.removals) and report.bytes == sum(r.bytes for r in report.removals)
    by_name = {posixpath.basename(r.uri): r.reason for r in report.removals}
    assert by_name["ctr-2026-11-02"] == "model ctr's night 2026-11-02, before its last 2 nights"
    assert by_name["ctr-d3"] == "only removed runs use it (ctr-2026-11-03)"
    assert by_name["manual-old"].startswith("no model's last 2 nights name it; last written ")
    assert by_name["orphan-old"].startswith("no run uses it; last written ")
    # the champion (night 1, older than the last 2 nights), its run, dataset and bundle; models/ untouched
    assert _names(root, "runs") == KEPT_RUNS and _names(root, "datasets") == KEPT_DATASETS
    assert stores.snapshot(str(root / "models")) == models
    assert (Path(champion.bundle) / "manifest.json").is_file() and (Path(champion.dataset) / "_SUCCESS").is_file()
    assert not (root / "_trash").exists() and not (root / "_store.lease").exists()
    table = report.table().splitlines()
    assert table[0].split() == ["kind", "what", "size", "why"] and len(table) == len(GONE) + 2
    assert any(line.startswith("run ") and "runs/manual-old" in line for line in table)
    assert table[-1].startswith(f"gc of {root}: removed 7 item(s), ") and table[-1].endswith(" freed")
    again = gc.collect(GcConfig(store=str(root), keep_nights=2))
    assert again.removals == [] and again.table() == f"gc of {root}: nothing to remove"


def test_the_dataset_of_a_night_that_failed_its_data_checks_goes_with_the_nights_before_it(tmp_path):
    """The simulated month (benchmarks/month.py): such datasets (no run uses them) stayed keep_nights days of wall
    clock; now they go with the model's decided nights: kept while the night is among the last keep_nights."""
    root = str(tmp_path / "store")
    model = registry.model_uri(root, "ctr")
    failed = {}
    for i in range(1, 8):
        day = f"2026-11-0{i}"
        d = stores.dataset(root, f"ctr-d{i}")
        if i in (3, 7):   # the data gate failed these nights (with their datasets written)
            failed[i] = registry.record_data_failed(model, day, [day], {"failed": []}, "1 data check(s) failed",
                                                    dataset=d)
        else:
            stores.night(root, "ctr", day, stores.run(root, f"ctr-{day}", d), d, auc=0.7 if i == 1 else 0.6)
    report = gc.collect(GcConfig(store=root, keep_nights=2))
    why = {posixpath.basename(r.uri): r.reason for r in report.removals}
    assert why["ctr-d3"] == "model ctr's night 2026-11-03 (failed its data checks), before its last 2 nights"
    assert set(why) == {"ctr-2026-11-02", "ctr-2026-11-04", "ctr-d2", "ctr-d3", "ctr-d4"}
    assert _names(tmp_path / "store", "datasets") == {"ctr-d1", "ctr-d5", "ctr-d6", "ctr-d7"}   # d1: the champion's
    assert failed[7]["dataset"].endswith("ctr-d7")


def test_a_dry_run_removes_nothing_and_lists_what_a_gc_removes(tmp_path):
    root = tmp_path / "store"
    _store(str(root))
    before = stores.snapshot(str(root))
    dry = gc.collect(GcConfig(store=str(root), keep_nights=2, dry_run=True))
    assert stores.snapshot(str(root)) == before and not (root / "_store.lease").exists()
    assert dry.table().splitlines()[-1].startswith(f"gc of {root}: would remove 7 item(s), ")
    assert gc.removals(GcConfig(store=str(root), keep_nights=2)) == dry.removals
    assert gc.collect(GcConfig(store=str(root), keep_nights=2)).removals == dry.removals


def test_live_leases_keep_a_run_and_a_dataset_and_a_stale_one_does_not(tmp_path):
    root = str(tmp_path / "store")
    _store(root)
    training = RunDir(f"{root}/runs/ctr-2026-11-02")
    crashed = lease.acquire(f"{root}/runs/ctr-2026-11-03/{RunDir.LEASE}", "a crashed training", "run lease",
                            "run 3", 0, stale_s=0.05)
    time.sleep(0.1)   # expired: a crashed holder's
    held = take_dataset_lease(root, "orphan-old", [], owner="preprocessing of orphan-old")
    said = []
    try:
        with training.lease("training", owner="a training of night 2"):
            report = gc.collect(GcConfig(store=root, keep_nights=2), say=said.append)
    finally:
        release_dataset_lease(held, root)
    assert _removed(report) == GONE - {("run", "ctr-2026-11-02"), ("dataset", "ctr-d2"), ("dataset", "orphan-old")}
    assert "kept run ctr-2026-11-02: in use, its run lease is held by a training of night 2" in said
    assert "kept dataset orphan-old: being preprocessed, its lease is held by preprocessing of orphan-old" in said
    assert any(s.startswith("took over the run lease (removal by gc)") and "a crashed training" in s for s in said)
    assert training.is_complete() and not Path(crashed._lock.path).exists()


def test_a_run_that_comes_into_use_after_gc_listed_it_is_kept_with_its_dataset(tmp_path, monkeypatch):
    root = str(tmp_path / "store")
    _store(root)
    removals = gc._removals

    def list_then_train(*args, **kwargs):   # a training takes night 3's run right after gc listed it
        items = removals(*args, **kwargs)
        held.append(RunDir(f"{root}/runs/ctr-2026-11-03").lease("training", owner="a late training"))
        held[0].__enter__()
        return items

    held, said = [], []
    monkeypatch.setattr(gc, "_removals", list_then_train)
    try:
        report = gc.collect(GcConfig(store=root, keep_nights=2), say=said.append)
    finally:
        held[0].__exit__(None, None, None)
    assert _removed(report) == GONE - {("run", "ctr-2026-11-03"), ("dataset", "ctr-d3")}
    assert any(s.startswith("kept run ctr-2026-11-03: it came into use since gc listed it") for s in said)
    assert "kept dataset ctr-d3: a run that uses it was kept" in said
    assert RunDir(f"{root}/runs/ctr-2026-11-03").is_complete()


def test_stale_tmp_leftovers_and_done_work_folders_go_fresh_ones_stay(tmp_path):
    root = tmp_path / "store"
    stores.dataset(str(root), "done")
    stale = root / "runs" / "r" / "metrics.jsonl.tmp-999"
    fresh = root / "datasets" / "done" / "feature_spec.yaml.tmp-998"
    stale_dir = root / "models" / "ctr" / "bundles" / "r.tmp-997"
    for path in (stale, fresh, stale_dir / "weights.pt"):   # temporary names of writes (common.atomic), left
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    for path in (stale, stale_dir / "weights.pt", stale_dir):
        when = time.time() - gc.TMP_GRACE_S - 60
        os.utime(path, (when, when))
    mirror = Mirror.locate(None, str(root))
    works = {}
    for key, days in (("done", 0), ("pending", 0), ("abandoned", OLD)):   # done: its dataset is finished
        works[key] = WorkFolder.locate(None, mirror, key)
        works[key].create()
        write_atomic(works[key].vocab("c0"), b"counts")
        stores.age(str(works[key].root), days)
    report = gc.collect(GcConfig(store=str(root)))
    assert _removed(report) == {("tmp", stale.name), ("tmp", stale_dir.name), ("work", "done"), ("work", "abandoned")}
    assert {r.reason for r in report.removals if r.kind == "work"} >= {"its dataset is finished"}
    assert fresh.exists() and not stale.exists() and not stale_dir.exists() and (root / "runs" / "r").is_dir()
    assert _names(root, "_work") == {"pending"} and (root / "datasets" / "done" / "_SUCCESS").exists()


@pytest.mark.parametrize("cut_at", [1, 2, 7, 8, 12])   # a run's markers, its folder; a dataset's
def test_a_gc_cut_short_leaves_nothing_that_looks_complete_and_the_next_one_finishes(tmp_path, monkeypatch, cut_at):
    root = tmp_path / "store"
    _store(str(root))
    before = stores.snapshot(str(root))
    delete, calls = gc._delete, []

    def killed(fs, path, recursive=False):   # the process dies at the cut_at-th deletion
        calls.append(path)
        if len(calls) == cut_at:
            raise KeyboardInterrupt("killed")
        delete(fs, path, recursive)

    monkeypatch.setattr(gc, "_delete", killed)
    with pytest.raises(KeyboardInterrupt):
        gc.collect(GcConfig(store=str(root), keep_nights=2))
    _nothing_partial_looks_complete(root, before)
    monkeypatch.setattr(gc, "_delete", delete)
    report = gc.collect(GcConfig(store=str(root), keep_nights=2))   # what is left of the removals, and the trash
    assert {x for x in _removed(report) if x[0] != "trash"} <= GONE
    assert _names(root, "runs") == KEPT_RUNS and _names(root, "datasets") == KEPT_DATASETS
    assert not (root / "_trash").exists()


def _nothing_partial_looks_complete(root: Path, before: dict[str, int]) -> None:
    """Every run or dataset folder whose completion marker is there holds all it held; a checkpoint whose
    completion file is there, all its files."""
    now = stores.snapshot(str(root))
    for top, marker in (("runs", RunDir.DONE), ("datasets", "_SUCCESS"), ("_trash", None)):
        for folder in _names(root, top):
            mine = {k: v for k, v in now.items() if k.startswith(f"{top}/{folder}/")}
            was = {k: v for k, v in before.items() if k.startswith(f"{top}/{folder}/")}
            if top == "_trash":
                assert not any(RunDir.is_marker(k.split("/", 2)[2]) or k.endswith("/_SUCCESS") for k in mine), mine
            elif f"{top}/{folder}/{marker}" in mine:
                assert mine == was, folder
            elif top == "runs":
                assert not any(RunDir.is_marker(k.split("/", 2)[2]) for k in mine), mine


def test_an_unreadable_history_stops_the_gc_before_it_removes_anything(tmp_path):
    root = tmp_path / "store"
    _store(str(root))
    before = stores.snapshot(str(root))
    with open(root / "models" / "ctr" / registry.HISTORY_FILE, "a") as f:
        f.write("{not json\n")
    with pytest.raises(UserError, match=r"history.jsonl line 6 is not JSON .* Nothing was removed: what model ctr "
                                        r"needs is unknown"):
        gc.collect(GcConfig(store=str(root), keep_nights=2))
    assert {k: v for k, v in stores.snapshot(str(root)).items() if "history" not in k} == \
        {k: v for k, v in before.items() if "history" not in k}


def test_a_store_that_is_not_there_or_not_a_store_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist, so there is nothing to clean. Fix: check --store"):
        gc.collect(GcConfig(store=str(tmp_path / "none")))
    with pytest.raises(UserError, match="unsupported scheme 'gs'"):
        gc.collect(GcConfig(store="gs://bucket/x"))


def test_gc_on_s3_keeps_the_champion_dry_runs_the_same_and_survives_a_cut(s3_server, monkeypatch):
    root = "s3://store/gc"
    for i in range(1, 4):   # night 1 promoted, nights 2 and 3 kept it
        d = stores.dataset(root, f"ctr-d{i}")
        stores.night(root, "ctr", f"2026-11-0{i}", stores.run(root, f"ctr-2026-11-0{i}", d), d, 0.7 if i == 1 else 0.6)
    before = stores.snapshot(root)
    dry = gc.collect(GcConfig(store=root, keep_nights=1, dry_run=True))
    assert _removed(dry) == {("run", "ctr-2026-11-02"), ("dataset", "ctr-d2")} and stores.snapshot(root) == before
    delete, calls = gc._delete, []

    def killed(fs, path, recursive=False):   # dies after the run's markers went
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        delete(fs, path, recursive)

    monkeypatch.setattr(gc, "_delete", killed)
    with pytest.raises(KeyboardInterrupt):
        gc.collect(GcConfig(store=root, keep_nights=1))
    cut = stores.snapshot(root)
    run2 = {k for k in cut if k.startswith("runs/ctr-2026-11-02/")}
    assert run2 and not any(RunDir.is_marker(k.split("/", 2)[2]) for k in run2)   # nothing there looks finished
    monkeypatch.setattr(gc, "_delete", delete)
    report = gc.collect(GcConfig(store=root, keep_nights=1))
    assert _removed(report) == _removed(dry)
    left = stores.snapshot(root)
    assert not any(k.startswith(("runs/ctr-2026-11-02/", "datasets/ctr-d2/", "_store.lease")) for k in left)
    assert {k for k in left if k.startswith("models/")} == {k for k in before if k.startswith("models/")}
    assert any(k.startswith("runs/ctr-2026-11-01/") for k in left) and "datasets/ctr-d1/_SUCCESS" in left


# --- the parsed parts: the rule prune had ------------------------------------------------------------------------

DATE = dt.date(2026, 11, 20)
DAYS = [DATE - dt.timedelta(days=k) for k in range(10, -1, -1)]   # 11-10 .. 11-20


def _parts_store(tmp_path, retain_days: int = 0):
    template = str(tmp_path / "logs" / "{date}" / "part-0.tsv")
    store = tmp_path / "store"
    mirror = Mirror.locate(None, str(store))
    parts = {}
    for day in DAYS:   # each day's input file and its stored parts entry (what a parse leaves)
        (tmp_path / "logs" / day.isoformat()).mkdir(parents=True)
        (tmp_path / "logs" / day.isoformat() / "part-0.tsv").write_text("")
        parts[day] = FileParts.locate(mirror, f"key-{day.isoformat()}")
        parts[day].create({"uri": fill_date(template, day), "size": 0, "version": None})
    config = GcConfig(store=str(store), inputs=[template], retain_days=retain_days)
    night = gc.Night("short", DATE + dt.timedelta(days=1 - 2))   # model short trains on 2 days
    return config, night, template, parts


def _record(store: str, name: str, day: dt.date, first: dt.date) -> None:
    window_days = [(first + dt.timedelta(days=k)).isoformat() for k in range((day - first).days + 1)]
    registry.record(registry.model_uri(store, name), registry.NightRecord(
        {"run": f"{store}/runs/{name}-{day}", "step": 1, "dataset": "d", "vocab": "d/vocab", "date": day.isoformat(),
         "window": window_days, "metrics": {"auc": 0.7, "logloss": 0.5, "rows": 10}}))


def test_parts_of_any_models_window_and_of_a_running_job_are_kept(tmp_path):
    config, night, template, parts = _parts_store(tmp_path)
    _record(config.store, "short", DATE, DATE - dt.timedelta(days=2))            # this model: its night decides
    _record(config.store, "long", DATE - dt.timedelta(days=1), DATE - dt.timedelta(days=7))   # reads from 11-13
    _record(config.store, "long", DATE - dt.timedelta(days=3), DATE - dt.timedelta(days=9))   # an older night
    running = [parts[DATE - dt.timedelta(days=9)]]                         # a job preprocessing 11-11 right now
    held = take_dataset_lease(config.store, "backfill-key", running, owner="backfill of 11-11")
    said = []
    try:
        report = gc.collect(config, night, say=said.append)
    finally:
        release_dataset_lease(held, config.store)
    kept_days = {DATE - dt.timedelta(days=9)} | {d for d in DAYS if d >= DATE - dt.timedelta(days=7)}
    gone = [d for d in DAYS if d not in kept_days]
    assert [r.uri for r in report.removals] == [str(parts[d].root) for d in gone]
    assert {r.kind for r in report.removals} == {"parts"}
    assert report.removals[0].reason == f"input of {gone[0]}, before every window (parts kept from 2026-11-13): " \
        f"{fill_date(template, gone[0])}"
    assert file_parts(config.store) == sorted(fill_date(template, d) for d in kept_days)
    assert any("model long's window reads from 2026-11-13" in s for s in said)
    assert any("a running preprocessing job uses them" in s for s in said)
    assert not (tmp_path / "store" / "_store.lease").exists()


def test_parts_keep_retain_days_more_and_the_gc_waits_for_the_store_lease(tmp_path):
    config, night, template, parts = _parts_store(tmp_path, retain_days=1)
    _record(config.store, "long", DATE, DATE - dt.timedelta(days=5))               # reads from 11-15
    other = lease.acquire(f"{config.store}/_store.lease", "another prune", "store lease (prune)", config.store, 0, 60)
    threading.Timer(0.5, other.release).start()
    said = []
    report = gc.collect(config, night, say=said.append)   # waits for the other removal first
    assert any(s.startswith("waiting for the store lease (gc)") and "another prune" in s for s in said)
    assert file_parts(config.store) == sorted(fill_date(template, d) for d in DAYS if d >= DATE - dt.timedelta(days=6))
    assert len(report.removals) == 4


def test_parts_of_a_model_alone_and_without_a_night_or_templates(tmp_path):
    config, night, template, parts = _parts_store(tmp_path)
    assert gc.collect(config.model_copy(update={"inputs": []}), night).removals == []   # no templates: kept
    assert gc.collect(config).removals == []   # no night, no recorded window: nothing known, nothing removed
    report = gc.collect(config, night)   # no other model: before the next window (11-19)
    assert file_parts(config.store) == [fill_date(template, d) for d in DAYS if d >= DATE - dt.timedelta(days=1)]
    assert len(report.removals) == 9
    _record(config.store, "short", DATE, DATE)   # without a night: the recorded window (from 11-20)
    assert len(gc.collect(config).removals) == 1 and file_parts(config.store) == [fill_date(template, DATE)]


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` with its size and modification time (ns), symbolic links as links."""
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*")}


def test_gc_never_writes_through_a_symbolic_link_out_of_the_store(tmp_path):
    root = tmp_path / "store"
    _store(str(root))
    outside = tmp_path / "outside"
    victim = Path(stores.run(str(tmp_path / "elsewhere"), "victim", stores.dataset(str(tmp_path / "elsewhere"), "d"),
                             days_old=OLD))   # a run folder of another store: it looks removable
    (outside / "victim").mkdir(parents=True)
    (outside / "victim" / "keep.txt").write_text("mine")
    links = {root / "runs" / "evil": outside / "victim", root / "runs" / "victim": victim,
             root / "datasets" / "evil-d": outside, root / "runs" / "ctr-2026-11-02" / "checkpoints-out": outside}
    for link, target in links.items():
        link.symlink_to(target)
        os.utime(link, (time.time() - OLD * gc.DAY_S,) * 2, follow_symlinks=False)
    before, theirs = _tree(outside), _tree(victim)
    said = []
    report = gc.collect(GcConfig(store=str(root), keep_nights=2), say=said.append)
    assert _removed(report) == GONE   # the links are no runs or datasets of the store
    assert _tree(outside) == before and _tree(victim) == theirs   # nothing written, nothing removed out there
    assert (root / "runs" / "evil").is_symlink() and (root / "datasets" / "evil-d").is_symlink()
    for rel in ("runs/evil", "runs/victim", "datasets/evil-d"):
        assert any(line.startswith(f"skipped {rel}: a symbolic link (to ") for line in said), said
    # the lease writer refuses such a link itself: a run lease through runs/evil would land in outside/victim
    with pytest.raises(UserError, match=r"would be written through a symbolic link, into .*outside the store"):
        with RunDir(str(root / "runs" / "evil")).lease("a test"):
            pass
    assert _tree(outside) == before
    (root / "_trash").symlink_to(outside)
    with pytest.raises(UserError, match="_trash/ is a symbolic link"):
        gc.collect(GcConfig(store=str(root), keep_nights=2))
    assert _tree(outside) == before
