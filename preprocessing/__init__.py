"""Preprocessing: raw click logs (Criteo TSV, CSV, Parquet) -> NVIDIA split-binary dataset.

``run(PreprocessConfig(...))`` returns the dataset URI; ``Preprocessing(config).run(executor)`` runs the same
stages with another executor (the Prefect flow's tasks); ``inspect.summary(uri)`` describes a dataset; ``file_parts(out)`` lists the input files whose parse and counts
are stored for reuse and ``prune_file_parts(out, remove)`` deletes those no longer needed.

The names are imported on first use, so ``import preprocessing.config`` (the CLI's ``--help``) does not
pay for polars and numpy.
"""

from __future__ import annotations

__all__ = ["PreprocessConfig", "Preprocessing", "file_parts", "prune_file_parts", "run"]


def __getattr__(name: str):
    if name == "PreprocessConfig":
        from .config import PreprocessConfig
        return PreprocessConfig
    if name in ("Preprocessing", "run"):
        from . import pipeline
        return getattr(pipeline, name)
    if name in ("file_parts", "prune_file_parts"):
        from . import work
        return getattr(work, name)
    raise AttributeError(f"module 'preprocessing' has no attribute {name!r}")
