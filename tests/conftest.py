"""The suite's shared fixtures (helpers/fixtures.py) and the `slow` rule (helpers/slow.py): a test is slow when
its fixtures start torchrun or a server, or when it is marked so; one that starts either unmarked fails."""

from __future__ import annotations

import os
import sys

import pytest

from helpers.slow import SLOW_FIXTURES, heavy

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# one OpenMP thread in every process of the suite (the workers' torch and every rank, server and command they start):
# the workers share two cores, where a second thread only waits for a core (a rank of one job got two otherwise)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# the suite caches bytecode (__pycache__, ignored by git) where the environment says not to ($PYTHONDONTWRITEBYTECODE,
# set on CI's machines): else each of a run's ~230 plain Python processes compiles our modules again (~0.35 CPU-s) and
# each worker rewrites every test module's assertions again (~6 CPU-s)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

pytest_plugins = ["helpers.fixtures"]

_started: list[str] = []      # what the running test started that makes a test slow
_recording = False
_early_install: list = []     # the run's background install of packages (helpers.fixtures.install_test_packages_early)
_in_memory: list = []         # the run's temporary folder on /dev/shm (helpers.fixtures.temporary_folder_in_memory)


def _audit(event: str, args) -> None:
    if _recording and event == "subprocess.Popen" and (why := heavy(args[1] if args[1] is not None else args[0])):
        _started.append(why)


sys.addaudithook(_audit)


# Under pytest-xdist (make test: three workers), the tests using one of these session fixtures run on one worker,
# so that it is made once: the first listed that a test uses names its group. The other slow tests run on one
# worker per module (their module-scoped runs and datasets are made once too); fast tests go one by one.
SHARED_ON_ONE_WORKER = ("prefect_server", "trained_runs")


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook, which reads a test's xdist_group mark
def pytest_collection_modifyitems(items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if SLOW_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
        group = next((f for f in SHARED_ON_ONE_WORKER if f in fixtures), None)
        if group is None and item.get_closest_marker("slow"):
            group = item.module.__name__
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
            _suffix_group(item, group)
    # the longest first (xdist hands out work in this order): the session server's group, then the other slow
    # groups, the fast tests last, where they fill the workers' ends instead of one worker's long test ending alone
    items.sort(key=lambda item: 0 if "prefect_server" in getattr(item, "fixturenames", ()) else
               1 if item.get_closest_marker("slow") else 2)


def _suffix_group(item, group: str) -> None:
    """Name the item ``<node id>@<group>``, which is how xdist's loadgroup scheduler sees a group. xdist 3.8 does
    it by setting ``item._nodeid``, which pytest 9 no longer reads (the id is ``item._id``): without this every
    test is scheduled alone and each worker makes its own session server and trained runs."""
    from _pytest.nodeid import coerce_node_id

    if os.environ.get("PYTEST_XDIST_WORKER") and not item.nodeid.endswith(f"@{group}"):
        item._id = coerce_node_id(f"{item.nodeid}@{group}")


def _install_packages_early(config, nodeids) -> None:
    """Once per run, in the process that runs the session (the xdist controller, or pytest itself), as soon as an
    end-to-end test (Slurm, Chromium) is known to be collected."""
    if not _early_install and any(i.startswith("tests/e2e/") for i in nodeids):
        from helpers.fixtures import install_test_packages_early

        _early_install.append(install_test_packages_early(config._tmp_path_factory.getbasetemp()))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    _install_packages_early(node.config, ids)


def pytest_collection_finish(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _install_packages_early(session.config, [item.nodeid for item in session.items])


@pytest.hookimpl(tryfirst=True)   # before pytest's tmp_path plugin reads --basetemp
def pytest_configure(config):
    """The run's temporary files in memory where there is room (``helpers.fixtures.temporary_folder_in_memory``):
    set here, in the process that runs the session, before the xdist workers start (they inherit $TMPDIR and get
    their --basetemp under this one's)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and config.option.basetemp is None:
        from helpers.fixtures import temporary_folder_in_memory

        if (folder := temporary_folder_in_memory()) is not None:
            config.option.basetemp = str(folder / "run")
            os.environ["TMPDIR"] = str(folder / "tmp")
            import tempfile

            tempfile.tempdir = None   # this process's own temporary files too
            _in_memory.append(folder)


def pytest_sessionfinish(session, exitstatus):
    if exitstatus != 0:
        _in_memory.clear()   # a failed run's files stay for a person to look at (until the next run starts)


def pytest_unconfigure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER") and hasattr(config, "_tmp_path_factory"):
        from helpers.prefect_api import stop_harness

        stop_harness(config._tmp_path_factory.getbasetemp())   # the run's one, if a worker started it
    for proc in filter(None, _early_install):   # apt is not killed halfway: the run waits for it
        proc.wait(900)
    for folder in _in_memory:   # a passed run's files leave memory with it
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _store_breaker_reset():
    """No test meets an S3 endpoint failed at once because of an earlier test's failure (common.breaker: a port an
    earlier frozen endpoint had, a moto server slow once under load)."""
    yield
    from common import breaker

    if breaker.BREAKER is not None:
        breaker.BREAKER.reset()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _recording
    _started.clear()
    _recording = True
    try:
        return (yield)
    finally:
        _recording = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown" and _started and not item.get_closest_marker("slow") and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started {', '.join(sorted(set(_started)))} but is not marked slow: use a "
                           f"fixture that starts it (helpers/fixtures.py, slow_fixture) or mark it @pytest.mark.slow")
    return report
