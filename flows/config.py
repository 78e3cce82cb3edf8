"""The pipeline's configuration: the stage configs composed into one model (the flows' parameters,
so the Prefect UI renders a form with defaults and descriptions)."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field

from flows.launchers import LauncherConfig
from flows.store import default_store
from preprocessing import PreprocessConfig
from training.config import EvaluateConfig, TrainConfig


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SyntheticOptions(_Model):
    """The synthetic Criteo logs used when no inputs are given (generated once per store, then reused)."""

    rows: int = Field(60_000, ge=1000, description="Rows of synthetic Criteo-format logs.")
    files: int = Field(2, ge=1, description="Files the rows are split into (preprocessed in parallel).")
    seed: int = Field(0, ge=0, description="Seed; the same rows and seed give the same bytes.")


class PipelinePreprocess(PreprocessConfig):
    """PreprocessConfig whose inputs and store default to the pipeline's."""

    inputs: list[str] = Field(default_factory=list, description="Input files, folders or globs (local or s3://). "
                              "Empty: synthetic Criteo logs (see `synthetic`).")
    out: str = Field("", description="Store root for the dataset; empty: the pipeline's store.")
    progress: bool = Field(False, description="Show a terminal progress bar (the flow reports progress itself).")


def _default_train() -> TrainConfig:
    return TrainConfig.preset("default")


class PipelineConfig(_Model):
    """preprocess -> train -> evaluate, with everything stored under one root URI."""

    store: str = Field(default_factory=default_store, description="Artifact store root: a local folder or "
                       "s3://bucket/prefix (default $DLRMFLOW_STORE, else ./artifacts).")
    credentials_block: str | None = Field(None, description="Name of a Prefect Secret block holding the S3 "
                                          "settings as JSON (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                                          "AWS_ENDPOINT_URL, AWS_REGION). Default: the AWS_* environment variables.")
    run_name: str | None = Field(None, description="Run folder name (in the store's runs/ folder). Default: "
                                 "derived from the dataset and the training config, so a re-run resumes the same run.")
    synthetic: SyntheticOptions = Field(default_factory=SyntheticOptions, description="Synthetic data settings.")
    preprocess: PipelinePreprocess = Field(default_factory=PipelinePreprocess, description="Preprocessing.")
    train: TrainConfig = Field(default_factory=_default_train, description="Training (dataset is filled in).")
    nproc: int = Field(2, ge=1, description="Training processes (ranks) on this machine (local launcher).")
    launcher: LauncherConfig = Field(default_factory=LauncherConfig, description="Where training runs: local "
                                     "torchrun (default), a Slurm allocation or a Kubernetes Job.")
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="Evaluation.")

    def preprocess_config(self, inputs: list[str], store: str) -> PreprocessConfig:
        """The preprocessing config of this run (inputs and store filled in)."""
        data = self.preprocess.model_dump()
        return PreprocessConfig(**{**data, "inputs": inputs, "out": data["out"] or store})

    def run_id(self, dataset: str, train: TrainConfig) -> str:
        """``run_name``, else ``<dataset folder>-<hash of the training config>``."""
        if self.run_name:
            return self.run_name
        digest = hashlib.blake2b(json.dumps(train.model_dump(mode="json"), sort_keys=True).encode(), digest_size=5)
        return f"{dataset.rstrip('/').rsplit('/', 1)[-1]}-{digest.hexdigest()}"
