"""The pipeline's configuration: the stage configs composed into one model (the flows' parameters,
so the Prefect UI renders a form with defaults and descriptions)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from common.config import validate
from common.errors import UserError

from flows.store import default_store
from preprocessing import PreprocessConfig
from preprocessing.inputs import split_mapping
from training.config import EvaluateConfig, TrainConfig, preset_names
from training.launchers import LauncherConfig, LocalSettings


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _store_field():
    return Field(default_factory=default_store, description="Artifact store root: a local folder or "
                 "s3://bucket/prefix (default $DLRMFLOW_STORE, else ./artifacts).")


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

    store: str = _store_field()
    credentials_block: str | None = Field(None, description="Name of a Prefect Secret block holding the S3 "
                                          "settings as JSON (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                                          "AWS_ENDPOINT_URL, AWS_REGION). Default: the AWS_* environment variables.")
    run_name: str | None = Field(None, description="Run folder name (in the store's runs/ folder). Default: "
                                 "derived from the dataset and the training config, so a re-run resumes the same run.")
    synthetic: SyntheticOptions = Field(default_factory=SyntheticOptions, description="Synthetic data settings.")
    preprocess: PipelinePreprocess = Field(default_factory=PipelinePreprocess, description="Preprocessing.")
    train: TrainConfig = Field(default_factory=_default_train, description="Training (dataset is filled in).")
    nproc: int = Field(2, ge=1, description="Training processes (ranks) on this machine (local launcher).")
    launcher: LauncherConfig = Field(default_factory=LocalSettings, description="Where training runs: local "
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
        return f"{dataset.rstrip('/').rsplit('/', 1)[-1]}-{config_hash(train)}"


def config_hash(train: TrainConfig) -> str:
    """A short hash of a training config (dataset included): the suffix of the default run names."""
    text = json.dumps(train.model_dump(mode="json"), sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=5).hexdigest()


PRESETS_FILE = Path(__file__).with_name("presets.yaml")


class PipelinePreset(_Model):
    """A training preset with the preprocessing it was tuned on (flows/presets.yaml)."""

    preprocess: PipelinePreprocess = Field(default_factory=PipelinePreprocess,
                                           description="Preprocessing settings the training preset was tuned with.")
    train: str = Field(description="Name of the training preset (training/presets/<name>.yaml).")

    @field_validator("train")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in preset_names():
            raise ValueError(f"unknown training preset '{name}' (known: {', '.join(preset_names())})")
        return name

    @classmethod
    def named(cls, name: str) -> "PipelinePreset":
        """The preset called ``name``."""
        presets = yaml.safe_load(PRESETS_FILE.read_text())
        if name not in presets:
            raise UserError(f"unknown preset '{name}'. Fix: use one of {', '.join(presets)}.")
        return validate(cls, presets[name], f"{PRESETS_FILE}: {name}")

    def hints(self, given: dict) -> tuple[dict, dict]:
        """(applied, skipped): the preset's preprocessing settings that apply where ``given`` (the
        user's PreprocessConfig fields) sets nothing that conflicts, and those that do not, with why.
        Files mapped to splits (``split=PATH`` inputs) keep their splits, so a split rule is skipped."""
        applied, skipped = {}, {}
        mapped = any(split_mapping(uri)[0] for uri in given.get("inputs") or [])
        for key, value in self.preprocess.model_dump(exclude_unset=True).items():
            if key in given:
                skipped[key] = f"given: {given[key]!r}"
            elif key == "split" and mapped:
                skipped[key] = "the inputs map files to splits"
            else:
                applied[key] = value
        return applied, skipped


class ServeConfig(_Model):
    """What `dlrmflow serve` serves: the store the deployments' forms point at and the pipeline's schedule."""

    store: str = _store_field()
    cron: str = Field("0 2 * * *", description="The pipeline's cron schedule, in UTC (default: nightly at 02:00).")

    @field_validator("cron")
    @classmethod
    def _cron(cls, cron: str) -> str:
        from prefect.client.schemas.schedules import CronSchedule

        try:
            CronSchedule(cron=cron)
        except ValidationError:
            raise ValueError(f"{cron!r} is not a cron expression; e.g. \"0 2 * * *\" (02:00 daily)") from None
        return cron
