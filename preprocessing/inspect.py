"""Summary of a preprocessed dataset: rows per split, per-feature cardinality, dtype, share of index 0 (of the
rows; of the elements for a list feature, marked '/el'), hotness and mean/max list length; and ``verify``: every
file against the sizes its metadata gives and the checksums it records."""

from __future__ import annotations

import hashlib

import feature_spec as fspec
from common.errors import UserError
from common.store import filesystem

_READ_BYTES = 16 << 20


def _rows_from_files(dataset: str, spec: fspec.FeatureSpec) -> dict[str, int]:
    """Rows per split from the size of its label file (one bool byte a row): for datasets whose
    metadata has no row counts (NVIDIA's tools write none)."""
    rows = {}
    for split in spec.splits:
        fs, path = filesystem(fspec.file_uri(dataset, spec.file_of(split, spec.label_feature)[0]))
        if fs.exists(path):
            rows[split] = fs.size(path)
    return rows


def summary(dataset: str) -> str:
    """A printable summary of the dataset at ``dataset`` (folder or feature_spec.yaml URI)."""
    spec = fspec.load(dataset)
    meta = spec.metadata
    rows = meta.get("rows") or _rows_from_files(dataset, spec)
    index0 = meta.get("index0_rows") or {}
    name = meta.get("name") or fspec.parent_uri(fspec.spec_uri(dataset)).rsplit("/", 1)[-1]
    lines = [f"dataset {name}  fingerprint {meta.get('fingerprint') or 'none (not written by dlrmflow)'}",
             "rows: " + ", ".join(f"{s} {rows.get(s, '?'):,}" if isinstance(rows.get(s), int) else f"{s} ?"
                                  for s in spec.splits)]
    if spec.numerical_features:
        dtype = spec.feature_spec[spec.numerical_features[0]].dtype
        lines.append(f"numerical: {len(spec.numerical_features)} features ({dtype})")
    lines.append(f"label: {spec.label_feature}")
    train = "train" if "train" in index0 else next(iter(index0), None)
    lengths = (meta.get("list_lengths") or {}).get(train) or {}
    head = f"{'feature':<24} {'cardinality':>12} {'dtype':>6} {'index 0 (' + (train or '-') + ')':>16} " \
        f"{'hotness':>9} {'mean len':>9} {'max len':>8}"
    lines += ["", head]
    for name in spec.categorical_features:
        f = spec.feature_spec[name]
        zero = (index0.get(train) or {}).get(name)
        n = rows.get(train) or 0
        share = f"{zero / n:.1%}" if zero is not None and n else "-"
        hashed = " (hashed)" if name in (meta.get("hash_buckets") or {}) else ""
        hotness, mean, longest = _lengths(f, lengths.get(name))
        if f.multi_valued and lengths.get(name):   # a list's share of index 0 is per element
            st = lengths[name]
            share = f"{st['index0'] / st['values']:.1%}/el" if st["values"] else "-"
        lines.append(f"{name:<24} {f.cardinality:>12,} {f.dtype:>6} {share:>16} {hotness:>9} {mean:>9} "
                     f"{longest:>8}{hashed}")
    return "\n".join(lines)


def _lengths(f: fspec.Feature, stats: dict | None) -> tuple[str, str, str]:
    """(hotness, mean, max list length) of a categorical as text: from the dataset's ``list_lengths`` metadata,
    else from its hotness (a variable-length list without metadata: '?')."""
    if not f.multi_valued:
        return "1", "1", "1"
    hotness = "variable" if f.variable_length else str(f.values_per_row)
    if stats and stats.get("rows"):
        return hotness, f"{stats['values'] / stats['rows']:.2f}", str(stats["max"])
    n = f.values_per_row
    return (hotness, str(n), str(n)) if n else (hotness, "?", "?")


def verify(dataset: str) -> str:
    """Re-read every file the dataset's metadata records a checksum of (its split files and vocabularies) and
    compare size (from ``metadata.rows``) and checksum; returns a line saying how many files were checked, or
    raises UserError naming each bad file (missing, wrong size, other content)."""
    spec = fspec.load(dataset)
    checksums = spec.metadata.get("checksums") or {}
    if not checksums:
        raise UserError(f"{dataset}: its metadata records no checksums (not written by dlrmflow, or before "
                        "checksums), so it cannot be verified. Fix: nothing to verify; or preprocess it again.")
    sizes = {rel: n for split in spec.splits for rel, n in spec.file_sizes(split).items()}
    bad = []
    for rel, recorded in sorted(checksums.items()):
        fs, path = filesystem(fspec.file_uri(dataset, rel))
        if not fs.exists(path):
            bad.append(f"{rel}: missing")
            continue
        size = fs.size(path)
        if rel in sizes and size != sizes[rel]:
            bad.append(f"{rel}: {size} bytes, the metadata's rows need {sizes[rel]}")
            continue
        algorithm, _, digest = recorded.partition(":")
        found = hashlib.new(algorithm, digest_size=len(digest) // 2) if algorithm == "blake2b" else \
            hashlib.new(algorithm)
        with fs.open(path, "rb") as f:
            while chunk := f.read(_READ_BYTES):
                found.update(chunk)
        if found.hexdigest() != digest:
            bad.append(f"{rel}: checksum {algorithm}:{found.hexdigest()[:16]}... differs from the recorded "
                       f"{recorded[:len(algorithm) + 17]}...")
    if bad:
        raise UserError(f"{dataset}: {len(bad)} of {len(checksums)} files do not match the dataset's metadata:\n  "
                        + "\n  ".join(bad) + "\nFix: the dataset was damaged after it was written; delete the "
                        "dataset folder and run preprocessing again.")
    return f"verified: {len(checksums)} files match their recorded sizes and checksums"
