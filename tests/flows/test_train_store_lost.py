"""A training whose ranks failed on a store that stopped answering (issue 34, the month's bug 7): the night's error
is the rank's own line, which names the store, not the error of a read the flow makes after the failure; and the
flow's store calls after it (the job's removal from the run lease, the lease's release, the curve, the failed
night's history line) wait the store's bound once in all, not once each (the process's breaker: common.breaker)."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ReadTimeoutError

from common.s3 import s3_bound
from common.store import Store
from common.store_errors import store_error
from flows import train as train_flow
from flows.errors import _store_in
from helpers.datasets import write_dataset
from helpers.fixtures import S3_ENV
from helpers.frozen import frozen_proxy, timed
from models.registry import model_uri, record_failed
from training import Checkpointer, LocalLauncherConfig, RunDir, TrainConfig
from training.launchers import LocalLauncher

RANK_LINE = ("error (rank 0): store 's3://b/store' not answering: http://127.0.0.1:9 accepted the connection but sent "
             "no reply within the 5 s read timeout. Fix: check the S3 service at AWS_ENDPOINT_URL.")


class _Runner:
    """A launcher whose job's rank failed on the store."""

    def describe(self) -> str:
        return "a launcher whose rank met a frozen store"

    def launch(self, run, config, *, on_line, **_) -> int:
        on_line(RANK_LINE)
        return 1


def test_the_ranks_store_error_is_the_trainings_failure(prefect_harness, monkeypatch, tmp_path):
    reads = []

    def frozen(*_args, **_kwargs):
        reads.append(1)
        raise ReadTimeoutError(endpoint_url="http://127.0.0.1:9/b/store/runs/r/metrics.jsonl")

    monkeypatch.setattr(train_flow, "build_launcher", lambda launcher: _Runner())
    monkeypatch.setattr(train_flow.artifacts.TrainingCurve, "update", frozen)
    monkeypatch.setattr(Checkpointer, "step_of", frozen)
    run = RunDir(str(tmp_path / "store" / "runs" / "r"))
    state = train_flow.launch_torchrun(run, TrainConfig(dataset=str(tmp_path / "ds")), False, return_state=True)
    with pytest.raises(train_flow.TrainingFailed) as failed:
        state.result()
    assert RANK_LINE in str(failed.value)
    assert str(failed.value).endswith("Run the pipeline again to resume from the latest complete checkpoint.")
    assert len(reads) == 1   # the first read that met the store was the last


def test_a_run_folder_names_its_store():
    assert _store_in((RunDir("s3://b/store/runs/r"), TrainConfig(dataset="s3://b/store/datasets/d")), {}) == \
        Store("s3://b/store").uri


class _FreezingLauncher(LocalLauncher):
    """The local launcher whose job's rank meets the store freezing (``proxy``): it records the job in the run's
    lease (the store answers), then the store freezes, the rank says so and exits 2."""

    def __init__(self, proxy, frozen_at: list):
        super().__init__(LocalLauncherConfig(nproc=1))
        self.proxy, self.frozen_at = proxy, frozen_at

    def start(self, job, run, *, env, on_line, started=None) -> int:
        started({"kind": "local", "what": "a job that met a frozen store"})
        self.proxy.frozen = True
        self.frozen_at.append(time.monotonic())
        on_line(RANK_LINE)
        return 2


def test_after_the_ranks_failed_on_a_frozen_store_the_flow_waits_the_bound_once(prefect_harness, s3_server,
                                                                                moto_endpoint, monkeypatch, tmp_path):
    dataset = write_dataset(tmp_path / "ds", {"train": 256, "val": 64})
    with frozen_proxy(moto_endpoint) as (endpoint, proxy):
        for key, value in {**S3_ENV, "AWS_ENDPOINT_URL": endpoint, "DLRMFLOW_S3_CONNECT_TIMEOUT_S": "1",
                           "DLRMFLOW_S3_READ_TIMEOUT_S": "2", "DLRMFLOW_S3_RETRIES": "0",
                           "DLRMFLOW_S3_FAIL_FAST_S": "30"}.items():
            monkeypatch.setenv(key, value)
        frozen_at: list[float] = []
        monkeypatch.setattr(train_flow, "build_launcher", lambda launcher: _FreezingLauncher(proxy, frozen_at))
        run = RunDir("s3://store/dlrm/runs/r")
        state = train_flow.launch_torchrun(run, TrainConfig(dataset=str(dataset)), False, return_state=True)
        with pytest.raises(train_flow.TrainingFailed) as failed:
            state.result()
        took = time.monotonic() - frozen_at[0]
        history_took, error = timed(lambda: record_failed(model_uri("s3://store/dlrm", "ctr"), "2026-10-22", "train",
                                                          str(failed.value), timeout_s=5), 10)
    assert RANK_LINE in str(failed.value)
    # the job's removal from the lease waited the bound (2 s); the release, the curve and the history line failed
    # at once (before the breaker: one bound each, ~8 s)
    assert s3_bound() <= took < 2 * s3_bound(), took
    assert history_took < 1 and "(failed at once: a call to " in str(store_error(error, "s3://store/dlrm"))
