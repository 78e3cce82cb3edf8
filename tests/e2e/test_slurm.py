"""The pipeline on a real Slurm cluster: the slurm_cluster fixture starts slurmctld and two slurmd on this machine
(nodes n1 and n2, infra/slurm/local-cluster.sh), and `dlrmflow serve` on the session's Prefect server runs the
pipeline's flow runs, every rank job of which (train, evaluate, score) goes sbatch -> srun -> one torchrun per node
-> c10d rendezvous on the first node, as on a real cluster. After a submission sbatch refuses (its error is the
launcher's), three flow runs of one dated night, one run folder:

1. a rank killed on node n2 once a checkpoint is complete fails the flow run, naming the node, its exit code as
   srun reported it and the rank's last lines; no job is left queued, no rank running;
2. the next flow run resumes from the latest checkpoint and is cancelled through the Prefect API as the UI does:
   the runner SIGTERMs the flow's process, the Slurm launcher scancels the job and waits until it has ended, so
   the flow run is CANCELLED with no job queued and no rank running;
3. the last resumes from the latest checkpoint and completes the pipeline: the dataset reused, training, the
   evaluation and the challenger's scoring each a Slurm job on both nodes, the logs tagged by rank and node.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.prefect_api import answer, get, post
from helpers.processes import until
from training.launchers import build_launcher, train_job
from training.launchers.base import LaunchError
from training.rundir import RunDir

DATE = "2026-11-03"   # the test day: trains on 11-01, validates on 11-02
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
STEPS = 256   # 2,000 rows a day, 2 ranks x 32 rows a step: 31 steps an epoch; the cancel lands long before
CHECKPOINT_EVERY = 32   # the kill and the cancel each land ~1 s after a checkpoint: ~30-60 steps on 2 loaded cores
POLL = 0.2   # the test's own waits on files and processes (a flow run's state: every 0.5 s), so that each lands soon
SLURM = ["--launcher", "slurm", "--launcher.nodes", "2", "--launcher.nproc-per-node", "1",
         "--launcher.gpus-per-node", "0", "--launcher.cpus-per-task", "1", "--launcher.no-exclusive",
         "--launcher.partition", "local", "--launcher.python", sys.executable]


def _ranks(run: Path) -> dict[int, int]:
    """pid -> global rank of the live rank processes (training.distributed.name_process) of ``run``."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            if comm.startswith("dlrmflow-rank") and \
                    str(run).encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                found[int(pid)] = int(comm.removeprefix("dlrmflow-rank"))
        except (OSError, ValueError):
            pass
    return found


def _node_of(pid: int) -> str:
    """The Slurm node a process runs on (srun sets SLURMD_NODENAME in its tasks' environment)."""
    env = dict(v.split(b"=", 1) for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in v)
    return env[b"SLURMD_NODENAME"].decode()


def _jobs(env: dict[str, str]) -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i %j %T"], env=env, capture_output=True, text=True,
                          check=True).stdout.splitlines()


def _checkpoints(run: Path) -> list[int]:
    return sorted(int(p.parent.name) for p in run.glob("checkpoints/*/_COMPLETE"))


@pytest.mark.timeout(900)
def test_pipeline_on_slurm_fails_on_a_killed_rank_is_cancelled_then_resumes(slurm_cluster, prefect_server,
                                                                            tmp_path, monkeypatch):
    from synthetic.generator import SynthConfig, write_days

    # 0. a submission that sbatch refuses fails at once with sbatch's error
    monkeypatch.setenv("SLURM_CONF", slurm_cluster)
    refused = build_launcher({"kind": "slurm", "partition": "nosuch", "nodes": 2, "gpus_per_node": 0,
                              "work_dir": str(tmp_path / "refused")})
    with pytest.raises(LaunchError, match=r"sbatch did not submit the job \(exit code 1\): .*invalid partition"):
        refused.run_ranks(train_job(), str(tmp_path / "refused" / "run"), on_line=lambda _: None)

    server, api = prefect_server, prefect_server.api
    logs, store, work = tmp_path / "logs", tmp_path / "store", tmp_path / "slurm"
    write_days(SynthConfig(out=str(logs), days=3, start="2026-11-01", rows_per_day=2000, seed=7, workers=1))
    env = {"SLURM_CONF": slurm_cluster, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    squeue_env = {**os.environ, **env}
    # no promotion (min-test-rows): no bundle export; evaluating on 'val' makes the night score its challenger (and
    # the run validates on its holdout: never on the split it reports)
    args = ["--store", str(store), "--input", f"{logs}/{{date}}/part-*", "--train-days", "2", "--model", "slurm",
            "--night.on-data-check", "off", "--promote.min-test-rows", "1000000", "--evaluate.split", "val",
            "--eval-split", "holdout",
            "--data.batch-size", "32", "--data.eval-batch-size", "512", "--max-steps", str(STEPS), "--epochs", "9",
            "--checkpoint-every", str(CHECKPOINT_EVERY), "--eval-every", "128", "--log-every", "10", *SLURM,
            "--launcher.work-dir", str(work)]
    with server.serve(*args, name="serve-slurm", env=env) as serve:
        pipeline = until(lambda: server.deployments().get("dlrmflow-pipeline-slurm"), 120, "the deployment",
                         server.proc, serve, every=0.5)

        def trigger() -> str:
            return until(lambda: answer(post, f"{api}/deployments/{pipeline['id']}/create_flow_run",
                                        {"parameters": {"date": DATE}}), 60, "a new flow run", server.proc)["id"]

        def finish(run_id: str, timeout: float = 300) -> dict:
            return until(lambda: (r := get(f"{api}/flow_runs/{run_id}"))["state"]["type"] in FINAL and r,
                         timeout, "the flow run to end", server.proc, serve, every=0.5)

        def run_logs(run_id: str) -> list[str]:   # the pipeline's and its subflows' (train, evaluate...)
            return [message for _, message in server.logs(run_id, subflows=True)]

        # 1. rank on n2 killed: the flow run fails naming the node, its exit code and the rank's last lines
        first = trigger()
        runs = until(lambda: list(store.glob("runs/*/checkpoints/*/_COMPLETE")), 300, "a complete checkpoint",
                     serve, every=POLL)
        run = runs[0].parents[2]
        [job_log] = work.glob("dlrmflow-train-*.out")
        tagged = until(lambda: re.findall(r"\[n2 rank(\d+)\]:", job_log.read_text()), 30, "a line of n2's rank",
                       every=POLL)
        rank = int(tagged[0])   # which rank runs on n2 is the rendezvous's choice
        [pid] = [p for p, r in _ranks(run).items() if r == rank]
        assert _node_of(pid) == "n2" and len(_ranks(run)) == 2
        os.kill(pid, signal.SIGKILL)
        failed = finish(first)
        message = failed["state"]["message"]
        assert failed["state"]["type"] == "FAILED", server.log("serve-slurm")[-4000:]
        # (srun reports n2's torchrun exiting with 1, or terminated by srun when its peer on n1 ended first)
        assert re.search(rf"training failed: rank {rank} on node n2, exit code -9 \(killed by signal 9\); srun: "
                         rf"node n2: (Exited with exit code 1|Terminated)\. Last lines of rank {rank}:\n", message), \
            message
        assert "Run the pipeline again to resume from the checkpoint at step" in message
        until(lambda: not _jobs(squeue_env) and not _ranks(run), 30, "no job queued and no rank running", every=POLL)
        killed_at = _checkpoints(run)[-1]

        # 2. the next flow run resumes, then is cancelled as the UI does: the job is cancelled and gone
        second = trigger()
        until(lambda: _checkpoints(run)[-1] > killed_at, 300, "a later checkpoint", serve, every=POLL)
        post(f"{api}/flow_runs/{second}/set_state", {"state": {"type": "CANCELLING", "name": "Cancelling"}})
        cancelled = finish(second, 120)
        assert cancelled["state"]["type"] == "CANCELLED", server.log("serve-slurm")[-4000:]
        assert not _jobs(squeue_env) and not _ranks(run)   # the flow's process waited for the job to end
        latest = _checkpoints(run)[-1]
        assert latest > killed_at

        # 3. the last resumes from the latest checkpoint and completes train -> evaluate -> score on Slurm (started
        # before the second's logs are read: its process starts meanwhile)
        third = trigger()
        second_logs = run_logs(second)
        assert f"resuming training from the checkpoint at step {killed_at}: {run}" in second_logs
        assert any(re.fullmatch(r"dlrmflow: cancelled Slurm job \d+; it has ended on every node", m)
                   for m in second_logs), second_logs[-30:]
        done = finish(third, 400)
        assert done["state"]["type"] == "COMPLETED", server.log("serve-slurm")[-4000:]
        third_logs = run_logs(third)
    assert f"resuming training from the checkpoint at step {latest}: {run}" in third_logs
    assert any("already complete, skipping preprocessing" in m for m in third_logs)
    submitted = [m.split("/")[-1].split(".sbatch")[0] for m in third_logs if m.startswith("dlrmflow: submitting ")]
    assert len(submitted) == 3 and all(name.startswith(f"dlrmflow-{job}-{run.name}") for name, job in zip(
        submitted, ("train", "evaluate", "score"))), submitted   # (a scoring's name ends in its token)
    library = (run / RunDir.LIBRARY_LOG).read_text().splitlines()   # the known library warnings, off the console
    for node in ("n1", "n2"):   # each node's ranks named by node: in the flow's logs or the run's library log
        assert any(re.match(rf"\[rank \d on {node}\] ", m) for m in third_logs + library), node
    assert RunDir(str(run)).completion()["latest_step"] == STEPS
    assert json.loads((run / "eval" / "val" / "metrics.json").read_text())["auc"] > 0.5
    history = [json.loads(line) for line in (store / "models" / "slurm" / "history.jsonl").read_text().splitlines()]
    assert history[-1]["challenger"]["rows"] == 2000   # the test day scored by the ranks on Slurm
    assert not (run / RunDir.SCORING).exists() and not (run / RunDir.LEASE).exists()
    until(lambda: not _jobs(squeue_env) and not _ranks(run), 30, "no job queued and no rank running")

