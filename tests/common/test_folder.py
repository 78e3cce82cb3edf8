"""common.folder: a file rewritten by another process after this one listed its folder is read as it is now."""

from __future__ import annotations

from common.folder import Folder


def test_a_file_rewritten_by_another_process_is_read_fresh_on_s3(s3_server):
    run = Folder("s3://store/runs/r")
    run.write_text('{"step": 10}', "checkpoints", "latest")
    run.fs.ls(run.path("checkpoints"))   # the listing caches the pointer's ETag, as a resuming flow's does
    assert run.read_text("checkpoints", "latest") == '{"step": 10}'
    s3_server.put_object(Bucket="store", Key="runs/r/checkpoints/latest", Body=b'{"step": 20}')   # a rank rewrites it
    assert run.exists("checkpoints", "latest")
    assert run.read_text("checkpoints", "latest") == '{"step": 20}'   # was s3fs.utils.FileExpired (a stale ETag)


def test_a_local_file_is_read_as_written(tmp_path):
    folder = Folder(str(tmp_path / "f"))
    folder.write_text("one", "a.txt")
    folder.write_text("two", "a.txt")
    assert folder.read_text("a.txt") == "two"
