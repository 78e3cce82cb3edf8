"""Serving bundles (`dlrmflow export`, training.export, `score --bundle`): a bundle loaded in a fresh process that
imports only torch/numpy/polars predicts what the DCP model predicts; the bundle of a checkpoint written by 2
ranks (row-wise shards, DCN, capped tables) equals the one of the same weights re-saved by 1 rank; an altered
file fails with a clear error; `score --bundle` scores raw rows as `score --run` does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

import feature_spec as fspec
from common.errors import UserError
from models.config import ScoreConfig
from models.scoring import score
from helpers.bundles import FILES, fake_bundle
from helpers.fixtures import CHILD_ENV as ENV
from helpers.paths import REPO
from helpers.processes import one_rank, run_dlrmflow
from helpers.runs import checkpoint_tensors
from training.checkpoint import Checkpointer
from training.export import MANIFEST, WEIGHTS, export_bundle, load_bundle, unsharded_state
from training.rundir import RunDir
from training.trainer import Trainer

# a bundle's two models (model.pt: TorchScript, the program of model.pt2) on a dataset's encoded split
PREDICT = """
import json
import numpy as np, torch
def predictions(bundle, dataset, split, dtypes):
    manifest = json.load(open(f"{bundle}/manifest.json"))
    config = json.load(open(f"{bundle}/model.json"))
    model = torch.jit.load(f"{bundle}/{manifest['module']}").eval()
    program = torch.export.load(f"{bundle}/{manifest['program']['file']}").module()
    cat = np.stack([np.fromfile(f"{dataset}/{split}/cat_{f}.bin", dtypes[f]) for f in config["categorical"]], 1)
    num = np.fromfile(f"{dataset}/{split}/numerical.bin", dtypes[config["numerical"][0]])
    num = num.reshape(len(cat), len(config["numerical"])).astype(np.float32)
    with torch.inference_mode():
        p = model(torch.from_numpy(cat.astype(np.int64)), torch.from_numpy(num))
        p2 = program(torch.from_numpy(cat.astype(np.int64)), torch.from_numpy(num))
    return {"p": p.tolist(), "p2": p2.tolist()}
"""
FRESH = PREDICT + """
import sys
import polars as pl
got = predictions(*sys.argv[1:4], json.loads(sys.argv[4]))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torchrec", "fbgemm_gpu", "training", "flows"))
print(json.dumps({**got, "loaded": loaded}))
"""


def _dtypes(dataset: Path) -> dict[str, str]:
    return {f: v.dtype for f, v in fspec.load(str(dataset)).feature_spec.items()}


def _bundle_predictions(bundle: Path, dataset: Path, split: str) -> dict[str, np.ndarray]:
    """``PREDICT`` in this process: the probabilities of the bundle's TorchScript model and program."""
    namespace: dict = {}
    exec(PREDICT, namespace)
    got = namespace["predictions"](str(bundle), str(dataset), split, _dtypes(dataset))
    return {k: np.array(v, np.float32) for k, v in got.items()}


def _fresh(bundle: Path, dataset: Path, split: str) -> dict:
    """Run ``FRESH`` outside the repository (nothing of dlrmflow importable): the dataset's encoded split
    through the bundle's model.pt; the probabilities and the modules of torchrec/fbgemm/dlrmflow it loaded."""
    dtypes = _dtypes(dataset)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    proc = subprocess.run([sys.executable, "-c", FRESH, str(bundle), str(dataset), split, json.dumps(dtypes)],
                          cwd="/", env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def criteo_bundle(criteo_run, tmp_path_factory) -> tuple[Path, dict]:
    """The bundle of ``criteo_run``'s evaluated checkpoint, exported once for this module: (folder, manifest)."""
    out = tmp_path_factory.mktemp("criteo-bundle") / "bundle"
    return out, export_bundle(str(criteo_run["run"]), criteo_run["evaluation"]["step"], str(out))


@pytest.mark.slow
def test_bundle_in_a_fresh_process_predicts_what_the_checkpoint_predicts(criteo, criteo_run, criteo_bundle):
    """Real Criteo rows: the torch.export program (model.pt2) and the deprecated TorchScript model, loaded where
    neither torchrec nor fbgemm is imported, give the DCP model's probabilities of the test split (777 rows, not the
    program's sample); the manifest records both, verified; a second export is a no-op."""
    step = criteo_run["evaluation"]["step"]
    out, manifest = criteo_bundle
    assert manifest["source"] == {"run": str(criteo_run["run"]), "step": step, "dataset": str(criteo["dataset"])}
    files = set(manifest["files"])
    assert {"weights.pt", "model.pt", "model.pt2", "model.json", "feature_spec.yaml"} <= files
    assert manifest["kind"] == "pt2" and manifest["program"]["file"] == "model.pt2"
    assert manifest["program"]["inputs"] == {"categorical": ["int64", 26], "numerical": ["float32", 13]}
    assert manifest["torchscript"]["deprecated"] and manifest["torchscript"]["written_until"] == "2027-06"
    assert manifest["program"]["max_abs_diff"] <= 1e-5 and manifest["torchscript"]["max_abs_diff"] <= 1e-5
    assert json.loads((out / "model.json").read_text())["input_spec"] == "criteo"   # the preset: nothing to copy
    assert {f"vocab/C{i}.parquet" for i in range(1, 27)} <= files
    assert (out / "vocab" / "C1.parquet").read_bytes() == (criteo["dataset"] / "vocab" / "C1.parquet").read_bytes()

    got = _fresh(out, criteo["dataset"], "test")
    assert got["loaded"] == []
    np.testing.assert_allclose(np.array(got["p"], np.float32), criteo_run["p"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.array(got["p2"], np.float32), np.array(got["p"], np.float32), rtol=0, atol=1e-6)

    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    assert export_bundle(str(criteo_run["run"]), step, str(out)) == manifest
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    assert load_bundle(str(out)).manifest == manifest


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_score_bundle_equals_score_run_on_raw_rows(criteo, criteo_run, tmp_path):
    """`dlrmflow score --bundle` (one process, the bundle's PT2 program, no deprecation warning) and `score --run`
    give the same probabilities on raw rows,
    including rows with values the model never saw; rows, positions and labels are the same Parquet."""
    out = tmp_path / "bundle"
    proc = run_dlrmflow("export", "--run", criteo_run["run"], "--out", out, cwd=REPO, env={**os.environ, **ENV},
                        timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = criteo["raw"]["test"].read_text().splitlines()[:200]
    unseen = ["\t".join(f[:14] + ["deadbeef"] + f[15:]) for f in (ln.split("\t") for ln in lines[:20])]
    raw = tmp_path / "raw.tsv"
    raw.write_text("\n".join(lines + unseen) + "\n")
    by_bundle = tmp_path / "bundle.parquet"
    proc = run_dlrmflow("score", "--bundle", out, "--input", raw, "--out", by_bundle, "--no-progress", cwd=REPO,
                        env={**os.environ, **ENV}, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "deprecated" not in proc.stdout + proc.stderr   # scored with the PT2 program: no TorchScript warning
    by_run = tmp_path / "run.parquet"
    score(ScoreConfig(run=str(criteo_run["run"]), inputs=[str(raw)], out=str(by_run), progress=False), env=ENV,
          on_line=lambda _: None)
    a, b = pl.read_parquet(by_bundle), pl.read_parquet(by_run)
    assert a.columns == b.columns == ["file", "row", "probability", "label"] and len(a) == 220
    assert a.drop("probability").equals(b.drop("probability"))
    np.testing.assert_allclose(a["probability"].to_numpy(), b["probability"].to_numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(a["probability"].to_numpy()[:200], criteo_run["p"][:200], rtol=0, atol=1e-6)


def test_altered_or_missing_files_fail_with_the_files_name(criteo, criteo_bundle, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(criteo_bundle[0], bundle)   # a copy of its own to damage
    assert load_bundle(str(bundle)).manifest == criteo_bundle[1]
    vocab = bundle / "vocab" / "C3.parquet"
    data = bytearray(vocab.read_bytes())
    data[len(data) // 2] ^= 1
    vocab.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"bundle file vocab/C3\.parquet was altered .* Fix: re-export"):
        load_bundle(str(bundle))
    with pytest.raises(UserError, match=r"bundle file vocab/C3\.parquet was altered"):
        score(ScoreConfig(bundle=str(bundle), inputs=[str(criteo["raw"]["test"])], out=str(tmp_path / "s.parquet"),
                          progress=False))
    assert not (tmp_path / "s.parquet").exists()
    (bundle / WEIGHTS).unlink()
    with pytest.raises(UserError, match=r"bundle file vocab/C3\.parquet|bundle file weights\.pt is missing"):
        load_bundle(str(bundle))
    (bundle / MANIFEST).unlink()
    with pytest.raises(UserError, match="no manifest.json there"):
        load_bundle(str(bundle))
    with pytest.raises(UserError, match="not model and bundle"):
        score(ScoreConfig(model="m", bundle=str(bundle), inputs=["x"], out="y"))




@pytest.mark.timeout(600)
def test_a_two_rank_checkpoint_exports_as_the_same_weights_resaved_by_one_rank(small_dataset, two_rank_run, tmp_path):
    """A DCN model with capped (hashed) tables trained on 2 ranks with row-wise shards: its bundle's weights
    file is byte-identical to the bundle of the same checkpoint loaded and re-saved by 1 rank (another plan,
    another world size), its tensors are the checkpoint's, and it predicts what the 2-rank model predicts."""
    dataset, run = small_dataset, two_rank_run
    assert "row_wise" in (run / "plan.txt").read_text()
    step = json.loads((run / "checkpoints" / "latest").read_text())["step"]
    assert len(list((run / "checkpoints" / str(step)).glob("*.distcp"))) == 2

    resaved = tmp_path / "run1"
    resaved.mkdir()
    shutil.copy(run / "config.yaml", resaved / "config.yaml")
    with one_rank():   # loaded by 1 rank (another plan), saved again; its predictions are the 2-rank model's
        trainer = Trainer.from_run(str(run), step)
        Checkpointer(RunDir(str(resaved))).save(step, trainer.state_dict(model_only=True))
        expected, _ = trainer.predict("test")
    assert len(list((resaved / "checkpoints" / str(step)).glob("*.distcp"))) == 1

    a, b = export_bundle(str(run), step, str(tmp_path / "b2")), export_bundle(str(resaved), step, str(tmp_path / "b1"))
    assert a["files"][WEIGHTS] == b["files"][WEIGHTS]
    assert a["files"]["model.pt"]["bytes"] == b["files"]["model.pt"]["bytes"]
    reference = {k.removeprefix("model.model."): v for k, v in checkpoint_tensors(run, step, tmp_path).items()
                 if k.startswith("model.model.")}
    state = unsharded_state(str(run), step)
    assert state.keys() == reference.keys()
    for key, value in reference.items():
        assert torch.equal(state[key], value), key
    assert state["sparse_arch.embedding_bag_collection.embedding_bags.t_c3.weight"].shape[0] == 120

    # the bundle's programs in this process (a fresh one's loading: the test above)
    bundle = load_bundle(str(tmp_path / "b2"))
    got = _bundle_predictions(tmp_path / "b2", dataset, "test")
    np.testing.assert_allclose(got["p"], expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["p2"], got["p"], rtol=0, atol=1e-6)
    assert bundle.manifest == a


def test_a_manifest_is_pinned_and_names_only_files_inside_its_bundle(tmp_path):
    """A champion's bundle loads only with the manifest champion.json pins; a manifest naming a file outside its
    folder (absolute, '..') is refused before anything is read or copied; model.json and model.pt must be listed."""
    bundle = tmp_path / "bundle"
    pinned = fake_bundle(bundle)
    assert load_bundle(str(bundle), manifest_sha256=pinned).config == {}
    fake_bundle(bundle, {**FILES, "vocab/C1.parquet": b"rows"})   # a manifest written again, listing another file
    with pytest.raises(UserError, match=rf"bundle's manifest.json is not the one champion.json pins \(sha256 \w+, "
                                        rf"pinned {pinned}\): the bundle was replaced .* Fix: find out who changed it"):
        load_bundle(str(bundle), manifest_sha256=pinned)
    (tmp_path / "secret").write_bytes(b"outside")
    for name in ["../secret", str(tmp_path / "secret"), "vocab/../../secret", "vocab//C1.parquet", "./model.pt"]:
        shutil.rmtree(bundle)
        fake_bundle(bundle, listed={name: b"outside"})
        with pytest.raises(UserError, match=r"manifest.json names the file .*, which is not a path inside the bundle "
                                            r"\(absolute, or with '..'\)\. Fix: re-export"):
            load_bundle(str(bundle))
    shutil.rmtree(bundle)
    fake_bundle(bundle, {"model.json": b"{}"})
    with pytest.raises(UserError, match=r"manifest.json lists no model.pt. Fix: re-export"):
        load_bundle(str(bundle))
