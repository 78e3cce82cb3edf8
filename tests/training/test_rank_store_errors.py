"""A store that cannot be used inside a rank is the rank's one line, ``error (rank N): ...``, naming the run's store
and the fix, never a traceback: ``training.distributed.run_rank`` converts it (``common.store_errors.store_error``), as
the flows' boundary and the command line do; so does a full disk outside a checkpoint (``common.space``). The launcher's
failure message then shows that line (issue 34, section 4; bug 5 of the month benchmark, benchmarks/RESULTS.md: a
rank died of botocore's ReadTimeoutError in ``Checkpointer._prune``)."""

from __future__ import annotations

import contextlib
import errno
import io
import time

import pytest
import torch

from helpers.frozen import frozen_endpoint
from helpers.processes import free_port, one_rank
from training import distributed
from training.checkpoint import Checkpointer
from training.launchers import RankOutput
from training.rundir import RunDir

STORE = "s3://store/dlrm"
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")   # the fixture's save, no group


@pytest.fixture
def lost_store(s3_server, monkeypatch):
    """A run on the moto store with a complete checkpoint 1; then the endpoint is switched by the test (``setenv``
    AWS_ENDPOINT_URL), with short S3 timeouts and no cached filesystem (a rank's process opens its own)."""
    from s3fs import S3FileSystem

    run = RunDir(uri := f"{STORE}/runs/r")
    Checkpointer(run).save(1, {"w": torch.arange(4.0)})
    assert Checkpointer(RunDir(uri)).steps() == [1]
    for key, value in {"DLRMFLOW_S3_CONNECT_TIMEOUT_S": "1", "DLRMFLOW_S3_READ_TIMEOUT_S": "1",
                       "DLRMFLOW_S3_RETRIES": "0"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(S3FileSystem, "retries", 1)   # s3fs's own retries of a timeout (5): one is enough here
    S3FileSystem.clear_instance_cache()
    yield uri
    S3FileSystem.clear_instance_cache()


def rank(work, run: str) -> tuple[int, str]:
    """``work`` as a rank of a one-process job: its exit code and what it wrote to stderr."""
    err = io.StringIO()
    with one_rank(), contextlib.redirect_stderr(err):
        code = distributed.run_rank(lambda: (distributed.init(60), work()), run)
    return code, err.getvalue()


def launcher_failure(err: str) -> str:
    output = RankOutput()   # the launcher's side: torchrun's tee prefixes, then the failure message
    for line in err.splitlines():
        output(f"[default0]:{line}")
    return output.failure("training", 2)


def test_a_store_that_stops_answering_during_a_checkpoint_is_the_ranks_one_line(lost_store, monkeypatch):
    with frozen_endpoint() as (endpoint, _):
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        start = time.monotonic()
        code, err = rank(lambda: Checkpointer(RunDir(lost_store)).save(2, {"w": torch.zeros(4)}), lost_store)
        took = time.monotonic() - start
    line = (f"error (rank 0): store '{STORE}' not answering: {endpoint} accepted the connection but sent no reply "
            "within the 1 s read timeout. Fix: check the S3 service at AWS_ENDPOINT_URL (up but hung or overloaded); "
            "on a slow link raise DLRMFLOW_S3_READ_TIMEOUT_S (1) or DLRMFLOW_S3_RETRIES (0).")
    assert (code, err) == (2, line + "\n"), err
    assert f"Last lines of rank 0:\n{line}" in launcher_failure(err)
    assert took < 10, took


def test_a_store_that_refuses_is_the_ranks_one_line_from_the_worker(lost_store, monkeypatch):
    """The evaluation worker's own entry point (its run argument names the store): the first read of the run."""
    from training import evaluate_worker

    endpoint = f"http://127.0.0.1:{free_port()}"   # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    err = io.StringIO()
    with one_rank(), contextlib.redirect_stderr(err):
        code = evaluate_worker.main([lost_store])
    assert code == 2 and err.getvalue() == (
        f"error (rank 0): store '{STORE}' unreachable: cannot reach {endpoint} (connection refused). Fix: check "
        "AWS_ENDPOINT_URL, that the S3 service runs, and that this machine can reach it.\n"), err.getvalue()


def test_a_full_disk_and_other_errors_in_a_rank(tmp_path):
    """A full disk outside a checkpoint (no file named: the run's folder) is NoSpace's line; a bug stays a
    traceback (raised on, for the launcher to report)."""
    run = str(tmp_path / "runs" / "r")

    def full():
        raise OSError(errno.ENOSPC, "No space left on device")

    code, err = rank(full, run)
    assert code == 2 and err.startswith(f"error (rank 0): no space left on device writing {run} (free: "), err
    assert err.count("\n") == 1 and "Fix: free space on " in err

    def bug():
        raise KeyError("w")

    with pytest.raises(KeyError):
        rank(bug, run)
