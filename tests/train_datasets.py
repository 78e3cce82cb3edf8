"""Small split_binary datasets written with numpy for the training tests: ours with a learnable signal,
and one shaped like NVIDIA's tools write them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from feature_spec import Chunk, Feature, FeatureSpec, categorical_dtype, save

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
