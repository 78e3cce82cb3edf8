"""What the tests write and compare: small split_binary datasets (ours with a learnable signal, one shaped like
NVIDIA's tools write them, one with list features), whole dataset folders compared byte for byte, Criteo TSVs read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from feature_spec import CRITEO_COLUMNS, Chunk, Feature, FeatureSpec, categorical_dtype, save

CARDS = {"c0": 50, "c1": 200, "c2": 7, "c3": 1000}


def write_dataset(root: Path, rows: dict[str, int] | None = None, n_num: int = 4, seed: int = 0) -> Path:
    """A dataset whose click probability depends on c0, c1 and the first numerical feature."""
    rows = rows or {"train": 2048, "val": 512, "test": 512}
    rng = np.random.default_rng(seed)
    effect = {c: rng.normal(0, 1.0, card) for c, card in CARDS.items()}
    num = [f"n{i}" for i in range(n_num)]
    source = {}
    for split, n in rows.items():
        (root / split).mkdir(parents=True)
        dense = rng.normal(size=(n, n_num)).astype(np.float16)
        ids = {c: rng.integers(0, card, n) for c, card in CARDS.items()}
        logit = effect["c0"][ids["c0"]] + effect["c1"][ids["c1"]] + 1.5 * dense[:, 0] - 1.0
        (rng.random(n) < 1 / (1 + np.exp(-logit))).tofile(root / split / "label.bin")
        dense.tofile(root / split / "numerical.bin")
        for c, card in CARDS.items():
            ids[c].astype(categorical_dtype(card)).tofile(root / split / f"cat_{c}.bin")
        source[split] = [Chunk(type="split_binary", features=["click"], files=[f"{split}/label.bin"]),
                         Chunk(type="split_binary", features=num, files=[f"{split}/numerical.bin"])]
        source[split] += [Chunk(type="split_binary", features=[c], files=[f"{split}/cat_{c}.bin"]) for c in CARDS]
    features = {"click": Feature(dtype="bool"), **{n: Feature(dtype="float16") for n in num},
                **{c: Feature(dtype=categorical_dtype(card), cardinality=card) for c, card in CARDS.items()}}
    spec = FeatureSpec(feature_spec=features, source_spec=source,
                       channel_spec={"label": ["click"], "numerical": num, "categorical": list(CARDS)})
    save(spec, str(root))
    return root


# as NVIDIA's tools write it: features named after their files, empty metadata, train and test only
NVIDIA_YAML = """\
channel_spec:
  categorical: [cat_0.bin, cat_1.bin, cat_2.bin]
  label: [label]
  numerical: &id001 [num_0, num_1]
feature_spec:
  cat_0.bin: {cardinality: 7912889, dtype: int32}
  cat_1.bin: {cardinality: 11, dtype: int8}
  cat_2.bin: {cardinality: 2209, dtype: int16}
  label: {dtype: bool}
  num_0: {dtype: float16}
  num_1: {dtype: float16}
metadata: {}
source_spec:
  test:
  - {features: *id001, files: [test/numerical.bin], type: split_binary}
  - {features: [label], files: [test/label.bin], type: split_binary}
  - {features: [cat_0.bin], files: [test/cat_0.bin], type: split_binary}
  - {features: [cat_1.bin], files: [test/cat_1.bin], type: split_binary}
  - {features: [cat_2.bin], files: [test/cat_2.bin], type: split_binary}
  train:
  - {features: *id001, files: [train/numerical.bin], type: split_binary}
  - {features: [label], files: [train/label.bin], type: split_binary}
  - {features: [cat_0.bin], files: [train/cat_0.bin], type: split_binary}
  - {features: [cat_1.bin], files: [train/cat_1.bin], type: split_binary}
  - {features: [cat_2.bin], files: [train/cat_2.bin], type: split_binary}
"""


def write_nvidia_dataset(root: Path, rows: dict[str, int], seed: int = 3) -> Path:
    """A dataset with NVIDIA's feature spec (``NVIDIA_YAML``) and random rows (ids below 11)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "feature_spec.yaml").write_text(NVIDIA_YAML)
    for split, n in rows.items():
        (root / split).mkdir()
        (rng.random(n) < 0.5).tofile(root / split / "label.bin")
        rng.normal(size=(n, 2)).astype(np.float16).tofile(root / split / "numerical.bin")
        for i, dt in enumerate(("int32", "int8", "int16")):
            rng.integers(0, 11, n).astype(dt).tofile(root / split / f"cat_{i}.bin")
    return root


# list features of write_list_dataset: name -> (cardinality, hotness: N or "variable")
LIST_CARDS = {"c0": (50, 1), "tags": (100, 3), "hist": (300, "variable")}
MAX_HIST = 8   # the longest variable-length list written


def write_list_dataset(root: Path, rows: dict[str, int] | None = None, *, pooling: dict[str, str] | None = None,
                       metadata: bool = True, rowid: bool = False, seed: int = 0) -> Path:
    """A dataset with multi-valued categoricals in feature_spec's layout: one-hot ``c0``, fixed-hotness ``tags``
    (3 ids a row, row-major) and variable-length ``hist`` (0..8 ids a row: values file + int64 offsets file).
    The click depends on c0, the sum of the tags' effects, the mean of the hist ids' effects and the first
    numerical feature; index 0 elements occur in both lists and carry no effect. ``pooling``: feature ->
    sum|mean written to the spec; ``metadata``: write ``list_lengths``; ``rowid``: a one-hot feature holding
    each row's index (to identify rows). Returns ``root``; ``root / "logits.npz"`` holds the true logits
    per split (``np.load(...)[split]``) and those without the lists' terms (``[f"{split}_without_lists"]``)."""
    rows = rows or {"train": 4096, "val": 1024, "test": 1024}
    pooling = pooling or {}
    rng = np.random.default_rng(seed)
    effect = {c: rng.normal(0, 1.0, card) for c, (card, _) in LIST_CARDS.items()}
    for e in effect.values():
        e[0] = 0.0
    num = ["n0", "n1"]
    cards = {**{c: card for c, (card, _) in LIST_CARDS.items()}, **({"rowid": max(rows.values())} if rowid else {})}
    source, lengths_meta, logits = {}, {}, {}
    for split, n in rows.items():
        (root / split).mkdir(parents=True)
        dense = rng.normal(size=(n, len(num))).astype(np.float16)
        c0 = rng.integers(0, 50, n)
        tags = rng.integers(0, 100, (n, 3))
        hist_len = rng.integers(0, MAX_HIST + 1, n)
        hist = rng.integers(0, 300, hist_len.sum())
        offsets = np.concatenate([[0], np.cumsum(hist_len)]).astype(np.int64)
        hist_sum = np.bincount(np.repeat(np.arange(n), hist_len), weights=effect["hist"][hist], minlength=n)
        hist_mean = hist_sum / np.maximum(hist_len, 1)
        logit = effect["c0"][c0] + 0.6 * effect["tags"][tags].sum(1) + 1.5 * hist_mean + dense[:, 0] - 0.5
        logits[split] = logit
        logits[f"{split}_without_lists"] = effect["c0"][c0] + dense[:, 0] - 0.5
        (rng.random(n) < 1 / (1 + np.exp(-logit))).tofile(root / split / "label.bin")
        dense.tofile(root / split / "numerical.bin")
        ids = {"c0": c0, "tags": tags, "hist": hist, **({"rowid": np.arange(n)} if rowid else {})}
        for c, card in cards.items():
            ids[c].astype(categorical_dtype(card)).tofile(root / split / f"cat_{c}.bin")
        offsets.tofile(root / split / "cat_hist.offsets.bin")
        source[split] = [Chunk(type="split_binary", features=["click"], files=[f"{split}/label.bin"]),
                         Chunk(type="split_binary", features=num, files=[f"{split}/numerical.bin"])]
        source[split] += [Chunk(type="split_binary", features=[c], files=[f"{split}/cat_{c}.bin"] +
                                ([f"{split}/cat_hist.offsets.bin"] if c == "hist" else [])) for c in cards]
        lengths_meta[split] = {
            "tags": {"rows": n, "values": 3 * n, "max": 3, "index0": int((tags == 0).sum()), "truncated": 0},
            "hist": {"rows": n, "values": int(len(hist)), "max": int(hist_len.max()),
                     "index0": int((hist == 0).sum()), "truncated": 0}}
    np.savez(root / "logits.npz", **logits)
    hotness = {c: h for c, (_, h) in LIST_CARDS.items()}
    features = {"click": Feature(dtype="bool"), **{n: Feature(dtype="float16") for n in num}}
    for c, card in cards.items():
        h = hotness.get(c, 1)
        extra = {"hotness": h, "pooling": pooling.get(c, "sum")} if h != 1 else {}
        features[c] = Feature(dtype=categorical_dtype(card), cardinality=card, **extra)
    spec = FeatureSpec(feature_spec=features, source_spec=source,
                       channel_spec={"label": ["click"], "numerical": num, "categorical": list(cards)},
                       metadata={"list_lengths": lengths_meta} if metadata else {})
    save(spec, str(root))
    return root


def assert_same_files(a: Path, b: Path) -> None:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def read_tsv(path) -> pl.DataFrame:
    """A Criteo TSV (plain or gzipped) as strings, empty fields as null."""
    return pl.read_csv(path, separator="\t", has_header=False, new_columns=CRITEO_COLUMNS, quote_char=None,
                       schema_overrides={c: pl.String for c in CRITEO_COLUMNS})
