"""The served deployments' forms and `serve`'s life on a real Prefect server (one per module): the train
form requires the dataset, the pipeline form offers the presets and not the fields the pipeline fills in,
the local launcher shows no cluster fields (headless Chromium), and `serve` without a terminal stops on
SIGTERM (pausing the deployments) and ends with an error when its server has gone."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers.paths import BIN
from helpers.processes import free_port, process_group, wait_for_port
from test_ui_serve import CHROMIUM, _get, _page, _post, _until

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Chromium is not installed (infra/install.sh)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Prefect server on a free loopback port: (api, ui, env, server process, folder)."""
    tmp = tmp_path_factory.mktemp("ui-form")
    port = free_port()
    ui, api = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port), "PREFECT_API_URL": api,
           "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
    with open(tmp / "server.log", "w") as log, process_group([str(BIN / "prefect"), "server", "start"], env=env,
                                                              stdout=log, stderr=subprocess.STDOUT) as proc:
        wait_for_port(port, proc, 120)
        _until(lambda: _get(f"{api}/health"), 60, "the server's health", proc)
        yield api, ui, env, proc, tmp


def _serve(server, name: str):
    """`dlrmflow serve` as a background process without a terminal; waits for its five deployments."""
    api, _, env, proc, tmp = server
    log = open(tmp / f"{name}.log", "w")
    serve = subprocess.Popen([sys.executable, "-m", "flows", "serve", "--store", str(tmp / "store")], env=env,
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    _until(lambda: len(d := _post(f"{api}/deployments/filter", {})) == 5 and not any(x["paused"] for x in d), 120,
           "five active deployments", proc, serve)
    return serve


def _wait(proc: subprocess.Popen, timeout: float) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return None


def _text(dom: str) -> str:
    """The visible text of a DOM dump, one ' | ' between elements."""
    dom = re.sub(r"<(style|svg|script)\b.*?</\1>", "", dom, flags=re.S)
    return re.sub(r"(\s*\|\s*)+", " | ", re.sub(r"<[^>]+>", " | ", dom))


def test_forms_and_sigterm(server, tmp_path):
    api, ui, *_ = server
    serve = _serve(server, "serve")
    try:
        deployments = {d["name"]: d for d in _post(f"{api}/deployments/filter", {})}
        schema = deployments["dlrmflow-train"]["parameter_openapi_schema"]
        assert {"run_uri", "dataset"} <= set(schema["required"])
        assert "dataset" not in schema["definitions"]["TrainSettings"]["properties"]
        pipeline = deployments["dlrmflow-pipeline"]
        defs = pipeline["parameter_openapi_schema"]["definitions"]
        assert "dataset" not in defs["TrainSettings"]["properties"]
        assert not {"out", "progress"} & set(defs["PipelinePreprocess"]["properties"])
        assert defs["PipelineConfig"]["properties"]["preset"]["anyOf"][0]["enum"] == ["default", "criteo-sample",
                                                                                      "synthetic"]
        assert pipeline["schedules"][0]["schedule"]["timezone"] == "UTC"

        form = _text(_page(f"{ui}/deployments/deployment/{deployments['dlrmflow-train']['id']}/run", tmp_path, "train"))
        assert " | dataset | A dataset folder" in form and "dataset (Optional)" not in form
        form = _text(_page(f"{ui}/deployments/deployment/{pipeline['id']}/run", tmp_path, "pipeline"))
        launcher = form[form.index("Launcher (Optional)"):form.index("Evaluate (Optional)")]
        assert '"local"' in launcher and not re.search(r"partition|sbatch|namespace|kubectl|gpus_per_node", launcher)
        assert "Preset (Optional)" in form and "`out/_work`" not in form and "out/_work" in form
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        code = _wait(serve, 30)
    assert code == 0
    deployments = _post(f"{api}/deployments/filter", {})
    assert all(d["paused"] for d in deployments)
    scheduled = _post(f"{api}/flow_runs/filter", {"flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}})
    assert not [r for r in scheduled if r["auto_scheduled"]]


def test_serve_ends_with_an_error_when_the_server_has_gone(server):
    *_, proc, tmp = server
    serve = _serve(server, "serve-gone")
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    code = _wait(serve, 90)
    output = (tmp / "serve-gone.log").read_text()
    assert code == 2, output[-3000:]
    assert "has not answered" in output and time.monotonic() - start < 90
