"""`serve`'s end when the Prefect server goes away and the Runner gives up on it before the watchdog does (its
cancellation observer exceeds its error threshold, the Runner exits and its shutdown's call fails): a UserError
naming the server, not a traceback (found by the served e2e test on a clean clone). In process, with the Runner's
start replaced by the failure it ended with there."""

from __future__ import annotations

import signal

import httpx
import pytest

from common.errors import UserError
from flows import serving


class _NoWatchdog:
    gone = False

    def __init__(self, runner, api):
        pass

    def start(self):
        pass


@pytest.fixture
def runner_ending_with(monkeypatch):
    def install(error: BaseException):
        class Runner(serving._Runner):
            def add_deployment(self, deployment):
                pass

            async def start(self, *args, **kwargs):
                raise error

        monkeypatch.setattr(serving, "_Runner", Runner)
        monkeypatch.setattr(serving, "_Watchdog", _NoWatchdog)
        monkeypatch.setattr(signal, "signal", lambda *a: None)   # the test process keeps its own handlers
    return install


def _failed_to_start() -> RuntimeError:
    """What Prefect's Runner raises when the server goes before its events websocket connects."""
    from websockets.exceptions import InvalidMessage

    try:
        try:
            raise InvalidMessage("did not receive a valid HTTP response")
        except InvalidMessage as cause:
            raise RuntimeError("Runner failed to start: event_emitter — did not receive a valid HTTP response") \
                from cause
    except RuntimeError as error:
        return error


@pytest.mark.parametrize("error", [httpx.ConnectError("All connection attempts failed"),
                                   ExceptionGroup("runner", [httpx.ConnectError("refused"), RuntimeError("x")]),
                                   _failed_to_start()])
def test_a_server_gone_under_the_runner_ends_serve_with_a_user_error(runner_ending_with, error):
    runner_ending_with(error)
    with pytest.raises(UserError, match="has not answered .*serve stopped. Fix: start the server again"):
        serving.serve_until_stopped(["a deployment"])


def test_other_runner_errors_are_not_taken_for_a_server_gone(runner_ending_with):
    runner_ending_with(RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        serving.serve_until_stopped(["a deployment"])


@pytest.fixture
def quick_watchdog(monkeypatch):
    """The watchdog's limits scaled down (checks every 0.1 s; gone after 0.5 s; hung after 1.5 s)."""
    monkeypatch.setattr(serving, "CHECK_EVERY_S", 0.1)
    monkeypatch.setattr(serving, "GONE_AFTER_S", 0.5)
    monkeypatch.setattr(serving, "HUNG_AFTER_S", 1.5)
    return lambda api: serving._Watchdog(None, api)


def test_a_server_that_takes_no_connection_is_gone_one_that_never_answers_is_hung(quick_watchdog):
    """Real sockets: a closed port is gone after GONE_AFTER_S; a server that takes connections and never answers
    (as a stopped or stuck one) is waited for until HUNG_AFTER_S (a slow server on a loaded machine is not gone)."""
    import time

    from helpers.frozen import frozen_endpoint
    from helpers.processes import free_port

    def silent_for(api: str) -> tuple[float, float]:
        start = time.monotonic()
        return quick_watchdog(api).wait_until_silent(), time.monotonic() - start

    silent, took = silent_for(f"http://127.0.0.1:{free_port()}/api")   # nothing listens
    assert silent == 0.5 and 0.5 <= took < 1.5
    with frozen_endpoint() as (url, _):
        silent, took = silent_for(f"{url}/api")
    assert silent == 1.5 and 1.5 <= took < 2.5


def test_a_slow_server_that_answers_keeps_serve_going(quick_watchdog):
    """A server whose health check answers after the check's timeout sometimes, and in time at other times, is
    neither gone nor hung."""
    import http.server
    import threading
    import time

    calls = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):   # every other answer later than the check's 0.1 s timeout
            calls.append(1)
            time.sleep(0.3 if len(calls) % 2 else 0)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"true")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dog = quick_watchdog(f"http://127.0.0.1:{server.server_address[1]}/api")
        done = []
        threading.Thread(target=lambda: done.append(dog.wait_until_silent()), daemon=True).start()
        time.sleep(3)
        assert not done and len(calls) >= 5
    finally:
        server.shutdown()
