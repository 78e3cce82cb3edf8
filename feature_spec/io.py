"""Load and save feature specs as YAML (safe loading only), locally or through fsspec."""

from __future__ import annotations

import posixpath
from typing import Any

import yaml
from pydantic import ValidationError

from common.config import dump_yaml, load_yaml
from common.atomic import write_uri
from common.errors import quoted
from common.store import read_text

from .errors import SpecError
from .model import FeatureSpec

SPEC_FILE = "feature_spec.yaml"


def spec_uri(uri: str) -> str:
    """The YAML's URI for a dataset folder or a YAML path."""
    return uri if uri.endswith((".yaml", ".yml")) else join_uri(uri, SPEC_FILE)


def join_uri(base: str, *parts: str) -> str:
    """Join path parts onto a local path or URI (always with '/')."""
    return posixpath.join(base.rstrip("/") if base not in ("", "/") else base, *parts)


def parent_uri(uri: str) -> str:
    """Folder of a local path or URI ('s3://b/p/x.yaml' -> 's3://b/p')."""
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        head = posixpath.dirname(rest)
        return f"{scheme}://{head}"
    return posixpath.dirname(uri) or "."


def from_dict(data: Any, *, source: str | None = None) -> FeatureSpec:
    """Build and validate a spec from parsed YAML; errors name section, feature and fix."""
    if not isinstance(data, dict):
        raise SpecError("is not a mapping with the sections feature_spec, source_spec, channel_spec, metadata.",
                        fix="see examples/ for the shape of a feature spec.", path=source)
    for section in ("feature_spec", "channel_spec"):
        if section not in data:
            raise SpecError("section is missing.", section=section, path=source,
                            fix="a feature spec needs feature_spec (name -> properties) and channel_spec "
                                "(label/numerical/categorical -> names).")
    if data.get("source_spec") is None:
        data = {**data, "source_spec": {}}
    if data.get("metadata") is None:
        data = {**data, "metadata": {}}
    try:
        spec = FeatureSpec.model_validate(data)
    except ValidationError as e:
        raise _from_validation_error(e, source) from None
    try:
        return spec.validate_spec()
    except SpecError as e:
        raise e.with_path(source) if source else e from None


def _from_validation_error(e: ValidationError, source: str | None) -> SpecError:
    err = e.errors()[0]
    loc = [str(x) for x in err["loc"]]
    section = loc[0] if loc else None
    feature = loc[1] if len(loc) > 1 else None
    key = ".".join(loc[2:]) if len(loc) > 2 else None
    problem = f"{key + ': ' if key else ''}{err['msg']} (got {quoted(err.get('input'))})."
    if section not in ("feature_spec", "source_spec", "channel_spec", "metadata"):
        return SpecError(f"unknown section '{section}'.", path=source,
                         fix="a feature spec has only feature_spec, source_spec, channel_spec and metadata.")
    return SpecError(problem, section=section, feature=feature, path=source,
                     fix="correct the value to the type named above (see examples/ for a complete spec).")


def load(uri: str, **storage_options: Any) -> FeatureSpec:
    """Load a spec from a YAML path/URI or a dataset folder (``feature_spec.yaml`` inside it)."""
    path = spec_uri(uri)
    try:
        text = read_text(path, **storage_options)
    except FileNotFoundError:
        raise SpecError(f"feature spec '{path}' does not exist.",
                        fix="pass a dataset folder written by `dlrmflow preprocess`, or the path of a spec YAML.") from None
    try:
        data = load_yaml(text, path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"is not valid YAML{where}: {getattr(e, 'problem', e)}.", path=path,
                        fix="correct the YAML syntax there.") from None
    return from_dict(data, source=path)


def to_yaml(spec: FeatureSpec) -> str:
    """YAML text of a spec (defaults and empty options left out, section order kept)."""
    data = spec.model_dump(mode="json", exclude_none=True)
    return dump_yaml(data, sort_keys=False, default_flow_style=None, width=120)


def save(spec: FeatureSpec, uri: str, **storage_options: Any) -> str:
    """Write a spec atomically (temporary name, then rename); returns the YAML's URI."""
    path = spec_uri(uri)
    write_uri(path, to_yaml(spec), **storage_options)
    return path


def file_uri(spec_location: str, relative: str) -> str:
    """Absolute URI of a file named in a spec's source_spec, given the spec's URI or folder."""
    base = parent_uri(spec_uri(spec_location))
    return join_uri(base, relative)
