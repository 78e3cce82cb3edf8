"""The node cache of remote dataset files (training/cache.py) is bounded: least recently used entries go first,
an entry used within the last hour never, and the leftovers of killed downloads are swept."""

from __future__ import annotations

import os
import time

import fsspec

from training.cache import IN_USE_S, evict, local_copy

MIB = 2**20


def _remote(name: str, mib: int) -> str:
    uri = f"memory://cache-test/{name}.bin"
    with fsspec.open(uri, "wb") as f:
        f.write(b"\0" * (mib * MIB))
    return uri


def _age(path: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(os.path.dirname(path), (then, then))


def test_the_least_recently_used_files_go_first_and_recent_ones_never(tmp_path):
    cache = tmp_path / "cache"
    a, b, c = (local_copy(_remote(n, 2), cache) for n in "abc")   # 6 MiB, unbounded
    _age(a, 3 * IN_USE_S)
    _age(b, 2 * IN_USE_S)
    assert local_copy(_remote("a", 2), cache) == a   # a cache hit: a is now the most recently used
    _age(c, 4 * IN_USE_S)
    d = local_copy(_remote("d", 2), cache, max_bytes=5 * MIB)   # 8 MiB > 5: the oldest go (c, then b)
    assert [os.path.exists(p) for p in (a, b, c, d)] == [True, False, False, True]

    e = local_copy(_remote("e", 2), cache, max_bytes=1 * MIB)   # a, d, e all used within the hour: kept
    assert all(os.path.exists(p) for p in (a, d, e))


def test_the_leftover_of_a_killed_download_is_swept(tmp_path):
    cache = tmp_path / "cache"
    kept = local_copy(_remote("f", 1), cache)
    leftover = os.path.join(os.path.dirname(kept), "g.bin.tmp-12345")   # what atomic_path leaves on a kill -9
    with open(leftover, "wb") as f:
        f.write(b"\0" * MIB)
    fresh = leftover.replace("12345", "12346")
    open(fresh, "wb").close()
    then = time.time() - 2 * IN_USE_S
    os.utime(leftover, (then, then))
    assert evict(cache, 10 * MIB) == []
    assert not os.path.exists(leftover) and os.path.exists(fresh) and os.path.exists(kept)   # a live download stays
