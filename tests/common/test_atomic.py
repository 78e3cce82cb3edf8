"""Atomic writes on a real S3 endpoint (moto's server): a write that raises publishes nothing, whether its
bytes were still buffered or already uploaded as parts of a multipart upload (issue 19, section 8); a file under a
block is one PUT (no multipart upload, no bucket probe), a larger one still streams in parts."""

from __future__ import annotations

import os

import pytest

from common.atomic import atomic_open, completed, mark_complete, unmark, write_atomic, write_uri
from common.store import filesystem, read_text

URI = "s3://store/x/object.bin"


def _fs():
    # 5 MiB blocks (S3's least part size): a 6 MiB write starts a multipart upload before the block ends
    return filesystem(URI, endpoint_url=os.environ["AWS_ENDPOINT_URL"], default_block_size=5 * 2**20,
                      skip_instance_cache=True)


def _calls(fs) -> list[str]:
    """The S3 operations ``fs`` sends from now on, in order (botocore's before-call event)."""
    calls = []
    fs.connect()
    fs.s3.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
    return calls


@pytest.mark.parametrize("size", [100, 6 * 2**20], ids=["buffered", "multipart"])
def test_a_write_that_raises_publishes_nothing(s3_server, size):
    fs, path = _fs()
    write_uri(URI, b"old")
    new = path.replace("object", "new")
    calls = _calls(fs)
    for target in (path, new):
        with pytest.raises(RuntimeError, match="cut short"), atomic_open(target, "wb", fs) as f:
            f.write(os.urandom(size))
            raise RuntimeError("cut short")
    # a buffered write sent nothing; a multipart one started its upload, then aborted it
    assert calls == ([] if size < 5 * 2**20 else 2 * ["CreateMultipartUpload", "UploadPart", "AbortMultipartUpload"])
    assert read_text(URI) == "old" and not fs.exists(new)
    assert not s3_server.list_multipart_uploads(Bucket="store").get("Uploads")   # aborted, not left behind


@pytest.mark.parametrize("size", [0, 100, 6 * 2**20], ids=["empty", "buffered", "multipart"])
def test_a_completed_write_is_published(s3_server, size):
    fs, path = _fs()
    data = os.urandom(size)
    calls = _calls(fs)
    with atomic_open(path, "wb", fs) as f:
        f.write(data)
    assert calls == (["PutObject"] if size < 5 * 2**20 else   # one PUT, no bucket probe
                     ["CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"])
    assert fs.cat_file(path) == data
    assert not s3_server.list_multipart_uploads(Bucket="store").get("Uploads")


def test_a_completion_marker_matches_its_file(s3_server):
    fs, path = _fs()
    write_atomic(path, b"12345", fs)
    assert completed(path, fs) is None
    mark_complete(path, fs, rows=5)
    assert completed(path, fs) == {"rows": 5, "bytes": 5}
    write_atomic(path, b"123", fs)   # rewritten without a new marker: the old one no longer matches
    assert completed(path, fs) is None
    unmark(path, fs)
    assert not fs.exists(path + ".complete")
