"""The artifact store: clear errors before any work starts, a working S3 store passes, secrets redacted."""

from __future__ import annotations

import time

import pytest

from common.errors import UserError
from common.s3 import redact
from common.atomic import write_uri
from common.store import Store, filesystem, has_file, store_of
from common.uri import inside
from helpers.processes import free_port


def test_local_store_is_made_absolute_and_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = Store("artifacts")
    store.check()
    assert store.uri == str(tmp_path / "artifacts") and (tmp_path / "artifacts").is_dir()
    assert not list((tmp_path / "artifacts").iterdir())  # the probe file is removed
    assert store.run_uri("r1") == f"{tmp_path}/artifacts/runs/r1"


@pytest.mark.parametrize("name", ["../models/prod", "/other-bucket/x", "..", ".", "a/b", ".hidden", "x\n", "", "x" * 256])
def test_a_run_name_stays_in_the_runs_folder(name, tmp_path):
    assert Store(str(tmp_path)).run_uri("ctr-2026-11-03-ab12") == f"{tmp_path}/runs/ctr-2026-11-03-ab12"
    with pytest.raises(UserError, match=r"cannot name a folder in the store's runs/ folder\. Fix: .* \(no '/'\)"):
        Store(str(tmp_path)).run_uri(name)


def test_inside_compares_places_segment_by_segment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert inside("s3://b/store/runs/r1", "s3://b/store") and inside("s3a://b/store/", "s3://b/store")
    assert not inside("s3://b/store2/runs/r1", "s3://b/store") and not inside("s3://c/store/r", "s3://b/store")
    assert not inside("s3://b/store/../x", "s3://b/store") and not inside("s3://b/store/x", "/b/store")
    assert inside("store/runs/r1", str(tmp_path / "store")) and inside(f"file://{tmp_path}/store/r", "store")
    assert not inside(str(tmp_path / "store" / ".." / "x"), "store")
    assert store_of("s3://b/p/runs/r1", "runs") == "s3://b/p" == store_of("s3://b/p/models/ctr/", "models")
    assert store_of("s3://b/p/r1", "runs") == "s3://b/p" and store_of("runs/r1", "runs") == str(tmp_path)


def test_default_store_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DLRMFLOW_STORE", str(tmp_path / "env-store"))
    assert Store().uri == str(tmp_path / "env-store")


@pytest.mark.parametrize("uri, message", [
    ("gs://bucket/x", "unsupported scheme 'gs'"),
    ("s3://key:secret@bucket/x", "holds credentials"),
])
def test_bad_uris(uri, message):
    with pytest.raises(UserError, match=message):
        Store(uri)


def test_unwritable_local_store(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not writable"):
        Store(str(tmp_path / "file" / "store")).check()


def test_s3_store_passes_and_missing_bucket_fails(s3_server):
    Store("s3://store/dlrm").check()
    assert "Contents" not in s3_server.list_objects_v2(Bucket="store")
    with pytest.raises(UserError, match="bucket 'nope' does not exist"):
        Store("s3://nope/dlrm").check()
    with pytest.raises(FileNotFoundError):   # a write never makes the store's bucket
        write_uri("s3://nope/dlrm/x.json", "{}")
    assert "nope" not in [b["Name"] for b in s3_server.list_buckets()["Buckets"]]


def test_has_file_asks_the_store_once(s3_server):
    fs, path = filesystem("s3://store/dlrm/d/_SUCCESS")
    fs.connect()
    calls = []
    fs.s3.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
    assert not has_file(fs, path) and calls == ["HeadObject"]   # no listing after the HEAD finds nothing
    s3_server.put_object(Bucket="store", Key="dlrm/d/_SUCCESS/inside", Body=b"")
    assert not has_file(fs, path)   # a folder of that name is not the file
    fs.ls("store/dlrm/d")   # a listing cached before the file appears does not hide it
    s3_server.put_object(Bucket="store", Key="dlrm/d/_SUCCESS", Body=b"")
    assert has_file(fs, path)


def test_missing_credentials(monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(UserError, match="no AWS credentials"):
        Store("s3://store/dlrm").check()


def test_unreachable_endpoint_fails_fast(monkeypatch):
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    start = time.monotonic()
    with pytest.raises(UserError, match="cannot reach http://127.0.0.1"):
        Store("s3://store/dlrm").check()
    assert time.monotonic() - start < 30


def test_redact(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    assert redact("key=s3cr3t-value;") == "key=***;"


@pytest.mark.parametrize("error, retried", [
    (ConnectionResetError("reset by peer"), True), (TimeoutError("read timed out"), True),
    (FileNotFoundError("s3://b/x"), False), (PermissionError("denied"), False),
    (UserError("bad row"), False), (ValueError("a bug"), False),
])
def test_only_transient_io_errors_are_retried(error, retried):
    from prefect.states import Failed

    from flows.errors import transient

    assert transient(None, None, Failed(data=error)) is retried
