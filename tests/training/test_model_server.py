"""A bundle served by a model server over the Open Inference Protocol (training.model_server, `dlrmflow serve-model`:
KServe's Python model server) and its model repository (training.model_repo): tritonclient's HTTP client gets, from
the models the bundle's config.pbtxt files declare, `dlrmflow score --bundle`'s probabilities of raw Criteo rows (a
one-hot model: ``dlrm`` on their indices, ``dlrm_raw`` on the rows as the bundle's client.py reads them) and the
bundle's program's of a list model's batch (its kserve model in this process); a request without an input is refused
naming it; the server stops with its process group."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import sys
import time
import types
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
import yaml

import feature_spec as fspec
from helpers.datasets import write_list_dataset
from helpers.processes import free_port, process_group
from helpers.slow import slow_fixture
from training import raw_client
from training.data import SplitBinaryDataset
from training.export import _write, load_bundle
from training.inference import DLRMInference

ROWS = 60   # raw test rows scored (10 with an unseen C1)
ARCH = {"interaction": "dot", "embedding_dim": 8, "bottom_mlp": [16, 8], "top_mlp": [16, 1], "dcn_layers": 0,
        "dcn_rank": 0, "calibration": {"a": 1.3, "b": -0.2}}
V2 = {"int64": "INT64", "float32": "FP32", "float64": "FP64", "bool": "BOOL"}


def _bundle(folder: Path, dataset: str, lists: bool) -> Path:
    """A bundle of a random (calibrated) model of ``dataset``, written by the export's writer."""
    ds = fspec.load(dataset)
    features = list(ds.categorical_features)
    config = {**ARCH, "categorical": features, "numerical": list(ds.numerical_features), "tables": features,
              "table_rows": [ds.cardinality(f) for f in features],
              "pooling": [ds.feature_spec[f].pooling or "sum" for f in features], "lists": lists,
              "source": {"run": "r", "step": 1, "dataset": dataset}}
    torch.manual_seed(0)
    module = DLRMInference(config).eval()
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.3)
    folder.mkdir()
    _write(folder, config, module)
    return folder


@pytest.fixture(scope="module")
def bundles(criteo, tmp_path_factory) -> dict[str, Path]:
    """``{"one-hot": ..., "lists": ..., "rows": ...}``: bundles of the real Criteo dataset (with raw.pt2) and of a
    list dataset (sum and mean pooled lists; no input spec, so no raw.pt2), and 60 raw Criteo test rows."""
    tmp = tmp_path_factory.mktemp("served")
    lines = criteo["raw"]["test"].read_text().splitlines()[:ROWS]
    lines[::6] = ["\t".join(f[:14] + ["deadbeef"] + f[15:]) for f in (ln.split("\t") for ln in lines[::6])]
    (tmp / "rows.tsv").write_text("\n".join(lines) + "\n")
    lists = write_list_dataset(tmp / "lists", {"train": 16, "val": 64}, pooling={"hist": "mean"})
    return {"one-hot": _bundle(tmp / "one-hot", str(criteo["dataset"]), False),
            "lists": _bundle(tmp / "list-bundle", str(lists), True), "rows": tmp / "rows.tsv"}


@slow_fixture()
def served(bundles):
    """``serve(bundle) -> (client, process)``: `dlrmflow serve-model --bundle BUNDLE` on a free port, ready; every
    server started is stopped (its process group: TERM, then KILL) at the end, and found gone."""
    import tritonclient.http as http

    started = []

    def serve(bundle: Path):
        port = free_port()
        group = process_group([sys.executable, "-m", "flows.cli", "serve-model", "--bundle", str(bundle), "--port",
                               str(port)])
        proc = group.__enter__()
        started.append((group, proc))
        client = http.InferenceServerClient(f"127.0.0.1:{port}")
        deadline = time.time() + 120
        while True:
            try:
                if client.is_server_ready():
                    return client, proc
            except Exception:   # not listening yet
                pass
            assert proc.poll() is None, f"the model server exited with {proc.returncode}"
            assert time.time() < deadline, "the model server was not ready after 120 s"
            time.sleep(0.2)

    yield serve
    for group, proc in started:
        group.__exit__(None, None, None)
        assert proc.poll() is not None


def _infer(client, model: str, arrays: list[tuple[str, np.ndarray]]) -> np.ndarray:
    """tritonclient's HTTP ``infer`` of ``model`` on the named arrays (binary tensors): its ``probability``."""
    import tritonclient.http as http

    inputs = []
    for name, array in arrays:
        tensor = http.InferInput(name, list(array.shape), V2[str(array.dtype)])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return client.infer(model, inputs).as_numpy("probability")


def _declared(bundle: Path, model: str) -> list[tuple[str, str, list[int]]]:
    """The (name, data type, dims) of each input of the bundle's ``model_repository/<model>/config.pbtxt``, in order."""
    text = (bundle / "model_repository" / model / "config.pbtxt").read_text()
    assert 'backend: "python"' in text and (bundle / "model_repository" / model / "1" / "model.py").is_file()
    return [(n, t, [int(d) for d in dims.split(",")])
            for n, t, dims in re.findall(r'name: "(\w+)" data_type: TYPE_(\w+) dims: \[ ([-\d, ]+) \]',
                                         text.split("output [")[0])]


def _triton_python_backend(bundle: Path, model: str, arrays: list[tuple[str, np.ndarray]], monkeypatch) -> np.ndarray:
    """The answer of the repository's ``<model>/1/model.py`` to one request of ``arrays``, run as Triton's Python
    backend runs it (``initialize`` with the model folder, version and config as JSON; ``execute`` on requests),
    with a stand-in for the ``triton_python_backend_utils`` module Triton provides (Triton itself is not on PyPI)."""
    class Tensor:
        def __init__(self, name, array):
            self.name, self.array = name, array

        def as_numpy(self):
            return self.array

    utils = types.ModuleType("triton_python_backend_utils")
    utils.Tensor, utils.TritonModelException = Tensor, RuntimeError
    utils.InferenceResponse = lambda output_tensors: output_tensors
    utils.get_input_tensor_by_name = lambda request, name: request.get(name)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)
    folder = bundle / "model_repository" / model
    text = (folder / "config.pbtxt").read_text()
    config = {"name": model, "input": [{"name": n} for n, _, _ in _declared(bundle, model)],
              "output": [{"name": re.search(r'output \[\s*\{ name: "(\w+)"', text)[1]}],
              "parameters": {"program": {"string_value": re.search(r'key: "program" value: \{ string_value: "([\w.]+)"',
                                                                   text)[1]}}}
    spec = importlib.util.spec_from_file_location(f"triton_{model}", folder / "1" / "model.py")
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    instance = backend.TritonPythonModel()
    instance.initialize({"model_config": json.dumps(config), "model_repository": str(folder), "model_version": "1"})
    [[out]] = instance.execute([{n: Tensor(n, a) for n, a in arrays}])
    assert out.name == "probability"
    return out.as_numpy()


def test_infra_inference_service_runs_serve_model():
    """infra/kserve/inferenceservice.yaml: its container's command is a `dlrmflow serve-model` this CLI parses, on
    the folder KServe's storage initializer fills, with the bundle's place in STORAGE_URI."""
    from flows.cli import build_parser

    doc = yaml.safe_load((Path(__file__).parents[2] / "infra" / "kserve" / "inferenceservice.yaml").read_text())
    [container] = doc["spec"]["predictor"]["containers"]
    assert doc["kind"] == "InferenceService" and container["name"] == "kserve-container"
    assert container["command"][:2] == ["dlrmflow", "serve-model"]
    args = build_parser(only="serve-model").parse_args(container["command"][1:])
    assert (args.bundle, args.port) == ("/mnt/models", container["ports"][0]["containerPort"])
    assert {e["name"]: e["value"] for e in container["env"]}["STORAGE_URI"].startswith("s3://")


def test_a_model_server_answers_tritonclient_with_dlrmflow_scores(bundles, served, tmp_path, monkeypatch):
    from models.config import ScoreConfig
    from models.scoring import score
    from preprocessing.apply import SCORE_SPLIT, encode_inputs
    from tritonclient.utils import InferenceServerException

    one_hot, path = bundles["one-hot"], bundles["rows"]
    out = tmp_path / "scores.parquet"
    score(ScoreConfig(bundle=str(one_hot), inputs=[str(path)], out=str(out), progress=False), on_line=lambda _: None)
    want = pl.read_parquet(out).sort("row")["probability"].to_numpy()
    assert len(want) == ROWS and want.std() > 1e-3

    bundle = load_bundle(str(one_hot))
    encoded = encode_inputs(str(one_hot), [str(path)], tmp_path / "encoded", spec=bundle.input_spec, progress=False)
    batch = next(iter(SplitBinaryDataset(encoded.dataset, SCORE_SPLIT).batches(ROWS)))
    categorical = batch.sparse_features.values().to(torch.int64).view(len(bundle.config["categorical"]), -1).t()
    indices = [("categorical", categorical.contiguous().numpy()), ("numerical", batch.dense_features.numpy())]
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, fieldnames=list(fspec.CRITEO_COLUMNS), delimiter="\t", quoting=csv.QUOTE_NONE))
    raw = raw_client.Client(str(one_hot)).tensors(rows)
    raw = [(n, t.numpy()) for n, t in zip(("values", "lengths", "missing", "numerical"), raw)]

    client, proc = served(one_hot)
    for model, arrays in (("dlrm", indices), ("dlrm_raw", raw)):
        # the repository's config.pbtxt, the server's metadata and the arrays sent agree on names, types and widths
        declared = _declared(one_hot, model)
        metadata = client.get_model_metadata(model)
        assert [(i["name"], i["datatype"], i["shape"]) for i in metadata["inputs"]] == declared
        assert [n for n, _ in arrays] == [n for n, _, _ in declared]
        for (_, array), (_, datatype, dims) in zip(arrays, declared):
            assert V2[str(array.dtype)] == datatype and array.ndim == len(dims)
            assert all(d in (-1, s) for d, s in zip(dims, array.shape))
        np.testing.assert_allclose(_infer(client, model, arrays), want, rtol=0, atol=1e-6, err_msg=model)
    np.testing.assert_allclose(_infer(client, "dlrm", [(n, a[:7]) for n, a in indices]), want[:7], rtol=0, atol=1e-6)
    with pytest.raises(InferenceServerException, match="no input 'numerical'"):
        _infer(client, "dlrm", indices[:1])
    for model, arrays in (("dlrm", indices), ("dlrm_raw", raw)):   # the repository's model.py, as Triton runs it
        np.testing.assert_allclose(_triton_python_backend(one_hot, model, arrays, monkeypatch), want, rtol=0, atol=1e-6)

    lists = bundles["lists"]   # a list model: its program's (values, lengths, numerical), in this process
    import kserve
    from training.model_server import bundle_models

    data = SplitBinaryDataset(str(load_bundle(str(lists)).config["source"]["dataset"]), "val")
    kjt, numerical = (batch := next(iter(data.batches(64)))).sparse_features, batch.dense_features
    values, lengths = kjt.values().to(torch.int64), kjt.lengths().to(torch.int64)
    assert (lengths == 0).any() and (lengths > 1).any()   # empty lists and longer ones
    with torch.inference_mode():
        want = load_bundle(str(lists)).predictor()(values, lengths, numerical).numpy()
    arrays = [("values", values.numpy()), ("lengths", lengths.numpy()), ("numerical", numerical.numpy())]
    assert [(n, V2[str(a.dtype)]) for n, a in arrays] == [(n, t) for n, t, _ in _declared(lists, "dlrm")]
    [model] = bundle_models(str(lists))
    request = kserve.InferRequest("dlrm", [kserve.InferInput(n, list(a.shape), V2[str(a.dtype)], a.tolist())
                                           for n, a in arrays])
    got = model.predict(request).outputs[0]
    assert (got.name, got.datatype) == ("probability", "FP32")
    np.testing.assert_allclose(got.as_numpy(), want, rtol=0, atol=1e-6)
