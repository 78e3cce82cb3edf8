"""End to end through the UI: a real Prefect server (SQLite, a free loopback port), `dlrmflow serve`,
headless Chromium on the deployments page, the pipeline triggered as the UI's Run button does
(POST /deployments/{id}/create_flow_run): the training curve published and updated while it trains, every
evaluation in the train run's logs, the plots on the pipeline run's Artifacts tab and the metrics table."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from datetime import datetime

import pytest

from flows import artifacts
from helpers.prefect import BIN, free_port, process_group, small_pipeline, wait_for_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CRON = "0 2 * * *"


def _page(url: str, tmp_path, name: str) -> str:
    """The DOM of ``url`` as headless Chromium renders it (the UI is a single-page app)."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,900",
             "--virtual-time-budget=10000", f"--user-data-dir={tmp_path / ('chrome-' + name)}"]
    return subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=90).stdout


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read() or "null")


def _post(url: str, body: dict):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _until(check, timeout: float, what: str, *procs):
    deadline = time.time() + timeout
    while not (value := check()):
        for p in procs:
            assert p.poll() is None, f"{p.args[0]} exited with {p.returncode} while waiting for {what}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(1)
    return value


def _artifacts(api: str, key: str, flow_run_id: str) -> list[dict]:
    """Every version of artifact ``key`` on a flow run."""
    return _post(f"{api}/artifacts/filter", {"artifacts": {"key": {"any_": [key]},
                                                          "flow_run_id": {"any_": [flow_run_id]}}})


def _logs(api: str, flow_run_id: str) -> list[tuple[int, str]]:
    """(level, message) of a flow run's logs (its tasks' included)."""
    found: list[tuple[int, str]] = []
    while page := _post(f"{api}/logs/filter", {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200,
                                               "offset": len(found), "sort": "TIMESTAMP_ASC"}):
        found += [(log["level"], log["message"]) for log in page]
    return found


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Chromium is not installed (infra/install.sh)")
def test_serve_deployments_ui_and_a_triggered_pipeline(tmp_path):
    port = free_port()
    ui, api = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port), "PREFECT_API_URL": api,
           "PREFECT_RUNNER_POLL_FREQUENCY": "2", "OMP_NUM_THREADS": "1"}
    store = tmp_path / "store"
    with open(tmp_path / "server.log", "w") as server_log, open(tmp_path / "serve.log", "w") as serve_log, \
            process_group([str(BIN / "prefect"), "server", "start"], env=env, stdout=server_log,
                          stderr=subprocess.STDOUT) as server:
        wait_for_port(port, server, 120)
        _until(lambda: _get(f"{api}/health"), 60, "the server's health", server)
        with process_group([sys.executable, "-m", "flows", "serve", "--store", str(store), "--cron", CRON], env=env,
                           stdout=serve_log, stderr=subprocess.STDOUT) as serve:
            deployments = _until(lambda: len(d := _post(f"{api}/deployments/filter", {})) == 5 and d, 120,
                                 "five deployments", server, serve)
            names = {d["name"]: d for d in deployments}
            assert set(names) == {"dlrmflow-pipeline", "dlrmflow-preprocess", "dlrmflow-train", "dlrmflow-evaluate",
                                  "dlrmflow-score"}
            assert [s["schedule"]["cron"] for s in names["dlrmflow-pipeline"]["schedules"]] == [CRON]

            dom = _page(f"{ui}/deployments", tmp_path, "deployments")
            for name in names:
                assert name in dom
            assert "At 02:00 AM every day" in dom

            config = small_pipeline(str(store), train={"eval_every": 4}).model_dump(mode="json")  # 12 steps
            run = _post(f"{api}/deployments/{names['dlrmflow-pipeline']['id']}/create_flow_run",
                        {"parameters": {"config": config}})
            final = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
            state = _until(lambda: (s := _get(f"{api}/flow_runs/{run['id']}")["state"])["type"] in final and s,
                           420, "the pipeline run", server, serve)
            assert state["type"] == "COMPLETED", (tmp_path / "serve.log").read_text()[-3000:]

            # while training ran, the curve was published and then updated; every evaluation reached the logs
            [train_run] = _post(f"{api}/flow_runs/filter", {"flows": {"name": {"any_": ["train"]}}})
            [torchrun] = _post(f"{api}/task_runs/filter", {"flow_runs": {"id": {"any_": [train_run["id"]]}},
                                                          "task_runs": {"name": {"like_": "launch_torchrun"}}})
            for key in ("training-curve", "training-evaluations"):  # one card per run, rewritten at each evaluation
                [art] = _artifacts(api, key, train_run["id"])
                assert _time(art["created"]) < _time(art["updated"]) <= _time(torchrun["end_time"]), art
            assert [row["step"] for row in json.loads(art["data"])] == [4, 8, 12]
            evaluations = [r for r in map(json.loads, next(store.glob("runs/*/metrics.jsonl")).open())
                           if "eval_split" in r]
            logs = _logs(api, train_run["id"])
            assert [r["step"] for r in evaluations] == [4, 8, 12]
            for r in evaluations:
                assert (20, f"[rank 0] step {r['step']}: val auc {r['auc']:.4f} logloss {r['logloss']:.4f}") in logs
            assert any(level == 30 and "Warning" in message for level, message in logs)  # library warnings
            assert not [m for level, m in logs if level < 30 and ("Warning: " in m or "Memory per rank" in m)]

            # the pipeline run's Artifacts tab (the V2 UI honours ?tab=): its own plots; then a plot's page
            dom = _page(f"{ui}/v2/runs/flow-run/{run['id']}?tab=Artifacts", tmp_path, "flow-run")
            assert "pipeline-metrics" in dom and "Metrics on split 'test'" in dom and "pipeline-outputs" in dom
            for key in ("roc-curve", "calibration-plot", "training-curve", artifacts.runs_key(str(store))):
                assert key in dom, key
            [roc] = _artifacts(api, "roc-curve", run["id"])
            dom = _page(f"{ui}/artifacts/artifact/{roc['id']}", tmp_path, "roc")
            assert re.search(r'<img [^>]*src="data:image/png;base64,iVBOR', dom) and "Image URL" not in dom
            [table] = _post(f"{api}/artifacts/filter", {"artifacts": {"key": {"any_": ["pipeline-metrics"]},
                                                                     "flow_run_id": {"any_": [run["id"]]}}})
            dom = _page(f"{ui}/artifacts/artifact/{table['id']}", tmp_path, "metrics-table")
            assert "ROC AUC" in dom and "normalized entropy" in dom
    assert (store / "runs").is_dir() and list(store.glob("runs/*/eval/test/metrics.json"))
