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
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future

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


class _ServerSubprocess:
    """``subprocess`` as ``prefect.server.api.server`` sees it: the module, but ``Popen`` starts the command dying
    with this process, from the thread that is its parent."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args, **kwargs) -> subprocess.Popen:  # noqa: N802 (subprocess's name)
        return _on_parent_thread(dying_with_this_process(list(args)), kwargs)


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
