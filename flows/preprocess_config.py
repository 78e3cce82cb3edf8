"""``FlowPreprocessConfig``: the preprocess command's and flow's config, apart from ``flows.config`` (the pipeline's,
which imports training and nightly) so that ``dlrmflow preprocess`` pays only for the preprocessing's imports."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from preprocessing.config import PreprocessConfig


class FlowPreprocessConfig(PreprocessConfig):
    """PreprocessConfig plus where the preprocess flow runs its per-file tasks (parse, count, encode)."""

    model_config = ConfigDict(from_attributes=True)   # a plain PreprocessConfig is one too (threads)

    task_runner: Literal["threads", "dask"] = Field("threads", description="Run the per-file tasks in threads "
                                                    "of the flow's process, or on a Dask cluster (prefect-dask); "
                                                    "with dask and a remote store the workers share the "
                                                    "intermediate parts through the store.")
    dask_address: str | None = Field(None, description="The Dask scheduler's address (tcp://HOST:8786) for "
                                     "task_runner=dask. Default: a temporary local Dask cluster.")
