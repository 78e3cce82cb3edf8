"""Running served deployments until stopped: Ctrl-C, SIGINT or SIGTERM (also without a terminal) stop
``serve`` cleanly (Prefect's Runner pauses the deployments), and a Prefect server that stops answering
ends it with an error instead of retrying forever."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import httpx
from prefect.runner import Runner
from prefect.settings import PREFECT_API_URL
from websockets.exceptions import WebSocketException

from common.errors import UserError

CHECK_EVERY_S = 5.0
GONE_AFTER_S = 15.0   # no connection for this long: the server is gone
HUNG_AFTER_S = 120.0  # connected, but no answer for this long: hung (a busy server, on a loaded node, is slow)
EXIT_GRACE_S = 20.0   # then at most this long to shut down before exiting anyway


class _Runner(Runner):
    def handle_sigterm(self, *args) -> None:
        # Prefect's handler stops the runner from inside the event loop, which does not stop it when no
        # terminal is attached; SIGINT's path (asyncio cancels the main task, the Runner exits) always does
        signal.raise_signal(signal.SIGINT)


class _Watchdog(threading.Thread):
    """Interrupts the main thread when the Prefect server cannot be reached for ``GONE_AFTER_S``, or takes the
    connection but has not answered for ``HUNG_AFTER_S`` (a server slowed by a loaded machine answers late: a
    suite's session server once missed three 5 s health checks in a row, and serve had stopped)."""

    def __init__(self, runner: Runner, api: str):
        super().__init__(name="dlrmflow-server-watchdog", daemon=True)
        self.runner, self.api, self.gone, self.silent_s = runner, api.rstrip("/"), False, GONE_AFTER_S

    def run(self) -> None:
        self.silent_s = self.wait_until_silent()
        self.gone, self.runner.pause_on_shutdown = True, False  # nothing to pause on a server that is gone
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(EXIT_GRACE_S)
        print(f"error: {self.message()}", flush=True)
        os._exit(2)  # the Runner's shutdown hangs on the missing server

    def wait_until_silent(self) -> float:
        """Check the server's health every ``CHECK_EVERY_S`` until it is gone or hung; the seconds it was silent
        (``GONE_AFTER_S`` or ``HUNG_AFTER_S``)."""
        last_answer = last_contact = time.monotonic()
        while True:
            now = time.monotonic()
            if now - last_contact >= GONE_AFTER_S:
                return GONE_AFTER_S
            if now - last_answer >= HUNG_AFTER_S:
                return HUNG_AFTER_S
            time.sleep(CHECK_EVERY_S)
            try:
                httpx.get(f"{self.api}/health", timeout=CHECK_EVERY_S)  # any answer counts (auth, Cloud URLs)
                last_answer = last_contact = time.monotonic()
            except (httpx.ConnectError, httpx.ConnectTimeout):
                pass   # nothing takes the connection
            except httpx.TransportError:
                last_contact = time.monotonic()   # connected; the answer is late or cut

    def message(self) -> str:
        return _gone(self.api, f"for {self.silent_s:.0f} s")


def _gone(api: str, how: str) -> str:
    return f"the Prefect server at {api} has not answered {how}; serve stopped. Fix: start the server again " \
        "(prefect server start), then serve."


_CONNECTION_ERRORS = (httpx.TransportError, ConnectionError, WebSocketException)


def _unreachable(error: BaseException | None) -> bool:
    """Whether ``error`` is, holds (an exception group) or was caused by a failed connection to the server (HTTP or
    the events websocket: Prefect's Runner raises "Runner failed to start: event_emitter" from one)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, BaseExceptionGroup):
            if error.subgroup(lambda e: isinstance(e, _CONNECTION_ERRORS)) is not None:
                return True
        elif isinstance(error, _CONNECTION_ERRORS):
            return True
        error = error.__cause__ or error.__context__
    return False


def serve_until_stopped(deployments: list) -> None:
    """Register ``deployments`` and run their flow runs until SIGINT/SIGTERM; UserError when the server is gone."""
    runner = _Runner(pause_on_shutdown=True)
    try:
        for deployment in deployments:
            runner.add_deployment(deployment)
    except httpx.TransportError as e:   # the server went away while the deployments were registered
        raise UserError(_gone(PREFECT_API_URL.value(), f"while the deployments were registered "
                              f"({type(e).__name__})")) from None
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`cmd &`)
    watchdog = _Watchdog(runner, PREFECT_API_URL.value())
    watchdog.start()
    try:
        asyncio.run(runner.start())
    except KeyboardInterrupt:
        pass
    except Exception as e:   # the Runner's own loops gave up on the server before the watchdog did
        if not _unreachable(e):
            raise
        raise UserError(_gone(PREFECT_API_URL.value(), f"({type(e).__name__} while serving)")) from None
    if watchdog.gone:
        raise UserError(watchdog.message())
