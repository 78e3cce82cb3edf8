"""The preprocess flow on a real Dask cluster (a `dask scheduler` and two `dask worker` processes on loopback,
prefect-dask's DaskTaskRunner) with the store on moto's S3 server and a worker killed mid-run: the same bytes
as the local threads run, the intermediate parts in the store. (One test: a cluster and a harness cost a minute.)"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from helpers.paths import BIN, HELPERS
from helpers.processes import free_port, process_group, wait_for_port
from helpers.datasets import assert_same_files

from preprocessing.config import FlowPreprocessConfig
from flows.preprocess import preprocess
from preprocessing import PreprocessConfig, run

pytestmark = pytest.mark.usefixtures("prefect_harness")



@contextmanager
def dask_cluster(workers: int = 2, slow_s: float = 0.0):
    """A scheduler and ``workers`` one-thread workers on 127.0.0.1 (each stage slowed by ``slow_s`` there);
    yields (address, worker processes)."""
    port = free_port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    env = {**os.environ, "DLRMFLOW_SLOW_S": str(slow_s), "PYTHONPATH": os.pathsep.join(filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")]))}
    with ExitStack() as stack:
        scheduler = stack.enter_context(process_group(
            [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            env=env, **quiet))
        wait_for_port(port, scheduler, 60)
        address = f"tcp://127.0.0.1:{port}"
        procs = [stack.enter_context(process_group(
            [str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard",
             "--no-nanny", "--preload", "slow_preprocess"], env=env, **quiet)) for _ in range(workers)]
        _wait_for_workers(address, workers)
        yield address, procs


def _wait_for_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(n, timeout=60)


def _download(uri: str, local: Path) -> Path:
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri)
    fs.get(path + "/", str(local) + "/", recursive=True)
    return local


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> str:
    """4,000 synthetic Criteo rows in four files."""
    from synthetic.generator import generate

    folder = tmp_path_factory.mktemp("dask-inputs")
    generate(str(folder), rows=4000, files=4, seed=5)
    return f"{folder}/part-*"


def _config(inputs: str, out: str, **kw) -> dict:
    return {"inputs": [inputs], "out": out, "frequency_threshold": 2, "progress": False, **kw}


def test_dask_run_on_s3_with_a_killed_worker_matches_the_threads_run(inputs, s3_server, tmp_path):
    import fsspec

    reference = Path(run(PreprocessConfig(**_config(inputs, str(tmp_path / "local")))))
    config = FlowPreprocessConfig(**_config(inputs, "s3://store/k", task_runner="dask",
                                            work_dir=str(tmp_path / "cache")))
    fs, _ = fsspec.core.url_to_fs("s3://store")
    with dask_cluster(slow_s=0.5) as (address, workers):
        def kill_when_parsing():   # a store listing per poll; 0.2 s lies well inside a stage's 0.5 s pause
            deadline = time.time() + 60
            while time.time() < deadline:
                fs.invalidate_cache()
                if fs.glob("store/k/_files/*/entry.json"):
                    break
                time.sleep(0.2)
            workers[0].kill()   # the worker process itself (--no-nanny: nothing restarts it)

        killer = threading.Thread(target=kill_when_parsing)
        killer.start()
        state = preprocess(config.model_copy(update={"dask_address": address}), return_state=True)
        killer.join()
        assert workers[0].poll() is not None
        if not state.is_completed():   # Dask did not reschedule: a re-run resumes from the finished parts
            state = preprocess(config.model_copy(update={"dask_address": address}), return_state=True)
        dataset = state.result()
    assert dataset == f"s3://store/k/datasets/{reference.name}"
    assert_same_files(reference, _download(dataset, tmp_path / "dask"))
    keys = [o["Key"] for o in s3_server.list_objects_v2(Bucket="store", Prefix="k/")["Contents"]]
    # the per-file parts are in the store (parsed by the workers), the job's work folder is gone
    assert len([k for k in keys if k.startswith("k/_files/") and k.endswith("/parsed.json")]) == 4
    assert len([k for k in keys if k.startswith("k/_files/") and k.endswith("/parsed.complete")]) == 4
    assert not [k for k in keys if k.startswith("k/_work/")]
