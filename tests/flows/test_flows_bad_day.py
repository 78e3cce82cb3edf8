"""Issue 34 §1 end to end (real Prefect, torchrun, `dlrmflow run`), with the window's defaults (issue 41 §2: no
--min-days): a day whose labels are all 0 fails its own night and is quarantined; the next night, killed with SIGKILL
mid-training (the command and with it its ranks), runs again and trains on a FULL window without the bad day, reaching
back past it; the bad day is named only where it is the cause, one history line a night. An older window day whose
gzip is cut short is quarantined by its failed parse, and its night set up again, reaching back past it too. A night
whose plan fails in `dlrmflow run` (its look-back too short) records its `failed` line (issue 46). Then the store is
restored at another path and the night run again there: it finds its run by the same name (the run names hash the
dataset's store-relative location) and neither trains nor evaluates again."""

from __future__ import annotations

import datetime as dt
import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from common.errors import UserError
from common.process import LAUNCH_PREFIX
from flows.cli import build_parser
from flows.pipeline import pipeline
from helpers.prefect_api import logs_matching, small_pipeline
from models import registry
from synthetic.generator import SynthConfig, write_days


def _ranks_running(store: Path) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"training.train_worker" in cmd and str(store).encode() in cmd:
            return True
    return False


def _materialized(prefix: str, last: str, timeout_s: float = 30) -> tuple[dict[str, set[str]], dict[str, dict]]:
    """The assets under ``prefix`` whose materializations the harness's events API lists (waits for ``last``): each
    one's upstream assets (over all its materializations) and its latest metadata."""
    from prefect import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    deadline = time.monotonic() + timeout_s
    while True:
        flt = EventFilter(event=EventNameFilter(name=["prefect.asset.materialization.succeeded"]),
                          resource=EventResourceFilter(id_prefix=[prefix]))
        with get_client(sync_client=True) as client:
            page = client.read_events(filter=flt, limit=50)
            found = list(page.events)
            while page.next_page:
                page = client.read_events_page(page.next_page)
                found += page.events
        upstream: dict[str, set[str]] = {}
        payload: dict[str, dict] = {}
        for event in sorted(found, key=lambda e: e.occurred):
            upstream.setdefault(event.resource.id, set()).update(
                r.id for r in event.related if r.role == "asset")
            payload[event.resource.id] = event.payload
        if last in upstream or time.monotonic() > deadline:
            return upstream, payload
        time.sleep(0.5)


def test_a_bad_day_stays_one_bad_day_through_a_killed_night(prefect_harness, tmp_path):
    """Only the killed night launches its ranks plainly (found by their command lines); the nights run in this
    process fork theirs, and the export child, from the warm launcher (helpers/warm_launcher.py)."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    write_days(SynthConfig(out=str(logs), days=7, start="2026-11-01", rows_per_day=3000, seed=11, workers=1))
    bad = next((logs / "2026-11-05").glob("part-*"))
    bad.write_text("".join("0" + line[1:] for line in bad.read_text().splitlines(keepends=True)))
    cut = next((logs / "2026-11-02").glob("part-*"))   # its parse fails: a gzip cut short
    packed = gzip.compress(cut.read_bytes())
    cut.unlink()
    cut = cut.with_name(f"{cut.name}.gz")
    cut.write_bytes(packed[:len(packed) // 2])
    config = small_pipeline(str(store), preprocess={"inputs": [f"{logs}/{{date}}/part-*"]}, model="ctr",
                            window={"train_days": 3})   # the defaults: no min_days

    first = pipeline(config, date=dt.date(2026, 11, 5), return_state=True)   # its own night fails on it
    assert first.is_failed() and first.message.startswith("the night 2026-11-05: the test day 2026-11-05 is "
                                                          "quarantined")   # set up again without 11-02 first
    assert logs_matching("data gate: day 2026-11-02 is quarantined (its parse failed: ")
    assert logs_matching("test 2026-11-05; reached back to 2026-11-01 past quarantined 2026-11-02 (its parse failed: ")

    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump(config.train.model_dump(mode="json", exclude={"dataset"})))
    command = [sys.executable, "-m", "flows", "run", "--date", "2026-11-06", "--input", f"{logs}/{{date}}/part-*",
               "--train-days", "3", "--model", "ctr", "--store", str(store),
               "--config", str(train_yaml)]
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}   # the harness's server: no server to start
    env.pop(LAUNCH_PREFIX, None)   # plain ranks: their command lines name the store
    killed = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not _ranks_running(store):
        assert killed.poll() is None and time.monotonic() < deadline, "the night ended before training"
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)   # the night, mid-training; its ranks die with it
    killed.wait(30)
    deadline = time.monotonic() + 30
    while _ranks_running(store):
        assert time.monotonic() < deadline, "ranks outlived the killed night"
        time.sleep(0.2)

    out = pipeline(config, date=dt.date(2026, 11, 6))   # the night again: a full window without the bad days
    run = yaml.safe_load((Path(out["run"]) / "pipeline.yaml").read_text())
    assert out["decision"]["decision"] == "first" and out["data_checks"]["left_out"].keys() == {"2026-11-02",
                                                                                               "2026-11-05"}
    assert out["decision"]["window"] == ["2026-11-01", "2026-11-03", "2026-11-04", "2026-11-06"]   # 3 days, test
    assert run["date"] == "2026-11-06" and (run["window"]["train_days"], run["window"]["min_days"]) == (3, None)
    assert logs_matching("window for 2026-11-06: train 2026-11-01..2026-11-03 (2 days), val 2026-11-04, test "
                         "2026-11-06; reached back to 2026-11-01 past quarantined 2026-11-02 (its parse failed: ")
    assert logs_matching(", 2026-11-05 (day 2026-11-05: label_rate 0 outside [")
    model = registry.model_uri(str(store), "ctr")
    history = registry.history(model)
    assert [(h["date"], h["decision"]) for h in history] == [("2026-11-05", registry.DATA_FAILED),
                                                             ("2026-11-06", "first")]
    assert "2026-11-05" in history[0]["reason"] and "2026-11-06" not in history[0]["reason"]
    assert history[0]["window"] == ["2026-11-01", "2026-11-03", "2026-11-04", "2026-11-05"]   # again without 11-02
    assert "2026-11-02" not in history[0]["reason"]
    assert history[0]["data_checks"]["left_out"]["2026-11-02"].startswith(f"its parse failed: {cut}: cannot be read")
    assert history[1]["data_checks"]["failed"] == [] and "2026-11-05" not in history[1]["reason"]
    verdicts = registry.day_verdicts(model)
    assert sorted((v["day"], v["verdict"]) for v in verdicts) == [   # each judged once, the killed night included
        ("2026-11-01", "accepted"), ("2026-11-02", "quarantined"), ("2026-11-03", "accepted"),
        ("2026-11-04", "accepted"), ("2026-11-05", "quarantined"), ("2026-11-06", "accepted")]

    # issue 44 §2: the products as Prefect assets, read back from the events API (prefect.asset.materialization.*)
    upstream, payload = _materialized(f"file://{store}/", champion_key := f"file://{model}/champion.json")
    run_key, eval_key, dataset_key = f"file://{out['run']}", f"file://{out['evaluation']}", f"file://{out['dataset']}"
    bundle_key = f"file://{model}/bundles/{registry.bundle_name(out['run'])}"
    parsed = {d: f"file://{store}/_files/days/{d}" for d in ("2026-11-01", "2026-11-03", "2026-11-04", "2026-11-06")}
    assert upstream[champion_key] >= {bundle_key, eval_key} and upstream[bundle_key] >= {run_key, dataset_key}
    assert upstream[eval_key] == {run_key} and upstream[run_key] == {dataset_key}
    assert upstream[dataset_key] == set(parsed.values())   # night 2's window: not the quarantined days
    assert all(upstream[parsed[d]] == {f"file://{logs}/{d}/part-*"} for d in parsed)
    assert f"file://{store}/_files/days/2026-11-05" in upstream   # night 1 parsed it (its dataset, never trained on)
    reached, todo = set(), [champion_key]
    while todo:   # the champion back to the days of logs it learned from
        todo += upstream.get(k := todo.pop(), set()) - reached
        reached.add(k)
    assert sorted(k for k in reached if k.startswith(f"file://{logs}/")) == [
        f"file://{logs}/{d}/part-*" for d in parsed]
    assert payload[champion_key]["date"] == "2026-11-06" and payload[eval_key]["auc"] == out["metrics"]["auc"]
    assert payload[eval_key]["step"] == out["metrics"]["step"] and isinstance(payload[run_key]["step"], int)
    assert payload[parsed["2026-11-01"]]["day"] == "2026-11-01" and payload[bundle_key]["model"] == "ctr"

    # a night whose plan fails in `dlrmflow run`, before its flow starts (its look-back cannot reach past 11-05):
    # one line, and the model's history says so as for a night failing in its flow (issue 46)
    args = build_parser(only="run").parse_args(
        ["run", "--date", "2026-11-07", "--input", f"{logs}/{{date}}/part-*", "--train-days", "3", "--lookback-days",
         "3", "--model", "ctr", "--store", str(store), "--config", str(train_yaml)])
    with pytest.raises(UserError) as planned:
        args._run(args)
    error = str(planned.value)
    assert error.startswith("the window for 2026-11-07 needs 3 of the 3 days before it, but found 2 back to 2026-11-04 "
                            "(its look-back, --lookback-days 3): 1 quarantined: 2026-11-05 (day 2026-11-05: "
                            "label_rate 0 ")
    assert "\n" not in error and "raise --lookback-days" in error
    failed = registry.history(model)[-1]
    assert (failed["date"], failed["decision"], failed["stage"], failed["reason"]) == (
        "2026-11-07", registry.FAILED, "setup", f"failed at setup: {error}")

    # the store restored at another path: the night again there finds its run by the same name and trains nothing
    moved = tmp_path / "restored" / "store"
    moved.parent.mkdir()
    os.rename(store, moved)
    runs = sorted(p.name for p in (moved / "runs").iterdir())
    run = moved / "runs" / Path(out["run"]).name
    stamps = {p: p.stat().st_mtime_ns for p in (run / "_SUCCESS", run / "eval" / "test" / "metrics.json")}
    again = pipeline(config.model_copy(update={"store": str(moved)}), date=dt.date(2026, 11, 6))
    assert again["run"] == str(run) and again["metrics"] == out["metrics"]
    assert logs_matching(f"training already complete, skipping: {run}")
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps   # neither trained nor evaluated again
    assert sorted(p.name for p in (moved / "runs").iterdir()) == runs and not store.exists()
    assert [(h["date"], h["decision"]) for h in registry.history(registry.model_uri(str(moved), "ctr"))] == [
        ("2026-11-05", registry.DATA_FAILED), ("2026-11-06", "first"), ("2026-11-07", registry.FAILED)]
