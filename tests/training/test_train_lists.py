"""Multi-valued (list) categoricals on the training side: the loader against a per-row reading of the files
(both layouts, 2 ranks, padding), sum vs mean pooling against numpy, the planner's pooling factors, the
bundle's TorchScript model on a KeyedJaggedTensor, and a real 2-process train -> evaluate -> score -> export
(and resume)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import feature_spec as fspec
from common.errors import UserError
from helpers.datasets import write_list_dataset
from helpers.runs import checkpoint_tensors, train
from training.checkpoint import Checkpointer
from training.config import ArchConfig, ShardingConfig
from training.data import SplitBinaryDataset, spec_pooling_factors
from training.rundir import RunDir


@pytest.fixture(scope="module")
def lists(tmp_path_factory) -> Path:
    """Train 1001 rows (a partial last batch), val 64, with a row-id feature; hist pooled by mean."""
    root = tmp_path_factory.mktemp("lists") / "ds"
    root.mkdir()
    return write_list_dataset(root, {"train": 1001, "val": 64}, rowid=True, pooling={"hist": "mean"})


def per_row(root: Path, split: str) -> dict[str, list[np.ndarray]]:
    """Every row's ids per categorical, read with numpy.fromfile the plain way: a row at a time."""
    spec = fspec.load(str(root))
    out = {}
    for f in spec.categorical_features:
        feature = spec.feature_spec[f]
        ids = np.fromfile(root / split / f"cat_{f}.bin", feature.dtype)
        if feature.variable_length:
            offsets = np.fromfile(root / split / f"cat_{f}.offsets.bin", np.int64)
            out[f] = [ids[offsets[r]:offsets[r + 1]] for r in range(len(offsets) - 1)]
        else:
            n = feature.values_per_row
            out[f] = [ids[r * n:(r + 1) * n] for r in range(len(ids) // n)]
    return out


def rows_of(kjt, feature: str) -> list[np.ndarray]:
    """A KJT feature's ids per row, cut with its lengths."""
    jt = kjt[feature]
    values, lengths = jt.values().numpy(), jt.lengths().numpy()
    return np.split(values, np.cumsum(lengths)[:-1])


@pytest.mark.parametrize("shuffle", [False, True])
def test_loader_two_ranks_equals_the_rows_read_one_by_one(lists, shuffle):
    """Two ranks, batch 37 a rank, the last global batch split 20 + 19 and padded: every real row comes once, its lists (values and
    lengths) equal the files' rows; padded rows have label -1, empty lists and id 0 in one-hot features."""
    expected = per_row(lists, "train")
    label = np.fromfile(lists / "train" / "label.bin", np.bool_).astype(np.float32)
    dense = np.fromfile(lists / "train" / "numerical.bin", np.float16).reshape(-1, 2).astype(np.float32)
    data = SplitBinaryDataset(str(lists), "train")
    assert data.num_rows == 1001
    seen, padded = [], 0
    for rank in (0, 1):
        for batch in data.batches(37, rank=rank, world_size=2, shuffle=shuffle, seed=5, prefetch=0):
            kjt = batch.sparse_features
            assert kjt.keys() == ["c0", "tags", "hist", "rowid"] and kjt.stride() == len(batch.labels)
            assert kjt.values().dtype == torch.int64
            # the KJT's precomputed per-key sizes agree with its lengths
            assert kjt.length_per_key() == [int(kjt[k].lengths().sum()) for k in kjt.keys()]
            real = batch.labels.numpy() >= 0
            got = {f: rows_of(kjt, f) for f in kjt.keys()}
            for i in np.flatnonzero(real):
                r = int(got["rowid"][i][0])
                seen.append(r)
                for f in ("c0", "tags", "hist"):
                    np.testing.assert_array_equal(got[f][i], expected[f][r], err_msg=f"row {r} {f}")
                assert batch.labels[i] == label[r]
                np.testing.assert_array_equal(batch.dense_features[i].numpy(), dense[r])
            padded += int((~real).sum())
            for i in np.flatnonzero(~real):
                assert batch.labels[i] == -1 and (batch.dense_features[i] == 0).all()
                assert len(got["tags"][i]) == 0 and len(got["hist"][i]) == 0
                assert got["c0"][i].tolist() == [0] and got["rowid"][i].tolist() == [0]
    assert sorted(seen) == list(range(1001)) and padded == 1   # last global batch: 39 rows = 20 + 19 (+1 pad)
    assert any(len(h) == 0 for h in expected["hist"]) and any(len(h) == 8 for h in expected["hist"])


def test_a_remote_list_dataset_reads_through_the_cache_as_the_local_one(lists, tmp_path):
    """memory:// (any fsspec URI): the values and offsets files are cached locally and read the same."""
    import fsspec

    fsspec.filesystem("memory").put(str(lists), "/mh-lists", recursive=True)
    remote = SplitBinaryDataset("memory://mh-lists", "train", cache_dir=str(tmp_path / "cache"))
    local = SplitBinaryDataset(str(lists), "train")
    cached = sorted(p.name for p in (tmp_path / "cache").rglob("*.bin"))
    assert "cat_hist.offsets.bin" in cached and "cat_hist.bin" in cached
    got, want = list(remote.batches(300, world_size=2, rank=1)), list(local.batches(300, world_size=2, rank=1))
    assert len(got) == len(want) == 2
    for a, b in zip(got, want):
        assert torch.equal(a.sparse_features.values(), b.sparse_features.values())
        assert torch.equal(a.sparse_features.lengths(), b.sparse_features.lengths())
        assert torch.equal(a.labels, b.labels)


def test_nvidia_named_dataset_with_a_hotness_loads(tmp_path):
    """NVIDIA's spec (features named after their files, empty metadata) with `hotness: 3` on one feature and
    its file rows x 3 (the split_binary extension of their spec): rows read as written, pooling factor 3."""
    from helpers.datasets import NVIDIA_YAML, write_nvidia_dataset

    root = write_nvidia_dataset(tmp_path / "nv", {"train": 40, "test": 8})
    (root / "feature_spec.yaml").write_text(NVIDIA_YAML.replace("cat_1.bin: {cardinality: 11, dtype: int8}",
                                                                "cat_1.bin: {cardinality: 11, dtype: int8, hotness: 3}"))
    ids = np.random.default_rng(1).integers(0, 11, (40, 3)).astype(np.int8)
    ids.tofile(root / "train" / "cat_1.bin")
    data = SplitBinaryDataset(str(root), "train")
    assert data.num_rows == 40 and data.pooling_factors() == {"cat_1.bin": 3.0}
    batch = data.read(5, 9)
    assert [r.tolist() for r in rows_of(batch.sparse_features, "cat_1.bin")] == ids[5:9].tolist()
    one_hot = np.fromfile(root / "train" / "cat_0.bin", np.int32)[5:9]
    assert batch.sparse_features["cat_0.bin"].values().tolist() == one_hot.tolist()


def test_pooling_factors_from_metadata_else_the_files(tmp_path):
    """list_lengths values/rows of the split; without metadata: N for a fixed hotness, values/rows from the
    offsets file for a variable one (the spec alone knows only N)."""
    a = write_list_dataset(tmp_path / "a", {"train": 300}, metadata=True, seed=1)
    b = write_list_dataset(tmp_path / "b", {"train": 300}, metadata=False, seed=1)
    values = len(np.fromfile(a / "train" / "cat_hist.bin", np.int16))
    recorded = fspec.load(str(a)).metadata["list_lengths"]["train"]
    assert recorded["hist"]["values"] == values
    assert SplitBinaryDataset(str(a), "train").pooling_factors() == {"tags": 3.0, "hist": values / 300}
    assert SplitBinaryDataset(str(b), "train").pooling_factors() == {"tags": 3.0, "hist": values / 300}
    assert spec_pooling_factors(fspec.load(str(b)), "train") == {"tags": 3.0}
    # metadata wins over the files: a recorded factor the files would not give
    spec = fspec.load(str(a))
    spec.metadata["list_lengths"]["train"]["hist"] = {"rows": 300, "values": 6000}
    assert spec_pooling_factors(spec, "train") == {"tags": 3.0, "hist": 20.0}


def test_planner_sees_the_pooling_factors(lists, capsys):
    """The constraints carry each table's pooling factor, and the planner's cost of a table grows with it;
    `dlrmflow plan --dataset` plans with the dataset's recorded factors and prints them."""
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from training.sharding import make_planner, sharders
    from training.topology import PROFILES

    tables = [EmbeddingBagConfig(name=f"t_{i}", embedding_dim=16, num_embeddings=1000, feature_names=[f"f{i}"])
              for i in range(2)]
    cfg = ShardingConfig(constraints={"t_0": {"sharding_types": ["table_wise"]}})
    planner = make_planner(cfg, PROFILES["cpu"], 2, 2, 512, pooling_factors={"t_0": 20.0, "t_1": 1.0})
    constraints: dict[str, ParameterConstraints] = planner._constraints
    assert constraints["t_0"].pooling_factors == [20.0] and constraints["t_0"].sharding_types == ["table_wise"]
    assert constraints["t_1"].pooling_factors == [1.0]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    options = planner._enumerator.enumerate(ebc, sharders())
    tw = {o.name: o for o in options if o.sharding_type == "table_wise" and o.compute_kernel == "fused"}
    assert tw["t_0"].input_lengths == [20.0] and tw["t_1"].input_lengths == [1.0]
    perf = {name: sum(s.perf.total for s in o.shards) for name, o in tw.items()}
    assert perf["t_0"] > 2 * perf["t_1"]   # same table size: only the lookups per row differ

    from flows.cli import main

    assert main(["plan", "--dataset", str(lists), "--world-size", "2", "--sharding.profile", "cpu"]) == 0
    stats = fspec.load(str(lists)).metadata["list_lengths"]["train"]["hist"]
    assert f"t_tags 3.00, t_hist {stats['values'] / stats['rows']:.2f}" in capsys.readouterr().out


def _weights(ebc) -> dict[str, np.ndarray]:
    return {k.split(".")[1]: v.detach().numpy() for k, v in ebc.state_dict().items()}


def test_tables_pool_as_the_spec_says_and_the_bundle_model_agrees(lists):
    """TorchRec's tables built from the spec: tags sums its 3 rows, hist averages its rows (an empty list: 0),
    checked against numpy; sum and mean differ. The bundle's TorchScript model (forward_lists on the KJT's
    values and lengths) gives the TorchRec DLRM's probabilities with the same weights."""
    from torchrec.models.dlrm import DLRM
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from training.inference import DLRMInference, plain_state
    from training.dlrm import embedding_tables

    spec = fspec.load(str(lists))
    torch.manual_seed(0)
    cfg = ArchConfig(embedding_dim=8, bottom_mlp=[16, 8], top_mlp=[16, 1])
    ebc = EmbeddingBagCollection(tables=embedding_tables(cfg, spec), device=torch.device("cpu"))
    batch = SplitBinaryDataset(str(lists), "val").read(0, 60, 64)   # 4 padded rows
    pooled = ebc(batch.sparse_features)
    w = _weights(ebc)
    rows = {f: rows_of(batch.sparse_features, f) for f in ("tags", "hist")}
    want_tags = np.stack([w["t_tags"][ids].sum(0) for ids in rows["tags"]])
    want_hist = np.stack([w["t_hist"][ids].mean(0) if len(ids) else np.zeros(8, np.float32) for ids in rows["hist"]])
    np.testing.assert_allclose(pooled["tags"].detach().numpy(), want_tags, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pooled["hist"].detach().numpy(), want_hist, rtol=1e-5, atol=1e-6)
    sums = np.stack([w["t_hist"][ids].sum(0) for ids in rows["hist"]])
    longer = np.array([len(ids) > 1 for ids in rows["hist"]])
    assert np.abs(pooled["hist"].detach().numpy()[longer] - sums[longer]).min(axis=1).max() > 1e-3

    dlrm = DLRM(embedding_bag_collection=ebc, dense_in_features=2, dense_arch_layer_sizes=[16, 8],
                over_arch_layer_sizes=[16, 1]).eval()
    config = {"interaction": "dot", "embedding_dim": 8, "bottom_mlp": [16, 8], "top_mlp": [16, 1], "dcn_layers": 0,
              "dcn_rank": 0, "categorical": spec.categorical_features, "numerical": spec.numerical_features,
              "tables": [f"t_{f}" for f in spec.categorical_features],
              "table_rows": [spec.cardinality(f) for f in spec.categorical_features],
              "pooling": [spec.feature_spec[f].pooling or "sum" for f in spec.categorical_features]}
    module = DLRMInference(config)
    module.load_state_dict(plain_state(dlrm.state_dict(), config["tables"]))
    scripted = torch.jit.script(module.eval())
    kjt = batch.sparse_features
    with torch.no_grad():
        want = torch.sigmoid(dlrm(batch.dense_features, kjt).squeeze(-1))
        got = scripted.forward_lists(kjt.values(), kjt.lengths(), batch.dense_features)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-6)


def test_bad_offsets_are_clear_errors(tmp_path):
    """An offsets file that does not end at the values' count, or whose rows disagree with the split's."""
    root = write_list_dataset(tmp_path / "ds", {"train": 50}, seed=2)
    offsets = root / "train" / "cat_hist.offsets.bin"
    good = offsets.read_bytes()
    offsets.write_bytes(good[:-8])   # one row fewer: ends before the last values
    with pytest.raises(UserError, match=r"cat_hist.offsets.bin: row offsets of 'hist' must start at 0 and end at "
                       r"the number of values .* Fix:"):
        SplitBinaryDataset(str(root), "train")
    values = np.fromfile(root / "train" / "cat_hist.bin", np.int16)
    np.concatenate([np.frombuffer(good, np.int64), [len(values)]]).tofile(offsets)   # one row more
    with pytest.raises(UserError, match=r"cat_hist.offsets.bin: has 51 rows but .*label.bin has 50; .* Fix:"):
        SplitBinaryDataset(str(root), "train")
    (root / "train" / "cat_tags.bin").write_bytes(b"\x01" * 149)   # 49.67 rows of 3
    offsets.write_bytes(good)
    with pytest.raises(UserError, match=r"cat_tags.bin: size 149 bytes is not a multiple of the row width 3 bytes"):
        SplitBinaryDataset(str(root), "train")


FAST = ["--set", "data.batch_size=256", "--set", "data.eval_batch_size=256", "--set", "epochs=2",
        "--set", "eval_every=8", "--set", "log_every=8", "--set", "arch.embedding_dim=8",
        "--set", "arch.bottom_mlp=[16,8]", "--set", "arch.top_mlp=[16,1]"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_ranks_train_evaluate_score_export(tmp_path):
    """A real 2-process torchrun trains on lists (fixed tags summed, variable hist averaged, hist's table capped
    so its ids are hashed): it learns the planted model (test AUC near the true logits', well above what a model
    could reach without the lists); its planner got the train split's pooling factors; evaluation on 2 ranks,
    scoring on 2 ranks and the exported TorchScript bundle all give the checkpoint's predictions. The same run
    stopped mid-epoch (a shuffled epoch) and resumed ends with the same parameters and optimizer state."""
    from training.config import EvaluateConfig
    from training.evaluate import evaluate_run
    from training.export import export_bundle, load_bundle, predict_split
    from training.metrics import roc_auc
    from training.score import predict_parts, probabilities

    ds = write_list_dataset(tmp_path / "ds", {"train": 8192, "val": 1024, "test": 1500}, pooling={"hist": "mean"})
    run = tmp_path / "run"
    args = [*FAST, "--set", "arch.max_table_size=250"]   # hist's 300 ids hashed into 250 rows
    train(ds, run, *args, nproc=2)
    env = {"OMP_NUM_THREADS": "1"}
    ev = evaluate_run(str(run), EvaluateConfig(), launcher={"kind": "local", "nproc": 2}, env=env,
                      on_line=lambda _: None)
    y = np.fromfile(ds / "test" / "label.bin", np.bool_).astype(np.float32)
    logits = np.load(ds / "logits.npz")
    best, without_lists = roc_auc(logits["test"], y), roc_auc(logits["test_without_lists"], y)
    # measured: 0.801 vs best 0.835 and 0.738 for the best model that ignores the lists
    assert ev["rows"] == 1500 and ev["auc"] > max(best - 0.06, without_lists + 0.03), (ev["auc"], best, without_lists)
    # the plan the trainer used was built with the train split's pooling factors (list_lengths: values / rows)
    stats = fspec.load(str(ds)).metadata["list_lengths"]["train"]
    hist = stats["hist"]["values"] / stats["hist"]["rows"]
    assert 3.5 < hist < 4.5
    assert f"Pooling factors (mean ids per row, what the planner costs lookups by; others 1): t_tags 3.00, " \
           f"t_hist {hist:.2f}" in (run / "plan.txt").read_text()

    # scoring on 2 ranks (rows in file order) = the checkpoint's predictions
    step = ev["step"]
    parts = tmp_path / "parts"
    predict_parts(str(run), step, str(ds), "test", parts, launcher={"kind": "local", "nproc": 2}, env=env,
                  on_line=lambda _: None)
    scored = np.concatenate(list(probabilities(parts)))
    assert len(scored) == 1500 and roc_auc(scored, y) == pytest.approx(ev["auc"], abs=1e-6)

    # the bundle's TorchScript model on the loader's KJTs gives the same probabilities
    out = tmp_path / "bundle"
    export_bundle(str(run), step, str(out))
    config = json.loads((out / "model.json").read_text())
    assert config["pooling"] == ["sum", "sum", "mean"]
    bundle_parts = tmp_path / "bundle_parts"
    predict_split(load_bundle(str(out)), str(ds), "test", bundle_parts, batch_rows=333)
    from_bundle = np.concatenate(list(probabilities(bundle_parts)))
    np.testing.assert_allclose(from_bundle, scored, rtol=0, atol=1e-5)

    # stopped mid-epoch, then resumed (the run's own config): the uninterrupted run's final state, bit for bit
    parts, last = tmp_path / "parts", Checkpointer(RunDir(str(run))).step_of("latest")
    train(ds, parts, *args, "--max-steps", "12", nproc=2)
    out = train(ds, parts, "--resume", "--max-steps", str(last), nproc=2).stdout
    assert "resumed from step 12 (epoch 0, step 12 of it)" in out
    a, b = checkpoint_tensors(run, last, tmp_path), checkpoint_tensors(parts, last, tmp_path)
    assert a.keys() == b.keys() and any(k.startswith("optim.") for k in a) and any("t_hist" in k for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def logistic_regression(dataset: Path, features: list[str], l2: float) -> dict[str, np.ndarray]:
    """A logistic regression fitted on the dataset's train split (L-BFGS, L2 penalty ``l2``) over the
    numerical features and the categoricals ``features``, each a bag of its indices pooled as its spec says
    (a one-hot feature: its index's weight; a list: the sum or mean of its indices' weights).
    Returns its probabilities of every split."""
    from torch import nn

    spec = fspec.load(str(dataset))
    inputs = {}
    for split in spec.splits:
        data = SplitBinaryDataset(str(dataset), split)
        b = data.read(0, data.num_rows)
        inputs[split] = (b.dense_features, b.labels,
                         [(b.sparse_features[f].values(), b.sparse_features[f].offsets()[:-1]) for f in features])
    bags = nn.ModuleList([nn.EmbeddingBag(spec.cardinality(f), 1, mode=spec.feature_spec[f].pooling or "sum")
                          for f in features])
    for bag in bags:
        nn.init.zeros_(bag.weight)
    linear = nn.Linear(len(spec.numerical_features), 1)
    params = [*bags.parameters(), *linear.parameters()]

    def logits(split: str) -> torch.Tensor:
        dense, _, ids = inputs[split]
        z = linear(dense).squeeze(-1)
        for bag, (values, offsets) in zip(bags, ids):
            z = z + bag(values, offsets).squeeze(-1)
        return z

    opt = torch.optim.LBFGS(params, max_iter=100, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(logits("train"), inputs["train"][1])
        loss = loss + l2 * sum((p ** 2).sum() for p in params)
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return {s: torch.sigmoid(logits(s)).numpy() for s in inputs}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_list_table_preprocess_train_evaluate_score(tmp_path, criteo_10k):
    """Real Criteo rows with a fixed-hotness pair (mean pooled) and a variable-length bag (tests/helpers/list_table.py):
    preprocess -> train -> evaluate -> score the raw rows with the exported bundle.

    The bar: test AUC above a logistic regression computed here on the numerical features and the two list
    features (bags of indices pooled like the DLRM's tables, L2 picked on val). It leaves out the 16 one-hot
    columns on purpose: with them a logistic regression reaches 0.747-0.752 on these 8,000 training rows, at or
    above the DLRM's 0.74 (as for the one-hot rows: training/presets/criteo-sample.yaml), so no DLRM bar holds
    there; measured: DLRM 0.742-0.744, this baseline 0.720."""
    from models.config import ScoreConfig
    from models.scoring import score
    from helpers.list_table import real_list_table
    from preprocessing import PreprocessConfig, run as preprocess
    from training.config import EvaluateConfig
    from training.evaluate import evaluate_run
    from training.export import export_bundle
    from training.metrics import roc_auc

    spec_path, data = real_list_table(tmp_path)
    ds = Path(preprocess(PreprocessConfig(inputs=[str(data)], spec=str(spec_path), out=str(tmp_path / "store"),
                                          frequency_threshold=12, progress=False)))
    spec = fspec.load(str(ds))
    assert spec.feature_spec["pair"].hotness == 2 and spec.feature_spec["bag"].variable_length
    run = tmp_path / "run"
    train(ds, run, "--preset", "criteo-sample", "--set", "eval_every=20")
    ev = evaluate_run(str(run), EvaluateConfig(), env={"OMP_NUM_THREADS": "1"}, on_line=lambda _: None)
    y = {s: np.fromfile(ds / s / "label.bin", np.bool_) for s in spec.splits}
    assert ev["rows"] == len(y["test"]) == 1000

    fits = [logistic_regression(ds, ["pair", "bag"], l2) for l2 in (1e-4, 1e-3)]
    baseline = max(fits, key=lambda p: roc_auc(p["val"], y["val"]))
    assert ev["auc"] > roc_auc(baseline["test"], y["test"]) + 0.01, (ev["auc"], roc_auc(baseline["test"], y["test"]))

    # the raw rows (lists from Parquet list columns) through the bundle: the test split's rows (the last 1,000
    # of the ordered split) score the evaluated AUC
    bundle = tmp_path / "bundle"
    export_bundle(str(run), ev["step"], str(bundle))
    out = tmp_path / "scores.parquet"
    summary = score(ScoreConfig(bundle=str(bundle), inputs=[str(data)], out=str(out), progress=False),
                    on_line=lambda _: None)
    assert summary["rows"] == 10_000
    import polars as pl
    test = pl.read_parquet(out).sort("row").tail(1000)
    np.testing.assert_array_equal(test["label"].to_numpy().astype(bool), y["test"])
    assert roc_auc(test["probability"].to_numpy(), y["test"]) == pytest.approx(ev["auc"], abs=1e-4)


# MLPerf DLRMv2's sizes capped at 10 ids, C14 one-hot: the planted interaction is C14 x C17 of their FIRST ids,
# which a pooled bag cannot single out (with C14 multi-hot the best AUC is out of reach of any DLRM)
PLANTED_SIZES = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 1, 9, 5, 1, 1, 1, 10, 10, 10, 10, 3, 1, 1]


def best_auc_of_the_last_rows(config, n: int) -> tuple[float, np.ndarray]:
    """The planted model's (the true probabilities') ROC AUC on the last ``n`` rows that ``config`` generated (the
    ordered split's test rows), and their labels: their blocks made again by the generator."""
    from synthetic.generator import BLOCK_ROWS, SyntheticData
    from training.metrics import roc_auc

    data, first = SyntheticData(config), config.rows - n
    blocks = [data.block(b) for b in range(first // BLOCK_ROWS, -(-config.rows // BLOCK_ROWS))]
    skip = first - first // BLOCK_ROWS * BLOCK_ROWS
    p, y = (np.concatenate([getattr(b, f) for b in blocks])[skip:] for f in ("probability", "label"))
    return roc_auc(p, y), y


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_planted_multi_hot_model_within_0_01_of_its_best_auc(tmp_path):
    """`dlrmflow synth --multi-hot-sizes` rows -> preprocess (the written spec, pooling mean: the planted term of
    a list is the mean of its ids' effects) -> train (preset synthetic, changes below) -> evaluate: test AUC within
    0.01 of the best AUC of the same rows (the true probabilities'). 500k rows, seed 0 (fewer miss or nearly: 100k
    rows with the preset's settings ended 0.022 below the best, 300k at threshold 600 and lr 0.02 0.0085 below).

    The bar is the test rows' own best AUC, not the generator's recorded best_auc (all 500k rows): a 50k-row test
    split's own best is off that by as much as the model's margin (seeds 0, 1, 2: +0.0014, -0.0046, +0.0029), so
    the recorded one passed seed 0 and failed seed 1 with the same learning (0.7777 vs 0.7853 and 0.7690 vs
    0.7824, both 0.009 below their own rows' best).

    The preset's training and preprocessing, but for one epoch at learning rate 0.04 instead of two at 0.02 (the
    second added nothing: validation AUC flat after ~800 steps) and a frequency threshold of 1000 instead of 100
    (the planted effects sit on each column's top 64 values, rarer ones share one effect: at 100 some 10,800 rarer
    ids of the planted columns kept rows of their own, each to learn that one effect, at 1000 ~900, while 170 of
    the 848 planted values, rare ones, join index 0): training 48 -> ~22 CPU-seconds.
    Measured gaps to the test rows' best (seeds 0, 1, 2): 0.0073, 0.0069, 0.0069 (the preset's threshold and two
    epochs: 0.009, 0.009); labels shuffled: test AUC 0.5. Sum pooling instead of mean is not caught: 0.0090.

    The training and the evaluation are the ranks' own code (training.train_worker.train, then
    training.evaluate_worker.evaluate of the best checkpoint, which writes eval/test/metrics.json) in this process
    as a job of one rank, as the launcher would save and start them: two fresh interpreters importing torch and
    TorchRec (~11 CPU-seconds) are not what this test is about (the CLI and torchrun paths: the one-hot test,
    tests/training/test_train_synthetic.py)."""
    from helpers.processes import one_rank
    from nightly.config import PipelinePreset
    from preprocessing import PreprocessConfig, run as preprocess
    from synthetic.generator import SPEC_FILE, SynthConfig, write
    from training import evaluate_worker, train_worker
    from training.config import EvaluateConfig, TrainConfig
    from training.launchers.base import check_dataset

    rows = 500_000
    config = SynthConfig(out=str(tmp_path / "raw"), rows=rows, seed=0, multi_hot_sizes=PLANTED_SIZES)
    meta = write(config)
    hint = {**PipelinePreset.named("synthetic").preprocess.model_dump(exclude_unset=True), "frequency_threshold": 1000}
    ds = Path(preprocess(PreprocessConfig(inputs=[config.out], spec=f"{config.out}/{SPEC_FILE}",
                                          out=str(tmp_path / "store"), progress=False, **hint)))
    written = fspec.load(str(ds)).feature_spec
    assert (written["C15"].hotness, written["C15"].pooling) == (9, "mean")
    run = RunDir(str(tmp_path / "run"))
    # one validation, at the end of the epoch (780 steps): one every 390 chose the same step, for ~1.4 CPU-s more
    overrides = {"dataset": str(ds), "epochs": 1, "eval_every": 780, "optimizer.embedding.lr": 0.04,
                 "optimizer.dense.lr": 0.04}
    run.save_config(check_dataset(TrainConfig.preset("synthetic").with_overrides(overrides)))
    with one_rank():
        train_worker.train(run, resume=False)
        evaluate_worker.evaluate(run, EvaluateConfig())
    assert run.is_complete()
    test = run.eval_metrics("test")
    assert test["rows"] == rows // 10 and test["step"] == Checkpointer(run).step_of("best")
    best, labels = best_auc_of_the_last_rows(config, test["rows"])
    np.testing.assert_array_equal(labels, np.fromfile(ds / "test" / "label.bin", np.bool_))   # the same rows
    assert test["auc"] >= best - 0.01, (test["auc"], best, meta["best_auc"])
