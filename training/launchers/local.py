"""The local launcher: torchrun as a subprocess here, standalone on one node or one node of a c10d job.

``torchrun_command`` is the torchrun line of any rank job (``RankJob``); the cluster launchers' per-node line
(``training.launchers.nodes``) is built from it too. torchrun leads a process group of its own (its forked ranks
are in it) and carries a token in its environment (``JOB_TOKEN``, inherited by every rank, in a session of its
own too): the job recorded in the run's lease is this host, that group and the token, and a take-over stops every
process of this host that is in that group or carries the token (``stop_local_job``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Callable

from common.process import dying_with_this_process, launch_command, live_processes
from training.launchers.base import Launcher, LaunchError, OnLine, RankJob, Started
from training.rundir import RunDir, run_name


TORCHRUN = "training.launchers.torchrun"   # the module that runs torchrun (ranks forked on CPU builds)
JOB_TOKEN = "DLRMFLOW_JOB_TOKEN"   # in the environment of a local job's torchrun and ranks: what it is known by
TERM_WAIT_S = 10.0   # how long a stopped local job's processes may take to end after SIGTERM (then SIGKILL)


def torchrun_command(job: RankJob, run_uri: str, *, nproc: int = 1, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, node_rank: int | None = None,
                     start_method: str = "fork") -> list[str]:
    """The torchrun command line for the ranks of one node, running ``python -m MODULE RUN [ARGS]`` of ``job``
    on each (``training.train_worker`` trains; ``training.evaluate_worker`` evaluates; ``training.score_worker``
    scores), through ``training.launchers.torchrun`` (torch's torchrun; on a CPU build the ranks fork from it,
    imports done, unless ``start_method`` is ``spawn``: said as torchrun's ``--start-method``; fork, the module's
    default, goes unsaid). A multi-node job's rendezvous id is the run's name."""
    cmd = [sys.executable, "-u", "-m", TORCHRUN, "--nproc-per-node", str(nproc)]
    if start_method != "fork":
        cmd += ["--start-method", start_method]
    if nnodes > 1:
        if not rdzv_endpoint:
            raise ValueError("a multi-node run needs rdzv_endpoint HOST:PORT")
        cmd += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                "--rdzv-id", run_name(run_uri) or "dlrmflow"]
        if node_rank is not None:
            cmd += ["--node-rank", str(node_rank)]
    else:
        cmd.append("--standalone")
    return cmd + ["-m", job.module, *job.argv(run_uri)]


class LocalLauncher(Launcher):
    """torchrun as a subprocess here: standalone, or one node of a c10d job (``nnodes`` > 1)."""

    kind = "local"

    @property
    def world_size(self) -> int:
        return self.settings.nproc * self.settings.nnodes

    @property
    def shares_files(self) -> bool:
        return self.settings.nnodes == 1

    @property
    def one_of_several(self) -> bool:
        return self.settings.nnodes > 1

    def start(self, job: RankJob, run: RunDir, *, env: dict[str, str] | None, on_line: OnLine,
              started: Started | None = None) -> int:
        s = self.settings
        cmd = torchrun_command(job, run.uri, nproc=s.nproc, nnodes=s.nnodes, rdzv_endpoint=s.rdzv_endpoint,
                               node_rank=s.node_rank, start_method=s.start_method)
        if started is None:
            return run_command(cmd, env=self.environment(env), on_line=on_line)
        return run_command(cmd, env=self.environment(env), on_line=on_line, started=started)

    def fence(self, job: dict, run: RunDir, say: OnLine) -> str:
        """Stop the recorded local job: on this host, every process of its process group or with its token
        (``stop_local_job``); on another host it cannot be reached from here: LaunchError naming it and the fix."""
        host, pgid, here = job.get("host"), job.get("pgid"), socket.gethostname()
        if host != here:
            raise LaunchError(f"{run}: the previous holder's job ({job.get('what')}) may still be running on {host}, "
                              f"and cannot be stopped from {here}. Fix: on {host}, stop it (`kill -- -{pgid}`) if it "
                              f"still runs, then remove {run.join(RunDir.LEASE)} and re-run.")
        try:
            return stop_local_job(int(pgid), str(job.get("token") or ""), say)
        except LaunchError as e:
            raise LaunchError(f"{run}: the previous holder's {e}") from None

    def describe(self) -> str:
        s = self.settings
        return f"local torchrun, {s.nproc} rank(s)" + (
            f" (node of {s.nnodes}, rendezvous {s.rdzv_endpoint})" if s.nnodes > 1 else "")


def run_command(cmd: list[str], *, env: dict[str, str] | None = None,
                on_line: Callable[[str], None] | None = None, started: Started | None = None) -> int:
    """Run a torchrun command (after ``$DLRMFLOW_LAUNCH_PREFIX``: ``common.process.launch_command``); output is
    inherited or handed line by line to ``on_line``. torchrun dies with this process whatever ends it
    (``common.process.dying_with_this_process``; its ranks die with torchrun), so no rank goes on writing a run that
    a re-run takes over. Call it from a thread that waits for it (this one does).
    torchrun leads a process group of its own, with a token in its environment: ``started`` gets them (this host,
    the group, the token) once it runs; an interruption of this process (Ctrl-C, a cancelled flow run's SIGTERM
    raised in it) or an error of ``started`` stops the job (``stop_local_job``) before it goes on."""
    token = uuid.uuid4().hex
    child_env = {**os.environ, **(env or {}), JOB_TOKEN: token}
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, "bufsize": 1} if on_line else {}
    proc = subprocess.Popen(dying_with_this_process(launch_command(cmd)), env=child_env, stdin=subprocess.DEVNULL,
                            process_group=0, **pipe)
    try:
        if started is not None:
            host = socket.gethostname()
            started({"kind": LocalLauncher.kind, "host": host, "pgid": proc.pid, "token": token,
                     "what": f"local torchrun, process group {proc.pid} on {host}"})
        if on_line is not None:
            for line in proc.stdout:
                on_line(line.rstrip("\n"))
        return proc.wait()
    except BaseException:
        emit = on_line or (lambda line: None)
        emit(f"dlrmflow: interrupted; {stop_local_job(proc.pid, token, emit)}")
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.poll() is None:
            proc.wait()


def _processes(pgid: int, token: str) -> list[int]:
    """The live (not zombie) processes of this host in process group ``pgid`` or with ``token`` in their
    environment (``JOB_TOKEN``); a group is counted as the job's only while one of its processes carries the token
    (a group id reused by another job after this one ended is left alone)."""
    if not token:
        return []
    carriers = live_processes(carrying=f"{JOB_TOKEN}={token}")
    group = live_processes(group=pgid)
    return sorted((group.keys() if group.keys() & carriers.keys() else set()) | carriers.keys())


def stop_local_job(pgid: int, token: str, say: OnLine) -> str:
    """Stop a local job of this host (``run_command``'s: torchrun's process group ``pgid``, every process carrying
    ``token``): SIGTERM, then SIGKILL after ``TERM_WAIT_S``; returns what was done. LaunchError when a process of it
    outlives that (another user's, a process in uninterruptible sleep)."""
    where = f"local job of process group {pgid} on {socket.gethostname()}"
    found = _processes(pgid, token)
    if not found:
        return f"the {where} had already ended"
    say(f"dlrmflow: stopping the {where} ({len(found)} process(es))")
    errors: list[str] = []
    for sig, wait_s in ((signal.SIGTERM, TERM_WAIT_S), (signal.SIGKILL, 5.0)):
        for pid in _processes(pgid, token):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            except OSError as e:
                errors.append(f"kill {pid}: {e.strerror}")
        deadline = time.monotonic() + wait_s
        while (left := _processes(pgid, token)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not left:
            how = "SIGTERM" if sig == signal.SIGTERM else "SIGKILL"
            return f"stopped the {where} ({len(found)} process(es), {how})"
    raise LaunchError(f"the {where} is still running (processes {', '.join(map(str, left))}) and could not be "
                      f"stopped ({'; '.join(sorted(set(errors))) or 'they outlived SIGKILL'}). Fix: `kill -9 -- -{pgid}` "
                      "as its user, then re-run.")
