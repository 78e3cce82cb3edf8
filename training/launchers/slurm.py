"""SlurmLauncher: render infra/slurm/train.sbatch for a rank job (train, evaluate, score), ``sbatch --wait
--parsable`` it, stream the job's log.

``sbatch --wait`` blocks until the job ends and exits with the job's exit code, so the Prefect task
that calls ``launch`` simply waits in a subprocess; the log file (``#SBATCH --output``) is followed
meanwhile and every line handed to ``on_line``. If this process is interrupted (Ctrl-C; a cancelled flow run,
whose process Prefect's runner SIGTERMs, which Prefect raises in the flow), the job is cancelled with ``scancel``
and this process waits until Slurm has ended it on every node (``squeue`` no longer lists it), so that no rank
outlives the flow run. A process killed outright (SIGKILL) cancels nothing: its job id is in the run's lease (and its
cluster, from ``--parsable``), and the take-over of that stale lease cancels the job first (``fence``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

from common.atomic import write_atomic
from training.launchers.base import Launcher, LaunchError, OnLine, RankJob, Started, infra_dir, render
from training.launchers.gpus import EnvChoice, choose_env, comment, environments, hardware_hint, job_hardware
from training.launchers.nodes import node_command
from training.rundir import RunDir

_JOB_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")   # an sbatch argument that needs no quoting
_BLANKED = re.compile(r"(pack|het)(job)", re.I)   # the words sbatch blanks in a directive line
# how long a cancelled job may take to end: under the 30 s that Prefect's runner gives a cancelled flow run's
# process after its SIGTERM before it kills it
CANCEL_WAIT_S = 20.0
FENCE_WAIT_S = 120.0   # how long the job of a stale run lease may take to end once cancelled (nothing waits on us)
# squeue's states of a job whose processes have all ended (squeue -j lists it a while after: MinJobAge)
_ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
          "REVOKED", "SPECIAL_EXIT", "TIMEOUT"}


def sbatch_quote(arg: str) -> str:
    """``arg`` as one argument of an ``#SBATCH`` line, read back verbatim by sbatch's own parser (not a shell):
    outside quotes whitespace splits and ``#`` starts a comment; a backslash escapes the next character
    everywhere, inside quotes too; older sbatch knows only double quotes and ends the line at an unescaped ``#``
    even inside them; and sbatch blanks the first 'packjob' or 'hetjob' of the line before it parses. Hence:
    plain words as they are, anything else in double quotes with ``\\``, ``"``, ``'`` and ``#`` escaped and
    those two words broken by an escape. A line break cannot be quoted (it ends the directive): LaunchError."""
    if any(c in arg for c in "\n\r\0"):
        raise LaunchError(f"#SBATCH argument {arg!r} holds a line break or NUL, which would end the directive. "
                          "Fix: remove it from the launcher settings.")
    if _PLAIN.fullmatch(arg) and not _BLANKED.search(arg):
        return arg
    escaped = re.sub(r"""([\\"'#])""", r"\\\1", arg)
    return '"' + _BLANKED.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", escaped) + '"'


class SlurmLauncher(Launcher):
    kind = "slurm"

    def describe(self) -> str:
        s = self.settings
        return f"slurm: {s.nodes} node(s) x {s.ranks_per_node} rank(s)" + (f", partition {s.partition}" if s.partition else "")

    def paths(self, job: RankJob, run_uri: str) -> tuple[Path, Path]:
        """(script, log pattern with %j) of a job on a run."""
        work = Path(os.path.expanduser(self.settings.work_dir))
        if "\\" in str(work):
            raise LaunchError(f"slurm work_dir {self.settings.work_dir!r} holds a backslash, which turns off Slurm's "
                              "file name patterns (the job log's %j). Fix: choose a folder without one.")
        name = self.job_name(job, run_uri)
        return work / f"{name}.sbatch", work / f"{name}-%j.out"

    def output_pattern(self, job: RankJob, run_uri: str) -> str:
        """``#SBATCH --output``'s file name pattern of the job log: a ``%`` of the folder doubled (Slurm would
        expand ``%u``, ``%x``... in it), then the log's name with ``%j``."""
        log = self.paths(job, run_uri)[1]
        return f"{str(log.parent).replace('%', '%%')}/{log.name}"

    @staticmethod
    def job_name(job: RankJob, run_uri: str) -> str:
        """``dlrmflow-<job>-<run>[-<tag>]``, e.g. dlrmflow-train-r1, dlrmflow-evaluate-r1."""
        return "dlrmflow-" + _JOB_NAME.sub("-", job.label(run_uri))[:100]

    def directives(self, job: RankJob, run_uri: str) -> list[str]:
        """The #SBATCH lines."""
        s = self.settings
        lines = [f"--job-name={self.job_name(job, run_uri)}", f"--nodes={s.nodes}", "--ntasks-per-node=1"]
        if s.gpus_per_node:
            lines.append(f"--gpus-per-node={s.gpus_per_node}")
        if s.cpus_per_task:
            lines.append(f"--cpus-per-task={s.cpus_per_task}")
        lines += [f"--{k}={v}" for k, v in (("partition", s.partition), ("account", s.account),
                                             ("time", s.time_limit)) if v]
        if s.exclusive:
            lines.append("--exclusive")
        lines.append(f"--output={self.output_pattern(job, run_uri)}")
        lines += s.sbatch_options
        return [f"#SBATCH {sbatch_quote(line)}" for line in lines]

    def srun_options(self) -> list[str]:
        s = self.settings
        opts = [f"--nodes={s.nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
        if s.container_image:
            opts.append(f"--container-image={s.container_image}")
            if s.container_mounts:
                opts.append(f"--container-mounts={','.join(s.container_mounts)}")
        return opts

    def python(self) -> tuple[str, str]:
        """(the ranks' Python, why that one): ``python`` of the settings; else ``python`` in a container image (the
        image's), else this process's interpreter (the nodes see it at the same path: a shared file system)."""
        s = self.settings
        if s.python:
            return s.python, "launcher.python"
        if s.container_image:
            return "python", "the container image's: launcher.python unset, launcher.container_image set"
        if sys.executable:
            return sys.executable, "the submitting interpreter: launcher.python unset"
        return "python", "the nodes' PATH's: launcher.python unset, this interpreter's path unknown"

    def python_check(self) -> str:
        """A line that fails the job at once, saying why, when the ranks' Python is not on the batch host (the
        first node: the nodes of one job are alike); none for a container image's Python (not on the host)."""
        if self.settings.container_image:
            return ":"
        python, why = self.python()
        said = f"dlrmflow: the ranks' Python {python} ({why}) is not on "
        fix = (". Fix: set launcher.python (--launcher.python PATH) to the Python of dlrmflow's environment on the "
               "nodes, or install it at the submitting interpreter's path on a file system the nodes share")
        return (f"command -v {shlex.quote(python)} >/dev/null || {{ echo {shlex.quote(said)}\"$HOSTNAME\""
                f"{shlex.quote(fix)} >&2; exit 127; }}")

    def node_command(self, job: RankJob, run_uri: str) -> str:
        s = self.settings
        return node_command(job, run_uri, python=self.python()[0], nproc=s.ranks_per_node, nnodes=s.nodes,
                            is_host="$(( SLURM_NODEID == 0 ))", rdzv_timeout_s=s.rdzv_timeout_s)

    def env_choice(self, hardware: str | None = None) -> EnvChoice:
        """The nodes' environment profiles: ``rccl_profiles``, else the GPU vendor's (``gpu_vendor``, else what the
        job's hardware profile says: ``hardware``, its ``sharding.profile``), else chosen on the node at run time."""
        hint = hardware_hint(hardware)
        return choose_env(self.settings, [hint] if hint else [], hardware)

    def environment(self, env: dict[str, str] | None = None, hardware: str | None = None) -> dict[str, str]:
        """The environment of every node: the profiles chosen when the job is rendered (none when the node chooses
        them, see ``render``), then the settings' env, then ``env``."""
        return environments(self.env_choice(hardware), self.settings.env, env)[0]

    def render(self, job: RankJob, run_uri: str, *, env: dict[str, str] | None = None,
               hardware: str | None = None) -> str:
        """The batch script of ``job`` on this run; ``hardware``: the job's hardware profile (``sharding.profile``),
        which tells the GPUs' vendor and so the environment profile (unknown: chosen on the node at run time)."""
        s = self.settings
        path = infra_dir() / "slurm" / "train.sbatch"
        choice = self.env_choice(hardware)
        fixed, on_node = environments(choice, s.env, env)
        exports = [*choice.shell(on_node), *(f"export {k}={shlex.quote(v)}" for k, v in fixed.items())]
        python, python_why = self.python()
        values = {
            "job": job.name,
            "sbatch_directives": "\n".join(self.directives(job, run_uri)),
            "setup": "\n".join(s.setup) or ":",
            "rccl_profiles": comment(choice.summary()),
            "env_exports": "\n".join(exports),
            "python": comment(f"{python} ({python_why})"),
            "python_check": self.python_check(),
            "rdzv_port": s.rdzv_port,
            "nproc_per_node": s.ranks_per_node,
            "run_uri": shlex.quote(run_uri),
            "node_command": shlex.quote(self.node_command(job, run_uri)),
            "srun_options": " ".join(shlex.quote(o) for o in self.srun_options()),
        }
        return render(path.read_text(), values, str(path))

    def submit_command(self, script: Path) -> list[str]:
        return [self.settings.sbatch, "--wait", "--parsable", str(script)]

    def start(self, job: RankJob, run: "RunDir", *, env: dict[str, str] | None, on_line: OnLine,
              started: Started | None = None) -> int:
        emit, run_uri = on_line, run.uri
        script, log_pattern = self.paths(job, run_uri)
        script.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(script, self.render(job, run_uri, env=env, hardware=job_hardware(run)))
        cmd = self.submit_command(script)
        emit(f"dlrmflow: submitting {script}: {shlex.join(cmd)}")
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except FileNotFoundError:
            raise LaunchError(f"'{self.settings.sbatch}' not found. Fix: run on a Slurm login node, or set "
                              "slurm.sbatch to the sbatch path.") from None
        job_id, cluster = None, ""
        stop = threading.Event()
        follower = None
        try:
            first = proc.stdout.readline().strip()  # --parsable: "jobid[;cluster]" as soon as it is queued
            if first:
                job_id, _, cluster = first.partition(";")
                log = log_pattern.with_name(log_pattern.name.replace("%j", job_id))
                emit(f"dlrmflow: Slurm job {job_id} submitted; log {log}")
                if started is not None:
                    started({"kind": self.kind, "id": job_id, "cluster": cluster or None,
                             "what": f"Slurm job {job_id}" + (f" on cluster {cluster}" if cluster else "")})
                follower = threading.Thread(target=_follow, daemon=True, args=(log, emit, stop))
                follower.start()
            rest, err = proc.communicate()
        except BaseException:
            proc.kill()
            if job_id:
                self.cancel(job_id, emit, cluster or None)
            raise
        finally:
            stop.set()
            if follower:
                follower.join(timeout=30)
        for line in (rest + err).splitlines():
            if line.strip():
                emit(f"sbatch: {line}")
        if job_id is None:
            raise LaunchError(f"sbatch did not submit the job (exit code {proc.returncode}): {err.strip()}")
        emit(f"dlrmflow: Slurm job {job_id} finished with exit code {proc.returncode}")
        return proc.returncode

    def cancel(self, job_id: str, emit: OnLine, cluster: str | None = None) -> None:
        """``scancel`` the job, then wait (``CANCEL_WAIT_S`` at most) until squeue no longer lists it: its
        processes have ended on every node (a job is COMPLETING until then)."""
        emit(f"dlrmflow: interrupted; cancelling Slurm job {job_id}")
        ended, why = self.end_job(job_id, cluster, CANCEL_WAIT_S)
        if ended:
            emit(f"dlrmflow: cancelled Slurm job {job_id}; it has ended on every node")
        else:
            emit(f"dlrmflow: cancelled Slurm job {job_id}, not seen to end ({why}): see `squeue -j {job_id}`")

    def fence(self, job: dict, run: RunDir, say: OnLine) -> str:
        """Cancel the Slurm job of a stale run lease (``scancel``) and wait (``FENCE_WAIT_S`` at most) until it has
        ended on every node; LaunchError naming it and the fix when it may still run."""
        job_id, cluster = str(job["id"]), job.get("cluster")
        scancel = shlex.join(["scancel", *(["-M", cluster] if cluster else []), job_id])
        try:
            running = self.job_state(job_id, cluster)
        except FileNotFoundError:
            raise LaunchError(f"{run}: the previous holder's Slurm job {job_id} may still be running, and this machine "
                              f"has no {self.settings.squeue} to see it (nor to cancel it). Fix: {scancel} on its "
                              f"cluster, then remove {run.join(RunDir.LEASE)} and re-run.") from None
        except (OSError, subprocess.TimeoutExpired) as e:
            raise LaunchError(f"{run}: the previous holder's Slurm job {job_id} may still be running: squeue does not "
                              f"tell ({e}). Fix: {scancel}, then re-run.") from None
        if running is None or running in _ENDED:
            return f"Slurm job {job_id} had already ended"
        say(f"dlrmflow: cancelling Slurm job {job_id} ({running})")
        ended, why = self.end_job(job_id, cluster, FENCE_WAIT_S)
        if ended:
            return f"cancelled Slurm job {job_id} (it was {running}); it has ended on every node"
        raise LaunchError(f"{run}: the previous holder's Slurm job {job_id} is still running and could not be "
                          f"cancelled ({why}). Fix: {scancel}, then re-run.")

    def job_state(self, job_id: str, cluster: str | None = None, timeout_s: float = 30.0) -> str | None:
        """The job's state as squeue tells it (RUNNING, COMPLETING, CANCELLED...), None when squeue no longer
        knows it (ended: a job is listed until MinJobAge after its end); OSError or TimeoutExpired when squeue does
        not answer."""
        got = subprocess.run([self.settings.squeue, *(["-M", cluster] if cluster else []), "-h", "-j", job_id,
                              "-o", "%T"], capture_output=True, text=True, timeout=timeout_s)
        if "Invalid job id" in got.stderr:
            return None
        if got.returncode != 0:
            raise OSError(f"squeue: {(got.stderr or got.stdout).strip()}")
        states = [line.strip() for line in got.stdout.splitlines() if line.strip() and not line.startswith("CLUSTER")]
        return states[0] if states else None

    def end_job(self, job_id: str, cluster: str | None, wait_s: float) -> tuple[bool, str]:
        """``scancel`` the job, then wait up to ``wait_s`` until squeue no longer lists it running: (whether it has
        ended on every node, else why not: scancel's complaint, its last state or that squeue does not tell)."""
        s = self.settings
        deadline = time.monotonic() + wait_s
        try:
            got = subprocess.run([s.scancel, *(["-M", cluster] if cluster else []), job_id], capture_output=True,
                                 text=True, timeout=max(1.0, wait_s / 2))
            said = (got.stderr or got.stdout).strip() if got.returncode or got.stderr.strip() else ""
            said = said if not said or said.startswith("scancel") else f"scancel: {said}"
        except (OSError, subprocess.TimeoutExpired) as e:
            said = f"scancel: {e}"
        while True:
            try:   # within the runner's grace (``cancel``)
                now = self.job_state(job_id, cluster, timeout_s=max(1.0, deadline - time.monotonic()))
            except (OSError, subprocess.TimeoutExpired) as e:
                return False, "; ".join(filter(None, (said, f"cannot watch the cancelled Slurm job {job_id} end ({e})")))
            if now is None or now in _ENDED:
                return True, ""
            if time.monotonic() >= deadline:
                return False, "; ".join(filter(None, (said, f"still {now} after {wait_s:g} s")))
            time.sleep(0.5)


def _follow(path: Path, emit: OnLine, stop: threading.Event, poll_s: float = 0.5) -> None:
    """Hand every line of a growing file to ``emit`` until ``stop`` is set, then the rest of it (at once: the wait
    between reads ends when ``stop`` is set)."""
    pos, partial = 0, ""
    while True:
        stopping = stop.is_set()
        if path.exists():
            with path.open("r", errors="replace") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
            lines = (partial + chunk).split("\n")
            partial = lines.pop()
            for line in lines:
                emit(line)
        if stopping:
            if partial:
                emit(partial)
            return
        stop.wait(poll_s)
