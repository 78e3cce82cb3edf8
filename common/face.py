"""A package's face (its ``__init__``): the names outside code imports from the package, each imported on first use
from the module that holds it, so a light name (a config) costs no heavy import (PEP 562 ``__getattr__``).

A face is written the same way in every package (tests/test_layout.py checks it)::

    if TYPE_CHECKING:   # what type checkers and IDEs see
        from .config import TrainConfig
    _FACE = {"TrainConfig": "config"}
    __all__, __getattr__, __dir__ = lazy(__name__, _FACE)

``_FACE`` is what runs; the ``TYPE_CHECKING`` imports declare the same names from the same modules, so a type checker
or an IDE knows them (as Prefect's own ``__init__`` does)."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy(package: str, table: dict[str, str]) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """(``__all__``, ``__getattr__``, ``__dir__``) of ``package``'s face: ``table`` maps each name to the module of
    the package that holds it (a module's own name: the module itself)."""
    names = sorted(table)

    def getattr_(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        found = importlib.import_module(f"{package}.{module}")
        return found if name == module else getattr(found, name)

    return names, getattr_, lambda: names
