"""The served nightly pipeline end to end, one served run of the session's real Prefect server: `dlrmflow serve`
with a dated input template, a window, a model name and a cron schedule; headless Chromium on the deployments
page; two nights triggered as the UI's Run button does (POST /deployments/{id}/create_flow_run) over drifting
synthetic days, the second while the first runs (overlapping triggers).

Night 1 (the UI's view of a run): the training curve published and updated while it trains, every evaluation in
the train run's logs, the plots on the pipeline run's Artifacts tab and the metrics table. The nights: each
parses only its new day, its dataset equals preprocessing from scratch, the champion is promoted on night 1 and
then kept or replaced by the rule (the champion scored on the new day), the history and its artifact grow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from flows import artifacts
from helpers.browser import needs_chromium, page, screenshot, visible_text
from helpers.datasets import assert_same_files
from helpers.prefect_api import answer, get, post, stamp
from helpers.processes import until
from models import registry
from training import NOISE
from training.launchers.output import KNOWN
from training.rundir import RunDir

NIGHTS = ("2026-11-04", "2026-11-05")
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
CRON = "0 2 * * *"
TUNE_CRON = "0 8 * * 6"   # the weekly re-tune


def _parsed(store: Path) -> dict[str, float]:
    """Input URI -> when its stored parse was finished (the per-file parts under the store)."""
    return {json.loads((p.parent / "entry.json").read_text())["uri"]: p.stat().st_mtime
            for p in store.glob("_files/*/parsed.json")}


def _check_the_ui_view_of_a_run(server, night: dict, run: Path, store: Path, tmp_path) -> None:
    """While training ran, the curve was published and then updated; every evaluation reached the logs at INFO,
    library warnings at WARNING; the pipeline run's Artifacts tab, a plot's page and the metrics table."""
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

    # the pipeline run's Artifacts tab (the V2 UI honours ?tab=): its own plots; then a plot's page
    dom = page(f"{ui}/v2/runs/flow-run/{run_id}?tab=Artifacts", tmp_path, "flow-run")
    assert "pipeline-metrics" in dom and "Metrics on split 'test'" in dom and "pipeline-outputs" in dom
    for key in ("roc-curve", "calibration-plot", "training-curve", artifacts.runs_key(str(store))):
        assert key in dom, key
    [roc] = server.artifacts("roc-curve", run_id)
    dom = page(f"{ui}/artifacts/artifact/{roc['id']}", tmp_path, "roc")
    assert re.search(r'<img [^>]*src="data:image/png;base64,iVBOR', dom) and "Image URL" not in dom
    [table] = server.artifacts("pipeline-metrics", run_id)
    dom = page(f"{ui}/artifacts/artifact/{table['id']}", tmp_path, "metrics-table")
    assert "ROC AUC" in dom and "normalized entropy" in dom


def _check_the_model_page(server, nights: tuple[dict, ...], tmp_path) -> None:
    """The model's page (issue 44): serve said where the UI and the page are; the Artifacts page lists it by the
    model's name; its latest version has each night's row linked to the night's flow run, whose page that link opens
    (DOMs kept in tmp_path: artifacts, model-versions, model-page, night; screenshots of the last two)."""
    ui = server.ui
    said = server.log("serve-nights")   # serve's output
    assert f"Prefect UI: {ui} " in said and f"{ui}/artifacts/key/model-demo" in said, said[-3000:]
    assert "  days/dlrmflow-days-demo: on demand" in said and f"  pipeline/dlrmflow-pipeline-demo: cron '{CRON}' UTC" \
        in said

    def loaded(url: str, name: str, pattern: str, picture: bool = False) -> str:   # the DOM once the UI drew it
        found = until(lambda: (dom := page(f"{ui}{url}", tmp_path, name)) and re.search(pattern, dom) and dom, 60,
                      f"{url} to show {pattern}")
        (tmp_path / f"{name}.html").write_text(found)
        if picture:   # a screenshot is a Chromium run of its own: the two pages a person would look at
            screenshot(f"{ui}{url}", tmp_path, name)
        return found

    loaded("/artifacts", "artifacts", r">\s*model-demo\s*<")   # the Artifacts page: a card per key, by the name
    versions = loaded("/artifacts/key/model-demo", "model-versions", r"/artifacts/artifact/")   # newest first
    latest = re.findall(r'href="/artifacts/artifact/([0-9a-f-]{36})"', versions)[0]
    [newest] = post(f"{server.api}/artifacts/filter", {"artifacts": {"key": {"any_": ["model-demo"]}},
                                                      "sort": "CREATED_DESC", "limit": 1})
    assert latest == newest["id"]
    dom = loaded(f"/artifacts/artifact/{latest}", "model-page", r"/runs/flow-run/", picture=True)
    text = visible_text(dom)
    assert "Champion" in text and "Latest night" in text and "The last nights" in text, text[:3000]
    links = dict(re.findall(r'<a href="(/runs/flow-run/[0-9a-f-]{36})"[^>]*>([^<]+)</a>', dom))
    for night in nights:
        assert links.get(f"/runs/flow-run/{night['id']}") == night["name"], links
    loaded(f"/runs/flow-run/{nights[0]['id']}", "night", re.escape(nights[0]["name"]), picture=True)   # its run


@needs_chromium
def test_two_nights_served_with_overlapping_triggers_and_the_ui(prefect_server, tmp_path):
    from preprocessing import PreprocessConfig, Preprocessing
    from synthetic.generator import SynthConfig, write_days

    server, api = prefect_server, prefect_server.api
    logs, store = tmp_path / "logs", tmp_path / "store"
    write_days(SynthConfig(out=str(logs), days=5, start="2026-11-01", rows_per_day=3000, seed=5))
    serve_args = ["--store", str(store), "--input", f"{logs}/{{date}}/part-*", "--train-days", "3", "--model", "demo",
                  "--cron", CRON, "--tune-cron", TUNE_CRON, "--data.batch-size", "256", "--data.eval-batch-size", "1024", "--log-every", "8",
                  "--eval-every", "8", "--checkpoint-every", "none",
                  "--nproc", "1"]   # every rank job on 1 rank (2 ranks: test_scoring, test_flows_pipeline)
    with server.serve(*serve_args, name="serve-nights") as serve:
        def pipeline_deployment():
            found = {k: v for k, v in server.deployments().items() if k.endswith("-demo")}   # (a shared server)
            return found.get("dlrmflow-pipeline-demo") if len(found) == 8 and not any(
                d["paused"] for d in found.values()) else None

        pipeline = until(pipeline_deployment, 120, "eight active deployments", server.proc, serve)
        assert {k for k in server.deployments() if k.endswith("-demo")} == {   # the model's eight
            "dlrmflow-pipeline-demo", "dlrmflow-preprocess-demo", "dlrmflow-train-demo", "dlrmflow-evaluate-demo",
            "dlrmflow-score-demo", "dlrmflow-tune-demo", "dlrmflow-days-demo",   # days: the data gate's verdicts
            "dlrmflow-spec-draft-demo"}
        assert [s["schedule"]["cron"] for s in pipeline["schedules"]] == [CRON]
        retune = server.deployments()["dlrmflow-tune-demo"]   # the weekly re-tune of the model on its champion's data
        assert [s["schedule"]["cron"] for s in retune["schedules"]] == [TUNE_CRON]
        assert retune["parameters"]["config"] == {"store": str(store), "model": "demo", "preset": "default"}
        dom = page(f"{server.ui}/deployments", tmp_path, "deployments")
        for name in server.deployments():
            assert name in dom
        assert "At 02:00 AM every day" in dom

        defaults = pipeline["parameters"]["config"]   # the form's defaults are serve's options
        assert defaults["preprocess"]["inputs"] == [f"{logs}/{{date}}/part-*"]
        assert (defaults["window"]["train_days"], defaults["model"]) == (3, "demo")
        assert pipeline["global_concurrency_limit"]["limit"] == 1
        assert pipeline["concurrency_options"]["collision_strategy"] == "ENQUEUE"

        def trigger(date: str) -> str:   # as the UI's Run button with only the date filled in
            return until(lambda: answer(post, f"{api}/deployments/{pipeline['id']}/create_flow_run",
                                        {"parameters": {"date": date}}), 60, "a new run", server.proc)["id"]

        def finish(run_id: str) -> dict:
            run = until(lambda: (r := get(f"{api}/flow_runs/{run_id}"))["state"]["type"] in FINAL and r,
                        480, "a night's run", server.proc, serve)
            assert run["state"]["type"] == "COMPLETED", server.log("serve-nights")[-4000:]
            return run

        # overlapping triggers: the second night is triggered while the first runs, and waits for it
        first_id = trigger(NIGHTS[0])
        until(lambda: get(f"{api}/flow_runs/{first_id}")["state"]["type"] == "RUNNING", 120, "night 1", serve)
        second_id = trigger(NIGHTS[1])
        until(lambda: get(f"{api}/flow_runs/{second_id}")["state"]["name"] == "AwaitingConcurrencySlot", 60,
              "night 2 to queue", serve)
        first, second = finish(first_id), finish(second_id)
        assert stamp(first["end_time"]) <= stamp(second["start_time"]), "two nights ran at once"

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
                          for _, m in server.logs(second_id)), 30, "the night's gc table in its logs")
        assert server.artifacts(artifacts.gc_key(str(store)), second_id)

        model = store / "models" / "demo"
        recorded = [json.loads(line) for line in (model / "history.jsonl").read_text().splitlines()]
        assert all(h["run"].startswith("runs/") for h in recorded)   # store-relative: a moved store keeps them
        history = registry.history(str(model))   # resolved against the store
        assert [h["date"] for h in history] == list(NIGHTS)
        assert history[0]["decision"] == "first" and history[0]["champion"] is None
        _check_the_ui_view_of_a_run(server, first, Path(history[0]["run"]), store, tmp_path)
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
        assert server.artifacts("model-demo-auc", second_id)
        # the data gate passed both nights (drifting days), each night's checks recorded; with a champion the test
        # day's values are checked against its vocabulary too
        for h in history:
            gate = h["data_checks"]
            assert gate["on_data_check"] == "fail" and gate["failed"] == [] and gate["unchecked"] == [], gate
            assert gate["checks"] > 100 and {c["day"] for c in gate["test_day"]} == {h["date"]}
        assert "unseen" not in {c["check"] for c in history[0]["data_checks"]["test_day"]}   # no champion yet
        assert {c["check"] for c in history[1]["data_checks"]["test_day"]} >= {"unseen", "drift", "psi", "missing"}
        [checks] = server.artifacts("data-checks", second_id)
        assert len(json.loads(checks["data"])) == history[1]["data_checks"]["checks"]
        assert server.artifacts("model-demo-drift", second_id)
        _check_the_model_page(server, (first, second), tmp_path)

    # the last night's dataset is the one preprocessing its window from scratch gives
    config = yaml.safe_load((Path(history[-1]["run"]) / RunDir.PIPELINE).read_text())
    dataset = Path(config["train"]["dataset"])
    fresh = Preprocessing(PreprocessConfig(inputs=config["preprocess"]["inputs"], out=str(tmp_path / "fresh"),
                                           progress=False)).run()
    assert_same_files(dataset, Path(fresh))
