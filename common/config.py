"""What every config model shares: dotted overrides and one message for an invalid value."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from common.errors import UserError, quoted
from common.store import default_store


# libyaml's parser and emitter where PyYAML has them (the same safe constructors and representers, the same text:
# checked on 235 specs): the pure-Python ones took ~0.1 CPU-second to read a Criteo dataset's 20 KB feature spec,
# which each rank and command reads several times, and ~0.03 to write it
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


ALIAS_VALUES = 100_000   # the values a YAML text's aliases may repeat in all (NVIDIA's specs repeat a list or two)


class _Aliased(Exception):
    """A YAML document whose aliases repeat too much (``args``: how many values they repeat; None: an alias inside
    its own anchor), found by ``_BoundAliases``; ``load_yaml`` says where."""


def _children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


class _BoundAliases:
    """A loader's mixin (libyaml's or the pure one) refusing, before it constructs anything, a document whose
    aliases repeat more than ``ALIAS_VALUES`` values, or an alias inside its own anchor.

    An alias shares its anchor's node, so ~400 bytes of nested aliases stand for 10^9 values, which whoever walks
    the data (pydantic, a repr, a dump) expands: minutes and gigabytes. Each distinct node's expanded size is
    counted once (post-order over the shared nodes): milliseconds for a 20 KB spec or for the bomb."""

    def construct_document(self, node):
        size: dict[int, int] = {}
        entered: set[int] = set()   # the nodes on the walk's current path: met again there, an alias to itself
        todo = [(node, False)]
        while todo:
            each, done = todo.pop()
            key = id(each)
            if done:
                size[key] = 1 + sum(size[id(child)] for child in _children(each))
                entered.discard(key)
            elif key not in size:
                if key in entered:
                    raise _Aliased(None)
                entered.add(key)
                todo.append((each, True))
                todo += [(child, False) for child in _children(each) if id(child) not in size]
        if size[id(node)] - len(size) > ALIAS_VALUES:
            raise _Aliased(size[id(node)] - len(size))
        return super().construct_document(node)


class _Loader(_BoundAliases, _YAML_LOADER):  # type: ignore[misc, valid-type]
    """The safe loader, its aliases bounded."""


def load_yaml(text: str, source: str = "YAML text") -> Any:
    """``yaml.safe_load(text)``, faster: every YAML file of the project (specs, configs, presets) is read by it.

    Aliases (``*name``) that repeat more than ``ALIAS_VALUES`` values in all, or an alias inside its own anchor,
    are a UserError naming ``source`` (the file) and the first alias."""
    if "*" not in text:  # an alias always starts with '*': nothing to count
        return yaml.load(text, Loader=_YAML_LOADER)
    try:
        return yaml.load(text, Loader=_Loader)
    except _Aliased as e:
        raise _alias_error(text, source, e.args[0]) from None


def load_yaml_all(text: str, source: str = "YAML text") -> list[Any]:
    """Every document of a multi-document YAML text (a Kubernetes manifest), read as ``load_yaml`` reads one."""
    try:
        return list(yaml.load_all(text, Loader=_Loader if "*" in text else _YAML_LOADER))
    except _Aliased as e:
        raise _alias_error(text, source, e.args[0]) from None


def _alias_error(text: str, source: str, values: int | None) -> UserError:
    """One line: the first alias of ``text``, where it is, what is wrong and the fix."""
    alias = next(e for e in yaml.parse(text, Loader=_YAML_LOADER) if isinstance(e, yaml.AliasEvent))
    where = f"line {alias.start_mark.line + 1}, column {alias.start_mark.column + 1}: YAML alias *{alias.anchor}"
    what = (f"the aliases repeat {values:,} values, more than the {ALIAS_VALUES:,} dlrmflow reads (a few lines of "
            "nested aliases stand for billions)" if values is not None else "an alias inside its own anchor")
    return UserError(f"{source}: {where}: {what}. Fix: write the values out in full instead of nesting aliases.")


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
    got = f" (got {quoted(err['input'])})" if "input" in err and not isinstance(err["input"], dict) else ""
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
