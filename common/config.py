"""What every config model shares: dotted overrides and one message for an invalid value."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from common.errors import UserError
from common.store import default_store


# libyaml's parser and emitter where PyYAML has them (the same safe constructors and representers, the same text:
# checked on 235 specs): the pure-Python ones took ~0.1 CPU-second to read a Criteo dataset's 20 KB feature spec,
# which each rank and command reads several times, and ~0.03 to write it
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, faster: every YAML file of the project (specs, configs, presets) is read by it."""
    return yaml.load(text, Loader=_YAML_LOADER)


def dump_yaml(data: Any, **options: Any) -> str:
    """``yaml.safe_dump(data, **options)``, faster (the same text)."""
    return yaml.dump(data, Dumper=_YAML_DUMPER, **options)


def apply_overrides(base: dict[str, Any], overrides: dict[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """``base`` (a model dump) with each dotted ``overrides`` key (``optimizer.dense.lr``) set in it.

    ``strict``: a key that ``base`` does not have is a UserError (a typo), else it is added. An optional section
    left unset (None, e.g. ``init_from``) is created by the first key set in it."""
    data = dict(base)
    for key, value in overrides.items():
        node = data
        *parents, last = key.split(".")
        for part in parents:
            child = node.get(part)
            if child is None and (part in node or not strict):
                child = {}
            if not isinstance(child, dict):
                raise UserError(f"override '{key}': '{part}' is not a config section.")
            node[part] = child = dict(child)
            node = child
        if strict and last not in node:
            raise UserError(f"override '{key}': unknown field '{last}'. Fix: see the command's --help.")
        node[last] = value
    return data


def config_error(e: ValidationError, source: str) -> UserError:
    """One message for an invalid config, the same from a YAML file, the command line or a flow parameter."""
    err = e.errors()[0]
    field = ".".join(str(x) for x in err["loc"]) or "(top level)"
    got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
    return UserError(f"{source}: {field}: {err['msg']}{got}.")


def validate(model: type[BaseModel], data: Any, source: str):
    """``model`` validated from ``data``; errors as ``config_error``."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise config_error(e, source) from None


def filled_in(default: Any) -> Any:
    """A field the flow fills in itself: no form field (SkipJsonSchema), no option (flows/options.py), not dumped."""
    return Field(default, exclude=True)


def store_field() -> Any:
    """The ``store`` field of every config that names a store: its default ($DLRMFLOW_STORE, else ./artifacts) and
    its description."""
    return Field(default_factory=default_store, description="Artifact store root: a local folder or "
                 "s3://bucket/prefix (default $DLRMFLOW_STORE, else ./artifacts).")
