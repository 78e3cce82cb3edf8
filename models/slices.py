"""The promotion's per-slice floor: a challenger must not lose more than ``slice_max_loss`` of ROC AUC against the
champion on any slice holding at least ``slice_min_share`` of the test rows (``models.config.PromoteConfig``).
``compare`` computes both models' metrics per slice of the same test rows (the slices: the ``top`` most frequent
raw values of the slice feature, and 'other'; ``common.metrics.slices``); ``slice_refusals`` is the gate, which
``models.decision.decide`` applies. A global AUC can hide a model that got worse for one country, site or
campaign: this names that slice."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from common import metrics
from models.config import PromoteConfig

if TYPE_CHECKING:   # decision imports this module for its gate
    from models.decision import RowScores


def compare(feature: str, keys: np.ndarray, challenger: RowScores, champion: RowScores, top: int) -> dict | None:
    """``{"by", "top", "challenger", "champion"}``: both models' per-slice metrics (``common.metrics.slices``: value,
    rows, share, auc, normalized_entropy, ...; the same slices in the same order) of the same rows, ``keys`` being
    each row's raw value of ``feature`` in the scores' order. None when the two were not scored on the same rows."""
    if challenger.fingerprint != champion.fingerprint or len(keys) != len(challenger.labels):
        return None
    sides = {}
    for side, rows in (("challenger", challenger), ("champion", champion)):
        table = metrics.slices(rows.probs, rows.labels, keys, top)
        sides[side] = [{**row, "value": metrics.OTHER if row["value"] is None else row["value"]} for row in table]
    return {"by": feature, "top": top, **sides}


def slice_refusals(challenger_slices: list[dict] | None, champion_slices: list[dict] | None, gates: PromoteConfig,
                   feature: str = "slice") -> list[str]:
    """The ``slice_max_loss`` gate's refusals (texts; ``decide`` names the gate): one per slice (not 'other')
    holding at least ``slice_min_share`` of the rows whose challenger AUC is below the champion's by more than
    ``slice_max_loss``, naming the slice (``feature=value``), its share and both AUCs. A slice without an AUC (one
    class only) is not judged; no gate or no slices: none."""
    if gates.slice_max_loss is None or not challenger_slices or not champion_slices:
        return []
    theirs = {row["value"]: row for row in champion_slices}
    refused = []
    for row in challenger_slices:
        other = theirs.get(row["value"])
        if row["value"] == metrics.OTHER or other is None or row["share"] < gates.slice_min_share:
            continue
        mine, old = row.get("auc"), other.get("auc")
        if mine is None or old is None or not (math.isfinite(mine) and math.isfinite(old)):
            continue
        if mine - old < -gates.slice_max_loss:
            refused.append(f"slice {feature}={row['value']} ({row['share']:.0%} of rows): AUC "
                           f"{mine:.4f} vs champion {old:.4f} ({mine - old:+.4f} < -{gates.slice_max_loss:g})")
    return refused


def describe(found: dict) -> str:
    """One line of ``compare``'s slices: each slice's share and both models' AUC."""
    theirs = {row["value"]: row for row in found.get("champion") or []}

    def auc(row: dict | None) -> str:
        return "n/a" if not row or row.get("auc") is None else f"{row['auc']:.4f}"

    cells = [f"{row['value']} ({row['share']:.0%}) {auc(row)} vs {auc(theirs.get(row['value']))}"
             for row in found.get("challenger") or []]
    return f"AUC by {found['by']}, challenger vs champion: " + "; ".join(cells)
