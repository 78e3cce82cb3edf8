"""Built-in input specs. ``criteo``: the 40-column headerless Criteo TSV (plain or .gz)."""

from __future__ import annotations

from .errors import SpecError
from .model import Chunk, Feature, FeatureSpec

CRITEO_LABEL = "label"
CRITEO_NUMERICAL = [f"I{i}" for i in range(1, 14)]
CRITEO_CATEGORICAL = [f"C{i}" for i in range(1, 27)]
CRITEO_COLUMNS = [CRITEO_LABEL, *CRITEO_NUMERICAL, *CRITEO_CATEGORICAL]


def criteo_spec(files: list[str] | None = None, split: str = "train") -> FeatureSpec:
    """Input spec of the Criteo click logs: label, I1..I13 (log1p), C1..C26 (8-digit hex ids)."""
    features = {CRITEO_LABEL: Feature(dtype="int")}
    features.update({n: Feature(dtype="int", transform="log1p") for n in CRITEO_NUMERICAL})
    features.update({n: Feature(dtype="hex") for n in CRITEO_CATEGORICAL})
    source = {split: [Chunk(type="criteo", features=list(CRITEO_COLUMNS), files=list(files))]} if files else {}
    return FeatureSpec(
        feature_spec=features,
        source_spec=source,
        channel_spec={"label": [CRITEO_LABEL], "numerical": list(CRITEO_NUMERICAL),
                      "categorical": list(CRITEO_CATEGORICAL)},
        metadata={"name": "criteo"},
    ).validate_spec()


PRESETS = {"criteo": criteo_spec}


def preset(name: str) -> FeatureSpec:
    """A built-in input spec by name."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise SpecError(f"unknown spec preset '{name}'.",
                        fix=f"use one of {', '.join(PRESETS)} or the path of your own spec YAML.") from None
