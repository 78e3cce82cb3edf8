"""The suite's warm launcher (helpers/warm_launcher.py: test machinery, behind the product's launch prefix), which
the suite's rank jobs go through (helpers/fixtures.py ``warm_launcher``): a job through it is the plain launch's job,
in the client's process group, and ends with it."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.process import LAUNCH_PREFIX, launch_command, live_processes
from helpers import warm_launcher as warm
from helpers.datasets import write_dataset
from helpers.paths import REPO
from helpers.processes import until

ARGS = ["--nproc", "2", "--set", "data.batch_size=64", "--set", "log_every=2", "--set", "eval_every=8"]


def test_the_launch_prefix_is_the_client_which_serves_the_launchers_and_runs_any_other_command(monkeypatch):
    plain = [sys.executable, "-u", "-m", "training.launchers.torchrun", "--nproc-per-node", "2", "--standalone",
             "-m", "training.train_worker", "run"]
    monkeypatch.setenv(LAUNCH_PREFIX, warm.prefix("/tmp/a b/w.sock"))
    assert launch_command(plain) == [sys.executable, "-P", warm.SCRIPT, "/tmp/a b/w.sock", *plain]
    assert warm.served(plain) == ("training.launchers.torchrun", plain[4:])
    export = [sys.executable, "-P", "-m", "training.export", "--scratch", "/tmp/s", "run", "8", "out"]
    assert warm.served(export) == ("training.export", export[4:])
    for module in ("flows", "flows.cli"):   # the tests' own commands (helpers.processes.run_dlrmflow)
        assert warm.served([sys.executable, "-m", module, "train", "--run", "r"]) == (module, ["train", "--run", "r"])
    # not a served module, another interpreter, an unknown flag: run as given (the client execs them)
    for other in (["sh", "-c", "sleep 1"], ["/usr/bin/python3", *plain[1:]], [sys.executable, "-X", "dev", *plain[1:]],
                  [sys.executable, "-m", "flows.commands", "train"], [sys.executable, "-m"]):
        assert warm.served(other) is None, other
    # the client execs any other command as given: the same process (its pid, so its group), the command's status
    other = subprocess.Popen(launch_command(["sh", "-c", "echo $$; exit 3"]), stdout=subprocess.PIPE, text=True)
    assert other.communicate(timeout=30)[0].strip() == str(other.pid) and other.returncode == 3


def _train(run: Path, dataset: Path, *extra: str, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    """``dlrmflow train`` in a child; the CPU-seconds of it and every process it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "flows", "train", "--dataset", str(dataset), "--run", str(run), *ARGS,
                           *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr[-3000:]
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done


def _server(sock: Path) -> int:
    """The pid of the warm launcher serving at ``sock``."""
    serving = b"--serve\0" + str(sock).encode() + b"\0"
    return next(int(p) for p in filter(str.isdigit, os.listdir("/proc"))
                if serving in Path(f"/proc/{p}/cmdline").read_bytes())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_job_through_the_warm_launcher_is_the_plain_one_and_dies_with_its_command(warm_launcher, tmp_path):
    """Two ranks trained through the server and plainly: the same losses to the bit, the warm one without the
    imports (its command and what it waited for: under half the plain one's CPU-seconds; the job's own CPU is the
    server's children's). A long job through it: its launcher and ranks are the server's forks in the command's
    process group, and a SIGKILL of the command alone ends every one of them."""
    until(warm_launcher.exists, 60, "the warm launcher's socket")
    dataset = write_dataset(tmp_path / "ds", {"train": 1024, "val": 256})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    warm_cpu, _ = _train(tmp_path / "warm", dataset, "--set", "epochs=1", env=env)
    plain_cpu, _ = _train(tmp_path / "plain", dataset, "--set", "epochs=1",
                          env={k: v for k, v in env.items() if k != LAUNCH_PREFIX})
    losses = [[r.get("loss") for r in map(json.loads, (tmp_path / name / "metrics.jsonl").open())]
              for name in ("warm", "plain")]
    assert losses[0] == losses[1] and len(losses[0]) >= 4
    assert warm_cpu < plain_cpu / 2, (warm_cpu, plain_cpu)

    server = _server(warm_launcher)
    long = tmp_path / "long"
    command = subprocess.Popen([sys.executable, "-m", "flows", "train", "--dataset", str(dataset), "--run", str(long),
                                *ARGS, "--set", "epochs=200"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        until(lambda: (long / "metrics.jsonl").exists(), 120, "the long job's first steps", command, every=0.1)
        client = int(Path(f"/proc/{command.pid}/task/{command.pid}/children").read_text().split()[0])
        group = live_processes(group=client)   # the client leads the job's group (the local launcher's process_group=0)
        forked = [pid for pid, parent in group.items() if parent == server]
        assert len(forked) == 1 and len(group) == 4, group   # client, the forked launcher, its two ranks
    finally:
        command.send_signal(signal.SIGKILL)
        command.wait()
    deadline = time.monotonic() + 15
    while live_processes(group=client) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not live_processes(group=client), "a process of the killed command's job survived"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_command_of_another_session_gets_a_warm_job_that_ends_before_it(warm_launcher, tmp_path):
    """A command started in a session of its own (as a flow run of `dlrmflow serve` is) cannot have its job in its
    process group: the server's fork leads a session of its own instead, with the launcher and both ranks in it.
    A Ctrl-C of the command stops the job through its client (SIGTERM, passed on), and the command has ended only
    once every process of the job's session has: a stop that waits for the client (the run lease's fence too) waits
    for the job."""
    until(warm_launcher.exists, 60, "the warm launcher's socket")
    dataset = write_dataset(tmp_path / "ds", {"train": 1024, "val": 256})
    server = _server(warm_launcher)
    long = tmp_path / "long"
    command = subprocess.Popen([sys.executable, "-m", "flows", "train", "--dataset", str(dataset), "--run", str(long),
                                *ARGS, "--set", "epochs=200"], cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        until(lambda: (long / "metrics.jsonl").exists(), 120, "the long job's first steps", command, every=0.1)
        forked = [int(p) for p in Path(f"/proc/{server}/task/{server}/children").read_text().split()]
        job = [pid for pid in forked if live_processes(session=pid)]
        # the forked launcher leads a session of its own, its two ranks in it
        assert len(job) == 1 and len(live_processes(session=job[0])) == 3, (forked, job)
        os.killpg(command.pid, signal.SIGINT)   # Ctrl-C: the command stops its job (local.stop_local_job)
        out, _ = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    left = {p: Path(f"/proc/{p}/stat").read_text() for p in live_processes(session=job[0])}
    assert not left, f"the job outlived the command that was stopped: {left}"
    assert "process(es), SIGTERM)" in out, out[-2000:]   # its client ended after the job, within the stop's wait
