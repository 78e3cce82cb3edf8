"""The real 10k Criteo rows as a split_binary dataset, encoded with numpy (NVIDIA's semantics).

Ordered split as in the ``criteo-sample`` preset's ``preprocess`` hint: rows 0-6999 train,
7000-7999 val, 8000-9999 test. Categorical values seen at least ``threshold`` times in train
get indices 1..K by descending frequency (ties by value); everything else is 0. Numericals are
``log1p(max(x, 0))`` (missing -> 0) as float16.
"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import numpy as np

from feature_spec import Chunk, Feature, FeatureSpec, categorical_dtype, save

SPLITS = {"train": (0, 7000), "val": (7000, 8000), "test": (8000, 10000)}
NUM = [f"I{i}" for i in range(1, 14)]
CAT = [f"C{i}" for i in range(1, 27)]


def write_criteo_sample(raw: Path, root: Path, threshold: int = 3) -> Path:
    with gzip.open(raw, "rt") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    label = np.array([int(r[0]) for r in rows], bool)
    dense = np.array([[float(v) if v else 0.0 for v in r[1:14]] for r in rows])
    dense = np.log1p(np.maximum(dense, 0)).astype(np.float16)
    lo, hi = SPLITS["train"]
    features = {"label": Feature(dtype="bool"), **{n: Feature(dtype="float16") for n in NUM}}
    cats = {}
    for j, name in enumerate(CAT):
        values = [r[14 + j] for r in rows]
        counts = Counter(v for v in values[lo:hi] if v)
        kept = sorted((v for v, c in counts.items() if c >= threshold), key=lambda v: (-counts[v], v))
        index = {v: i + 1 for i, v in enumerate(kept)}
        card = len(kept) + 1
        cats[name] = (np.array([index.get(v, 0) for v in values]), categorical_dtype(card))
        features[name] = Feature(dtype=categorical_dtype(card), cardinality=card)
    source = {}
    for split, (a, b) in SPLITS.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        label[a:b].tofile(root / split / "label.bin")
        dense[a:b].tofile(root / split / "numerical.bin")
        source[split] = [Chunk(type="split_binary", features=["label"], files=[f"{split}/label.bin"]),
                         Chunk(type="split_binary", features=NUM, files=[f"{split}/numerical.bin"])]
        for name, (ids, dt) in cats.items():
            ids[a:b].astype(dt).tofile(root / split / f"cat_{name}.bin")
            source[split].append(Chunk(type="split_binary", features=[name], files=[f"{split}/cat_{name}.bin"]))
    spec = FeatureSpec(feature_spec=features, source_spec=source,
                       channel_spec={"label": ["label"], "numerical": NUM, "categorical": CAT})
    save(spec, str(root))
    return root
