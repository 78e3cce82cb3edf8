"""Nightly retraining end to end: a real Prefect server, `dlrmflow serve` with a dated input template, a window
and a model name, three nights triggered with dates over drifting synthetic days (the last two at once, as
overlapping triggers): each night parses only its new day, its dataset equals preprocessing from scratch,
the champion is promoted on night 1 and then kept or replaced by the rule, the history and its artifact grow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
from pathlib import Path

import yaml

from prefect_fixtures import BIN, free_port, process_group, wait_for_port
from same_dataset import assert_same_files
from test_ui_serve import _artifacts, _get, _post, _time, _until
from training.rundir import RunDir

NIGHTS = ("2026-11-04", "2026-11-05", "2026-11-06")
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def _parsed(store: Path) -> dict[str, float]:
    """Input URI -> when its stored parse was finished (the per-file parts under the store)."""
    return {json.loads((p.parent / "entry.json").read_text())["uri"]: p.stat().st_mtime
            for p in store.glob("_files/*/parsed.json")}


def _answer(call, *args):
    """The server's answer, None while it still starts (503)."""
    try:
        return call(*args)
    except urllib.error.HTTPError as e:
        if e.code != 503:
            raise
        return None


def test_three_nights_served_with_overlapping_triggers(tmp_path):
    from preprocessing import PreprocessConfig, Preprocessing
    from synthetic.generator import SynthConfig, write_days

    logs, store = tmp_path / "logs", tmp_path / "store"
    write_days(SynthConfig(out=str(logs), days=6, start="2026-11-01", rows_per_day=3000, seed=5))
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port), "PREFECT_API_URL": api,
           "PREFECT_RUNNER_POLL_FREQUENCY": "2", "OMP_NUM_THREADS": "1"}
    serve_args = ["--store", str(store), "--input", f"{logs}/{{date}}/part-*", "--train-days", "3", "--model", "demo",
                  "--data.batch-size", "256", "--data.eval-batch-size", "1024", "--log-every", "8",
                  "--checkpoint-every", "none"]
    with open(tmp_path / "server.log", "w") as server_log, open(tmp_path / "serve.log", "w") as serve_log, \
            process_group([str(BIN / "prefect"), "server", "start"], env=env, stdout=server_log,
                          stderr=subprocess.STDOUT) as server:
        wait_for_port(port, server, 120)
        _until(lambda: _answer(_get, f"{api}/health"), 60, "the server's health", server)
        with process_group([sys.executable, "-m", "flows", "serve", *serve_args], env=env, stdout=serve_log,
                           stderr=subprocess.STDOUT) as serve:
            pipeline = _until(lambda: next((d for d in _post(f"{api}/deployments/filter", {})
                                            if d["name"] == "dlrmflow-pipeline"), None), 120, "the pipeline", serve)
            defaults = pipeline["parameters"]["config"]   # the form's defaults are serve's options
            assert defaults["preprocess"]["inputs"] == [f"{logs}/{{date}}/part-*"]
            assert (defaults["window"]["train_days"], defaults["model"]) == (3, "demo")
            assert pipeline["global_concurrency_limit"]["limit"] == 1
            assert pipeline["concurrency_options"]["collision_strategy"] == "ENQUEUE"

            def trigger(date: str) -> str:   # as the UI's Run button with only the date filled in
                return _until(lambda: _answer(_post, f"{api}/deployments/{pipeline['id']}/create_flow_run",
                                              {"parameters": {"date": date}}), 60, "a new run", server)["id"]

            def finish(run_id: str) -> dict:
                run = _until(lambda: (r := _get(f"{api}/flow_runs/{run_id}"))["state"]["type"] in FINAL and r,
                             480, "a night's run", server, serve)
                assert run["state"]["type"] == "COMPLETED", (tmp_path / "serve.log").read_text()[-4000:]
                return run

            first = finish(trigger(NIGHTS[0]))
            after_first = _parsed(store)
            # 11-01 is pruned: the next night's window (11-02..11-05) does not read it
            assert sorted(after_first) == [f"{logs}/2026-11-0{d}/part-00000.tsv" for d in (2, 3, 4)]
            # overlapping triggers: the third night is triggered while the second runs, and waits for it
            second_id = trigger(NIGHTS[1])
            _until(lambda: _get(f"{api}/flow_runs/{second_id}")["state"]["type"] == "RUNNING", 120, "night 2", serve)
            third_id = trigger(NIGHTS[2])
            _until(lambda: _get(f"{api}/flow_runs/{third_id}")["state"]["name"] == "AwaitingConcurrencySlot", 60,
                   "night 3 to queue", serve)
            second, third = finish(second_id), finish(third_id)
            assert _time(first["end_time"]) <= _time(second["start_time"])
            assert _time(second["end_time"]) <= _time(third["start_time"]), "two nights ran at once"

            # each day was parsed once: by the first night that read it (older days pruned after night 3)
            parsed = _parsed(store)
            assert sorted(parsed) == [f"{logs}/2026-11-0{d}/part-00000.tsv" for d in (4, 5, 6)]
            assert parsed[f"{logs}/2026-11-04/part-00000.tsv"] == after_first[f"{logs}/2026-11-04/part-00000.tsv"]
            assert _time(second["start_time"]).timestamp() < parsed[f"{logs}/2026-11-05/part-00000.tsv"] \
                < _time(second["end_time"]).timestamp()

            model = store / "models" / "demo"
            history = [json.loads(line) for line in (model / "history.jsonl").read_text().splitlines()]
            assert [h["date"] for h in history] == list(NIGHTS)
            assert history[0]["decision"] == "first" and history[0]["champion"] is None
            champion_run = history[0]["run"]
            for h in history[1:]:
                assert h["champion_run"] == champion_run
                better = h["challenger"]["auc"] >= h["champion"]["auc"] + h["promote_margin"]
                assert h["decision"] == ("promoted" if better else "kept"), h
                champion_run = h["run"] if better else champion_run
            champion = json.loads((model / "champion.json").read_text())
            assert champion["run"] == champion_run
            # the champion's serving bundle (it scored the champion on nights 2 and 3), and at most the one before
            assert (Path(champion["bundle"]) / "manifest.json").is_file()
            assert Path(champion["bundle"]).parent == model / "bundles" and len(list((model / "bundles").iterdir())) <= 2
            for h in history:   # the challenger's numbers are its evaluation on the test day
                metrics = json.loads((Path(h["run"]) / "eval" / "test" / "metrics.json").read_text())
                assert h["challenger"]["auc"] == metrics["auc"] and h["challenger"]["rows"] == 3000
            versions = _post(f"{api}/artifacts/filter", {"artifacts": {"key": {"any_": ["model-demo-history"]}}})
            assert len(versions) == 3 and sorted(len(json.loads(v["data"])) for v in versions) == [1, 2, 3]
            assert _artifacts(api, "model-demo-auc", third_id)

    # the third night's dataset is the one preprocessing its window from scratch gives
    config = yaml.safe_load((Path(history[-1]["run"]) / RunDir.PIPELINE).read_text())
    dataset = Path(config["train"]["dataset"])
    fresh = Preprocessing(PreprocessConfig(inputs=config["preprocess"]["inputs"], out=str(tmp_path / "fresh"),
                                           progress=False)).run()
    assert_same_files(dataset, Path(fresh))
