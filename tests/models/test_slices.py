"""Metrics per slice (issue 41 §3): ``common.metrics.slices``/``gauc`` against direct computations, the promotion's
per-slice floor on a planted test day where one slice's relation to the label changes while the global AUC improves,
and the champion's watch (``models.watch``) on a series of nights."""

from __future__ import annotations

import math

import numpy as np
import pytest

from common import metrics
from models import PromoteConfig, paired
from models.decision import RowScores, decide
from models.slices import compare, slice_refusals
from models.watch import degraded, series, watch
from training.metrics import binary_entropy, compute_metrics


def _direct(p: np.ndarray, y: np.ndarray) -> dict:
    """AUC by counting every (positive, negative) pair, log loss and NE as written in their definitions."""
    pos, neg = p[y == 1], p[y == 0]
    auc = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (len(pos) * len(neg))
    q = np.clip(p, 1e-7, 1 - 1e-7)
    loss = float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))
    return {"auc": float(auc), "logloss": loss, "normalized_entropy": loss / binary_entropy(y.mean()),
            "calibration": float(p.mean() / y.mean())}


def test_slices_and_gauc_agree_with_direct_computations():
    rng = np.random.default_rng(3)
    n = 6000
    keys = rng.choice(np.array(["a", "b", "c", "d", "e", "f", "g"]), n, p=[.3, .2, .17, .13, .1, .06, .04])
    p = np.round(rng.random(n), 2)   # many ties
    y = (rng.random(n) < p).astype(np.float64)
    table = metrics.slices(p, y, keys, top=3)
    assert [r["value"] for r in table] == ["a", "b", "c", None]   # most rows first, then the rest
    assert sum(r["rows"] for r in table) == n and table[-1]["rows"] == int(np.isin(keys, ["d", "e", "f", "g"]).sum())
    for row in table:
        mask = np.isin(keys, ["d", "e", "f", "g"]) if row["value"] is None else keys == row["value"]
        want = _direct(p[mask], y[mask])
        assert row["rows"] == mask.sum() and row["positives"] == int(y[mask].sum())
        assert row["share"] == pytest.approx(mask.mean())
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=1e-9), (row["value"], key)
    # ties between values of equal rows are broken by the value; a slice of one class has no AUC
    tied = metrics.slices(np.array([.1, .9, .2, .3]), np.array([0., 1., 0., 0.]), np.array([2, 2, 1, 1]), top=1)
    assert [r["value"] for r in tied] == [1, None] and tied[0]["auc"] is None and tied[1]["auc"] == 1.0

    users = rng.integers(0, 300, n)
    users[:40] = 999   # one group of a single class: left out of the GAUC
    y[:40] = 0
    got = metrics.gauc(p, y, users)
    aucs, weights = [], []
    for u in np.unique(users):
        m = users == u
        if 0 < y[m].sum() < m.sum():
            aucs.append(_direct(p[m], y[m])["auc"])
            weights.append(m.sum())
    assert got["groups"] == len(aucs) < got["groups_total"] == len(np.unique(users))
    assert got["gauc"] == pytest.approx(np.average(aucs, weights=weights), rel=1e-12)
    assert got["rows"] == sum(weights)
    # a non-finite prediction leaves its group without AUC and log loss, the others untouched
    bad = p.copy()
    bad[keys == "b"] = np.where(np.arange((keys == "b").sum()) == 0, np.nan, bad[keys == "b"])
    rows = {r["value"]: r for r in metrics.slices(bad, y, keys, top=3)}
    assert rows["b"]["auc"] is None and rows["b"]["logloss"] is None and rows["a"]["auc"] is not None


def _metrics(scores: RowScores) -> dict:
    return compute_metrics(scores.probs, scores.labels) | {"fingerprint": scores.fingerprint}


def planted_day(n: int = 40_000, seed: int = 0):
    """A test day whose slice C3=FR (8% of rows) changed: the challenger is sharper than the champion everywhere
    but has lost FR's relation to the label (its FR scores shuffled among FR's rows). Returns (keys, challenger,
    champion) as RowScores of the same rows."""
    rng = np.random.default_rng(seed)
    keys = rng.choice(np.array(["US", "DE", "FR"]), n, p=[0.52, 0.40, 0.08])
    logit = rng.normal(0, 1.5, n) - 1.2
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    champion = 1 / (1 + np.exp(-(logit + rng.normal(0, 1.0, n)) / 1.3))
    challenger = 1 / (1 + np.exp(-(logit + rng.normal(0, 0.5, n))))
    fr = np.flatnonzero(keys == "FR")
    challenger[fr] = challenger[rng.permutation(fr)]
    return keys, RowScores(challenger, y, "same"), RowScores(champion, y, "same")


def test_a_slice_that_got_worse_is_caught_though_the_global_auc_improves():
    keys, new, old = planted_day()
    mine, theirs = _metrics(new), _metrics(old)
    assert mine["auc"] - theirs["auc"] > 0.01   # globally the challenger wins clearly
    champion = theirs | {"paired": paired(new, old, None)}
    assert decide(mine, champion, PromoteConfig()).decision == "promoted"

    found = compare("C3", keys, new, old, top=10)
    rows = {r["value"]: r for r in found["challenger"]}
    old_rows = {r["value"]: r for r in found["champion"]}
    assert list(rows) == ["US", "DE", "FR"] and rows["FR"]["share"] == pytest.approx(np.mean(keys == "FR"))
    assert rows["FR"]["auc"] < 0.55 < old_rows["FR"]["auc"] - 0.1   # the table names the slice that broke
    assert rows["US"]["auc"] > old_rows["US"]["auc"] and rows["DE"]["auc"] > old_rows["DE"]["auc"]

    gates = PromoteConfig(slice_max_loss=0.02, slice_min_share=0.05)
    decision = decide(mine, champion | {"slices": found}, gates)
    assert decision.decision == "kept" and "slice_max_loss" in decision.refused
    assert "gate slice_max_loss: slice C3=FR (8% of rows): AUC 0." in decision.reason, decision.reason
    assert "C3=US" not in decision.reason and "C3=DE" not in decision.reason
    # a slice under slice_min_share is not judged; nor without the gate
    assert slice_refusals(found["challenger"], found["champion"], gates.model_copy(update={"slice_min_share": 0.1}),
                          "C3") == []
    assert decide(mine, champion | {"slices": found}, PromoteConfig()).decision == "promoted"
    # other rows' scores of another day (another fingerprint) are never compared per slice
    assert compare("C3", keys, new, RowScores(old.probs, old.labels, "other"), top=10) is None


def test_slice_refusals_skip_other_and_slices_without_an_auc():
    gates = PromoteConfig(slice_max_loss=0.01, slice_min_share=0.05)
    mine = [{"value": "x", "share": 0.5, "auc": None}, {"value": "other", "share": 0.5, "auc": 0.5}]
    theirs = [{"value": "x", "share": 0.5, "auc": 0.9}, {"value": "other", "share": 0.5, "auc": 0.9}]
    assert slice_refusals(mine, theirs, gates, "C3") == []
    mine[0]["auc"] = 0.88
    assert slice_refusals(mine, theirs, gates, "C3") == [
        "slice C3=x (50% of rows): AUC 0.8800 vs champion 0.9000 (-0.0200 < -0.01)"]


def _line(date: str, run: str, champion_run: str | None, champion: dict | None, decision: str = "kept",
          challenger: dict | None = None) -> dict:
    return {"date": date, "run": run, "champion_run": champion_run, "champion": champion,
            "challenger": challenger or {"auc": 0.6}, "decision": decision}


def test_the_champion_is_watched_against_its_own_recent_nights():
    night = {"auc": 0.75, "logloss": 0.45, "base_logloss": 0.56}
    lines = [_line("2026-11-01", "r0", None, None, "first", {"auc": 0.74, "logloss": 0.46, "base_logloss": 0.56}),
             *[_line(f"2026-11-0{d}", f"r{d}", "r0", night | {"auc": 0.75 + d / 1000}) for d in range(2, 6)],
             _line("2026-11-06", "r6", "other", {"auc": 0.2, "logloss": 0.9, "base_logloss": 0.56}),   # not its
             _line("2026-11-09", "r9", "r0", {"auc": 0.3})]   # on or after tonight: not before
    earlier = series(lines, "r0", "2026-11-09")
    assert [m["date"] for m in earlier] == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"]
    assert earlier[0]["auc"] == 0.74   # its promotion night's metrics, as the challenger then
    gates = PromoteConfig()

    steady = watch(earlier, night | {"auc": 0.74}, gates)
    assert steady["degraded"] == [] and steady["nights"] == 5 and steady["auc_median"] == pytest.approx(0.753)
    drop = watch(earlier, night | {"auc": 0.72}, gates)
    assert drop["degraded"] == ["champion AUC 0.7200 below the median 0.7530 of its last 5 nights minus "
                                "watch_auc_drop 0.02"]
    worse = watch(earlier, night | {"logloss": 0.48}, gates)   # NE 0.857 vs a median of 0.804
    assert len(worse["degraded"]) == 1 and "normalized entropy 0.8571 above the median 0.8036" in worse["degraded"][0]
    assert math.isclose(worse["ne"], 0.48 / 0.56)
    # only its last watch_nights nights count; with fewer than 3 no band is judged, chance level always is
    assert watch(earlier, night | {"auc": 0.72}, gates.model_copy(update={"watch_nights": 2}))["degraded"] == []
    chance = watch(earlier[:1], night | {"auc": 0.505}, gates)
    assert chance["degraded"] == ["champion AUC 0.5050 at chance level (not above 0.5 + min_auc_lift 0.01)"]
    assert watch(earlier, night | {"auc": 0.6}, gates.model_copy(update={"watch_auc_drop": None}))["degraded"] == []
    # announced when no challenger won that night
    assert degraded({"decision": "kept", "watch": drop}) == drop["degraded"]
    assert degraded({"decision": "promoted", "watch": drop}) == [] and degraded({"decision": "kept"}) == []


def test_slices_are_named_by_raw_values_in_evaluations_and_scores(criteo, tmp_path):
    """On real Criteo rows preprocessed with a frequency threshold: an evaluation's slices by C3 (the test split's
    stored indices, ``training.evaluate_slices.report``) and a scoring's slice column (``models.scoring``, the raw
    test file encoded with the dataset's vocabulary) both carry C3's raw values, index 0 as missing or rare."""
    from feature_spec import load as load_spec
    from models.scoring import _add_slice, slice_column
    from preprocessing.apply import encode_inputs
    from training.evaluate_slices import INDEX0, report

    import pyarrow.parquet as pq

    raw = [line.split("\t") for line in criteo["raw"]["test"].read_text().splitlines()]
    c3 = np.array([fields[16] for fields in raw], dtype=object)   # label, I1..I13, C1, C2, C3
    train = [line.split("\t")[16] for line in criteo["raw"]["train"].read_text().splitlines()]
    seen = {v for v in train if v and train.count(v) >= 2}   # frequency_threshold 2 on the train split
    want = np.array([v if v in seen else INDEX0 for v in c3], dtype=object)

    dataset = str(criteo["dataset"])
    spec = load_spec(dataset)
    n = len(raw)
    labels = np.array([float(fields[0]) for fields in raw])
    probs = np.random.default_rng(0).random(n)
    found = report(probs, labels, dataset, spec, "test", np.arange(n), "C3", 5, "C1")
    table = found["slices"]["table"]
    assert found["slices"]["by"] == "C3" and len(table) == 6 and table[-1]["value"] == "other"
    for row in table[:-1]:
        assert row["rows"] == int((want == row["value"]).sum()) > 0, row["value"]
    assert {r["value"] for r in table} - {INDEX0, "other"} <= seen   # raw values, not indices
    assert found["gauc"]["by"] == "C1" and found["gauc"]["groups_total"] > 1

    encoded = encode_inputs(dataset, [str(criteo["raw"]["test"])], tmp_path / "enc", progress=False)
    _add_slice(encoded, dataset, "C3")
    positions = pq.read_table(encoded.positions)
    assert positions.column(slice_column("C3")).to_pylist() == list(want)
