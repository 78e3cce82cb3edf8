"""Calibration: Platt scaling of a checkpoint's logits, fitted on its validation rows, applied wherever it predicts.

A model's mean prediction can miss the rate of the days it predicts (a warm start that re-trains days its
champion already saw grows overconfident; see benchmarks/RESULTS.md "Calibration"), which costs log loss but no
ranking. ``fit(probs, labels)`` finds ``a, b`` minimising the log loss of ``sigmoid(a * logit + b)`` on the
validation split's predictions (a few Newton steps, numpy); the trainer fits one at each validation (never on
the test split: that would leak) and rank 0 records it by step in the run folder (``RunDir.CALIBRATION_FIT``,
``record``). ``apply(logits, calibration)`` is the one formula: the evaluation and the scoring ranks
(``Trainer.predict_stream``) and the serving bundle (``training.inference``, TorchScript: ``affine``) all call it.
``a`` is kept above 0, so the order of the scores, and the AUC, never change. ``TrainConfig.calibrate: false``
fits nothing, and a checkpoint without a fit predicts its raw logits.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

MIN_A = 1e-3   # the slope's floor: a positive slope keeps the ranking (an anti-correlated fit is refused)
STEPS = 50     # Newton steps at most (it converges in 4-8 from a=1, b=0)
RIDGE = 1e-6   # added to the Hessian's diagonal: two rows of one class are still solvable


@dataclass(frozen=True)
class Calibration:
    """The fitted ``a, b`` of one checkpoint (``step``), with what they were fitted on and what they changed there."""

    a: float
    b: float
    step: int
    split: str
    rows: int
    rate: float                  # the split's positive rate
    mean_before: float           # the raw mean prediction on it
    logloss_before: float
    logloss_after: float

    def to_dict(self) -> dict[str, Any]:
        """As recorded in ``calibration.json``, an evaluation's ``calibration_fit`` and a bundle's manifest."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Calibration":
        """The fit of a ``to_dict`` record."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def affine(logits: torch.Tensor, a: float, b: float) -> torch.Tensor:
    """``a * logits + b`` (TorchScript-compatible: the serving module calls it)."""
    return a * logits + b


def apply(logits, calibration: Calibration | None):
    """The calibrated logits (a torch tensor or numpy array); ``calibration`` None: the logits unchanged."""
    if calibration is None:
        return logits
    return affine(logits, calibration.a, calibration.b)


def _logit(probs: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(probs, np.float64), 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


def _loss(z: np.ndarray, y: np.ndarray) -> float:
    """Mean binary cross-entropy of logits ``z`` (stable: log(1 + e^z) - y z)."""
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def fit(probs: np.ndarray, labels: np.ndarray, *, step: int = 0, split: str = "val") -> Calibration | None:
    """Platt scaling of predictions ``probs`` with 0/1 ``labels`` (padded rows, label < 0, left out): Newton's method
    on the log loss of ``sigmoid(a * logit(p) + b)`` from ``a=1, b=0``, halving a step that does not lower it. A fit
    whose slope would not stay above 0 keeps ``a=1`` and fits ``b`` alone. None when the rows hold one class only
    (nothing to fit)."""
    p, y = np.asarray(probs, np.float64).ravel(), np.asarray(labels, np.float64).ravel()
    keep = y >= 0
    x, y = _logit(p[keep]), y[keep]
    if not len(y) or y.min() == y.max():
        return None
    a, b = _newton(x, y, slope=True)
    if a < MIN_A:
        a, b = _newton(x, y, slope=False)
    return Calibration(a=a, b=b, step=int(step), split=split, rows=int(len(y)), rate=float(y.mean()),
                       mean_before=float(p[keep].mean()), logloss_before=_loss(x, y), logloss_after=_loss(a * x + b, y))


def _newton(x: np.ndarray, y: np.ndarray, slope: bool) -> tuple[float, float]:
    theta = np.array([1.0, 0.0])
    X = np.stack([x, np.ones_like(x)], axis=1) if slope else np.ones((len(x), 1))
    free = theta if slope else theta[1:]
    base = 0.0 if slope else x
    loss = _loss(X @ free + base, y)
    for _ in range(STEPS):
        z = X @ free + base
        q = 1 / (1 + np.exp(-z))
        grad = X.T @ (q - y) / len(y)
        hess = (X * (q * (1 - q))[:, None]).T @ X / len(y) + RIDGE * np.eye(X.shape[1])
        delta = np.linalg.solve(hess, grad)
        for _ in range(30):   # step halving: the loss never rises
            trial = free - delta
            new = _loss(X @ trial + base, y)
            if new <= loss:
                break
            delta = delta / 2
        else:
            break
        done = loss - new < 1e-12
        free, loss = trial, new
        if done:
            break
    return (float(free[0]), float(free[1])) if slope else (1.0, float(free[0]))


# ---- the run folder's record (rank 0 writes, the evaluation and scoring ranks read) -----------------
def record(run, calibration: Calibration) -> None:
    """Add (or replace) ``calibration``, the fit of its step, in the run's ``RunDir.CALIBRATION_FIT``."""
    fits = _read(run)
    fits[str(calibration.step)] = calibration.to_dict()
    run.write_text(json.dumps(fits, indent=2, sort_keys=True) + "\n", run.CALIBRATION_FIT)


def of_step(run, step: int) -> Calibration | None:
    """The fit recorded for checkpoint ``step`` of ``run`` (a ``RunDir``), or None (the run validated there with
    ``calibrate: false``, never validated there, or was trained before calibration existed)."""
    found = _read(run).get(str(int(step)))
    return None if found is None else Calibration.from_dict(found)


def _read(run) -> dict[str, Any]:
    return json.loads(run.read_text(run.CALIBRATION_FIT)) if run.exists(run.CALIBRATION_FIT) else {}


def describe(calibration: Calibration | None) -> str:
    """One line for the logs."""
    if calibration is None:
        return "no calibration (raw logits)"
    c = calibration
    return (f"calibration a={c.a:.4f} b={c.b:+.4f} (fitted on '{c.split}' at step {c.step}, {c.rows:,} rows: mean "
            f"prediction {c.mean_before:.4f} vs rate {c.rate:.4f}; log loss {c.logloss_before:.4f} -> "
            f"{c.logloss_after:.4f})")


def is_finite(calibration: Calibration) -> bool:
    """Whether ``a`` and ``b`` are finite numbers."""
    return math.isfinite(calibration.a) and math.isfinite(calibration.b)
