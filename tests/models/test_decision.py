"""The promotion gates (models.decision): ties, floors, test rows and positives, same rows, calibration band and
the paired bootstrap interval of the AUC gain; and the gates' settings (nightly.config.PipelineConfig)."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem
from pydantic import ValidationError

from common.atomic import mark_complete
from common.metrics import roc_auc
from models import registry
from models.config import PromoteConfig
from models.decision import RowScores, _resampled_aucs, decide, fingerprint, paired
from models.scoring import row_scores


def metrics(auc: float, logloss: float = 0.45, **more) -> dict:
    """Test-day metrics that pass every gate but the one a test changes."""
    return {"auc": auc, "logloss": logloss, "rows": 3000, "positives": 750, "base_logloss": 0.5623,
            "calibration": 1.0, "fingerprint": "f"} | more


def day(n: int = 3000, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Labels (a quarter positive) and a score that separates them (AUC about 0.7)."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.25).astype(np.float64)
    return labels, labels * 0.8 + rng.normal(size=n)


def scores(probs: np.ndarray, labels: np.ndarray, print_: str = "f") -> RowScores:
    return RowScores(probs, labels, print_)


def test_a_tie_keeps_the_champion():
    decision, reason, _ = decide(metrics(0.70), metrics(0.70))
    assert decision == "kept" and "gate promote_margin: AUC gain +0.0000" in reason and "margin 0" in reason
    assert decide(metrics(0.7001), metrics(0.70))[0] == "promoted"


@pytest.mark.parametrize("auc, decision", [(0.5, "kept"), (0.51, "kept"), (0.515, "first")])
def test_a_first_champion_needs_an_auc_above_chance_plus_the_lift(auc, decision):
    got, reason, _ = decide(metrics(auc), None)
    assert got == decision
    if decision == "kept":
        assert f"gate min_auc_lift: AUC {auc:.4f} is not above 0.5 + 0.01 = 0.51" in reason
    assert decide(metrics(0.515), None, PromoteConfig(min_auc_lift=0.02))[0] == "kept"


def test_a_first_champion_needs_a_log_loss_below_the_base_rates_entropy():
    got, reason, refused = decide(metrics(0.7, logloss=0.57), None)
    assert got == "kept" and refused == ("max_ne",)
    assert ("gate max_ne: normalized entropy 1.0137 (log loss 0.5700 / the test day's base-rate entropy 0.5623) is "
            "not below 1: worse than predicting the day's click rate for every row") in reason
    assert decide(metrics(0.7, logloss=0.57, base_logloss=None), None)[0] == "kept"   # unknown: refused


def test_the_docs_example_night_is_not_promoted_for_a_higher_auc_with_a_worse_log_loss():
    """docs/nightly.md's third night before issue 41: AUC 0.6619 > 0.6591 promoted a model whose log loss 0.6087 was
    worse than the click rate's (0.5562) and than the champion's on the same rows (0.5550)."""
    got, reason, refused = decide(metrics(0.6619, logloss=0.6087, base_logloss=0.5562),
                                  metrics(0.6591, logloss=0.5550, base_logloss=0.5562))
    assert got == "kept" and refused == ("max_ne", "logloss_tolerance")
    assert "gate logloss_tolerance: log loss 0.6087 regresses against the champion's 0.5550 on the same rows by " \
           "+9.68% (more than 1.00%)" in reason


@pytest.mark.parametrize("new_loss, gates, decision", [
    (0.4545, PromoteConfig(), "promoted"),                          # +1.0%: within the tolerance
    (0.4546, PromoteConfig(), "kept"),                              # +1.02%
    (0.4546, PromoteConfig(logloss_tolerance=0.02), "promoted"),
    (0.50, PromoteConfig(logloss_tolerance=None), "promoted"),      # off: AUC alone (NE 0.89 still < 1)
    (0.50, PromoteConfig(logloss_tolerance=0), "kept"),
])
def test_a_log_loss_regression_beyond_the_tolerance_keeps_the_champion(new_loss, gates, decision):
    got, reason, refused = decide(metrics(0.71, logloss=new_loss), metrics(0.70, logloss=0.45), gates)
    assert got == decision
    assert (refused == ("logloss_tolerance",)) == (decision == "kept")


def test_a_chance_level_challenger_never_replaces_a_chance_level_champion():
    """Labels permuted among the rows (issue 46): a challenger at AUC 0.5101 over a champion at 0.5008 was promoted.
    Without signal no model beats the click rate's log loss (NE >= 1), and an AUC at chance is refused, first or
    not."""
    got, reason, refused = decide(metrics(0.5101, logloss=0.5650), metrics(0.5008, logloss=0.5640))
    assert got == "kept" and refused == ("max_ne",)
    got, reason, refused = decide(metrics(0.5050), metrics(0.5008))
    assert got == "kept" and refused == ("min_auc_lift",)
    assert "gate min_auc_lift: AUC 0.5050 is not above 0.5 + 0.01 = 0.51" in reason


def test_the_floors_hold_every_night_and_the_settings_are_checked():
    assert decide(metrics(0.7, logloss=0.57), metrics(0.6, logloss=0.57))[0] == "kept"   # NE >= 1 with a champion
    assert decide(metrics(0.7, logloss=0.55), metrics(0.6, logloss=0.55), PromoteConfig(max_ne=0.97))[2] == \
        ("max_ne",)   # NE 0.978
    for bad in ({"max_ne": 0}, {"max_ne": float("nan")}, {"logloss_tolerance": -0.1}, {"logloss_tolerance": 1}):
        with pytest.raises(ValidationError):
            PromoteConfig(**bad)


@pytest.mark.parametrize("field, value, gate", [
    ("rows", 999, "gate min_test_rows: the test day has 999 rows < 1000"),
    ("positives", 99, "gate min_test_positives: the test day has 99 positives < 100"),
    ("positives", None, "gate min_test_positives: the test day has nan positives < 100"),
])
@pytest.mark.parametrize("champion", [None, metrics(0.6)])
def test_too_few_test_rows_or_positives_never_promote(field, value, gate, champion):
    if champion is not None and field == "rows":
        champion = metrics(0.6, rows=value)
    got, reason, _ = decide(metrics(0.8, **{field: value}), champion)
    assert got == "kept" and gate in reason


@pytest.mark.parametrize("challenger, champion", [
    ({"fingerprint": "a"}, {"fingerprint": "b"}),
    ({"rows": 3000}, {"rows": 2999}),
    ({"fingerprint": None}, {}),
])
def test_models_scored_on_different_rows_are_not_compared(challenger, champion):
    got, reason, _ = decide(metrics(0.8, **challenger), metrics(0.6, **champion))
    assert got == "kept" and "gate same_rows" in reason and "not the same test rows" in reason
    found = {"rows": [3000, 3000], "fingerprints": ["a", "b"], "auc_diff_interval": None}
    got, reason, _ = decide(metrics(0.8), metrics(0.6, paired=found))   # the paired scores' fingerprints decide
    assert got == "kept" and "fingerprint a" in reason and "fingerprint b" in reason


def test_the_calibration_band():
    band = PromoteConfig(calibration_band=(0.8, 1.25))
    got, reason, _ = decide(metrics(0.8, calibration=1.4), metrics(0.6), band)
    assert got == "kept" and "gate calibration_band: challenger predicted/observed clicks 1.400 outside " \
                             "[0.8, 1.25]" in reason
    assert decide(metrics(0.8, calibration=1.4), metrics(0.6))[0] == "promoted"   # off by default
    assert decide(metrics(0.8, calibration=0.9), None, band)[0] == "first"
    assert decide(metrics(0.8, calibration=0.7), None, band)[0] == "kept"


def test_every_refusal_is_named():
    got, reason, refused = decide(metrics(0.69, positives=10, fingerprint="x"), metrics(0.70),
                                  PromoteConfig(margin=0.01))
    assert got == "kept" and refused == ("same_rows", "min_test_positives", "promote_margin")
    for gate in ("same_rows", "min_test_positives", "promote_margin"):
        assert f"gate {gate}:" in reason


def test_resampled_aucs_are_the_aucs_of_the_resampled_rows():
    labels, probs = day(500)
    probs = np.round(probs, 1)   # many ties
    draws = np.random.default_rng(3).integers(0, 500, (4, 500))
    got = _resampled_aucs(probs, labels, draws)
    assert got == pytest.approx([roc_auc(probs[d], labels[d]) for d in draws], abs=1e-12)
    assert _resampled_aucs(probs, labels, np.arange(500)[None])[0] == pytest.approx(roc_auc(probs, labels), abs=1e-12)


def test_a_non_significant_gain_is_kept_and_a_clear_one_promoted():
    labels, old = day()
    slightly = labels * 0.8 + np.random.default_rng(4).normal(size=len(labels))   # as good: a gain by chance
    clearly = old + labels * 0.5
    gates = PromoteConfig(confidence=0.95)
    for new, promoted in ((slightly, False), (clearly, True)):
        start = time.perf_counter()
        found = paired(scores(new, labels), scores(old, labels), gates.confidence)
        took = time.perf_counter() - start
        assert took < 2.0, f"1000 resamples of 3000 rows took {took:.2f} s"   # about 0.3 s on 2 cores
        assert found == paired(scores(new, labels), scores(old, labels), gates.confidence)   # seeded
        gain = roc_auc(new, labels) - roc_auc(old, labels)
        lo, hi = found["auc_diff_interval"]
        assert lo < gain < hi and found["resamples"] == 1000
        challenger, champion = metrics(roc_auc(new, labels)), metrics(roc_auc(old, labels), paired=found)
        if not promoted:
            assert 0 < gain and lo < 0   # better, but not significantly
            assert decide(challenger, champion)[0] == "promoted"   # no significance gate by default
        got, reason, _ = decide(challenger, champion, gates)
        assert got == ("promoted" if promoted else "kept"), reason
        assert f"[{lo:+.4f}, {hi:+.4f}]" in reason
        if not promoted:
            assert "gate promote_confidence: the 0.95 interval of the AUC gain" in reason
    assert decide(metrics(0.8), metrics(0.6), gates)[0] == "kept"   # no interval known: refused


def test_no_interval_for_other_rows_or_without_a_confidence():
    labels, old = day(1000)
    assert paired(scores(old, labels, "a"), scores(old, labels, "b"), 0.95)["auc_diff_interval"] is None
    assert paired(scores(old, labels), scores(old, labels), None)["auc_diff_interval"] is None
    assert paired(scores(old, labels), scores(old, labels), 0.9)["auc_diff_interval"] == [0.0, 0.0]


def test_row_scores_pair_up_whatever_the_order_and_fingerprint_the_rows(tmp_path):
    labels, probs = day(100)
    files = np.array(["a.tsv"] * 60 + ["b.tsv"] * 40, dtype=object)
    rows = np.r_[np.arange(60), np.arange(40)]

    def write(order, name, labels=labels):
        out = str(tmp_path / name)
        pq.write_table(pa.table({"file": files[order], "row": rows[order], "probability": probs[order].astype(
            np.float32), "label": labels[order].astype(np.float32)}), out)
        mark_complete(out, LocalFileSystem(), rows=100)   # as training.score.write_scores
        return row_scores(out)

    ordered = write(np.arange(100), "ordered.parquet")
    shuffled = write(np.random.default_rng(0).permutation(100), "shuffled.parquet")
    assert ordered.fingerprint == shuffled.fingerprint == fingerprint(files, rows, labels)
    assert np.array_equal(ordered.probs, shuffled.probs) and np.array_equal(ordered.labels, labels)
    flipped = labels.copy()
    flipped[7] = 1 - flipped[7]
    assert write(np.arange(100), "flipped.parquet", flipped).fingerprint != ordered.fingerprint
    assert write(np.arange(99), "fewer.parquet").fingerprint != ordered.fingerprint


def test_record_writes_the_gates_the_interval_and_both_calibrations(tmp_path):
    model = str(tmp_path / "models" / "ctr")
    night = {"run": "/store/runs/r1", "step": 1, "dataset": "d", "vocab": "d/vocab", "date": "2026-11-01",
             "window": ["2026-11-01"], "metrics": metrics(0.5)}
    first = registry.record(model, registry.NightRecord(night))
    assert first["decision"] == "kept" and "gate min_auc_lift" in first["reason"]
    assert registry.load_champion(model) is None
    registry.record(model, registry.NightRecord(
        {**night, "run": "/store/runs/r2", "date": "2026-11-02", "metrics": metrics(0.7)}))
    found = {"rows": [3000, 3000], "fingerprints": ["f", "f"], "confidence": 0.95, "auc_diff_interval": [-0.01, 0.03]}
    entry = registry.record(model, registry.NightRecord(
        {**night, "run": "/store/runs/r3", "date": "2026-11-03", "metrics": metrics(0.72, calibration=1.1)},
        score_champion=lambda c: metrics(0.71, calibration=0.9, paired=found),
        gates=PromoteConfig(confidence=0.95, calibration_band=(0.8, 1.25))))
    assert entry["decision"] == "kept" and "gate promote_confidence" in entry["reason"]
    line = registry.history(model)[-1]
    assert line == entry and line["paired"] == found
    assert (line["challenger"]["calibration"], line["champion"]["calibration"]) == (1.1, 0.9)
    assert line["challenger"]["fingerprint"] == line["champion"]["fingerprint"] == "f"
    assert line["gates"] == {"margin": 0.0, "min_auc_lift": 0.01, "max_ne": 1.0, "logloss_tolerance": 0.01,
                             "min_test_rows": 1000, "min_test_positives": 100, "confidence": 0.95,
                             "calibration_band": [0.8, 1.25], "slice_max_loss": None, "slice_min_share": 0.05}
    assert line["refused"] == ["promote_confidence"]


def test_the_gates_settings():
    from nightly.config import PipelineConfig

    assert PipelineConfig().promote == PromoteConfig()
    config = PipelineConfig(promote={"margin": 0.001, "confidence": 0.9, "calibration_band": [0.8, 1.25]})
    assert config.promote == PromoteConfig(margin=0.001, confidence=0.9, calibration_band=(0.8, 1.25))


def test_the_once_flat_settings_are_read_with_a_warning_once_and_not_both_ways(monkeypatch):
    """Persisted state (a YAML file, a deployment's parameters) still reads the old names, into their group, warning
    once a process for each, naming the version that removes them; given both ways, it is an error."""
    import warnings

    from nightly import config as nightly_config
    from nightly.config import RENAMED_UNTIL, PipelineConfig, grouped

    monkeypatch.setattr(nightly_config, "_warned", set())
    with pytest.warns(FutureWarning) as warned:
        old = PipelineConfig(promote_margin=0.001, promote_confidence=0.9, calibration_band=[0.8, 1.25],
                             warm_start=False, catchup="latest", on_data_check="warn", notify_block="custom-webhook/x")
    assert len(warned) == 7 and all(f"until dlrmflow {RENAMED_UNTIL}, which removes it" in str(w.message)
                                    for w in warned)
    assert "'promote_margin' is promote.margin now" in str(warned[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # once: the same old name again warns no more
        assert PipelineConfig(promote_margin=0.002).promote.margin == 0.002
    assert old.promote == PromoteConfig(margin=0.001, confidence=0.9, calibration_band=(0.8, 1.25), warm_start=False)
    assert (old.night.catchup, old.night.on_data_check, old.night.notify_block) == ("latest", "warn",
                                                                                   "custom-webhook/x")
    with pytest.raises(ValidationError, match="promote_margin is the old name of promote.margin, and both are given"):
        PipelineConfig(promote_margin=0.001, promote={"margin": 0.002})
    # the failure hook reads what it can: the new name wins
    assert grouped({"promote_margin": 0.001, "promote": {"margin": 0.002}}, strict=False) == {
        "promote": {"margin": 0.002}}
    for bad, says in [({"calibration_band": [1.25, 0.8]}, "calibration_band"), ({"promote_confidence": 1.0},
                      "promote_confidence"), ({"min_test_rows": 0}, "min_test_rows"), ({"min_auc_lift": 0.5},
                      "min_auc_lift"), ({"promote_margin": -0.1}, "promote_margin")]:
        with pytest.raises(ValidationError, match=says):
            PipelineConfig(**bad)
    with pytest.raises(ValidationError, match="calibration_band"):
        PromoteConfig(calibration_band=(0.8,))
