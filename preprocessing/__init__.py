"""Preprocessing: raw click logs (Criteo TSV, CSV, Parquet) -> NVIDIA split-binary dataset.

``run(PreprocessConfig(...))`` returns the dataset URI; ``inspect.summary(uri)`` describes one.
"""

from .config import PreprocessConfig
from .pipeline import run

__all__ = ["PreprocessConfig", "run"]
