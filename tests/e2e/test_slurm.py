"""Training on a real Slurm cluster: the slurm_cluster fixture starts slurmctld and two slurmd on this machine
(nodes n1 and n2, infra/slurm/local-cluster.sh), and `dlrmflow train --launcher slurm` goes sbatch -> srun ->
one torchrun per node -> c10d rendezvous on the first node, as on a real cluster."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO
from helpers.processes import until
from training.rundir import RunDir

TWO_NODES = ["--launcher", "slurm", "--launcher.nodes", "2", "--launcher.nproc-per-node", "1",
             "--launcher.gpus-per-node", "0", "--launcher.cpus-per-task", "1", "--launcher.no-exclusive",
             "--launcher.partition", "local", "--launcher.python", sys.executable]
STEPS = 160   # 2,048 rows, 2 ranks x 32 rows a step: 32 steps an epoch; ~10 s of training, interrupted after 10


def _ranks(run: Path) -> list[int]:
    """The pids of live rank processes (training.distributed.name_process) of ``run`` (other tests train too)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (Path(f"/proc/{pid}/comm").read_text().startswith("dlrmflow-rank")
                    and str(run).encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")):
                pids.append(int(pid))
        except OSError:
            pass
    return pids


def _jobs(env: dict[str, str]) -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                          check=True).stdout.split()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_node_run_interrupted_is_cancelled_then_resumes(slurm_cluster, small_dataset, tmp_path):
    """An interrupted `dlrmflow train` cancels its Slurm job (no job queued, no rank left on either node);
    `--resume` on the cluster continues from the latest complete checkpoint to the end."""
    env = {**os.environ, "SLURM_CONF": slurm_cluster, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    run = tmp_path / "run"
    args = [sys.executable, "-m", "flows.cli", "train", "--run", str(run), *TWO_NODES,
            "--launcher.work-dir", str(tmp_path / "slurm")]
    proc = subprocess.Popen([*args, "--dataset", str(small_dataset), "--max-steps", str(STEPS),
                             "--set", "data.batch_size=32", "--set", "epochs=5", "--set", "eval_every=10",
                             "--set", "log_every=10"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        until(lambda: any((run / "checkpoints").glob("*/_COMPLETE")), 180, "a complete checkpoint", proc)
        assert len(_ranks(run)) == 2   # one per node
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-3000:]
    assert "Sharding plan: 2 ranks (2 node(s) x 1)" in (run / "plan.txt").read_text()
    until(lambda: not _jobs(env), 60, "the Slurm job to be cancelled")
    until(lambda: not _ranks(run), 60, "no rank left running")
    done = sorted(int(p.parent.name) for p in (run / "checkpoints").glob("*/_COMPLETE"))
    assert done and done[-1] < STEPS, done

    resumed = subprocess.run([*args, "--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert re.search(rf"resumed from step {done[-1]}\b", resumed.stdout + resumed.stderr)
    assert RunDir(str(run)).completion()["latest_step"] == STEPS
    assert not _jobs(env) and not _ranks(run)
