"""A disk that fills up partway through a checkpoint file, in a rank of a process group: torch's zip writer (inside
DCP's ``torch.save``) turns the ENOSPC into ``RuntimeError: [enforce fail at inline_container.cc] . unexpected pos``
with the ``OSError`` only its ``__context__``, and DCP gathers each rank's exception pickled (pickling drops
``__context__``). The rank still says NoSpace in one line (the checkpoint's path and the free space), prints no
traceback, removes the half-written checkpoint, and the previous one still loads (issue 34, section 4; bug 3 of the
month benchmark, benchmarks/RESULTS.md). A real full disk: a small tmpfs."""

from __future__ import annotations

import errno
import pickle
import re

import pytest

from common.space import space_error
from helpers.tmpfs import needs_tmpfs, run_on_tmpfs
from training.checkpoint import _space_kept

SAVES = r"""
import json, os, sys, tempfile, warnings
from pathlib import Path
import torch
from training import distributed
from training.checkpoint import Checkpointer
from training.rundir import RunDir

warnings.simplefilter("ignore")   # DCP's "assuming the intent is to save in a single process"
mount = Path(sys.argv[1])
run = RunDir(str(mount / "runs" / "r"))
ck, out = Checkpointer(run), {}


def rank(work):
    # a rank of a one-process group (DCP gathers its exception pickled, as under torchrun); its stderr as torchrun's
    # tee would see it: the file descriptor, tracebacks and all
    with tempfile.TemporaryFile("w+") as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            code = distributed.run_rank(lambda: (distributed.init(60), work()), run.uri)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        return {"code": code, "err": err.read(), "left": sorted(os.listdir(run.path("checkpoints")))}


out["fits"] = rank(lambda: ck.save(1, {"w": torch.arange(16.0)}))
free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
(mount / "filler").write_bytes(b"\0" * (free - 200_000))   # ~195 KiB left: a 400 KB tensor's record fills it
out["full"] = rank(lambda: ck.save(2, {"w": torch.zeros(100_000)}))
out["partial"] = sorted(os.listdir(run.path("checkpoints", "2"))) if os.path.exists(run.path("checkpoints", "2")) \
    else None
state = {"w": torch.zeros(16)}
out["loaded"] = ck.load("latest", state)
out["w"] = state["w"].tolist()
print(json.dumps(out))
"""


@needs_tmpfs
def test_a_disk_full_partway_through_a_checkpoint_file_is_no_space_and_the_partial_checkpoint_goes(tmp_path):
    mount = tmp_path / "store"
    got = run_on_tmpfs(SAVES, mount, "1m")
    checkpoints = mount / "runs" / "r" / "checkpoints"
    assert got["fits"] == {"code": 0, "err": "", "left": ["1", "latest"]}, got["fits"]

    full = got["full"]
    assert "Traceback" not in full["err"] and "unexpected pos" not in full["err"], full["err"]
    assert re.fullmatch(rf"error \(rank 0\): no space left on device writing {checkpoints}/2 \(free: \d+ KiB of 1\.0 "
                        rf"MiB on {mount}\)\. Fix: free space on {mount} \(`dlrmflow gc` removes what the store no "
                        r"longer needs; a smaller keep_checkpoints keeps fewer\), or point --store elsewhere; then "
                        r"resume the run \(--resume\)\n", full["err"]), full["err"]
    assert full["code"] == 2 and full["left"] == ["1", "latest"] and got["partial"] is None, got   # nothing half-done
    assert got["loaded"] == 1 and got["w"] == [float(i) for i in range(16)]   # the previous checkpoint, verified


def test_a_full_disk_reaches_dcps_gather_as_an_oserror(tmp_path):
    """Without a tmpfs: the error a rank's write raises is pickled by DCP's gather; what the writer raises for a
    full disk under torch's zip error keeps its errno across pickling (the zip error alone does not, in a rank)."""
    def zip_error():
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    with pytest.raises(RuntimeError) as raw:
        zip_error()
    # pickled plainly the zip error loses its ENOSPC (__context__ is not pickled); not asserted here: where tblib's
    # pickling support is installed (Dask's distributed does it, in a suite's process) the context is kept
    assert space_error(raw.value) is not None
    with pytest.raises(OSError) as kept, _space_kept():
        zip_error()
    found = space_error(pickle.loads(pickle.dumps(kept.value)))
    assert found is not None and found.errno == errno.ENOSPC and found.strerror == "No space left on device"
    with pytest.raises(RuntimeError, match="^other$"), _space_kept():   # any other error: as it was
        raise RuntimeError("other")
