"""The ephemeral Prefect server ends with the process that started it, whatever ended that (``kill -9`` included).

Without ``PREFECT_API_URL``, Prefect's first client in a process (of ``dlrmflow run``, ``tune``) starts a server
of its own: ``SubprocessASGIServer`` runs ``python -m uvicorn ...prefect.server.api.server:create_app`` as a child
and stops it at exit (atexit), which a SIGKILL, an OOM kill or a crash of the interpreter never runs: the server
then serves on, adopted by init, forever. Here the server's command is started through
``common.process.dying_with_this_process`` (Linux's PR_SET_PDEATHSIG: the kernel SIGKILLs it when we die), from a
thread of ours that lives as long as the process (the kernel's "parent" is the thread that started the child:
Prefect starts the server from whichever thread first needs a client, a log or event worker's included).
Prefect's own stop at a normal exit is unchanged.

The one change to Prefect is in one place: ``prefect.server.api.server``'s name ``subprocess`` (used there for
the server's ``Popen`` only) becomes a proxy whose ``Popen`` does the above. It is made as that module is imported
(it costs seconds: only a process that starts the server pays), or at once where it already was.

The server answers its owner only (``server_for_its_owner_only``): it listens on 127.0.0.1, where every user of
the machine reaches it, so it gets a fresh random secret per command, Prefect's own basic auth
(``PREFECT_SERVER_API_AUTH_STRING`` for the server, ``PREFECT_API_AUTH_STRING`` for our clients: every route of
its API answers 401 without it; the health and ready probes and the disabled UI's settings excepted). The secret is
in this process's environment only, which its children inherit (the server included) and which /proc shows to
its owner only (``/proc/PID/environ`` is mode 0400; never on a command line: ``/proc/PID/cmdline`` is
world-readable). Its database is private too: the Prefect home is made mode 0700, a SQLite database elsewhere
0600, and the server writes its files with umask 077.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import queue
import secrets
import stat
import subprocess
import sys
import threading
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Iterator

from common.process import LINUX, dying_with_this_process

SERVER_MODULE = "prefect.server.api.server"
PARENT_THREAD = "prefect-server-parent"


def server_dies_with_this_process() -> None:
    """From now on, an ephemeral Prefect server that this process starts dies with it (Linux; a no-op elsewhere and
    where ``PREFECT_API_URL`` names a server). Idempotent."""
    from prefect.settings import PREFECT_API_URL

    if not LINUX or PREFECT_API_URL.value():
        return
    if SERVER_MODULE in sys.modules:
        _patch(sys.modules[SERVER_MODULE])
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


AUTH_SETTINGS = ("PREFECT_SERVER_API_AUTH_STRING", "PREFECT_API_AUTH_STRING")   # the server's, its clients'


@contextmanager
def server_for_its_owner_only() -> Iterator[None]:
    """For the block (a command's run), an ephemeral Prefect server that this process starts answers only this
    process and its children (a fresh secret in the environment, the module doc) and keeps its database private
    (the Prefect home mode 0700). Enter it before Prefect's first client. The environment is restored at its end
    unless a server was started (it serves on until the process ends: its clients keep the secret). A no-op where
    ``PREFECT_API_URL`` names a server (its own settings apply) or one is running already (it has its secret)."""
    from prefect.context import refresh_global_settings_context
    from prefect.settings import PREFECT_API_URL, get_current_settings

    if PREFECT_API_URL.value() or _server_running():
        yield
        return
    before = {name: os.environ.get(name) for name in AUTH_SETTINGS}
    os.environ.update(dict.fromkeys(AUTH_SETTINGS, secrets.token_urlsafe(32)))
    refresh_global_settings_context()   # Prefect read its settings from the environment when it was imported
    settings = get_current_settings()
    url = settings.server.database.connection_url
    database = url.get_secret_value() if url else f"sqlite+aiosqlite:///{settings.home}/prefect.db"
    private = [(settings.home, 0o700)]
    if database.startswith("sqlite") and ":memory:" not in database:
        path = database.split(":///", 1)[1].split("?", 1)[0]
        private += [(f"{path}{suffix}", 0o600) for suffix in ("", "-wal", "-shm", "-journal")]
    for path, mode in private:
        _make_private(os.fspath(path), mode)
    try:
        yield
    finally:
        if not _server_running():   # e.g. a command that failed before its flow, run in a test's interpreter
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            refresh_global_settings_context()


def _server_running() -> bool:
    """Whether an ephemeral server of Prefect's runs in this process."""
    module = sys.modules.get(SERVER_MODULE)
    return module is not None and any(server.running for server in module.SubprocessASGIServer._instances.values())


def _make_private(path: str, mode: int) -> None:
    """``path`` (when it exists) readable by its owner only: ``mode`` unless its group's and others' bits are clear."""
    try:
        if stat.S_IMODE(os.stat(path).st_mode) & 0o077:
            os.chmod(path, mode)
            print(f"dlrmflow: made {path} readable by its owner only (mode {mode:o}): the ephemeral Prefect "
                  "server keeps every run's parameters there", file=sys.stderr)
    except FileNotFoundError:
        pass
    except OSError as e:
        print(f"dlrmflow: could not make {path} private ({e.strerror}): other users of this machine may read the "
              "Prefect runs' parameters there. Fix: chmod go-rwx it.", file=sys.stderr)


class _ServerSubprocess:
    """``subprocess`` as ``prefect.server.api.server`` sees it: the module, but ``Popen`` starts the command dying
    with this process, from the thread that is its parent."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args, **kwargs) -> subprocess.Popen:  # noqa: N802 (subprocess's name)
        return _on_parent_thread(dying_with_this_process(list(args)), {"umask": 0o077, **kwargs})


def _patch(module) -> None:
    if not isinstance(module.subprocess, _ServerSubprocess):
        module.subprocess = _ServerSubprocess()


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches ``prefect.server.api.server`` right after it is executed, before anyone can use it."""

    def find_spec(self, fullname, path, target=None):
        if fullname != SERVER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module) -> None:
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch  # this spec's own loader: nothing else is changed
        return spec


_lock = threading.Lock()
_requests: tuple[int, queue.SimpleQueue] | None = None   # (the pid whose thread serves it, the queue)


def _on_parent_thread(args: list[str], kwargs: dict) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)`` on the parent thread (started once per process; a daemon waiting on its
    queue, it lives until the process ends, after Prefect's own stop at exit)."""
    global _requests
    with _lock:
        if _requests is None or _requests[0] != os.getpid():  # none yet, or a fork's copy without the thread
            _requests = (os.getpid(), queue.SimpleQueue())
            threading.Thread(target=_serve, args=(_requests[1],), name=PARENT_THREAD, daemon=True).start()
        requests = _requests[1]
    done: Future = Future()
    requests.put((done, args, kwargs))
    return done.result()


def _serve(requests: queue.SimpleQueue) -> None:
    while True:
        done, args, kwargs = requests.get()
        try:
            done.set_result(subprocess.Popen(args, **kwargs))
        except BaseException as e:  # handed to the caller
            done.set_exception(e)
