"""The bundle's torch.export (PT2) program (training.export.write_program, training.inference.StaticDLRM): for a
one-hot model (dot, calibrated; DCN with capped tables) and a list model (sum and mean pooled lists, read from a real
list dataset), the saved program gives the eager module's and the TorchScript module's probabilities at batch sizes
other than the one it was traced on; it loads in a fresh interpreter that imports only torch; a bundle without one
falls back to its TorchScript model with one deprecation warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import feature_spec as fspec
from helpers.bundles import fake_bundle
from helpers.datasets import write_list_dataset
from training.data import SplitBinaryDataset
from training.export import JIT_DEPRECATED, VERIFY_TOLERANCE, load_bundle, sample_inputs, write_program
from training.inference import DLRMInference

ONE_HOT = {"interaction": "dot", "embedding_dim": 8, "bottom_mlp": [16, 8], "top_mlp": [16, 1], "dcn_layers": 0,
           "dcn_rank": 0, "numerical": ["n0", "n1", "n2"], "table_rows": [50, 7, 300],
           "calibration": {"a": 1.3, "b": -0.2}}
DCN = {**ONE_HOT, "interaction": "dcn", "dcn_layers": 2, "dcn_rank": 4, "bottom_mlp": [8], "calibration": None}

FRESH = """
import json, sys
import torch
program, inputs = sys.argv[1:3]
model = torch.export.load(program).module()
args = [torch.tensor(a, dtype=torch.int64 if i < n else torch.float32) for i, a, n in
        [(i, a, len(json.loads(inputs)) - 1) for i, a in enumerate(json.loads(inputs))]]
with torch.inference_mode():
    p = model(*args)
ours = sorted(m for m in sys.modules if m.split(".")[0] in ("torchrec", "fbgemm_gpu", "training", "flows", "models",
                                                            "common", "feature_spec", "preprocessing"))
print(json.dumps({"p": p.tolist(), "loaded": ours}))
"""


def _module(config: dict, seed: int = 0) -> DLRMInference:
    torch.manual_seed(seed)
    module = DLRMInference(config).eval()
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.3)   # not the default init: every path (rows, MLPs) changes the output
    return module


def _scripted(module: DLRMInference):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", JIT_DEPRECATED)
        return torch.jit.script(module)


@pytest.fixture(scope="module")
def list_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lists") / "ds"
    root.mkdir()
    return write_list_dataset(root, {"train": 64, "val": 1000}, pooling={"hist": "mean"})


def _list_config(root: Path) -> dict:
    spec = fspec.load(str(root))
    return {**ONE_HOT, "numerical": spec.numerical_features,
            "table_rows": [spec.cardinality(f) for f in spec.categorical_features],
            "pooling": [spec.feature_spec[f].pooling or "sum" for f in spec.categorical_features]}


@pytest.mark.parametrize("config", [ONE_HOT, DCN], ids=["dot", "dcn"])
def test_one_hot_program_equals_eager_and_torchscript(config, tmp_path):
    module = _module(config)
    entry = write_program(module, False, tmp_path / "model.pt2")
    assert entry["file"] == "model.pt2" and entry["format"].startswith("torch.export (PT2)")
    assert entry["inputs"] == {"categorical": ["int64", 3], "numerical": ["float32", 3]}
    assert 0 <= entry["max_abs_diff"] <= VERIFY_TOLERANCE
    program, scripted = torch.export.load(str(tmp_path / "model.pt2")).module(), _scripted(module)
    with torch.no_grad():
        for rows in (1, 7, 1000):   # traced on 8 rows
            categorical, numerical = sample_inputs(module, False, rows, seed=100 + rows)
            want = module(categorical, numerical)
            assert want.shape == (rows,) and float(want.std() if rows > 1 else 1) > 1e-3
            np.testing.assert_allclose(program(categorical, numerical).numpy(), want.numpy(), rtol=0, atol=1e-6)
            np.testing.assert_allclose(program(categorical, numerical).numpy(),
                                       scripted(categorical, numerical).numpy(), rtol=0, atol=1e-6)


def test_list_program_equals_eager_and_torchscript_on_a_real_list_dataset(list_data, tmp_path):
    """Fixed-hotness (sum) and variable-length (mean, with empty lists) features, KJT batches as the scorer reads
    them, at 1, 7 and 1000 rows (traced on 8), int32 lengths as the loader gives them."""
    module = _module(_list_config(list_data))
    entry = write_program(module, True, tmp_path / "model.pt2")
    assert set(entry["inputs"]) == {"values", "lengths", "numerical"}
    program, scripted = torch.export.load(str(tmp_path / "model.pt2")).module(), _scripted(module)
    data = SplitBinaryDataset(str(list_data), "val")
    with torch.no_grad():
        for rows in (1, 7, 1000):
            kjt, numerical = (batch := next(iter(data.batches(rows)))).sparse_features, batch.dense_features
            values, lengths = kjt.values().to(torch.int64), kjt.lengths().to(torch.int64)
            if rows == 1000:
                assert (lengths == 0).any() and (lengths > 1).any()   # empty lists and longer ones
            want = module.forward_lists(values, lengths, numerical)
            np.testing.assert_allclose(program(values, lengths, numerical).numpy(), want.numpy(), rtol=0, atol=1e-6)
            np.testing.assert_allclose(scripted.forward_lists(values, lengths, numerical).numpy(), want.numpy(),
                                       rtol=0, atol=1e-6)


def test_program_loads_in_a_fresh_interpreter_with_only_torch(list_data, tmp_path):
    """Outside the repository (nothing of dlrmflow importable): the list and one-hot programs load with
    torch.export.load and predict what the eager modules predict; no module of torchrec or dlrmflow is loaded."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    for lists, module in ((True, _module(_list_config(list_data))), (False, _module(ONE_HOT))):
        write_program(module, lists, tmp_path / f"{lists}.pt2")
        inputs = sample_inputs(module, lists, rows=5, seed=9)
        with torch.no_grad():
            want = (module.forward_lists(*inputs) if lists else module(*inputs)).numpy()
        proc = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / f"{lists}.pt2"),
                               json.dumps([t.tolist() for t in inputs])], cwd="/", env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        assert got["loaded"] == []
        np.testing.assert_allclose(np.array(got["p"], np.float32), want, rtol=0, atol=1e-6)


def test_a_bundle_without_a_program_falls_back_to_torchscript_with_one_warning(tmp_path, monkeypatch):
    """A bundle written before the PT2 program (its manifest names none): the scorer's predictor is its TorchScript
    model's forward_lists, with one FutureWarning a process."""
    import training.export as export

    monkeypatch.setattr(export, "_WARNED", [])
    module = _module(ONE_HOT)
    path = tmp_path / "model.pt"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", JIT_DEPRECATED)
        torch.jit.save(torch.jit.script(module), str(path))
    fake_bundle(tmp_path / "old", {"model.json": b"{}", "model.pt": path.read_bytes()})
    bundle = load_bundle(str(tmp_path / "old"))
    with pytest.warns(FutureWarning, match=r"only a TorchScript model \(model.pt\), which is deprecated"):
        predict = bundle.predictor()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bundle.predictor()   # once a process
    values, lengths, numerical = sample_inputs(module, True, rows=6, seed=3)
    with torch.no_grad():
        np.testing.assert_allclose(predict(values, lengths, numerical).numpy(),
                                   module.forward_lists(values, lengths, numerical).numpy(), rtol=0, atol=1e-6)
