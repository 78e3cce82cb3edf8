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
from flows.errors import user_errors
from flows.evaluate import evaluate
from flows.preprocess import preprocess
from flows.store import Store, transient, use_credentials_block
from flows.train import train
from preprocessing import PreprocessConfig
from training.rundir import RunDir


@task(cache_policy=NONE, retries=2, retry_delay_seconds=5, retry_condition_fn=transient)  # remote writes
@user_errors
def synthesize(store: Store, options: SyntheticOptions) -> None:
    """Synthetic Criteo logs in ``synthetic_inputs``' folder (reused when complete)."""
    from preprocessing.synthetic import METADATA_FILE, generate

    folder = store.synthetic_uri(options.rows, options.seed)
    fs, path = fsspec.core.url_to_fs(folder)
    if fs.exists(f"{path}/{METADATA_FILE}"):
        get_run_logger().info("synthetic data already complete, reusing: %s", folder)
        return
    with tempfile.TemporaryDirectory() as local:  # generated locally, then uploaded, the metadata last
        generate(local, rows=options.rows, files=options.files, seed=options.seed)
        fs.makedirs(path, exist_ok=True)
        for name in sorted(os.listdir(local), key=lambda n: n == METADATA_FILE):
            fs.put_file(os.path.join(local, name), f"{path}/{name}")
    get_run_logger().info("synthetic data written: %d rows in %s", options.rows, folder)


def synthetic_inputs(store: Store, options: SyntheticOptions) -> list[str]:
    """The input glob of the synthetic logs (written by ``synthesize``)."""
    return [f"{store.synthetic_uri(options.rows, options.seed)}/part-*"]


def checked_preprocess_config(config: PipelineConfig, store: Store) -> PreprocessConfig:
    """The run's preprocessing config (synthetic inputs unless inputs are given), its split names checked
    against what training and evaluation use: a wrong split name fails before any work."""
    inputs = config.preprocess.inputs or synthetic_inputs(store, config.synthetic)
    preprocess_config = config.preprocess_config(inputs, store.uri)
    config.check_splits(preprocess_config)
    return preprocess_config


@flow(name="pipeline", log_prints=True)
@user_errors
def pipeline(config: PipelineConfig = PipelineConfig()) -> dict:
    """Preprocess, train and evaluate; returns where everything is and the evaluation metrics.

    Args:
        config: Store, data, preprocessing, training and evaluation settings (defaults: synthetic data).
    """
    log = get_run_logger()
    config, notes = config.with_preset()
    for note in notes:
        log.info(note)
    if config.credentials_block:
        use_credentials_block(config.credentials_block)
    store = Store(config.store)
    preprocess_config = checked_preprocess_config(config, store)
    store.check()
    if not config.preprocess.inputs:
        synthesize(store, config.synthetic, return_state=True).result()  # raises its error (flows.errors)
    dataset = preprocess(preprocess_config)
    train_config = config.train.on(dataset)
    run = RunDir(store.run_uri(config.run_id(dataset, train_config)))
    resolved = config.model_copy(update={"store": store.uri}).model_dump(mode="json")
    resolved["train"]["dataset"], resolved["preprocess"]["inputs"] = dataset, preprocess_config.inputs
    run.write_text(yaml.safe_dump(resolved, sort_keys=False), RunDir.PIPELINE)
    train(run.uri, dataset, config.train, config.nproc, config.launcher)
    metrics = evaluate(run.uri, config.evaluate)
    result = {"store": store.uri, "dataset": dataset, "run": run.uri,
              "evaluation": run.eval_dir(config.evaluate.split), "metrics": metrics}
    artifacts.metrics_table(metrics, artifacts.PIPELINE_METRICS)
    artifacts.outputs({k: v for k, v in result.items() if k != "metrics"})
    artifacts.runs(store.uri)
    return result
