"""The config models of the pipeline and its dated (nightly) runs: the dated window, the data gate, the night's
policies (``NightConfig``) and the pipeline's config (``PipelineConfig``: the stage configs composed into one model,
one nested model per group; the flows' parameters, so the Prefect UI renders a form with defaults and
descriptions). Settings that were once flat are read from persisted state with a warning until
``RENAMED_UNTIL``: ``RENAMED`` maps each old name to its group."""

from __future__ import annotations

import math
import warnings
from datetime import date
from pathlib import Path
from typing import Any, Iterable, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from common.config import apply_overrides, filled_in, load_yaml, store_field, validate
from common.errors import UserError
from common.store import Store, check_run_name
from models import GcConfig, NAME_PATTERN as MODEL_NAME, PromoteConfig, TUNED_FILE, load_tuned, model_uri
from preprocessing.config import FlowPreprocessConfig, PreprocessConfig
from preprocessing.dated import is_dated
from preprocessing.inputs import split_mapping
from preprocessing.job import split_rule
from training import (EvaluateConfig, FlowTrainConfig, LauncherConfig, LocalLauncherConfig, TrainConfig, default_train,
                      hashed_run, preset_names)


LOOKBACK_EXTRA = 7   # days a window reaches back beyond train_days by default: a week of bad or missing days


class WindowConfig(BaseModel):
    """Which days a dated run trains, validates and tests on (used when the inputs hold `{date}`)."""

    model_config = ConfigDict(extra="forbid")

    train_days: int | None = Field(None, ge=2, description="Days before the run's date to train on (the last "
                                   "`val_days` of them validate, held out of training); the date itself is the test "
                                   "day. Needed when the inputs hold {date}.")
    val_days: int = Field(1, ge=1, description="The last days of the window that validate instead of training.")
    min_days: int | None = Field(None, ge=2, description="Run with fewer days when the window finds fewer than "
                                 "train_days (a missing day without skip_missing, or too few accepted days within "
                                 "lookback_days), down to this many (default: train_days; a missing test day always "
                                 "fails).")
    lookback_days: int | None = Field(None, ge=2, description="How many days before the run's date the window may "
                                      "reach back to find train_days accepted days, past quarantined days (and past "
                                      "missing ones with skip_missing). Default: train_days + 7 (a week of bad days is "
                                      "skipped whatever the window's length; older data makes the night shrink to "
                                      "min_days or fail, for someone to look).")
    skip_missing: bool = Field(False, description="Reach back past a missing day as past a quarantined one. Default: "
                               "a missing day (maybe just late) fails the night, unless min_days allows the window "
                               "without it; a missing test day always fails.")
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
        if self.lookback_days is not None and self.train_days is not None and self.lookback_days < self.train_days:
            raise ValueError(f"lookback_days ({self.lookback_days}) is less than train_days ({self.train_days}): the "
                             "window could never reach its own days")
        return self

    def reach(self) -> int:
        """How many days before the run's date its window may read: ``lookback_days``, default train_days +
        ``LOOKBACK_EXTRA``."""
        return self.lookback_days or (self.train_days or 0) + LOOKBACK_EXTRA


class DataCheckConfig(BaseModel):
    """The data gate's thresholds: each day a dated run reads against its reference, the accepted days before it in
    the model's history (nightly.datacheck)."""

    model_config = ConfigDict(extra="forbid")

    rows_band: list[float] = Field([0.5, 2.0], description="A day's rows must lie within [LOW, HIGH] times the "
                                   "median of the days before it.")
    label_rate_change: float = Field(0.5, gt=0, description="A day's positive rate must lie within this relative "
                                     "change of that of the days before it (0.5: from half to 1.5 times it).")
    min_rows: int = Field(100, ge=0, description="The test day (and a model's first days) needs at least this many "
                          "rows.")
    min_positives: int = Field(10, ge=0, description="The test day (and a model's first days) needs at least this "
                               "many positive labels, and as many negative ones.")
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
    max_duplicates_increase: float = Field(0.05, gt=0, le=1, description="A day's share of rows that repeat another "
                                           "row of the day (from a 1/16 sample of row hashes) may exceed that of the "
                                           "days before it by at most this (absolute; 1.9x ingested rows: 0.47).")
    reference_days: int = Field(7, ge=1, description="A day is judged against the medians of the last this many "
                                "accepted days before it in the model's history (days.jsonl).")
    min_reference_days: int = Field(3, ge=1, description="A day with fewer accepted days before it (a model's first "
                                    "days) is judged against the `reference_days` days nearest it, itself and the "
                                    "night's other days included, and on its absolute bounds (`min_rows`, "
                                    "`min_positives` positive and as many negative labels).")
    long_reference_days: int = Field(28, ge=2, description="The longer horizon against slow drift: a day's rows and "
                                     "label rate against the medians of the last this many accepted days before it.")
    long_rows_band: list[float] = Field([0.5, 2.0], description="A day's rows must lie within [LOW, HIGH] times the "
                                        "median of the `long_reference_days` accepted days before it.")
    long_label_rate_change: float = Field(0.3, gt=0, description="A day's positive rate must lie within this relative "
                                          "change of the median of the `long_reference_days` accepted days before it.")
    shift_days: int = Field(3, ge=2, description="A new normal: this many (or more) last judged days, all quarantined, "
                            "that agree with each other (each passes the checks against their median).")
    on_shift: Literal["ask", "adopt"] = Field("ask", description="A new normal found: `ask` keeps its days "
                                              "quarantined and names the command that adopts it (`dlrmflow days "
                                              "--model NAME accept-shift DATE`); `adopt` accepts its days at once "
                                              "(they become the reference).")

    @field_validator("rows_band", "long_rows_band")
    @classmethod
    def _band(cls, band: list[float]) -> list[float]:
        if not (len(band) == 2 and 0 <= band[0] < 1 < band[1] and math.isfinite(band[1])):
            raise ValueError(f"the band {band} is not [LOW, HIGH] with 0 <= LOW < 1 < HIGH; e.g. [0.5, 2]")
        return band


class NightConfig(BaseModel):
    """A dated night's policies: catch-up after an outage, what a failed data check does, who is told of a failure."""

    model_config = ConfigDict(extra="forbid")

    catchup: Literal["all", "latest"] = Field("all", description="After an outage, for the scheduled nights of a "
                                              "dated run: `all` runs every missed night in order; `latest` records a "
                                              "night as skipped (in the model's history) when a newer night is due "
                                              "too or the model already decided a later one. A run with `date` set "
                                              "(a backfill) always runs.")
    on_data_check: Literal["fail", "warn", "off"] = Field("fail", description="Dated runs: after preprocessing, "
                                                          "each day of the window is checked against the days before "
                                                          "it (`data_check`). `fail`: a failing check fails the night "
                                                          "before training; `warn`: it trains, but nothing is "
                                                          "promoted; `off`: no checks.")
    notify_block: str | None = Field(None, pattern=r"^[a-z0-9-]+/.+$", description="A Prefect notification block "
                                     "told when a run fails or crashes (date, model, failed stage, the error's first "
                                     "line), as `<block type slug>/<name>`, e.g. `custom-webhook/ml-alerts` or "
                                     "`slack-webhook/ml-team`. Default: nobody is told (the events are still emitted).")


# the pipeline's settings that were once flat: old name -> (group, field). Only persisted state still holds the old
# names (a YAML file, a deployment's or a scheduled flow run's parameters saved before the groups): it is read with
# a warning until dlrmflow RENAMED_UNTIL; the command line takes the grouped flags only (--promote.margin)
RENAMED = {"promote_margin": ("promote", "margin"), "min_auc_lift": ("promote", "min_auc_lift"),
           "min_test_rows": ("promote", "min_test_rows"), "min_test_positives": ("promote", "min_test_positives"),
           "promote_confidence": ("promote", "confidence"), "calibration_band": ("promote", "calibration_band"),
           "warm_start": ("promote", "warm_start"), "catchup": ("night", "catchup"),
           "on_data_check": ("night", "on_data_check"), "notify_block": ("night", "notify_block")}
RENAMED_UNTIL = "0.2.0"   # the dlrmflow version that no longer reads RENAMED's old names
_warned: set[str] = set()   # the old names this process has warned of (once each)


def grouped(data: Any, strict: bool = True) -> Any:
    """A pipeline config's data (a YAML file's, a flow run's parameters) with its once-flat settings moved into
    their groups (``RENAMED``), warning once a process for each old name found. Given both ways (``promote_margin``
    and ``promote.margin``), it is an error (``strict``: one of the two was not meant), else the new name wins."""
    if not isinstance(data, dict) or not RENAMED.keys() & data.keys():
        return data
    data = dict(data)
    for old, (group, name) in RENAMED.items():
        if old not in data:
            continue
        value = data.pop(old)
        section = dict(data.get(group) or {})
        if name in section and strict:
            raise ValueError(f"{old} is the old name of {group}.{name}, and both are given; fix: keep {group}.{name} "
                             f"only")
        section.setdefault(name, value)
        data[group] = section
        if old not in _warned:
            _warned.add(old)
            warnings.warn(f"the pipeline setting {old!r} is {group}.{name} now: the old name is read until dlrmflow "
                          f"{RENAMED_UNTIL}, which removes it. Fix: rename it where it is kept (a YAML file, a "
                          "deployment's parameters).", FutureWarning, stacklevel=2)   # FutureWarning: users see it
    return data


def refuse_renamed(given: Iterable[str]) -> None:
    """Fail on an old name of ``RENAMED`` among the dotted settings ``given`` on the command line (``--set``): the
    command line takes the new names only."""
    if old := sorted(RENAMED.keys() & set(given)):
        group, name = RENAMED[old[0]]
        raise UserError(f"--set {old[0]}: the setting is {group}.{name} now. Fix: --set {group}.{name}=VALUE (or "
                        f"--{group}.{name.replace('_', '-')} VALUE).")


class _Model(BaseModel):   # the pipeline's groups: no unknown keys
    model_config = ConfigDict(extra="forbid")


class PipelineSyntheticConfig(_Model):
    """The synthetic Criteo logs used when no inputs are given (generated once per store, then reused)."""

    rows: int = Field(60_000, ge=1000, description="Rows of synthetic Criteo-format logs.")
    files: int = Field(2, ge=1, description="Files the rows are split into (preprocessed in parallel).")
    seed: int = Field(0, ge=0, description="Seed; the same rows and seed give the same bytes.")


class PipelinePreprocessConfig(FlowPreprocessConfig):
    """PreprocessConfig whose inputs default to synthetic logs and whose store is the pipeline's."""

    inputs: list[str] = Field(default_factory=list, description="Input files, folders or globs (local or s3://). "
                              "Empty: synthetic Criteo logs (see `synthetic`).")
    out: SkipJsonSchema[str] = filled_in("")
    progress: SkipJsonSchema[bool] = filled_in(False)


class PipelineGcConfig(GcConfig):
    """GcConfig whose store, dated inputs and retain_days the pipeline fills in (its store, its window's templates,
    `window.retain_days`)."""

    store: SkipJsonSchema[str] = filled_in("")
    inputs: SkipJsonSchema[list[str]] = filled_in([])
    retain_days: SkipJsonSchema[int] = filled_in(0)


PRESETS_FILE = Path(__file__).with_name("presets.yaml")
TUNED_OF_MODEL = "model"   # tuned_config: the pipeline's model's tuned config
DATE_PLACEHOLDER = "{date}"  # in a dated run's run_name: filled with the run's date (ISO)
PresetName = Literal[tuple(preset_names())]


NO_PRESET = "none"   # the form's choice of no preset (null in a config)


def _preset_choice(schema: dict) -> None:
    """The form's ``preset``: one choice among ``none`` and the presets (Prefect draws ``Literal | None`` as a
    str / None toggle, and refuses a null in an enum)."""
    choices = next(s for s in schema.pop("anyOf") if "enum" in s)
    schema.update(choices, enum=[NO_PRESET, *choices["enum"]], default=NO_PRESET)


class PipelineConfig(_Model):
    """preprocess -> train -> evaluate, with everything stored under one root URI."""

    preset: PresetName | None = Field(None, description="A preset shipped with dlrmflow: its training settings "
                                      "(training/presets/NAME.yaml) and the preprocessing they were tuned with "
                                      "(nightly/presets.yaml), applied under the settings you give (in a form: those "
                                      "changed from their defaults).", json_schema_extra=_preset_choice)
    store: str = store_field()
    credentials_block: str | None = Field(None, description="Name of a Prefect Secret block holding the S3 "
                                          "settings as JSON (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                                          "AWS_ENDPOINT_URL, AWS_REGION). Default: the AWS_* environment variables.")
    run_name: str | None = Field(None, description="Run folder name in the store's runs/ folder (letters, digits, "
                                 "'_', '.', '-'). Default: derived from the dataset and the training config, so a "
                                 "re-run resumes the same run (also in the store moved to another path or bucket "
                                 "prefix). "
                                 "A dated run's name must hold {date} (filled with the run's date).")
    tuned_config: str | None = Field(None, description="Training settings a tune found (`dlrmflow tune`): a "
                                     "training YAML (a tune's best.yaml, local or s3://), or `model`: the latest "
                                     "tuned config of this pipeline's model (STORE/models/NAME/tuned.yaml, rewritten by "
                                     "each `dlrmflow tune --model NAME`, e.g. a weekly tune deployment; until one "
                                     "exists the train settings are used). Applied like a preset's training settings, "
                                     "under the train fields you give.")
    synthetic: PipelineSyntheticConfig = Field(default_factory=PipelineSyntheticConfig,
                                               description="Synthetic data settings.")
    preprocess: PipelinePreprocessConfig = Field(default_factory=PipelinePreprocessConfig, description="Preprocessing.")
    train: FlowTrainConfig = Field(default_factory=default_train, description="Training (on the preprocessed dataset).")
    launcher: LauncherConfig = Field(default_factory=lambda: LocalLauncherConfig(nproc=2), description="Where the "
                                     "ranks of training, evaluation and a challenger's scoring run: local torchrun "
                                     "(default, 2 ranks), a Slurm allocation or a Kubernetes Job.")
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="Evaluation.")
    window: WindowConfig = Field(default_factory=WindowConfig, description="Dated runs: the days a run for a date "
                                 "trains, validates and tests on (inputs with {date}, or synthetic days).")
    model: str | None = Field(None, pattern=MODEL_NAME, description="Name of the model this run competes for "
                              "(store/models/NAME): the new model is promoted when it beats the champion on the "
                              "test day. Default: no comparison.")
    promote: PromoteConfig = Field(default_factory=PromoteConfig, description="With a model: when the new model "
                                   "replaces the champion (the gates), and the warm start from it.")
    gc: PipelineGcConfig = Field(default_factory=PipelineGcConfig, description="After each dated night's decision: "
                                 "the store's clean-up (`dlrmflow gc`): what no champion, recent night, lease or "
                                 "window needs is removed.")
    data_check: DataCheckConfig = Field(default_factory=DataCheckConfig, description="The data checks' thresholds.")
    night: NightConfig = Field(default_factory=NightConfig, description="Dated runs: the night's policies (catch-up "
                               "after an outage, the data gate's verdict, who is told of a failure).")

    @field_validator("preset", mode="before")
    @classmethod
    def _no_preset(cls, preset: Any) -> Any:
        return None if preset == NO_PRESET else preset

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, name: str | None) -> str | None:
        if name is not None:
            try:
                check_run_name(name.replace(DATE_PLACEHOLDER, "2026-01-01"), name)   # as a night fills it
            except UserError as e:
                raise ValueError(str(e).rstrip(".")) from None
        return name

    @model_validator(mode="before")
    @classmethod
    def _grouped(cls, data: Any) -> Any:
        return grouped(data)

    @model_validator(mode="after")
    def _check_tuned(self) -> "PipelineConfig":
        if self.tuned_config == TUNED_OF_MODEL and not self.model:
            raise ValueError("tuned_config 'model' reads the tuned config of the pipeline's model, but no model is "
                             "named; fix: set model, or give the tuned config's YAML")
        return self

    @property
    def dated(self) -> bool:
        """Whether runs are for a date: a window is set or the inputs hold {date}."""
        return bool(self.window.train_days) or any(is_dated(uri) for uri in self.preprocess.inputs)

    def gc_config(self, store: str, templates: list[str]) -> GcConfig:
        """The clean-up after a dated night of these settings in ``store`` whose inputs are ``templates``."""
        return GcConfig(store=store, keep_nights=self.gc.keep_nights, dry_run=self.gc.dry_run, inputs=list(templates),
                        retain_days=self.window.retain_days)

    def preprocess_config(self, inputs: list[str], store: str) -> FlowPreprocessConfig:
        """The preprocessing config of this run (inputs and store filled in)."""
        return FlowPreprocessConfig(**{**self.preprocess.model_dump(), "inputs": inputs, "out": store})

    def check_dated(self) -> None:
        """Fail on settings a dated run cannot combine: a split rule or split-mapped inputs (the window is the
        split), inputs without {date} (every day would read the same files), a model without a window, a fixed
        ``run_name`` (every night would find the first night's run complete and compare different days)."""
        if self.run_name and (DATE_PLACEHOLDER in self.run_name) != self.dated:
            if self.dated:
                raise UserError(f"run_name '{self.run_name}' is fixed, but the run is dated: every night would reuse "
                                "the first night's run and never retrain. Fix: leave run_name out (the default "
                                f"depends on the date) or put {DATE_PLACEHOLDER} in it, e.g. "
                                f"'{self.run_name}-{DATE_PLACEHOLDER}'.")
            raise UserError(f"run_name '{self.run_name}' holds {DATE_PLACEHOLDER}, but the run is not dated. Fix: "
                            f"remove {DATE_PLACEHOLDER}, or pass --train-days N with inputs holding {{date}}.")
        if not self.dated:
            if self.model:
                raise UserError(f"model '{self.model}' competes on a test day, but the run is not dated. Fix: pass "
                                "--train-days N (and inputs with {date}, e.g. 'logs/{date}/*.gz').")
            return
        if self.preprocess.split:
            raise UserError(f"--split {self.preprocess.split} cannot be combined with a dated run: the window's "
                            "days are the splits (train, val, test). Fix: leave --split out.")
        for uri in self.preprocess.inputs:
            split, _ = split_mapping(uri)
            if split:
                raise UserError(f"input '{uri}' maps files to a split in a dated run, whose window's days are the "
                                "splits. Fix: give the template without the 'split=' prefix.")
            if not is_dated(uri):
                raise UserError(f"input '{uri}' holds no {{date}} placeholder, so every day of the window would "
                                "read it. Fix: use a template such as 'logs/{date}/part-*' or "
                                "'s3://logs/{date:%Y/%m/%d}/*.gz'.")

    def check_splits(self, preprocess: PreprocessConfig) -> None:
        """Fail before any work when training or evaluation names a split that ``preprocess`` will not
        write, naming the splits it will."""
        rule = split_rule(preprocess)
        if not rule.splits:  # the data decides (column:COL): checked on the dataset before training
            return
        where = f"split rule {rule.text()}"
        eval_split = self.train.check_splits(rule.splits, where)
        if not self.evaluate.dataset:
            self.evaluate.check_split(rule.splits, where, "evaluate.split")
        self.check_held_out(eval_split)

    def check_held_out(self, eval_split: str | None) -> None:
        """Fail when training validates (``eval_split``, as ``TrainConfig.check_splits`` resolves it) on the split
        the run reports (``evaluate.split`` of its own dataset): its checkpoint would be chosen on the rows that
        score it."""
        if eval_split is not None and eval_split == self.evaluate.split and not self.evaluate.dataset:
            raise UserError(f"train.eval_split '{eval_split}' is evaluate.split, the split the run reports: its "
                            "checkpoint would be chosen (best, early stopping) on the rows that score it. Fix: "
                            "validate on another split (the default 'val'; a dataset without one validates on the "
                            "last train.data.holdout_fraction of its train rows), or evaluate another split.")

    def with_preset(self, given: dict[str, Any] | None = None) -> tuple["PipelineConfig", list[str]]:
        """This config with its preset and its tuned config applied, and both cleared (applying again changes
        nothing): the training settings of the tuned config, else of the preset, under the ``given`` train fields;
        the preset's preprocessing where ``given`` sets nothing that conflicts. ``given``: the dotted fields the user
        set (default: those that differ from the defaults). Returns the config and notes on what was (not) applied."""
        if not self.preset and not self.tuned_config:
            return self, []
        data = self.model_dump(mode="json")
        given = _changed(data, PipelineConfig().model_dump(mode="json")) if given is None else given
        train = {k.split(".", 1)[1]: v for k, v in given.items() if k.startswith("train.")}
        base, notes = None, []
        if self.preset:
            preset = PipelinePreset.named(self.preset)
            base = TrainConfig.preset(self.preset)
            applied, skipped = preset.hints({k: data["preprocess"].get(k) for k in (k.split(".", 1)[1] for k in given
                                                                                    if k.startswith("preprocess."))})
            data["preprocess"].update(applied)
            notes = [f"preset {self.preset}: training settings of training/presets/{self.preset}.yaml"]
            notes += [f"preset {self.preset}: preprocess.{k} = {v!r}" for k, v in applied.items()]
            notes += [f"preset {self.preset}: preprocess.{k} not applied ({why})" for k, why in skipped.items()]
        if self.tuned_config:
            tuned, where = self.tuned_train()
            if tuned is not None:
                base = tuned
                notes.append(f"tuned config: training settings of {where}" + (" (not the preset's)" if self.preset
                                                                               else ""))
            else:
                notes.append(f"tuned config: {where} does not exist yet (no tune of model {self.model} finished); "
                             "training with the settings given")
        if base is not None:
            data["train"] = apply_overrides(base.model_dump(mode="json"), train, strict=False)
        return validate(PipelineConfig, {**data, "preset": None, "tuned_config": None},
                        f"preset {self.preset}" if self.preset else f"tuned config {self.tuned_config}"), notes

    def tuned_train(self) -> tuple[TrainConfig | None, str]:
        """The training settings ``tuned_config`` names (None for a model no tune has written yet), and where."""
        if self.tuned_config == TUNED_OF_MODEL:
            uri = model_uri(self.store, self.model)
            return load_tuned(uri), f"{uri}/{TUNED_FILE}"
        return TrainConfig.from_yaml(self.tuned_config), self.tuned_config

    def run_id(self, store: Store, dataset: str, train: TrainConfig, date: date | None = None) -> str:
        """``run_name``, else ``<dataset folder>-<hash of the training config>``; for a dated run
        ``<model or dataset name>-<date>-<hash>`` (a dated ``run_name`` has ``{date}`` filled with the date). The
        hash is the same wherever ``store`` is, and a run made before keeps its name (``training.hashed_run``)."""
        if self.run_name:
            return self.run_name.replace(DATE_PLACEHOLDER, date.isoformat()) if date else self.run_name
        folder = dataset.rstrip('/').rsplit('/', 1)[-1]
        if date:
            return hashed_run(store, f"{self.model or folder.rsplit('-', 1)[0]}-{date.isoformat()}", train)
        return hashed_run(store, folder, train)


class PipelinePreset(_Model):
    """The preprocessing half of a preset (nightly/presets.yaml); its training half is training/presets/NAME.yaml."""

    preprocess: PipelinePreprocessConfig = Field(default_factory=PipelinePreprocessConfig,
                                                 description="Preprocessing settings the preset was tuned with.")

    @classmethod
    def named(cls, name: str) -> "PipelinePreset":
        """The preprocessing of the preset called ``name`` (none listed: no preprocessing settings)."""
        if name not in preset_names():
            raise UserError(f"unknown preset '{name}'. Fix: use one of {', '.join(preset_names())}.")
        presets = load_yaml(PRESETS_FILE.read_text(), str(PRESETS_FILE))
        return validate(cls, presets.get(name) or {}, f"{PRESETS_FILE}: {name}")

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


def _changed(data: dict, default: dict, prefix: str = "") -> dict[str, Any]:
    """The dotted fields of ``data`` whose values differ from ``default``'s."""
    out = {}
    for key, value in data.items():
        other = default.get(key)
        if isinstance(value, dict) and isinstance(other, dict):
            out |= _changed(value, other, f"{prefix}{key}.")
        elif value != other:
            out[prefix + key] = value
    return out


class DaysConfig(BaseModel):
    """The data gate's verdicts on a model's days: list them, or override one (`dlrmflow days`, the `days` flow)."""

    model_config = ConfigDict(extra="forbid")

    store: str = store_field()
    model: str = Field(pattern=MODEL_NAME, description="The model whose nights' days to list or judge "
                       "(store/models/NAME/days.jsonl).")
    action: Literal["list", "accept", "quarantine", "accept-shift"] = Field(
        "list", description="`list` the days and their verdicts; `accept` or `quarantine` the day `day` (an "
        "operator's verdict, which stands until the day's files change); `accept-shift` adopts a new normal since "
        "`day` (it and the later days the gate quarantined accepted: the reference of the days after them).")
    day: date | None = Field(None, description="The day to accept or quarantine, or the first day of the new normal "
                             "(YYYY-MM-DD); a day the data gate judged.")
    why: str | None = Field(None, min_length=1, description="Why (recorded with the verdict; required to accept or "
                            "quarantine).")
    by: str | None = Field(None, description="Who (recorded with the verdict). Default: this user@host.")

    @model_validator(mode="after")
    def _override(self) -> "DaysConfig":
        if self.action != "list" and (self.day is None or not self.why):
            raise ValueError(f"{self.action} needs the day and why; fix: e.g. `dlrmflow days --model "
                             f"{self.model} {self.action} 2026-11-05 --why 'the logger was fixed'`")
        return self


class LandingConfig(BaseModel):
    """When a day of the dated inputs is complete, and how `dlrmflow serve`'s day-landed sensor looks for such days
    (``nightly.landing``). Every rule that is set must hold."""

    model_config = ConfigDict(extra="forbid")

    marker: str | None = Field("_SUCCESS", min_length=1, description="A file in each day's folder (of every input "
                               "template) that says the day is complete, written after the day's files (Spark's and "
                               "Hadoop's _SUCCESS); none: no marker.")
    files: int | None = Field(None, ge=1, description="At least this many input files a day (over the templates).")
    quiet_s: float | None = Field(None, gt=0, description="The day's files unchanged (size and mtime; S3: ETag) for "
                                  "this long, in seconds, as the sensor saw them.")
    every_s: int = Field(300, ge=0, description="How often the sensor looks, in seconds (each look is a flow run: a "
                         "Python process of ~2.4 CPU-seconds); 0: no sensor (the cron schedule only).")
    lookback_days: int = Field(3, ge=1, description="How many of the newest days found the sensor looks at.")

    @model_validator(mode="after")
    def _a_rule(self) -> "LandingConfig":
        if self.marker is None and self.files is None and self.quiet_s is None:
            raise ValueError("a day needs a rule that says it is complete; fix: set landing.marker (e.g. _SUCCESS), "
                             "landing.files or landing.quiet_s")
        return self
