"""The store owned whole (issue 33 §4) and the locations its records keep (issue 34 §4): ``Store`` builds every
top-level URI and lists runs and models; ``relative`` and ``resolve`` convert a place in the store to the
store-relative location a record keeps and back, an absolute location of a store that moved found where it is now;
a local store's '.' and '..' are normalised, a remote one's refused in one line."""

from __future__ import annotations

import pytest

from common.errors import UserError
from common.store import Store, is_location
from common.uri import inside


def test_a_local_store_is_normalised(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Store(f"{tmp_path}/a/../b/./c/").uri == f"{tmp_path}/b/c"
    assert Store(f"file://{tmp_path}/a/../b").uri == f"{tmp_path}/b" == Store("a/../b").uri


@pytest.mark.parametrize("uri, fixed", [("s3://bucket/a/../b", "s3://bucket/b"), ("s3://bucket/./b/", "s3://bucket/b"),
                                        ("s3a://bucket/a/..", "s3a://bucket"), ("memory://x/../y", "memory://x/y")])
def test_a_remote_store_with_dot_segments_is_refused_in_one_line(uri, fixed):
    with pytest.raises(UserError) as refused:
        Store(uri)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"store '{uri}' has '.' or '..' segments, which ")
    assert "takes literally" in message and message.endswith(f"Fix: name it without them ({fixed}).")


def test_store_builds_every_top_level_uri(tmp_path):
    store = Store(str(tmp_path))
    assert store.run_uri("r1") == f"{tmp_path}/runs/r1" and store.tune_uri("t") == f"{tmp_path}/tunes/t"
    assert store.dataset_uri("criteo-1c7bb9f6a58e") == f"{tmp_path}/datasets/criteo-1c7bb9f6a58e"
    assert store.model_uri("ctr") == f"{tmp_path}/models/ctr"
    assert Store("s3://b/p/").model_uri("ctr") == "s3://b/p/models/ctr"
    for bad in ("..", ".", "a/b", ""):
        with pytest.raises(UserError, match=r"dataset name .* cannot name a folder in the store's datasets/ folder"):
            store.dataset_uri(bad)
    with pytest.raises(UserError, match=r"model name '\.\./x' cannot name a folder"):
        store.model_uri("../x")


def test_runs_and_models_list_their_folders(tmp_path):
    store = Store(str(tmp_path))
    assert store.runs() == [] and store.models() == []
    for folder in ("runs/r2", "runs/r1", "runs/.hidden", "models/ctr", "models/_x", "datasets/d"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "runs" / "a-file").write_text("x")
    assert store.runs() == ["r1", "r2"] and store.models() == ["ctr"]


def test_relative_and_resolve_convert_places_in_the_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = Store("s3://b/store")
    assert store.relative("s3://b/store/runs/r1") == "runs/r1" == store.relative("s3a://b/store/runs/r1/")
    assert store.relative("s3://b/store/datasets/d/vocab") == "datasets/d/vocab"
    for outside in ("s3://b/store2/runs/r1", "s3://c/store/runs/r1", "/b/store/runs/r1", "s3://b/store",
                    "s3://b/store/elsewhere/x", "s3://b/store/../store/runs/r1"):
        assert store.relative(outside) == outside
    assert store.resolve("runs/r1") == "s3://b/store/runs/r1" and store.resolve("models/m/bundles/r") == \
        "s3://b/store/models/m/bundles/r"
    assert store.resolve("s3://b/store/runs/r1") == "s3://b/store/runs/r1"
    local = Store("store")
    assert local.relative(f"{tmp_path}/store/runs/r1") == "runs/r1" == local.relative("store/runs/r1")
    assert local.resolve("runs/r1") == f"{tmp_path}/store/runs/r1"
    assert is_location("runs/r1") and not is_location("data/criteo") and not is_location("/store/runs/r1")
    assert not inside(local.resolve("runs/../../x"), local.uri)   # a location that climbs out is no place in it


def test_an_absolute_location_of_a_moved_store_is_found_where_it_is_now(tmp_path):
    store = Store(str(tmp_path / "restored"))
    (tmp_path / "restored" / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "restored" / "models" / "ctr").mkdir(parents=True)
    assert store.resolve("/old/store/runs/r1") == f"{store.uri}/runs/r1"
    assert store.resolve("s3://bucket/models/x/runs/r1") == f"{store.uri}/runs/r1"   # the last folder name
    assert store.resolve("/old/store/models/ctr/bundles/r1") == f"{store.uri}/models/ctr/bundles/r1"
    for other in ("/old/store/runs/r2", "/old/store/datasets/d1/vocab", "/old/elsewhere/r1", "s3://b/a/../runs/r2"):
        assert store.resolve(other) == other   # nothing of that name here: as written, for the caller to refuse
