"""The bundle's torch.export (PT2) program (training.export.write_program, training.inference.StaticDLRM): for a
one-hot model (dot, calibrated; DCN with capped tables) and a list model (sum and mean pooled lists, read from a real
list dataset), the saved program gives the eager module's and the TorchScript module's probabilities at batch sizes
other than the one it was traced on; it loads in a fresh interpreter that imports only torch; a bundle without one
falls back to its TorchScript model with one deprecation warning.

The raw program (``raw.pt2``, training.raw_inputs): for a one-hot model of real Criteo rows (the criteo preset: hex
ids, threshold 2, log1p) and a list model preprocessed from raw CSV rows (hex, int, string and dtype-less
vocabularies with frequency thresholds, hashed strings, ints and hex lists, a capped table, fixed-hotness, max_hotness
and variable lists, log1p/log3p/identity), it computes the very indices and numericals `dlrmflow score` encodes, and
in a fresh interpreter where nothing of dlrmflow or TorchRec can be imported, fed by the bundle's client.py, it gives
`dlrmflow score --bundle`'s probabilities at batch 1, 7 and 60."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
import yaml

import feature_spec as fspec
from helpers.bundles import fake_bundle
from helpers.datasets import write_list_dataset
from training.data import SplitBinaryDataset
from training import raw_client
from training.export import JIT_DEPRECATED, VERIFY_TOLERANCE, _write, load_bundle, sample_inputs, write_program
from training.inference import DLRMInference, StaticDLRM
from training.raw_inputs import TRANSFORMS, RawDLRM, raw_plan, splitmix64

ONE_HOT = {"interaction": "dot", "embedding_dim": 8, "bottom_mlp": [16, 8], "top_mlp": [16, 1], "dcn_layers": 0,
           "dcn_rank": 0, "numerical": ["n0", "n1", "n2"], "table_rows": [50, 7, 300],
           "calibration": {"a": 1.3, "b": -0.2}}
DCN = {**ONE_HOT, "interaction": "dcn", "dcn_layers": 2, "dcn_rank": 4, "bottom_mlp": [8], "calibration": None}

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


@pytest.fixture(scope="module")
def programs(list_data, tmp_path_factory) -> dict[bool, tuple[DLRMInference, Path, dict]]:
    """The list model's (True) and the ONE_HOT model's (False) programs, each written once for this module's tests:
    (eager module, program file, write_program's entry)."""
    found = {}
    for lists, module in ((True, _module(_list_config(list_data))), (False, _module(ONE_HOT))):
        path = tmp_path_factory.mktemp("lists" if lists else "one-hot") / "model.pt2"
        found[lists] = (module, path, write_program(module, lists, path))
    return found


@pytest.mark.parametrize("config", [ONE_HOT, DCN], ids=["dot", "dcn"])
def test_one_hot_program_equals_eager_and_torchscript(config, programs, tmp_path):
    if config is ONE_HOT:
        module, path, entry = programs[False]
    else:
        module, path = _module(config), tmp_path / "model.pt2"
        entry = write_program(module, False, path)
    assert entry["file"] == "model.pt2" and entry["format"].startswith("torch.export (PT2)")
    assert entry["inputs"] == {"categorical": ["int64", 3], "numerical": ["float32", 3]}
    assert 0 <= entry["max_abs_diff"] <= VERIFY_TOLERANCE
    program, scripted = torch.export.load(str(path)).module(), _scripted(module)
    with torch.no_grad():
        for rows in (1, 7, 1000):   # traced on 8 rows
            categorical, numerical = sample_inputs(module, False, rows, seed=100 + rows)
            want = module(categorical, numerical)
            assert want.shape == (rows,) and float(want.std() if rows > 1 else 1) > 1e-3
            np.testing.assert_allclose(program(categorical, numerical).numpy(), want.numpy(), rtol=0, atol=1e-6)
            np.testing.assert_allclose(program(categorical, numerical).numpy(),
                                       scripted(categorical, numerical).numpy(), rtol=0, atol=1e-6)


def test_list_program_equals_eager_and_torchscript_on_a_real_list_dataset(list_data, programs):
    """Fixed-hotness (sum) and variable-length (mean, with empty lists) features, KJT batches as the scorer reads
    them, at 1, 7 and 1000 rows (traced on 8), int32 lengths as the loader gives them."""
    module, path, entry = programs[True]
    assert set(entry["inputs"]) == {"values", "lengths", "numerical"}
    program, scripted = torch.export.load(str(path)).module(), _scripted(module)
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


# ---- the raw program -------------------------------------------------------------------------------------------
ONE_HOT_RAW = {"h": {"dtype": "hex", "frequency_threshold": 3}, "i": {"dtype": "int"},
               "s": {"dtype": "str", "frequency_threshold": 2}, "sh": {"dtype": "str", "hash_buckets": 17},
               "ih": {"dtype": "int", "hash_buckets": 11}, "u": {}}   # u: no dtype, so a string in CSV
LISTS_RAW = {"tags": {"dtype": "str", "hotness": 3, "sep": "|", "pooling": "mean"},
             "hist": {"dtype": "int", "max_hotness": 4, "sep": "|", "pooling": "mean"},
             "hx": {"dtype": "hex", "hotness": "variable", "sep": "|", "hash_buckets": 23}}
HEXES = ("deadbeef", "00000001", "abcdef12", "ffffffff", "12")
SCORED = 60   # rows scored: neither the raw program's traced batch (8) nor 1 or 7

# outside the repository, with dlrmflow's packages, torchrec and fbgemm_gpu unimportable: for each (bundle, rows file,
# its columns or None: a header) given, the bundle's client.py reads the rows and its raw.pt2 scores them at batch 1
# (the first rows), 7 and all of them; then each (program, its inputs) given, loaded with torch.export.load, predicts
# (one interpreter for both: a torch start-up costs ~4 CPU-seconds)
FRESH_RAW = """
import csv, importlib.abc, json, sys
BLOCKED = {"torchrec", "fbgemm_gpu", "training", "models", "preprocessing", "feature_spec", "common", "flows",
           "nightly", "tuning", "synthetic"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not importable here")
sys.meta_path.insert(0, Block())
import torch
found = {}
for bundle, path, columns in json.loads(sys.argv[1]):
    rows = list(csv.DictReader(open(path, newline=""), fieldnames=columns, delimiter="\\t" if columns else ",",
                               quoting=csv.QUOTE_NONE if columns else csv.QUOTE_MINIMAL))
    sys.path.insert(0, bundle)
    import client
    c = client.Client(bundle)
    program = torch.export.load(f"{bundle}/raw.pt2").module()
    with torch.inference_mode():
        one = [float(program(*c.tensors(rows[k:k + 1]))[0]) for k in range(5)]
        seven = torch.cat([program(*c.tensors(rows[k:k + 7])) for k in range(0, len(rows), 7)]).tolist()
        every = program(*c.tensors(rows)).tolist()
    found[bundle] = {"one": one, "seven": seven, "all": every}
    del sys.modules["client"], sys.path[0]
found["programs"] = []
for program, inputs in json.loads(sys.argv[2]):
    model = torch.export.load(program).module()
    args = [torch.tensor(a, dtype=torch.int64 if i < len(inputs) - 1 else torch.float32) for i, a in enumerate(inputs)]
    with torch.inference_mode():
        found["programs"].append(model(*args).tolist())
found["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print(json.dumps(found))
"""


def _raw_rows(g: np.random.Generator, n: int, unseen: bool) -> list[dict[str, str]]:
    """CSV rows of every feature of ``ONE_HOT_RAW`` and ``LISTS_RAW``, about 8% of fields missing (empty);
    ``unseen``: values no training row has too (a new hex id, int, string, list element)."""
    def gone(text: str) -> str:
        return "" if g.random() < 0.08 else text

    def joined(items: list[str]) -> str:
        return "" if g.random() < 0.1 else "|".join(items)

    out = []
    for _ in range(n):
        out.append({
            "label": str(int(g.random() < 0.3)), "n1": gone(f"{g.normal(3, 10):.3f}"),
            "n2": gone(f"{g.normal(0, 4):.2f}"), "n3": gone("nan" if g.random() < 0.05 else f"{g.normal(0, 2):.4f}"),
            "h": gone("cafe0000" if unseen and g.random() < 0.3 else str(g.choice(HEXES))),
            "i": gone(str(int(g.integers(-5, 60 if unseen else 40)))),
            "s": gone(str(g.choice(["a", "bb", "c c", "déjà", "zz", *(["new"] if unseen else [])]))),
            "sh": gone(f"s{int(g.integers(0, 30))}"), "ih": gone(str(int(g.integers(-3, 1000)))),
            "u": gone(str(int(g.integers(0, 9)))),
            "tags": joined([str(g.choice(["x", "y", "z", "w", *(["q"] if unseen else [])])) if g.random() > 0.05
                            else "" for _ in range(3)]),   # an empty element: a missing one
            "hist": joined([str(int(g.integers(0, 20))) if g.random() > 0.05 else ""
                            for _ in range(int(g.integers(1, 8)))]),   # longer than max_hotness 4 too
            "hx": joined([f"{int(g.integers(0, 1 << 32)):x}" for _ in range(int(g.integers(1, 4)))])})
    return out


def _write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.fixture(scope="module")
def raw_bundles(criteo, tmp_path_factory) -> dict[str, tuple[Path, Path, list[str] | None]]:
    """``{"one-hot": ..., "lists": ...}``: (bundle, rows, their columns: None for a header) of bundles written by the
    export's writer for random models (calibrated; table ``i`` capped at 7 rows): of the real Criteo dataset (``rows``:
    60 of its raw test rows, 10 with an unseen C1), and of a dataset preprocessed from 400 raw CSV rows with every
    kind of feature (``rows``: 60 more CSV rows, with unseen values)."""
    from preprocessing import PreprocessConfig, run as preprocess

    tmp, g = tmp_path_factory.mktemp("raw"), np.random.default_rng(0)
    lines = criteo["raw"]["test"].read_text().splitlines()[:SCORED]
    lines[::6] = ["\t".join(f[:14] + ["deadbeef"] + f[15:]) for f in (ln.split("\t") for ln in lines[::6])]
    (tmp / "criteo.tsv").write_text("\n".join(lines) + "\n")
    train = _write_csv(tmp / "train.csv", _raw_rows(g, 400, unseen=False))
    found = {"one-hot": (tmp / "bundle-one-hot", tmp / "criteo.tsv", list(fspec.CRITEO_COLUMNS)),
             "lists": (tmp / "bundle-lists", _write_csv(tmp / "score.csv", _raw_rows(g, SCORED, unseen=True)), None)}
    spec = tmp / "lists.yaml"
    categorical = {**ONE_HOT_RAW, **LISTS_RAW}
    spec.write_text(yaml.safe_dump({
        "feature_spec": {"label": {}, "n1": {}, "n2": {"transform": "log3p"}, "n3": {"transform": "identity"},
                         **categorical},
        "channel_spec": {"label": ["label"], "numerical": ["n1", "n2", "n3"], "categorical": list(categorical)},
        "metadata": {"name": "lists", "preprocessing": {"split": "ordered:train=0.9,val=0.1"}}}))
    lists = preprocess(PreprocessConfig(inputs=[str(train)], spec=str(spec), out=str(tmp / "store"), progress=False))
    for name, dataset in (("one-hot", str(criteo["dataset"])), ("lists", lists)):
        ds = fspec.load(dataset)
        features = list(ds.categorical_features)
        config = {**ONE_HOT, "categorical": features, "numerical": list(ds.numerical_features), "tables": features,
                  "table_rows": [min(ds.cardinality(f), 7) if f == "i" else ds.cardinality(f) for f in features],
                  "pooling": [ds.feature_spec[f].pooling or "sum" for f in features], "lists": name == "lists",
                  "source": {"run": "r", "step": 1, "dataset": dataset}}
        bundle = found[name][0]
        bundle.mkdir()
        manifest = _write(bundle, config, _module(config))
        assert manifest["raw"]["file"] == "raw.pt2" and manifest["raw"]["max_abs_diff"] <= VERIFY_TOLERANCE
        assert {"raw.pt2", "raw.json", "client.py"} <= set(manifest["files"])
    return found


def _read_rows(path: Path, columns: list[str] | None) -> list[dict[str, str]]:
    """Rows of a CSV with a header (``columns`` None) or of a headerless Criteo TSV, as the client takes them."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f, fieldnames=columns, delimiter="\t" if columns else ",",
                                   quoting=csv.QUOTE_NONE if columns else csv.QUOTE_MINIMAL))


def test_the_raw_programs_rules_are_preprocessings():
    """splitmix64, the client's string key and the transforms' names: preprocessing's (training may not import
    preprocessing, so they are written twice and pinned here)."""
    from feature_spec.model import TRANSFORMS as SPEC_TRANSFORMS
    from preprocessing.hashing import hash_strings
    from preprocessing.hashing import splitmix64 as preprocessing_splitmix64

    edges = np.array([0, 1, -1, 2**63 - 1, -2**63, 0xdeadbeef, 2**32 - 1], np.int64)
    ints = np.concatenate([edges, np.random.default_rng(1).integers(-2**63, 2**63 - 1, 1000, dtype=np.int64)])
    np.testing.assert_array_equal(splitmix64(torch.from_numpy(ints)).numpy().view(np.uint64),
                                  preprocessing_splitmix64(ints.view(np.uint64)))
    words = ["", "a", "déjà", "c c", "x" * 300]
    assert [raw_client.string_key(w) for w in words] == hash_strings(words).view(np.int64).tolist()
    assert set(TRANSFORMS) == set(SPEC_TRANSFORMS)


def test_the_raw_program_encodes_raw_rows_as_dlrmflow_score_does(raw_bundles, tmp_path):
    """The eager raw module's indices (after max_hotness and missing fixed-hotness lists) and numericals equal,
    exactly, what `dlrmflow score` encodes the same rows to (``encode_inputs`` with the bundle's vocabularies)."""
    from preprocessing.apply import SCORE_SPLIT, encode_inputs

    for name, (folder, path, columns) in raw_bundles.items():
        rows = _read_rows(path, columns)
        bundle = load_bundle(str(folder))
        encoded = encode_inputs(str(bundle.folder), [str(path)], tmp_path / name, spec=bundle.input_spec,
                                progress=False)
        assert encoded.rows == SCORED and encoded.bad_rows == 0
        spec = fspec.load(bundle.input_spec) if "/" in bundle.input_spec else fspec.preset(bundle.input_spec)
        plan, keys = raw_plan(bundle.folder, bundle.config, spec)
        module = _module({**ONE_HOT, **{k: bundle.config[k] for k in ("numerical", "table_rows", "pooling")}})
        raw = RawDLRM(StaticDLRM(module), plan, keys)
        values, lengths, missing, numerical = raw_client.Client(bundle.folder).tensors(rows)
        with torch.no_grad():
            np.testing.assert_array_equal(raw.numericals(numerical).numpy(), SplitBinaryDataset(
                encoded.dataset, SCORE_SPLIT).batches(SCORED).__next__().dense_features.numpy())
            offsets, table = raw.model.layout(lengths, len(values), SCORED)
            ids = raw.indices(values, table, missing).tolist()
        kjt = next(iter(SplitBinaryDataset(encoded.dataset, SCORE_SPLIT).batches(SCORED))).sparse_features
        found = 0
        for f, c in enumerate(plan["categorical"]):
            want = kjt[c["name"]]
            got = [ids[offsets[b]:offsets[b + 1]][:c["max_hotness"] or None] or [0] * (c["hotness"] or 0)
                   for b in range(f * SCORED, (f + 1) * SCORED)]
            assert [len(x) for x in got] == want.lengths().tolist(), c["name"]
            assert sum(got, []) == want.values().tolist(), c["name"]
            found += any(sum(got, []))
        assert found >= 0.8 * len(plan["categorical"])   # most features have kept values: not all missing or unseen
        assert missing.any() and torch.isnan(numerical).any()


def test_the_programs_in_a_fresh_interpreter_with_only_torch_score_as_dlrmflow_score(raw_bundles, programs, tmp_path):
    """`dlrmflow score --bundle` on raw rows (unseen values, missing fields and list elements) and the bundle's
    raw.pt2 fed by its client.py, where only torch is importable, at batch 1, 7 and 60 (traced on 8): the same
    probabilities within 1e-6, for the one-hot (real Criteo) and the list model. In the same interpreter (outside
    the repository, nothing of dlrmflow importable) the list and one-hot model programs (model.pt2) load with
    torch.export.load and predict what the eager modules predict; no module of torchrec or dlrmflow is loaded."""
    from models.config import ScoreConfig
    from models.scoring import score

    given_programs, wants = [], []
    for lists, (module, path, _) in programs.items():
        inputs = sample_inputs(module, lists, rows=5, seed=9)
        with torch.no_grad():
            wants.append((module.forward_lists(*inputs) if lists else module(*inputs)).numpy())
        given_programs.append([str(path), [t.tolist() for t in inputs]])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    given = [[str(bundle), str(path), columns] for bundle, path, columns in raw_bundles.values()]
    proc = subprocess.run([sys.executable, "-I", "-c", FRESH_RAW, json.dumps(given), json.dumps(given_programs)],
                          cwd="/", env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["loaded"] == [] and len(got["programs"]) == len(wants) == 2
    for p, want in zip(got["programs"], wants):
        np.testing.assert_allclose(np.array(p, np.float32), want, rtol=0, atol=1e-6)
    for bundle, path, _ in given:
        out = tmp_path / f"{Path(bundle).name}.parquet"
        score(ScoreConfig(bundle=bundle, inputs=[path], out=str(out), progress=False), on_line=lambda _: None)
        want = pl.read_parquet(out).sort("row")["probability"].to_numpy()
        assert len(want) == SCORED and want.std() > 1e-3
        for key, first in (("one", 5), ("seven", SCORED), ("all", SCORED)):
            np.testing.assert_allclose(np.array(got[bundle][key], np.float32), want[:first], rtol=0, atol=1e-6,
                                       err_msg=f"{bundle} {key}")
