"""The preprocess flow: per-file parse, count and encode tasks (parallel, at most ``workers`` at a time),
the vocabulary build between them, then the dataset write. A finished dataset with the same
fingerprint is found and reused; an interrupted run resumes from its finished parts."""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.task_runners import ThreadPoolTaskRunner

from flows import artifacts
from flows.store import transient
from preprocessing import PreprocessConfig, Preprocessing


# parse reads the inputs and write_dataset writes the store (maybe remote): those retry I/O errors
@task(cache_policy=NONE, task_run_name="parse-{i}", retries=2, retry_delay_seconds=5, retry_condition_fn=transient)
def parse_file(p: Preprocessing, i: int) -> dict:
    return p.parse(i)


@task(cache_policy=NONE, task_run_name="count-{i}")
def count_file(p: Preprocessing, i: int) -> None:
    p.count(i)


@task(cache_policy=NONE)
def build_vocabulary(p: Preprocessing) -> dict[str, int]:
    return p.build_vocab()


@task(cache_policy=NONE, task_run_name="encode-{i}")
def encode_file(p: Preprocessing, i: int) -> None:
    p.encode(i)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=5, retry_condition_fn=transient)
def write_dataset(p: Preprocessing) -> str:
    return p.finish()


def _map(stage, p: Preprocessing, workers: int) -> list:
    """Run ``stage`` for every input file, at most ``workers`` at once; results in file order."""
    futures = []
    for i in range(len(p.tasks)):
        if i >= workers:
            futures[i - workers].wait()
        futures.append(stage.submit(p, i))
    return [f.result() for f in futures]


@flow(name="preprocess", task_runner=ThreadPoolTaskRunner(max_workers=16), log_prints=True)
def preprocess(config: PreprocessConfig) -> str:
    """Raw click logs -> split-binary dataset under <out>/datasets/; returns the dataset URI.

    Args:
        config: Inputs, store and preprocessing settings.
    """
    log = get_run_logger()
    p = Preprocessing(config)
    if p.is_complete():
        log.info("dataset with fingerprint %s already complete, skipping preprocessing: %s",
                 p.resolved.fingerprint[:12], p.dataset)
    else:
        p.plan()
        log.info("preprocessing %d input files -> %s", len(p.tasks), p.dataset)
        rows = p.place(_map(parse_file, p, config.workers))
        log.info("parsed %d rows", rows)
        _map(count_file, p, config.workers)
        cards = build_vocabulary(p)
        log.info("vocabularies built: %d categorical features, %d embedding rows in all", len(cards),
                 sum(cards.values()))
        _map(encode_file, p, config.workers)
        log.info("dataset written: %s", write_dataset(p))
    artifacts.dataset(p.dataset)
    return p.dataset
