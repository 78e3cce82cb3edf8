"""Leases (common.lease): heartbeat renewal keeps a long holder's lease, a stale one is taken over, a lost one
is reported by check(), holder/wait_released, the store lease. Real files, threads and a subprocess."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import fsspec
import pytest

from common import lease, process
from helpers.frozen import frozen_proxy, timed
from helpers.paths import REPO
from helpers.processes import until


def test_a_heartbeat_keeps_a_lease_past_stale_s(tmp_path):
    uri = str(tmp_path / "job.lease")
    # stale_s 1.2 s against renewals every 0.1 s: a loaded 2-core machine (the suite's three workers) once kept the
    # renewing thread off the CPU for the 0.5 s that stale_s 0.6 had left
    with lease.lease(uri, "long job", "job lease", "the job", timeout_s=0, stale_s=1.2, heartbeat_s=0.1) as held:
        first = json.loads((tmp_path / "job.lease").read_text())
        time.sleep(2.5)   # well past stale_s: without renewals another owner would take it over
        with pytest.raises(lease.LeaseHeld, match="held by long job"):
            lease.acquire(uri, "intruder", "job lease", "the job", timeout_s=0.3, stale_s=5)
        held.check()
        renewed = json.loads((tmp_path / "job.lease").read_text())
        assert renewed["token"] == first["token"] and renewed["acquired_at"] == first["acquired_at"]
        assert renewed["expires_at"] > first["expires_at"]
    assert not (tmp_path / "job.lease").exists() and not list(tmp_path.iterdir())   # released, no leftovers


def test_a_stale_lease_is_taken_over_and_the_old_holder_learns_it(tmp_path):
    uri, said = str(tmp_path / "job.lease"), []
    crashed = lease.acquire(uri, "crashed job", "job lease", "the job", timeout_s=0, stale_s=0.3)   # no heartbeat
    time.sleep(0.5)
    with lease.lease(uri, "next job", "job lease", "the job", timeout_s=5, stale_s=30, say=said.append) as held:
        assert any("took over the job lease of the job from crashed job" in s for s in said)
        with pytest.raises(lease.LockLost, match="now held by next job"):
            crashed.check()
        with pytest.raises(lease.LockLost):
            crashed.renew()
        crashed.release()   # leaves the new holder's lease alone
        held.check()
        assert lease.holder(uri)["owner"] == "next job"
    assert lease.holder(uri) is None


def test_a_killed_local_process_lease_is_taken_over_at_once(tmp_path):
    """A holder that died without releasing (a subprocess exiting inside the block) on this host: its lease is
    taken over at once, not after stale_s."""
    uri, said = str(tmp_path / "job.lease"), []
    code = ("import os; from common import lease; "
            f"h = lease.acquire({uri!r}, 'killed', 'job lease', 'the job', timeout_s=0, stale_s=3600); os._exit(0)")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    assert json.loads((tmp_path / "job.lease").read_text())["owner"] == "killed"
    assert lease.holder(uri) is None   # not live: its process is gone
    with lease.lease(uri, "me", "job lease", "the job", timeout_s=0, stale_s=30, say=said.append) as held:
        held.check()
    assert any("took over" in s and "killed" in s for s in said)
    # the same while the dead holder is a zombie its parent has not reaped yet (a killed Dask worker of a test)
    uri = str(tmp_path / "zombie.lease")
    code = code.replace(repr(str(tmp_path / "job.lease")), repr(uri))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    until(lambda: Path(uri).exists() and Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
          30, "the holder to exit")
    with lease.lease(uri, "me", "job lease", "the job", timeout_s=0, stale_s=30):
        pass
    proc.wait()


# a holder that records a job of its own process group (as the local launcher does) with a process in it: a sleep
KILLED_WITH_A_JOB = """
import os, socket, subprocess, sys
from common import lease, process
held = lease.acquire(sys.argv[1], 'a killed run', 'run lease', 'the run', timeout_s=0, stale_s=3600)
pgid = os.getpgid(0)
held.record({"job": {"kind": "local", "host": socket.gethostname(), "pgid": pgid, "what": f"process group {pgid}"}})
print(subprocess.Popen(["sleep", "600"]).pid, flush=True)
os.read(0, 1)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (/proc)")
def test_a_lease_whose_holder_and_job_are_gone_from_this_host_is_taken_over_at_once(tmp_path):
    """Issue 46: a real holder (a session of its own) records a job of its process group, then is SIGKILLed. While
    it lives its lease is kept; once it is gone but a process of its group lives, a taker that cannot stop jobs (gc)
    still refuses; once the group is empty too, it takes the lease over at once (stale_s is an hour). A record whose
    pid a later process reuses (another start time) is gone too; one of another boot or pid namespace is not."""
    uri, said = str(tmp_path / "run.lease"), []
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    holder = subprocess.Popen([sys.executable, "-c", KILLED_WITH_A_JOB, uri], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        sleep = int(holder.stdout.readline())
        record = lease.holder(uri)
        assert record["pid"] == holder.pid and record["job"]["pgid"] == holder.pid   # alive: kept
        assert record["started"] == process.started(holder.pid) and record["pid_space"] == process.pid_space()
        with pytest.raises(lease.LeaseHeld, match="is held by a killed run"):
            lease.acquire(uri, "gc", "run lease", "the run", timeout_s=0, stale_s=30)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        assert lease.holder(uri) is None   # its holder is gone...
        with pytest.raises(lease.LeaseHeld, match=r"but its job \(process group \d+\) may still be running"):
            lease.acquire(uri, "gc", "run lease", "the run", timeout_s=0, stale_s=30)   # ...not its job
        os.kill(sleep, signal.SIGKILL)
        until(lambda: not process.live_processes(group=holder.pid), 10, "the job's end")
        text = (tmp_path / "run.lease").read_text()
        with lease.lease(uri, "gc", "run lease", "the run", timeout_s=0, stale_s=30, say=said.append):
            pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGKILL)
    assert said == [f"took over the run lease of the run from {lease._describe(json.loads(text))} (expired, or its "
                    f"process is gone: a crashed run); its job had ended (no process left in process group "
                    f"{holder.pid} on {socket.gethostname()})"]

    with subprocess.Popen(["sleep", "600"]) as other:   # a live process: one that reuses the holder's pid, say
        for pid, started, space, live in ((other.pid, process.started(other.pid), None, True),
                                          (other.pid, 1, None, False),   # its pid reused by a later process
                                          (holder.pid, 1, "another-boot pid:[1]", True)):   # not this host's pids
            record = {**json.loads(text), "pid": pid, "started": started}
            record.pop("job")
            if space:
                record["pid_space"] = space
            (tmp_path / "run.lease").write_text(json.dumps(record))
            assert (lease.holder(uri) is not None) == live, (pid, started, space)
        other.kill()


def test_wait_released_says_what_for_and_returns_when_free(tmp_path):
    uri, said = str(tmp_path / "job.lease"), []
    held = lease.acquire(uri, "first", "job lease", "dataset d", timeout_s=0, stale_s=30)
    threading.Timer(0.5, held.release).start()
    lease.wait_released(uri, "job lease", "dataset d", timeout_s=10, poll_s=0.05, say=said.append)
    assert said == [said[0]] and "waiting for the job lease of dataset d, held by first" in said[0]
    assert lease.holder(uri) is None
    with lease.lease(uri, "other", "job lease", "dataset d", timeout_s=0, stale_s=30):
        with pytest.raises(lease.LeaseHeld, match="held by other"):
            lease.wait_released(uri, "job lease", "dataset d", timeout_s=0.2, poll_s=0.05)


def test_store_lease_excludes_a_second_removal(tmp_path):
    with lease.store_lease(str(tmp_path), "prune of night 1", "prune"):
        assert (tmp_path / "_store.lease").exists()
        with pytest.raises(lease.LeaseHeld, match="prune of night 1"):
            with lease.store_lease(str(tmp_path), "prune of night 2", "prune", timeout_s=0.2):
                pass
    assert not (tmp_path / "_store.lease").exists()


def test_extra_fields_are_recorded_and_kept_by_renewal(tmp_path):
    uri = str(tmp_path / "job.lease")
    with lease.lease(uri, "me", "job lease", "x", timeout_s=0, stale_s=30, extra={"uses": ["a", "b"]}) as held:
        held.renew()
        assert lease.holder(uri)["uses"] == ["a", "b"]


def test_s3_lock_uses_conditional_writes(s3_server):
    """moto (like AWS S3) refuses a second If-None-Match create and an If-Match put on a changed object."""
    fs, path = fsspec.core.url_to_fs("s3://store/x/lock", endpoint_url=s3_server.meta.endpoint_url)
    lock = lease._S3LockObject(fs, path)
    assert lock.create(b"a") and not lock.create(b"b")
    data, etag, _ = lock.read()
    assert data == b"a"
    assert lock.replace(etag, b"c") and not lock.replace(etag, b"d")
    assert lock.read()[0] == b"c"
    assert not lock.replace(etag, None) and lock.read()[0] == b"c"  # not the version we saw: not deleted
    assert lock.replace(lock.read()[1], None) and lock.read() is None


def test_s3_lease_renews_is_taken_over_when_stale_and_released(s3_server):
    uri, said = "s3://store/_work/key.lease", []
    with lease.lease(uri, "long job", "job lease", "the job", timeout_s=0, stale_s=60, heartbeat_s=0.2) as held:
        first = lease.holder(uri)["expires_at"]
        time.sleep(1.2)   # a few renewals (If-Match PUTs)
        held.check()
        assert lease.holder(uri)["expires_at"] > first and lease.holder(uri)["owner"] == "long job"
        with pytest.raises(lease.LeaseHeld, match="held by long job"):
            lease.acquire(uri, "intruder", "job lease", "the job", timeout_s=0.3, stale_s=60)
    assert lease.holder(uri) is None
    crashed = lease.acquire(uri, "crashed job", "job lease", "the job", timeout_s=0, stale_s=0.3)
    time.sleep(0.5)
    with lease.lease(uri, "next job", "job lease", "the job", timeout_s=5, stale_s=60, say=said.append) as held:
        assert any("took over" in s and "crashed job" in s for s in said)
        with pytest.raises(lease.LockLost):
            crashed.renew()
        held.check()


def test_overlapping_rewrites_keep_the_lease_and_every_field(tmp_path):
    """record() from several threads while the heartbeat renews every 10 ms: no lock is held across the store's
    calls, so the rewrites overlap; none takes another of its own for a take-over, and the record ends with each
    thread's last fields."""
    uri = str(tmp_path / "job.lease")
    with lease.lease(uri, "me", "job lease", "the job", timeout_s=0, stale_s=30, heartbeat_s=0.01) as held:
        def records(i):
            for n in range(40):
                held.record({f"field{i}": [i, n], "gone": None if n % 2 else n})

        threads = [threading.Thread(target=records, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        held.check()
        held.record({"gone": None})
        record = lease.holder(uri)
        assert held.lost is None and record["owner"] == "me"
        assert {k: v for k, v in record.items() if k.startswith("field")} == {f"field{i}": [i, 39] for i in range(4)}
        assert "gone" not in record
    assert lease.holder(uri) is None and not list(tmp_path.iterdir())


# --- a frozen S3 endpoint ------------------------------------------------------------------------------------------

FAST_S3 = {"DLRMFLOW_S3_CONNECT_TIMEOUT_S": "1", "DLRMFLOW_S3_RETRIES": "0"}
JOB = {"kind": "slurm", "what": "Slurm job 7"}


def test_a_lease_on_a_frozen_endpoint_fails_within_the_bound(s3_server, monkeypatch):
    """The store's endpoint freezes while a run holds its lease: recording the job (a conditional PUT) fails after
    one attempt of the read timeout with the store's one line, the heartbeat says the same (at once in the
    cooldown of the process's breaker, common.breaker) and goes on, and once the endpoint is back the next renewal
    writes the record as it stands (the job too)."""
    from common.s3 import s3_bound
    from common.store_errors import store_error

    uri, said = "s3://store/runs/r1/_run.lease", []
    with frozen_proxy(os.environ["AWS_ENDPOINT_URL"]) as (endpoint, proxy):
        for key, value in {**FAST_S3, "DLRMFLOW_S3_READ_TIMEOUT_S": "1", "AWS_ENDPOINT_URL": endpoint}.items():
            monkeypatch.setenv(key, value)
        held = lease.acquire(uri, "run r1", "run lease", "runs/r1", timeout_s=0, stale_s=60, say=said.append,
                             heartbeat_s=0.2)
        proxy.frozen = True
        took, error = timed(lambda: held.record({"job": JOB}), 10)
        assert str(store_error(error, "s3://store")) == (
            f"store 's3://store' not answering: {endpoint} accepted the connection but sent no reply within the 1 s "
            "read timeout. Fix: check the S3 service at AWS_ENDPOINT_URL (up but hung or overloaded); on a slow link "
            "raise DLRMFLOW_S3_READ_TIMEOUT_S (1) or DLRMFLOW_S3_RETRIES (0).")
        assert 1 <= took < s3_bound() + 2
        until(lambda: [s for s in said if "could not renew" in s], 10, "the heartbeat's failed renewal")
        assert f"could not renew the run lease of runs/r1 (S3 not answering: {endpoint} accepted the connection " \
               "but sent no reply within the 1 s read timeout" in said[0] and said[0].endswith("; retrying")
        assert any("(failed at once: a call to " in s for s in said)   # renewals in the breaker's cooldown
        proxy.frozen = False

        def job() -> dict | None:   # None while the breaker still fails this process's calls at once
            try:
                return (lease.holder(uri) or {}).get("job")
            except OSError:
                return None

        until(lambda: job() == JOB, 10, "the next renewal")
        held.check()
        held.release()
        # read through the proxy while it is there ($AWS_ENDPOINT_URL still names it: after it, the read was
        # refused whenever no connection of the pool was left open)
        assert held.lost is None and lease.holder(uri) is None


def test_record_is_not_blocked_by_a_hung_heartbeat(s3_server, monkeypatch):
    """The heartbeat's request is swallowed (that connection never answers; the endpoint serves the others): the
    flow's own record() of its job is written at once, not after the heartbeat's call gives up (it held the
    lease's lock across the store call: a flow waited on it for 24 min)."""
    uri, said = "s3://store/runs/r1/_run.lease", []
    with frozen_proxy(os.environ["AWS_ENDPOINT_URL"]) as (endpoint, proxy):
        for key, value in {**FAST_S3, "DLRMFLOW_S3_READ_TIMEOUT_S": "3", "AWS_ENDPOINT_URL": endpoint}.items():
            monkeypatch.setenv(key, value)
        held = lease.acquire(uri, "run r1", "run lease", "runs/r1", timeout_s=0, stale_s=60, say=said.append,
                             heartbeat_s=0.2)
        first = lease.holder(uri)["expires_at"]
        proxy.swallow.set()
        assert proxy.swallowed.wait(5)   # a beat's request: it waits for the 3 s read timeout
        took, error = timed(lambda: held.record({"job": JOB}), 10)
        assert error is None and took < 1.5 and not said   # the heartbeat still waits
        assert lease.holder(uri)["job"] == JOB
        until(lambda: said, 10, "the hung renewal to give up")
        assert "could not renew the run lease of runs/r1 (S3 not answering: " in said[0]
        until(lambda: lease.holder(uri)["expires_at"] > first and len(said) == 1, 10, "a later renewal")
        held.check()
        assert lease.holder(uri)["job"] == JOB
        held.release()
        # read while the proxy is up ($AWS_ENDPOINT_URL names it until the test ends)
        assert held.lost is None and lease.holder(uri) is None
