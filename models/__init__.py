"""The model layer without Prefect: named models in the store (``registry``: champion.json, history.jsonl,
days.jsonl, bundles), the promotion rule and its gates (``decision``), batch scoring and export with a model's own
vocabulary (``scoring``), the store's clean-up (``gc``), a model's pictures (``plots``) and their configs
(``config``). ``nightly`` and the flows call these.

This is the package's face: code outside ``models`` imports these names from here (checked by
tests/test_layout.py), each imported on first use from the module that holds it (``_FACE``).
"""

from __future__ import annotations

from common.face import lazy

_FACE = {   # name -> the module of this package that holds it (a module's own name: the module)
    "ExportConfig": "config", "GcConfig": "config", "PromoteConfig": "config", "ScoreConfig": "config",
    "PROMOTING": "decision", "RowScores": "decision", "interval_text": "decision", "paired": "decision",
    "NAME_PATTERN": "registry", "TUNED_FILE": "registry", "Champion": "registry", "champion_init": "registry",
    "load_tuned": "registry", "model_uri": "registry",
    "gc": "gc", "plots": "plots", "registry": "registry", "scoring": "scoring", "decision": "decision",
    "slices": "slices", "watch": "watch",
}
__all__, __getattr__, __dir__ = lazy(__name__, _FACE)
