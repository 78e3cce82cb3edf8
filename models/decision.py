"""The promotion rule: does a challenger replace the champion, given both models' metrics on the same day?

``decide`` applies the gates (``models.config.PromoteConfig``, docs/nightly.md): both models finite and scored on
the same rows (row count and fingerprint), enough test rows and positives, floors on the challenger alone every night
(AUC above chance plus a lift; normalized entropy below ``max_ne``: a log loss below the test day's base rate's),
an optional calibration band, a strictly better AUC (by more than the margin), a log loss no worse than the
champion's on the same rows beyond ``logloss_tolerance``, optionally no slice of the test rows on which the
challenger loses more AUC than ``slice_max_loss`` (``models.slices``) and a paired bootstrap interval of the AUC
difference whose lower bound clears the margin (``paired``), and no failed data check (``on_data_check: warn``,
``nightly.datacheck``). A refusal names the gate (its setting's name), the value and the threshold; the
``Decision`` lists the refusing gates."""

from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

import numpy as np

from models.config import PromoteConfig
from models.slices import slice_refusals

PROMOTING = ("promoted", "first")  # the decisions that make the challenger the champion
RESAMPLES = 1000   # bootstrap resamples of the paired AUC difference
SEED = 0           # the bootstrap's seed: the same scores give the same interval


class Decision(NamedTuple):
    """A promotion decision: ``decision`` ("first" | "promoted" | "kept"), its ``reason`` in words, and the names
    of the gates that refused (``refused``: empty unless kept by a gate)."""

    decision: str
    reason: str
    refused: tuple[str, ...] = ()


class RowScores(NamedTuple):
    """One model's predictions on a test day, rows in (file, row) order, and the fingerprint of those rows."""

    probs: np.ndarray
    labels: np.ndarray
    fingerprint: str


def fingerprint(files: np.ndarray, rows: np.ndarray, labels: np.ndarray) -> str:
    """sha256 (16 hex digits) of the row count and each row's (file, row number, label), in the given order:
    two models scored the same rows of the same files have the same one."""
    h = hashlib.sha256(f"{len(labels)} rows\n".encode())
    names, first = np.unique(files, return_index=True)
    for name in names[np.argsort(first)]:
        mine = files == name
        h.update(f"{name}\n".encode())
        h.update(np.asarray(rows[mine], "<i8").tobytes())
        h.update((np.asarray(labels[mine]) > 0.5).astype(np.uint8).tobytes())
    return h.hexdigest()[:16]


def _number(metrics: dict | None, key: str) -> float:
    value = (metrics or {}).get(key)
    return float("nan") if value is None else float(value)


def _summary(metrics: dict) -> str:
    return f"AUC {_number(metrics, 'auc'):.4f}, log loss {_number(metrics, 'logloss'):.4f}"


def finite(metrics: dict | None) -> bool:
    """Whether ``metrics`` hold a finite AUC and a finite log loss (what a comparison needs of each side)."""
    return all(math.isfinite(_number(metrics, key)) for key in ("auc", "logloss"))


def _resampled_aucs(probs: np.ndarray, labels: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """ROC AUC (ties count half) of the rows each line of ``draws`` (resamples x rows: row numbers) picks."""
    b = len(draws)
    _, group = np.unique(probs, return_inverse=True)   # each row's run of equal scores, ascending
    groups = int(group.max()) + 1
    code = 2 * group.ravel() + (labels > 0.5)           # a row's group and class in one number
    counts = np.bincount((code[draws] + 2 * groups * np.arange(b)[:, None]).ravel(), minlength=2 * groups * b)
    neg, pos = counts.reshape(b, groups, 2).transpose(2, 0, 1)
    below = np.cumsum(neg, axis=1) - neg
    with np.errstate(invalid="ignore", divide="ignore"):
        return (pos * (below + 0.5 * neg)).sum(1) / (pos.sum(1) * neg.sum(1))


def paired(new: RowScores, old: RowScores, confidence: float | None, resamples: int = RESAMPLES,
           seed: int = SEED) -> dict:
    """The comparison of two models' scores of a test day: each side's rows and fingerprint and, when they are
    the same rows and ``confidence`` is given, the ``confidence`` percentile interval of AUC(new) - AUC(old)
    over ``resamples`` paired bootstrap resamples of the rows (numpy, seeded: deterministic)."""
    out = {"rows": [len(new.labels), len(old.labels)], "fingerprints": [new.fingerprint, old.fingerprint],
           "confidence": confidence, "auc_diff_interval": None}
    if confidence is None or new.fingerprint != old.fingerprint:
        return out
    n = len(new.labels)
    rng = np.random.default_rng(seed)
    diffs = []
    chunk = max(1, (1 << 22) // max(n, 1))   # resamples per pass: each (resamples x rows) array <= 32 MB
    for start in range(0, resamples, chunk):
        b = min(chunk, resamples - start)
        draws = rng.integers(0, n, (b, n))
        diffs.append(_resampled_aucs(new.probs, new.labels, draws) - _resampled_aucs(old.probs, old.labels, draws))
    diffs = np.concatenate(diffs)
    diffs = diffs[np.isfinite(diffs)]   # a resample without one of the classes has no AUC
    if len(diffs):
        tail = (1 - confidence) / 2
        out["auc_diff_interval"] = [float(x) for x in np.quantile(diffs, [tail, 1 - tail])]
    return out | {"resamples": resamples, "seed": seed}


def _floors(challenger: dict, gates: PromoteConfig) -> list[tuple[str, str]]:
    """The refusals (gate, text) of the gates on the challenger alone, every night: test rows and positives, the AUC
    floor (chance plus ``min_auc_lift``), the normalized entropy (log loss / the base rate's entropy) below
    ``max_ne`` and the calibration band."""
    refused = []
    for gate, key in (("min_test_rows", "rows"), ("min_test_positives", "positives")):
        value, least = _number(challenger, key), getattr(gates, gate)
        if not value >= least:   # NaN (unknown) refuses too
            refused.append((gate, f"the test day has {value:g} {key} < {least}"))
    auc, floor = _number(challenger, "auc"), 0.5 + gates.min_auc_lift
    if not auc > floor:
        refused.append(("min_auc_lift", f"AUC {auc:.4f} is not above 0.5 + {gates.min_auc_lift:g} = {floor:g}"))
    loss, base = _number(challenger, "logloss"), _number(challenger, "base_logloss")
    ne = loss / base if base > 0 else math.nan
    if not ne < gates.max_ne:
        refused.append(("max_ne", f"normalized entropy {ne:.4f} (log loss {loss:.4f} / the test day's base-rate "
                                  f"entropy {base:.4f}) is not below {gates.max_ne:g}"
                        + (": worse than predicting the day's click rate for every row" if ne >= 1 else "")))
    band = gates.calibration_band
    ratio = _number(challenger, "calibration")
    if band is not None and not band[0] <= ratio <= band[1]:
        refused.append(("calibration_band", f"challenger predicted/observed clicks {ratio:.3f} outside "
                                            f"[{band[0]:g}, {band[1]:g}]"))
    return refused


def _logloss_regression(challenger: dict, champion: dict, gates: PromoteConfig) -> list[tuple[str, str]]:
    """The logloss_tolerance gate's refusal: the challenger's log loss above the champion's on the same rows by more
    than the tolerance (relative)."""
    if gates.logloss_tolerance is None:
        return []
    new, old = _number(challenger, "logloss"), _number(champion, "logloss")
    bound = old * (1 + gates.logloss_tolerance)
    if new <= bound:
        return []
    return [("logloss_tolerance", f"log loss {new:.4f} regresses against the champion's {old:.4f} on the same rows "
                                  f"by {new / old - 1:+.2%} (more than {gates.logloss_tolerance:.2%})")]


def _same_rows(challenger: dict, champion: dict) -> list[tuple[str, str]]:
    """The same_rows gate's refusal, none when both were scored on the same rows (``paired``'s fingerprints,
    else the metrics' own ``fingerprint``)."""
    found = champion.get("paired")
    rows = found["rows"] if found else [challenger.get("rows"), champion.get("rows")]
    prints = found["fingerprints"] if found else [challenger.get("fingerprint"), champion.get("fingerprint")]
    if None in prints or prints[0] != prints[1] or rows[0] != rows[1]:
        return [("same_rows", f"challenger rows {rows[0]} (fingerprint {prints[0]}) vs champion rows {rows[1]} "
                              f"(fingerprint {prints[1]}): not the same test rows, so not comparable")]
    return []


def data_refusals(failed_checks: list[str]) -> list[str]:
    """The data_check gate's refusal of a night whose data checks failed (``on_data_check: warn``), as text."""
    return [_text(r) for r in _data(failed_checks)]


def _data(failed_checks: list[str]) -> list[tuple[str, str]]:
    if not failed_checks:
        return []
    more = f"; and {len(failed_checks) - 3} more" if len(failed_checks) > 3 else ""
    return [("data_check", f"{len(failed_checks)} data check(s) failed ({'; '.join(failed_checks[:3])}{more})")]


def _text(refusal: tuple[str, str]) -> str:
    return f"gate {refusal[0]}: {refusal[1]}"


def _kept(reason: str, refused: list[tuple[str, str]]) -> Decision:
    return Decision("kept", reason, tuple(dict.fromkeys(gate for gate, _ in refused)))


def decide(challenger: dict, champion: dict | None, gates: PromoteConfig = PromoteConfig(),
           failed_checks: list[str] = ()) -> Decision:
    """The ``Decision`` on the challenger's and the champion's metrics on the same day (auc, logloss, rows,
    positives, base_logloss, calibration, fingerprint; the champion's ``paired``: the comparison ``paired`` made).
    The challenger wins when every gate passes (module doc): the floors on the challenger alone (a first champion
    too), and with a champion an AUC gain above ``gates.margin`` (a tie keeps the champion) without a log-loss
    regression beyond ``gates.logloss_tolerance``; no data check of the night may have failed (``failed_checks``:
    their texts, ``nightly.datacheck``). Both sides need a finite AUC and log loss. The reason reports both AUCs and
    log losses, and each refusing gate with its value and threshold."""
    new = _number(challenger, "auc")
    data = _data(list(failed_checks))
    also = "".join(f"; {_text(r)}" for r in data)   # named where another reason keeps the champion first
    if champion is None:
        if not finite(challenger):
            return _kept(f"no champion yet, but the challenger's metrics are not finite ({_summary(challenger)}): "
                         f"not promoted{also}", [("finite", ""), *data])
        refused = _floors(challenger, gates) + data
        if refused:
            return _kept(f"no champion yet, but the challenger ({_summary(challenger)}) fails "
                         f"{'; '.join(map(_text, refused))}", refused)
        return Decision("first", f"no champion yet: the challenger ({_summary(challenger)}) becomes the first")
    old = _number(champion, "auc")
    if not finite(challenger) or not finite(champion):
        side = "challenger's" if not finite(challenger) else "champion's"
        return _kept(f"the {side} metrics are not finite (NaN or inf), so the models cannot be compared: "
                     f"champion kept (challenger {_summary(challenger)}; champion {_summary(champion)}){also}",
                     [("finite", ""), *data])
    losses = f"log loss {_number(challenger, 'logloss'):.4f} vs {_number(champion, 'logloss'):.4f}"
    refused = [*_same_rows(challenger, champion), *_floors(challenger, gates), *data]
    if not new - old > gates.margin:
        refused.append(("promote_margin", f"AUC gain {new - old:+.4f} (challenger {new:.4f} - champion {old:.4f}) "
                                          f"is not above the margin {gates.margin:g}"))
    refused += _logloss_regression(challenger, champion, gates)
    sliced = champion.get("slices") or {}   # both models per slice of the same rows (models.slices.compare)
    refused += [("slice_max_loss", text) for text in slice_refusals(sliced.get("challenger"), sliced.get("champion"),
                                                                     gates, sliced.get("by", "slice"))]
    found = champion.get("paired")
    interval = interval_text(found)
    if gates.confidence is not None:
        lower = found["auc_diff_interval"][0] if interval else math.nan
        if not lower > gates.margin:
            refused.append(("promote_confidence", f"the {gates.confidence:g} interval of the AUC gain "
                                                  f"{interval or 'unknown'} does not lie above the margin "
                                                  f"{gates.margin:g}"))
    if refused:
        return _kept(f"champion kept: {'; '.join(map(_text, refused))}; {losses}", refused)
    gain = f" (AUC gain {found['confidence']:g} interval {interval})" if interval else ""
    return Decision("promoted", f"challenger AUC {new:.4f} > champion AUC {old:.4f} + margin {gates.margin:g}{gain}; "
                                f"{losses}")


def interval_text(found: dict | None) -> str | None:
    """The AUC-gain interval of a ``paired`` comparison as text, None when it has none."""
    interval = (found or {}).get("auc_diff_interval")
    return None if interval is None else f"[{interval[0]:+.4f}, {interval[1]:+.4f}]"
