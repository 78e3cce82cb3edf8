"""The config models of the recurring runs: the dated window, the data gate, batch scoring, export and the store's
clean-up."""

from __future__ import annotations

import math
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from common.store import default_store
from training.config import checkpoint_name


class WindowConfig(BaseModel):
    """Which days a dated run trains, validates and tests on (used when the inputs hold `{date}`)."""

    model_config = ConfigDict(extra="forbid")

    train_days: int | None = Field(None, ge=2, description="Days before the run's date to train on (the last "
                                   "`val_days` of them validate, held out of training); the date itself is the test "
                                   "day. Needed when the inputs hold {date}.")
    val_days: int = Field(1, ge=1, description="The last days of the window that validate instead of training.")
    min_days: int | None = Field(None, ge=2, description="Run with fewer days when some are missing, down to this "
                                 "many (default: train_days; a missing test day always fails).")
    lag_days: int = Field(1, ge=0, description="Without a date, the run's date is its scheduled day minus this many "
                          "days (a 02:00 run processes yesterday).")
    timezone: str = Field("UTC", description="Time zone in which a scheduled time becomes the run's day.")
    retain_days: int = Field(0, ge=0, description="Keep the parsed parts of this many days before the next night's "
                             "window too (for backfills); older ones are removed after a run.")

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, name: str) -> str:
        try:
            ZoneInfo(name)
        except (KeyError, ValueError):
            raise ValueError(f"{name!r} is not a time zone; e.g. UTC or Europe/Berlin") from None
        return name

    @model_validator(mode="after")
    def _days(self) -> "WindowConfig":
        if self.train_days is not None and self.train_days <= self.val_days:
            raise ValueError(f"train_days ({self.train_days}) must exceed val_days ({self.val_days}): the window "
                             "needs at least one training day")
        if self.min_days is not None and self.train_days is not None and self.min_days > self.train_days:
            raise ValueError(f"min_days ({self.min_days}) exceeds train_days ({self.train_days})")
        return self


class DataCheckConfig(BaseModel):
    """The data gate's thresholds: each day of a dated run's window against the days before it (nightly.datacheck)."""

    model_config = ConfigDict(extra="forbid")

    rows_band: list[float] = Field([0.5, 2.0], description="A day's rows must lie within [LOW, HIGH] times the "
                                   "median of the days before it.")
    label_rate_change: float = Field(0.5, gt=0, description="A day's positive rate must lie within this relative "
                                     "change of that of the days before it (0.5: from half to 1.5 times it).")
    min_rows: int = Field(100, ge=0, description="The test day needs at least this many rows.")
    min_positives: int = Field(10, ge=0, description="The test day needs at least this many positive labels.")
    missing_change: float = Field(0.1, gt=0, le=1, description="A feature's missing share on a day may differ from "
                                  "that of the days before it by at most this (absolute; 0.1: ten percentage points).")
    unseen_increase: float = Field(0.2, gt=0, le=1, description="With a champion: a categorical's share of values "
                                   "without an index in the champion's vocabulary on the test day may exceed that of "
                                   "the newest earlier day the champion never trained on by at most this (absolute).")
    max_drift: float = Field(0.1, gt=0, le=1, description="A categorical's drift on a day, the largest difference "
                             "(L-infinity) between a value's share on the day and on the days before it, over the "
                             "`top_values` most frequent values of each, may be at most this.")
    top_values: int = Field(20, ge=1, le=100, description="The most frequent values of a categorical that its drift "
                            "compares.")
    max_psi: float = Field(0.2, gt=0, description="A numerical's drift on a day, the population stability index of "
                           "its histogram over fixed bins against that of the days before it, may be at most this.")

    @field_validator("rows_band")
    @classmethod
    def _band(cls, band: list[float]) -> list[float]:
        if not (len(band) == 2 and 0 <= band[0] < 1 < band[1] and math.isfinite(band[1])):
            raise ValueError(f"rows_band {band} is not [LOW, HIGH] with 0 <= LOW < 1 < HIGH; e.g. [0.5, 2]")
        return band


class _Checkpoint(BaseModel):
    """Which checkpoint: a named model's champion, or a run's checkpoint."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="A named model's folder, STORE/models/NAME: its champion "
                              "(run, checkpoint step, dataset).")
    run: str | None = Field(None, description="A training run folder instead of a model, with the run's own "
                            "dataset.")
    checkpoint: str = Field("best", description="With `run`: `best` (the latest if the run never validated), "
                            "`latest` or a step number.")

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _checkpoint(cls, v: Any) -> str:
        return checkpoint_name(v)   # the same rule as evaluation's


class ScoreConfig(_Checkpoint):
    """What to score with which model, and where the scores go."""

    bundle: str | None = Field(None, description="A serving bundle (`dlrmflow export`'s folder, local or s3://) "
                               "instead of a model or run: scores in this process with its TorchScript module.")
    inputs: list[str] = Field(description="Raw input files, folders or globs in the format of the model's "
                              "dataset's input spec (Criteo TSV, or the CSV/Parquet its spec describes).")
    out: str = Field(description="The output Parquet file (local path or s3://...): file, row, [id], "
                     "probability, [label].")
    on_bad_row: Literal["error", "skip"] | None = Field(None, description="Bad-row policy; default: the one the "
                                                        "model's dataset was preprocessed with.")
    max_bad_fraction: float | None = Field(None, ge=0, le=1, description="With on_bad_row=skip: fail above "
                                           "this fraction of bad rows; default: the dataset's.")
    progress: bool = Field(True, description="Show progress bars on stderr (only when it is a terminal).")


class ExportConfig(_Checkpoint):
    """Which model's checkpoint to export as a serving bundle, and where."""

    out: str = Field(description="The bundle folder to write (local path or s3://...).")


class GcConfig(BaseModel):
    """What `dlrmflow gc` (``nightly.gc``) removes from a store: everything no model, lease or window needs."""

    model_config = ConfigDict(extra="forbid")

    store: str = Field(default_factory=default_store, description="Artifact store root: a local folder or "
                       "s3://bucket/prefix (default $DLRMFLOW_STORE, else ./artifacts).")
    keep_nights: int = Field(14, ge=1, description="Keep the runs (and their datasets) of each model's last this "
                             "many decided nights, besides its champion's; a run or dataset that no model's history "
                             "names is kept this many days after its last write.")
    dry_run: bool = Field(False, description="List what would be removed, and its size; remove nothing.")
    inputs: list[str] = Field(default_factory=list, description="The dated input templates ({date}) of the nightly "
                              "runs: the parsed parts of their days before every model's window (less "
                              "retain_days) are removed. Empty: no parsed parts are removed.")
    retain_days: int = Field(0, ge=0, description="Keep the parsed parts of this many days before the oldest "
                             "window too (the pipeline's window.retain_days).")
