"""Throughput of the split_binary reader (training.data.SplitBinaryDataset).

Writes a Criteo-shaped dataset (13 float16 numericals, 26 categoricals: 9 int32, 9 int16,
8 int8, like NVIDIA's FL15 spec), then times whole epochs of ``batches(4096, shuffle=True)``
for rank 0 of world sizes 1 and 2, with and without the prefetch thread, from local mmap and
from a ``memory://`` fsspec URI through the local cache. Files sit in the page cache (just
written), so this measures the reader, not the disk. Prints one JSON line per measurement.
``--hotness fixed|variable``: the categoricals are lists of MLPerf DLRMv2's sizes (3,2,1,...,100,...; 214
ids a row): fixed hotness (rows x N), or variable length with N the mean (lengths uniform in 0..2N;
values file + offsets file); features of size 1 stay one-hot.

usage: python benchmarks/bench_dataloader.py [--rows 2000000] [--batch 4096] [--repeat 3]
                                             [--hotness one-hot|fixed|variable]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import fsspec
import numpy as np

from feature_spec import Chunk, Feature, FeatureSpec, save
from training.data import SplitBinaryDataset

MLPERF_SIZES = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
CARDINALITIES = [7912889, 33823, 17139, 7339, 20046, 4, 7105, 1382, 63, 5554114, 582469, 245828, 11, 2209,
                 10667, 104, 4, 968, 15, 8165896, 2675940, 7156453, 302516, 12022, 97, 35]


def write_criteo_like(root: Path, rows: int, hotness: str = "one-hot") -> Path:
    """A 'train' split of ``rows`` random rows in the split_binary layout (``hotness``: see the module doc)."""
    rng = np.random.default_rng(0)
    split = root / "train"
    split.mkdir(parents=True)
    num, cats = [f"num_{i}" for i in range(13)], [f"cat_{i}" for i in range(26)]
    (rng.random(rows) < 0.25).tofile(split / "label.bin")
    rng.random((rows, 13), dtype=np.float32).astype(np.float16).tofile(split / "numerical.bin")
    features = {"label": Feature(dtype="bool"), **{n: Feature(dtype="float16") for n in num}}
    chunks = [Chunk(type="split_binary", features=["label"], files=["train/label.bin"]),
              Chunk(type="split_binary", features=num, files=["train/numerical.bin"])]
    for name, card, size in zip(cats, CARDINALITIES, MLPERF_SIZES):
        dtype = "int8" if card < 127 else "int16" if card < 32767 else "int32"
        size = 1 if hotness == "one-hot" else size
        files = [f"train/{name}.bin"]
        if hotness == "variable" and size > 1:
            lengths = rng.integers(0, 2 * size + 1, rows)
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64).tofile(split / f"{name}.offsets.bin")
            files.append(f"train/{name}.offsets.bin")
            count, extra = int(lengths.sum()), {"hotness": "variable"}
        else:
            count, extra = rows * size, ({"hotness": size} if size > 1 else {})
        rng.integers(0, card, count).astype(dtype).tofile(split / f"{name}.bin")
        features[name] = Feature(dtype=dtype, cardinality=card, **extra)
        chunks.append(Chunk(type="split_binary", features=[name], files=files))
    save(FeatureSpec(feature_spec=features, source_spec={"train": chunks},
                     channel_spec={"label": ["label"], "numerical": num, "categorical": cats}), str(root))
    return root


def epoch_rate(ds: SplitBinaryDataset, batch: int, world_size: int, prefetch: int, repeat: int) -> float:
    """Best of ``repeat`` epochs: rank 0's samples per second."""
    best = 0.0
    for epoch in range(repeat):
        start, samples = time.perf_counter(), 0
        for b in ds.batches(batch, world_size=world_size, epoch=epoch, shuffle=True, prefetch=prefetch):
            samples += len(b.labels)
        best = max(best, samples / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hotness", choices=["one-hot", "fixed", "variable"], default="one-hot")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = write_criteo_like(Path(tmp) / "ds", args.rows, args.hotness)
        fsspec.filesystem("memory").put(str(root), "/bench-ds", recursive=True)
        start = time.perf_counter()
        remote = SplitBinaryDataset("memory://bench-ds", "train", cache_dir=str(Path(tmp) / "cache"))
        fill_s = time.perf_counter() - start
        sources = {"local mmap": SplitBinaryDataset(str(root), "train"), "memory:// via cache": remote}
        mb = sum(p.stat().st_size for p in (root / "train").iterdir()) / 1e6
        print(json.dumps({"what": "cache fill", "source": "memory://", "mb": round(mb, 1), "seconds": round(fill_s, 2)}))
        for source, ds in sources.items():
            for world_size in (1, 2):
                for prefetch in (0, 2):
                    rate = epoch_rate(ds, args.batch, world_size, prefetch, args.repeat)
                    print(json.dumps({"what": "epoch", "hotness": args.hotness, "source": source,
                                      "rows": args.rows, "batch": args.batch,
                                      "world_size": world_size, "rank": 0, "prefetch": prefetch,
                                      "samples_per_s": round(rate)}))


if __name__ == "__main__":
    main()
