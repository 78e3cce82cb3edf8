"""A promotion killed with SIGKILL right after each of its writes in turn (bundle, champion.json, history line,
removal of the oldest bundle), then re-run, ends in the store an uninterrupted night leaves: the same
champion.json, history.jsonl and bundle files. Real processes and files, real bundles of a trained Criteo run;
the kill comes from ``models.registry``'s hook ($DLRMFLOW_CRASH_AFTER)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import time
import traceback
from pathlib import Path

import pytest

from helpers.fixtures import CRITEO_FAST
from common.errors import UserError
from models import registry
from training.export import export_verified, verify_bundle

pytestmark = pytest.mark.slow

NIGHTS = [("r-a", "2026-11-01", 0.70), ("r-b", "2026-11-02", 0.72), ("r-c", "2026-11-03", 0.75)]  # all promote

def candidate(store: Path, dataset: Path, step: int, run: str, date: str, auc: float) -> dict:
    return {"run": str(store / "runs" / run), "step": step, "dataset": str(dataset), "vocab": str(dataset / "vocab"),
            "date": date, "window": [date], "metrics": {"auc": auc, "logloss": 0.45, "rows": 3000, "positives": 750,
                                                        "base_logloss": 0.5623, "calibration": 1.0,
                                                        "fingerprint": "f"}}   # passes every promotion gate


def record(model: Path, night: dict, export=export_verified) -> dict:
    """The commit as the flow makes it (models.registry.record with the real export unless ``export``), in this
    process."""
    return registry.record(str(model), registry.NightRecord(
        night, score_champion=lambda c: dict(c.metrics), export=export))


def copying(bundle: Path):
    """An export that writes a copy of ``bundle`` (a real export of the same checkpoint: its manifest names the same
    run and step) and verifies it as ``export_verified`` does: night 3's bundle write without a ~3 CPU-second export
    each time the test needs the write, not the export, made again."""
    def export(run: str, step: int, out: str) -> str:
        partial = Path(f"{out}.copying")
        shutil.copytree(bundle, partial)
        partial.rename(out)
        return verify_bundle(out, run, step)
    return export


def snapshot(model: Path) -> dict:
    """Every file of the model folder: champion.json and history.jsonl parsed with the night's timestamps
    masked (a night killed before champion.json decides again, at another second), the rest by sha256, but
    model.pt and what hashes it (TorchScript's archive holds a random serialization id, so no two exports of a
    checkpoint are byte-identical; the test checks a re-run keeps the killed run's bundle)."""
    files = {}
    for path in sorted(p for p in model.rglob("*") if p.is_file()):
        name = str(path.relative_to(model))
        if name == registry.CHAMPION_FILE:
            champion = json.loads(path.read_text())
            assert champion["promoted_at"] == champion["line"]["at"]
            files[name] = {**champion, "promoted_at": "T", "line": {**champion["line"], "at": "T"},
                           "bundle_sha256": "S" if champion["bundle_sha256"] else None,
                           "bundle": os.path.relpath(champion["bundle"], model)}   # each case has its own copy
        elif name == registry.HISTORY_FILE:
            files[name] = [{**json.loads(line), "at": "T"} for line in path.read_text().splitlines()]
        elif path.name == "manifest.json":
            manifest = json.loads(path.read_text())
            files[name] = {**manifest, "files": {**manifest["files"], "model.pt": "M"}}
        elif path.name != "model.pt":
            files[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            files[name] = "M"
    return files


@pytest.fixture(scope="module")
def promoted_twice(criteo, trained_runs, tmp_path_factory):
    """A store whose model promoted r-a then r-b (their bundles exported), three copies of one trained run,
    and night 3's challenger r-c: (store, night 3)."""
    trained = trained_runs(criteo["dataset"], *CRITEO_FAST).path
    step = max(int(p.name) for p in (trained / "checkpoints").iterdir() if p.name.isdigit())
    store = tmp_path_factory.mktemp("kill") / "store"
    nights = []
    for run, date, auc in NIGHTS:
        shutil.copytree(trained, store / "runs" / run)
        nights.append(candidate(store, criteo["dataset"], step, run, date, auc))
    model = store / "models" / "ctr"
    for night in nights[:2]:
        assert record(model, night)["decision"] in registry.PROMOTING
    return store, nights[2]


@pytest.fixture(scope="module")
def uninterrupted(promoted_twice, tmp_path_factory) -> Path:
    """The model folder after night 3 recorded without a kill (its bundle a real export)."""
    store, night = promoted_twice
    reference = tmp_path_factory.mktemp("uninterrupted") / "reference"   # as deep in its folder as each case's
    shutil.copytree(store / "models", reference)
    assert record(reference / "ctr", night)["decision"] == "promoted"
    return reference / "ctr"


def killed(model: Path, night: dict, write: str, export, timeout_s: float = 120) -> int:
    """The commit in a forked process (this one's imports, so no second torch start-up) with the hook set to
    kill it after the write ``write``: its exit code (-SIGKILL when the hook fired)."""
    pid = os.fork()
    if pid == 0:   # the child: never returns into pytest
        code = 3
        try:
            os.environ[registry.CRASH_AFTER] = write
            record(model, night, export)
        except BaseException:
            traceback.print_exc()
            code = 4
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the promotion killed after {write} did not end in {timeout_s} s")


def test_killed_after_each_write_a_rerun_ends_as_an_uninterrupted_night(promoted_twice, uninterrupted, tmp_path):
    """The killed promotions write night 3's bundle as a copy of the uninterrupted night's (``copying``); each re-run
    exports with the real export, which must keep the bundle the killed run left."""
    store, night = promoted_twice
    expected = snapshot(uninterrupted)
    assert [e["decision"] for e in registry.history(str(uninterrupted))] == ["first", "promoted", "promoted"]
    assert sorted(p.name for p in (uninterrupted / registry.BUNDLES).iterdir()) == ["r-b", "r-c"]
    champion = registry.load_champion(str(uninterrupted))
    assert champion.bundle == str(uninterrupted / registry.BUNDLES / "r-c")
    assert champion.bundle_sha256 == hashlib.sha256(
        (uninterrupted / registry.BUNDLES / "r-c" / "manifest.json").read_bytes()).hexdigest()

    for write in registry.WRITES:
        models = tmp_path / write
        shutil.copytree(store / "models", models)
        model = models / "ctr"
        before = snapshot(model)
        assert killed(model, night, write, copying(uninterrupted / registry.BUNDLES / "r-c")) == -signal.SIGKILL, write
        cut = snapshot(model)
        assert cut not in (before, expected) or write == "prune", write   # cut short between two states
        exported = (model / registry.BUNDLES / "r-c" / "model.pt").read_bytes()
        lock = model / registry.LOCK_FILE   # the killed holder's: the re-run takes it over once it expires
        lock.write_text(json.dumps({**json.loads(lock.read_text()), "expires_at": "2000-01-01T00:00:00+00:00"}))
        decided = registry.decided(str(model), night["date"], night["run"])
        assert (decided is None) == (write == "bundle"), write   # the decision is made once champion.json is
        record(model, night)
        assert snapshot(model) == expected, write
        assert (model / registry.BUNDLES / "r-c" / "model.pt").read_bytes() == exported   # kept, not re-exported
        champion = registry.load_champion(str(model))
        assert verify_bundle(champion.bundle, champion.run, champion.step) == champion.bundle_sha256
        assert not (model / registry.LOCK_FILE).exists()


def test_a_rerun_exports_a_missing_or_altered_bundle_again(promoted_twice, uninterrupted, tmp_path):
    store, night = promoted_twice
    shutil.copytree(store / "models", tmp_path / "models")
    model = tmp_path / "models" / "ctr"
    record(model, night, copying(uninterrupted / registry.BUNDLES / "r-c"))   # the re-runs below export for real
    lines = registry.history(str(model))
    bundle = model / registry.BUNDLES / "r-c"
    with open(bundle / "weights.pt", "ab") as f:
        f.write(b"\0")
    with pytest.raises(UserError, match="weights.pt was altered"):
        verify_bundle(str(bundle), night["run"], night["step"])
    for damage in ("altered", "removed"):
        assert record(model, night) == lines[-1]
        champion = registry.load_champion(str(model))
        assert verify_bundle(champion.bundle, champion.run, champion.step) == champion.bundle_sha256, damage
        assert registry.history(str(model)) == lines
        shutil.rmtree(bundle)


def test_a_store_restored_elsewhere_keeps_a_champion_whose_bundle_verifies(promoted_twice, tmp_path):
    """The month benchmark's finding: a bundle's manifest names the run by the URI it had when it was written, so
    after a store moved every champion's bundle was refused ('the bundle is of run OLD, not of NEW'); the run is
    its name in the store."""
    store, _ = promoted_twice
    moved = tmp_path / "restored" / "store"
    shutil.copytree(store, moved)
    champion = registry.load_champion(str(moved / "models" / "ctr"))
    assert champion.run == str(moved / "runs" / "r-b") and champion.bundle.startswith(str(moved))
    assert verify_bundle(champion.bundle, champion.run, champion.step) == champion.bundle_sha256
    with pytest.raises(UserError, match="the bundle is of run .*r-b step"):   # still the one checkpoint it is of
        verify_bundle(champion.bundle, str(moved / "runs" / "r-a"), champion.step)
