"""A full disk is one line naming the path, the free space and the fix (common.space): a real one (a small tmpfs
in a private mount namespace; /dev/full, whose every write fails with ENOSPC), found inside what carries it (causes,
exception groups, DCP-like per-rank failures); atomic writes say so and leave no partial file; a stage whose
estimate exceeds the free space is refused before it writes (issue 34, section 4)."""

from __future__ import annotations

import errno
import os
import pickle
import re
import shutil

import pytest

from common.errors import UserError
from common.space import NoSpace, check_free, free_bytes, no_space, size_text, space_error, usage, writing
from helpers.tmpfs import needs_tmpfs, run_on_tmpfs


def test_usage_is_of_the_nearest_existing_folder_and_none_for_an_object_store(tmp_path):
    free, total, mount = usage(tmp_path / "not" / "yet" / "there")
    disk = shutil.disk_usage(tmp_path)
    assert total == disk.total and abs(free - disk.free) < 64 << 20 and os.path.ismount(mount)
    assert str(tmp_path).startswith(mount)
    assert free_bytes(f"file://{tmp_path}") is not None
    assert usage("memory://x/y") is None and free_bytes("memory://x/y") is None
    assert [size_text(n) for n in (0, 512, 1536, 12 << 20, 50 << 30, 3 << 40)] == [
        "0 B", "512 B", "1.5 KiB", "12 MiB", "50 GiB", "3.0 TiB"]


def test_a_full_device_is_one_line_with_the_path_and_the_free_space():
    with pytest.raises(NoSpace) as caught, writing("/dev/full", "free space on {mount}, or point --store elsewhere"):
        with open("/dev/full", "wb") as f:
            f.write(b"x" * (1 << 20))
    message = str(caught.value)
    assert re.fullmatch(r"no space left on device writing /dev/full \(free: [\d.]+ \w*B of [\d.]+ \w*B on /dev\)\. "
                        r"Fix: free space on /dev, or point --store elsewhere", message), message
    assert isinstance(caught.value, UserError) and "\n" not in message
    assert caught.value.__cause__.errno == errno.ENOSPC
    copy = pickle.loads(pickle.dumps(caught.value))   # crosses a process pool or the export child whole
    assert type(copy) is NoSpace and str(copy) == message and copy.fix == caught.value.fix


def test_the_errno_is_found_where_it_is_carried_and_other_errors_pass():
    full, quota = OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EDQUOT, "Disk quota exceeded")

    class CheckpointException(BaseException):   # torch DCP's: a BaseException with the ranks' (error, traceback)
        def __init__(self, failures):
            super().__init__("CheckpointException ranks", failures)
            self.failures = failures

    try:
        try:
            raise full
        except OSError as e:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos") from e   # torch.save's
    except RuntimeError as e:
        wrapped = e
    assert space_error(wrapped) is full
    assert space_error(CheckpointException({1: (full, None), 0: (ValueError("peer"), None)})) is full
    assert space_error(ExceptionGroup("writers", [ValueError("x"), quota])) is quota
    assert space_error(OSError(errno.EACCES, "Permission denied")) is None and space_error(ValueError()) is None
    assert str(no_space("/x/y", quota)).startswith("disk quota exceeded writing /x/y (free: ")
    with pytest.raises(NoSpace, match=r"^no space left on device writing /s/runs/r/checkpoints/40 .*Fix: resume"):
        with writing("/s/runs/r/checkpoints/40", "resume"):
            raise CheckpointException({0: (full, None)})
    with pytest.raises(PermissionError), writing("/x"):
        raise PermissionError(errno.EACCES, "Permission denied")
    with pytest.raises(NoSpace, match=r"Fix: the outer fix$"), writing("/x", "the outer fix"):
        with writing("/x/y"):   # the inner (an atomic write's) error, with the fix of the stage around it
            raise full
    assert str(no_space("memory://b/k", full)).startswith("no space left on device writing memory://b/k (free space "
                                                            "unknown). Fix: ")


def test_a_stage_is_refused_when_its_estimate_exceeds_the_free_space(tmp_path):
    free = free_bytes(tmp_path)
    check_free(tmp_path / "out", 1, "the split files", "their planned bytes")   # room: nothing
    check_free("memory://b/out", 1 << 60, "the split files", "their planned bytes")   # no free space to speak of
    with pytest.raises(NoSpace) as caught:
        check_free(tmp_path / "out", free + (1 << 40), "checkpoint 40", "the size of checkpoint 30, the newest",
                   "free space on {mount}, or point --store elsewhere")
    assert re.fullmatch(rf"not enough free space to write checkpoint 40 at {tmp_path}/out: it needs about \S+ \w*B "
                        r"\(the size of checkpoint 30, the newest\), free: \S+ \w*B of \S+ \w*B on /\S*\. Fix: free "
                        r"space on /\S*, or point --store elsewhere", str(caught.value)), str(caught.value)


TMPFS_WRITES = r"""
import json, os, sys
from pathlib import Path
from common.atomic import atomic_dir, write_atomic
from common.space import NoSpace
mount, out = Path(sys.argv[1]), {}


def folder():
    with atomic_dir(mount / "parsed") as tmp:
        (tmp / "000000.ipc").write_bytes(os.urandom(1 << 20))


for name, write in [("file", lambda: write_atomic(mount / "big.bin", os.urandom(1 << 20))), ("folder", folder)]:
    try:
        write()
        out[name] = "written"
    except NoSpace as e:
        out[name] = str(e)
out["left"] = sorted(os.listdir(mount))
print(json.dumps(out))
"""


@needs_tmpfs
def test_atomic_writes_on_a_full_tmpfs_name_the_path_and_leave_nothing(tmp_path):
    """A real ENOSPC: 1 MiB into a 256 KiB tmpfs, as a file and as a folder of parts; the free space named is the
    space left once the partial write is removed (all of it)."""
    mount = tmp_path / "small"
    got = run_on_tmpfs(TMPFS_WRITES, mount, "256k")
    for name, path in (("file", mount / "big.bin"), ("folder", mount / "parsed")):
        assert got[name] == (f"no space left on device writing {path} (free: 256 KiB of 256 KiB on {mount}). "
                             f"Fix: free space on {mount} (`dlrmflow gc` removes what the store no longer needs), "
                             "or use a filesystem with room (--store, --work-dir, --out)"), got
    assert got["left"] == []   # no .tmp-<pid> file or folder
