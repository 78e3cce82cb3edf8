"""A file's profile: what the data gate (``nightly.datacheck``) compares day by day, recorded by the parse
(``stages.parse_file``) beside the file's parts (``profile.json``), so no check reads the data again.

A profile holds the rows, the positive labels, each feature's missing values, each numerical's histogram over
fixed bins (of the transformed values, missing ones left out) and, where the parse counts the file's values, each
vocabulary feature's count of values and its ``TOP`` most frequent values (from the file's all-rows counts).

It also holds a sample of the file's row hashes (``duplicates``): each row's hash over all its parsed columns (a
coded value by its value, not its block's code), kept where the hash's top ``bits`` bits are 0 (1/16 of the rows,
fewer in a file whose sample would pass ``DUP_KEPT`` distinct hashes), as hash -> rows: a row repeated anywhere in
the day falls in the sample with each of its copies, so the sampled share of repeats is the day's.

The bins are fixed, the same for every file and dataset: four per doubling of |x| (the float32 exponent and its two
leading mantissa bits), signed; bin 0 holds |x| < 2^-6, bin b = 4k + j + 1 holds |x| in [1 + j/4, 1 + (j + 1)/4)
times 2^(k - 6), up to 2^41 (above: the last bin); bin -b the same negative values.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

import feature_spec as fspec

from . import vocab
from .config import PreprocessConfig
from .job import Job
from .transforms import Transforms

TOP = 100            # the most frequent values of a vocabulary feature kept per file
DUP_BITS = 4         # a row is in the duplicates' sample when its hash's top DUP_BITS bits are 0: 1/16 of the rows
DUP_KEPT = 4096      # distinct sampled hashes kept per file; beyond, the sample halves (one more bit)
_LOW = 121 * 4       # float32 magnitude code (exponent * 4 + 2 mantissa bits) of 2^-6: bin 1
_BINS = 188          # bins per sign: up to 2^41; beyond goes to the last


def bins(values: np.ndarray) -> np.ndarray:
    """Each value's fixed bin (module doc): ... -2, -1, 0, 1, 2 ...; 0 holds |x| < 2^-6."""
    return _FOLD[_codes(values)] - _BINS


def _codes(values: np.ndarray) -> np.ndarray:
    """The float32 sign, exponent and two leading mantissa bits of each value: 0..2047."""
    return np.right_shift(np.ascontiguousarray(values, np.float32).view(np.uint32), 21)


def _fold_table() -> np.ndarray:
    code = np.arange(2048)
    b = np.clip((code & 1023) - (_LOW - 1), 0, _BINS)
    return np.where(code >= 1024, -b, b) + _BINS


_FOLD = _fold_table()   # code -> its bin's position in a dense histogram (bin + _BINS)


def _histogram(values: np.ndarray) -> np.ndarray:
    """Counts per code (``_codes``; a shift and a bincount: the cheap part of a block), folded into the bins once
    per file (``finish``)."""
    return vocab.bincount(_codes(values), 2048)


def block_profile(out: pl.DataFrame, t: Transforms, dictionaries: dict, numerical_missing: dict[str, int]) -> dict:
    """The profile of a block of intermediate rows (``out``; its features in ``dictionaries`` hold codes, 0 where
    missing; hashed ones indices, 0 where missing): rows, positives, missing per feature, a dense histogram per
    numerical (whose missing values, filled with 0, ``numerical_missing`` counts)."""
    exprs = [pl.col(t.label).cast(pl.Int64).sum().alias("\0label")]
    for c in t.categorical:
        col = pl.col(c.name)
        if c.multi_valued:
            gone = col.list.len().fill_null(0).eq(0).sum()
        elif c.name in dictionaries or c.hash_buckets is not None:
            gone = col.eq(0).sum()
        else:
            gone = col.null_count()
        exprs.append(gone.cast(pl.Int64).alias(c.name))
    found = out.lazy().select(exprs).collect().row(0, named=True)
    missing = {n: int(numerical_missing.get(n, 0)) for n, _ in t.numerical}
    missing |= {c.name: int(found[c.name]) for c in t.categorical}
    histograms = {}
    for n, _ in t.numerical:
        h = _histogram(out[n].to_numpy())
        h[0] -= missing[n]   # the missing values: 0.0, code 0
        histograms[n] = h
    return {"rows": len(out), "positives": int(found["\0label"]), "missing": missing, "histograms": histograms,
            "duplicates": _sample(row_hashes(out, dictionaries), DUP_BITS)}


_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise (uint64, wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * _MIX[0]
    x = (x ^ (x >> np.uint64(27))) * _MIX[1]
    return x ^ (x >> np.uint64(31))


def row_hashes(out: pl.DataFrame, dictionaries: dict) -> np.ndarray:
    """Each row's 64-bit hash over all its columns, the same for the same row in any block or file: a coded column
    hashed by its values (``dictionaries``), a number by its bits; any other column (strings, lists) by polars'
    hash, stable within a polars version (a coded list by its block's codes: its row repeated in another block is
    missed)."""
    h = np.zeros(len(out), np.uint64)
    with np.errstate(over="ignore"):
        for name in out.columns:
            col = out[name]
            if name in dictionaries and not isinstance(col.dtype, pl.List):
                values = np.concatenate(([np.uint64(_MIX[2])], np.asarray(dictionaries[name]).astype(np.uint64)))
                x = values[col.to_numpy()]
            elif col.dtype.is_float() and not col.null_count():
                x = col.cast(pl.Float64).to_numpy().view(np.uint64)
            elif col.dtype.is_integer() and not col.null_count():
                x = col.to_numpy().astype(np.uint64)
            else:
                x = col.hash(seed=0).to_numpy()
            h = _mix(h * _MIX[2] + x)
    return h


def _sample(hashes: np.ndarray, bits: int) -> tuple[int, np.ndarray, np.ndarray]:
    """(bits, the distinct hashes whose top ``bits`` bits are 0, their rows), at most ``DUP_KEPT`` hashes: more
    bits while there are more."""
    hashes = hashes[hashes >> np.uint64(64 - bits) == 0]
    kept, counts = np.unique(hashes, return_counts=True)
    while len(kept) > DUP_KEPT:
        bits += 1
        inside = kept >> np.uint64(64 - bits) == 0
        kept, counts = kept[inside], counts[inside]
    return bits, kept, counts.astype(np.int64)


def _merge_samples(a: tuple, b: tuple) -> tuple:
    """Two blocks' samples (``_sample``) as one, at the sparser one's bits, rows summed per hash."""
    bits = max(a[0], b[0])
    hashes, counts = np.concatenate((a[1], b[1])), np.concatenate((a[2], b[2]))
    inside = hashes >> np.uint64(64 - bits) == 0
    kept, where = np.unique(hashes[inside], return_inverse=True)
    summed = np.bincount(where, weights=counts[inside], minlength=len(kept)).astype(np.int64)
    while len(kept) > DUP_KEPT:
        bits += 1
        inside = kept >> np.uint64(64 - bits) == 0
        kept, summed = kept[inside], summed[inside]
    return bits, kept, summed


def merge(a: dict | None, b: dict | None) -> dict | None:
    """Two block profiles summed."""
    if a is None or b is None:
        return a or b
    return {"rows": a["rows"] + b["rows"], "positives": a["positives"] + b["positives"],
            "missing": {k: a["missing"][k] + b["missing"][k] for k in a["missing"]},
            "histograms": {k: a["histograms"][k] + b["histograms"][k] for k in a["histograms"]},
            "duplicates": _merge_samples(a["duplicates"], b["duplicates"])}


def finish(profile: dict | None, t: Transforms, counts: Path | None) -> dict:
    """A file's profile as stored: the blocks' sum (histograms as {bin: count}) and, from the file's all-rows
    count folder ``counts`` (None: not counted), each vocabulary feature's values and ``TOP`` values."""
    profile = profile or {"rows": 0, "positives": 0, "missing": {}, "histograms": {}}
    dense = {n: np.bincount(_FOLD, weights=h, minlength=2 * _BINS + 1).astype(np.int64)
             for n, h in profile["histograms"].items()}
    out = {"rows": profile["rows"], "positives": profile["positives"], "missing": profile["missing"],
           "histograms": {n: {str(int(b) - _BINS): int(h[b]) for b in np.flatnonzero(h)} for n, h in dense.items()}}
    bits, hashes, rows = profile.get("duplicates") or (DUP_BITS, np.zeros(0, np.uint64), np.zeros(0, np.int64))
    out["duplicates"] = {"bits": int(bits), "hashes": [int(x) for x in hashes], "counts": [int(x) for x in rows]}
    if counts is not None:
        out["values"], out["top"] = {}, {}
        for f in t.vocab_features:
            table = vocab.read_counts(counts, f, summed=True)
            out["values"][f] = int(table["count"].sum())
            out["top"][f] = _top(table)
    return out


def _top(table: pl.DataFrame) -> dict:
    """The ``TOP`` most frequent values of a (value, count) table (ties: the smaller value first) as lists."""
    if len(table) > TOP:
        table = table.filter(pl.col("count") >= table["count"].top_k(TOP).min())
    table = table.sort(["count", "value"], descending=[True, False]).head(TOP)
    return {"values": table["value"].to_list(), "counts": table["count"].to_list()}


class StoredProfiles:
    """What the parts of a preprocessing config's input files hold for the data gate: each file's profile and,
    for the unseen shares, its all-rows counts (no pass over the data)."""

    def __init__(self, config: PreprocessConfig):
        self.job = Job.from_config(config)

    def profiles(self) -> list[tuple[str, dict | None]]:
        """(input URI, its profile) per input file; None where its parts hold none (removed by a prune, or
        parsed before profiles were recorded)."""
        mirror, found = self.job.mirror, []
        for f, parts in zip(self.job.inputs, self.job.parts):
            text = mirror.read_text(parts.profile) if mirror.complete(parts.profile) else None
            found.append((f.uri, json.loads(text) if text else None))
        return found

    def identities(self) -> dict[str, str]:
        """Input URI -> its identity (``InputFile.identity``)."""
        return {f.uri: f.identity for f in self.job.inputs}

    def unseen(self, groups: dict[str, list[str]], dataset: str) -> dict[str, dict[str, float]]:
        """Per group of input files (name -> their URIs) and vocabulary feature: the share of the files' values (their
        stored all-rows counts) that the vocabulary of ``dataset`` holds no index for. A feature is left out where
        that dataset has no vocabulary of it, a group where a file of it has no stored counts."""
        parts = {name: [p for f, p in zip(self.job.inputs, self.job.parts) if f.uri in set(uris)]
                 for name, uris in groups.items()}
        parts = {name: found for name, found in parts.items()
                 if found and all(self.job.mirror.pull(p.counts) for p in found)}
        if not parts:
            return {}
        spec = fspec.load(dataset)
        shares: dict[str, dict[str, float]] = {name: {} for name in parts}
        for feature in self.job.transforms.vocab_features:
            if feature not in (spec.metadata.get("vocab") or {}):
                continue
            known = vocab.read_vocab(dataset, spec, feature)["value"]
            for name, found in parts.items():
                counts = pl.concat([vocab.read_counts(p.counts, feature) for p in found])
                values = known.cast(counts["value"].dtype, strict=False).drop_nulls()
                total = int(counts["count"].sum())
                unseen = int(counts.filter(~pl.col("value").is_in(values.implode()))["count"].sum())
                shares[name][feature] = unseen / total if total else 0.0
        return shares
