"""Calibration (training.calibration): the Platt fit on planted scores matches the rate and keeps the ranking; a run's
fit is what its evaluation, its checkpoint's predictions (what `dlrmflow score --run` writes) and its serving bundle
apply, identically."""

from __future__ import annotations

import json

import numpy as np
import pytest

from training import calibration
from training.metrics import compute_metrics, roc_auc


def _planted(n: int = 20_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from a known logit z, and the miscalibrated scores sigmoid(2 z - 0.7): too sharp, too low."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-1.2, 1.0, n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float32)
    return 1 / (1 + np.exp(-(2.0 * z - 0.7))), labels


def _calibrated(probs: np.ndarray, fit: calibration.Calibration | None) -> np.ndarray:
    logits = np.log(probs) - np.log1p(-probs)
    return 1 / (1 + np.exp(-calibration.apply(logits, fit)))


def test_fit_recovers_the_planted_scale_and_the_rate_without_changing_the_ranking():
    probs, labels = _planted()
    before = compute_metrics(probs, labels)
    assert before["calibration"] < 0.6   # the planted miscalibration: 45% of the clicks predicted
    fit = calibration.fit(probs, labels, step=7, split="val")
    assert fit.a == pytest.approx(0.5, abs=0.03) and fit.b == pytest.approx(0.35, abs=0.05)   # 1/2 z + 0.7/2
    assert (fit.step, fit.split, fit.rows) == (7, "val", len(labels))
    after = compute_metrics(_calibrated(probs, fit), labels)
    assert after["mean_prediction"] == pytest.approx(labels.mean(), abs=1e-6)   # the fit's first-order condition
    assert after["auc"] == before["auc"]   # monotone: the same order of the rows
    assert after["logloss"] < before["logloss"] - 0.1
    assert fit.logloss_after == pytest.approx(after["logloss"], abs=1e-6)
    assert fit.logloss_before == pytest.approx(before["logloss"], abs=1e-6)
    # on fresh rows of the same kind the fit still calibrates (it is not an in-sample artefact)
    fresh_p, fresh_y = _planted(seed=1)
    assert compute_metrics(_calibrated(fresh_p, fit), fresh_y)["calibration"] == pytest.approx(1, abs=0.03)


def test_no_fit_on_one_class_a_reversed_score_keeps_its_order_and_padding_is_ignored():
    probs, labels = _planted(2_000)
    assert calibration.fit(probs, np.zeros_like(labels)) is None
    assert calibration.apply(np.array([0.3]), None) == np.array([0.3])   # no fit: the raw logits
    reversed_ = 1 - probs   # anti-correlated: a negative slope would flip the ranking, so only the bias is fitted
    fit = calibration.fit(reversed_, labels)
    assert fit.a == 1.0
    out = _calibrated(reversed_, fit)
    assert roc_auc(out, labels) == pytest.approx(roc_auc(reversed_, labels), abs=1e-12)
    assert out.mean() == pytest.approx(labels.mean(), abs=1e-6)
    padded = calibration.fit(np.r_[probs, [0.9, 0.9]], np.r_[labels, [-1, -1]])   # label -1: padding rows
    assert (padded.a, padded.b, padded.rows) == (calibration.fit(probs, labels).a, calibration.fit(probs, labels).b,
                                                 len(labels))


def test_fits_are_recorded_by_step_and_the_setting_names_its_runs(tmp_path):
    """A run folder's fits, by step (a step without one: None, the raw logits); turning calibration off gives the
    run another name (a default run never reuses one trained with the other setting)."""
    from training.config import TrainConfig, config_hash
    from training.rundir import RunDir

    run = RunDir(str(tmp_path / "run"))
    assert calibration.of_step(run, 10) is None
    probs, labels = _planted(2_000)
    first, second = calibration.fit(probs, labels, step=10), calibration.fit(probs[:1000], labels[:1000], step=20)
    calibration.record(run, first)
    calibration.record(run, second)
    assert calibration.of_step(run, 10) == first and calibration.of_step(run, 20) == second
    assert calibration.of_step(run, 15) is None
    on, off = TrainConfig(dataset="d"), TrainConfig(dataset="d", calibrate=False)
    assert config_hash(on) != config_hash(off)


@pytest.mark.slow
def test_evaluation_checkpoint_predictions_and_bundle_apply_the_runs_fit(criteo, criteo_run, tmp_path):
    """The run (validated every 4 steps) recorded a fit for its evaluated step; the evaluation says it applied that
    fit, the checkpoint's predictions (those `score --run` writes: tests/models/test_scoring.py) are the raw logits
    through it, the calibrated validation mean matches the validation rate, and the bundle's manifest and module
    carry the same fit (its predictions equal: tests/training/test_export.py)."""
    from helpers.processes import one_rank
    from training.export import export_bundle
    from training.rundir import RunDir
    from training.trainer import Trainer

    run, step = RunDir(str(criteo_run["run"])), criteo_run["evaluation"]["step"]
    fits = json.loads((criteo_run["run"] / RunDir.CALIBRATION_FIT).read_text())
    fit = calibration.of_step(run, step)
    assert fit is not None and fits[str(step)] == fit.to_dict() and fit.split == "val"
    assert abs(fit.a - 1) > 1e-3 or abs(fit.b) > 1e-3   # a real correction, not the identity
    assert criteo_run["evaluation"]["calibration_fit"] == fit.to_dict()

    with one_rank():
        trainer = Trainer.from_run(str(criteo_run["run"]), step)
        assert trainer.calibration == fit
        val_p, val_y = trainer.predict("val")
        trainer.calibration = None
        raw_p, raw_y = trainer.predict("test")
    assert abs(val_p.mean() / val_y.mean() - 1) < 0.01   # calibrated on these rows: the mean matches the rate
    np.testing.assert_array_equal(raw_y, criteo_run["y"])
    np.testing.assert_allclose(_calibrated(raw_p.astype(np.float64), fit), criteo_run["p"], rtol=0, atol=1e-5)
    assert roc_auc(raw_p, raw_y) == pytest.approx(criteo_run["evaluation"]["auc"], abs=1e-4)

    manifest = export_bundle(str(criteo_run["run"]), step, str(tmp_path / "bundle"))
    assert manifest["calibration"] == fit.to_dict()
    assert json.loads((tmp_path / "bundle" / "model.json").read_text())["calibration"] == fit.to_dict()
