"""Two runs of one night never collide on a real Slurm cluster (issue 34, section 3): a flow's process holding a
run's lease is SIGKILLed while its Slurm job runs; the job goes on writing the run. The re-run takes the stale lease
over (a short stale time) only after it has cancelled that job (``SlurmLauncher.fence``: scancel, then squeue until
it has ended), and its own job is then the one the lease names.

The module's own cluster (``fence_cluster``: slurmctld and two slurmd here, infra/slurm/local-cluster.sh with its own
state folder and ports, so that it never stops or meets the session's ``slurm_cluster`` of tests/e2e/test_slurm.py,
which another xdist worker may run at the same time). The jobs are real Slurm jobs (sbatch -> srun -> the node command) whose ranks' Python is a stand-in that writes the run every 0.1 s:
what is tested is the job's life, not torchrun's (tests/e2e/test_slurm.py runs real ranks). The local cluster keeps
no accounting (no sacct): the old job is seen cancelled in its log and gone from squeue.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.fake_cluster import executable
from helpers.paths import REPO
from helpers.processes import until
from helpers.fixtures import slurm_script
from helpers.slow import slow_fixture
from training.launchers import RankJob, build_launcher
from training.rundir import RunDir

CTLD_PORT = 16847   # the cluster's ports (slurmctld; the two slurmd on the next two): not the session cluster's
STALE_S = 3.0   # the holder's lease: renewed every 0.6 s while it lives, stale 3 s after it died
NEW_LINES = 5   # the re-run's job: writes 5 lines (~0.5 s), then ends
POLL = 0.2   # the test's waits on the lease file and squeue
# the ranks' Python: writes "<job id> <time>" to the run every 0.1 s, FENCE_LINES times (0: until stopped)
WRITER = r"""
import os, sys, time
n, i = int(os.environ["FENCE_LINES"]), 0
while not n or i < n:
    with open(os.environ["FENCE_WRITES"], "a") as f:
        f.write("%s %.3f\n" % (os.environ["SLURM_JOB_ID"], time.time()))
    i += 1
    time.sleep(0.1)
"""
# the killed flow: holds the run's lease (stale after STALE_S) and runs a job that never ends through the launcher
HOLDER = r"""
import json, sys
from training.launchers import RankJob, build_launcher
from training.rundir import RunDir

RunDir.LEASE_STALE_S = float(sys.argv[3])
launcher, run = build_launcher(json.loads(sys.argv[1])), RunDir(sys.argv[2])
with launcher.lease(run, "training", say=print) as held:
    launcher.run_ranks(RankJob("train", "training.train_worker"), run, lease=held, on_line=print)
"""


@slow_fixture(scope="module")
def fence_cluster(tmp_path_factory) -> str:
    """A real two-node Slurm cluster of this module's own (nodes n1 and n2, partition ``local``): its SLURM_CONF.
    Installs slurm-wlm and munge with apt when they are missing; skips where that cannot be done."""
    script = slurm_script(tmp_path_factory)
    env = {**os.environ, "DLRMFLOW_SLURM_DIR": str(tmp_path_factory.mktemp("slurm-state")),
           "DLRMFLOW_SLURM_PORT": str(CTLD_PORT)}
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    conf = started.stdout.strip().splitlines()[-1].removeprefix("SLURM_CONF=")
    yield conf
    subprocess.run([script, "stop"], env={**env, "SLURM_CONF": conf}, capture_output=True, timeout=120)


def _lease(run: Path) -> dict:
    try:
        return json.loads((run / RunDir.LEASE).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _state(job_id: str, env: dict[str, str]) -> str:
    """The job's state in squeue ("" once squeue no longer lists it: ended)."""
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], env=env, capture_output=True,
                          text=True).stdout.strip()


def _writes(path: Path) -> list[tuple[str, float]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [(job, float(at)) for job, at in (line.split() for line in lines if len(line.split()) == 2)]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rerun_cancels_the_killed_holders_slurm_job_before_it_takes_the_lease_over(fence_cluster, tmp_path):
    slurm_cluster = fence_cluster
    env = {**os.environ, "SLURM_CONF": slurm_cluster}
    run, writes, work = tmp_path / "store" / "runs" / "r", tmp_path / "writes", tmp_path / "slurm"
    run.mkdir(parents=True)
    python = executable(tmp_path / "writer-python", WRITER)
    settings = {"kind": "slurm", "nodes": 1, "nproc_per_node": 1, "gpus_per_node": 0, "cpus_per_task": 1,
                "exclusive": False, "partition": "local", "python": str(python), "work_dir": str(work),
                "env": {"FENCE_WRITES": str(writes), "FENCE_LINES": "0"}}
    with open(tmp_path / "holder.log", "w") as log:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps(settings), str(run), str(STALE_S)],
                                  cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    old = new = None
    try:
        job = until(lambda: _lease(run).get("job"), 60, "the holder's job in the lease", holder, every=POLL)
        old = job["id"]
        assert job == {"kind": "slurm", "id": old, "cluster": None, "what": f"Slurm job {old}"}
        until(lambda: _state(old, env) == "RUNNING" and any(j == old for j, _ in _writes(writes)), 60,
              "the job to run and write", holder, every=POLL)

        # the flow's process killed: its Slurm job goes on writing the run
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        killed_at = time.time()
        time.sleep(1.0)
        assert _state(old, env) == "RUNNING"
        assert any(j == old and at > killed_at for j, at in _writes(writes)), "the job did not outlive its holder"

        # the re-run: takes the stale lease over after cancelling that job, then runs its own (NEW_LINES lines)
        said, codes = [], []
        rerun = build_launcher({**settings, "env": {**settings["env"], "FENCE_LINES": str(NEW_LINES)}})

        def again() -> None:
            with rerun.lease(RunDir(str(run)), "training", wait_s=60, say=said.append) as held:
                codes.append(rerun.run_ranks(RankJob("train", "training.train_worker"), str(run), lease=held,
                                             on_line=said.append))

        os.environ["SLURM_CONF"] = slurm_cluster   # the launcher's sbatch, scancel and squeue read it
        try:
            thread = threading.Thread(target=again)
            thread.start()
            recorded = until(lambda: (j := _lease(run).get("job")) and j["id"] != old and j, 60,
                             "the re-run's job in the lease", every=POLL)
            new = recorded["id"]
            assert recorded == {"kind": "slurm", "id": new, "cluster": None, "what": f"Slurm job {new}"}
            assert _state(old, env) == ""   # cancelled and ended before the take-over: squeue no longer lists it
            thread.join(120)
        finally:
            os.environ.pop("SLURM_CONF")
        assert not thread.is_alive() and codes == [0], said[-20:]
    finally:
        for job_id in filter(None, (old, new)):
            subprocess.run(["scancel", job_id], env=env, capture_output=True)
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)

    fenced = [s for s in said if s.startswith("took over the run lease (training)")]
    assert len(fenced) == 1 and fenced[0].endswith(
        f"(expired, or its process is gone: a crashed run); its job was stopped first: cancelled Slurm job {old} "
        "(it was RUNNING); it has ended on every node"), said
    assert f"dlrmflow: cancelling Slurm job {old} (RUNNING)" in said
    assert said.index(fenced[0]) < next(i for i, s in enumerate(said) if s.startswith("dlrmflow: submitting "))
    lines = _writes(writes)
    last_old = max(at for j, at in lines if j == old)
    first_new = min(at for j, at in lines if j == new)
    assert last_old < first_new and sum(j == new for j, _ in lines) == NEW_LINES   # never both at once
    old_log = (work / f"dlrmflow-train-r-{old}.out").read_text()
    assert f"JOB {old} ON n1 CANCELLED AT" in old_log or f"JOB {old} ON n2 CANCELLED AT" in old_log, old_log[-2000:]
    assert not (run / RunDir.LEASE).exists()   # released at the block's end
