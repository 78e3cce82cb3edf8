"""The pipeline flow: [synthetic data] -> preprocess -> train -> evaluate, as subflows, all under one store.

A re-run finds finished work: the synthetic data, the dataset (by fingerprint), a completed
training run (or its checkpoints, to resume) are reused, and the log says so."""

from __future__ import annotations

import os
import tempfile

import fsspec
import yaml
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from flows import artifacts
from flows.config import PipelineConfig, SyntheticOptions
from flows.evaluate import evaluate
from flows.preprocess import preprocess
from flows.store import Store, transient, use_credentials_block
from flows.train import train
from training.rundir import RunDir


@task(cache_policy=NONE, retries=2, retry_delay_seconds=5, retry_condition_fn=transient)  # remote writes
def synthesize(store: Store, options: SyntheticOptions) -> str:
    """Synthetic Criteo logs under <store>/synthetic/ (reused when complete); returns the input glob."""
    from preprocessing.synthetic import METADATA_FILE, generate

    folder = store.synthetic_uri(options.rows, options.seed)
    fs, path = fsspec.core.url_to_fs(folder)
    if fs.exists(f"{path}/{METADATA_FILE}"):
        get_run_logger().info("synthetic data already complete, reusing: %s", folder)
        return f"{folder}/part-*"
    with tempfile.TemporaryDirectory() as local:  # generated locally, then uploaded, the metadata last
        generate(local, rows=options.rows, files=options.files, seed=options.seed)
        fs.makedirs(path, exist_ok=True)
        for name in sorted(os.listdir(local), key=lambda n: n == METADATA_FILE):
            fs.put_file(os.path.join(local, name), f"{path}/{name}")
    get_run_logger().info("synthetic data written: %d rows in %s", options.rows, folder)
    return f"{folder}/part-*"


@flow(name="pipeline", log_prints=True)
def pipeline(config: PipelineConfig = PipelineConfig()) -> dict:
    """Preprocess, train and evaluate; returns where everything is and the evaluation metrics.

    Args:
        config: Store, data, preprocessing, training and evaluation settings (defaults: synthetic data).
    """
    if config.credentials_block:
        use_credentials_block(config.credentials_block)
    store = Store(config.store)
    store.check()
    inputs = config.preprocess.inputs or [synthesize(store, config.synthetic)]
    preprocess_config = config.preprocess_config(inputs, store.uri)
    dataset = preprocess(preprocess_config)
    train_config = config.train.model_copy(update={"dataset": dataset})
    run = RunDir(store.run_uri(config.run_id(dataset, train_config)))
    resolved = PipelineConfig.model_validate({**config.model_dump(), "store": store.uri,
                                              "train": train_config.model_dump(),
                                              "preprocess": preprocess_config.model_dump()})
    run.write_text(yaml.safe_dump(resolved.model_dump(mode="json"), sort_keys=False), RunDir.PIPELINE)
    train(run.uri, train_config, config.nproc, config.launcher)
    metrics = evaluate(run.uri, config.evaluate)
    result = {"store": store.uri, "dataset": dataset, "run": run.uri,
              "evaluation": run.eval_dir(config.evaluate.split), "metrics": metrics}
    artifacts.metrics_table(metrics, artifacts.PIPELINE_METRICS)
    artifacts.outputs({k: v for k, v in result.items() if k != "metrics"})
    artifacts.runs(store.uri)
    return result
