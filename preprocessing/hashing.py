"""Stable 64-bit hashes (same result in every process, run and library version)."""

from __future__ import annotations

import hashlib

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser of unsigned 64-bit integers (vectorised)."""
    z = np.asarray(x).astype(np.uint64) + _GOLDEN
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hash_strings(values: list[str]) -> np.ndarray:
    """64-bit blake2b of each string's UTF-8 bytes."""
    return np.array([int.from_bytes(hashlib.blake2b(v.encode(), digest_size=8).digest(), "little")
                     for v in values], dtype=np.uint64)


def hash_values(values: np.ndarray | list) -> np.ndarray:
    """Stable hash of raw categorical values: integers via splitmix64, strings via blake2b."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return splitmix64(values.astype(np.int64).view(np.uint64) if values.dtype.kind == "i" else values)
    return hash_strings([str(v) for v in values])


def unit_interval(seed: int, index: np.ndarray) -> np.ndarray:
    """A stable uniform number in [0, 1) per (seed, row index)."""
    h = splitmix64(splitmix64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF)) ^ np.asarray(index, dtype=np.uint64))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
