"""The test suite's warm launcher: a server that has imported what every rank job imports (torch, TorchRec, the
trainer, torchrun: ~4.5 CPU-seconds) forks ``training.launchers.torchrun`` for each local rank job, which then forks
the ranks as it does on a CPU build; the export child (``training.export``: a serving bundle written in a process of
its own) is forked the same way, and so are the tests' own ``dlrmflow`` commands (``python -m flows.cli``, ``python
-m flows``: helpers/processes.py ``run_dlrmflow``). Test machinery, not the product's: the product starts its
commands after ``$DLRMFLOW_LAUNCH_PREFIX`` (``common.process.launch_command``), and the suite's fixture (``warm_launcher``,
helpers/fixtures.py) sets that to this module's client, ``python -P tests/helpers/warm_launcher.py SOCKET``, with
the server started as ``python -P tests/helpers/warm_launcher.py --serve SOCKET``.

The client gets the command (``python [-u] [-P] -m MODULE ARGS``) after its socket. For a command of ``SERVED`` it
hands the server its stdin/stdout/stderr, environment, folder and process group; the forked launcher takes them,
joins the client's process group (so that the local launcher's stop, the run lease's fence and a kill of the group
reach it and its ranks as before), and is killed with that group when the client dies (a SIGKILL included). The
client ends with the job's exit status. A client in another session than the server's (a process group can only be
joined within one: a command started with ``start_new_session``, a flow run of ``dlrmflow serve``) gets a job that
leads a session of its own instead: the client passes it the signals that stop a job (SIGINT, SIGTERM, SIGHUP) and
ends only after every process of it (what is left once its launcher ended is killed), so a stop that waits for the
client waits for the job; a SIGKILL of the client ends the job a moment later (its watcher), not at once. Where the
job cannot be served warm (another command or interpreter; no server; a Slurm job: Slurm owns its processes, their
cgroup and signals; a client in other Linux namespaces than the server's: a private mount namespace's files; a torch
build with GPU support: its ranks are not forked), the client execs the command as given (same pid, same group).
What differs from a plain launch: the forked processes' command line and start-up environment in /proc are the
server's.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import struct
import sys
import time

from common.process import live_processes

SCRIPT = os.path.abspath(__file__)   # run as a script (``python -P SCRIPT``): its folder's modules stay off sys.path
SERVED = ("training.launchers.torchrun", "training.export", "flows.cli", "flows")   # the modules a job runs
MAIN_OF = {"flows": "flows.cli"}   # ``python -m flows`` runs flows.cli's main(argv), as flows/__main__.py does
FLAGS = ("-u", "-P")   # the interpreter flags of a served command (the server's fork is unbuffered and -P anyway)
NAMESPACES = ("mnt", "net", "pid", "user", "uts", "ipc")   # a client in others than the server's launches plainly
_HEADER = struct.Struct("!I")


# ---- the client (a fresh interpreter per job: imports nothing heavy) ------------------------------------------------
def prefix(path: str) -> str:
    """``$DLRMFLOW_LAUNCH_PREFIX`` for the server at ``path``: this client's command line, shell-quoted."""
    return shlex.join([sys.executable, "-P", SCRIPT, path])


def served(cmd: list[str]) -> tuple[str, list[str]] | None:
    """``(module, argv)`` of a command this server runs (``PYTHON [-u] [-P] -m MODULE ARGS``: this interpreter, a
    module of ``SERVED``), None for any other."""
    if not cmd or cmd[0] != sys.executable:
        return None
    i = 1
    while i < len(cmd) and cmd[i] in FLAGS:
        i += 1
    if cmd[i:i + 1] != ["-m"] or i + 1 >= len(cmd) or cmd[i + 1] not in SERVED:
        return None
    return cmd[i + 1], cmd[i + 2:]


def client(path: str, cmd: list[str]) -> None:
    """Run ``cmd`` through the server at ``path``; exits as the job did. Execs ``cmd`` itself when it is not a
    command of ``SERVED``, or the server is not there or does not serve this client."""
    job_of = served(cmd)
    if job_of is None or os.environ.get("SLURM_JOB_ID"):
        _plain(cmd)
    module, argv = job_of
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        payload = json.dumps({"module": module, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
                              "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
                              "namespaces": _namespaces()}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(payload)) + payload], [0, 1, 2])
    except OSError:
        _plain(cmd)
    # a job in this process's group gets the group's signals itself; one in a session of its own gets them from here
    job: dict = {}
    pending: list[int] = []

    def pass_on(sig: int, _frame) -> None:
        if "group" in job:
            _signal_group(job["group"], sig)
        else:
            pending.append(sig)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pass_on)
    status = {"lost": "the warm launcher ended before the job"}
    try:
        for line in conn.makefile("rb"):
            message = json.loads(line)
            if "group" not in message:
                status = message
                break
            job.update(message)
            for sig in pending:
                _signal_group(job["group"], sig)
    except (OSError, ValueError):
        pass
    if job.get("group", os.getpgid(0)) != os.getpgid(0):
        _end_group(job["group"])
    if "refused" in status:
        _plain(cmd)
    if "lost" in status:
        print(f"dlrmflow: {status['lost']}", file=sys.stderr, flush=True)
        sys.exit(1)
    if status.get("signal"):
        signal.signal(status["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), status["signal"])
    sys.exit(status.get("exit", 1))


def _plain(cmd: list[str]) -> None:
    """Exec the command this client stands for, as given."""
    os.execvp(cmd[0], cmd)


def _signal_group(group: int, sig: int) -> None:
    if group != os.getpgid(0):   # a job in this group has had the signal already
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            pass


def _namespaces() -> dict[str, str]:
    """This process's Linux namespaces (``mnt:[4026531841]``...): a job forked by a server in others would see
    other mounts (a test's private tmpfs), network or processes than its command."""
    found = {}
    for name in NAMESPACES:
        try:
            found[name] = os.readlink(f"/proc/self/ns/{name}")
        except OSError:
            pass
    return found


def _end_group(group: int) -> None:
    """Kill what is left of a job's own group once its launcher has ended (a rank slow to go) and wait until none
    of it is alive: the client ends after its job, as a plain launch's group does."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        return
    while live_processes(group=group):
        time.sleep(0.02)


def _send(conn: socket.socket, message: dict) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass   # the client has gone


# ---- the server ---------------------------------------------------------------------------------------------------
def _first_export() -> None:
    """A process's first ``torch.export`` costs ~0.5 CPU-seconds more than the next (its tracing machinery's set-up):
    paid here once, each export child forked after it starts warm (0.58 -> 0.08 CPU-s for a small program)."""
    import torch

    class Tiny(torch.nn.Module):
        def forward(self, x):
            return x.sum(1)

    torch.export.export(Tiny(), (torch.ones(2, 3),), dynamic_shapes=({0: torch.export.Dim("batch", min=1)},),
                        strict=False)


def serve(path: str) -> None:
    """Import the rank jobs' modules, then fork a launcher for each client at ``path`` until killed (it dies with
    its parent). A torch build with GPU support serves nothing: its clients launch plainly."""
    import gc
    import importlib
    import selectors

    from common.process import die_with_parent
    from training.launchers import torchrun

    die_with_parent()
    if not torchrun.forks_ranks():
        return
    for name in (*torchrun.PRELOAD, *SERVED, "torch.distributed.run",
                 "torch.distributed.elastic.multiprocessing.errors"):
        importlib.import_module(name)
    _first_export()
    gc.collect()
    gc.freeze()   # the imported heap out of every collection of the jobs (~0.2 CPU-s a full one; copies no pages)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    listener.bind(tmp)
    listener.listen(64)
    os.rename(tmp, path)   # clients see the socket once it accepts
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    jobs: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is listener:
                _accept(listener, jobs, (listener, wake_r, wake_w))
            else:
                os.read(wake_r, 4096)
        _reap(jobs)


def _accept(listener: socket.socket, jobs: dict[int, socket.socket], server_fds: tuple) -> None:
    conn, _ = listener.accept()
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError):
        conn.close()
        return
    if len(fds) != 3 or request.get("module") not in SERVED or request.get("namespaces") != _namespaces():
        _send(conn, {"refused": "not a job this server runs (or one in other namespaces)"})
        print(f"refused pid {request.get('pid')}: {request.get('module')}, other namespaces or no stdio", flush=True)
        conn.close()
        for fd in fds:
            os.close(fd)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _become_job(request, fds, conn, [*(s if isinstance(s, int) else s.fileno() for s in server_fds),
                                         *(c.fileno() for c in jobs.values())])
    for fd in fds:
        os.close(fd)
    jobs[pid] = conn
    own = " (a session of its own)" if request["sid"] != os.getsid(0) else ""
    print(f"forked {pid} for pid {request['pid']}{own}: {request['module']} {' '.join(request['argv'][-3:])}",
          flush=True)   # its log: what a test reads to tell that a job was served warm


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
    (size,) = _HEADER.unpack_from(data)
    while len(data) < _HEADER.size + size:
        more = conn.recv(65536)
        if not more:
            raise ValueError("request cut short")
        data += more
    return json.loads(data[_HEADER.size:_HEADER.size + size]), fds


def _reap(jobs: dict[int, socket.socket]) -> None:
    while jobs:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = jobs.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        _send(conn, {"signal": -code} if code < 0 else {"exit": code})
        conn.close()


def _become_job(request: dict, fds: list[int], conn: socket.socket, server_fds: list[int]) -> None:
    """In the forked child: become the client's command (its group, or a session of its own for a client of another
    session; its stdio, environment, folder), killed with its group when the client dies; run its module's main;
    never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        for fd in server_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if request["sid"] == os.getsid(0):
            os.setpgid(0, request["pgid"])
        else:
            os.setsid()
        _send(conn, {"group": os.getpgid(0)})   # before the job runs: the client can pass it signals from now on
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _die_with(request["pid"])
        sys.stdout.reconfigure(line_buffering=True, write_through=True)   # as ``python -u``
        sys.stderr.reconfigure(line_buffering=True, write_through=True)
        module = sys.modules[MAIN_OF.get(request["module"], request["module"])]
        sys.argv = [module.__file__, *request["argv"]]
        try:
            code = module.main(request["argv"]) or 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _die_with(client: int) -> None:
    """Kill this process's group (this launcher and its ranks) once ``client`` has ended, as a plain launcher dies
    with its parent: a thread waiting on the client's pidfd."""
    import select
    import threading

    try:
        pidfd = os.pidfd_open(client)
    except ProcessLookupError:
        os.killpg(0, signal.SIGKILL)
        return

    def watch() -> None:
        select.select([pidfd], [], [])
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="dlrmflow-die-with-client").start()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        serve(argv[1])
    else:   # SOCKET COMMAND...
        client(argv[0], argv[1:])


if __name__ == "__main__":
    main()
