"""Resolve a PreprocessConfig: the input spec, the input files, the split rule, the fingerprint."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

import feature_spec as fspec
from common.errors import UserError
from feature_spec import FeatureSpec

from . import splits
from .config import DEFAULT_SPLIT, PreprocessConfig
from .inputs import InputFile, expand, file_type
from .readers import Format
from .transforms import Transforms

FORMAT_VERSION = 1


@dataclass
class Resolved:
    """A config with everything looked up: what the pipeline runs."""

    config: PreprocessConfig
    spec: FeatureSpec
    inputs: list[InputFile]
    rule: splits.SplitRule
    threshold: int
    plan: Transforms
    fmt: Format
    fingerprint: str
    dataset: str
    work: Path

    def settings(self) -> dict:
        """The resolved preprocessing settings recorded in the dataset's metadata."""
        return {"spec": self.config.spec, "inputs": [f.uri for f in self.inputs], "split": self.rule.text(),
                **self.config.output_settings(), "frequency_threshold": self.threshold,
                "max_bad_fraction": self.config.max_bad_fraction}


def resolve(config: PreprocessConfig) -> Resolved:
    """Look up the spec and inputs, derive the split rule and fingerprint, name the dataset folder."""
    spec = fspec.preset(config.spec) if "/" not in config.spec and not config.spec.endswith((".yaml", ".yml")) \
        else fspec.load(config.spec)
    defaults = spec.metadata.get("preprocessing") or {}
    inputs = expand(config.inputs or _spec_files(config.spec, spec))
    rule = _rule(config, defaults, inputs)
    threshold = config.frequency_threshold if config.frequency_threshold is not None \
        else int(defaults.get("frequency_threshold", 0))
    numeric_cuts = bool(rule.cuts) and all(_is_number(c) for c in rule.cuts)
    plan = Transforms.from_spec(spec, threshold, rule.column, numeric_cuts)
    fmt = _format(config.spec, spec, inputs)
    resolved_config = {**config.output_settings(), "frequency_threshold": threshold, "split": rule.text(),
                       "format_version": FORMAT_VERSION}
    identity = {"inputs": [f.model_dump() for f in inputs], "config": resolved_config,
                "spec": spec.model_dump(mode="json", exclude={"source_spec"})}
    fingerprint = hashlib.blake2b(json.dumps(identity, sort_keys=True, default=str).encode(), digest_size=16).hexdigest()
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(spec.metadata.get("name") or "dataset"))
    dataset = fspec.join_uri(config.out, "datasets", f"{name}-{fingerprint[:12]}")
    return Resolved(config, spec, inputs, rule, threshold, plan, fmt, fingerprint, dataset,
                    _work_dir(config, f"{name}-{fingerprint[:12]}"))


def _spec_files(spec_uri: str, spec: FeatureSpec) -> list[str]:
    items = [f"{split}={fspec.resolve(spec_uri, path)}" for split, chunks in spec.source_spec.items()
             for chunk in chunks for path in chunk.files]
    if not items:
        raise UserError("no input files. Fix: pass --input PATH (files, folders or globs), or list files "
                        "under source_spec in the spec.")
    return items


def _rule(config: PreprocessConfig, defaults: dict, inputs: list[InputFile]) -> splits.SplitRule:
    mapped = [f for f in inputs if f.split]
    if mapped:
        if config.split:
            raise UserError(f"--split {config.split} cannot be combined with inputs mapped to splits "
                            f"('{mapped[0].split}=...'). Fix: use one of the two.")
        for f in inputs:
            f.split = f.split or "train"
        return splits.SplitRule(kind="files", splits=splits.order_names({f.split for f in inputs}))
    return splits.parse(config.split or defaults.get("split") or DEFAULT_SPLIT)


def _format(spec_name: str, spec: FeatureSpec, inputs: list[InputFile]) -> Format:
    chunks = [c for cs in spec.source_spec.values() for c in cs]
    if spec_name == "criteo":
        return Format("criteo", columns=fspec.CRITEO_COLUMNS)
    kind = chunks[0].type if chunks else file_type(inputs[0].uri)
    if kind == "criteo":
        return Format("criteo", columns=fspec.CRITEO_COLUMNS)
    header = bool((chunks[0].model_extra or {}).get("header", kind == "csv")) if chunks else kind == "csv"
    columns = list(chunks[0].features) if chunks and not header else list(spec.feature_spec)
    return Format(kind, columns=columns, header=header)


def _work_dir(config: PreprocessConfig, key: str) -> Path:
    if config.work_dir:
        return Path(config.work_dir) / key
    fs, path = fsspec.core.url_to_fs(config.out)
    if isinstance(fs, LocalFileSystem):
        return Path(path) / "_work" / key
    return Path(tempfile.gettempdir()) / "dlrmflow-work" / key


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def env_flag(name: str) -> bool:
    """True when an environment variable is set to something other than '', '0' or 'false'."""
    return os.environ.get(name, "").lower() not in ("", "0", "false")
