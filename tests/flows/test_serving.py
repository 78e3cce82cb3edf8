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
