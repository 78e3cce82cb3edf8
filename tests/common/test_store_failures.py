"""A store that cannot be used: a lost S3 endpoint, a frozen one (it accepts connections and never answers), a
read-only local folder and an S3 bucket that denies writes are each one line, no traceback, naming the store and
the fix; the S3 client's timeouts and retries come from DLRMFLOW_S3_* in every process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.errors import UserError
from common.s3 import s3_bound, s3_client_config, storage_options
from common.store import Store, filesystem
from common.store_errors import store_error
from helpers.fixtures import S3_ENV
from helpers.paths import BIN, REPO
from helpers.frozen import frozen_endpoint, s3_settings, timed
from helpers.processes import free_port, process_group, wait_for_port

FAST = {"DLRMFLOW_S3_CONNECT_TIMEOUT_S": "1", "DLRMFLOW_S3_READ_TIMEOUT_S": "1", "DLRMFLOW_S3_RETRIES": "1"}


@pytest.fixture
def s3_env(monkeypatch):
    """Credentials for an S3 endpoint the test names, short timeouts, and no cached filesystems."""
    yield from s3_settings(monkeypatch, FAST)


def dlrmflow(*args: str, env: dict[str, str], prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The real `dlrmflow` command line in a child interpreter."""
    return subprocess.run([*prefix, sys.executable, "-m", "flows", *args], cwd=REPO, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """The command's one error line (exit 2, no traceback)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0][len("error: "):]


# --- the S3 client's settings ------------------------------------------------------------------------------------


def test_s3_timeouts_and_retries_from_the_environment(monkeypatch):
    for name in FAST:
        monkeypatch.delenv(name, raising=False)
    assert s3_client_config() == {"connect_timeout": 10.0, "read_timeout": 30.0,
                                  "retries": {"total_max_attempts": 3, "mode": "standard"}}
    monkeypatch.setenv("DLRMFLOW_S3_CONNECT_TIMEOUT_S", "2.5")
    monkeypatch.setenv("DLRMFLOW_S3_READ_TIMEOUT_S", "7")
    monkeypatch.setenv("DLRMFLOW_S3_RETRIES", "0")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    options = storage_options("s3://b/p")
    config = options["config_kwargs"]
    assert options == {"endpoint_url": "http://127.0.0.1:9", "config_kwargs": config}
    assert {k: config[k] for k in ("connect_timeout", "read_timeout", "retries")} == {
        "connect_timeout": 2.5, "read_timeout": 7.0, "retries": {"total_max_attempts": 1, "mode": "standard"}}
    assert config["http_session_cls"].__name__ == "_BoundedHTTPSession"   # the transport that keeps them
    assert config["connector_args"]["socket_factory"].args == (7000,)       # unacknowledged data: the read timeout
    assert s3_bound(config) == 7.0
    assert storage_options("/local/store") == {} == storage_options("memory://x")
    for name, bad in [("DLRMFLOW_S3_READ_TIMEOUT_S", "0"), ("DLRMFLOW_S3_CONNECT_TIMEOUT_S", "soon"),
                      ("DLRMFLOW_S3_RETRIES", "-1"), ("DLRMFLOW_S3_RETRIES", "1.5")]:
        with monkeypatch.context() as m:
            m.setenv(name, bad)
            with pytest.raises(UserError, match=rf"^{name}='{bad}' is not .*\. Fix: set it to e\.g\. "):
                storage_options("s3://b/p")


def test_s3fs_builds_its_client_with_them(s3_env):
    """What s3fs does with ``config_kwargs``: botocore's client config (no request is made)."""
    s3_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    s3_env.setenv("DLRMFLOW_S3_RETRIES", "4")
    fs, _ = filesystem("s3://store/dlrm")
    config = fs.connect().meta.config
    assert (config.connect_timeout, config.read_timeout) == (1.0, 1.0)
    assert config.retries == {"total_max_attempts": 5, "mode": "standard"}
    assert config.http_session_cls.__name__ == "_BoundedHTTPSession"
    assert fs.retries == 1   # s3fs's own loop makes one try: botocore's retries are the only ones
    assert s3_bound() == 5 * 1.0 + 2 ** 4 - 1


def test_a_child_process_like_a_rank_reads_the_same_settings(monkeypatch):
    """torchrun's ranks (and Slurm's jobs) inherit the environment and open the store through common.store."""
    monkeypatch.setenv("DLRMFLOW_S3_READ_TIMEOUT_S", "12")
    monkeypatch.setenv("DLRMFLOW_S3_RETRIES", "5")
    code = ("import json; from common.s3 import storage_options; c = storage_options('s3://b/p')['config_kwargs']; "
            "print(json.dumps({k: c[k] for k in ('read_timeout', 'retries')}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    config = json.loads(done.stdout)
    assert config["read_timeout"] == 12.0 and config["retries"]["total_max_attempts"] == 6


# --- a lost endpoint, a frozen one ------------------------------------------------------------------------------


def test_a_lost_endpoint_is_one_line(s3_env):
    """A real moto server that served the store, then stopped: the check and a night's read say so."""
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    s3_env.setenv("AWS_ENDPOINT_URL", endpoint)
    with process_group([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        wait_for_port(port, proc, 30)
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="store")
        Store("s3://store/dlrm").check()
        fs, _ = filesystem("s3://store/dlrm")
        fs.pipe_file("store/dlrm/runs/r1/config.yaml", b"x: 1")
    expected = (rf"^store 's3://store/dlrm' unreachable: cannot reach {endpoint} \(connection refused\)\. "
                r"Fix: check AWS_ENDPOINT_URL, that the S3 service runs, and that this machine can reach it\.$")
    start = time.monotonic()
    with pytest.raises(UserError, match=expected):
        Store("s3://store/dlrm").check()
    with pytest.raises(Exception) as raised:   # mid-night: a read through the filesystem every module uses; it
        fs.cat_file("store/dlrm/runs/r1/config.yaml")   # fails at once, the check's call having failed (common.breaker)
    assert re.fullmatch(expected.replace(r"\. Fix: ", r" \(failed at once: a call to .* s more; DLRMFLOW_S3_FAIL_FAST_S: "
                                         r"3 s\)\. Fix: "), str(store_error(raised.value, "s3://store/dlrm")))
    assert str(store_error(raised.value)).startswith(f"S3 unreachable: cannot reach {endpoint} (connection ref")
    assert time.monotonic() - start < 20


def test_an_unknown_host_is_one_line(s3_env):
    s3_env.setenv("AWS_ENDPOINT_URL", "http://store.invalid:9000")   # RFC 6761: never resolves
    with pytest.raises(UserError, match=r"^store 's3://store/dlrm' unreachable: cannot reach "
                                        r"http://store\.invalid:9000 \(host 'store\.invalid' not found\)\. Fix: "):
        Store("s3://store/dlrm").check()


def test_a_frozen_endpoint_fails_the_check_within_the_timeouts(s3_env):
    s3_env.setenv("DLRMFLOW_S3_RETRIES", "0")
    with frozen_endpoint() as (endpoint, connections):
        s3_env.setenv("AWS_ENDPOINT_URL", endpoint)
        start = time.monotonic()
        with pytest.raises(UserError) as raised:
            Store("s3://store/dlrm").check()
        took = time.monotonic() - start
    assert str(raised.value) == (
        f"store 's3://store/dlrm' not answering: {endpoint} accepted the connection but sent no reply within the "
        "1 s read timeout. Fix: check the S3 service at AWS_ENDPOINT_URL (up but hung or overloaded); on a slow "
        "link raise DLRMFLOW_S3_READ_TIMEOUT_S (1) or DLRMFLOW_S3_RETRIES (0).")
    assert len(connections) == 1 and 1 <= took < 5   # one attempt of 1 s


def test_a_frozen_endpoint_fails_the_command_in_seconds(tmp_path):
    """`dlrmflow gc` checks an S3 store before it removes anything: one line within the configured bounds
    (2 attempts of 1 s, and the backoff between them), no traceback."""
    with frozen_endpoint() as (endpoint, connections):
        start = time.monotonic()
        done = dlrmflow("gc", "--store", "s3://store/dlrm", env={**S3_ENV, **FAST, "AWS_ENDPOINT_URL": endpoint})
        took = time.monotonic() - start
    assert one_line_error(done) == (
        f"store 's3://store/dlrm' not answering: {endpoint} accepted the connection but sent no reply within the "
        "1 s read timeout. Fix: check the S3 service at AWS_ENDPOINT_URL (up but hung or overloaded); on a slow "
        "link raise DLRMFLOW_S3_READ_TIMEOUT_S (1) or DLRMFLOW_S3_RETRIES (1).")
    assert len(connections) == 2 and took < 20   # the retry was a second connection


NOT_ANSWERING = ("store 's3://store/dlrm' not answering: {endpoint} accepted the connection but sent no reply within "
                 "the 1 s read timeout. Fix: check the S3 service at AWS_ENDPOINT_URL (up but hung or overloaded); on "
                 "a slow link raise DLRMFLOW_S3_READ_TIMEOUT_S (1) or DLRMFLOW_S3_RETRIES (0).")


def test_a_write_to_a_frozen_endpoint_fails_within_the_bound(s3_env):
    """A PUT (fs.pipe, the call every atomic write and lease makes) to an endpoint that accepts and never answers:
    botocore's ``Expect: 100-continue`` made aiohttp wait for a ``100 Continue`` outside every timeout (still waiting
    after 400 s); it fails now after one attempt of the read timeout, as a GET does, with the store's one line."""
    s3_env.setenv("DLRMFLOW_S3_RETRIES", "0")
    s3_env.setenv("DLRMFLOW_S3_FAIL_FAST_S", "0.01")   # the read tries the endpoint too (common.breaker's cooldown)
    with frozen_endpoint() as (endpoint, connections):
        s3_env.setenv("AWS_ENDPOINT_URL", endpoint)
        fs, _ = filesystem("s3://store/dlrm")
        assert s3_bound() == 1.0
        took, error = timed(lambda: fs.pipe("store/dlrm/runs/r1/config.yaml", b"x: 1"), 10)
        read_took, _ = timed(lambda: fs.cat_file("store/dlrm/runs/r1/config.yaml"), 10)
    assert str(store_error(error, "s3://store/dlrm")) == NOT_ANSWERING.format(endpoint=endpoint)
    assert 1 <= took < s3_bound() + 2 and 1 <= read_took < s3_bound() + 2
    assert len(connections) == 2   # one attempt each: neither botocore nor s3fs tried again


def test_an_upload_the_frozen_endpoint_stops_taking_fails_within_the_bound(s3_env):
    """A body larger than the sockets' buffers (16 MiB, one PutObject): the endpoint stops reading it partway,
    before the read timeout starts; the sockets give up on data left unacknowledged for the read timeout, and
    aiohttp resends a PUT once on a fresh connection: twice the bound at most (``s3_bound``)."""
    s3_env.setenv("DLRMFLOW_S3_RETRIES", "0")
    with frozen_endpoint() as (endpoint, connections):
        s3_env.setenv("AWS_ENDPOINT_URL", endpoint)
        fs, _ = filesystem("s3://store/dlrm")
        took, error = timed(lambda: fs.pipe("store/dlrm/runs/r1/checkpoints/10/__0_0.distcp", bytes(16 << 20)), 20)
    assert str(store_error(error, "s3://store/dlrm")) == NOT_ANSWERING.format(endpoint=endpoint)
    # + 6 s: sending the 16 MiB took 3.5 s beside the suite's four workers (it failed at + 3 once)
    assert 1 <= took < 2 * s3_bound() + 6 and len(connections) <= 2


@pytest.mark.slow   # `dlrmflow run` (the audit hook counts it: it would start torchrun); ~15 s, mostly imports
def test_a_night_on_a_frozen_endpoint_fails_before_any_work(tmp_path):
    """`dlrmflow run` checks the store before Prefect starts: a frozen endpoint fails the night within the
    configured bounds (2 attempts of 1 s), one line, no traceback."""
    with frozen_endpoint() as (endpoint, connections):
        done = dlrmflow("run", "--store", "s3://store/dlrm", env={**S3_ENV, **FAST, "AWS_ENDPOINT_URL": endpoint,
                                                                  "PREFECT_HOME": str(tmp_path / "prefect")})
    assert one_line_error(done).startswith(f"store 's3://store/dlrm' not answering: {endpoint} accepted the "
                                           "connection but sent no reply within the 1 s read timeout. Fix: ")
    assert len(connections) == 2


# --- a read-only store ---------------------------------------------------------------------------------------------


def read_only(folder: Path) -> tuple[str, ...]:
    """The command prefix that runs a command with ``folder`` read-only: a read-only bind mount of it onto itself
    in a user and mount namespace of the command's own (EROFS, also for root), else, for a user that is not root,
    the folder without write permission (EACCES); skips where neither can be had (root without namespaces)."""
    unshare = shutil.which("unshare")
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    if unshare:
        prefix = (unshare, "-Urm", "sh", "-c", mount, str(folder))
        probe = subprocess.run([*prefix, "sh", "-c", f"! touch '{folder}/.probe' 2>/dev/null"], capture_output=True)
        if probe.returncode == 0 and not (folder / ".probe").exists():
            return prefix
        (folder / ".probe").unlink(missing_ok=True)
    if os.geteuid() == 0:
        pytest.skip("root ignores permissions, and no user namespace for a read-only mount here")
    folder.chmod(0o555)
    return ()


def store_check(store: Path, prefix: tuple[str, ...]) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom common.errors import UserError\nfrom common.store import Store\n"
            "try:\n    Store(sys.argv[1]).check()\nexcept UserError as e:\n    print(e)\n    sys.exit(2)\n")
    return subprocess.run([*prefix, sys.executable, "-c", code, str(store)], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


READ_ONLY = r"(is read-only: cannot write {path} \(read-only file system\)\. Fix: choose a writable --store " \
            r"\(or \$DLRMFLOW_STORE\), or remount it read-write\.|is not writable by this user: permission denied " \
            r"on {path}\. Fix: give this user write access to the store's folders \(chmod/chown\), or choose " \
            r"another --store\.)"


def test_a_read_only_models_folder_is_found_by_the_check(tmp_path):
    """The store's root is writable, its models/ is not (where a night's promotion writes, last): the check
    before any work says so."""
    store = tmp_path / "store"
    (store / "models" / "ctr").mkdir(parents=True)
    try:
        done = store_check(store, read_only(store / "models"))
    finally:
        (store / "models").chmod(0o755)
    path = rf"{store}/models/\.dlrmflow-check-[0-9a-f]{{8}}"
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(rf"store '{store}' " + READ_ONLY.format(path=path) + "\n", done.stdout), done.stdout
    assert not list((store / "models").glob(".dlrmflow-check-*")) and not list(store.glob(".dlrmflow-check-*"))


def test_a_write_into_a_read_only_store_is_one_line_at_the_command_line(tmp_path):
    """`dlrmflow gc` on a read-only local store: the write of its store lease fails, the command line names it."""
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    try:
        done = dlrmflow("gc", "--store", str(store), env={}, prefix=read_only(store))
    finally:
        store.chmod(0o755)
    assert re.fullmatch(rf"store '{store}' " + READ_ONLY.format(path=rf"{store}/_store\.lease"),
                        one_line_error(done)), done.stderr


def deny(s3, resource: str) -> None:
    """A bucket policy on ``store`` that denies every PutObject on ``resource`` (moto enforces a bucket's Deny)."""
    s3.put_bucket_policy(Bucket="store", Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": resource}]}))


def test_a_bucket_that_denies_writes_is_found_by_the_check(s3_server):
    """A bucket policy that denies PutObject under the store's models/ only: the check writes its probe there
    too."""
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    Store("s3://store/dlrm").check()
    deny(s3_server, "arn:aws:s3:::store/dlrm/models/*")
    with pytest.raises(UserError) as raised:
        Store("s3://store/dlrm").check()
    assert str(raised.value) == (
        f"store 's3://store/dlrm' is read-only for these credentials: PutObject denied at {endpoint} (Forbidden). "
        "Fix: allow s3:PutObject and s3:DeleteObject on s3://store/dlrm/* (bucket policy or IAM), or use "
        "credentials that may write (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).")
    assert "Contents" not in s3_server.list_objects_v2(Bucket="store")   # the root's probe was removed


def test_a_bucket_that_denies_writes_is_one_line_at_the_command_line(s3_server):
    deny(s3_server, "arn:aws:s3:::store/*")
    done = dlrmflow("gc", "--store", "s3://store/dlrm", env={})
    assert re.fullmatch(r"store 's3://store/dlrm' is read-only for these credentials: PutObject denied at "
                        r"http://127\.0\.0\.1:\d+ \(Forbidden\)\. Fix: allow s3:PutObject and s3:DeleteObject on "
                        r"s3://store/dlrm/\* \(bucket policy or IAM\), or use credentials that may write .*",
                        one_line_error(done)), done.stderr


# --- the flows' boundary -----------------------------------------------------------------------------------------


def test_a_flow_or_task_fails_with_the_store_error_and_it_is_not_retried(monkeypatch, tmp_path):
    """``flows.errors.user_errors`` turns a store error into the run's one-line Failed state (the store named by
    a Store argument or a config's ``store``); ``transient`` retries none of them, still a dropped connection."""
    import logging

    from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
    from prefect.states import Failed

    import flows.errors as errors

    monkeypatch.setattr(errors, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setenv("DLRMFLOW_S3_READ_TIMEOUT_S", "1")

    class Config:
        store = "s3://store/dlrm"

    @errors.user_errors
    def night(config, fail):
        try:
            raise fail
        except Exception as e:
            raise RuntimeError("while writing the champion") from e

    refused = EndpointConnectionError(endpoint_url="http://127.0.0.1:9/store/dlrm/x",
                                      error=ConnectionRefusedError(111, "Connect call failed"))
    state = night(Config(), refused)
    assert state.is_failed() and isinstance(state.data, UserError)
    assert state.message.startswith("store 's3://store/dlrm' unreachable: cannot reach http://127.0.0.1:9 "
                                    "(connection refused). Fix: ")
    frozen = ReadTimeoutError(endpoint_url="http://127.0.0.1:9/store/dlrm/x")
    assert night(Store(str(tmp_path)), frozen).message.startswith(   # a local store: S3 held inputs
        "S3 not answering: http://127.0.0.1:9 accepted the connection but sent no reply within the 1 s read ")
    rofs = OSError(30, "Read-only file system", str(tmp_path / "models" / "ctr" / "champion.json"))
    assert night(Store(str(tmp_path)), rofs).message == (
        f"store '{tmp_path}' is read-only: cannot write {tmp_path}/models/ctr/champion.json (read-only file "
        "system). Fix: choose a writable --store (or $DLRMFLOW_STORE), or remount it read-write.")
    with pytest.raises(RuntimeError):   # anything else is not the store's: raised as it was
        night(Config(), ValueError("a bug"))
    for error, retried in [(frozen, False), (rofs, False), (ConnectionResetError("reset by peer"), True)]:
        assert errors.transient(None, None, Failed(data=error)) is retried


def test_a_permission_error_outside_the_store_is_not_a_store_error(tmp_path):
    denied = PermissionError(13, "Permission denied", "/etc/shadow")
    assert store_error(denied, str(tmp_path)) is None and store_error(denied) is None
    assert store_error(UserError("bad row")) is None and store_error(ValueError("x")) is None
    inside = PermissionError(13, "Permission denied", str(tmp_path / "runs" / "r1" / "config.yaml"))
    assert str(store_error(inside, str(tmp_path))).startswith(f"store '{tmp_path}' is not writable by this user: ")
