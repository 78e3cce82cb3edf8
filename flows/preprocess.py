"""The preprocess flow: ``Preprocessing`` with its stages run as Prefect tasks (the per-file ones at most
``workers`` at a time). A finished dataset with the same fingerprint is found and reused; an interrupted run
resumes from its finished parts."""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.task_runners import ThreadPoolTaskRunner

from flows import artifacts
from flows.errors import user_errors
from flows.store import transient
from preprocessing import PreprocessConfig, Preprocessing

# parse reads the inputs and write_dataset writes the store (maybe remote): those retry I/O errors
_RETRIED = ("parse", "write_dataset")


class PrefectExecutor:
    """Runs each stage as tasks: parse-{i}, count-{i}, encode-{i}, build_vocabulary, write_dataset."""

    def __init__(self, workers: int):
        self.workers = workers

    def map(self, stage: str, fn, files, rows: int | None = None) -> list:
        def run_file(i: int):
            return fn(i, None)

        stage_task = _task(stage, run_file, task_run_name=f"{stage}-{{i}}")
        futures = []
        for k, i in enumerate(files):
            if k >= self.workers:
                futures[k - self.workers].wait()
            futures.append(stage_task.submit(i))
        return [f.result() for f in futures]

    def call(self, stage: str, fn):
        return _task(stage, fn)()


def _task(stage: str, fn, **options):
    if stage in _RETRIED:
        options |= {"retries": 2, "retry_delay_seconds": 5, "retry_condition_fn": transient}
    return task(user_errors(fn), name=stage, cache_policy=NONE, **options)


@flow(name="preprocess", task_runner=ThreadPoolTaskRunner(max_workers=16), log_prints=True)
@user_errors
def preprocess(config: PreprocessConfig) -> str:
    """Raw click logs -> split-binary dataset under the `datasets` folder of `out`; returns the dataset URI.

    Args:
        config: Inputs, store and preprocessing settings.
    """
    dataset = Preprocessing(config).run(PrefectExecutor(config.workers), say=get_run_logger().info)
    artifacts.dataset(dataset)
    return dataset
