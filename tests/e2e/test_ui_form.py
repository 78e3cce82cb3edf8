"""The served deployments' forms and `serve`'s life on the session's real Prefect server: the train
form requires the dataset, the pipeline form offers the presets and not the fields the pipeline fills in,
the local launcher shows no cluster fields (headless Chromium), and `serve` without a terminal stops on
SIGTERM (pausing the deployments) and ends with an error when its server has gone."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager

import pytest

from helpers.browser import needs_chromium, page, screenshot, visible_text
from helpers.prefect_api import post
from helpers.processes import until

pytestmark = needs_chromium
SIX = {f"dlrmflow-{flow}" for flow in ("pipeline", "preprocess", "train", "evaluate", "score", "tune")}


@contextmanager
def _serve(server, name: str, **env: str):
    """`dlrmflow serve` as a background process without a terminal; waits for its six active deployments (those
    without a model name: the session's server also holds the served nightly test's ``-<model>`` ones)."""
    def active(d: list[dict]) -> bool:
        mine = [x for x in d if x["name"] in SIX]
        return len(mine) == 6 and not any(x["paused"] for x in mine)

    with server.serve("--store", str(server.folder / "store"), name=name, env=env) as serve:
        until(lambda: active(post(f"{server.api}/deployments/filter", {})), 120, "six active deployments",
              server.proc, serve)
        yield serve


def _wait(proc: subprocess.Popen, timeout: float) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return None


@contextmanager
def _relay(port: int):
    """A TCP relay from a free loopback port to ``port``: (its port, close). Closing it (the listener and every
    open connection) is, to a client, the server gone; the session's server itself keeps running."""
    listener = socket.create_server(("127.0.0.1", 0))
    conns: list[socket.socket] = []
    closed = threading.Event()

    def pipe(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for c in (a, b):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def accept():
        while not closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", port))
            conns.extend((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    def close():
        closed.set()
        listener.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], close
    finally:
        close()


def test_forms_and_sigterm(prefect_server, tmp_path):
    server, api, ui = prefect_server, prefect_server.api, prefect_server.ui
    with _serve(server, "serve") as serve:
        deployments = {d["name"]: d for d in post(f"{api}/deployments/filter", {})}
        schema = deployments["dlrmflow-train"]["parameter_openapi_schema"]
        assert {"run_uri", "dataset"} <= set(schema["required"])
        assert "dataset" not in schema["definitions"]["FlowTrainConfig"]["properties"]
        pipeline = deployments["dlrmflow-pipeline"]
        defs = pipeline["parameter_openapi_schema"]["definitions"]
        assert "dataset" not in defs["FlowTrainConfig"]["properties"]
        assert not {"out", "progress"} & set(defs["PipelinePreprocessConfig"]["properties"])
        preset = defs["PipelineConfig"]["properties"]["preset"]   # one choice, not a str / None toggle
        assert (preset["enum"], preset["default"]) == (["none", "criteo-sample", "default", "synthetic"], "none")
        assert pipeline["parameters"]["config"]["preset"] == "none" and "anyOf" not in preset
        assert pipeline["schedules"][0]["schedule"]["timezone"] == "UTC"
        tune = deployments["dlrmflow-tune"]   # on demand (no model, no --tune-cron): the form asks for a dataset
        assert tune["schedules"] == [] and tune["parameter_openapi_schema"]["required"] == ["config"]
        assert {"dataset", "trials", "parallel", "space", "pruner"} <= set(
            tune["parameter_openapi_schema"]["definitions"]["TuneConfig"]["properties"])

        train = deployments["dlrmflow-train"]["id"]
        form = visible_text(page(f"{ui}/deployments/deployment/{train}/run", tmp_path, "train"))
        assert " | dataset | A dataset folder" in form and "dataset (Optional)" not in form
        dom = page(f"{ui}/deployments/deployment/{pipeline['id']}/run", tmp_path, "pipeline")
        form = visible_text(dom)
        launcher = form[form.index("Launcher (Optional)"):form.index("Evaluate (Optional)")]
        assert '"local"' in launcher and not re.search(r"partition|sbatch|namespace|kubectl|gpus_per_node", launcher)
        assert "Preset (Optional)" in form and "`out/_work`" not in form and "out/_work" in form
        field = dom[dom.index("Preset (Optional)"):dom.index("Store (Optional)")]   # a select, no str / None toggle
        assert re.findall(r'<option [^>]*value="([^"]+)"', field) == ["none", "criteo-sample", "default", "synthetic"]
        assert re.search(r'selected="" value="none"', field) and ">str<" not in field, field[-2000:]
        screenshot(f"{ui}/deployments/deployment/{pipeline['id']}/run", tmp_path, "pipeline-form")
        os.killpg(serve.pid, signal.SIGTERM)
        code = _wait(serve, 30)
    assert code == 0
    deployments = [d for d in post(f"{api}/deployments/filter", {}) if d["name"] in SIX]
    assert len(deployments) == 6 and all(d["paused"] for d in deployments)
    scheduled = post(f"{api}/flow_runs/filter", {"flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}})
    assert not [r for r in scheduled if r["auto_scheduled"] and r["deployment_id"] in {d["id"] for d in deployments}]


def test_the_preprocess_form_takes_a_spec_by_store_name_or_pasted(prefect_server, tmp_path):
    """Issue 42 §3: the spec-draft deployment's form asks for the data and points at the served store; the preprocess
    form's spec is a text box (a pasted spec keeps its line breaks) that says it takes store:NAME."""
    server, api, ui = prefect_server, prefect_server.api, prefect_server.ui
    with _serve(server, "serve-spec"):
        deployments = {d["name"]: d for d in post(f"{api}/deployments/filter", {})}
        drafting = deployments["dlrmflow-spec-draft"]
        assert drafting["parameters"]["config"] == {"inputs": [], "store": str(server.folder / "store")}
        assert {"inputs", "label", "rows", "name", "overwrite"} <= set(
            drafting["parameter_openapi_schema"]["definitions"]["SpecDraftConfig"]["properties"])
        form = deployments["dlrmflow-preprocess"]["id"]
        dom = page(f"{ui}/deployments/deployment/{form}/run", tmp_path, "preprocess")
        field = dom[dom.index("Spec (Optional)"):dom.index("Split (Optional)")]
        assert "<textarea" in field and "store:NAME" in visible_text(field), visible_text(field)[:2000]


def test_serve_ends_with_an_error_when_the_server_has_gone(prefect_server):
    """`serve` talks to the session's server through a relay; closing the relay is the server gone."""
    with _relay(int(prefect_server.api.split(":")[2].split("/")[0])) as (port, close):
        with _serve(prefect_server, "serve-gone", PREFECT_API_URL=f"http://127.0.0.1:{port}/api") as serve:
            start = time.monotonic()
            close()
            code = _wait(serve, 90)
    output = prefect_server.log("serve-gone")
    assert code == 2, output[-3000:]
    assert "has not answered" in output and time.monotonic() - start < 90
