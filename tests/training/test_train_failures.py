"""Training under real failures (real torchrun processes, CPU):

- the whole `dlrmflow train` process group of a 2-rank run SIGKILLed after its first complete checkpoint, then
  `--resume`: the final parameters and optimizer state (table-wise tables keep theirs only on the owning rank)
  equal an uninterrupted run's, bit for bit, and no rank outlives the kill (torchrun puts ranks in sessions of
  their own);
- one rank SIGKILLed mid-training (like the OOM killer): the job ends at once with a non-zero exit and
  torchrun's report names the failing rank; it does not wait for the process-group timeout;
- a missing dataset, a missing data file or a bad config: a one-line error before torchrun starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.datasets import write_dataset
from helpers.paths import REPO
from helpers.processes import dlrmflow_command
from helpers.runs import PG_TIMEOUT, checkpoint_tensors, metrics, train
from common.process import LAUNCH_PREFIX
from training.launchers import RankOutput

# row-wise Adagrad tables, Adam (lazy state) for the MLPs, warmup and decay: a resume that lost any
# state, or replayed or skipped a batch, changes the final parameters.
RESUME_ARGS = ["--set", "data.batch_size=32", "--set", "epochs=2", "--set", "log_every=10", "--set", "keep_checkpoints=2",
               "--set", "optimizer.warmup_steps=5", "--set", "optimizer.decay_start=60", "--set", "optimizer.decay_steps=60",
               "--set", "optimizer.dense.type=adam", "--set", "optimizer.dense.lr=0.01", "--checkpoint-every", "20"]
STEPS = 55  # 2048 rows, 2 ranks x 32 rows a step: 32 steps an epoch; crosses an epoch boundary


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("ds"), {"train": 2048, "val": 64})


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "flows.cli", "train", *PG_TIMEOUT, *args]


def child_env(**extra: str) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", **extra}


def wait_for(predicate, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"training exited ({proc.returncode}) before {what}:\n{out[-2000:]}\n{err[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def processes_of(run: Path) -> dict[int, dict[str, str]]:
    """pid -> environment (at its start) of every live process whose command line names the run folder, with its
    command line as ``_cmd`` and its name (``training.distributed.name_process``) as ``_name``."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if str(run).encode() not in cmdline:
                continue
            env = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in kv)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                found[int(pid)] = {k.decode(): v.decode() for k, v in env.items()} | {
                    "_cmd": b" ".join(cmdline).decode(), "_name": Path(f"/proc/{pid}/comm").read_text().strip()}
        except OSError:
            pass
    return found


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_sigkill_after_a_checkpoint_then_resume_equals_an_uninterrupted_run(dataset, tmp_path):
    """Only the killed run launches plainly (its processes are found by their command lines); the uninterrupted
    run and the resume fork from the warm launcher (helpers/warm_launcher.py), ~4 CPU-seconds less each."""
    full, parts = tmp_path / "full", tmp_path / "parts"
    args = ["--dataset", str(dataset), *RESUME_ARGS, "--max-steps", str(STEPS), "--nproc", "2"]
    # the uninterrupted run and the one to kill start side by side (this file's time is mostly startup)
    uninterrupted = subprocess.Popen(dlrmflow_command("train", *PG_TIMEOUT, *args, "--run", str(full)), cwd=REPO,
                                     env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     process_group=0)
    plain = {k: v for k, v in child_env().items() if k != LAUNCH_PREFIX}
    proc = subprocess.Popen(cli(*args, "--run", str(parts)), cwd=REPO, env=plain, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: any((parts / "checkpoints").glob("*/_COMPLETE")), proc, 150, "the first checkpoint")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and torchrun; the worker dies with torchrun
        proc.communicate()
    out, err = uninterrupted.communicate(timeout=120)
    assert uninterrupted.returncode == 0, f"{out[-2000:]}\n{err[-3000:]}"
    assert "table_wise" in (full / "plan.txt").read_text()
    assert proc.returncode == -signal.SIGKILL
    assert not processes_of(parts), "a process of the killed run survived"
    done = sorted(int(p.parent.name) for p in (parts / "checkpoints").glob("*/_COMPLETE"))
    assert done and done[-1] < STEPS, f"the run was not interrupted (complete checkpoints: {done})"

    out = train(dataset, parts, "--resume", nproc=2).stdout  # the run's own config.yaml
    assert re.search(rf"resumed from step {done[-1]}\b", out), out[-2000:]
    a, b = checkpoint_tensors(full, STEPS, tmp_path), checkpoint_tensors(parts, STEPS, tmp_path)
    assert a.keys() == b.keys() and any(k.startswith("optim.") for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    loss = lambda run: [(m["step"], m["loss"]) for m in metrics(run) if "loss" in m]
    assert loss(full) == loss(parts) and len(loss(full)) == STEPS // 10


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_of_the_command_alone_ends_torchrun_and_its_ranks(dataset, plain_launches, tmp_path):
    """`kill -9` of `dlrmflow train` only (the OOM killer, a scheduler): torchrun dies with it (PR_SET_PDEATHSIG, set
    before the exec) and its ranks with torchrun; nothing goes on writing the run. The ranks are quiet (no progress
    bar, log or evaluation lines) and the output goes to a file: no write to a dead reader's pipe ends them."""
    run = tmp_path / "orphan"
    quiet = ["--set", "data.batch_size=32", "--set", "epochs=500", "--set", "log_every=100000",
             "--set", "eval_split=null"]
    env = child_env(TQDM_MININTERVAL="100000", TQDM_MAXINTERVAL="100000")
    with open(tmp_path / "train.log", "w") as log:
        proc = subprocess.Popen(cli("--dataset", str(dataset), "--run", str(run), *quiet, "--nproc", "2"), cwd=REPO,
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: sum(p["_name"].startswith("dlrmflow-rank") for p in processes_of(run).values()) == 2,
                 proc, 90, "both ranks")
        time.sleep(2)   # past the start-up lines
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 15
        while processes_of(run) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [p["_cmd"][:120] for p in processes_of(run).values()]
        assert not left, f"outlived `dlrmflow train`: {left}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_one_rank_killed_ends_the_whole_job_promptly_naming_the_rank(dataset, plain_launches, tmp_path):
    run, pg_timeout = tmp_path / "run", 20.0
    proc = subprocess.Popen(cli("--dataset", str(dataset), "--run", str(run), "--nproc", "2",
                                "--set", "data.batch_size=64", "--set", "epochs=1000", "--set", "log_every=1000",
                                "--set", f"pg_timeout_s={pg_timeout}"),
                            cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_for(lambda: (run / "plan.txt").exists(), proc, 90, "the ranks to start")
        time.sleep(1.0)  # into the training loop (gloo all-to-alls every step)
        workers = {int(env["_name"].removeprefix("dlrmflow-rank")): pid for pid, env in processes_of(run).items()
                   if env["_name"].startswith("dlrmflow-rank")}
        assert sorted(workers) == [0, 1], workers
        killed_at = time.monotonic()
        os.kill(workers[1], signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode != 0
    assert took < pg_timeout / 2, f"the job took {took:.1f} s to end after rank 1 died (pg timeout {pg_timeout} s)"
    report = out + err
    assert re.search(r"rank\s*:\s*1 \(local_rank: 1\)", report) and "SIGKILL" in report, report[-3000:]
    assert not processes_of(run), "a rank outlived the failed job"


def one_line_error(capsys, *args: str) -> str:
    """`dlrmflow train ARGS` in this process: exit code 2 and exactly one line on stderr."""
    from flows.cli import main

    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_missing_dataset_is_a_one_line_error_before_torchrun(tmp_path):
    proc = subprocess.run(cli("--dataset", str(tmp_path / "nope"), "--run", str(tmp_path / "r")), cwd=REPO,
                          env=child_env(), capture_output=True, text=True, timeout=50)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0] == (f"error: feature spec '{tmp_path / 'nope'}/feature_spec.yaml' does not exist. Fix: pass a "
                        "dataset folder written by `dlrmflow preprocess`, or the path of a spec YAML.")
    assert "Traceback" not in proc.stdout + proc.stderr and not (tmp_path / "r").exists()


@pytest.mark.timeout(60)
def test_bad_dataset_or_config_is_a_one_line_error(dataset, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(dataset, broken)
    (broken / "train" / "cat_c3.bin").unlink()
    msg = one_line_error(capsys, "--dataset", str(broken), "--run", str(tmp_path / "r1"))
    assert f"{broken}/train/cat_c3.bin: data file of split 'train' is missing" in msg

    msg = one_line_error(capsys, "--dataset", str(dataset), "--run", str(tmp_path / "r2"), "--set", "data.train_split=training")
    assert "no split 'training' (it has: train, val)" in msg
    msg = one_line_error(capsys, "--dataset", str(dataset), "--run", str(tmp_path / "r7"), "--set", "eval_split=validation")
    assert "no split 'validation' (it has: train, val). Fix: set eval_split" in msg

    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {embedding_dim: 8, bottom_mlp: [32, 16]}\n")
    msg = one_line_error(capsys, "--dataset", str(dataset), "--run", str(tmp_path / "r3"), "--config", str(bad))
    assert str(bad) in msg and "last size 8" in msg
    msg = one_line_error(capsys, "--dataset", str(dataset), "--run", str(tmp_path / "r4"), "--config", str(tmp_path / "no.yaml"))
    assert "no.yaml: training config does not exist" in msg
    msg = one_line_error(capsys, "--dataset", str(dataset), "--run", str(tmp_path / "r5"), "--set", "optimizer.dense.lrr=1")
    assert "optimizer.dense.lrr: Extra inputs are not permitted" in msg
    msg = one_line_error(capsys, "--dataset", str(dataset), "--run", str(tmp_path / "r6"), "--set", "data.batch_size=0")
    assert "data.batch_size" in msg
    assert not any((tmp_path / f"r{i}").exists() for i in range(1, 8))  # nothing written, nothing launched


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_non_finite_loss_stops_the_run_at_its_step_and_latest_stays_finite(tmp_path):
    """A float16 numerical column that overflowed to inf (an `identity` value above 65504) from row 800 on: with
    batches of 32 in file order, step 26 is the first to read it. The run stops there with an error naming the
    step, the last finite loss and the likely cause; `latest` is the checkpoint of step 20, and its weights are finite.
    The failure message made of the launcher's output (torchrun's rank prefixes, as the train flow reads them) shows
    rank 0's last lines with the error, not the sharding plan it printed before it trained (~30 lines)."""
    data = write_dataset(tmp_path / "ds", {"train": 2048, "val": 64})
    numerical = np.fromfile(data / "train" / "numerical.bin", np.float16).reshape(2048, -1)
    numerical[800:, 0] = np.inf
    numerical.tofile(data / "train" / "numerical.bin")
    run = tmp_path / "run"
    proc = subprocess.run(cli("--dataset", str(data), "--run", str(run), "--set", "data.batch_size=32",
                              "--set", "data.shuffle=false", "--set", "log_every=5", "--checkpoint-every", "10",
                              "--max-steps", "40"),
                          cwd=REPO, env=child_env(PET_TEE="3"), capture_output=True, text=True, timeout=110)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert re.search(r"training diverged at step 26: the loss is nan \(last finite loss \d+\.\d{4} at step 25\)", out), \
        out[-3000:]
    output = RankOutput()
    for line in proc.stdout.splitlines():   # what the launcher handed on, line by line
        output(line)
    tail = output.failure("training", proc.returncode).split("Last lines of rank 0:\n", 1)[1].splitlines()
    plan = {line.strip() for line in (run / "plan.txt").read_text().splitlines() if line.strip()}
    assert any(line.startswith("error (rank 0): training diverged at step 26") for line in tail), tail
    assert not plan & {line.strip() for line in tail}, tail   # none of the plan's ~30 lines
    assert "validation: split 'val' (64 rows)" in tail, tail   # the rank's other lines stay
    assert "Checkpoint 'latest' stays step 20" in out and "65504" in out and "--numerical-dtype float32" in out
    assert json.loads((run / "checkpoints" / "latest").read_text())["step"] == 20
    assert sorted(int(p.parent.name) for p in (run / "checkpoints").glob("*/_COMPLETE")) == [10, 20]
    tensors = checkpoint_tensors(run, 20, tmp_path)
    assert all(torch.isfinite(t).all() for t in tensors.values() if t.is_floating_point())
    assert [m["step"] for m in metrics(run) if "loss" in m] == [5, 10, 15, 20, 25]
