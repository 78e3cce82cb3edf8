"""The served deployments' forms and `serve`'s life on the session's real Prefect server: the train
form requires the dataset, the pipeline form offers the presets and not the fields the pipeline fills in,
the local launcher shows no cluster fields, the preprocess form takes a spec by store name or pasted (headless
Chromium), and `serve` without a terminal stops on SIGTERM (pausing the deployments) and ends with an error when
its server has gone. One test: two serves at once, so that the wait for the server gone overlaps the forms."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager

from helpers.browser import Browser, all_of, needs_chromium, visible_text
from helpers.prefect_api import post
from helpers.processes import until

pytestmark = needs_chromium
SIX = {f"dlrmflow-{flow}" for flow in ("pipeline", "preprocess", "train", "evaluate", "score", "tune")}


def _active(api: str, names: set[str]) -> bool:
    """Whether the deployments ``names`` are all on the server, none paused."""
    mine = [d for d in post(f"{api}/deployments/filter", {}) if d["name"] in names]
    return len(mine) == len(names) and not any(d["paused"] for d in mine)


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


def test_forms_sigterm_and_the_server_gone(prefect_server, tmp_path):
    """Two `dlrmflow serve` at once, without a terminal: one of the store, whose forms Chromium reads and which stops
    on SIGTERM; one of model ``gone`` (its own deployment names) talking to the session's server through a relay,
    whose closing is, to it, the server gone: it ends with an error while the forms are read (the server itself keeps
    running). Issue 42 §3: the spec-draft deployment's form asks for the data and points at the served store; the
    preprocess form's spec is a text box (a pasted spec keeps its line breaks) that says it takes store:NAME."""
    server, api, ui = prefect_server, prefect_server.api, prefect_server.ui
    gone_names = {f"{name}-gone" for name in SIX}
    with _relay(int(api.split(":")[2].split("/")[0])) as (port, close), \
            server.serve("--store", str(server.folder / "store-gone"), "--model", "gone", name="serve-gone",
                         env={"PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}) as gone, \
            server.serve("--store", str(server.folder / "store"), name="serve") as serve, \
            Browser(tmp_path / "browser") as browser:
        until(lambda: _active(api, gone_names), 120, "serve-gone's deployments", server.proc, gone)
        start = time.monotonic()
        close()   # the server gone, for serve-gone
        until(lambda: _active(api, SIX), 120, "six active deployments", server.proc, serve)
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
        drafting = deployments["dlrmflow-spec-draft"]
        assert drafting["parameters"]["config"] == {"inputs": [], "store": str(server.folder / "store")}
        assert {"inputs", "label", "rows", "name", "overwrite"} <= set(
            drafting["parameter_openapi_schema"]["definitions"]["SpecDraftConfig"]["properties"])

        train = deployments["dlrmflow-train"]["id"]
        form = visible_text(browser.open(f"{ui}/deployments/deployment/{train}/run", "A dataset folder", "train"))
        assert " | dataset | A dataset folder" in form and "dataset (Optional)" not in form
        dom = browser.open(f"{ui}/deployments/deployment/{pipeline['id']}/run", all_of(
            "Launcher (Optional)", "Evaluate (Optional)", "Preset (Optional)", "Store (Optional)", '"local"',
            "out/_work"), "pipeline", picture=True)
        form = visible_text(dom)
        launcher = form[form.index("Launcher (Optional)"):form.index("Evaluate (Optional)")]
        assert '"local"' in launcher and not re.search(r"partition|sbatch|namespace|kubectl|gpus_per_node", launcher)
        assert "Preset (Optional)" in form and "`out/_work`" not in form and "out/_work" in form
        field = dom[dom.index("Preset (Optional)"):dom.index("Store (Optional)")]   # a select, no str / None toggle
        assert re.findall(r'<option [^>]*value="([^"]+)"', field) == ["none", "criteo-sample", "default", "synthetic"]
        assert re.search(r'selected="" value="none"', field) and ">str<" not in field, field[-2000:]
        dom = browser.open(f"{ui}/deployments/deployment/{deployments['dlrmflow-preprocess']['id']}/run",
                           all_of("Spec (Optional)", "Split (Optional)", "<textarea", "store:NAME"), "preprocess")
        field = dom[dom.index("Spec (Optional)"):dom.index("Split (Optional)")]
        assert "<textarea" in field and "store:NAME" in visible_text(field), visible_text(field)[:2000]
        os.killpg(serve.pid, signal.SIGTERM)
        code = _wait(serve, 30)
        gone_code = _wait(gone, 90)
    assert code == 0
    deployments = [d for d in post(f"{api}/deployments/filter", {}) if d["name"] in SIX]
    assert len(deployments) == 6 and all(d["paused"] for d in deployments)
    scheduled = post(f"{api}/flow_runs/filter", {"flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}})
    assert not [r for r in scheduled if r["auto_scheduled"] and r["deployment_id"] in {d["id"] for d in deployments}]
    output = server.log("serve-gone")
    assert gone_code == 2, output[-3000:]
    assert "has not answered" in output and time.monotonic() - start < 90

