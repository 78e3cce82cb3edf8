"""Preprocessing: raw click logs (Criteo TSV, CSV, Parquet) -> NVIDIA split-binary dataset.

``run(PreprocessConfig(...))`` returns the dataset URI; ``Preprocessing(config).run(executor)`` runs the same
stages with another executor (the Prefect flow's tasks); ``inspect.summary(uri)`` describes a dataset;
``file_parts(out)`` lists the input files whose parse and counts are stored for reuse and
``prune_file_parts(out, remove)`` deletes those no longer needed.

This is the package's face: each name is imported on first use from the module that holds it (``_FACE``), so
``import preprocessing.config`` (the CLI's ``--help``) does not pay for polars and numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.face import lazy

if TYPE_CHECKING:   # what type checkers and IDEs see; at run time each name comes from _FACE on first use
    from .config import PreprocessConfig
    from .pipeline import Preprocessing, run
    from .work import file_parts, prune_file_parts

_FACE = {   # name -> the module of this package that holds it
    "PreprocessConfig": "config", "Preprocessing": "pipeline", "run": "pipeline",
    "file_parts": "work", "prune_file_parts": "work",
}
__all__, __getattr__, __dir__ = lazy(__name__, _FACE)
