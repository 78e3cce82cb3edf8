"""The preprocess flow: ``Preprocessing`` with its stages run as Prefect tasks, the per-file ones in threads
(at most ``workers`` at a time) or on a Dask cluster (``task_runner: dask``, prefect-dask). A finished dataset
with the same fingerprint is found and reused; an interrupted run resumes from its finished parts."""

from __future__ import annotations

from contextlib import contextmanager

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.task_runners import ThreadPoolTaskRunner

from flows import artifacts
from preprocessing.config import FlowPreprocessConfig
from flows.errors import transient, user_errors
from preprocessing import Preprocessing

# parse reads the inputs and write_dataset writes the store (maybe remote): those retry I/O errors
_RETRIED = ("parse", "write_dataset")


class PrefectExecutor:
    """Runs each stage as tasks: parse-{i}, count-{i}, encode-{i}, build_vocabulary, write_dataset. The per-file
    tasks go to ``runner`` (a started task runner: all at once, the cluster schedules them), else to the flow's
    own task runner, at most ``workers`` at a time."""

    def __init__(self, workers: int, runner=None):
        self.workers, self.runner = workers, runner

    def map(self, stage: str, fn, files, rows: int | None = None) -> list:
        def run_file(i: int):
            return fn(i, None)

        stage_task = _task(stage, run_file, task_run_name=f"{stage}-{{i}}")
        if self.runner is not None:
            futures = [self.runner.submit(stage_task, {"i": i}) for i in files]
            return [f.result() for f in futures]
        futures = []
        for k, i in enumerate(files):
            if k >= self.workers:
                futures[k - self.workers].wait()
            futures.append(stage_task.submit(i))
        return [f.result() for f in futures]

    def call(self, stage: str, fn):
        # through the state: a plain call would return the Failed state of a UserError (flows.errors.user_errors)
        # as if it were the stage's result, and the flow would go on
        return _task(stage, fn)(return_state=True).result()


def _task(stage: str, fn, **options):
    if stage in _RETRIED:
        options |= {"retries": 2, "retry_delay_seconds": 5, "retry_condition_fn": transient}
    return task(user_errors(fn), name=stage, cache_policy=NONE, **options)


@contextmanager
def task_runner(config: FlowPreprocessConfig):
    """The started task runner for the per-file tasks: None for threads (the flow's own), else a
    ``DaskTaskRunner`` connected to ``config.dask_address`` (no address: a temporary local cluster)."""
    if config.task_runner == "threads":
        yield None
        return
    from prefect_dask import DaskTaskRunner

    with DaskTaskRunner(address=config.dask_address) as runner:
        yield runner


@flow(name="preprocess", task_runner=ThreadPoolTaskRunner(max_workers=16), log_prints=True)
@user_errors
def preprocess(config: FlowPreprocessConfig) -> str:
    """Raw click logs -> split-binary dataset under the `datasets` folder of `out`; returns the dataset URI.

    Args:
        config: Inputs, store, preprocessing settings and where the per-file tasks run.
    """
    with task_runner(config) as runner:
        dataset = Preprocessing(config).run(PrefectExecutor(config.threads(), runner), say=get_run_logger().info)
    artifacts.dataset(dataset)
    return dataset
