"""The champion watched between promotions: its metrics on each night's test day (it is scored every night the
challenger is compared with it) form a series in the model's history, and a night where it falls out of its own
recent band is flagged (``watch``), so that a model that decays while no challenger beats it is announced
(``nightly.night.compete`` says so; ``flows.events`` emits ``dlrmflow.model.degraded``).

The band (``models.config.PromoteConfig``): tonight's AUC below the median of its last ``watch_nights`` nights minus
``watch_auc_drop``, or its normalized entropy (log loss / the day's base-rate entropy) above their median plus
``watch_ne_rise``; judged once it has ``MIN_NIGHTS`` earlier nights. At any time: an AUC at chance level (not above
0.5 + ``min_auc_lift``, the first champion's floor)."""

from __future__ import annotations

import math
import statistics

from models.config import PromoteConfig
from models.decision import PROMOTING

MIN_NIGHTS = 3   # earlier nights of the champion before its band is judged (fewer: no median worth the name)


def _ne(metrics: dict | None) -> float | None:
    loss, base = (metrics or {}).get("logloss"), (metrics or {}).get("base_logloss")
    return loss / base if isinstance(loss, (int, float)) and isinstance(base, (int, float)) and base > 0 else None


def series(lines: list[dict], run: str, before: str) -> list[dict]:
    """The metrics of the champion ``run`` on each night before ``before`` (ISO date) in a model's history lines,
    oldest first: as the challenger of the night that promoted it, as the champion of each night that compared
    with it (a night recorded twice: its last line)."""
    nights: dict[str, dict] = {}
    for line in lines:
        date = line.get("date")
        if not date or date >= before:
            continue
        if line.get("champion_run") == run and line.get("champion"):
            nights[date] = line["champion"]
        elif line.get("run") == run and line.get("decision") in PROMOTING and line.get("challenger"):
            nights[date] = line["challenger"]
    return [{"date": d, **nights[d]} for d in sorted(nights)]


def watch(earlier: list[dict], tonight: dict, gates: PromoteConfig) -> dict:
    """The champion's watch on tonight's metrics against ``earlier`` (``series``; the last ``watch_nights`` count):
    ``{"nights", "auc", "auc_median", "ne", "ne_median", "degraded": [why, ...]}`` (empty: within its band)."""
    recent = earlier[-gates.watch_nights:]
    aucs = [m["auc"] for m in recent if isinstance(m.get("auc"), (int, float)) and math.isfinite(m["auc"])]
    nes = [v for v in map(_ne, recent) if v is not None and math.isfinite(v)]
    auc, ne = tonight.get("auc"), _ne(tonight)
    out = {"nights": len(recent), "auc": auc, "auc_median": statistics.median(aucs) if aucs else None, "ne": ne,
           "ne_median": statistics.median(nes) if nes else None, "degraded": []}
    why = out["degraded"]
    floor = 0.5 + gates.min_auc_lift
    if isinstance(auc, (int, float)) and auc <= floor:
        why.append(f"champion AUC {auc:.4f} at chance level (not above 0.5 + min_auc_lift {gates.min_auc_lift:g})")
    if gates.watch_auc_drop is not None and len(aucs) >= MIN_NIGHTS and isinstance(auc, (int, float)) \
            and auc < out["auc_median"] - gates.watch_auc_drop:
        why.append(f"champion AUC {auc:.4f} below the median {out['auc_median']:.4f} of its last {len(aucs)} nights "
                   f"minus watch_auc_drop {gates.watch_auc_drop:g}")
    if gates.watch_ne_rise is not None and len(nes) >= MIN_NIGHTS and ne is not None \
            and ne > out["ne_median"] + gates.watch_ne_rise:
        why.append(f"champion normalized entropy {ne:.4f} above the median {out['ne_median']:.4f} of its last "
                   f"{len(nes)} nights plus watch_ne_rise {gates.watch_ne_rise:g}")
    return out


def degraded(entry: dict) -> list[str]:
    """Why the night of history line ``entry`` announces its champion degraded (``watch``'s reasons), when no
    challenger won that night; else none."""
    if entry.get("decision") in PROMOTING:
        return []
    return list((entry.get("watch") or {}).get("degraded") or [])
