"""A training whose ranks failed on a store that stopped answering (issue 34, the month's bug 7): the night's error
is the rank's own line, which names the store, not the error of a read the flow makes after the failure."""

from __future__ import annotations

import pytest
from botocore.exceptions import ReadTimeoutError

from common.store import Store
from flows import train as train_flow
from flows.errors import _store_in
from training import Checkpointer, RunDir, TrainConfig

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
