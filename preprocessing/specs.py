"""The input specs a config names besides a preset or a path (``PreprocessConfig.spec``), and the store's
``specs/`` folder they live in: the Prefect UI's forms cannot upload a file, and a path must be one the flow's
process can read.

- ``store:NAME``: the spec kept in the store as ``specs/NAME.yaml`` (written by the spec-draft flow, or copied
  there). Each text it has held is kept as a version, ``specs/NAME/v<N>.yaml``, never rewritten; a different text
  replaces ``NAME.yaml`` only when asked (``save_spec``'s ``overwrite``).
- a spec YAML pasted as the value (any value with a line break): kept once by its digest,
  ``specs/_pasted/<digest>.yaml``.

``resolve_spec`` turns either into the URI of such an immutable file after checking its text as `dlrmflow spec
check` does (every problem at once, each on its line), so that the dataset records a spec that scoring and export
read unchanged later. Any other value (a preset, a path or URI) is returned as it is.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import textwrap
from dataclasses import dataclass

from common.atomic import write_uri
from common.errors import UserError
from common.store import SPECS, Store, filesystem, read_text
from feature_spec.check import check_text

from .config import PreprocessConfig

STORE_PREFIX = "store:"   # spec: store:NAME
PASTED = "_pasted"        # specs/_pasted/<digest>.yaml: pasted specs (a spec's NAME starts with a letter or digit)
_VERSION = re.compile(r"^v(\d+)\.yaml$")


@dataclass(frozen=True)
class Saved:
    """Where ``save_spec`` left a spec: ``specs/NAME.yaml``, the version that holds its text, its number, and
    whether the text was new to ``NAME.yaml``."""

    uri: str
    version_uri: str
    version: int
    changed: bool


def is_pasted(value: str) -> bool:
    """Whether a ``spec`` value is a spec's YAML text rather than a name or a path (it spans lines)."""
    return "\n" in value.strip()


def resolve_spec(value: str, store: Store) -> str:
    """The preset name or YAML URI that the ``spec`` value ``value`` stands for in ``store``: a pasted YAML text
    kept under ``specs/_pasted/``, ``store:NAME`` the version of ``specs/NAME.yaml`` that holds its text, both
    checked first (a UserError listing every problem, one a line); anything else as it is."""
    if is_pasted(value):
        text = textwrap.dedent(value.strip("\n")).rstrip() + "\n"
        _check(text, "the pasted spec")
        uri = store.join(SPECS, PASTED, hashlib.sha256(text.encode()).hexdigest()[:16] + ".yaml")
        if _read(uri) != text:
            write_uri(uri, text)
        return uri
    value = value.strip()   # a form's text box may leave a line break after a name
    if not value.startswith(STORE_PREFIX):
        return value
    name = value[len(STORE_PREFIX):].strip()
    uri = store.spec_uri(name)
    text = _read(uri)
    if text is None:
        known = spec_names(store)
        raise UserError(f"spec {value}: the store has no {uri}" + (
            f" (its specs: {', '.join(known[:20])})" if known else " (it holds no specs)") +
            ". Fix: draft one (the spec-draft deployment, or `dlrmflow spec draft --input DATA --out "
            f"{uri}`), or name one of the store's specs.")
    _check(text, f"spec {value} ({uri})")
    return _version_of(uri, text)[0]


def resolved(config: PreprocessConfig) -> PreprocessConfig:
    """``config`` with its ``spec`` resolved (``resolve_spec``) in its store, ``out``."""
    spec = resolve_spec(config.spec, Store(config.out))
    return config if spec == config.spec else config.model_copy(update={"spec": spec})


def save_spec(store: Store, name: str, text: str, overwrite: bool = False) -> Saved:
    """Keep ``text`` as the store's spec ``name``: ``specs/NAME.yaml`` and a new version (the same text: nothing new).
    A different text already there is replaced only with ``overwrite`` (it stays as its version); else a
    UserError."""
    uri = store.spec_uri(name)
    current = _read(uri)
    if current is not None and current != text:
        kept, number = _version_of(uri, current)   # a NAME.yaml copied there by hand: kept as a version too
        if not overwrite:
            raise UserError(f"{uri} holds a different spec (version {number}, {kept}). Fix: set overwrite: true "
                            "to replace it (it stays as its version), or choose another name.")
    version_uri, number = _version_of(uri, text)
    if current != text:
        write_uri(uri, text)
    return Saved(uri, version_uri, number, current != text)


def spec_names(store: Store) -> list[str]:
    """The names of the store's specs (``specs/NAME.yaml``), sorted."""
    fs, root = filesystem(store.join(SPECS))
    if not fs.exists(root):
        return []
    return sorted(posixpath.basename(f)[:-len(".yaml")] for f in fs.ls(root, detail=False) if f.endswith(".yaml"))


def versions(uri: str) -> dict[int, str]:
    """Version number -> URI of the versions of the spec at ``uri`` (``specs/NAME.yaml``: ``specs/NAME/v<N>.yaml``)."""
    folder = uri[:-len(".yaml")]
    fs, path = filesystem(folder)
    if not fs.exists(path):
        return {}
    found = {}
    for f in fs.ls(path, detail=False):
        match = _VERSION.match(posixpath.basename(f))
        if match:
            found[int(match.group(1))] = posixpath.join(folder, match.group(0))
    return found


def _version_of(uri: str, text: str) -> tuple[str, int]:
    """(URI, number) of the latest version of the spec at ``uri`` that holds ``text``, written as the next one when
    none does."""
    known = versions(uri)
    for number in sorted(known, reverse=True):
        if _read(known[number]) == text:
            return known[number], number
    number = max(known, default=0) + 1
    version_uri = f"{uri[:-len('.yaml')]}/v{number}.yaml"
    write_uri(version_uri, text)
    return version_uri, number


def _check(text: str, source: str) -> None:
    """A UserError listing every problem of the spec ``text`` (``feature_spec.check.check_text``), one a line."""
    _, problems = check_text(text, source)
    if problems:
        raise UserError(f"{source} has {len(problems)} problem(s); nothing was preprocessed:\n" +
                        "\n".join(f"  {p}" for p in problems))


def _read(uri: str) -> str | None:
    try:
        return read_text(uri)
    except FileNotFoundError:
        return None
