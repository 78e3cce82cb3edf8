"""Summary of a preprocessed dataset: rows and label rate per split, per-feature cardinality, dtype, share of index 0
(of the rows; of the elements for a list feature, marked '/el'), hotness and mean/max list length; ``verify``: every
file against the sizes its metadata gives and the checksums it records; and ``verify_once``: the same check when a
run reuses a finished dataset, recorded in the dataset (``writer.VERIFIED``) so that it is done once per write."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import posixpath
import time
from typing import Callable

import feature_spec as fspec
from common.atomic import write_uri
from common.errors import UserError
from common.store import filesystem

from . import writer

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
    lines.append(f"label: {spec.label_feature}; label rate " + ", ".join(
        f"{split} {rate}" for split, rate in _label_rates(dataset, spec).items()))
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


def _label_rates(dataset: str, spec: fspec.FeatureSpec) -> dict[str, str]:
    """Each split's share of label 1 (its label file: one bool byte a row), as text; '~' where only the first
    ``_LABEL_BYTES`` rows were read, '?' where the file is missing."""
    import numpy as np
    rates = {}
    for split in spec.splits:
        fs, path = filesystem(fspec.file_uri(dataset, spec.file_of(split, spec.label_feature)[0]))
        try:
            with fs.open(path, "rb") as f:
                ones = rows = 0
                while rows < _LABEL_BYTES and (block := f.read(min(_READ_BYTES, _LABEL_BYTES - rows))):
                    ones, rows = ones + int(np.count_nonzero(np.frombuffer(block, np.uint8))), rows + len(block)
                more = bool(f.read(1))
        except FileNotFoundError:
            rates[split] = "?"
            continue
        rates[split] = f"{'~' if more else ''}{ones / rows:.2%}" if rows else "-"
    return rates


_LABEL_BYTES = 256 << 20   # the rows a label rate reads at most per split (a sample's rate beyond: '~')


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


def _differs(fs, path: str, rel: str, recorded: str, size: int | None, listed: dict | None = None) -> str | None:
    """Why the file ``rel`` (at ``path`` of ``fs``) does not match the dataset's metadata: missing, another size than
    ``size`` (its rows' bytes, when known) or another checksum than ``recorded``; None when it matches. ``listed``:
    a listing of the dataset's files by relative path, to take its existence and size from."""
    if listed is not None and rel not in listed or listed is None and not fs.exists(path):
        return f"{rel}: missing"
    found_size = listed[rel]["size"] if listed is not None else fs.size(path)
    if size is not None and found_size != size:
        return f"{rel}: {found_size} bytes, the metadata's rows need {size}"
    algorithm, _, digest = recorded.partition(":")
    found = hashlib.new(algorithm, digest_size=len(digest) // 2) if algorithm == "blake2b" else \
        hashlib.new(algorithm)
    with fs.open(path, "rb") as f:
        while chunk := f.read(_READ_BYTES):
            found.update(chunk)
    if found.hexdigest() != digest:
        return (f"{rel}: checksum {algorithm}:{found.hexdigest()[:16]}... differs from the recorded "
                f"{recorded[:len(algorithm) + 17]}...")
    return None


def _checksums(dataset: str) -> tuple[fspec.FeatureSpec, dict[str, str], dict[str, int]]:
    """The dataset's spec, its recorded checksums by relative path (UserError when it records none) and the sizes
    its rows give."""
    spec = fspec.load(dataset)
    checksums = spec.metadata.get("checksums") or {}
    if not checksums:
        raise UserError(f"{dataset}: its metadata records no checksums (not written by dlrmflow, or before "
                        "checksums), so it cannot be verified. Fix: nothing to verify; or preprocess it again.")
    return spec, checksums, {rel: n for split in spec.splits for rel, n in spec.file_sizes(split).items()}


def verify(dataset: str) -> str:
    """Re-read every file the dataset's metadata records a checksum of (its split files and vocabularies) and
    compare size (from ``metadata.rows``) and checksum; returns a line saying how many files were checked, or
    raises UserError naming each bad file (missing, wrong size, other content)."""
    _, checksums, sizes = _checksums(dataset)
    bad = []
    for rel, recorded in sorted(checksums.items()):
        fs, path = filesystem(fspec.file_uri(dataset, rel))
        if (why := _differs(fs, path, rel, recorded, sizes.get(rel))) is not None:
            bad.append(why)
    if bad:
        raise UserError(f"{dataset}: {len(bad)} of {len(checksums)} files do not match the dataset's metadata:\n  "
                        + "\n  ".join(bad) + "\nFix: the dataset was damaged after it was written; delete the "
                        "dataset folder and run preprocessing again.")
    return f"verified: {len(checksums)} files match their recorded sizes and checksums"


def _stamp(info: dict) -> str:
    """What a listing says of a file's last write: its size, modification time and (where the store gives one) ETag.
    Another stamp: the file was written since."""
    when = next((info[k] for k in ("mtime", "LastModified", "last_modified", "updated", "created")
                 if info.get(k) is not None), "")
    etag = info.get("ETag") or info.get("etag") or ""
    return " ".join(str(part) for part in (info.get("size"), when, etag) if part not in ("", None))


def _listing(fs, root: str) -> dict[str, dict]:
    """Every file of the dataset folder ``root`` (relative path) -> what a fresh listing says of it."""
    fs.invalidate_cache(root)
    root = root.rstrip("/")
    return {path[len(root) + 1:]: info for path, info in fs.find(root, detail=True).items()
            if path.startswith(root + "/")}


def _record(fs, path: str) -> dict:
    """The dataset's verification record (``writer.VERIFIED``); empty when there is none or it is unreadable."""
    try:
        with fs.open(path, "rb") as f:
            record = json.loads(f.read())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def verify_once(dataset: str, say: Callable[[str], None] = print) -> bool:
    """Verify a finished dataset that a run reuses, once per write of it: re-read the files its metadata records a
    checksum of and compare (``verify``'s check), unless its verification record (``writer.VERIFIED``) says that
    this write of it (the stamps of its ``_SUCCESS`` and feature spec) was verified already; then only the files
    written since (another size or modification time in a listing) are read again, and when none was, one listing
    and the record are all that is read. Records what was verified, when, and each file's stamp. Returns whether
    files were read. A file that differs: a one-line UserError naming the dataset, the file and the fix, and nothing
    recorded (a run never trains on it)."""
    fs, root = filesystem(dataset)
    listed = _listing(fs, root)
    stamps = {rel: _stamp(info) for rel, info in listed.items()}
    written = {"success": stamps.get(writer.SUCCESS), "spec": stamps.get(fspec.SPEC_FILE)}
    record = _record(fs, posixpath.join(root.rstrip("/"), writer.VERIFIED))
    before = bool(record) and written["success"] is not None and all(record.get(k) == v for k, v in written.items())
    verified = (record.get("files") or {}) if before else {}
    # the same spec (its stamp) records the same files: the record's stamps alone say whether one was written since
    if not verified or any(stamps.get(rel) != stamp for rel, stamp in verified.items()):
        _, checksums, sizes = _checksums(dataset)
        todo = [rel for rel in sorted(checksums) if verified.get(rel) is None or verified[rel] != stamps.get(rel)]
    else:
        todo = []
    if not todo:
        say(f"dataset {dataset}: verified {record.get('verified_at')}, no file written since: not read again")
        return False
    total = sum(listed[rel].get("size") or 0 for rel in todo if rel in listed)
    why = f"written since its verification of {record.get('verified_at')}" if before else \
        "its first use since it was written"
    say(f"verifying dataset {dataset} against its recorded checksums ({why}): {len(todo)} of {len(checksums)} "
        f"files, {total / 1e6:.1f} MB")
    start = time.perf_counter()
    bad = [differs for rel in todo if (differs := _differs(fs, posixpath.join(root.rstrip("/"), rel), rel,
                                                           checksums[rel], sizes.get(rel), listed))]
    if bad:
        more = f" (and {len(bad) - 1} more of its {len(checksums)} files)" if len(bad) > 1 else ""
        raise UserError(f"dataset {dataset} does not match what was written: {bad[0]}{more}. Fix: delete the "
                        f"folder {dataset} and run again, it is preprocessed again (`dlrmflow inspect {dataset} "
                        "--verify` lists every file that differs).")
    seconds = time.perf_counter() - start
    record = {**written, "verified_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "read": {"files": len(todo), "bytes": total, "seconds": round(seconds, 3)},
              "files": {rel: stamps.get(rel) for rel in sorted(checksums)}}
    try:
        write_uri(fspec.join_uri(dataset, writer.VERIFIED), json.dumps(record, indent=1) + "\n")
    except OSError as e:   # a read-only store: verified, not recorded
        say(f"dataset {dataset}: verified, but the record could not be written ({e}); it is verified again on "
            "its next use")
        return True
    say(f"dataset {dataset}: {len(todo)} files verified in {seconds:.1f} s")
    return True
