"""A full disk during a checkpoint is one line on the rank, naming the checkpoint's path and the free space, and
that line is what the launcher's failure message shows (not "rank 0, exit code 1"); the incomplete checkpoint is
removed; a save is refused before it writes when less space is free than the newest checkpoint took (issue 34,
section 4). A real full disk (a small tmpfs), and DCP's own exception where no tmpfs can be mounted."""

from __future__ import annotations

import errno
import re

import pytest

from common.space import NoSpace
from helpers.tmpfs import needs_tmpfs, run_on_tmpfs
from training.checkpoint import Checkpointer
from training.launchers import RankOutput
from training.rundir import RunDir

SAVES = r"""
import contextlib, io, json, os, sys, warnings
from pathlib import Path
import torch
from training import distributed
from training.checkpoint import Checkpointer
from training.rundir import RunDir

warnings.simplefilter("ignore")   # DCP's "assuming the intent is to save in a single process"
mount = Path(sys.argv[1])
run = RunDir(str(mount / "runs" / "r"))
ck, out = Checkpointer(run), {}


def rank(step, floats):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):   # what a rank prints (training.distributed.run_rank)
        code = distributed.run_rank(lambda: ck.save(step, {"w": torch.zeros(floats)}))
    return {"code": code, "err": err.getvalue(), "left": sorted(os.listdir(run.path("checkpoints")))}


out["fits"] = rank(1, 16 << 10)          # 64 KiB
out["full"] = rank(2, 1 << 20)           # 4 MiB into a 1 MiB disk
free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
(mount / "filler").write_bytes(b"\0" * (free - (16 << 10)))   # 16 KiB left: less than checkpoint 1 took
out["refused"] = rank(3, 16)
print(json.dumps(out))
"""


@needs_tmpfs
def test_a_full_disk_in_a_checkpoint_is_the_ranks_one_line_in_the_launchers_failure(tmp_path):
    mount = tmp_path / "store"
    got = run_on_tmpfs(SAVES, mount, "1m")
    checkpoints = mount / "runs" / "r" / "checkpoints"
    assert got["fits"] == {"code": 0, "err": "", "left": ["1", "latest"]}

    full = got["full"]
    assert full["code"] == 2 and full["left"] == ["1", "latest"], full   # checkpoint 2's partial files removed
    assert re.fullmatch(rf"error \(rank 0\): no space left on device writing {checkpoints}/2 \(free: \d+ KiB of 1\.0 "
                        rf"MiB on {mount}\)\. Fix: free space on {mount} \(`dlrmflow gc` removes what the store no "
                        r"longer needs; a smaller keep_checkpoints keeps fewer\), or point --store elsewhere; then "
                        r"resume the run \(--resume\)\n", full["err"]), full["err"]
    output = RankOutput()   # the launcher's side: torchrun's tee prefixes, then the failure message
    for line in full["err"].splitlines():
        output(f"[default0]:{line}")
    message = output.failure(f"training {mount}/runs/r", 2)
    assert f"rank 0, torchrun exit code 2. Last lines of rank 0:\nerror (rank 0): no space left on device writing " \
           f"{checkpoints}/2 (free: " in message, message

    refused = got["refused"]
    assert refused["code"] == 2 and refused["left"] == ["1", "latest"], refused
    assert re.fullmatch(rf"error \(rank 0\): not enough free space to write checkpoint 3 at {checkpoints}/3: it needs "
                        r"about \d+ KiB \(the size of checkpoint 1, the newest\), free: 16 KiB of 1\.0 MiB on "
                        rf"{mount}\. Fix: free space on {mount} .*\n", refused["err"]), refused["err"]


def test_dcps_exception_of_a_full_disk_is_no_space_and_the_partial_checkpoint_goes(tmp_path, monkeypatch):
    """Without a tmpfs: DCP's real CheckpointException carrying a rank's ENOSPC (as dcp.save raises it on every
    rank), and the refusal from the free space the filesystem reports."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException, _wrap_exception

    run = RunDir(str(tmp_path / "run"))
    ck = Checkpointer(run)
    ck.save(1, {"w": torch.zeros(1024)})
    saved = dcp.save

    def full(state, storage_writer):
        saved(state, storage_writer=storage_writer)   # its files written, then a rank's write failed
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise CheckpointException("write", {1: _wrap_exception(e)}) from None

    monkeypatch.setattr(dcp, "save", full)
    with pytest.raises(NoSpace, match=rf"^no space left on device writing {run.uri}/checkpoints/2 \(free: "):
        ck.save(2, {"w": torch.zeros(1024)})
    assert ck.steps() == [1] and not run.exists("checkpoints", "2")
    monkeypatch.setattr(dcp, "save", saved)

    monkeypatch.setattr("common.space.usage", lambda uri: (100, 1 << 30, "/store"))   # 100 bytes free
    with pytest.raises(NoSpace, match=rf"^not enough free space to write checkpoint 2 at {run.uri}/checkpoints/2: it "
                                      rf"needs about \d\.\d KiB \(the size of checkpoint 1, the newest\), free: 100 B "
                                      r"of 1\.0 GiB on /store\. Fix: free space on /store "):
        ck.save(2, {"w": torch.zeros(1024)})
    assert ck.steps() == [1] and not run.exists("checkpoints", "2")
    assert ck.size(1) >= 4096
