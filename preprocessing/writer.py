"""The final dataset through fsspec: split files concatenated from the parts in input order,
checksums, vocabularies, the output feature spec and ``_SUCCESS`` (written last)."""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common.atomic import atomic_open, write_uri
from common.store import filesystem
from feature_spec import FeatureSpec, join_uri, save

from . import lists

SUCCESS = "_SUCCESS"
_COPY_BYTES = 16 << 20


def is_complete(dataset: str) -> bool:
    """True when a dataset folder has its ``_SUCCESS`` marker."""
    fs, path = filesystem(dataset)
    return fs.exists(posixpath.join(path, SUCCESS))


def _copied(sources: list[Path]) -> Iterator[bytes]:
    for src in sources:
        with open(src, "rb") as f:
            while chunk := f.read(_COPY_BYTES):
                yield chunk


def _put(dataset: str, rel: str, sources: list[Path], chunks=_copied) -> str:
    """Write ``chunks(sources)`` (default: the concatenation of local ``sources``) to dataset/rel atomically;
    returns its blake2b."""
    fs, path = filesystem(join_uri(dataset, rel))
    digest = hashlib.blake2b(digest_size=32)
    with atomic_open(path, "wb", fs) as out:
        for chunk in chunks(sources):
            digest.update(chunk)
            out.write(chunk)
    return "blake2b:" + digest.hexdigest()


def write_splits(dataset: str, parts: list[Path], splits: list[str], files: list[str],
                 offsets: dict[str, str] | None = None) -> dict[str, str]:
    """Each <split>/<file> from the encoded parts in input order, and each variable-length list's offsets file
    from its parts' lengths files (``offsets``: lengths file -> offsets file name, see ``lists``); returns
    checksums by relative path."""
    jobs = [(f"{split}/{name}", f"{split}/{name}", _copied) for split in splits for name in files]
    jobs += [(f"{split}/{name}", f"{split}/{lengths}", lists.offsets_chunks)
             for split in splits for lengths, name in (offsets or {}).items()]
    # hashing and file I/O release the GIL: two files at a time keep both cores busy
    with ThreadPoolExecutor(2) as pool:
        sums = list(pool.map(lambda j: _put(dataset, j[0], [p / j[1] for p in parts if (p / j[1]).exists()], j[2]),
                             jobs))
    return {rel: s for (rel, _, _), s in zip(jobs, sums)}


def vocab_file(feature: str) -> str:
    """A vocabulary's path relative to the dataset folder."""
    return f"vocab/{feature}.parquet"


def write_vocab(dataset: str, sources: dict[str, Path]) -> dict[str, str]:
    """Each feature's vocabulary (a local file) copied to the dataset; returns checksums by relative path."""
    return {vocab_file(f): _put(dataset, vocab_file(f), [path]) for f, path in sources.items()}


def finish(dataset: str, spec: FeatureSpec) -> None:
    """Write feature_spec.yaml, then ``_SUCCESS``."""
    save(spec, dataset)
    write_uri(join_uri(dataset, SUCCESS), "")
