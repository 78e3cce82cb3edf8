"""The run folder's lease (issue 19, section 3) at the launcher base, without torchrun (``run_command`` is
replaced by a function that blocks like a running training): a second training of the same run folder fails at
once naming the holder, or waits for it when asked; never two trainings in one folder.

The job in the lease (issue 34, section 3): the launcher records the job it started in the run's lease, and the
take-over of a stale lease stops that job first (``Launcher.fence``): a local job's process group with real
processes here; a job of another host, a Slurm job that scancel cannot cancel and a taker without a fence
refuse, naming the job and the fix; the Kubernetes fence's kubectl command through a fake kubectl (no cluster).
The Slurm fence on a real cluster: tests/e2e/test_slurm_fence.py."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common.lease import LeaseHeld
from common.process import live_processes
from helpers.fake_cluster import executable
from helpers.paths import REPO
from helpers import stores
from helpers.processes import until
from models import gc
from models.config import GcConfig
from training.config import TrainConfig
from training.launchers import KubernetesLauncher, LaunchError, LocalLauncher, RankJob, build_launcher
from training.rundir import RunDir
from helpers.datasets import write_dataset


@pytest.fixture
def blocking_torchrun(monkeypatch):
    """``run_command`` that runs until ``release`` is set, counting trainings running at once."""
    state = {"running": 0, "most": 0, "runs": 0, "started": threading.Event(), "release": threading.Event()}
    lock = threading.Lock()

    def run_command(cmd, env=None, on_line=None, started=None):
        if started is not None:   # what the real one reports once torchrun runs
            started({"kind": "local", "host": socket.gethostname(), "pgid": 1, "token": "t", "what": "fake torchrun"})
        with lock:
            state["running"] += 1
            state["runs"] += 1
            state["most"] = max(state["most"], state["running"])
        state["started"].set()
        state["release"].wait(30)
        with lock:
            state["running"] -= 1
        return 0

    monkeypatch.setattr("training.launchers.local.run_command", run_command)
    return state


def test_a_second_training_of_a_leased_run_folder_fails_clearly_or_waits(blocking_torchrun, tmp_path):
    cfg = TrainConfig(dataset=str(write_dataset(tmp_path / "ds", {"train": 64, "val": 32})))
    run, codes = str(tmp_path / "runs" / "r"), []
    first = threading.Thread(target=lambda: codes.append(build_launcher(None).launch(run, cfg, on_line=print)))
    first.start()
    assert blocking_torchrun["started"].wait(30)
    record = json.loads((tmp_path / "runs" / "r" / RunDir.LEASE).read_text())
    assert record["job"]["what"] == "fake torchrun"   # the running job is in the lease

    with pytest.raises(LeaseHeld, match=r"run lease \(training\) .*r/run.lease is held by pid \d+ on .*waited 0 s"):
        build_launcher(None).launch(run, cfg, on_line=print)
    said = []
    waiting = threading.Thread(target=lambda: codes.append(
        build_launcher(None).launch(run, cfg, on_line=said.append, wait_s=30)))
    waiting.start()
    deadline = time.time() + 30
    while not any("waiting for the run lease (training)" in s for s in said) and time.time() < deadline:
        time.sleep(0.05)
    assert blocking_torchrun["runs"] == 1 and any("waiting for the run lease (training)" in s for s in said)
    blocking_torchrun["release"].set()
    first.join(30)
    waiting.join(30)
    assert codes == [0, 0] and blocking_torchrun["runs"] == 2 and blocking_torchrun["most"] == 1
    assert not (tmp_path / "runs" / "r" / RunDir.LEASE).exists()


def test_two_runs_of_one_night_the_second_waits_then_reuses_what_the_first_trained(blocking_torchrun, tmp_path):
    """The train flow's launch (reuse): the lease is taken in one step with the wait, and what the other run left
    is looked at under it: a folder it completed meanwhile is reused, nothing trained again, no failure."""
    cfg = TrainConfig(dataset=str(write_dataset(tmp_path / "ds", {"train": 64, "val": 32})))
    run, codes, said = RunDir(str(tmp_path / "runs" / "r")), [], []
    first = threading.Thread(target=lambda: codes.append(build_launcher(None).launch(run.uri, cfg, on_line=print,
                                                                                     wait_s=30, reuse=True)))
    first.start()
    assert blocking_torchrun["started"].wait(30)
    second = threading.Thread(target=lambda: codes.append(build_launcher(None).launch(
        run.uri, cfg, on_line=said.append, wait_s=30, reuse=True)))
    second.start()
    deadline = time.time() + 30
    while not any("waiting for the run lease (training)" in s for s in said) and time.time() < deadline:
        time.sleep(0.05)
    run.mark_complete({"latest_step": 4, "world_size": 1})   # what the first training's rank 0 writes at its end
    blocking_torchrun["release"].set()
    first.join(30)
    second.join(30)
    assert codes == [0, 0] and blocking_torchrun["runs"] == 1
    assert any("already complete (another run of it finished while this one waited): reusing it" in s for s in said)
    assert not (tmp_path / "runs" / "r" / RunDir.LEASE).exists()

# ---------------------------------------------------------------- the job in the lease, and its fence


def _lease(run: Path) -> dict:
    return json.loads((run / RunDir.LEASE).read_text())


def _stale(run: Path, job: dict, host: str = "elsewhere") -> str:
    """Write a lease of ``run`` past its expiry whose holder (of ``host``) recorded ``job``; returns its text."""
    run.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"owner": "a killed flow", "host": host, "pid": 1, "token": "old",
                       "acquired_at": "2026-11-03T00:00:00.000+00:00", "expires_at": "2026-11-03T00:05:00.000+00:00",
                       "job": job})
    (run / RunDir.LEASE).write_text(text)
    return text


def test_the_job_is_recorded_in_the_run_lease_while_it_runs(tmp_path, monkeypatch):
    """``run_ranks`` under the held lease: the job that the launcher reports is in the lease while it runs, gone
    from it once it has ended (the lease is still held: nothing for a take-over to stop)."""
    run, seen = tmp_path / "r", []

    def run_command(cmd, env=None, on_line=None, started=None):
        started({"kind": "local", "host": "h", "pgid": 7, "token": "t", "what": "local torchrun, process group 7"})
        seen.append(_lease(run)["job"])
        return 0

    monkeypatch.setattr("training.launchers.local.run_command", run_command)
    launcher = LocalLauncher()
    with launcher.lease(RunDir(str(run)), "training") as held:
        assert launcher.run_ranks(RankJob("train", "m"), str(run), lease=held, on_line=print) == 0
        assert "job" not in _lease(run)
    assert seen == [{"kind": "local", "host": "h", "pgid": 7, "token": "t", "what": "local torchrun, process group 7"}]


# a rank job that leaves a process behind when it dies, as a stray rank would: the writer is in the job's process
# group (no job control in sh -c) and keeps writing the run after the job's leader died with the flow's process
HOLDER = r"""
import sys
import training.launchers.local as local
from training.launchers import LocalLauncher, RankJob
from training.rundir import RunDir

local.torchrun_command = lambda job, run_uri, **kw: [
    "sh", "-c", f"(while :; do date +%s%N >> {run_uri}/writes; sleep 0.05; done) & wait"]
launcher, run = LocalLauncher(), RunDir(sys.argv[1])
with launcher.lease(run, "training") as held:
    launcher.run_ranks(RankJob("train", "m"), run, lease=held, on_line=print)
"""


def _growing(path: Path, for_s: float = 0.5) -> bool:
    before = path.stat().st_size
    time.sleep(for_s)
    return path.stat().st_size > before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (/proc, PR_SET_PDEATHSIG)")
@pytest.mark.timeout(60)
def test_a_take_over_stops_the_killed_holders_local_job_first(tmp_path):
    """A flow's process SIGKILLed while its local job runs: the job's leader dies with it, a process it left keeps
    writing the run. The re-run takes the stale lease over (its holder's process is gone) only after it has
    stopped every process of the job's process group, and says so."""
    run = tmp_path / "r"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], cwd=REPO, start_new_session=True,
                              stdout=subprocess.DEVNULL)
    pgid = None
    try:
        deadline = time.monotonic() + 30
        while not ((run / RunDir.LEASE).exists() and "job" in _lease(run) and (run / "writes").exists()):
            assert holder.poll() is None and time.monotonic() < deadline, "the holder did not start its job"
            time.sleep(0.05)
        job = _lease(run)["job"]
        pgid = job["pgid"]
        assert job["kind"] == "local" and job["host"] == socket.gethostname() and job["token"]
        assert job["what"] == f"local torchrun, process group {pgid} on {socket.gethostname()}"
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        # 2 s: on a loaded machine (the suite at load 8) the loop's `date` took longer than 0.5 s to come round once
        assert _growing(run / "writes", 2.0) and live_processes(group=pgid), \
            "nothing outlived the holder: nothing to fence"

        said = []
        with LocalLauncher().lease(RunDir(str(run)), "training", say=said.append) as held:
            assert not live_processes(group=pgid)   # stopped before the lease was taken over
            assert not _growing(run / "writes", 0.3)
            assert "job" not in _lease(run) and held is not None
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
        if pgid and live_processes(group=pgid):
            os.killpg(pgid, signal.SIGKILL)
    where = re.escape(f"local job of process group {pgid} on {socket.gethostname()}")
    assert said[0] == (f"dlrmflow: the lease of {run} is stale (its holder is gone or expired): stopping its job "
                       f"(local torchrun, process group {pgid} on {socket.gethostname()}) before taking it over")
    assert re.fullmatch(rf"dlrmflow: stopping the {where} \([12] process\(es\)\)", said[1]), said  # the writer (its sleep)
    assert re.fullmatch(rf"took over the run lease \(training\) of run {re.escape(str(run))} from .* \(expired, or its "
                        rf"process is gone: a crashed run\); its job was stopped first: stopped the {where} "
                        r"\([12] process\(es\), SIGTERM\)", said[2]), said
    assert len(said) == 3


# a holder whose job (a sleep in a process group of its own) dies with it, as torchrun and its ranks do
KILLED = r"""
import sys
import training.launchers.local as local
from training.launchers import LocalLauncher, RankJob
from training.rundir import RunDir

local.torchrun_command = lambda job, run_uri, **kw: ["sleep", "600"]
launcher, run = LocalLauncher(), RunDir(sys.argv[1])
with launcher.lease(run, "training") as held:
    launcher.run_ranks(RankJob("train", "m"), run, lease=held, on_line=print)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (/proc, PR_SET_PDEATHSIG)")
@pytest.mark.timeout(60)
def test_a_lease_whose_holder_and_job_died_here_is_taken_over_at_once_by_gc_and_a_rerun(tmp_path):
    """Issue 46: a training SIGKILLed with its local job (its sleep dies with it) left its run lease with the job
    in it. gc kept such a run on every pass (it cannot stop jobs) and nothing else took it: now a re-run and gc take
    it over at once, since nothing of the holder or its job is left on this host; while the holder lives, gc keeps
    the run."""
    root = str(tmp_path / "store")
    run = Path(stores.run(root, "old", stores.dataset(root, "old-d")))
    later = time.time() + 30 * stores.DAY_S   # gc as a month later: the run is old and no model names it
    holder = subprocess.Popen([sys.executable, "-c", KILLED, str(run)], cwd=REPO, start_new_session=True,
                              stdout=subprocess.DEVNULL)
    said: list[str] = []
    try:
        until(lambda: (run / RunDir.LEASE).exists() and "job" in _lease(run), 30, "the job", holder)
        pgid = _lease(run)["job"]["pgid"]
        assert gc.collect(GcConfig(store=root), say=said.append, now=later).removals == [] and run.exists()
        assert said[-1] == f"kept run old: in use, its run lease is held by pid {holder.pid} on {socket.gethostname()}"
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        until(lambda: not live_processes(group=pgid), 10, "the job to die with its holder")
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
    left = (run / RunDir.LEASE).read_text()
    ended = f"its job had ended (no process left in process group {pgid} on {socket.gethostname()})"

    said.clear()
    with LocalLauncher().lease(RunDir(str(run)), "training", say=said.append) as held:   # the re-run
        assert held is not None and "job" not in _lease(run)
    assert len(said) == 1 and said[0].startswith("took over the run lease (training)") and said[0].endswith(ended)

    (run / RunDir.LEASE).write_text(left)   # the lease as the killed training left it, for gc now
    said.clear()
    report = gc.collect(GcConfig(store=root), say=said.append, now=later)
    assert [(r.kind, Path(r.uri).name) for r in report.removals] == [("run", "old"), ("dataset", "old-d")]
    assert not run.exists()
    assert any(s.startswith("took over the run lease (removal by gc)") and s.endswith(ended) for s in said), said


def test_a_job_that_cannot_be_stopped_from_here_is_never_taken_over_silently(tmp_path):
    """A stale lease whose job runs on another host (a local job there), or whose taker has no fence (the gc's
    removal of a run), is not taken over: one line names the job and the fix, the lease is left as it was."""
    run = tmp_path / "r"
    job = {"kind": "local", "host": "elsewhere", "pgid": 4242, "token": "t",
           "what": "local torchrun, process group 4242 on elsewhere"}
    text = _stale(run, job)
    here = socket.gethostname()
    with pytest.raises(LaunchError) as e:
        with LocalLauncher().lease(RunDir(str(run)), "training"):
            pass
    assert str(e.value) == (f"{run}: the previous holder's job (local torchrun, process group 4242 on elsewhere) may "
                            f"still be running on elsewhere, and cannot be stopped from {here}. Fix: on elsewhere, "
                            f"stop it (`kill -- -4242`) if it still runs, then remove {run}/run.lease and re-run.")
    assert (run / RunDir.LEASE).read_text() == text

    with pytest.raises(LeaseHeld) as e:   # gc's removal: RunDir.lease, no fence
        with RunDir(str(run)).lease("removal by gc", owner="gc (removing the run)"):
            pass
    assert str(e.value).startswith(f"the run lease (removal by gc) of run {run} is stale (held by a killed flow "
                                   "(pid 1 on elsewhere) since 2026-11-03T00:00:00.000+00:00 (its job: local torchrun, "
                                   "process group 4242 on elsewhere), expiring at ")
    assert str(e.value).endswith("but its job (local torchrun, process group 4242 on elsewhere) may still be running, "
                                 "and this taker cannot stop it. Fix: re-run what held it (it stops the job first), or "
                                 f"stop the job yourself and remove {run}/run.lease.")
    assert (run / RunDir.LEASE).read_text() == text


def test_a_slurm_job_that_scancel_cannot_cancel_is_named_with_the_fix(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue = executable(bin_dir / "squeue", 'print("RUNNING")\n')
    scancel = executable(bin_dir / "scancel", "import sys\nsys.exit('scancel: error: Kill job error on job id 1234: "
                                              "Access/permission denied')\n")
    monkeypatch.setattr("training.launchers.slurm.FENCE_WAIT_S", 1.0)
    run = tmp_path / "r"
    text = _stale(run, {"kind": "slurm", "id": "1234", "cluster": None, "what": "Slurm job 1234"})
    launcher = build_launcher({"kind": "slurm", "squeue": str(squeue), "scancel": str(scancel)})
    with pytest.raises(LaunchError) as e:
        with launcher.lease(RunDir(str(run)), "evaluation", say=print):
            pass
    assert str(e.value) == (f"{run}: the previous holder's Slurm job 1234 is still running and could not be cancelled "
                            "(scancel: error: Kill job error on job id 1234: Access/permission denied; still RUNNING "
                            "after 1 s). Fix: scancel 1234, then re-run.")
    assert (run / RunDir.LEASE).read_text() == text


FAKE_KUBECTL = r"""
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
if os.environ.get("FAKE_FAIL"):
    sys.exit("Error from server (Forbidden): jobs.batch is forbidden")
print('job.batch "%s" deleted' % sys.argv[sys.argv.index("job") + 1])
"""


def test_the_kubernetes_fence_deletes_the_recorded_job_with_its_pods(tmp_path, monkeypatch):
    """The Job recorded in a stale lease is deleted, its pods first (foreground cascade), in its own namespace and
    context, whatever launcher takes the lease over (here: a local one; kubectl found on PATH). A fake kubectl:
    this was never run against a cluster."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "kubectl", FAKE_KUBECTL)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "calls.jsonl"))
    run, said = tmp_path / "r", []
    job = {"kind": "kubernetes", "namespace": "ml", "name": "dlrmflow-train-r", "context": "prod",
           "what": "Kubernetes job ml/dlrmflow-train-r"}
    delete = ["--context", "prod", "--namespace", "ml", "delete", "job", "dlrmflow-train-r", "--ignore-not-found",
              "--cascade=foreground", "--wait=true", "--timeout=120s"]
    assert KubernetesLauncher().fence_command(job) == ["kubectl", *delete]
    _stale(run, job, host=socket.gethostname())
    with LocalLauncher().lease(RunDir(str(run)), "training", say=said.append):
        assert "job" not in _lease(run)
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert calls == [delete]
    assert any(s.endswith("; its job was stopped first: deleted Kubernetes job ml/dlrmflow-train-r and its pods")
               for s in said), said

    monkeypatch.setenv("FAKE_FAIL", "1")
    text = _stale(run, job)
    with pytest.raises(LaunchError) as e:
        with build_launcher({"kind": "kubernetes"}).lease(RunDir(str(run)), "training", say=said.append):
            pass
    assert str(e.value) == (f"{run}: the previous holder's Kubernetes job ml/dlrmflow-train-r may still be running "
                            "and could not be deleted (kubectl: Error from server (Forbidden): jobs.batch is "
                            f"forbidden). Fix: kubectl {' '.join(delete)}, then re-run.")
    assert (run / RunDir.LEASE).read_text() == text
