"""`dlrmflow run`'s ephemeral Prefect server (flows/ephemeral.py) ends with the command, whatever ended it: a
SIGKILL (no atexit runs: the kernel's PR_SET_PDEATHSIG ends it) or an interrupt (Prefect's own stop at exit).
Real Prefect, real processes; `dlrmflow run` is stopped as soon as its server started, before any training.

It answers its owner only (issue 46): before the interrupt, once the command's own client created its flow run,
another user (uid 65534, where the tests run as root) and a request without the command's secret get 401 from
every route tried, the secret is in no command line, and its Prefect home and database are private."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.fixtures import _shared_folder
from helpers.prefect_api import prefect_schema
from helpers.processes import process_group, until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SERVER_APP = "prefect.server.api.server:create_app"


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, session id) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()   # after "(comm)", which may hold spaces
    return fields[0], int(fields[1]), int(fields[3])


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in "ZX"   # a zombie has ended: only its exit status is left


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _server_of(parent: int) -> int | None:
    """The ephemeral server (uvicorn with Prefect's app) that ``parent`` started, or None. Not waiting until it answers
    (its first start migrates a fresh database: 10-25 s) keeps the test short; it dies with its parent all the same."""
    for pid in _pids():
        if (stat := _stat(pid)) and stat[1] == parent and stat[0] not in "ZX":
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except (FileNotFoundError, ProcessLookupError):
                continue
            # after the exec: no longer the `python -m common.process PID ...` wrapper
            if b"uvicorn" in argv[:3] and SERVER_APP.encode() in argv:
                return pid
    return None


# what a client of the server at PORT gets (run by any python, as any user): each request's status, each file's
# readability; the secret (Prefect's basic auth) from the environment, if any
REQUESTS = r"""
import base64, json, os, sys, urllib.error, urllib.request
port, requests, files = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
secret, found = os.environ.get("SECRET"), {}
for method, path, body in requests:
    headers = {"Content-Type": "application/json"}
    if secret:
        headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            found[f"{method} {path}"] = [answer.status, json.loads(answer.read() or "null")]
    except urllib.error.HTTPError as e:
        found[f"{method} {path}"] = [e.code, None]
    except urllib.error.URLError:   # not listening yet
        found[f"{method} {path}"] = [0, None]
for path in files:
    try:
        open(path, "rb").close()
        found[path] = "readable"
    except OSError as e:
        found[path] = type(e).__name__
print(json.dumps(found))
"""


def _client(python: str, port: int, requests: list, files: list[str] = (), secret: str | None = None,
            user: int | None = None) -> dict:
    env = {"PATH": os.defpath, **({"SECRET": secret} if secret else {})}
    ids = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
    done = subprocess.run([python, "-c", REQUESTS, str(port), json.dumps(requests), *files], env=env, cwd="/",
                          capture_output=True, text=True, timeout=60, **ids)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _owner_only(run: int, server: int, home: Path) -> None:
    """The checks of the module doc on the live server of `dlrmflow run` ``run``."""
    argv = Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
    port = int(argv[argv.index(b"--port") + 1])
    # the server's environment as it started (set by the command before it started it)
    environ = dict(v.split(b"=", 1) for v in Path(f"/proc/{server}/environ").read_bytes().split(b"\0") if b"=" in v)
    secret = environ[b"PREFECT_SERVER_API_AUTH_STRING"].decode()
    assert len(secret) >= 32 and environ[b"PREFECT_API_AUTH_STRING"].decode() == secret
    for pid in (run, server):
        assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert os.stat(f"/proc/{pid}/environ").st_mode & 0o777 == 0o400
    listing = ["POST", "/api/flow_runs/filter", {}]
    flow_runs = until(lambda: _client(sys.executable, port, [listing], secret=secret)["POST /api/flow_runs/filter"]
                      [1], 120, "the flow run of `dlrmflow run`")   # its own client got in: the flow run exists
    run_id = flow_runs[0]["id"]
    assert flow_runs[0]["parameters"]   # what another user must not read
    tries = [listing, ["GET", f"/api/flow_runs/{run_id}", None],
             ["POST", f"/api/flow_runs/{run_id}/set_state", {"state": {"type": "FAILED"}, "force": True}],
             ["POST", "/api/variables/", {"name": "intruder", "value": 1}], ["GET", "/api/admin/settings", None],
             ["GET", "/api/openapi.json", None], ["GET", "/api/health", None]]
    denied = {f"{m} {p}": [401, None] for m, p, _ in tries[:-1]} | {"GET /api/health": [200, True]}
    assert _client(sys.executable, port, tries) == denied   # without the secret
    assert stat.S_IMODE(home.stat().st_mode) == 0o700 and stat.S_IMODE((home / "prefect.db").stat().st_mode) == 0o600
    python = shutil.which("python3", path=os.defpath)
    if os.geteuid() == 0 and python:   # as another user: no secret to find either
        files = [f"/proc/{run}/environ", f"/proc/{server}/environ", str(home / "prefect.db")]
        assert _client(python, port, tries, files, user=65534) == denied | dict.fromkeys(files, "PermissionError")
    after = _client(sys.executable, port, [listing], secret=secret)["POST /api/flow_runs/filter"][1]
    assert [(r["id"], r["parameters"]) for r in after] == [(run_id, flow_runs[0]["parameters"])]
    assert after[0]["state_type"] != "FAILED"   # not forced
    assert not [r for r in _client(sys.executable, port, [["POST", "/api/variables/filter", {}]], secret=secret)
                ["POST /api/variables/filter"][1] if r["name"] == "intruder"]


def _session(sid: int) -> list[int]:
    """The live processes of session ``sid`` (what the test started: process_group makes a session of its own)."""
    return [pid for pid in _pids() if (stat := _stat(pid)) and stat[2] == sid and stat[0] not in "ZX"]


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGINT, 130)])
def test_the_ephemeral_server_ends_with_dlrmflow_run(sig, code, tmp_path, tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_", "DLRMFLOW_"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    (tmp_path / "prefect").mkdir(mode=0o755)   # a home and a database that others could read: made private
    if sig == signal.SIGINT:   # its server answers (below): from a copy of the suite's schema, not migrating its own
        shutil.copyfile(prefect_schema(_shared_folder(tmp_path_factory)), tmp_path / "prefect" / "prefect.db")
        os.chmod(tmp_path / "prefect" / "prefect.db", 0o644)
    command = [sys.executable, "-m", "flows", "run", "--store", str(tmp_path / "store"), "--synthetic.rows", "2000",
               "--nproc", "1", "--max-steps", "2"]
    with open(tmp_path / "run.log", "w") as log, process_group(command, cwd=tmp_path, env=env, stdout=log,
                                                               stderr=subprocess.STDOUT) as proc:
        server = until(lambda: _server_of(proc.pid), 60, "the ephemeral server", proc, every=0.2)
        try:
            if sig == signal.SIGINT:   # one of the two waits for the server to answer
                _owner_only(proc.pid, server, tmp_path / "prefect")
            os.kill(proc.pid, sig)
            assert proc.wait(30) == code, (tmp_path / "run.log").read_text()[-3000:]
            deadline = time.time() + 5
            while (_alive(server) or _session(proc.pid)) and time.time() < deadline:
                time.sleep(0.1)
            assert not _alive(server), f"the ephemeral server {server} outlived `dlrmflow run` ({sig.name})"
            assert not _session(proc.pid), f"processes of the test outlived `dlrmflow run`: {_session(proc.pid)}"
        finally:  # a failure leaves nothing behind either (process_group's TERM waits for nothing once run exited)
            for pid in _session(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_a_server_started_from_a_passing_thread_outlives_that_thread():
    """The kernel's "parent" of PR_SET_PDEATHSIG is the thread that started the child: Prefect may start the server
    from any thread (a log or event worker's), so it is started from one that lives as long as the process."""
    from flows.ephemeral import PARENT_THREAD, _ServerSubprocess

    started: list[subprocess.Popen] = []

    def start() -> None:
        started.append(child := _ServerSubprocess().Popen(["sleep", "60"]))
        until(lambda: Path(f"/proc/{child.pid}/cmdline").read_bytes().startswith(b"sleep"), 30, "the exec", child)
        # the signal is set (before the exec): the thread ends now

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    child = started[0]
    try:
        time.sleep(0.5)  # a child of the ended thread would be SIGKILLed by now
        assert child.poll() is None, f"the child ended with its starting thread ({child.returncode})"
        assert _stat(child.pid)[1] == os.getpid()
        assert any(t.name == PARENT_THREAD for t in threading.enumerate())
    finally:
        child.kill()
        child.wait()


def test_a_command_gets_a_fresh_secret_and_a_private_prefect_home_and_leaves_no_secret_behind(tmp_path):
    """In a fresh interpreter (no server started; a suite worker may hold a harness's API URL or a server already):
    within the block our clients' and the server's settings hold one fresh secret, in the environment that children
    inherit, and the home and its database lose the group's and others' bits; after it, the environment and
    Prefect's settings are as before (a command run by a test)."""
    home = tmp_path / "prefect"
    home.mkdir(mode=0o755)
    (home / "prefect.db").write_bytes(b"")
    os.chmod(home / "prefect.db", 0o644)
    code = """
import json, os, stat, sys
from prefect.settings import get_current_settings
from flows.ephemeral import AUTH_SETTINGS, server_for_its_owner_only
home, out = sys.argv[1], []
for _ in range(2):
    with server_for_its_owner_only():
        settings = get_current_settings()
        out.append({"client": settings.api.auth_string.get_secret_value(),
                    "server": settings.server.api.auth_string.get_secret_value(),
                    "env": [os.environ[name] for name in AUTH_SETTINGS],
                    "home": stat.S_IMODE(os.stat(home).st_mode),
                    "db": stat.S_IMODE(os.stat(os.path.join(home, "prefect.db")).st_mode)})
    out[-1]["after"] = [bool(set(AUTH_SETTINGS) & set(os.environ)), get_current_settings().api.auth_string is None]
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API") and k not in
           ("PREFECT_SERVER_API_AUTH_STRING",)} | {"PREFECT_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", code, str(home)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    rounds = json.loads(done.stdout.strip().splitlines()[-1])
    for r in rounds:
        assert r["client"] == r["server"] and r["env"] == [r["client"]] * 2 and len(r["client"]) >= 32
        assert (r["home"], r["db"]) == (0o700, 0o600) and r["after"] == [False, True]
    assert rounds[0]["client"] != rounds[1]["client"]
