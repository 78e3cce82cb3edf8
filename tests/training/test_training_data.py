"""The split_binary reader on real memory-mapped files, compared with numpy reads of the same files."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import fsspec
import numpy as np
import pytest
import torch

from common.errors import UserError
from feature_spec import Chunk, Feature, FeatureSpec, save
from helpers.datasets import write_nvidia_dataset
from common.prefetch import Prefetcher
from training.data import SplitBinaryDataset

CATS = {"a": ("int8", 100), "b": ("int16", 3000), "rowid": ("int32", 2**20), "d": ("int64", 2**40)}


def write_dataset(root: Path, rows: dict[str, int], *, n_num: int = 3, num_dtype: str = "float16") -> Path:
    """A dataset in our layout; categorical 'rowid' holds each row's index, to identify rows."""
    rng = np.random.default_rng(0)
    num = [f"n{i}" for i in range(n_num)]
    features = {"click": Feature(dtype="bool"), **{n: Feature(dtype=num_dtype) for n in num},
                **{c: Feature(dtype=dt, cardinality=card) for c, (dt, card) in CATS.items()}}
    source = {}
    for split, n in rows.items():
        (root / split).mkdir(parents=True)
        (rng.random(n) < 0.3).tofile(root / split / "label.bin")
        rng.normal(size=(n, n_num)).astype(num_dtype).tofile(root / split / "numerical.bin")
        for c, (dt, card) in CATS.items():
            ids = np.arange(n) if c == "rowid" else rng.integers(0, card, n)
            ids.astype(dt).tofile(root / split / f"cat_{c}.bin")
        source[split] = [Chunk(type="split_binary", features=["click"], files=[f"{split}/label.bin"])]
        if n_num:
            source[split].append(Chunk(type="split_binary", features=num, files=[f"{split}/numerical.bin"]))
        source[split] += [Chunk(type="split_binary", features=[c], files=[f"{split}/cat_{c}.bin"]) for c in CATS]
    spec = FeatureSpec(feature_spec=features, source_spec=source,
                       channel_spec={"label": ["click"], "numerical": num, "categorical": list(CATS)})
    save(spec, str(root))
    return root


def expected(root: Path, split: str, rows: np.ndarray, n_num: int = 3, num_dtype: str = "float16"):
    """Label, dense and categoricals of ``rows`` read with numpy.fromfile."""
    label = np.fromfile(root / split / "label.bin", np.bool_)[rows].astype(np.float32)
    dense = np.fromfile(root / split / "numerical.bin", num_dtype).reshape(-1, n_num)[rows].astype(np.float32)
    cats = np.stack([np.fromfile(root / split / f"cat_{c}.bin", dt)[rows].astype(np.int64) for c, (dt, _) in CATS.items()])
    return label, dense, cats


def unpack(batch):
    """(labels, dense, [n_cat, b] ids) of a Batch, checking the KJT's shape on the way."""
    kjt = batch.sparse_features
    b = len(batch.labels)
    assert kjt.keys() == list(CATS)
    assert kjt.values().dtype == torch.int64 and batch.dense_features.dtype == torch.float32
    assert batch.labels.dtype == torch.float32
    assert torch.equal(kjt.lengths(), torch.ones(len(CATS) * b, dtype=torch.int32))
    return batch.labels.numpy(), batch.dense_features.numpy(), kjt.values().numpy().reshape(len(CATS), b)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("ds"), {"train": 103, "val": 40})


def check_batch(root, split, batch):
    """Every real row equals the files; padded rows are label -1, zeros. Returns the real row ids."""
    labels, dense, cats = unpack(batch)
    real = labels >= 0
    ids = cats[list(CATS).index("rowid"), real]
    label, dense_ref, cats_ref = expected(root, split, ids)
    np.testing.assert_array_equal(labels[real], label)
    np.testing.assert_array_equal(dense[real], dense_ref)
    np.testing.assert_array_equal(cats[:, real], cats_ref)
    assert (labels[~real] == -1).all() and (dense[~real] == 0).all() and (cats[:, ~real] == 0).all()
    return ids


@pytest.mark.parametrize("world_size,batch_size,shuffle,drop_last", [
    (1, 16, False, False), (2, 10, True, False), (3, 7, True, False), (2, 10, True, True), (4, 30, False, False),
])
def test_ranks_cover_rows_exactly_once_and_match_files(dataset, world_size, batch_size, shuffle, drop_last):
    ds = SplitBinaryDataset(str(dataset), "train")
    assert ds.num_rows == 103
    per_rank = [list(ds.batches(batch_size, rank=r, world_size=world_size, epoch=1, shuffle=shuffle, seed=7,
                                drop_last=drop_last)) for r in range(world_size)]
    steps = ds.num_batches(batch_size, world_size, drop_last)
    global_rows = batch_size * world_size
    seen = []
    for step in range(steps):
        sizes = {len(per_rank[r][step].labels) for r in range(world_size)}
        assert len(sizes) == 1, "every rank yields the same number of rows in a step"
        ids = np.concatenate([check_batch(dataset, "train", per_rank[r][step]) for r in range(world_size)])
        # a global batch is consecutive rows starting at a multiple of the global batch, in rank order
        assert ids[0] % global_rows == 0 and np.array_equal(ids, np.arange(ids[0], ids[0] + len(ids)))
        seen.append(ids)
    assert all(len(p) == steps for p in per_rank)
    covered = np.sort(np.concatenate(seen))
    n = 103 - 103 % global_rows if drop_last else 103
    np.testing.assert_array_equal(covered, np.arange(n))
    if shuffle:
        assert [s[0] for s in seen] != sorted(s[0] for s in seen)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_a_range_of_rows_batches_over_the_ranks_as_a_split_of_its_own(dataset, world_size):
    """The holdout of eval_split 'holdout': rows [93, 103) of 'train' validate, rows [0, 93) train. Each range's rows
    are read exactly once over the ranks, each rank a contiguous slice of every global batch, from the files' rows;
    the two never share a row."""
    whole = SplitBinaryDataset(str(dataset), "train")
    train, held = whole.rows(0, 93), whole.rows(93, 103)
    assert (train.num_rows, held.num_rows, held.start) == (93, 10, 93) and whole.num_rows == 103
    seen = {}
    for name, data, batch_size in (("train", train, 8), ("holdout", held, 4)):
        per_rank = [list(data.batches(batch_size, rank=r, world_size=world_size, shuffle=name == "train", seed=3))
                    for r in range(world_size)]
        ids = []
        for step in range(data.num_batches(batch_size, world_size)):
            step_ids = [check_batch(dataset, "train", per_rank[r][step]) for r in range(world_size)]
            assert len({len(per_rank[r][step].labels) for r in range(world_size)}) == 1
            ids.append(np.concatenate(step_ids))   # rank order: consecutive rows
            assert np.array_equal(ids[-1], np.arange(ids[-1][0], ids[-1][0] + len(ids[-1])))
        seen[name] = np.sort(np.concatenate(ids))
    np.testing.assert_array_equal(seen["train"], np.arange(93))
    np.testing.assert_array_equal(seen["holdout"], np.arange(93, 103))
    with pytest.raises(ValueError):
        whole.rows(90, 104)


def test_last_partial_batch_is_split_evenly_and_padded(dataset):
    ds = SplitBinaryDataset(str(dataset), "train")  # 103 rows, global batch 20: last has 3 rows
    last = [list(ds.batches(10, rank=r, world_size=2))[-1] for r in range(2)]
    assert [len(b.labels) for b in last] == [2, 2]
    assert [(b.labels >= 0).sum().item() for b in last] == [2, 1]
    assert check_batch(dataset, "train", last[1]).tolist() == [102]
    assert len(list(ds.batches(10, world_size=2, drop_last=True))) == 5


def test_one_rank_with_twice_the_batch_sees_the_same_rows_per_step(dataset):
    ds = SplitBinaryDataset(str(dataset), "train")
    one = [unpack(b)[2] for b in ds.batches(20, epoch=3, shuffle=True, seed=1)]
    two = [[unpack(b)[2] for b in ds.batches(10, rank=r, world_size=2, epoch=3, shuffle=True, seed=1)]
           for r in range(2)]
    for step, ids in enumerate(one):  # the last step: 3 rows on 1 rank, 2 + (1 + a padded row) on 2
        joined = np.concatenate([two[0][step], two[1][step]], axis=1)
        np.testing.assert_array_equal(joined[:, : ids.shape[1]], ids)


def test_shuffle_depends_on_seed_and_epoch_and_start_step_resumes(dataset):
    ds = SplitBinaryDataset(str(dataset), "train")

    def firsts(**kw):
        return [unpack(b)[2][2, 0] for b in ds.batches(8, shuffle=True, **kw)]

    assert firsts(seed=1, epoch=0) == firsts(seed=1, epoch=0)
    assert firsts(seed=1, epoch=0) != firsts(seed=1, epoch=1)
    assert firsts(seed=1, epoch=0) != firsts(seed=2, epoch=0)
    assert firsts(seed=1, epoch=2, start_step=5) == firsts(seed=1, epoch=2)[5:]


def test_prefetch_gives_the_same_batches_as_reading_inline(dataset):
    ds = SplitBinaryDataset(str(dataset), "val")
    inline = [unpack(b) for b in ds.batches(6, shuffle=True, prefetch=0)]
    fetched = [unpack(b) for b in ds.batches(6, shuffle=True, prefetch=3)]
    for x, y in zip(inline, fetched, strict=True):
        for a, b in zip(x, y):
            np.testing.assert_array_equal(a, b)


def test_prefetcher_raises_producer_errors_and_stops_when_dropped():
    def failing():
        yield 1
        raise OSError("disk gone")

    it = Prefetcher(failing(), 2)
    assert next(it) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)

    before = threading.active_count()
    it = Prefetcher(iter(range(1000)), 2)
    assert next(it) == 0
    del it
    gc.collect()
    for _ in range(50):
        if threading.active_count() < before + 1:
            break
        threading.Event().wait(0.05)
    assert threading.active_count() == before


def test_nvidia_preprocessed_dataset_loads_unchanged(tmp_path):
    write_nvidia_dataset(tmp_path, {"train": 50, "test": 9})
    ds = SplitBinaryDataset(str(tmp_path), "test")
    (batch,) = list(ds.batches(16))
    assert ds.num_rows == 9 and batch.sparse_features.keys() == ["cat_0.bin", "cat_1.bin", "cat_2.bin"]
    np.testing.assert_array_equal(batch.dense_features.numpy(),
                                  np.fromfile(tmp_path / "test/numerical.bin", np.float16).reshape(9, 2))
    np.testing.assert_array_equal(batch.sparse_features["cat_1.bin"].values().numpy(),
                                  np.fromfile(tmp_path / "test/cat_1.bin", np.int8))
    np.testing.assert_array_equal(batch.labels.numpy(), np.fromfile(tmp_path / "test/label.bin", np.bool_))


def test_float32_numericals_and_no_numericals(tmp_path):
    ds = SplitBinaryDataset(str(write_dataset(tmp_path / "f32", {"train": 12}, num_dtype="float32")), "train")
    (b,) = list(ds.batches(12))
    np.testing.assert_array_equal(b.dense_features.numpy(),
                                  np.fromfile(tmp_path / "f32/train/numerical.bin", np.float32).reshape(12, 3))
    ds = SplitBinaryDataset(str(write_dataset(tmp_path / "none", {"train": 11}, n_num=0)), "train")
    *_, b = ds.batches(2, world_size=3, rank=2)  # last global batch: 5 rows over 3 ranks -> 2, 2, 1 + pad
    assert tuple(b.dense_features.shape) == (2, 0) and b.labels.tolist()[1] == -1.0


@pytest.mark.parametrize("damage,match", [
    (lambda root: (root / "train/cat_b.bin").unlink(), r"train/cat_b\.bin: data file is missing"),
    (lambda root: (root / "train/cat_a.bin").write_bytes(b"\0" * 7), r"train/cat_a\.bin: has 7 rows but .*label\.bin has 8"),
    (lambda root: (root / "train/cat_d.bin").write_bytes(b"\0" * 13), r"train/cat_d\.bin: size 13 bytes is not a multiple"),
])
def test_bad_datasets_name_the_file_and_the_fix(tmp_path, damage, match):
    root = write_dataset(tmp_path, {"train": 8})
    damage(root)
    with pytest.raises(UserError, match=match) as e:
        SplitBinaryDataset(str(root), "train")
    assert "Fix:" in str(e.value)


def test_files_shorter_than_the_metadata_rows_name_the_file_and_the_bytes(tmp_path):
    """Every file cut by the same whole rows still agrees with the others: only ``metadata.rows`` tells."""
    from feature_spec import load

    root = write_dataset(tmp_path, {"train": 8})
    spec = load(str(root))
    spec.metadata["rows"] = {"train": 8}
    save(spec, str(root))
    assert SplitBinaryDataset(str(root), "train").num_rows == 8
    for f in (root / "train").iterdir():
        f.write_bytes(f.read_bytes()[:len(f.read_bytes()) * 6 // 8])
    with pytest.raises(UserError) as e:
        SplitBinaryDataset(str(root), "train")
    assert str(e.value).startswith(f"{root}/train/label.bin: 6 bytes, but the dataset's metadata (8 rows in split "
                                   "'train') needs 8 bytes. Fix: ") and "--verify" in str(e.value)


def test_unknown_split_lists_the_splits(dataset):
    with pytest.raises(UserError, match=r"no split 'tset' \(it has: train, val\)"):
        SplitBinaryDataset(str(dataset), "tset")


def _assert_same_batches(a: SplitBinaryDataset, b: SplitBinaryDataset):
    for x, y in zip(a.batches(32, shuffle=True), b.batches(32, shuffle=True), strict=True):
        for p, q in zip(unpack(x), unpack(y)):
            np.testing.assert_array_equal(p, q)


def test_memory_filesystem_goes_through_the_cache(dataset, tmp_path):
    fs = fsspec.filesystem("memory")
    fs.put(str(dataset), "/remote-ds", recursive=True)
    remote = SplitBinaryDataset("memory://remote-ds", "train", cache_dir=str(tmp_path / "cache"))
    _assert_same_batches(remote, SplitBinaryDataset(str(dataset), "train"))
    cached = sorted(p.name for p in (tmp_path / "cache").rglob("*.bin"))
    assert cached == sorted(["label.bin", "numerical.bin", *(f"cat_{c}.bin" for c in CATS)])
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*.bin")}
    SplitBinaryDataset("memory://remote-ds", "train", cache_dir=str(tmp_path / "cache"))
    assert stamps == {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*.bin")}, "second open re-downloaded"
    fs.rm("/remote-ds", recursive=True)


def test_s3_through_a_real_http_endpoint(dataset, tmp_path):
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        opts = {"endpoint_url": f"http://{host}:{port}", "key": "testing", "secret": "testing"}
        fs = fsspec.filesystem("s3", **opts)
        fs.mkdir("bucket")
        fs.put(str(dataset) + "/", "bucket/ds/", recursive=True)
        remote = SplitBinaryDataset("s3://bucket/ds", "val", cache_dir=str(tmp_path), storage_options=opts)
        _assert_same_batches(remote, SplitBinaryDataset(str(dataset), "val"))
    finally:
        server.stop()
