"""The training and evaluation configurations: typed, validated, JSON-serialisable models (pydantic).

``TrainConfig`` is the YAML file (``dlrmflow train --config``), the presets
(``training/presets/<name>.yaml``), the CLI's overrides and, later, the Prefect flow's
parameters. Each section is built into its component by that component's module
(``model.build_model``, ``trainer.build_optimizer``, ``sharding.plan_tables``). ``EvaluateConfig``
is what ``dlrmflow evaluate`` takes besides the run (``training.evaluate.evaluate_run``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from common.config import apply_overrides, filled_in, load_yaml, validate
from common.errors import UserError
from common.store import RUNS, Store, filesystem, is_location, read_text, store_of
from common.uri import inside
from feature_spec import file_uri
from feature_spec import load as load_spec
from training.cache import DEFAULT_CACHE_DIR

PRESET_DIR = Path(__file__).parent / "presets"
HOLDOUT = "holdout"   # eval_split's name for the rows set aside at the end of the training split
TEST_SPLIT = "test"   # the split that reports a run (EvaluateConfig.split's default): never validated on
# what a table constraint may name: TorchRec's ShardingType values and the kernels training.sharding plans with
# (written out so that a config is read without importing TorchRec; tests/training/test_sharding.py compares them)
SHARDING_TYPES = ["data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise", "table_column_wise",
                  "grid_shard"]
COMPUTE_KERNELS = ["dense", "fused", "fused_uvm", "fused_uvm_caching"]


def split_error(where: str | None, split: str, splits: list[str], fix: str) -> UserError:
    """The error for a split that the dataset (``where``: its URI, or the split rule that makes it) lacks,
    naming the splits it has and the fix."""
    return UserError(f"{where}: the dataset has no split '{split}' (it has: {', '.join(splits) or 'none'}). "
                       f"Fix: {fix}")


class TableConstraint(BaseModel):
    """What the planner may choose for one table (None: anything the sharder supports)."""

    model_config = ConfigDict(extra="forbid")

    sharding_types: list[str] | None = Field(None, description="Allowed sharding types (TorchRec's ShardingType "
                                             "values: data_parallel, table_wise, row_wise, table_row_wise, ...).")
    compute_kernels: list[str] | None = Field(None, description="Allowed kernels: dense, fused, fused_uvm, "
                                              "fused_uvm_caching.")

    @field_validator("sharding_types")
    @classmethod
    def _known_types(cls, v):
        return _check_names(v, SHARDING_TYPES, "sharding type")

    @field_validator("compute_kernels")
    @classmethod
    def _known_kernels(cls, v):
        return _check_names(v, COMPUTE_KERNELS, "compute kernel")


def _check_names(values: list[str] | None, known: list[str], what: str) -> list[str] | None:
    for v in values or []:
        if v not in known:
            raise ValueError(f"unknown {what} '{v}'; use one of {', '.join(known)}")
    if values is not None and not values:
        raise ValueError(f"list at least one {what}, or leave the field out")
    return values


class ShardingConfig(BaseModel):
    """The ``sharding:`` section of the training config."""

    model_config = ConfigDict(extra="forbid")

    profile: str = Field("auto", description="Hardware profile: auto (from the device each rank runs on), cpu, mi300x, "
                         "mi325x, mi355x, h100, h200, or a profile YAML.")
    constraints: dict[str, TableConstraint] = Field(default_factory=dict,
                                                    description="Per-table constraints, by table name (t_FEATURE).")
    storage_reservation: float = Field(0.10, ge=0, lt=1, description="Share of each device's memory kept for "
                                       "the dense model, activations and buffers (not given to embedding tables).")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "config"):
        """Validate parsed YAML/JSON; errors name the source and the field."""
        return validate(cls, data, source)


class ArchConfig(_Section):
    """The DLRM: dot interaction (DLRM) or DCN-v2 cross layers (DLRM-DCNv2, MLPerf DLRMv2)."""

    interaction: Literal["dot", "dcn"] = Field("dot", description="Feature interaction: 'dot' (DLRM) or 'dcn' (DCN-v2).")
    embedding_dim: int = Field(16, ge=1, description="Width of every embedding table.")
    bottom_mlp: list[int] = Field([64, 16], min_length=1, description="Bottom (dense) MLP layer sizes; the last one must equal embedding_dim.")
    top_mlp: list[int] = Field([64, 1], min_length=1, description="Top (over) MLP layer sizes; the last one must be 1.")
    dcn_layers: int = Field(3, ge=1, description="Number of DCN-v2 cross layers (interaction 'dcn').")
    dcn_rank: int = Field(64, ge=1, description="Low-rank dimension of the DCN-v2 cross layers (interaction 'dcn').")
    max_table_size: int | None = Field(None, ge=2, description="Cap on rows per table: larger features are hashed (id % cap). None keeps the feature spec's cardinality.")

    @model_validator(mode="after")
    def _check_shapes(self) -> "ArchConfig":
        if self.bottom_mlp[-1] != self.embedding_dim:
            raise ValueError(f"bottom_mlp must end with embedding_dim={self.embedding_dim} (got {self.bottom_mlp}); "
                             f"fix: make its last size {self.embedding_dim}")
        if self.top_mlp[-1] != 1:
            raise ValueError(f"top_mlp must end with 1 (one logit; got {self.top_mlp})")
        return self


class EmbeddingOptimizerConfig(_Section):
    """The fused FBGEMM optimizer of the embedding tables (applied inside the backward pass)."""

    type: Literal["rowwise_adagrad", "adam", "sgd"] = Field("rowwise_adagrad", description="Embedding optimizer.")
    lr: float = Field(0.05, gt=0, description="Peak learning rate of the embeddings.")
    eps: float = Field(1e-8, gt=0, description="Epsilon of Adagrad/Adam.")
    weight_decay: float = Field(0.0, ge=0, description="L2 regularisation of the embedding rows a batch looks up: "
                                "the training loss adds weight_decay/2 x each row's squared pooled embeddings "
                                "(averaged as the loss is; the same on CPU and GPU, with any embedding optimizer).")


class DenseOptimizerConfig(_Section):
    """The optimizer of the dense MLPs (and data-parallel tables)."""

    type: Literal["adagrad", "adam", "sgd"] = Field("adagrad", description="Dense optimizer.")
    lr: float = Field(0.05, gt=0, description="Peak learning rate of the dense part.")
    eps: float = Field(1e-8, gt=0, description="Epsilon of Adagrad/Adam.")
    weight_decay: float = Field(0.0, ge=0, description="L2 regularisation of the dense weights (torch's weight_decay).")


class OptimizerConfig(_Section):
    """Both optimizers and the learning-rate schedule they share."""

    embedding: EmbeddingOptimizerConfig = Field(default_factory=EmbeddingOptimizerConfig, description="Embedding optimizer.")
    dense: DenseOptimizerConfig = Field(default_factory=DenseOptimizerConfig, description="Dense optimizer.")
    warmup_steps: int = Field(0, ge=0, description="Linear warmup from 0 to the peak rates over this many steps.")
    decay_start: int | None = Field(None, ge=0, description="Step where the polynomial (power 2) decay to 0 starts; None: no decay.")
    decay_steps: int = Field(0, ge=0, description="Length of the decay in steps.")


class DataConfig(_Section):
    """How batches are drawn from the dataset's splits."""

    batch_size: int = Field(256, ge=1, description="GLOBAL training batch size: each of the N ranks reads batch_size / N rows per step (must divide).")
    eval_batch_size: int = Field(4096, ge=1, description="GLOBAL evaluation batch size (divided over the ranks like batch_size).")
    train_split: str = Field("train", description="Split to train on.")
    shuffle: bool = Field(True, description="Shuffle the order of global batches each epoch (a function of seed and epoch).")
    holdout_fraction: float = Field(0.1, gt=0, lt=1, description="eval_split 'holdout' (what the default 'val' "
                                    "becomes on a dataset without a 'val' split): the share of train_split's rows, "
                                    "taken from its END (the latest rows of an ordered split), that validate and are "
                                    "not trained on.")
    holdout_rows: int | None = Field(None, ge=1, description="eval_split 'holdout': the rows at the end of train_split "
                                     "that validate instead of training. Set from holdout_fraction when a run starts "
                                     "and saved in its config.yaml, so that a resume and an evaluation read the same "
                                     "rows. None: from holdout_fraction.")
    cache_dir: str | None = Field(None, description=f"Local cache for a remote dataset (None: {DEFAULT_CACHE_DIR}).")
    cache_max_gib: float | None = Field(50.0, gt=0, description="Bound on that cache per node: the least recently used "
                                        "datasets' files are removed past it (none used in the last hour). None: unbounded.")

    def holdout_size(self, train_rows: int) -> int:
        """The rows at the end of a training split of ``train_rows`` rows that eval_split 'holdout' validates on:
        ``holdout_rows``, else ``holdout_fraction`` of them (rounded, at least one)."""
        return self.holdout_rows or max(1, round(train_rows * self.holdout_fraction))


class PrecisionConfig(_Section):
    """Numeric formats of the dense part and of the embedding tables."""

    dense: Literal["fp32", "bf16"] = Field("fp32", description="'bf16': train the dense part (MLPs, interaction) "
                                           "under bfloat16 autocast, on CPU or GPU; weights, optimizer state, "
                                           "loss and evaluation stay float32.")
    embeddings: Literal["fp32", "fp16"] = Field("fp32", description="Storage type of the embedding weights.")


class InitFrom(_Section):
    """Where a warm start takes its weights: a checkpoint of an earlier run (``training.warmstart``).

    Also accepted as a string: ``RUN`` (its best checkpoint) or ``RUN@CHECKPOINT`` (``RUN@best``,
    ``RUN@latest``, ``RUN@1200``). A named model's champion is resolved to its run and step by the
    flows layer before training. A run's config.yaml records ``run`` store-relative when it lies in the run's own
    store (``recorded``) and reads it back as a URI (``resolved``)."""

    run: str = Field(description="Run folder or URI (local path or s3://...) to initialise from; `runs/NAME`: the "
                     "run NAME of the store of the run being trained (or of `store`).")
    checkpoint: str = Field("best", description="`best` (the latest if the run never validated), `latest` or a step number.")
    optimizer_state: Literal["carry", "reset"] = Field(
        "carry", description="'carry': the embedding accumulators remapped like the rows and the dense optimizer "
        "state copied; 'reset': fresh optimizer state.")
    store: str | None = Field(None, description="The store `run` lies in, when it is not the store of the run being "
                              "trained: a checkpoint's metadata is a pickle (loading it runs code), so a warm start "
                              "reads another store only when it is named here. Name only a store you trust.")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        if not isinstance(data, str):
            return data
        run, _, which = data.strip().rpartition("@")
        if run and (which in ("best", "latest") or which.isdigit()):
            return {"run": run, "checkpoint": which}
        return {"run": data.strip()}

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _best_latest_or_step(cls, v: Any) -> str:
        return checkpoint_name(v)

    def resolved(self, run_uri: str) -> "InitFrom":
        """This warm start as the run ``run_uri`` reads it from its config.yaml, ``run`` a URI: a store-relative one
        (``runs/<name>``) joined to ``store``, by default the store of the run being trained; an absolute one
        recorded before that store moved found where the run is now (``common.store.Store.resolve``)."""
        run = Store(self.store or store_of(run_uri, RUNS)).resolve(self.run)
        return self if run == self.run else self.model_copy(update={"run": run})

    def recorded(self, run_uri: str) -> "InitFrom":
        """This warm start as the run ``run_uri``'s config.yaml records it: ``run`` store-relative when it lies in
        the run's own store (``common.store.Store.relative``), and ``store`` left out when it names that store (the
        default); a run of another store stays as given."""
        own = Store(store_of(run_uri, RUNS))
        store = self.store
        if store is not None and inside(store, own.uri) and inside(own.uri, store):
            store = None
        run = own.relative(self.run) if store is None else self.run
        return self if (run, store) == (self.run, self.store) else self.model_copy(update={"run": run, "store": store})

    def check_store(self, run_uri: str) -> None:
        """UserError unless ``run`` lies in ``store``, by default the store of the run being trained (``run_uri``:
        ``<store>/runs/<name>``; a run elsewhere: the folder it is in); a store-relative ``run`` (``runs/<name>``)
        is in it."""
        store = self.store or store_of(run_uri, RUNS)
        if not inside(Store(store).join(self.run) if is_location(self.run) else self.run, store):
            which = "init_from.store" if self.store else f"the store of the run being trained ({run_uri})"
            raise UserError(f"init_from {self.run} lies outside {store}, {which}. A checkpoint's metadata is a "
                            "pickle (loading it runs code), so a warm start reads only runs of that store. Fix: start "
                            "from a run in it, or name the other store, if you trust it, as init_from.store "
                            "(--init-from.store STORE).")


class TrainConfig(_Section):
    """Everything that decides a training run (the resolved copy is saved as ``<run>/config.yaml``)."""

    dataset: str | None = Field(None, description="Dataset folder or URI (written by `dlrmflow preprocess`).")
    arch: ArchConfig = Field(default_factory=ArchConfig, description="The DLRM's architecture.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizers and learning-rate schedule.")
    data: DataConfig = Field(default_factory=DataConfig, description="Batches.")
    sharding: ShardingConfig = Field(default_factory=ShardingConfig, description="Embedding sharding planner: hardware profile and per-table constraints.")
    precision: PrecisionConfig = Field(default_factory=PrecisionConfig, description="Numeric formats.")
    epochs: int = Field(1, ge=1, description="Passes over the training split.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many global steps (None: after `epochs`).")
    eval_every: int | None = Field(None, ge=1, description="Evaluate on eval_split every this many steps (None: at the end of each epoch).")
    eval_split: str | None = Field("val", description="Split validated on during training (early stopping, the "
                                   "best checkpoint). 'holdout': the last data.holdout_fraction of train_split's "
                                   "rows, set aside (what the default 'val' becomes on a dataset without a 'val' "
                                   "split). Never 'test', the split that reports the run. None: no validation (the "
                                   "last checkpoint, none chosen).")
    best_metric: Literal["auc", "logloss"] = Field("auc", description="Validation metric that picks the best checkpoint.")
    early_stopping_patience: int | None = Field(None, ge=1, description="Stop after this many evaluations without improvement (None: never).")
    checkpoint_every: int | None = Field(None, ge=1, description="Save a checkpoint every this many steps (always at the end and at each new best).")
    keep_checkpoints: int = Field(3, ge=1, description="Keep this many most recent checkpoints (the best one is always kept).")
    log_every: int = Field(10, ge=1, description="Write a metrics.jsonl line every this many steps.")
    seed: int = Field(0, description="Seed of the initial weights and of the data order.")
    pg_timeout_s: float = Field(600.0, gt=0, description="Process-group timeout: a failed rank ends the job after at most this long.")
    calibrate: bool = Field(True, description="Fit a calibration (Platt scaling of the logit) on each validation's "
                            "predictions and apply it wherever the checkpoint predicts: evaluation, scoring, the "
                            "serving bundle (training.calibration). False: the raw logits.")
    init_from: InitFrom | None = Field(None, description="Warm start: initialise the model (before the first step of a "
                                       "fresh run, never on resume) from a checkpoint of an earlier run, embedding rows "
                                       "matched by raw value through both vocabularies: RUN, RUN@best|latest|STEP, "
                                       "{run, checkpoint}, or a named model's folder STORE/models/NAME (its champion). "
                                       "None: random initialisation.")

    @model_validator(mode="before")
    @classmethod
    def _old_arch_key(cls, data: Any) -> Any:
        """Runs saved before the rename hold the ``arch`` section as ``model``: accept that key too."""
        if isinstance(data, dict) and "model" in data and "arch" not in data:
            data = {("arch" if k == "model" else k): v for k, v in data.items()}
        return data

    def check_splits(self, splits: list[str], where: str | None = None) -> str | None:
        """The split to validate on among ``splits`` (the dataset's, or those a split rule will make):
        ``eval_split`` (None: no validation), or ``HOLDOUT`` (the last rows of ``train_split``) when the default
        ``val`` is missing or ``holdout`` is asked for. Raises UserError naming the splits (and ``where``, default
        the dataset) when ``train_split`` or ``eval_split`` is not one, and for ``eval_split: test``: the test split
        reports the run, so a checkpoint chosen on it would make its metrics no longer held out."""
        where = where or self.dataset
        train = self.data.train_split
        if train not in splits:
            raise split_error(where, train, splits, "set data.train_split to one of those split names.")
        if self.eval_split == TEST_SPLIT:
            raise UserError(f"eval_split '{TEST_SPLIT}' would choose the checkpoint (best, early stopping) on the split "
                            "that reports the run, whose metrics would then not be held out. Fix: leave eval_split at "
                            f"'val' (a dataset without 'val' validates on the last {self.data.holdout_fraction:.0%} "
                            f"of '{train}', data.holdout_fraction), or set it to '{HOLDOUT}', another split, or null "
                            "to train without validation.")
        if self.eval_split is None or self.eval_split == HOLDOUT:
            return self.eval_split
        if self.eval_split in splits:
            return self.eval_split
        if self.eval_split == type(self).model_fields["eval_split"].default:
            return HOLDOUT
        raise split_error(where, self.eval_split, splits, f"set eval_split to one of those split names, to "
                          f"'{HOLDOUT}' (the last rows of '{train}') or to null to train without validation.")

    def resolved(self, spec: Any = None) -> "TrainConfig":
        """This config as a run keeps it (its ``config.yaml``): for the holdout (``check_splits``), eval_split
        ``holdout`` and ``data.holdout_rows`` the rows set aside, from the training split's row count. ``spec``: the
        dataset's FeatureSpec (default: loaded). UserError as ``check_splits``, and when the holdout would leave no
        row to train on. The same config again gives itself."""
        spec = spec if spec is not None else load_spec(self.dataset)
        if self.check_splits(spec.splits) != HOLDOUT:
            return self
        rows = split_rows(spec, self.dataset, self.data.train_split)
        held = self.data.holdout_size(rows)
        if held >= rows:
            raise UserError(f"{self.dataset}: split '{self.data.train_split}' has {rows} rows, so a holdout of {held} "
                            "leaves none to train on. Fix: lower data.holdout_fraction (or data.holdout_rows), or "
                            "give the dataset a 'val' split.")
        return self.model_copy(update={"eval_split": HOLDOUT,
                                       "data": self.data.model_copy(update={"holdout_rows": held})})

    def validation_text(self) -> str:
        """What the run validates on, for the logs and the summaries (of a ``resolved`` config)."""
        if self.eval_split is None:
            return "none (eval_split null): the last checkpoint is kept, none is chosen"
        if self.eval_split == HOLDOUT:
            held = f"{self.data.holdout_rows} rows" if self.data.holdout_rows else f"{self.data.holdout_fraction:.0%}"
            return (f"holdout: the last {held} of split '{self.data.train_split}' (data.holdout_fraction "
                    f"{self.data.holdout_fraction:g}), set aside: not trained on")
        return f"split '{self.eval_split}'"

    # ---- I/O -------------------------------------------------------------------------
    @classmethod
    def from_yaml(cls, path: str, **storage_options: Any) -> "TrainConfig":
        """Load and validate a YAML config (local path or fsspec URI)."""
        try:
            data = load_yaml(read_text(path, **storage_options), path) or {}
        except FileNotFoundError:
            raise UserError(f"{path}: training config does not exist. Fix: pass an existing YAML or --preset NAME "
                              f"({', '.join(preset_names())}).") from None
        except yaml.YAMLError as e:
            raise UserError(f"{path}: is not valid YAML: {e}") from None
        return cls.from_dict(data, source=path)

    @classmethod
    def preset(cls, name: str) -> "TrainConfig":
        """A built-in preset (``training/presets/<name>.yaml``)."""
        path = PRESET_DIR / f"{name}.yaml"
        if not path.exists():
            raise UserError(f"unknown preset '{name}'. Fix: use one of {', '.join(preset_names())}.")
        return cls.from_yaml(str(path))

    def to_yaml(self) -> str:
        """YAML text of the full, resolved config."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def with_overrides(self, overrides: dict[str, Any]) -> "TrainConfig":
        """A copy with dotted-key overrides applied (``{"optimizer.dense.lr": 0.1}``), re-validated."""
        return TrainConfig.from_dict(apply_overrides(self.model_dump(mode="json"), overrides), source="overrides")


class EvaluateConfig(_Section):
    """What to evaluate: one checkpoint of a run on a split of its dataset (or of another one)."""

    split: str = Field(TEST_SPLIT, description="Held-out split to evaluate on.")
    checkpoint: str = Field("best", description="`best` (by validation; the latest if the run never validated), "
                            "`latest` or a step number.")
    dataset: str | None = Field(None, description="Evaluate on this dataset instead of the run's own (same features).")
    slice_by: str | None = Field(None, description="Also report AUC, NE, log loss and calibration per value of this "
                                 "categorical feature (one value a row): its slice_top most frequent values on the "
                                 "split, and 'other' (metrics.json's 'slices'; the pipeline compares the champion "
                                 "per slice too).")
    slice_top: int = Field(10, ge=1, le=1000, description="With slice_by: how many of the most frequent values get "
                           "a slice of their own.")
    gauc_by: str | None = Field(None, description="Also report the grouped AUC (GAUC, TorchRec's: the rows-weighted "
                                "mean of each group's AUC over the groups holding both classes) by this categorical "
                                "feature (metrics.json's 'gauc').")

    def check_split(self, splits: list[str], where: str, field: str = "split") -> None:
        """Raise UserError naming ``splits`` (the dataset's, or those a split rule will make) when ``split``
        is not one; ``where``: the dataset or rule, ``field``: the field's name where the user set it."""
        if self.split not in splits:
            raise split_error(where, self.split, splits, f"set {field} to one of those split names.")

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _best_latest_or_step(cls, v: Any) -> str:
        return checkpoint_name(v)


def split_rows(spec: Any, dataset: str, split: str) -> int:
    """Rows of ``split`` of a dataset: its metadata's count, else the size of its label file (one byte a row;
    NVIDIA's tools record no counts)."""
    rows = (spec.metadata.get("rows") or {}).get(split)
    if isinstance(rows, int):
        return rows
    uri = file_uri(dataset, spec.file_of(split, spec.label_feature)[0])
    fs, path = filesystem(uri)
    try:
        return int(fs.size(path))
    except FileNotFoundError:
        raise UserError(f"{uri}: the label file of split '{split}' is missing. Fix: re-run preprocessing, or "
                        "correct the path in the feature spec.") from None


def checkpoint_name(v: Any) -> str:
    """``best``, ``latest`` or a step number (as text), else ValueError."""
    v = str(v).strip()
    if v not in ("best", "latest") and not v.isdigit():
        raise ValueError(f"{v!r} is not 'best', 'latest' or a step number (e.g. best)")
    return v


def preset_names() -> list[str]:
    """Names of the built-in presets."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


class PlanConfig(BaseModel):
    """What to plan for: the tables (a dataset's or given sizes) and the ranks."""

    model_config = ConfigDict(extra="forbid")

    dataset: str | None = Field(None, description="Dataset folder or URI: its feature_spec.yaml gives the tables.")
    cardinalities: list[int] | None = Field(None, description="Table sizes, for a dataset that does not exist yet.")
    world_size: int = Field(ge=1, description="Total number of ranks (GPUs).")
    local_world_size: int | None = Field(None, ge=1, description="Ranks per node (default: the profile's).")
    batch_size: int | None = Field(None, ge=1, description="Per-rank batch size the planner assumes (default: the "
                                   "config's global data.batch_size / world size).")
    out: str | None = Field(None, description="Also write the plan text to this path or URI.")


class FlowTrainConfig(TrainConfig):
    """TrainConfig whose dataset the flow fills in (the train flow's `dataset`, the pipeline's preprocessed one)."""

    dataset: SkipJsonSchema[str | None] = filled_in(None)

    def on(self, dataset: str) -> TrainConfig:
        """The TrainConfig of these settings on ``dataset``."""
        return TrainConfig.model_validate({**self.model_dump(), "dataset": dataset})


def default_train() -> FlowTrainConfig:
    """The default preset's training settings."""
    return FlowTrainConfig.model_validate(TrainConfig.preset("default").model_dump())


def config_hash(train: TrainConfig, store: Store | None = None) -> str:
    """A short hash of a training config (dataset included): the suffix of the default run names (``hashed_run``).
    ``store``: the store the run is in; a dataset that lies in it is hashed by its store-relative location
    (``datasets/<name>``, ``Store.relative``), so the store moved to another path or bucket prefix keeps its run
    names; a dataset outside it, or no store given, by its URI (the names of the runs made before: ``Store.named``)."""
    data = train.model_dump(mode="json")
    if store is not None and data.get("dataset"):
        data["dataset"] = store.relative(data["dataset"])
    data["model"] = data.pop("arch")  # hashed by its name before the rename: runs keep their names and resume
    data["data"].pop("cache_max_gib")  # a node's cache bound, added later: no run changes its name for it
    if data["data"].get("holdout_rows") is None and data["data"].get("holdout_fraction") == 0.1:
        data["data"].pop("holdout_rows")   # added later, used only without a val split (then resolved: set): names
        data["data"].pop("holdout_fraction")   # of runs that validate on a split stay
    if data["sharding"]["profile"] == "auto":   # the default since 'cpu' was: it decides the plan, not the model
        data["sharding"]["profile"] = "cpu"     # (DCP reshards a checkpoint between plans): runs keep their names
    for optimizer in data["optimizer"]["embedding"], data["optimizer"]["dense"]:
        if not optimizer["weight_decay"]:
            optimizer.pop("weight_decay")   # added later (0: none): unset, names stay
    if data.get("calibrate") is True:
        data.pop("calibrate")   # added later (True: calibrate): set to its default, names stay
    if data.get("init_from") and data["init_from"].get("store") is None:
        data["init_from"].pop("store")   # added later (the store a warm start may read): unset, names stay
    text = json.dumps(data, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=5).hexdigest()


def hashed_run(store: Store, prefix: str, train: TrainConfig) -> str:
    """``<prefix>-<config hash>``: the default name of a run of ``train`` in ``store`` (a pipeline run's, a tune's
    trial's), the same wherever the store is (``config_hash`` with the store); a run made before, named by the hash
    of its dataset's URI, keeps its name while its folder exists and the new name's does not (``Store.named``)."""
    return store.named(RUNS, f"{prefix}-{config_hash(train, store)}", f"{prefix}-{config_hash(train)}")
