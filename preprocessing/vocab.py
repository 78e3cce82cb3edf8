"""Vocabularies: value counts per file (over the counted splits), merged into value -> index tables.

Index semantics (NVIDIA's): values with count >= T get 1..K by descending count, ties by
ascending value; 0 is missing or rare; T=0 and T=1 both keep every seen value; cardinality K+1.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

# re-aggregate pending per-batch counts once they outgrow the running totals by this factor
_COMPACT_FACTOR = 4


class Counter:
    """Running value counts of some categorical columns, bounded by their vocabulary size."""

    def __init__(self, features: list[str]):
        self.pending: dict[str, list[pl.DataFrame]] = {f: [] for f in features}
        self.sizes = dict.fromkeys(features, 0)

    def add(self, df: pl.DataFrame) -> None:
        """Count the non-missing values of each feature in ``df`` (all features in one parallel pass)."""
        lazy = df.lazy()
        queries = [lazy.select(pl.col(f).alias("value")).drop_nulls().group_by("value")
                   .agg(pl.len().cast(pl.Int64).alias("count")) for f in self.pending]
        for (f, parts), counts in zip(self.pending.items(), pl.collect_all(queries)):
            parts.append(counts)
            if sum(map(len, parts)) > _COMPACT_FACTOR * max(self.sizes[f], 1 << 16):
                self._compact(f)

    def _compact(self, f: str) -> pl.DataFrame:
        merged = sum_counts(self.pending[f])
        self.pending[f], self.sizes[f] = [merged], len(merged)
        return merged

    def write(self, folder: Path) -> None:
        """One Arrow IPC file of (value, count) per feature."""
        for f in self.pending:
            self._compact(f).write_ipc(folder / f"{f}.arrow", compression="uncompressed")


def sum_counts(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """(value, count) tables summed by value."""
    return pl.concat(parts).group_by("value").agg(pl.col("count").sum())


def build(count_files: list[Path], threshold: int, dtype: pl.DataType) -> pl.DataFrame:
    """Merge per-file counts into the vocabulary (value, count, index) for one feature."""
    parts = [pl.read_ipc(p) for p in count_files]
    counts = sum_counts(parts) if parts else pl.DataFrame(schema={"value": dtype, "count": pl.Int64})
    kept = counts.filter(pl.col("count") >= max(threshold, 1)).sort(["count", "value"], descending=[True, False])
    return kept.with_columns(pl.int_range(1, len(kept) + 1, dtype=pl.Int64).alias("index"))


def encoder(vocabs: dict[str, pl.DataFrame]):
    """A function rows -> a frame of int64 indices per vocabulary feature (0: missing or not kept)."""
    exprs = [pl.col(f).replace_strict(v["value"], v["index"], default=0, return_dtype=pl.Int64)
             for f, v in vocabs.items()]

    def encode(df: pl.DataFrame) -> pl.DataFrame:
        return df.select(exprs)
    return encode
