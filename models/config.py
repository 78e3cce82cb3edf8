"""The config models of the model layer: promotion (its gates and the warm start), batch scoring, export and the
store's clean-up."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from common.config import store_field
from training import checkpoint_name


class PromoteConfig(BaseModel):
    """When a dated run's new model (the challenger) replaces its model's champion: the promotion gates
    (``models.decision.decide``; the history line records them) and the warm start from the champion."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    margin: float = Field(0.0, description="Promote only when the new model's test-day ROC AUC exceeds the "
                          "champion's by more than this margin (a tie keeps the champion).")
    min_auc_lift: float = Field(0.01, description="Promote no model whose test-day ROC AUC is not above 0.5 plus "
                                "this (a first champion or not: a chance-level model never replaces another).")
    max_ne: float = Field(1.0, description="Promote no model whose test-day normalized entropy (its log loss / the "
                          "entropy of the day's click rate) is not below this: at 1 it predicts no better than the "
                          "day's click rate for every row, whatever its AUC.")
    logloss_tolerance: float | None = Field(0.01, description="With a champion: promote no model whose test-day log "
                                            "loss exceeds the champion's on the same rows by more than this "
                                            "(relative: 0.01 = 1%), whatever its AUC gain. None: off.")
    min_test_rows: int = Field(1000, description="Promote no model tested on fewer rows (below about 1000 rows "
                               "a day's AUC moves by more than the margins that matter).")
    min_test_positives: int = Field(100, description="Promote no model tested on fewer positive rows (clicks).")
    confidence: float | None = Field(None, description="Promote only when the lower bound of this confidence's "
                                     "paired bootstrap interval (1000 resamples of the test rows) of the AUC gain "
                                     "exceeds the margin, e.g. 0.95. Default: off.")
    calibration_band: list[float] | None = Field(None, description="Promote only a model whose predicted/observed "
                                                 "click ratio on the test day lies in [LOW, HIGH], e.g. 0.8 1.25. "
                                                 "Default: off (the ratio is recorded either way).")
    warm_start: bool = Field(True, description="With a model: initialise each run from the champion (train.init_from: "
                             "its layers, and its embedding rows by raw value), unless train.init_from is given.")
    warm_start_days: Literal["new", "window"] = Field("new", description="With a warm start: train only on the "
                                                      "window's days after the last day the champion trained on "
                                                      "(`new`: each day is learned once along the models' line, as in "
                                                      "incremental training), or on every training day of the window "
                                                      "(`window`: the days the champion already learned are learned "
                                                      "again, which overfits them).")
    slice_max_loss: float | None = Field(None, ge=0, le=1, description="Promote no model whose test-day ROC AUC "
                                         "on a slice (evaluate.slice_by's values) holding at least slice_min_share "
                                         "of the rows is below the champion's by more than this, e.g. 0.02. "
                                         "Default: off (the slices are recorded either way).")
    slice_min_share: float = Field(0.05, gt=0, le=1, description="With slice_max_loss: the share of the test "
                                   "day's rows a slice must hold to be judged.")
    watch_nights: int = Field(7, ge=2, description="The champion is watched against its own metrics on its last this "
                              "many nights (models.watch): a night where it degrades beyond the band while no "
                              "challenger wins says so and emits dlrmflow.model.degraded.")
    watch_auc_drop: float | None = Field(0.02, ge=0, le=1, description="Degraded: the champion's test-day AUC below "
                                         "the median of its watched nights minus this. None: not watched.")
    watch_ne_rise: float | None = Field(0.02, ge=0, description="Degraded: the champion's test-day normalized "
                                        "entropy above the median of its watched nights plus this. None: not "
                                        "watched.")

    @model_validator(mode="after")
    def _gates(self) -> "PromoteConfig":
        if not math.isfinite(self.margin) or self.margin < 0:
            raise ValueError(f"promote_margin {self.margin} is not a number >= 0; fix: give the AUC gain a challenger "
                             "needs over the champion, e.g. 0 or 0.001")
        if not math.isfinite(self.min_auc_lift) or not 0 <= self.min_auc_lift < 0.5:
            raise ValueError(f"min_auc_lift {self.min_auc_lift} is not in [0, 0.5); fix: give the AUC a first "
                             "champion needs above 0.5, e.g. 0.01")
        if not math.isfinite(self.max_ne) or not 0 < self.max_ne <= 1.5:
            raise ValueError(f"max_ne {self.max_ne} is not in (0, 1.5]; fix: e.g. 1 (no worse than the click rate) or "
                             "0.98 (2% better)")
        tol = self.logloss_tolerance
        if tol is not None and not (math.isfinite(tol) and 0 <= tol < 1):
            raise ValueError(f"logloss_tolerance {tol} is not in [0, 1); fix: e.g. 0.01 (1% relative), or leave it "
                             "out (off)")
        if self.min_test_rows < 1 or self.min_test_positives < 1:
            raise ValueError(f"min_test_rows {self.min_test_rows} and min_test_positives {self.min_test_positives} "
                             "must be >= 1; fix: give the test-day rows and positives a comparison needs")
        if self.confidence is not None and not 0 < self.confidence < 1:
            raise ValueError(f"promote_confidence {self.confidence} is not in (0, 1); fix: e.g. 0.95, or leave it "
                             "out (no significance gate)")
        band = self.calibration_band
        if band is not None and not (len(band) == 2 and 0 < band[0] < band[1] and math.isfinite(band[1])):
            raise ValueError(f"calibration_band {band} is not [LOW, HIGH] with 0 < LOW < HIGH; fix: e.g. "
                             "[0.8, 1.25], or leave it out")
        return self

    def recorded(self) -> dict:
        """The gates as the history line records them (the watch's band is no gate: its line says what it found)."""
        return self.model_dump(exclude={"warm_start", "warm_start_days", "watch_nights", "watch_auc_drop",
                                        "watch_ne_rise"})


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
    quantize: Literal["none", "int8"] = Field("none", description="int8: the bundle's model.pt2 and raw.pt2 hold "
                                              "the embedding rows as int8 with a scale and minimum per row (about "
                                              "2.7x smaller tables at dim 16, 3.6x at 64); the manifest's "
                                              "quantize says so. none: float32.")


class GcConfig(BaseModel):
    """What `dlrmflow gc` (``models.gc``) removes from a store: everything no model, lease or window needs."""

    model_config = ConfigDict(extra="forbid")

    store: str = store_field()
    keep_nights: int = Field(14, ge=1, description="Keep the runs (and their datasets) of each model's last this "
                             "many decided nights, besides its champion's; a run or dataset that no model's history "
                             "names is kept this many days after its last write.")
    dry_run: bool = Field(False, description="List what would be removed, and its size; remove nothing.")
    inputs: list[str] = Field(default_factory=list, description="The dated input templates ({date}) of the nightly "
                              "runs: the parsed parts of their days before every model's window (less "
                              "retain_days) are removed. Empty: no parsed parts are removed.")
    retain_days: int = Field(0, ge=0, description="Keep the parsed parts of this many days before the oldest "
                             "window too (the pipeline's window.retain_days).")
