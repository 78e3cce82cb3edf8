"""A promotion's export runs in a child process: a child that dies (SIGABRT, as torch's C++ writer aborts on a full
disk) is a one-line UserError in the flow's process, which lives on; the partial bundle is removed, the promotion
lock released, champion.json and history.jsonl untouched, a ``failed`` line can be recorded at once and a re-run
promotes with a bundle that verifies. A full disk while exporting is NoSpace, in the child (a real tmpfs) and in
torch's writers (through Python files: an OSError, not an abort) (issue 34, section 4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from common.errors import UserError
from common.space import NoSpace, writing
from helpers.datasets import write_dataset
from helpers.processes import one_rank
from helpers.tmpfs import needs_tmpfs, run_on_tmpfs
from models import registry
from training import export
from training.export import CRASH, MODULE, WEIGHTS, export_verified, verify_bundle
from training.rundir import RunDir

DATE = "2026-11-03"


@pytest.fixture(scope="module")
def exportable(tmp_path_factory) -> tuple[Path, int]:
    """A store with a small dataset and a run with one complete checkpoint (step 1), made in this process (no
    torchrun): (store, step)."""
    from training import distributed
    from training.checkpoint import Checkpointer
    from training.config import TrainConfig
    from training.trainer import Trainer

    store = tmp_path_factory.mktemp("export") / "store"
    dataset = write_dataset(store / "datasets" / "d", {"train": 256, "val": 64})
    run = RunDir(str(store / "runs" / "r"))
    cfg = TrainConfig(dataset=str(dataset), data={"batch_size": 64}, max_steps=1, eval_split=None)
    run.save_config(cfg)
    with one_rank():
        Checkpointer(run).save(1, Trainer(cfg, distributed.init(60), run).state_dict(model_only=True))
    return store, 1


@pytest.fixture
def unsaved(tmp_path) -> tuple[dict, object]:
    """The bundle config of a run on a small dataset and its module (initial weights, no checkpoint needed)."""
    from training.config import TrainConfig
    from training.inference import DLRMInference

    dataset = write_dataset(tmp_path / "d", {"train": 64})
    run = RunDir(str(tmp_path / "run"))
    run.save_config(TrainConfig(dataset=str(dataset)))
    config = export.model_config(run, 1)
    return config, DLRMInference(config).eval()


def night(store: Path, step: int) -> dict:
    return {"run": str(store / "runs" / "r"), "step": step, "dataset": str(store / "datasets" / "d"),
            "vocab": str(store / "datasets" / "d" / "vocab"), "date": DATE, "window": [DATE],
            "metrics": {"auc": 0.75, "logloss": 0.45, "rows": 3000, "positives": 750, "base_logloss": 0.5623,
                        "calibration": 1.0, "fingerprint": "f"}}


@pytest.mark.slow   # two export children (~5 CPU-s each plainly; forked from the suite's warm launcher)
def test_a_crashing_export_child_leaves_the_flow_running_and_the_model_as_it_was(exportable, tmp_path, monkeypatch):
    store, step = exportable
    model = tmp_path / "models" / "ctr"
    bundle = model / registry.BUNDLES / "r"
    monkeypatch.setenv(CRASH, "abort")
    with pytest.raises(UserError) as caught:
        registry.record(str(model), registry.NightRecord(night(store, step), export=export_verified))
    message = str(caught.value)
    assert re.match(rf"the export of the serving bundle {bundle} \(run {store}/runs/r, step 1\) failed: its process "
                    r"was killed by signal 6 \(SIGABRT\); its partial bundle was removed \(free: \S+ \w*B of \S+ \w*B "
                    r"on /\S*\)\.", message), message
    assert message.endswith("running the same command again exports the bundle again.")
    # nothing half-done: no bundle or temporary folder, no champion, no history line, the lock released
    assert sorted(p.name for p in model.rglob("*")) == [registry.BUNDLES], list(model.rglob("*"))
    assert registry.record_failed(str(model), DATE, "compete", message.splitlines()[0], timeout_s=1)["decision"] \
        == registry.FAILED   # the flow's failure hook gets the lock at once

    monkeypatch.delenv(CRASH)
    line = registry.record(str(model), registry.NightRecord(
        night(store, step), export=export_verified))   # the re-run repairs
    assert line["decision"] == "first"
    champion = registry.load_champion(str(model))
    assert champion.bundle == str(bundle)
    assert verify_bundle(str(bundle), champion.run, champion.step) == champion.bundle_sha256
    assert [e["decision"] for e in registry.history(str(model))] == [registry.FAILED, "first"]
    assert not (model / registry.LOCK_FILE).exists()
    assert sorted(p.name for p in bundle.parent.iterdir()) == ["r"]
    assert export_verified(str(store / "runs" / "r"), step, str(bundle)) == champion.bundle_sha256   # kept


@pytest.mark.parametrize("full", [WEIGHTS, MODULE])
def test_torchs_writers_report_a_full_disk_as_no_space_instead_of_aborting(unsaved, tmp_path, full):
    """TorchScript's own file writer aborts the process on a full disk (std::terminate from a destructor); the
    bundle's files are written through Python files, so /dev/full's ENOSPC is an OSError, then NoSpace."""
    config, module = unsaved
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / full).symlink_to("/dev/full")
    with pytest.raises(NoSpace, match=rf"^no space left on device writing {folder} \(free: .*Fix: free space on"):
        with writing(folder, export.NO_SPACE_FIX):
            export._write(folder, config, module)


EXPORT = r"""
import json, os, sys, warnings
warnings.simplefilter("ignore")
from common.space import NoSpace
from training.export import export_verified
mount, run, step = sys.argv[1:4]
try:
    export_verified(run, int(step), os.path.join(mount, "bundle"))
    print(json.dumps({"error": None}))
except NoSpace as e:
    print(json.dumps({"error": str(e), "left": sorted(os.listdir(mount))}))
"""


@pytest.mark.slow   # a parent and an export child, each importing torch
@needs_tmpfs
def test_a_bundle_larger_than_the_free_space_is_refused_by_the_child_in_one_line(exportable, tmp_path):
    store, step = exportable
    mount = tmp_path / "small"
    got = run_on_tmpfs(EXPORT, mount, "64k", str(store / "runs" / "r"), str(step))
    assert got["left"] == [], got
    assert re.fullmatch(rf"not enough free space to write the serving bundle of {store}/runs/r step 1 at {mount}/bundle: "
                        r"it needs about \d+ KiB \(its weights four times, weights\.pt, model\.pt, model\.pt2 and raw\.pt2, "
                        r"and its vocabularies twice\), "
                        rf"free: 64 KiB of 64 KiB on {mount}\. Fix: free space on {mount} \(`dlrmflow gc` removes what "
                        r"the store no longer needs\), or export to a filesystem with room \(--store; `dlrmflow export "
                        r"--out`\)", got["error"]), got["error"]
