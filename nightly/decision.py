"""The promotion rule: does a challenger replace the champion, given both models' metrics on the same day?"""

from __future__ import annotations

import math

from common.errors import UserError

PROMOTING = ("promoted", "first")  # the decisions that make the challenger the champion


def _number(metrics: dict | None, key: str) -> float:
    value = (metrics or {}).get(key)
    return float("nan") if value is None else float(value)


def _summary(metrics: dict) -> str:
    return f"AUC {_number(metrics, 'auc'):.4f}, log loss {_number(metrics, 'logloss'):.4f}"


def check_margin(margin: float) -> None:
    """UserError unless ``margin`` (the AUC gain a challenger needs) is a number >= 0."""
    if not math.isfinite(margin) or margin < 0:
        raise UserError(f"promote_margin {margin} is not a number >= 0. Fix: give the AUC gain a challenger needs "
                        "over the champion, e.g. 0 or 0.001.")


def finite(metrics: dict | None) -> bool:
    """Whether ``metrics`` hold a finite AUC and a finite log loss (what a comparison needs of each side)."""
    return all(math.isfinite(_number(metrics, key)) for key in ("auc", "logloss"))


def decide(challenger: dict, champion: dict | None, margin: float = 0.0) -> tuple[str, str]:
    """("first" | "promoted" | "kept", reason) for the challenger's and the champion's metrics on the same day:
    the challenger wins when there is no champion or when its AUC >= the champion's AUC + ``margin``. Both sides
    need a finite AUC and log loss: a NaN or infinite one (a day with one class, a diverged model) never
    promotes. The reason reports both AUCs and log losses."""
    check_margin(margin)
    new = _number(challenger, "auc")
    if champion is None:
        if not finite(challenger):
            return "kept", (f"no champion yet, but the challenger's metrics are not finite ({_summary(challenger)}): "
                            "not promoted")
        return "first", f"no champion yet: the challenger ({_summary(challenger)}) becomes the first"
    old = _number(champion, "auc")
    if not finite(challenger) or not finite(champion):
        side = "challenger's" if not finite(challenger) else "champion's"
        return "kept", (f"the {side} metrics are not finite (NaN or inf), so the models cannot be compared: "
                        f"champion kept (challenger {_summary(challenger)}; champion {_summary(champion)})")
    losses = f"log loss {_number(challenger, 'logloss'):.4f} vs {_number(champion, 'logloss'):.4f}"
    if new >= old + margin:
        return "promoted", f"challenger AUC {new:.4f} >= champion AUC {old:.4f} + margin {margin:g}; {losses}"
    return "kept", f"challenger AUC {new:.4f} < champion AUC {old:.4f} + margin {margin:g}; {losses}"
