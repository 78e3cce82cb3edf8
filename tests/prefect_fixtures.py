"""Fixtures for the flow, store and UI tests: one Prefect test harness per session, a moto S3 server
on a free loopback port, small synthetic inputs, free ports, and process groups that always stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing-key", "AWS_SECRET_ACCESS_KEY": "testing-secret-3f9a1c",
          "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert proc.poll() is None, f"process exited with {proc.returncode}"
            assert time.time() < deadline, f"nothing listens on port {port} after {timeout} s"
            time.sleep(0.1)


@contextmanager
def process_group(cmd: list[str], **kwargs):
    """Start ``cmd`` in its own process group; on exit stop the whole group (TERM, then KILL)."""
    proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
    try:
        yield proc
    finally:
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue


@pytest.fixture(scope="session")
def prefect_harness():
    """A temporary Prefect API with a SQLite database, shared by the session's flow tests."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def synthetic_inputs(tmp_path_factory) -> str:
    """4,000 synthetic Criteo rows in two files; returns their glob."""
    from synthetic.generator import generate

    folder = tmp_path_factory.mktemp("synthetic")
    generate(str(folder), rows=4000, files=2, seed=1)
    return f"{folder}/part-*"


@pytest.fixture()
def s3_server(monkeypatch):
    """moto's S3 server on a free 127.0.0.1 port with a bucket ``store``; AWS_* variables point at it."""
    import boto3
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()  # cached filesystems keep the endpoint of an earlier test
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with process_group([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        wait_for_port(port, proc, 30)
        for key, value in {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}.items():
            monkeypatch.setenv(key, value)
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket="store")
        yield s3


def small_pipeline(store: str, **overrides):
    """A PipelineConfig that runs in seconds: 4,000 synthetic rows, a tiny DLRM, 2 ranks."""
    from flows.config import PipelineConfig
    from training.config import TrainConfig

    train = TrainConfig.preset("default").with_overrides(
        {"data.batch_size": 256, "data.eval_batch_size": 1024, "log_every": 4, "checkpoint_every": None,
         **overrides.pop("train", {})})
    return PipelineConfig(store=store, synthetic={"rows": 4000, "files": 2, "seed": 3}, train=train.model_dump(),
                          nproc=2, **overrides)


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
    import json

    from prefect import get_client

    with get_client(sync_client=True) as client:
        return {a.key: json.loads(a.data) if a.type == "table" else a.data
                for a in client.read_latest_artifacts(limit=200)}
