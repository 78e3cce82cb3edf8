"""Where a URI points, for comparing places: ``place`` (its scheme and path segments, a local path absolute and
normalised) and ``inside`` (one place in a folder). The store's layout (common.store) and its errors
(common.store_errors) both compare places; neither needs the other for it."""

from __future__ import annotations

import os


def place(uri: str) -> tuple[str, tuple[str, ...]] | None:
    """(scheme, path segments) of ``uri`` for comparing places: a local path absolute and normalised, s3a as s3;
    None for a remote path with '.' or '..' segments (S3 takes them literally: such a key is no place to trust)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme == "file":
        return "file", tuple(p for p in os.path.abspath(rest if sep else uri).split("/") if p)
    segments = tuple(p for p in rest.split("/") if p)
    return None if {".", ".."} & set(segments) else ({"s3a": "s3"}.get(scheme, scheme), segments)


def inside(uri: str, root: str) -> bool:
    """Whether ``uri`` is the folder ``root`` or lies in it (same scheme, bucket and path prefix, segment by segment:
    ``s3://b/store2`` is not in ``s3://b/store``)."""
    where, folder = place(uri), place(root)
    return where is not None and folder is not None and where[0] == folder[0] and \
        where[1][:len(folder[1])] == folder[1]
