"""Small split_binary datasets with a learnable signal, written with numpy for the training tests."""

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
