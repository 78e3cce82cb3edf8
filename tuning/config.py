"""What a tune searches and how: ``TuneConfig`` (the tune flow's parameters, `dlrmflow tune`'s options) and
``SearchSpace`` (the dotted training-config fields a trial samples, from a YAML file or ``default-space.yaml``).

A trial's training config is the base config (the preset the user would have used, or their YAML) with the sampled
fields set, judged by the validation AUC of its best checkpoint (``TuneConfig.trial_config``: what every sampled trial also
sets so that trials compare and prune alike).
"""

from __future__ import annotations

import hashlib
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.config import apply_overrides, load_yaml, validate
from common.errors import UserError
from common.store import TUNES, Store, check_run_name, default_store, read_text
from training import TrainConfig, preset_names

DEFAULT_SPACE = Path(__file__).with_name("default-space.yaml")
# fields whose choices list the hidden layers: the layer each must end with is added (name -> the field giving it)
HIDDEN_LAYERS = {"arch.bottom_mlp": "arch.embedding_dim", "arch.top_mlp": None}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Dimension(_Model):
    """One field of the search: a range (``low``..``high``, ``log`` scale, integer ``step``) or ``choices``."""

    low: float | None = Field(None, description="Lowest value of a range.")
    high: float | None = Field(None, description="Highest value of a range.")
    log: bool = Field(False, description="Sample the range on a log scale (low > 0).")
    step: int | None = Field(None, ge=1, description="Step of an integer range.")
    choices: list[Any] | None = Field(None, min_length=1, description="The values to choose from (for the MLPs: "
                                      "their hidden layers).")
    when: dict[str, Any] | None = Field(None, description="Sample this field only where these fields have these "
                                        "values, e.g. {arch.interaction: dcn}.")

    @model_validator(mode="after")
    def _range_or_choices(self) -> "Dimension":
        ranged = self.low is not None or self.high is not None
        if ranged == (self.choices is not None):
            raise ValueError("give either low and high (a range) or choices")
        if ranged:
            if self.low is None or self.high is None or not self.low < self.high:
                raise ValueError(f"a range needs low < high (got low={self.low}, high={self.high})")
            if self.log and self.low <= 0:
                raise ValueError(f"a log range needs low > 0 (got {self.low})")
        return self


def _leaf_type(key: str, source: str) -> Any:
    """The annotation of the TrainConfig field named by the dotted ``key`` (UserError for no such field)."""
    model: Any = TrainConfig
    *parents, last = key.split(".")
    for part in parents:
        field = getattr(model, "model_fields", {}).get(part)
        inner = _strip_none(field.annotation) if field else None
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            raise UserError(f"{source}: '{key}' is not a training config field ('{part}' is no section). Fix: "
                            "use the config's dotted names, e.g. optimizer.dense.lr (see `dlrmflow train "
                            "--help-all`).")
        model = inner
    field = model.model_fields.get(last)
    if field is None:
        raise UserError(f"{source}: '{key}' is not a training config field. Fix: use the config's dotted names, "
                        "e.g. optimizer.dense.lr (see `dlrmflow train --help-all`).")
    return _strip_none(field.annotation)


def _strip_none(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


class SearchSpace:
    """The fields a trial samples (dotted key -> ``Dimension``), checked against the training config."""

    def __init__(self, dimensions: dict[str, Dimension], source: str):
        self.dimensions, self.source = dimensions, source
        self.kinds: dict[str, str] = {}
        for key, dim in dimensions.items():
            leaf = _leaf_type(key, source)
            if dim.choices is not None:
                self.kinds[key] = "choice"
            elif leaf in (int, float):
                self.kinds[key] = leaf.__name__
            else:
                raise UserError(f"{source}: {key} is not a number, so it takes choices, not a range. Fix: list "
                                f"its values as choices: [...].")
            if key in HIDDEN_LAYERS and not all(isinstance(c, list) for c in dim.choices or [None]):
                raise UserError(f"{source}: {key}: each choice lists the hidden layers, e.g. [128, 64] (the last "
                                "layer is added). Fix: write each choice as a list.")
            for other in dim.when or {}:
                if other not in dimensions:
                    raise UserError(f"{source}: {key}: 'when' names {other}, which the space does not sample. Fix: "
                                    f"add {other} to the space or drop the condition.")

    @classmethod
    def from_yaml(cls, uri: str | None = None) -> "SearchSpace":
        """The space of a YAML file (local or fsspec URI); None: ``default-space.yaml``."""
        path = uri or str(DEFAULT_SPACE)
        try:
            data = load_yaml(read_text(path), path) or {}
        except FileNotFoundError:
            raise UserError(f"{path}: search space file does not exist. Fix: pass an existing YAML, or leave --space "
                            f"out for the default ({DEFAULT_SPACE}).") from None
        except yaml.YAMLError as e:
            raise UserError(f"{path}: is not valid YAML: {e}") from None
        if not isinstance(data, dict) or not data:
            raise UserError(f"{path}: a search space is a mapping of dotted config fields to ranges or choices, "
                            "e.g. 'optimizer.dense.lr: {low: 0.001, high: 0.3, log: true}'.")
        return cls({str(k): validate(Dimension, v, f"{path}: {k}") for k, v in data.items()}, path)

    def text(self) -> str:
        """The space as canonical JSON (hashed into a tune's default name)."""
        return json.dumps({k: d.model_dump(exclude_none=True) for k, d in self.dimensions.items()}, sort_keys=True)

    def sample(self, trial) -> dict[str, Any]:
        """The dotted overrides an Optuna ``trial`` samples (define-by-run: a field with ``when`` only where its
        condition holds). MLP choices are sampled by name (``128-64``) and given back as hidden layers."""
        values: dict[str, Any] = {}
        for key, dim in self.dimensions.items():
            if dim.when and any(values.get(k, _MISSING) != v for k, v in dim.when.items()):
                continue
            kind = self.kinds[key]
            if kind == "choice":
                labels = [_label(c) for c in dim.choices]
                values[key] = dim.choices[labels.index(trial.suggest_categorical(key, labels))]
            elif kind == "int":
                values[key] = trial.suggest_int(key, int(dim.low), int(dim.high), step=dim.step or 1, log=dim.log)
            else:
                values[key] = trial.suggest_float(key, dim.low, dim.high, log=dim.log)
        return values

    def config(self, base: TrainConfig, values: dict[str, Any]) -> TrainConfig:
        """``base`` with the sampled ``values`` set (hidden layers completed by their last layer)."""
        data = apply_overrides(base.model_dump(mode="json"), values)
        arch = data["arch"]
        for key, last in HIDDEN_LAYERS.items():
            name = key.split(".")[1]
            if key in values:
                arch[name] = list(values[key]) + [arch["embedding_dim"] if last else 1]
            elif last:   # the base's MLP, ending with the sampled embedding_dim
                arch[name] = arch[name][:-1] + [arch["embedding_dim"]]
        return validate(TrainConfig, data, f"{self.source}: a trial's values {values}")

    def check(self, base: TrainConfig, ranks: int, train_rows: int | None = None) -> None:
        """Fail before any trial on a space no trial can train: each choice must make a valid config with the
        base, and every batch size must divide over the ``ranks`` (and fit in the ``train_rows``)."""
        for key, dim in self.dimensions.items():
            for value in dim.choices or [dim.low, dim.high]:
                value = int(value) if self.kinds[key] == "int" else value
                cfg = self.config(base, {key: value})
                for size, field in ((cfg.data.batch_size, "data.batch_size"),
                                    (cfg.data.eval_batch_size, "data.eval_batch_size")):
                    if size % ranks:
                        raise UserError(f"{self.source}: {field} {size} does not divide over the {ranks} ranks. "
                                        f"Fix: use multiples of {ranks}.")
                if train_rows is not None and cfg.data.batch_size > train_rows:
                    raise UserError(f"{self.source}: data.batch_size {cfg.data.batch_size} is more than the "
                                    f"{train_rows} rows of the training split: such a trial trains no step. Fix: "
                                    f"use batch sizes up to {train_rows}.")


_MISSING = object()


def _label(choice: Any) -> Any:
    """An Optuna-storable name of a choice: lists as ``128-64``."""
    return "-".join(str(v) for v in choice) if isinstance(choice, list) else choice


class TuneConfig(_Model):
    """A search over the training config: trials, their base, the space, pruning and parallelism."""

    dataset: str | None = Field(None, description="Dataset folder or URI (written by `dlrmflow preprocess`) the "
                                "trials train and validate on. Default with `model`: the dataset of that model's "
                                "champion (its latest window).")
    store: str = Field(default_factory=default_store, description="Artifact store root (local folder or "
                       "s3://bucket/prefix): the study in tunes/NAME/, each trial a run in runs/.")
    name: str | None = Field(None, description="The tune's name (tunes/NAME/). Default: the dataset's folder and a "
                             "hash of the base config, the space and the seed, so running the same tune again resumes "
                             "it (finished trials are never re-run).")
    model: str | None = Field(None, description="A model name: the "
                              "best config is also written to models/NAME/tuned.yaml, where the nightly pipeline "
                              "picks it up (its `tuned_config: model`).")
    trials: int = Field(20, ge=1, description="Trials in the study, trial 0 (the base config, untuned) included; a "
                        "resumed tune runs only those missing.")
    parallel: int = Field(1, ge=1, description="Trials training at the same time (each also holds a slot of the "
                          "Prefect concurrency limit `concurrency_limit`).")
    timeout_s: float | None = Field(None, gt=0, description="Start no trial after this many seconds (running ones "
                                    "finish). Default: no limit.")
    preset: str = Field("default", description=f"The base config: a preset shipped with dlrmflow "
                        f"({', '.join(preset_names())}), trained as is as trial 0.")
    config: str | None = Field(None, description="The base config as a training YAML of yours (local or s3://), "
                               "instead of the preset.")
    space: str | None = Field(None, description="A search space YAML (local or s3://): dotted config fields -> "
                              f"ranges or choices. Default: {DEFAULT_SPACE.name} shipped with dlrmflow.")
    seed: int = Field(0, description="Seed of the sampler (TPE); the trials train with the base config's seed.")
    evaluations_per_epoch: int = Field(4, ge=0, description="Validations per epoch of each sampled trial (its "
                                       "eval_every follows its batch size): the points where trials are compared and "
                                       "pruned. 0: the base config's eval_every.")
    early_stopping_patience: int | None = Field(3, ge=1, description="Early stopping of the sampled trials when the "
                                                "base config has none (evaluations without improvement).")
    pruner: Literal["median", "none"] = Field("median", description="`median`: stop a trial whose best validation "
                                              "AUC so far is below the median of the earlier trials' at the same "
                                              "point (Optuna's MedianPruner); `none`: every trial trains to its end.")
    prune_startup_trials: int = Field(4, ge=0, description="Prune nothing until this many trials have finished.")
    prune_warmup_evaluations: int = Field(1, ge=0, description="Prune no trial before this many of its validations.")
    concurrency_limit: str | None = Field(None, description="A Prefect global concurrency limit shared with other "
                                          "work (e.g. of a GPU pool) each trial holds a slot of while it trains, as "
                                          "set in the UI (created with `parallel` slots when missing; a killed tune's "
                                          "slots return when their leases expire). Default: the tune's own limit "
                                          "`tune-NAME` with `parallel` slots, made anew at each start.")
    evaluate_split: str | None = Field("test", description="After the search, evaluate the base trial and the best "
                                       "on this split (None: no evaluation), to see whether the gain holds.")

    @model_validator(mode="after")
    def _check(self) -> "TuneConfig":
        if self.name is not None:
            check_run_name(self.name)
        if self.config is None and self.preset not in preset_names():
            raise ValueError(f"unknown preset '{self.preset}'; use one of {', '.join(preset_names())}")
        if self.dataset is None and self.model is None:
            raise ValueError("give a dataset (or a model, to tune on its champion's dataset)")
        return self

    def base(self) -> TrainConfig:
        """The base training config (trial 0): the YAML ``config``, else the preset."""
        return TrainConfig.from_yaml(self.config) if self.config else TrainConfig.preset(self.preset)

    def study_name(self, dataset: str, base: TrainConfig, space: SearchSpace, store: Store | None = None) -> str:
        """``name``, else ``<dataset folder>-tune-<hash of the base, space, seed and trial settings>``. With the
        tune's ``store``: a dataset that lies in it hashed by its store-relative location, so the store moved to
        another path or prefix keeps the tune's name (and its trials' runs: ``training.hashed_run``); a tune made
        before, named by the dataset's URI, keeps its name (``Store.named``)."""
        if self.name:
            return self.name
        if store is not None:
            where = store.relative(dataset)
            moved = base.model_copy(update={"dataset": store.relative(base.dataset)}) if base.dataset else base
            return store.named(TUNES, self.study_name(where, moved, space), self.study_name(dataset, base, space))
        settings = self.model_dump(mode="json", include={"seed", "evaluations_per_epoch", "early_stopping_patience"})
        data = base.model_dump(mode="json")
        if data["data"].get("holdout_rows") is None and data["data"].get("holdout_fraction") == 0.1:
            del data["data"]["holdout_rows"], data["data"]["holdout_fraction"]   # added later: names stay
        text = json.dumps([data, space.text(), settings, dataset], sort_keys=True)
        folder = dataset.rstrip("/").rsplit("/", 1)[-1]
        return f"{folder}-tune-{hashlib.blake2b(text.encode(), digest_size=4).hexdigest()}"

    def trial_config(self, base: TrainConfig, space: SearchSpace, values: dict[str, Any],
                     train_rows: int) -> TrainConfig:
        """A sampled trial's training config: ``values`` on ``base``, ``evaluations_per_epoch`` validations per
        epoch, early stopping (when the base has none) and one checkpoint kept besides the best. The base's
        ``best_metric`` stays: on small validation splits the log loss picks a checkpoint that generalises better
        than the noisier AUC would."""
        cfg = space.config(base, values)
        steps_per_epoch = max(1, train_rows // cfg.data.batch_size)
        update: dict[str, Any] = {"keep_checkpoints": 1}
        if self.evaluations_per_epoch:
            update["eval_every"] = max(1, steps_per_epoch // self.evaluations_per_epoch)
            update["checkpoint_every"] = None
        if cfg.early_stopping_patience is None and self.early_stopping_patience:
            update["early_stopping_patience"] = self.early_stopping_patience
        return cfg.model_copy(update=update)

    def report_point(self, ordinal: int, step: int, batch_size: int, train_rows: int, sampled: bool) -> int:
        """The point trials are compared at, in 1/``evaluations_per_epoch`` epochs (1/4 when 0): a sampled trial's
        ``ordinal``-th validation (it validates that often by ``trial_config``), else (trial 0, on its own cadence)
        the epochs' fraction its validation at ``step`` has seen, rounded."""
        if sampled and self.evaluations_per_epoch:
            return ordinal
        per_epoch = self.evaluations_per_epoch or 4
        return max(1, round(step * batch_size * per_epoch / max(train_rows, 1)))
