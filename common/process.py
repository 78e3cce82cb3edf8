"""Child processes that end with their parent, whatever ended it (``kill -9`` included): Linux's
``prctl(PR_SET_PDEATHSIG)``, a promise of the kernel that no cleanup handler of the parent can give.

``die_with_parent()`` is called by a child itself (a rank that torchrun starts). ``dying_with_this_process(cmd)``
is the command line that runs ``cmd`` so from a parent that does not control ``cmd``'s code (the ephemeral
Prefect server, ``flows/ephemeral.py``): ``python -P -m common.process PID CMD...`` sets the signal, checks that
PID is still its parent, then execs CMD, which keeps the signal (execve clears it only for set-user-ID programs).

The kernel sends the signal when the *thread* that started the child exits, not when the process does: start
such a child from a thread that lives as long as the process. Elsewhere than Linux, nothing of this applies.

Whether a process of this host lives, from /proc (Linux): ``started(pid)`` (its start time: with the pid, it names
one process of a boot, so a pid reused by a later process is told apart), ``live_processes`` (a process group's, a
session's, or those carrying an environment entry: the one reader of them), ``pid_space()`` (the boot and pid
namespace in which pids mean that).

``launch_command(cmd)``: a local rank job's torchrun (``training.launchers.local``) and the export child
(``training.export``) start as ``$DLRMFLOW_LAUNCH_PREFIX CMD`` where that names a wrapper (``numactl
--interleave=all``, ``nice -n 10``; the test suite's warm launcher, ``tests/helpers/warm_launcher.py``): the one seam
between how dlrmflow starts its processes and what runs them.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys

LINUX = sys.platform.startswith("linux")
PR_SET_PDEATHSIG = 1
LAUNCH_PREFIX = "DLRMFLOW_LAUNCH_PREFIX"   # a wrapper before a local rank job and the export child (launch_command)


def die_with_parent(parent: int | None = None) -> None:
    """Linux: get SIGKILLed when our parent dies (``parent``: its pid, default the parent we have now). A parent
    that already died before the signal was set (we were adopted) kills us at once."""
    if not LINUX:
        return
    import ctypes

    parent = os.getppid() if parent is None else parent
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def dying_with_this_process(cmd: list[str]) -> list[str]:
    """``cmd`` as a command that dies with this process (Linux; elsewhere ``cmd`` itself). ``-P``: not the
    ``common`` package of whatever folder the command runs in."""
    if not LINUX:
        return list(cmd)
    return [sys.executable, "-P", "-m", "common.process", str(os.getpid()), *map(os.fspath, cmd)]


def launch_command(cmd: list[str]) -> list[str]:
    """``cmd`` (a local rank job's torchrun command, the export child's) after the words of ``$DLRMFLOW_LAUNCH_PREFIX``
    (shell-quoted: a wrapper that runs the command it is given, keeping its pid, process group and exit status), or
    ``cmd`` itself where that is unset or empty."""
    return [*shlex.split(os.environ.get(LAUNCH_PREFIX, "")), *cmd]


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (the state first), None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()   # after "(comm)", which may hold spaces
    except (OSError, IndexError):
        return None


def started(pid: int) -> int | None:
    """Linux: when process ``pid`` started (clock ticks after boot), None when it has ended (a zombie too: it holds
    nothing any more) or off Linux."""
    fields = _stat(pid)
    return None if fields is None or fields[0] in "ZX" else int(fields[19])


def live_processes(*, group: int | None = None, session: int | None = None,
                   carrying: str | None = None) -> dict[int, int]:
    """Linux: pid -> parent pid of this host's live (not zombie) processes of process ``group``, of ``session``, or
    with ``carrying`` (``NAME=VALUE``) in their environment as they started (``/proc/PID/environ``: another user's
    cannot be read, and is not counted)."""
    entry = carrying.encode() if carrying else None
    found = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        fields = _stat(int(name))
        if not fields or fields[0] in "ZX":
            continue
        if int(fields[2]) == group or int(fields[3]) == session or (entry and entry in _environ(int(name))):
            found[int(name)] = int(fields[1])
    return found


def _environ(pid: int) -> list[bytes]:
    """The entries of ``/proc/PID/environ`` (``NAME=VALUE``), none when it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def pid_space() -> str | None:
    """Linux: where a pid and its start time name one process: this boot (the kernel's boot id) and this pid
    namespace; None elsewhere."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f"{f.read().strip()} {os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def exit_text(returncode: int) -> str:
    """How a child ended, from its ``returncode`` (``subprocess``: negative for a signal): ``exit code 1``, or
    ``killed by signal 6 (SIGABRT)``."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = f" ({signal.Signals(-returncode).name})"
    except ValueError:
        name = ""
    return f"killed by signal {-returncode}{name}"


def _exec(argv: list[str]) -> None:
    parent, *cmd = argv
    die_with_parent(int(parent))
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    _exec(sys.argv[1:])
