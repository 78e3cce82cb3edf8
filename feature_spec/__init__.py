"""The feature spec: the contract between preprocessing and training (NVIDIA's Dataset Feature
Specification). Imports neither ``preprocessing`` nor ``training``."""

from .errors import SpecError
from .io import SPEC_FILE, file_uri, from_dict, join_uri, load, parent_uri, save, spec_uri, to_yaml
from .model import (CATEGORICAL_DTYPES, CHANNELS, INPUT_CHUNK_TYPES, NUMERICAL_DTYPES, OUTPUT_CHUNK_TYPE,
                    Chunk, Feature, FeatureSpec, categorical_dtype, categorical_file_name, check_relative_path,
                    offsets_file_name, path_segment)
from .presets import CRITEO_CATEGORICAL, CRITEO_COLUMNS, CRITEO_NUMERICAL, criteo_spec, preset

__all__ = [
    "SpecError", "SPEC_FILE", "file_uri", "from_dict", "join_uri", "load", "parent_uri", "save", "spec_uri",
    "to_yaml", "CATEGORICAL_DTYPES", "CHANNELS", "INPUT_CHUNK_TYPES", "NUMERICAL_DTYPES", "OUTPUT_CHUNK_TYPE",
    "Chunk", "Feature", "FeatureSpec", "categorical_dtype", "categorical_file_name", "check_relative_path",
    "offsets_file_name", "path_segment",
    "CRITEO_CATEGORICAL", "CRITEO_COLUMNS", "CRITEO_NUMERICAL", "criteo_spec", "preset",
]
