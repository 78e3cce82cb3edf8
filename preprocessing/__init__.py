"""Preprocessing: raw click logs (Criteo TSV, CSV, Parquet) -> NVIDIA split-binary dataset.

``run(PreprocessConfig(...))`` returns the dataset URI; ``Preprocessing`` runs the same job stage by
stage; ``inspect.summary(uri)`` describes one.
"""

from .config import PreprocessConfig
from .pipeline import Preprocessing, run

__all__ = ["PreprocessConfig", "Preprocessing", "run"]
