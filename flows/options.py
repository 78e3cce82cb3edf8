"""Command-line options generated from the config models: the models ARE the command line.

Every field of a pydantic model becomes one flag with the field's description, default and
choices: ``--frequency-threshold`` for a top-level field, ``--optimizer.dense.lr`` for a nested
one (``--section.key``), ``--flag/--no-flag`` for booleans, ``--inputs A B`` or ``--input A --input
B`` for lists, ``--env KEY=VALUE`` (repeatable) for mappings. ``--set section.key=value`` reaches
the same fields. Given values are collected as dotted overrides, laid over a base (defaults, a
preset, a YAML file) and validated once by the model itself, so a bad value gets the same message
on the command line as in a YAML file (``config_error``).
"""

from __future__ import annotations

import argparse
import re
import types
import typing
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ValidationError
from pydantic.json_schema import SkipJsonSchema

from common.config import apply_overrides, load_yaml, validate

_PREFIX = "@"          # dest of a generated option: "@<root>:<dotted.field>"
SET_DEST = "@set"


def _unwrap_optional(annotation):
    """``X | None`` -> (X, True); anything else -> (annotation, False)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _is_model(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _hidden(field) -> bool:
    """A field left out of the flow's form (``SkipJsonSchema``: the flow fills it in) is no option either."""
    return any(isinstance(m, SkipJsonSchema) for m in field.metadata)


def _flag(path: str) -> str:
    return "--" + path.replace("_", "-")


def _scalar(text: str):
    """A value as YAML reads it (``3`` -> 3, ``true`` -> True, ``[64, 16]`` -> list, ``none`` -> None)."""
    value = load_yaml(text, f"the option value {text[:40]!r}")
    return None if isinstance(value, str) and value.lower() == "none" else value


def _text(text: str):
    return None if text.lower() in ("none", "null") else text


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _key_yaml(text: str) -> tuple[str, Any]:
    key, value = _key_value(text)
    return key, _scalar(value)


class _Bool(argparse.Action):
    """``--section.flag`` sets True, ``--section.no-flag`` False."""

    def __init__(self, option_strings, dest, **kwargs):
        negated = [re.sub(r"(^--|\.)([^.]+)$", r"\1no-\2", o) for o in option_strings]
        super().__init__(option_strings + negated, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string in self.option_strings[:len(self.option_strings) // 2])

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)


class _Mapping(argparse.Action):
    """Repeatable KEY=VALUE into one dict."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = dict(getattr(namespace, self.dest, None) or {})
        current[values[0]] = values[1]
        setattr(namespace, self.dest, current)


def _help(description: str | None, default: Any) -> str:
    text = (description or "").replace("%", "%%")
    if default not in (None, [], {}, "", ...):
        text += f" (default: {default})"
    return text


def _variants(annotation, field) -> list[type[BaseModel]]:
    """The models of a discriminated union field (``kind`` picks one), else []."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    return list(args) if field.discriminator and args and all(_is_model(a) for a in args) else []


def add_options(parser: argparse.ArgumentParser, model: type[BaseModel], *, root: str = "config",
                skip: Iterable[str] = (), flatten: Iterable[str] = (), defaults: BaseModel | None = None,
                title: str | None = None, aliases: dict[str, str] | None = None) -> None:
    """Add one option per field of ``model`` (recursively) to ``parser``.

    ``root`` names the model in ``collect``/``build``; ``skip`` leaves out fields (dotted paths, e.g.
    fields a command fills in itself); ``flatten`` offers a nested section's fields without its prefix
    (their names must not collide); ``defaults`` is the instance whose values the help shows (default: the model's own defaults).
    A discriminated union (e.g. the launcher) becomes ``--launcher KIND`` plus every kind's fields.
    ``aliases`` gives a field (dotted path) a second, shorter flag, listed first: ``{"launcher.nproc": "--nproc"}``.
    """
    _Adder(parser, root, set(skip), set(flatten), dict(aliases or {})).model(model, defaults, title, "", "")


# the short flag of the local launcher's ranks (everyday options of train, evaluate, score, run and serve)
NPROC_ALIAS = {"launcher.nproc": "--nproc"}


class _Adder:
    def __init__(self, parser, root, skip, flatten, aliases):
        self.parser, self.root, self.skip, self.flatten, self.aliases = parser, root, skip, flatten, aliases
        self.flags: set[str] = set()  # union variants with a field of the same name share its flag

    def model(self, model, defaults, title, path, flag, kind: str | None = None) -> None:
        group = self.parser.add_argument_group(title) if title else self.parser
        for name, field in model.model_fields.items():
            sub_path, sub_flag = path + name, flag + name
            if sub_path in self.skip or (kind and name == "kind") or _hidden(field):
                continue
            annotation, optional = _unwrap_optional(field.annotation)
            default = getattr(defaults, name) if defaults is not None else \
                (... if field.is_required() else field.get_default(call_default_factory=True))
            sub_title = (field.description or name).rstrip(".")
            if _is_model(annotation):
                self.model(annotation, default if isinstance(default, BaseModel) else None, sub_title,
                           sub_path + ".", "" if sub_path in self.flatten else sub_flag + ".", kind)
            elif variants := _variants(annotation, field):
                kinds = [v.model_fields["kind"].default for v in variants]
                group.add_argument(_flag(sub_flag), dest=f"{_PREFIX}{self.root}:{sub_path}.kind",
                                   metavar="{" + ",".join(kinds) + "}",
                                   default=argparse.SUPPRESS, help=_help(field.description, getattr(default, "kind", None)))
                for variant, k in zip(variants, kinds):
                    self.model(variant, default if getattr(default, "kind", None) == k else None,
                               f"{sub_title}: --{sub_flag.replace('_', '-')} {k}", sub_path + ".", sub_flag + ".", k)
            else:
                self.scalar(group, field, annotation, optional, default, sub_path, sub_flag)

    def scalar(self, group, field, annotation, optional, default, path, flag) -> None:
        flags = [_flag(flag)]
        if flags[0] in self.flags:
            return
        self.flags.add(flags[0])
        if path in self.aliases:
            flags.insert(0, self.aliases[path])
        origin = typing.get_origin(annotation)
        kwargs: dict[str, Any] = {"dest": f"{_PREFIX}{self.root}:{path}", "default": argparse.SUPPRESS,
                                  "help": _help(field.description, default)}
        if annotation is bool:
            kwargs["action"] = _Bool
        elif origin is Literal:  # choices shown, checked by the model (the same message as from a YAML file)
            kwargs["metavar"] = "{" + ",".join(map(str, typing.get_args(annotation))) + "}"
            kwargs["type"] = _text if optional else str
        elif origin is list:
            (item,) = typing.get_args(annotation) or (str,)
            kwargs.update(nargs="+", action="extend", type=str if item is str else _scalar, metavar="VALUE")
            if flag.endswith("s") and len(flag.rsplit(".", 1)[-1]) > 2:  # --inputs A B, or --input A --input B
                flags.append(_flag(flag[:-1]))
        elif origin is dict:
            text_values = typing.get_args(annotation)[1:] in ((str,), ())
            kwargs.update(action=_Mapping, type=_key_value if text_values else _key_yaml, metavar="KEY=VALUE")
        elif annotation is str:
            kwargs["type"] = _text if optional else str
        else:
            kwargs["type"] = _scalar
        if annotation is not bool:   # an alias names the value too (--store STORE, not --store OUT)
            name = (self.aliases[path].lstrip("-") if path in self.aliases else path).rsplit(".", 1)[-1]
            kwargs.setdefault("metavar", name.replace("-", "_").upper())
        if field.is_required() and "." not in path:
            kwargs.update(required=True)
            kwargs.pop("default")
        group.add_argument(*flags, **kwargs)


def add_set_option(parser: argparse.ArgumentParser, root: str = "config", example: str = "optimizer.dense.lr=0.1") -> None:
    """``--set KEY=VALUE``: any field of ``root`` by its dotted name (repeatable), as the generated flags."""
    parser.add_argument("--set", dest=f"{SET_DEST}:{root}", action="append", default=[], type=_key_value,
                        metavar="KEY=VALUE",
                        help=f"override a config field by its dotted name, e.g. --set {example} (repeatable)")


def collect(args: argparse.Namespace, root: str = "config") -> dict[str, Any]:
    """The given options of ``root`` as ``{dotted.field: value}`` (``--set`` ones included, parsed as YAML)."""
    head = f"{_PREFIX}{root}:"
    given = {dest[len(head):]: value for dest, value in vars(args).items() if dest.startswith(head)}
    for key, value in getattr(args, f"{SET_DEST}:{root}", None) or []:
        given[key] = _scalar(value)
    return given


def build(model: type[BaseModel], args: argparse.Namespace, base: dict[str, Any] | None = None, *,
          root: str = "config", source: str = "command line"):
    """``model`` from ``base`` (a dump: a preset, a YAML file; default: the model's defaults) with the options
    given in ``args``."""
    overrides = collect(args, root)
    data = dict(base) if base is not None else _defaults(model)
    for key in [k for k in overrides if k.endswith(".kind")]:  # another union variant: its own defaults
        section = key[:-len(".kind")]
        if (_get(data, section) or {}).get("kind") != overrides[key]:
            data = apply_overrides(data, {section: {}}, strict=False)
    return validate(model, apply_overrides(data, overrides, strict=False), source)


def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The model's defaults (so that a union section given only some fields keeps its default kind)."""
    try:
        return model().model_dump(mode="json")
    except ValidationError:  # required fields: they come from the command line
        return {}


def _get(data: dict, dotted: str):
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data
