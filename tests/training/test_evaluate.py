"""`dlrmflow evaluate` end to end (real torchrun) on the session's 2-rank run (helpers/fixtures.py two_rank_run):
1 rank and 2 ranks give the same metrics; the files land in <run>/eval/<split>/; the metrics are those of the
checkpoint's own predictions."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from helpers.paths import REPO
from helpers.processes import one_rank, run_dlrmflow
from training.config import EvaluateConfig
from training.evaluate import evaluate_run

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(400)
def test_cli_one_rank_then_api_two_ranks_agree(two_rank_run):
    run = two_rank_run
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = run_dlrmflow("evaluate", "--run", run, "--slice-by", "c0", "--gauc-by", "c1", cwd=REPO, env=env,
                        timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = run / "eval" / "test"
    for line in ("ROC AUC", "normalized entropy", "PR AUC", "calibration", f"wrote {out}/metrics.json"):
        assert line in proc.stdout, proc.stdout
    one = json.loads((out / "metrics.json").read_text())
    best = json.loads((run / "checkpoints" / "best").read_text())
    assert one["step"] == best["step"] and one["checkpoint"] == "best" and one["split"] == "test"
    assert one["rows"] == 777 and one["world_size"] == 1 and one["dataset"].endswith("ds")  # (helpers/fixtures.py small_dataset)
    for name in ("roc.png", "calibration.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]

    # the same checkpoint by its step number, on 2 ranks, through the Python API
    two = evaluate_run(str(run), EvaluateConfig(checkpoint=best["step"], slice_by="c0", gauc_by="c1"),
                       launcher={"kind": "local", "nproc": 2}, env={"OMP_NUM_THREADS": "1"}, on_line=lambda _: None)
    assert two["world_size"] == 2 and two["rows"] == 777 and two["positives"] == one["positives"]
    for k in ("auc", "pr_auc", "logloss", "normalized_entropy", "accuracy", "calibration", "base_logloss"):
        assert two[k] == pytest.approx(one[k], rel=1e-6, abs=1e-7), k
    assert one["auc"] > 0.6  # the planted signal was learned

    # independent check: the metrics of the checkpoint's predictions, computed in this test
    from training.trainer import Trainer

    with one_rank():
        p, y = Trainer.from_run(str(run), best["step"]).predict("test")
    pos, neg = p[y == 1], p[y == 0]
    auc = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (len(pos) * len(neg))
    q = np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7)
    ref = {"auc": float(auc), "logloss": float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))}
    assert one["auc"] == pytest.approx(ref["auc"], abs=1e-9) and one["logloss"] == pytest.approx(ref["logloss"], rel=1e-6)

    # metrics per slice of c0 (its 10 most frequent values, then 'other') and the GAUC by c1: the same on 2 ranks,
    # and those of the checkpoint's own predictions (1 rank: file order) grouped here
    assert "slices by c0" in proc.stdout and "GAUC by c1" in proc.stdout
    table = one["slices"]["table"]
    assert one["slices"]["by"] == "c0" and len(table) == 11 and table[-1]["value"] == "other"
    assert [(r["value"], r["rows"]) for r in two["slices"]["table"]] == [(r["value"], r["rows"]) for r in table]
    for mine, theirs in zip(table, two["slices"]["table"]):
        assert mine["auc"] == pytest.approx(theirs["auc"], abs=1e-6) and mine["positives"] == theirs["positives"]
    assert two["gauc"]["gauc"] == pytest.approx(one["gauc"]["gauc"], abs=1e-6) and one["gauc"]["groups"] > 50
    from feature_spec import load as load_spec

    c0 = np.fromfile(f"{one['dataset']}/test/cat_c0.bin", load_spec(one["dataset"]).feature_spec["c0"].dtype)
    top = table[0]
    mask = c0 == top["value"]   # no vocabulary: the values are the indices
    pos, neg = p[mask & (y == 1)], p[mask & (y == 0)]
    auc = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (len(pos) * len(neg))
    assert top["rows"] == mask.sum() == max(np.bincount(c0)) and top["auc"] == pytest.approx(auc, abs=1e-9)
