"""Prefect in the tests: a small pipeline config, the in-process client's logs and artifacts (the session's
test harness), and the REST API of a real `prefect server start` (``PrefectServer``, one per session: see
helpers/fixtures.py ``prefect_server``)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from helpers.paths import BIN
from helpers.processes import free_port, process_group, until, wait_for_port


def small_pipeline(store: str, **overrides):
    """A PipelineConfig that runs in seconds: 4,000 synthetic rows, a tiny DLRM, 2 ranks."""
    from nightly.config import PipelineConfig
    from training.config import TrainConfig

    train = TrainConfig.preset("default").with_overrides(
        {"data.batch_size": 256, "data.eval_batch_size": 1024, "log_every": 4, "checkpoint_every": None,
         **overrides.pop("train", {})})
    return PipelineConfig(store=store, synthetic={"rows": 4000, "files": 2, "seed": 3}, train=train.model_dump(),
                          launcher={"kind": "local", "nproc": 2}, **overrides)


# every flow run of this worker carries this tag (helpers/fixtures.py ``prefect_harness``): the harness's server is
# shared by the run's workers, so a test reads back only what its own worker's runs wrote
WORKER_TAG = f"pytest-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
HARNESS = "prefect-harness.json"   # in the run's shared folder: the harness server's API address and process


def start_harness(shared: Path) -> str:
    """The API address of the run's one test harness server (``shared``: the pytest run's folder, which its xdist
    workers share): the first worker to ask starts it (a copy of ``prefect_schema``'s database, in a process group
    of its own that the run's controller stops at its end: tests/conftest.py ``stop_harness``), the others use it.
    A server like ``prefect.testing.utilities.prefect_test_harness``'s (its settings, no UI), but one for the run
    instead of one per worker (a start costs ~9 CPU-seconds, each idle minute ~1)."""
    import sys

    import prefect

    with open(shared / "prefect-harness.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # the first worker starts it, the others wait for it
        if (shared / HARNESS).exists():
            return json.loads((shared / HARNESS).read_text())["api"]
        folder = shared / "prefect-harness"
        folder.mkdir(exist_ok=True)
        shutil.copyfile(prefect_schema(shared), folder / "prefect.db")
        port = free_port()
        env = {**os.environ, "PREFECT_HOME": str(folder), "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{folder / 'prefect.db'}",
               # events stored every 0.5 s, not every 5 s: a test reading an event back waits that long
               "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": "0.5"}
        with open(folder / "server.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent),
                                     "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1",
                                     "--port", str(port), "--log-level", "error", "--lifespan", "on"],
                                    env=env, process_group=0, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT)
        api = f"http://127.0.0.1:{port}/api"
        (shared / HARNESS).write_text(json.dumps({"api": api, "pid": proc.pid}))   # stopped at the run's end
        wait_for_port(port, proc, 120)
        until(lambda: answer(get, f"{api}/health"), 60, "the test harness server", proc)
        return api


def stop_harness(shared: Path) -> None:
    """Stop the run's test harness server, if one was started (by the run's controller, at its end)."""
    import signal

    if (shared / HARNESS).exists():
        pid = json.loads((shared / HARNESS).read_text())["pid"]
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _worker_runs(client) -> list:
    """The ids of this worker's flow runs (tagged ``WORKER_TAG``)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    ids, runs = [], FlowRunFilter(tags=FlowRunFilterTags(all_=[WORKER_TAG]))
    while page := client.read_flow_runs(flow_run_filter=runs, limit=200, offset=len(ids)):
        ids += [r.id for r in page]
    return ids


def worker_logs(text: str, newest_first: bool = False) -> list:
    """The Prefect log records of this worker's flow runs (and their tasks) whose message contains ``text``."""
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # send the queued logs first
    found, offset = [], 0
    sort = LogSort.TIMESTAMP_DESC if newest_first else LogSort.TIMESTAMP_ASC
    with get_client(sync_client=True) as client:  # (the server's text search needs a newer SQLite)
        mine = LogFilter(flow_run_id=LogFilterFlowRunId(any_=_worker_runs(client)))
        while page := client.read_logs(log_filter=mine, limit=200, offset=offset, sort=sort):
            found += [log for log in page if text in log.message]
            offset += len(page)
    return found


def logs_matching(text: str) -> list[str]:
    """Messages of the Prefect logs of this worker's runs that contain ``text``."""
    return [log.message for log in worker_logs(text)]


def latest_artifacts() -> dict:
    """The data of the latest artifact of every key, by key (tables decoded), of those this worker's flow runs
    made or that were made outside any flow run."""
    from prefect import get_client
    from prefect.client.schemas.sorting import ArtifactSort

    latest, offset = {}, 0
    with get_client(sync_client=True) as client:
        mine = set(_worker_runs(client))
        while page := client.read_artifacts(sort=ArtifactSort.CREATED_DESC, limit=200, offset=offset):
            for a in page:
                if a.key and a.key not in latest and (a.flow_run_id is None or a.flow_run_id in mine):
                    latest[a.key] = json.loads(a.data) if a.type == "table" else a.data
            offset += len(page)
    return latest


# ---------------------------------------------------------------- a real server's REST API

# generous: the server shares the 2 cores with the ranks of a night and, under `make test`, another pytest worker
TIMEOUT_S = 120


def get(url: str):
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
        return json.loads(r.read() or "null")


def post(url: str, body: dict):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
        return json.loads(r.read())


def answer(call, *args):
    """The server's answer, None while it still starts or is busy (503)."""
    try:
        return call(*args)
    except urllib.error.HTTPError as e:
        if e.code != 503:
            raise
        return None


def stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class PrefectServer:
    """A running `prefect server start`: its UI and API addresses, the environment that points a `dlrmflow
    serve` at it, the server process and a folder for logs."""
    ui: str
    api: str
    env: dict
    proc: subprocess.Popen
    folder: Path

    def artifacts(self, key: str, flow_run_id: str) -> list[dict]:
        """Every version of artifact ``key`` on a flow run."""
        return post(f"{self.api}/artifacts/filter", {"artifacts": {"key": {"any_": [key]},
                                                                  "flow_run_id": {"any_": [flow_run_id]}}})

    def logs(self, flow_run_id: str, subflows: bool = False) -> list[tuple[int, str]]:
        """(level, message) of a flow run's logs (its tasks' included; with ``subflows``, its subflow runs' too),
        in time order."""
        runs = [flow_run_id]
        if subflows:
            runs += [r["id"] for r in post(f"{self.api}/flow_runs/filter",
                                           {"flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}})]
        found: list[tuple[int, str]] = []
        while page := post(f"{self.api}/logs/filter", {"logs": {"flow_run_id": {"any_": runs}},
                                                       "limit": 200, "offset": len(found), "sort": "TIMESTAMP_ASC"}):
            found += [(log["level"], log["message"]) for log in page]
        return found

    def deployments(self) -> dict[str, dict]:
        return {d["name"]: d for d in post(f"{self.api}/deployments/filter", {})}

    @contextmanager
    def serve(self, *args: str, name: str, env: dict | None = None):
        """`dlrmflow serve ARGS` against this server, without a terminal, in its own process group (stopped on
        exit); its output in ``folder/<name>.log``."""
        import sys

        with open(self.folder / f"{name}.log", "w") as log, \
                process_group([sys.executable, "-m", "flows", "serve", *args], env={**self.env, **(env or {})},
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT) as proc:
            yield proc

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text()


def prefect_schema(shared: Path) -> Path:
    """An empty SQLite database with Prefect's schema in ``shared`` (the pytest run's folder, which its xdist
    workers share), made once: every Prefect server of the suite starts from a copy of it instead of migrating a
    database of its own (~10 CPU-seconds each, of a start's ~17)."""
    schema = shared / "prefect-schema.db"
    with open(shared / "prefect-schema.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # the first worker makes it, the others wait for it
        if not schema.exists():
            made = shared / "prefect-schema.tmp.db"
            made.unlink(missing_ok=True)
            env = {**os.environ, "PREFECT_HOME": str(shared / "prefect-schema-home"),
                   "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{made}"}
            subprocess.run([str(BIN / "prefect"), "server", "database", "upgrade", "-y"], env=env, check=True,
                           capture_output=True, timeout=600)
            made.rename(schema)
    return schema


@contextmanager
def prefect_server(folder: Path, port: int | None = None, schema: Path | None = None):
    """Start `prefect server start` (SQLite under ``folder``, a copy of ``schema`` when given: see
    ``prefect_schema``) on a free loopback port; a PrefectServer once it answers its health check."""
    if schema is not None:
        (folder / "prefect").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(schema, folder / "prefect" / "prefect.db")   # PREFECT_HOME's default database
    port = port or free_port()
    ui, api = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(folder / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port), "PREFECT_API_URL": api,
           "PREFECT_RUNNER_POLL_FREQUENCY": "2", "OMP_NUM_THREADS": "1",
           "PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS": "3"}   # a queued night retries soon (30 s)
    with open(folder / "server.log", "w") as log, process_group([str(BIN / "prefect"), "server", "start"], env=env,
                                                                stdout=log, stderr=subprocess.STDOUT) as proc:
        wait_for_port(port, proc, 120)
        until(lambda: answer(get, f"{api}/health"), 60, "the server's health", proc)
        yield PrefectServer(ui, api, env, proc, folder)
