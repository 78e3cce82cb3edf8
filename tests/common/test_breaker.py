"""The breaker per S3 endpoint (common/breaker.py): once a whole call to an endpoint failed because it does not
answer (a frozen endpoint: it accepts connections and never replies), the process's next calls to it fail at once
with the store's one line, for the cooldown (DLRMFLOW_S3_FAIL_FAST_S, default the bound); then one call tries it
again; an answer (any: 404 and 403 included) closes it; a call's own retries do not open it. Real endpoints: a
socket server that never answers, and moto's S3 server behind a proxy that freezes and thaws it."""

from __future__ import annotations

import pickle
import re
import threading
import time

import pytest

from common.errors import UserError
from common.s3 import s3_bound, s3_fail_fast_s
from common.store import Store, filesystem
from common.store_errors import store_error
from helpers.frozen import frozen_endpoint, frozen_proxy, s3_settings, timed

FAST = {"DLRMFLOW_S3_CONNECT_TIMEOUT_S": "1", "DLRMFLOW_S3_READ_TIMEOUT_S": "1", "DLRMFLOW_S3_RETRIES": "0"}
STORE = "s3://store/dlrm"
NOT_ANSWERING = ("store 's3://store/dlrm' not answering: {endpoint} accepted the connection but sent no reply within "
                 "the 1 s read timeout{fast}. Fix: check the S3 service at AWS_ENDPOINT_URL (up but hung or "
                 "overloaded); on a slow link raise DLRMFLOW_S3_READ_TIMEOUT_S (1) or DLRMFLOW_S3_RETRIES (0).")
FAST_SAID = (r" \(failed at once: a call to {endpoint} failed (\d+\.\d) s ago, so this process's calls to it fail at "
             r"once for (\d+\.\d) s more; DLRMFLOW_S3_FAIL_FAST_S: {cooldown:g} s\)")


@pytest.fixture
def fast_s3(monkeypatch):
    """Credentials, short timeouts (one attempt of 1 s: the bound is 1 s) and no cached filesystems."""
    yield from s3_settings(monkeypatch, FAST)


def fast_line(error: BaseException, endpoint: str, cooldown: float) -> tuple[float, float]:
    """(s since the failure, s left) that the one line of a call failed at once says (``error``: the call's, or the
    UserError made of it); fails unless it is the store's line with them."""
    said = str(error if isinstance(error, UserError) else store_error(error, STORE))
    pattern = re.escape(NOT_ANSWERING.format(endpoint=endpoint, fast="@")).replace(
        "@", FAST_SAID.format(endpoint=re.escape(endpoint), cooldown=cooldown))
    found = re.fullmatch(pattern, said)
    assert found, said
    return float(found.group(1)), float(found.group(2))


def test_the_cooldown_is_the_bound_unless_set(monkeypatch):
    for name in (*FAST, "DLRMFLOW_S3_FAIL_FAST_S"):
        monkeypatch.delenv(name, raising=False)
    assert s3_fail_fast_s() == s3_bound() == 93.0
    monkeypatch.setenv("DLRMFLOW_S3_FAIL_FAST_S", "4.5")
    assert s3_fail_fast_s() == 4.5
    monkeypatch.setenv("DLRMFLOW_S3_FAIL_FAST_S", "0")
    with pytest.raises(UserError, match=r"^DLRMFLOW_S3_FAIL_FAST_S='0' is not a number of seconds above 0\. Fix: "):
        filesystem(f"{STORE}/x")   # checked with the other settings, before any call


def test_after_a_call_that_met_a_frozen_endpoint_the_next_fail_at_once(fast_s3):
    fast_s3.setenv("DLRMFLOW_S3_FAIL_FAST_S", "20")
    with frozen_endpoint() as (endpoint, connections):
        fast_s3.setenv("AWS_ENDPOINT_URL", endpoint)
        fs, _ = filesystem(STORE)
        fs.connect()   # its client made (no request): the time below is the call's
        first_took, first = timed(lambda: fs.cat_file("store/dlrm/runs/r/metrics.jsonl"), 10)
        took, error = timed(lambda: fs.pipe("store/dlrm/runs/r/run.lease", b"{}"), 10)   # another call, a write
        _, check = timed(lambda: Store(STORE).check(), 10)   # a filesystem and client of its own: the same breaker
    assert str(store_error(first, STORE)) == NOT_ANSWERING.format(endpoint=endpoint, fast="")
    assert 1 <= first_took < 1 + 2, first_took   # its bound: one attempt of 1 s
    ago, left = fast_line(error, endpoint, 20)
    assert took < 0.5 and ago < 5 and 15 < left < 20 and ago + left == pytest.approx(20, abs=0.15), (took, ago, left)
    fast_line(check, endpoint, 20)
    assert len(connections) == 1   # the calls after the first never reached the endpoint
    again = pickle.loads(pickle.dumps(error))   # as DCP gathers a rank's error: the same line
    assert str(store_error(again, STORE)) == str(store_error(error, STORE))


def test_after_the_cooldown_one_call_tries_the_endpoint_while_the_others_fail_at_once(fast_s3):
    fast_s3.setenv("DLRMFLOW_S3_FAIL_FAST_S", "1.5")
    with frozen_endpoint() as (endpoint, connections):
        fast_s3.setenv("AWS_ENDPOINT_URL", endpoint)
        fs, _ = filesystem(STORE)
        read = lambda: fs.cat_file("store/dlrm/x")   # noqa: E731
        timed(read, 10)
        time.sleep(1.6)   # the cooldown is over
        trial: list = []
        thread = threading.Thread(target=lambda: trial.append(timed(read, 10)))
        thread.start()
        time.sleep(0.4)   # the trial is waiting on the endpoint
        during_took, during = timed(read, 10)
        thread.join()
        after_took, after = timed(read, 10)   # the trial failed: open again
    [(trial_took, trial_error)] = trial
    assert trial_took >= 1 and str(store_error(trial_error, STORE)) == NOT_ANSWERING.format(endpoint=endpoint, fast="")
    assert during_took < 0.5 and after_took < 0.5, (during_took, after_took)
    fast_line(during, endpoint, 1.5)
    assert fast_line(after, endpoint, 1.5)[0] < 0.5   # counted from the trial's failure
    assert len(connections) == 2   # the first call and the trial


def test_an_endpoint_that_answers_again_is_used_again_after_one_answered_call(s3_server, moto_endpoint, fast_s3):
    fast_s3.setenv("DLRMFLOW_S3_FAIL_FAST_S", "1")
    with frozen_proxy(moto_endpoint) as (endpoint, proxy):
        fast_s3.setenv("AWS_ENDPOINT_URL", endpoint)
        fs, _ = filesystem(STORE)
        fs.pipe("store/dlrm/runs/r/config.yaml", b"x: 1")
        proxy.frozen = True
        took, error = timed(lambda: fs.cat_file("store/dlrm/runs/r/config.yaml"), 10)
        assert 1 <= took < 3 and str(store_error(error, STORE)) == NOT_ANSWERING.format(endpoint=endpoint, fast="")
        proxy.frozen = False   # it answers again; this process does not know yet
        _, error = timed(lambda: fs.cat_file("store/dlrm/runs/r/config.yaml"), 10)
        fast_line(error, endpoint, 1)
        time.sleep(1.1)
        assert fs.cat_file("store/dlrm/runs/r/config.yaml") == b"x: 1"   # the trial, answered: closed
        start = time.monotonic()
        with pytest.raises(FileNotFoundError):   # an answer too (404): it opens nothing
            fs.cat_file("store/dlrm/runs/r/none.yaml")
        assert fs.cat_file("store/dlrm/runs/r/config.yaml") == b"x: 1"
        assert time.monotonic() - start < 1


def test_a_call_whose_retry_is_answered_opens_nothing(s3_server, moto_endpoint, fast_s3):
    fast_s3.setenv("DLRMFLOW_S3_RETRIES", "1")
    fast_s3.setenv("DLRMFLOW_S3_FAIL_FAST_S", "30")
    with frozen_proxy(moto_endpoint) as (endpoint, proxy):
        fast_s3.setenv("AWS_ENDPOINT_URL", endpoint)
        s3_server.put_object(Bucket="store", Key="dlrm/runs/r/config.yaml", Body=b"x: 1")
        fs, _ = filesystem(STORE)
        proxy.swallow.set()   # the first attempt's request is never answered; the retry's is
        start = time.monotonic()
        assert fs.cat_file("store/dlrm/runs/r/config.yaml") == b"x: 1"
        took = time.monotonic() - start
        assert fs.cat_file("store/dlrm/runs/r/config.yaml") == b"x: 1"   # not failed at once: nothing opened
    assert proxy.swallowed.is_set() and took >= 1, took   # its first attempt met no answer within the 1 s timeout


def test_access_denied_opens_nothing(s3_server, fast_s3):
    import json

    fast_s3.setenv("DLRMFLOW_S3_FAIL_FAST_S", "30")
    s3_server.put_bucket_policy(Bucket="store", Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::store/*"}]}))
    fs, _ = filesystem(STORE)
    with pytest.raises(PermissionError) as denied:
        fs.pipe("store/dlrm/runs/r/config.yaml", b"x: 1")
    assert str(store_error(denied.value, STORE)).startswith(f"store '{STORE}' is read-only for these credentials")
    with pytest.raises(FileNotFoundError):   # tried, and answered: not failed at once
        fs.cat_file("store/dlrm/runs/r/config.yaml")
