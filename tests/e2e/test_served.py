"""The served nightly pipeline end to end, one served run of the session's real Prefect server: `dlrmflow serve`
with a dated input template, a window, a model name, a cron schedule and the day-landed sensor (issue 44 §3); headless
Chromium on the UI's pages, each loaded once. Night 1 is triggered as the UI's Run button does (POST
/deployments/{id}/create_flow_run); while it runs, day D's files and then its _SUCCESS marker are dropped into the
watched folder, a look of the sensor (a run of its deployment, as its schedule starts one) tells of the day and the
pipeline's trigger starts night 2 for D, which waits for night 1 (overlapping triggers). D dropped again unchanged
starts nothing; a duplicate event starts a run that ends at once, saying the night ran.

Night 1 (the UI's view of a run): the training curve published and updated while it trains, every evaluation in
the train run's logs, the plots on the pipeline run's Artifacts tab. The nights: each parses only its new day, its
dataset equals preprocessing from scratch, the champion is promoted on night 1 and then kept or replaced by the rule
(the champion scored on the new day), the history and its artifact grow; the model's page links each night."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from flows import artifacts
from helpers.browser import Browser, all_of, needs_chromium, visible_text
from helpers.datasets import assert_same_files
from helpers.prefect_api import answer, get, post, stamp
from helpers.processes import until
from models import registry
from nightly.landing import once
from training import NOISE
from training.launchers.output import KNOWN
from training.rundir import RunDir

NIGHTS = ("2026-11-04", "2026-11-05")
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
CRON = "0 2 29 2 *"   # the fallback; a daily one would start a night of its own when the test runs at 02:00
TUNE_CRON = "0 8 * * 6"   # the weekly re-tune
LOOK_EVERY_S = 30 * 86400   # the sensor's schedule (a few runs for the server to make); the test starts its looks


def _parsed(store: Path) -> dict[str, float]:
    """Input URI -> when its stored parse was finished (the per-file parts under the store)."""
    return {json.loads((p.parent / "entry.json").read_text())["uri"]: p.stat().st_mtime
            for p in store.glob("_files/*/parsed.json")}


def _check_the_ui_view_of_a_run(server, browser: Browser, night: dict, run: Path) -> None:
    """While training ran, the curve was published and then updated; every evaluation reached the logs at INFO,
    library warnings at WARNING; a plot's page; the metrics table's rows."""
    api, ui, run_id = server.api, server.ui, night["id"]
    [train_run] = [r for r in post(f"{api}/flow_runs/filter", {"flows": {"name": {"any_": ["train"]}}})
                   if stamp(night["start_time"]) <= stamp(r["start_time"]) <= stamp(night["end_time"])]
    [torchrun] = post(f"{api}/task_runs/filter", {"flow_runs": {"id": {"any_": [train_run["id"]]}},
                                                 "task_runs": {"name": {"like_": "launch_torchrun"}}})
    for key in ("training-curve", "training-evaluations"):  # one card per run, rewritten at each evaluation
        [art] = server.artifacts(key, train_run["id"])
        assert stamp(art["created"]) < stamp(art["updated"]) <= stamp(torchrun["end_time"]), art
    evaluations = [r for r in map(json.loads, (run / "metrics.jsonl").open()) if "eval_split" in r]
    assert len(evaluations) >= 2
    assert [row["step"] for row in json.loads(art["data"])] == [r["step"] for r in evaluations]
    logs = server.logs(train_run["id"])
    for r in evaluations:
        assert (20, f"[rank 0] step {r['step']}: val auc {r['auc']:.4f} logloss {r['logloss']:.4f}") in logs
    # the known library warnings (training.launchers.output.KNOWN_WARNINGS) in the run's library log, not the logs;
    # any other library warning (Python's, logging's, c10's W-lines: training.NOISE) at WARNING
    assert not [m for _, m in logs if KNOWN.search(m)] and KNOWN.search((run / RunDir.LIBRARY_LOG).read_text())
    assert all(level == 30 for level, m in logs if NOISE.match(m.split("] ", 1)[-1]))
    assert not [m for level, m in logs if level < 30 and ("Warning: " in m or "Memory per rank" in m)]

    # a plot's page (a markdown artifact's embedded PNG survives the UI's sanitizer); the table's rows through the
    # API (the run's Artifacts tab, with the model's page, lists it: _check_the_model_page)
    [roc] = server.artifacts("roc-curve", run_id)
    dom = browser.open(f"{ui}/artifacts/artifact/{roc['id']}", r'<img [^>]*src="data:image/png;base64,iVBOR', "roc")
    assert "Image URL" not in dom
    browser.leave()   # (night 2 runs on)
    [table] = server.artifacts("pipeline-metrics", run_id)
    assert {"ROC AUC", "normalized entropy"} <= {str(v) for row in json.loads(table["data"]) for v in row.values()}


def _check_the_model_page(server, browser: Browser, nights: tuple[dict, ...], store: Path) -> None:
    """The model's page (issue 44): serve said where the UI and the page are; the Artifacts page lists it by the
    model's name; its key's page leads to its latest version, which links each night's row to the night's flow run,
    whose page that link opens, on its Artifacts tab (DOMs kept in the browser's folder: artifacts, model-versions,
    model-page, night; screenshots of the last two)."""
    ui = server.ui
    said = server.log("serve-nights")   # serve's output
    assert f"Prefect UI: {ui} " in said and f"{ui}/artifacts/key/model-demo" in said, said[-3000:]
    assert "  days/dlrmflow-days-demo: on demand" in said and \
        f"  pipeline/dlrmflow-pipeline-demo: cron '{CRON}' UTC, on dlrmflow.day.landed" in said and \
        f"  day-landed/dlrmflow-day-landed-demo: every {LOOK_EVERY_S} s" in said and \
        "a day is complete with a _SUCCESS marker in the day's folder" in said, said[-3000:]

    def loaded(url: str, name: str, pattern: str, picture: bool = False) -> str:   # the DOM once the UI drew it
        return browser.open(f"{ui}{url}", pattern, name, picture)

    loaded("/artifacts", "artifacts", r">\s*model-demo\s*<")   # the Artifacts page: a card per key, by the name
    versions = loaded("/artifacts/key/model-demo", "model-versions", r"/artifacts/artifact/")   # newest first
    latest = re.findall(r'href="/artifacts/artifact/([0-9a-f-]{36})"', versions)[0]
    [newest] = post(f"{server.api}/artifacts/filter", {"artifacts": {"key": {"any_": ["model-demo"]}},
                                                      "sort": "CREATED_DESC", "limit": 1})
    assert latest == newest["id"]
    dom = loaded(f"/artifacts/artifact/{latest}", "model-page", all_of(
        "Champion", "Latest night", "The last nights", *(f'href="/runs/flow-run/{n["id"]}"' for n in nights)),
        picture=True)
    text = visible_text(dom)
    assert "Champion" in text and "Latest night" in text and "The last nights" in text, text[:3000]
    links = dict(re.findall(r'<a href="(/runs/flow-run/[0-9a-f-]{36})"[^>]*>([^<]+)</a>', dom))
    for night in nights:
        assert links.get(f"/runs/flow-run/{night['id']}") == night["name"], links
    # the link's run, opened on its Artifacts tab (the V2 UI honours ?tab=): the night's name and its own plots
    dom = loaded(f"/v2/runs/flow-run/{nights[0]['id']}?tab=Artifacts", "night", all_of(
        "pipeline-outputs", nights[0]["name"], "pipeline-metrics", "Metrics on split 'test'", "roc-curve",
        "calibration-plot", "training-curve", artifacts.runs_key(str(store))), picture=True)
    assert nights[0]["name"] in dom and "pipeline-metrics" in dom and "Metrics on split 'test'" in dom
    for key in ("roc-curve", "calibration-plot", "training-curve", artifacts.runs_key(str(store))):
        assert key in dom, key
    assert (browser.folder / "model-page.png").stat().st_size > 10_000 and \
        (browser.folder / "night.png").stat().st_size > 10_000
    browser.leave()


def _emit(api: str, event: str, resource: dict, payload: dict) -> None:
    """Send an event as any client does (POST /events)."""
    body = [{"id": str(uuid.uuid4()), "occurred": dt.datetime.now(dt.timezone.utc).isoformat(), "event": event,
             "resource": resource, "payload": payload}]
    request = urllib.request.Request(f"{api}/events", json.dumps(body).encode(), {"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=60).close()


@needs_chromium
def test_two_nights_served_one_started_by_its_day_landing_and_the_ui(prefect_server, tmp_path):
    from preprocessing import PreprocessConfig, Preprocessing
    from synthetic.generator import SynthConfig, write_days

    server, api = prefect_server, prefect_server.api
    staged, logs, store = tmp_path / "staged", tmp_path / "logs", tmp_path / "store"
    write_days(SynthConfig(out=str(staged), days=5, start="2026-11-01", rows_per_day=3000, seed=5))
    logs.mkdir()
    for day in ("2026-11-01", "2026-11-02", "2026-11-03", NIGHTS[0]):   # there before: no marker, never told of
        (staged / day).rename(logs / day)

    def drop(day: str) -> None:   # a day's files, then its marker, as a Spark job writes them (copies keep mtimes)
        shutil.copytree(staged / day, logs / day, dirs_exist_ok=True)
        (logs / day / "_SUCCESS").write_text("")

    template = f"{logs}/{{date}}/part-*"
    serve_args = ["--store", str(store), "--input", template, "--train-days", "3", "--model", "demo",
                  "--cron", CRON, "--tune-cron", TUNE_CRON, "--landing.every-s", str(LOOK_EVERY_S),
                  "--data.batch-size", "256", "--data.eval-batch-size", "1024", "--log-every", "8",
                  "--eval-every", "8", "--checkpoint-every", "none",
                  "--nproc", "1"]   # every rank job on 1 rank (2 ranks: test_scoring, test_flows_pipeline)
    with server.serve(*serve_args, name="serve-nights") as serve, Browser(tmp_path / "browser") as browser:
        def served():
            found = {k: v for k, v in server.deployments().items() if k.endswith("-demo")}   # (a shared server)
            return found if len(found) == 9 and not any(d["paused"] for d in found.values()) else None

        found = until(served, 120, "nine active deployments", server.proc, serve)
        assert set(found) == {   # the model's nine
            "dlrmflow-pipeline-demo", "dlrmflow-preprocess-demo", "dlrmflow-train-demo", "dlrmflow-evaluate-demo",
            "dlrmflow-score-demo", "dlrmflow-tune-demo", "dlrmflow-days-demo",   # days: the data gate's verdicts
            "dlrmflow-spec-draft-demo", "dlrmflow-day-landed-demo"}   # day-landed: the sensor
        pipeline, sensor = found["dlrmflow-pipeline-demo"], found["dlrmflow-day-landed-demo"]
        assert [s["schedule"]["cron"] for s in pipeline["schedules"]] == [CRON]
        retune = found["dlrmflow-tune-demo"]   # the weekly re-tune of the model on its champion's data
        assert [s["schedule"]["cron"] for s in retune["schedules"]] == [TUNE_CRON]
        assert retune["parameters"]["config"] == {"store": str(store), "model": "demo", "preset": "default"}
        assert [s["schedule"]["interval"] for s in sensor["schedules"]] == [LOOK_EVERY_S]
        assert sensor["parameters"]["inputs"] == [template] and sensor["parameters"]["landing"]["marker"] == "_SUCCESS"
        assert sensor["concurrency_options"]["collision_strategy"] == "CANCEL_NEW"
        # the pipeline's trigger: an automation of the server (no cloud), the day of the event as the run's date
        [automation] = [a for a in post(f"{api}/automations/filter", {})
                        if a["name"] == "dlrmflow-pipeline-demo: the day landed"]
        assert automation["trigger"]["expect"] == ["dlrmflow.day.landed"] and automation["enabled"]
        assert automation["trigger"]["match"] == {"prefect.resource.id": "dlrmflow.model.demo"}
        [action] = automation["actions"]
        assert (action["type"], action["deployment_id"]) == ("run-deployment", pipeline["id"])
        assert "event.payload.day" in json.dumps(action["parameters"]["date"]), action
        dom = browser.open(f"{server.ui}/deployments", all_of(*found, "02:00 AM", "February"), "deployments")
        for name in found:
            assert name in dom
        assert "02:00 AM" in dom and "February" in dom, visible_text(dom)[:3000]   # the cron, in words
        browser.leave()   # (the nights run on)

        # the server's scheduler makes the weekly re-tune's next runs (the nights' cron is years ahead, past the 100
        # days it schedules): with whenever 0.10 it made none (docs/install.md, "What is pinned and why")
        def cron_runs() -> list[dict]:
            runs = post(f"{api}/flow_runs/filter", {"deployments": {"id": {"any_": [retune["id"]]}}})
            return [r for r in runs if r["auto_scheduled"]]

        assert len(until(cron_runs, 60, "the re-tune's scheduled runs", server.proc, serve)) >= 3

        defaults = pipeline["parameters"]["config"]   # the form's defaults are serve's options
        assert defaults["preprocess"]["inputs"] == [template]
        assert (defaults["window"]["train_days"], defaults["model"]) == (3, "demo")
        assert pipeline["global_concurrency_limit"]["limit"] == 1
        assert pipeline["concurrency_options"]["collision_strategy"] == "ENQUEUE"

        def start(deployment: dict, body: dict) -> str:   # as the UI's Run button, or the schedule, starts a run
            return until(lambda: answer(post, f"{api}/deployments/{deployment['id']}/create_flow_run", body), 60,
                         "a new run", server.proc)["id"]

        def final(run_id: str) -> dict:
            return until(lambda: (r := get(f"{api}/flow_runs/{run_id}"))["state"]["type"] in FINAL and r,
                         480, "a flow run", server.proc, serve)

        def finish(run_id: str) -> dict:
            run = final(run_id)
            assert run["state"]["type"] == "COMPLETED", server.log("serve-nights")[-4000:]
            return run

        def nights() -> list[dict]:   # the pipeline's runs, oldest first (not the cron's, years ahead)
            runs = post(f"{api}/flow_runs/filter", {"deployments": {"id": {"any_": [pipeline["id"]]}}})
            return sorted([r for r in runs if stamp(r["expected_start_time"]).year < 2028], key=lambda r: r["created"])

        def look(started: str | None = None) -> list[str]:   # one look of the sensor (``started``: its run, if
            # started already): what it said (its logs, the last one in)
            for _ in range(3):   # a look started while a scheduled one runs is cancelled (one at a time): again
                if (run := final(started or start(sensor, {})))["state"]["type"] != "CANCELLED":
                    break
                started = None
            assert run["state"]["type"] == "COMPLETED", server.log("serve-nights")[-4000:]
            return until(lambda: (said := [m for _, m in server.logs(run["id"])]) and any(
                m.startswith("Finished in state") for m in said) and said, 30, "the look's logs")

        def told() -> list[str]:   # what every look of the sensor said of a day that landed
            looks = post(f"{api}/flow_runs/filter", {"deployments": {"id": {"any_": [sensor["id"]]}}})
            return [m for r in looks for _, m in server.logs(r["id"]) if " landed: " in m]

        # overlapping triggers: day D lands while night 1 runs; the trigger's night 2 waits for it
        first_id = start(pipeline, {"parameters": {"date": NIGHTS[0]}})   # as the UI's Run with the date filled in
        until(lambda: get(f"{api}/flow_runs/{first_id}")["state"]["type"] == "RUNNING", 120, "night 1", serve)
        drop(NIGHTS[1])
        look()
        assert until(told, 30, "the day told of") == [
            f"day {NIGHTS[1]} landed: 1 file(s), a _SUCCESS marker in the day's folder"]
        [_, second] = until(lambda: len(runs := nights()) == 2 and runs, 60, "the trigger's night", serve)
        assert second["parameters"]["date"] == NIGHTS[1] and second["created_by"]["type"] == "AUTOMATION", second
        first, model = finish(first_id), store / "models" / "demo"
        # night 1 as the UI shows a run, while night 2 runs (once night 1's last logs are in: its final line)
        until(lambda: any(m.startswith("Finished in state") for _, m in server.logs(first_id)), 30, "night 1's logs")
        _check_the_ui_view_of_a_run(server, browser, first, Path(registry.history(str(model))[0]["run"]))
        second = finish(second["id"])
        assert stamp(first["end_time"]) <= stamp(second["start_time"]), "two nights ran at once"
        # the runner's first try to start night 2, while night 1 ran, was queued by the deployment's limit (the
        # automation's action can also come after a quick night 1 has ended: seen 32 s after the event)
        states = sorted(get(f"{api}/flow_run_states/?flow_run_id={second['id']}"), key=lambda s: stamp(s["timestamp"]))
        if stamp(states[1]["timestamp"]) < stamp(first["end_time"]):
            assert states[1]["name"] == "AwaitingConcurrencySlot", [s["name"] for s in states]
        # the last night's dataset is the one preprocessing its window from scratch gives (now: the day dropped
        # again below is another version of its input file, so another fingerprint)
        config = yaml.safe_load((Path(registry.history(str(model))[-1]["run"]) / RunDir.PIPELINE).read_text())
        fresh = Preprocessing(PreprocessConfig(inputs=config["preprocess"]["inputs"], out=str(tmp_path / "fresh"),
                                               progress=False)).run()
        assert_same_files(Path(config["train"]["dataset"]), Path(fresh))

        # the day again, unchanged: the sensor tells nothing; a duplicate event starts a run that ends at once,
        # saying so (the night ran); no night runs twice. Both checked at the end: they run while the UI is read
        history = registry.history(str(model))   # resolved against the store
        drop(NIGHTS[1])
        _emit(api, "dlrmflow.day.landed", {"prefect.resource.id": "dlrmflow.model.demo"}, {"day": NIGHTS[1]})
        looking = start(sensor, {})
        [duplicate] = until(lambda: len(runs := nights()) == 3 and runs[2:], 60, "the duplicate's run")
        assert duplicate["created_by"]["type"] == "AUTOMATION" and duplicate["parameters"]["date"] == NIGHTS[1]

        # each day was parsed once, by the first night that read it; the days no later night reads are pruned
        # (after night 2: 11-01 and 11-02; the next night's window is 11-03..11-06)
        parsed = _parsed(store)
        assert sorted(parsed) == [f"{logs}/2026-11-0{d}/part-00000.tsv" for d in (3, 4, 5)]
        assert parsed[f"{logs}/2026-11-04/part-00000.tsv"] < stamp(first["end_time"]).timestamp()
        assert stamp(second["start_time"]).timestamp() < parsed[f"{logs}/2026-11-05/part-00000.tsv"] \
            < stamp(second["end_time"]).timestamp()
        # that removal is the store's clean-up (models.gc) after the night's decision: its table is in the night's
        # logs and on its Artifacts tab; both nights' runs and datasets stay (keep_nights 14)
        # (a run's last logs reach the server after its final state: the runner sends them as its process ends)
        until(lambda: any(re.match(rf"gc of {re.escape(str(store))}: removed \d+ item\(s\)", m)
                          for _, m in server.logs(second["id"])), 30, "the night's gc table in its logs")
        assert server.artifacts(artifacts.gc_key(str(store)), second["id"])

        recorded = [json.loads(line) for line in (model / "history.jsonl").read_text().splitlines()]
        assert all(h["run"].startswith("runs/") for h in recorded)   # store-relative: a moved store keeps them
        assert [h["date"] for h in history] == list(NIGHTS)
        assert history[0]["decision"] == "first" and history[0]["champion"] is None
        champion_run = history[0]["run"]
        for h in history[1:]:
            assert h["champion_run"] == champion_run
            assert h["challenger"]["fingerprint"] == h["champion"]["fingerprint"]   # scored on the same rows
            new, old = h["challenger"], h["champion"]
            better = (new["auc"] - old["auc"] > h["promote_margin"]   # a tie keeps
                      and new["logloss"] < new["base_logloss"]      # and never worse than the click rate
                      and new["logloss"] <= old["logloss"] * (1 + h["gates"]["logloss_tolerance"]))
            assert h["decision"] == ("promoted" if better else "kept"), h
            champion_run = h["run"] if better else champion_run
        assert all(Path(h["run"], RunDir.DONE).is_file() and Path(h["dataset"], "_SUCCESS").is_file() for h in history)
        champion = registry.load_champion(str(model)).model_dump()   # resolved against the store
        assert champion["run"] == champion_run
        # the champion's serving bundle (night 2 scored night 1's champion on its test day), at most one before it
        assert (Path(champion["bundle"]) / "manifest.json").is_file()
        assert Path(champion["bundle"]).parent == model / "bundles" and len(list((model / "bundles").iterdir())) <= 2
        for h in history:   # the challenger's numbers: its evaluation on the test day, or (with a champion to
            # compare) its scores of the same raw rows, the same predictions
            metrics = json.loads((Path(h["run"]) / "eval" / "test" / "metrics.json").read_text())
            exact = h["champion"] is None
            assert h["challenger"]["auc"] == (metrics["auc"] if exact else pytest.approx(metrics["auc"], abs=1e-3))
            assert h["challenger"]["rows"] == 3000
        versions = post(f"{api}/artifacts/filter", {"artifacts": {"key": {"any_": ["model-demo-history"]}}})
        assert len(versions) == 2 and sorted(len(json.loads(v["data"])) for v in versions) == [1, 2]
        assert server.artifacts("model-demo-auc", second["id"])
        # the data gate passed both nights (drifting days), each night's checks recorded; with a champion the test
        # day's values are checked against its vocabulary too
        for h in history:
            gate = h["data_checks"]
            assert gate["on_data_check"] == "fail" and gate["failed"] == [] and gate["unchecked"] == [], gate
            assert gate["checks"] > 100 and {c["day"] for c in gate["test_day"]} == {h["date"]}
        assert "unseen" not in {c["check"] for c in history[0]["data_checks"]["test_day"]}   # no champion yet
        assert {c["check"] for c in history[1]["data_checks"]["test_day"]} >= {"unseen", "drift", "psi", "missing"}
        [checks] = server.artifacts("data-checks", second["id"])
        assert len(json.loads(checks["data"])) == history[1]["data_checks"]["checks"]
        assert server.artifacts("model-demo-drift", second["id"])
        _check_the_model_page(server, browser, (first, second), store)

        assert not [m for m in look(looking) if m.startswith("day ")] and len(told()) == 1
        part = logs / NIGHTS[1] / "part-00000.tsv"
        assert [(line["day"], line["state"], line["files"]) for line in registry.landed(str(model))] == [
            (NIGHTS[1], "landed", {str(part): f"{part.stat().st_size}:mtime={part.stat().st_mtime_ns}"})]
        # (the cron fallback's night of D is refused on the same path: tests/flows/test_landed.py)

        finish(duplicate["id"])   # the duplicate's run: ended at once, saying why
        refused = until(lambda: [m for _, m in server.logs(duplicate["id"]) if "already ran" in m], 30, "its reason")
        assert refused == [once(str(model), dt.date.fromisoformat(NIGHTS[1]))], refused   # e.g. "the night
        # 2026-11-05 already ran (kept by flow run NAME (ID) at TIME): a night the day-landed trigger or the
        # schedule starts runs once a day. To run it again, Run the pipeline with date 2026-11-05"
        assert f"already ran ({history[1]['decision']} by flow run {second['name']} " in refused[0]
        assert registry.history(str(model)) == history and len(history) == 2 and len(nights()) == 3
