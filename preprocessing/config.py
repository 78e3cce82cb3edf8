"""The preprocessing configuration: one pydantic model for the CLI, the Python API and the flows."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from common.config import store_field

DEFAULT_SPLIT = "ordered:train=0.8,val=0.1,test=0.1"


class PreprocessConfig(BaseModel):
    """What to preprocess and how. JSON-serialisable; never holds secrets."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[str] = Field(description="Input files, folders or globs (local, file://, s3://, memory://). "
                              "`split=PATH` assigns the files to a split directly (the `files` split rule).")
    out: str = Field(description="Artifact store root; the dataset goes to `out/datasets/NAME-FINGERPRINT/`.")
    spec: str = Field(default="criteo", description="`criteo` (built-in preset), the path/URI of an input spec YAML, "
                      "`store:NAME` (the store's specs/NAME.yaml, e.g. from the spec-draft flow) or a spec's YAML "
                      "pasted as the value (kept in the store's specs/_pasted/). Both are checked before any work.")
    split: str | None = Field(default=None, description="Split rule: `ordered:train=0.8,val=0.1,test=0.1`, "
                              "`random:train=0.9,test=0.1,seed=0`, `column:COL` (the column's value names the split) "
                              "or `column:COL:train<V1,val<V2,test` (cut points). Default: the spec's "
                              f"metadata.preprocessing.split, else `{DEFAULT_SPLIT}`; `split=PATH` inputs use `files`.")
    frequency_threshold: int | None = Field(default=None, ge=0, description="Values seen fewer than T times in the "
                                            "counted split(s) map to index 0 (per-feature spec options win). Default 0.")
    count_on: Literal["train", "all"] = Field(default="train", description="Count values over the training split "
                                              "only (no test leakage) or over all splits.")
    numerical_dtype: Literal["float16", "float32"] = Field(default="float16", description="dtype of numerical.bin.")
    on_bad_row: Literal["error", "skip"] = Field(default="error", description="A malformed row stops the run with "
                                                 "its file, line and column (error) or is skipped and counted, "
                                                 "once however many of its fields are bad (skip).")
    max_bad_fraction: float = Field(default=0.001, ge=0, le=1, description="With on_bad_row=skip: fail when more "
                                    "than this fraction of the rows of any input file (so of any day), or of all "
                                    "rows, is bad (a row counts once, however many of its fields are bad).")
    workers: int | None = Field(default=None, ge=1, description="Worker threads: input files processed at once, "
                                "and blocks of one file processed at once. Default: the machine's cores (where "
                                "it runs). Does not change the output.")
    work_dir: str | None = Field(default=None, description="Local scratch folder for resumable intermediate parts "
                                 "(each input file's parse and counts under `_files/`, kept for the next dataset "
                                 "that uses the file). Default: `out/_work` and `out/_files` for a local store, "
                                 "the system temp folder otherwise.")
    progress: bool = Field(default=True, description="Show a progress bar on stderr (only when it is a terminal).")
    fast_parse: bool = Field(default=True, description="Parse regular Criteo TSV rows, one-hot or with lists of "
                             "hex/int values, with the C extensions (the same bytes as the general polars path, "
                             "several times faster).")

    def threads(self) -> int:
        """The number of worker threads: ``workers``, or the cores of this machine where it is None."""
        return self.workers or os.cpu_count() or 1

    def output_settings(self) -> dict:
        """The settings that determine the output bytes (part of the fingerprint)."""
        return self.model_dump(include={"frequency_threshold", "count_on", "numerical_dtype", "on_bad_row"})


class FlowPreprocessConfig(PreprocessConfig):
    """PreprocessConfig plus where the preprocess flow runs its per-file tasks (parse, count, encode): the preprocess
    command's, the flow's and the pipeline's preprocessing."""

    model_config = ConfigDict(from_attributes=True)   # a plain PreprocessConfig is one too (threads)

    task_runner: Literal["threads", "dask"] = Field("threads", description="Run the per-file tasks in threads "
                                                    "of the flow's process, or on a Dask cluster (prefect-dask); "
                                                    "with dask and a remote store the workers share the "
                                                    "intermediate parts through the store.")
    dask_address: str | None = Field(None, description="The Dask scheduler's address (tcp://HOST:8786) for "
                                     "task_runner=dask. Default: a temporary local Dask cluster.")


class SpecDraftConfig(BaseModel):
    """The spec-draft flow's form: draft an input spec from a sample of the data and keep it in the store as
    ``specs/NAME.yaml`` (``preprocessing.specs``), for ``spec: store:NAME`` in the preprocess and pipeline forms."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[str] = Field(description="The data: files, folders or globs (CSV with a header row, or Parquet; "
                              "local or s3).")
    store: str = store_field()
    name: str | None = Field(default=None, description="The spec's name in the store (specs/NAME.yaml) and the "
                             "dataset's (metadata.name). Default: the first file's name.")
    label: str | None = Field(default=None, description="The label column, or a rule: `rating>=4`, `income==>50K`. "
                              "Default: a 0/1 column named label, click, target...")
    rows: int = Field(default=100_000, ge=1, description="Rows to sample.")
    overwrite: bool = Field(default=False, description="Replace a different spec already kept under NAME (it stays "
                            "as its version, specs/NAME/vN.yaml). Without it such a draft fails.")
