"""The preprocess flow: the stages of ``Preprocessing`` as Prefect tasks, the same bytes as ``preprocessing.run``."""

from __future__ import annotations

from pathlib import Path

from flows.errors import transient
from flows.preprocess import _task, preprocess
from preprocessing import PreprocessConfig, run
from helpers.datasets import assert_same_files


def test_flow_runs_each_stage_as_tasks_and_writes_the_same_bytes(prefect_harness, synthetic_inputs, tmp_path):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    config = PreprocessConfig(inputs=[synthetic_inputs], out=str(tmp_path / "flow"), frequency_threshold=2,
                              workers=2, progress=False)
    state = preprocess(config, return_state=True)
    dataset = Path(state.result())
    with get_client(sync_client=True) as client:
        this_run = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        runs = client.read_task_runs(flow_run_filter=this_run)
    names = sorted(r.name.rsplit("-", 1)[0] if r.name.startswith(("build", "write")) else r.name for r in runs)
    assert names == ["build_vocabulary", "count-0", "count-1", "encode-0", "encode-1", "parse-0", "parse-1",
                     "write_dataset"]
    reference = Path(run(config.model_copy(update={"out": str(tmp_path / "threads")})))
    assert_same_files(reference, dataset)
    assert not (tmp_path / "flow" / "_work").exists()


def test_parse_and_write_retry_transient_errors():
    def step():
        pass
    assert _task("parse", step).retries == 2 and _task("write_dataset", step).retries == 2
    assert _task("parse", step).retry_condition_fn is transient
    assert _task("count", step).retries == 0


def test_a_user_error_of_a_called_stage_fails_the_flow(prefect_harness):
    """build_vocabulary and write_dataset run as plain task calls: their UserError (e.g. a missing part) must
    fail the flow, not come back as a returned state that the flow takes for the stage's result."""
    import pytest
    from prefect import flow

    from common.errors import UserError
    from flows.preprocess import PrefectExecutor

    def write():
        raise UserError("input file x: its encoded part is missing. Fix: run the same command again.")

    @flow
    def stage():
        PrefectExecutor(1).call("write_dataset", write)
        return "dataset written"

    with pytest.raises(UserError, match="its encoded part is missing"):
        stage()
