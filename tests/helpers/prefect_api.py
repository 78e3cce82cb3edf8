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


def logs_matching(text: str) -> list[str]:
    """Messages of the Prefect logs (all runs of the harness) that contain ``text``."""
    from prefect import get_client
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # send the queued logs first
    found, offset = [], 0
    with get_client(sync_client=True) as client:  # (the server's text search needs a newer SQLite)
        while page := client.read_logs(limit=200, offset=offset):
            found += [log.message for log in page if text in log.message]
            offset += len(page)
    return found


def latest_artifacts() -> dict:
    """The data of the latest artifact of every key, by key (tables decoded)."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return {a.key: json.loads(a.data) if a.type == "table" else a.data
                for a in client.read_latest_artifacts(limit=200)}


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
