"""The fixtures the test folders share (registered by tests/conftest.py). Those declared with ``slow_fixture``
start torchrun or a server: a test using one is marked slow (helpers/slow.py)."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import fake_cluster
from helpers.datasets import write_dataset
from helpers.paths import ADULT, BIN, CRITEO_10K, REPO, need
from helpers.prefect_api import WORKER_TAG, prefect_schema, prefect_server as start_prefect_server, start_harness
from helpers.processes import free_port, one_rank, process_group, wait_for_port
from helpers.runs import TrainedRuns
from helpers.slow import slow_fixture

S3_ENV = {"AWS_ACCESS_KEY_ID": "testing-key", "AWS_SECRET_ACCESS_KEY": "testing-secret-3f9a1c",
          "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def criteo_10k() -> Path:
    """The 10,000 real Criteo Kaggle rows (gzipped raw TSV)."""
    return need(CRITEO_10K)


@pytest.fixture(scope="session")
def adult_parquet() -> Path:
    """The UCI Adult table (bring-your-own path)."""
    return need(ADULT)


def _shared_folder(tmp_path_factory) -> Path:
    """The pytest run's temporary folder, which its xdist workers share (each has a ``popen-gwN`` in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@slow_fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """The run's temporary Prefect API (a SQLite database; ``helpers.prefect_api.start_harness``: one server for all
    xdist workers) for the session's in-process flow tests, as Prefect's ``prefect_test_harness`` sets it: this
    process's API address, not its environment (a command a test starts makes its own server). Every flow run of
    this worker carries ``WORKER_TAG``, by which ``logs_matching`` and ``latest_artifacts`` read back only its own."""
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    api = start_harness(_shared_folder(tmp_path_factory))
    with temporary_settings(updates={PREFECT_API_URL: api}), \
            prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()), \
            prefect.tags(WORKER_TAG):
        yield
        _drain_to_the_api()


def _drain_to_the_api() -> None:
    """Send this process's queued logs and events before its API address goes (as ``prefect_test_harness`` ends)."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain():
        try:
            if inspect.isawaitable(result := APILogWorker.instance().drain()):
                await result
        except RuntimeError:   # never started
            pass
        if inspect.isawaitable(result := EventsWorker.drain_all()):
            await result

    run_coro_as_sync(drain())


@slow_fixture(scope="session")
def prefect_server(tmp_path_factory):
    """The session's real `prefect server start` (a free loopback port) for the tests that serve deployments
    to it (`dlrmflow serve`) and look at its UI: a helpers.prefect_api.PrefectServer."""
    with start_prefect_server(tmp_path_factory.mktemp("prefect-server"),
                              schema=prefect_schema(_shared_folder(tmp_path_factory))) as server:
        yield server


IN_MEMORY = Path("/dev/shm")
IN_MEMORY_NEEDS = 8 << 30   # a run writes ~2 GiB (datasets, runs, bundles, the Prefect servers' databases)


def temporary_folder_in_memory() -> Path | None:
    """A folder of this run's own on /dev/shm (tmpfs) for its temporary files, where /dev/shm has room and
    $DLRMFLOW_TEST_TMP is not ``disk``: the suite fsyncs a lot (atomic writes, the Prefect servers' SQLite databases,
    checkpoints), and on a VM's disk those waits left the 2 cores idle (IO-heavy test files ~20 % faster in memory).
    One folder per run (``<pid>``: runs side by side keep apart); the folders of runs that have ended are removed
    first (``remove_temporary_folder`` removes a passed run's at its end). None where /dev/shm is missing or small
    (a container's 64 MiB)."""
    if os.environ.get("DLRMFLOW_TEST_TMP") == "disk" or not IN_MEMORY.is_dir():
        return None
    try:
        room = shutil.disk_usage(IN_MEMORY).free
    except OSError:
        return None
    root = IN_MEMORY / f"dlrmflow-tests-{os.getuid()}"
    for old in root.glob("*"):
        if old.name.isdigit() and not Path(f"/proc/{old.name}").exists():
            shutil.rmtree(old, ignore_errors=True)   # a run that has ended (a failed one's, kept until now)
            room = shutil.disk_usage(IN_MEMORY).free
    if room < IN_MEMORY_NEEDS:
        return None
    folder = root / str(os.getpid())
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    return folder


SLURM_SCRIPT = REPO / "infra" / "slurm" / "local-cluster.sh"
# what the end-to-end tests (tests/e2e/) need from the system's packages: the programs that tell they are there, and
# the Debian packages that bring them (Slurm's as infra/slurm/local-cluster.sh installs them)
TEST_PACKAGES = {"slurm": (("slurmctld", "munged"), ("slurm-wlm", "munge")), "chromium": (("chromium",), ("chromium",))}
PACKAGES_INSTALL_LOCK = "packages-install.lock"   # in the run's shared temporary folder, held while apt installs


def _missing_packages() -> list[str]:
    """The Debian packages of ``TEST_PACKAGES`` whose programs are missing, where apt can install them (root);
    Chromium not where ``$DLRMFLOW_SKIP_CHROMIUM`` is 1."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return []
    wanted = [name for name in TEST_PACKAGES if name != "chromium" or os.environ.get("DLRMFLOW_SKIP_CHROMIUM") != "1"]
    return [package for name in wanted if not all(map(shutil.which, TEST_PACKAGES[name][0]))
            for package in TEST_PACKAGES[name][1]]


def install_test_packages_early(shared: Path) -> subprocess.Popen | None:
    """Where Slurm's or Chromium's packages are missing (a fresh CI machine), start installing them now, with one apt
    run in the background, so that the download overlaps the tests instead of adding to the install or to the worker
    that runs the test needing them: the install holds a lock (``PACKAGES_INSTALL_LOCK`` in ``shared``, the run's
    temporary folder) that ``slurm_script`` and ``chromium`` wait on. Called once per run, by the process that runs
    the session (tests/conftest.py), once it knows an end-to-end test is collected; None where nothing is to be
    installed."""
    import fcntl

    if not (packages := _missing_packages()):
        return None
    lock = open(shared / PACKAGES_INSTALL_LOCK, "w")   # noqa: SIM115 (handed to the child, which holds the lock)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with open(shared / "packages-install.log", "wb") as log:
            return subprocess.Popen(["sh", "-c", 'apt-get update -qq && apt-get install -y -qq "$@"', "apt", *packages],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                                    pass_fds=(lock.fileno(),))
    finally:
        lock.close()   # the child's copy of the descriptor keeps the lock until it exits


def _wait_for_an_early_install(shared: Path, timeout: float = 900) -> None:
    """Until the background install of ``install_test_packages_early`` (if one runs) has ended."""
    import fcntl
    import time

    if not (shared / PACKAGES_INSTALL_LOCK).exists():
        return
    with open(shared / PACKAGES_INSTALL_LOCK) as lock:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                assert time.monotonic() < deadline, f"the background install of packages took over {timeout} s"
                time.sleep(1)


@pytest.fixture(scope="session")
def chromium(tmp_path_factory) -> str:
    """Headless Chromium's program (helpers/browser.py), once the run's background install of it has ended where
    it was missing; skips the test where it is not installed."""
    from helpers.browser import CHROMIUM

    _wait_for_an_early_install(_shared_folder(tmp_path_factory))
    if not shutil.which(CHROMIUM):
        pytest.skip("Chromium is not installed (the test run installs it with apt as root: "
                    "tests/helpers/fixtures.py, install_test_packages_early)")
    return CHROMIUM


def slurm_script(tmp_path_factory) -> str:
    """infra/slurm/local-cluster.sh, once slurm-wlm and munge are there (installed with apt when missing, or by the
    run's background install, waited for); skips the test where that cannot be done (not root, no apt-get, no
    packages)."""
    script = str(SLURM_SCRIPT)
    if os.geteuid() != 0:
        pytest.skip("a real Slurm cluster needs root (slurmd starts the jobs' processes)")
    _wait_for_an_early_install(_shared_folder(tmp_path_factory))
    if not (shutil.which("slurmctld") and shutil.which("munged")):
        if not shutil.which("apt-get"):
            pytest.skip("slurm-wlm and munge are not installed and there is no apt-get to install them")
        got = subprocess.run([script, "install"], capture_output=True, text=True, timeout=900)
        if got.returncode != 0:
            pytest.skip(f"could not install slurm-wlm and munge: {got.stderr.strip()[-500:]}")
    return script


@slow_fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> str:
    """A real two-node Slurm cluster on this machine (nodes n1 and n2, partition ``local``), started by
    infra/slurm/local-cluster.sh: its SLURM_CONF. Installs slurm-wlm and munge with apt when they are missing (or
    waits for the run's background install of them); skips where that cannot be done (not root, no apt-get, no
    packages)."""
    script = slurm_script(tmp_path_factory)
    started = subprocess.run([script, "start"], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    conf = started.stdout.strip().splitlines()[-1].removeprefix("SLURM_CONF=")
    yield conf
    subprocess.run([script, "stop"], env={**os.environ, "SLURM_CONF": conf}, capture_output=True, timeout=120)


@pytest.fixture(scope="session", autouse=True)
def warm_launcher(tmp_path_factory):
    """This worker's warm launcher (helpers/warm_launcher.py), its client the launch prefix that every rank job and
    export child inherits (``$DLRMFLOW_LAUNCH_PREFIX``, ``common.process.launch_command``): a local job then forks
    from it instead of importing torch and TorchRec again (~4.5 of the ~7 CPU-seconds a small job takes). Until its
    socket is there (its own imports, a few seconds) jobs launch plainly, as do Slurm jobs and those of a test using
    ``plain_launches``; a job of another session (``start_new_session``, a flow run of `dlrmflow serve`) leads a
    session of its own. Its log (``server.log`` beside the socket) has a line per job it forked."""
    import signal
    import sys

    from common.process import LAUNCH_PREFIX
    from helpers import warm_launcher as warm

    folder = tmp_path_factory.mktemp("warm")
    with open(folder / "server.log", "wb") as log:
        server = subprocess.Popen([sys.executable, "-P", warm.SCRIPT, "--serve", str(folder / "launcher.sock")],
                                  process_group=0, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    os.environ[LAUNCH_PREFIX] = warm.prefix(str(folder / "launcher.sock"))
    yield folder / "launcher.sock"
    os.environ.pop(LAUNCH_PREFIX, None)
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()


@pytest.fixture
def plain_launches(monkeypatch) -> None:
    """This test's rank jobs launched plainly, without the warm launcher: for a test that finds a job's processes
    by their command line or environment (a warm launcher's forks carry the server's)."""
    from common.process import LAUNCH_PREFIX

    monkeypatch.delenv(LAUNCH_PREFIX, raising=False)


@slow_fixture(scope="session")
def trained_runs(tmp_path_factory) -> TrainedRuns:
    """The session's factory of trained runs: ``trained_runs(dataset, *args, nproc=1)`` trains once per key."""
    return TrainedRuns(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="session")
def synthetic_inputs(tmp_path_factory) -> str:
    """4,000 synthetic Criteo rows in two files; returns their glob."""
    from synthetic.generator import generate

    folder = tmp_path_factory.mktemp("synthetic")
    generate(str(folder), rows=4000, files=2, seed=1)
    return f"{folder}/part-*"


@pytest.fixture(scope="session")
def moto_endpoint() -> str:
    """moto's S3 server on a free 127.0.0.1 port, one per session (``s3_server`` empties it for each test)."""
    port = free_port()
    with process_group([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        wait_for_port(port, proc, 30)
        yield f"http://127.0.0.1:{port}"


@pytest.fixture()
def s3_server(moto_endpoint, monkeypatch):
    """The session's moto S3 server, emptied, with a bucket ``store``; AWS_* variables point at it."""
    import boto3
    import requests
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()  # cached filesystems keep the endpoint of an earlier test
    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=30).raise_for_status()
    for key, value in {**S3_ENV, "AWS_ENDPOINT_URL": moto_endpoint}.items():
        monkeypatch.setenv(key, value)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="store")
    yield s3


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """Fake sbatch/scontrol/srun first on PATH: (tmp_path, the Slurm launcher's settings)."""
    return fake_cluster.fake_slurm(tmp_path, monkeypatch)


# ---------------------------------------------------------------- shared datasets and runs

CRITEO_ROWS = {"train": 3000, "val": 500, "test": 777}   # 777 test rows: the last batch of each rank is padded
# trained with a bf16 dense part: the scoring and export tests that compare its bundle with its evaluation then
# check that a bf16-trained run evaluates and scores in fp32, as its bundle does
CRITEO_FAST = ["--set", "data.batch_size=256", "--set", "data.eval_batch_size=128", "--set", "eval_every=4",
               "--set", "epochs=1", "--set", "log_every=4", "--set", "precision.dense=bf16"]
CHILD_ENV = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore::FutureWarning"}


@pytest.fixture(scope="session")
def criteo(criteo_10k, tmp_path_factory):
    """Real Criteo rows in train/val/test files, preprocessed (files split, frequency threshold 2):
    {"root", "raw": split -> file, "dataset"}."""
    from preprocessing import PreprocessConfig, run as preprocess

    root = tmp_path_factory.mktemp("criteo")
    with gzip.open(criteo_10k, "rt") as f:
        lines = f.read().splitlines()
    start, raw = 0, {}
    for split, n in CRITEO_ROWS.items():
        raw[split] = root / "raw" / f"{split}.tsv"
        raw[split].parent.mkdir(exist_ok=True)
        raw[split].write_text("\n".join(lines[start:start + n]) + "\n")
        start += n
    ds = preprocess(PreprocessConfig(inputs=[f"{s}={p}" for s, p in raw.items()], out=str(root / "store"),
                                     frequency_threshold=2, progress=False))
    return {"root": root, "raw": raw, "dataset": Path(ds)}


@slow_fixture(scope="session")
def criteo_run(criteo, trained_runs):
    """A tiny 1-rank run on ``criteo``, evaluated on 'test', and the checkpoint's own predictions of 'test':
    {"run", "evaluation", "p", "y"} (the scoring and export tests)."""
    from training.config import EvaluateConfig
    from training.evaluate import evaluate_run

    run = trained_runs(criteo["dataset"], *CRITEO_FAST).path
    evaluation = evaluate_run(str(run), EvaluateConfig(), env=CHILD_ENV, on_line=lambda _: None)
    from training.trainer import Trainer

    with one_rank():
        p, y = Trainer.from_run(str(run), evaluation["step"]).predict("test")
    return {"run": run, "evaluation": evaluation, "p": np.asarray(p, np.float32), "y": np.asarray(y)}


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    """helpers.datasets.write_dataset with 2,048 / 512 / 777 rows (777: the last batches are padded)."""
    return write_dataset(tmp_path_factory.mktemp("small") / "ds", {"train": 2048, "val": 512, "test": 777})


# A DCN model with capped (hashed) tables and row-wise shards on 2 ranks, evaluated every 4 of its 8 steps
TWO_RANK_ARGS = ("--set", "arch.interaction=dcn", "--set", "arch.max_table_size=120",
                 "--set", "sharding.constraints={t_c1: {sharding_types: [row_wise]}, t_c3: {sharding_types: [row_wise]}}",
                 "--set", "data.batch_size=256", "--set", "eval_every=4", "--set", "epochs=1", "--set", "log_every=4")


@slow_fixture(scope="session")
def two_rank_run(small_dataset, trained_runs) -> Path:
    """``small_dataset`` trained on 2 ranks (TWO_RANK_ARGS): the evaluate and export tests' run."""
    return trained_runs(small_dataset, *TWO_RANK_ARGS, nproc=2).path
