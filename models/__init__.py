"""The model layer without Prefect: named models in the store (``registry``: champion.json, history.jsonl,
days.jsonl, bundles), the promotion rule and its gates (``decision``), batch scoring and export with a model's own
vocabulary (``scoring``), the store's clean-up (``gc``), a model's pictures (``plots``) and their configs
(``config``). ``nightly`` and the flows call these.

This is the package's face: code outside ``models`` imports these names from here (checked by
tests/test_layout.py), each imported on first use from the module that holds it (``_FACE``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.face import lazy

if TYPE_CHECKING:   # what type checkers and IDEs see; at run time each name comes from _FACE on first use
    from .config import ExportConfig, GcConfig, PromoteConfig, ScoreConfig
    from .decision import PROMOTING, RowScores, interval_text, paired
    from .registry import NAME_PATTERN, TUNED_FILE, Champion, champion_init, load_tuned, model_uri
    from . import decision, gc, plots, registry, scoring, slices, watch

_FACE = {   # name -> the module of this package that holds it (a module's own name: the module)
    "ExportConfig": "config", "GcConfig": "config", "PromoteConfig": "config", "ScoreConfig": "config",
    "PROMOTING": "decision", "RowScores": "decision", "interval_text": "decision", "paired": "decision",
    "NAME_PATTERN": "registry", "TUNED_FILE": "registry", "Champion": "registry", "champion_init": "registry",
    "load_tuned": "registry", "model_uri": "registry",
    "gc": "gc", "plots": "plots", "registry": "registry", "scoring": "scoring", "decision": "decision",
    "slices": "slices", "watch": "watch",
}
__all__, __getattr__, __dir__ = lazy(__name__, _FACE)
