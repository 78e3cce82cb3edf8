"""Named models: the promotion rule, the promotion lock (a common.lease: its S3 tests are in
tests/common/test_lease.py), history and champion under concurrent promotions from two processes, and the history
pictures."""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import time
from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from common import lease
from common.errors import UserError
from common.store import filesystem
from models.config import PromoteConfig
from models.decision import decide
from models import registry as models


def metrics(auc: float | None, logloss: float | None = 0.45, **more) -> dict:
    """A model's test-day metrics as scoring gives them: 1000 rows, a quarter positive, same rows ("f")."""
    return {"auc": auc, "logloss": logloss, "rows": 1000, "positives": 250, "base_logloss": 0.5623,
            "calibration": 1.0, "fingerprint": "f"} | more


def candidate(run: str, date: str, auc: float, logloss: float = 0.45) -> dict:
    """A challenger as the pipeline gives it to ``record``."""
    return {"run": f"/store/runs/{run}", "step": 10, "dataset": f"/store/datasets/d-{date}",
            "vocab": f"/store/datasets/d-{date}/vocab", "date": date, "window": [date], "metrics":
            metrics(auc, logloss)}


def score_stored(champion: models.Champion) -> dict:
    """The champion's metrics on the day: here the ones it was promoted with."""
    return dict(champion.metrics)


@pytest.fixture(params=["local", "s3"])
def model(request, tmp_path) -> str:
    """A model folder in a local store and in an S3 store (moto's server)."""
    if request.param == "s3":
        request.getfixturevalue("s3_server")
        return "s3://store/dlrm/models/ctr"
    return str(tmp_path / "store" / "models" / "ctr")


def read(model: str, name: str) -> str | None:
    return models._read(model, name)


# --- decide -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("challenger, champion, margin, decision", [
    (0.70, None, 0.0, "first"),
    (0.70, 0.69, 0.0, "promoted"),
    (0.70, 0.70, 0.0, "kept"),           # a tie keeps the champion
    (0.70, 0.69, 0.02, "kept"),          # not better by the margin
    (0.73, 0.70, 0.02, "promoted"),
    (0.60, 0.70, 0.0, "kept"),
    (math.nan, 0.70, 0.0, "kept"),       # NaN never promotes
    (math.nan, None, 0.0, "kept"),
    (0.70, math.nan, 0.0, "kept"),
    (None, 0.70, 0.0, "kept"),           # a missing AUC counts as NaN
    (math.inf, 0.70, 0.0, "kept"),
    (0.70, -math.inf, 0.0, "kept"),
])
def test_decide(challenger, champion, margin, decision):
    got, reason, _ = decide(metrics(challenger, 0.41), None if champion is None else metrics(champion, 0.43),
                         PromoteConfig(margin=margin))
    assert got == decision
    assert "0.4100" in reason and (champion is None or "0.4300" in reason)  # log loss reported too


@pytest.mark.parametrize("challenger_ll, champion_ll, side", [
    (math.nan, 0.43, "challenger's"), (None, 0.43, "challenger's"), (math.inf, 0.43, "challenger's"),
    (0.41, math.nan, "champion's"), (0.41, None, "champion's"), (0.41, math.inf, "champion's"),
])
def test_decide_needs_finite_log_loss_on_both_sides(challenger_ll, champion_ll, side):
    """A better AUC with a non-finite log loss (a model predicting NaN or 0/1 where it is wrong) never promotes."""
    got, reason, _ = decide(metrics(0.9, challenger_ll), metrics(0.7, champion_ll))
    assert got == "kept" and f"the {side} metrics are not finite" in reason
    got, reason, _ = decide(metrics(0.9, challenger_ll), None)
    assert got == ("first" if side == "champion's" else "kept")


def test_record_champion_with_non_finite_metrics_counts_as_absent(tmp_path):
    """A champion promoted with non-finite metrics (e.g. AUC 1.0 from NaN ranks and a null log loss, before this
    check) is replaced by a healthy challenger, without scoring it; a non-finite challenger is never promoted."""
    model = str(tmp_path / "store" / "models" / "ctr")
    os.makedirs(model)
    bad = {**candidate("diverged", "2026-11-01", 1.0), "name": "ctr", "promoted_at": "2026-11-01T00:00:00+00:00"}
    bad["metrics"] = metrics(1.0, None)
    with open(os.path.join(model, models.CHAMPION_FILE), "w") as f:
        json.dump(bad, f)
    assert models.load_champion(model).metrics["logloss"] is None

    def never(_):
        raise AssertionError("a champion that counts as absent is not scored")

    kept = models.record(model, models.NightRecord(
        candidate("nan", "2026-11-02", math.nan, math.nan), score_champion=never))
    assert kept["decision"] == "kept" and "not finite" in kept["reason"]
    assert models.load_champion(model).run == "/store/runs/diverged"
    entry = models.record(model, models.NightRecord(candidate("healthy", "2026-11-03", 0.71), score_champion=never))
    assert entry["decision"] == "first" and "counts as absent" in entry["reason"]
    assert entry["champion_run"] == "/store/runs/diverged"
    assert models.load_champion(model).run == "/store/runs/healthy"


@pytest.mark.parametrize("margin", [-0.01, math.nan, math.inf])
def test_decide_rejects_bad_margins(margin):
    with pytest.raises(ValidationError, match="promote_margin .* fix:"):
        PromoteConfig(margin=margin)


# --- record -----------------------------------------------------------------------------------------------------

def test_record_first_promoted_kept_and_idempotent(model):
    first = models.record(model, models.NightRecord(candidate("r1", "2026-11-01", 0.70)))
    assert first["decision"] == "first" and first["champion"] is None and first["champion_run"] is None
    assert models.load_champion(model).run == "/store/runs/r1"

    second = models.record(model, models.NightRecord(
        candidate("r2", "2026-11-02", 0.72), champion_metrics=metrics(0.71, 0.5), champion_run="/store/runs/r1",
        gates=PromoteConfig(margin=0.005)))
    assert second["decision"] == "promoted" and second["champion"]["auc"] == 0.71
    assert second["champion_run"] == "/store/runs/r1" and second["promote_margin"] == 0.005

    third = models.record(model, models.NightRecord(
        candidate("r3", "2026-11-03", 0.71), champion_metrics=metrics(0.715), champion_run="/store/runs/r2"))
    assert third["decision"] == "kept"
    champion = models.load_champion(model)
    assert (champion.run, champion.date, champion.name) == ("/store/runs/r2", "2026-11-02", "ctr")
    assert champion.metrics == metrics(0.72)
    assert champion.promoted_at == second["at"]

    again = models.record(model, models.NightRecord(
        candidate("r2", "2026-11-02", 0.99)))  # a re-run of night 2: the same line
    assert again == second
    lines = models.history(model)
    assert [(e["run"], e["decision"]) for e in lines] == [
        ("/store/runs/r1", "first"), ("/store/runs/r2", "promoted"), ("/store/runs/r3", "kept")]
    assert lines == [first, second, third]
    assert read(model, models.LOCK_FILE) is None  # released


def test_a_night_that_failed_before_its_decision_is_recorded_once_and_is_no_decision(tmp_path):
    """The simulated month (benchmarks/month.py): a day cut mid-line failed its nights in preprocessing and left no
    history line."""
    model = str(tmp_path / "models" / "ctr")
    error = "/logs/2026-11-02/part-00000.tsv: line 2401: has 23 fields, expected 40. Fix: ..."
    line = models.record_failed(model, "2026-11-02", "preprocess", error)
    assert (line["date"], line["decision"], line["stage"], line["run"]) == ("2026-11-02", "failed", "preprocess", None)
    assert line["reason"] == f"failed at preprocess: {error}"
    assert models.record_failed(model, "2026-11-02", "preprocess", error) is None   # a re-run failing the same way
    later = models.record_failed(model, "2026-11-02", "train", "training stopped")   # failing otherwise: recorded
    assert models.history(model) == [line, later]
    assert models.decided_dates(model) == [] and models.load_champion(model) is None
    assert models.windows_in_use(str(tmp_path)) == {}
    decided = models.record(model, models.NightRecord(candidate("r1", "2026-11-03", 0.70)))
    assert models.record_failed(model, "2026-11-03", "gc", "after the decision") is None   # a decision stands
    assert models.history(model) == [line, later, decided] and models.decided_dates(model) == ["2026-11-03"]
    assert read(model, models.LOCK_FILE) is None


def test_a_nan_auc_is_recorded_as_null_and_never_promotes(tmp_path):
    model = str(tmp_path / "models" / "ctr")
    entry = models.record(model, models.NightRecord(candidate("r1", "2026-11-01", math.nan)))
    assert entry["decision"] == "kept" and entry["challenger"]["auc"] is None
    assert models.history(model) == [entry] and models.load_champion(model) is None


def test_champion_changed_while_training(model):
    models.record(model, models.NightRecord(candidate("r1", "2026-11-01", 0.70)))
    models.record(model, models.NightRecord(
        candidate("r2", "2026-11-02", 0.75), champion_metrics=metrics(0.70), champion_run="/store/runs/r1"))
    # r3 scored r1 (the champion when it started); r2 has been promoted since: r2 is scored under the lock
    scored = []
    entry = models.record(model, models.NightRecord(
        candidate("r3", "2026-11-03", 0.74), champion_metrics=metrics(0.70), champion_run="/store/runs/r1",
        score_champion=lambda c: scored.append(c.run) or metrics(0.76, 0.4)))
    assert scored == ["/store/runs/r2"]
    assert (entry["decision"], entry["champion_run"], entry["champion"]["auc"]) == ("kept", "/store/runs/r2", 0.76)
    # without a way to score it, the champion is kept
    entry = models.record(model, models.NightRecord(
        candidate("r4", "2026-11-04", 0.99), champion_metrics=metrics(0.5), champion_run="/store/runs/r1"))
    assert entry["decision"] == "kept" and "no metrics of it" in entry["reason"]
    assert models.load_champion(model).run == "/store/runs/r2"


def test_an_older_days_model_never_replaces_a_newer_champion(model):
    models.record(model, models.NightRecord(candidate("r6", "2026-11-06", 0.70)))
    entry = models.record(model, models.NightRecord(
        candidate("r5", "2026-11-05", 0.99), score_champion=lambda c: 1 / 0))  # a backfill
    assert entry["decision"] == "kept" and "later day (2026-11-06)" in entry["reason"]
    assert models.load_champion(model).run == "/store/runs/r6"


def test_a_failure_before_the_writes_changes_nothing(model):
    models.record(model, models.NightRecord(candidate("r1", "2026-11-01", 0.70)))
    before = (read(model, models.CHAMPION_FILE), read(model, models.HISTORY_FILE))

    def crash(champion):
        raise RuntimeError("scoring crashed")

    with pytest.raises(RuntimeError, match="scoring crashed"):
        models.record(model, models.NightRecord(candidate("r2", "2026-11-02", 0.9), score_champion=crash))
    assert (read(model, models.CHAMPION_FILE), read(model, models.HISTORY_FILE)) == before
    assert read(model, models.LOCK_FILE) is None
    entry = models.record(model, models.NightRecord(
        candidate("r2", "2026-11-02", 0.9), score_champion=score_stored))  # the re-run
    assert entry["decision"] == "promoted" and models.load_champion(model).run == "/store/runs/r2"


def test_a_rerun_repairs_history_saying_promoted_with_an_older_champion(tmp_path):
    """What the order before issue 19 could leave (history line, then a crash before champion.json): a re-run
    writes champion.json and decides nothing again."""
    model = str(tmp_path / "models" / "ctr")
    models.record(model, models.NightRecord(candidate("r1", "2026-11-01", 0.70)))
    before = read(model, models.CHAMPION_FILE)
    entry = models.record(model, models.NightRecord(candidate("r2", "2026-11-02", 0.8), score_champion=score_stored))
    champion = read(model, models.CHAMPION_FILE)
    (tmp_path / "models" / "ctr" / models.CHAMPION_FILE).write_text(before)   # champion.json older than history
    again = models.record(model, models.NightRecord(candidate("r2", "2026-11-02", 0.8), score_champion=lambda c: 1 / 0))
    assert again == entry and len(models.history(model)) == 2
    assert read(model, models.CHAMPION_FILE) == champion


def test_a_rerun_appends_the_line_champion_json_holds(tmp_path):
    """champion.json is written before the history line: a crash between leaves the line in champion.json only;
    the flow sees the night as decided and a re-run appends it."""
    model = str(tmp_path / "models" / "ctr")
    models.record(model, models.NightRecord(candidate("r1", "2026-11-01", 0.70)))
    entry = models.record(model, models.NightRecord(candidate("r2", "2026-11-02", 0.8), score_champion=score_stored))
    full = read(model, models.HISTORY_FILE)
    assert models.load_champion(model).line == entry
    (tmp_path / "models" / "ctr" / models.HISTORY_FILE).write_text(full.splitlines(keepends=True)[0])
    assert models.decided(model, "2026-11-02", "/store/runs/r2") == entry
    assert models.decided(model, "2026-11-03", "/store/runs/r2") is None
    said = []
    assert models.record(model, models.NightRecord(
        candidate("r2", "2026-11-02", 0.8), score_champion=lambda c: 1 / 0, say=said.append)) == entry
    assert read(model, models.HISTORY_FILE) == full
    assert any("appending the history line of 2026-11-02" in s for s in said)


def test_bundles_are_exported_before_champion_json_and_repaired(tmp_path):
    """With an exporter: the champion records its bundle and the manifest's sha256; a re-run re-exports a
    bundle that is gone and records the new sha256 when it differs; old bundles go, the previous one stays."""
    model = str(tmp_path / "models" / "ctr")
    calls, version = [], [1]

    def export(run: str, step: int, out: str) -> str:   # keeps a bundle that "verifies", else writes it
        calls.append(os.path.basename(out))
        manifest, expected = os.path.join(out, "manifest.json"), f"{run} {step} v{version[0]}\n"
        if not os.path.exists(manifest) or open(manifest).read() != expected:
            os.makedirs(out, exist_ok=True)
            with open(manifest, "w") as f:
                f.write(expected)
        return hashlib.sha256(expected.encode()).hexdigest()

    for night, auc in enumerate([0.70, 0.72, 0.60, 0.74], 1):
        models.record(model, models.NightRecord(
            candidate(f"r{night}", f"2026-11-0{night}", auc), score_champion=score_stored, export=export))
    assert calls == ["r1", "r2", "r4"]   # the kept night exports nothing
    bundles = tmp_path / "models" / "ctr" / models.BUNDLES
    assert sorted(p.name for p in bundles.iterdir()) == ["r2", "r4"]
    champion = models.load_champion(model)
    assert champion.bundle == str(bundles / "r4") and champion.line["decision"] == "promoted"
    assert champion.bundle_sha256 == hashlib.sha256((bundles / "r4" / "manifest.json").read_bytes()).hexdigest()

    before = read(model, models.CHAMPION_FILE)
    models.record(model, models.NightRecord(
        candidate("r4", "2026-11-04", 0.74), export=export))   # all well: nothing changes
    assert read(model, models.CHAMPION_FILE) == before
    (bundles / "r4" / "manifest.json").unlink()
    (bundles / "r3.tmp-123").mkdir()   # a killed export's leftover
    models.record(model, models.NightRecord(candidate("r4", "2026-11-04", 0.74), export=export))
    assert read(model, models.CHAMPION_FILE) == before and sorted(p.name for p in bundles.iterdir()) == ["r2", "r4"]
    version[0] = 2   # a re-export that writes other bytes: champion.json records the new sha256
    models.record(model, models.NightRecord(candidate("r4", "2026-11-04", 0.74), export=export))
    assert models.load_champion(model).bundle_sha256 == hashlib.sha256(
        (bundles / "r4" / "manifest.json").read_bytes()).hexdigest() != champion.bundle_sha256
    assert len(models.history(model)) == 4


def test_bad_inputs(tmp_path):
    model = str(tmp_path / "models" / "ctr")
    with pytest.raises(UserError, match="challenger of model .* incomplete.*Fix:"):
        models.record(model, models.NightRecord({"run": "r", "date": "2026-11-01"}))
    with pytest.raises(UserError, match=r"metrics.rows: missing"):
        models.record(model, models.NightRecord(
            {**candidate("r1", "2026-11-01", 0.7), "metrics": {"auc": 0.7, "logloss": 0.4}}))
    (tmp_path / "models" / "ctr").mkdir(parents=True)
    (tmp_path / "models" / "ctr" / models.HISTORY_FILE).write_text('{"date": "2026-11-01"}\nnot json\n')
    with pytest.raises(UserError, match="history.jsonl line 2 is not JSON"):
        models.history(model)
    (tmp_path / "models" / "ctr" / models.CHAMPION_FILE).write_text('{"run": 1}')
    with pytest.raises(UserError, match="champion.json is not a champion record"):
        models.load_champion(model)
    assert not (tmp_path / "models" / "ctr" / models.LOCK_FILE).exists()


# --- the lock ---------------------------------------------------------------------------------------------------

def test_lock_waits_names_the_holder_and_times_out(model):
    said = []
    with models.promotion_lock(model, "night of 2026-11-02") as held:
        with pytest.raises(UserError, match="held by night of 2026-11-02 .*waited 0.5 s.*Fix:"):
            with models.promotion_lock(model, "night of 2026-11-03", timeout_s=0.5, say=said.append):
                pass
        held.check()  # still ours
    assert any("waiting for the promotion lock" in s and "night of 2026-11-02" in s for s in said)
    with models.promotion_lock(model, "night of 2026-11-03", timeout_s=0.5):  # released: free again
        pass


def test_a_stale_lock_is_taken_over_and_its_holder_cannot_write(model):
    said = []
    crashed = models.promotion_lock(model, "crashed night", stale_s=0.5)
    old = crashed.__enter__()  # never left: the holder crashed
    time.sleep(1.1)  # expiry is to the second
    with models.promotion_lock(model, "next night", timeout_s=5, say=said.append) as held:
        held.check()
        with pytest.raises(lease.LockLost, match="expired while crashed night held it.*now held by next night"):
            old.check()
    assert any("took over" in s and "crashed night" in s for s in said)
    assert read(model, models.LOCK_FILE) is None
    with models.promotion_lock(model, "other", timeout_s=0):
        crashed.__exit__(None, None, None)  # the old holder's release leaves another's lock alone
        assert '"other"' in read(model, models.LOCK_FILE)


def test_an_unreadable_local_lock_expires(tmp_path):
    model = str(tmp_path / "models" / "ctr")
    (tmp_path / "models" / "ctr").mkdir(parents=True)
    lock = tmp_path / "models" / "ctr" / models.LOCK_FILE
    lock.write_text("")  # a holder that crashed between creating and writing it
    with pytest.raises(UserError, match="unknown"):
        with models.promotion_lock(model, "me", timeout_s=0.3):
            pass
    old = time.time() - 3600
    os.utime(lock, (old, old))
    with models.promotion_lock(model, "me", timeout_s=2) as held:
        held.check()


# --- two processes at once --------------------------------------------------------------------------------------

AUCS = [0.70, 0.69, 0.73, 0.72, 0.75, 0.71]  # per process and night: some promote, some are kept


def _promote_nights(model: str, worker: int, start, out) -> None:
    def slow_score(champion):
        time.sleep(0.05)  # widen the read-decide-write window: without the lock, lines would be lost
        return dict(champion.metrics)

    start.wait()
    for night, auc in enumerate(AUCS):
        entry = models.record(model, models.NightRecord(
            candidate(f"w{worker}-n{night}", f"2026-11-{night + 1:02d}", auc + worker / 1000),
            score_champion=slow_score, owner=f"worker {worker}", stale_s=60, timeout_s=60))
        out.put((worker, night, entry["decision"]))


def test_two_processes_promoting_at_once(model):
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_promote_nights, args=(model, w, start, out)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    results = [out.get(timeout=5) for _ in range(2 * len(AUCS))]
    lines = models.history(model)
    assert len(lines) == 2 * len(AUCS)  # none lost, none twice
    assert sorted((e["run"], e["decision"]) for e in lines) == sorted(
        (f"/store/runs/w{w}-n{n}", d) for w, n, d in results)
    for w in (1, 2):  # each process's nights in its order
        assert [e["run"] for e in lines if e["run"].startswith(f"/store/runs/w{w}-")] == [
            f"/store/runs/w{w}-n{n}" for n in range(len(AUCS))]
    assert [e["at"] for e in lines] == sorted(e["at"] for e in lines)
    assert [e["decision"] for e in lines].count("first") == 1
    for i, entry in enumerate(lines[1:], 1):  # each decision saw the champion that the lines before left
        last = next(e for e in reversed(lines[:i]) if e["decision"] in models.PROMOTING)
        assert entry["champion_run"] == last["run"]
        if entry["date"] < last["date"]:   # the other process's champion is of a later day: never replaced
            assert entry["champion"] is None and entry["decision"] == "kept"
        else:
            assert entry["champion"]["auc"] == last["challenger"]["auc"]
    champion = models.load_champion(model)
    last = next(e for e in reversed(lines) if e["decision"] in models.PROMOTING)
    assert (champion.run, champion.date, champion.promoted_at) == (last["run"], last["date"], last["at"])
    assert read(model, models.LOCK_FILE) is None


# --- pictures and artifacts -------------------------------------------------------------------------------------

def _history_lines(days: int = 4) -> list[dict]:
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    lines = []
    for i in range(days):
        decision = "first" if i == 0 else ("promoted" if i % 2 else "kept")
        lines.append({"date": (start + timedelta(days=i)).date().isoformat(), "window": [], "run": f"r{i}",
                      "challenger": {"auc": 0.7 + i / 100, "logloss": 0.45, "rows": 100},
                      "champion": None if i == 0 else {"auc": 0.7, "logloss": 0.46, "rows": 100},
                      "decision": decision})
    return lines


def test_model_history_png():
    from models.plots import model_history_png

    for lines in (_history_lines(), [], _history_lines(1)):
        png = model_history_png(lines, "ctr")
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000


def test_model_keys_are_valid_and_distinct():
    from flows.artifacts import MODEL_HISTORY, model_key

    assert model_key("ctr", MODEL_HISTORY) == "model-ctr-history"
    keys = {model_key(n, MODEL_HISTORY) for n in ("ctr", "CTR", "ctr_v2", "ctr.v2", "ctr-v2")}
    assert len(keys) == 5 and all(k.replace("-", "").isalnum() and k == k.lower() for k in keys)


def test_history_artifacts_on_a_prefect_run(prefect_harness, tmp_path):
    from prefect import flow

    from flows import artifacts
    from helpers.prefect_api import latest_artifacts

    model = str(tmp_path / "models" / "Ctr_1")

    @flow
    def nightly(night: int, auc: float) -> dict:
        entry = models.record(model, models.NightRecord(
            candidate(f"r{night}", f"2026-11-0{night}", auc), score_champion=score_stored))
        artifacts.model_history(model, "Ctr_1", entry)
        return entry

    nightly(1, 0.7)
    nightly(2, 0.68)
    entry = nightly(3, 0.72)
    found = latest_artifacts()
    key = artifacts.model_key("Ctr_1", artifacts.MODEL_HISTORY)
    assert [(r["date"], r["decision"], r["challenger AUC"]) for r in found[key]] == [
        ("2026-11-01", "first", 0.7), ("2026-11-02", "kept", 0.68), ("2026-11-03", "promoted", 0.72)]
    decision = found[artifacts.model_key("Ctr_1", artifacts.MODEL_DECISION)]
    assert "2026-11-03: **promoted**" in decision and entry["reason"] in decision and "| AUC | 0.72 | 0.7 |" in decision
    picture = found[artifacts.model_key("Ctr_1", artifacts.MODEL_AUC)]
    assert picture.startswith("![model-ctr-1-") and "data:image/png;base64," in picture
    from prefect import get_client

    with get_client(sync_client=True) as client:  # one version per night
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

        versions = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert len(versions) == 3
    assert json.loads(versions[0].data) is not None


def test_init_from_a_model_folder_is_its_champion(model):
    from training.config import InitFrom

    store = models.model_store(model)
    assert model == f"{store}/models/ctr"
    models.record(model, models.NightRecord({**candidate("r1", "2026-11-01", 0.70), "run": f"{store}/runs/r1"}))
    assert models.champion_init(InitFrom(run=model)) == InitFrom(run=f"{store}/runs/r1", checkpoint="10")
    other = InitFrom(run="/store/runs/r9", checkpoint="latest")
    assert models.champion_init(other) == other and models.champion_init(None) is None
    # a champion whose recorded metrics are not finite (a diverged model) is never started from
    champion = json.loads(read(model, models.CHAMPION_FILE))
    fs, path = filesystem(model)

    def rewrite(**fields):
        with fs.open(f"{path}/{models.CHAMPION_FILE}", "w") as f:
            f.write(json.dumps({**champion, **fields}))

    rewrite(metrics={"auc": 1.0, "logloss": None, "rows": 10})
    with pytest.raises(UserError, match=r"non-finite recorded metrics .* Fix: train from scratch"):
        models.champion_init(InitFrom(run=model))
    # champion.json naming a run or a bundle outside the model's store: nothing of it is loaded
    for fields in [{"run": "s3://other-bucket/runs/r1"}, {"run": f"{store}-2/runs/r1"}, {"run": f"{store}/../x/runs/r1"},
                   {"bundle": "/tmp/elsewhere/bundle"}]:
        rewrite(**fields)
        what = next(iter(fields))
        with pytest.raises(UserError, match=rf"champion.json: the champion's {what} .* lies outside the model's store "
                                            rf"{store}, so it is not loaded .* Fix: restore champion.json"):
            models.champion_init(InitFrom(run=model))
