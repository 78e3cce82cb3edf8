"""A breaker per S3 endpoint of the store, in each process: once a whole call to an endpoint (after its client's
retries) has failed because the endpoint does not answer or cannot be reached (a read or connect timeout, a
connection refused, closed or to a host that is not found), the process's next calls to that endpoint fail at once
(``FailedFast``) for a cooldown (``common.s3.s3_fail_fast_s``), so that a night on a frozen store waits the
store's bound (``common.s3.s3_bound``) about once per process, not once per call. After the cooldown one call
tries the endpoint for real (half-open; the others still fail at once until it ends, or until another cooldown has
passed); a call that gets an answer, any answer (access denied and 404 included), closes it. A call's own retries
stay botocore's: an attempt that timed out followed by one that was answered opens nothing; nor does a call whose
request alone was lost, the endpoint having answered another call since it started.

The hook is botocore's events of a whole call (``before-call``: fail fast; ``after-call``: answered;
``after-call-error``: failed, after the retries), registered by ``install`` with botocore's built-in handlers, so
that every client made afterwards in the process (s3fs's, in every filesystem of the store and in torch's DCP
readers and writers) has them; they act only on the clients that ``install``'s ``ours`` picks (the store's:
``common.s3.storage_options`` names its transport in their config). Light: botocore is imported by ``install``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlparse

_CONTEXT_KEY = "dlrmflow_breaker"   # where before-call leaves (endpoint, start) for the events after the call


class FailedFast(Exception):
    """The error of a call that was not tried: a call to its endpoint failed moments ago. Each is also an instance
    of the botocore error that opened the breaker (``FailedFast.of(kind)``: a ``ReadTimeoutError``...), built from
    its arguments, so that callers take it as they take that error (and ``common.store_errors.store_error`` says
    the store's line, adding ``fast()``)."""

    kind: type = Exception   # the botocore error class it stands for
    endpoint = ""            # scheme://host:port
    ago = left = cooldown = 0.0   # s since the failure that opened it; s until a call tries again; the cooldown

    def fast(self) -> str:
        """What it says besides the error it stands for."""
        return (f"failed at once: a call to {self.endpoint} failed {self.ago:.1f} s ago, so this process's calls "
                f"to it fail at once for {self.left:.1f} s more")

    def __str__(self) -> str:
        return f"{super().__str__()} ({self.fast()})"

    def __reduce__(self):   # pickled with what it says (DCP gathers a rank's errors so)
        return _rebuild, (self.kind.__module__, self.kind.__qualname__, self.kwargs, self.endpoint, self.ago,
                          self.left, self.cooldown)

    @staticmethod
    def of(kind: type) -> type:
        """The class of the fast errors that stand for ``kind`` (a subclass of both), one per process."""
        with _LOCK:
            if kind not in _CLASSES:
                _CLASSES[kind] = type(f"FailedFast{kind.__name__}", (FailedFast, kind), {"kind": kind})
            return _CLASSES[kind]


def _rebuild(module: str, qualname: str, kwargs: dict, endpoint: str, ago: float, left: float,
             cooldown: float) -> FailedFast:
    import importlib

    kind = importlib.import_module(module)
    for part in qualname.split("."):
        kind = getattr(kind, part)
    error = FailedFast.of(kind)(**kwargs)
    error.endpoint, error.ago, error.left, error.cooldown = endpoint, ago, left, cooldown
    return error


_LOCK = threading.Lock()
_CLASSES: dict[type, type] = {}


@dataclass
class _Open:
    kind: type        # the botocore error class of the failure
    kwargs: dict      # its arguments (the endpoint URL, the error beneath: the reason it says)
    failed_at: float  # time.monotonic() of the failure
    until: float      # calls fail at once until then; the first after it tries
    cooldown: float


class Breaker:
    """The open endpoints of this process (scheme://host:port -> what failed); thread-safe. ``cooldown()``: the
    seconds calls fail at once after a failure, read at each failure."""

    def __init__(self, cooldown: Callable[[], float]):
        self.cooldown = cooldown
        self._lock = threading.Lock()
        self._open: dict[str, _Open] = {}
        self._answered: dict[str, float] = {}   # endpoint -> time.monotonic() of its latest answer

    def before(self, endpoint: str) -> None:
        """Raise the fast error while ``endpoint`` is open; after the cooldown let this call try (the others
        still fail at once, for another cooldown, unless it ends first)."""
        with self._lock:
            state = self._open.get(endpoint)
            if state is None:
                return
            now = time.monotonic()
            if now >= state.until:   # half-open: this call tries the endpoint
                state.until = now + state.cooldown
                return
            ago, left = now - state.failed_at, state.until - now
        error = FailedFast.of(state.kind)(**state.kwargs)
        error.endpoint, error.ago, error.left, error.cooldown = endpoint, ago, left, state.cooldown
        raise error

    def failed(self, endpoint: str, error: BaseException, started: float) -> None:
        """A whole call to ``endpoint``, started at ``started`` (``time.monotonic()``), failed with ``error``: open
        it when the endpoint did not answer, unless it answered another call meanwhile (this call's request was
        lost, not the endpoint)."""
        if not is_down(error):
            return
        cooldown = self.cooldown()
        kind = error.kind if isinstance(error, FailedFast) else type(error)
        with self._lock:
            now = time.monotonic()
            if self._answered.get(endpoint, -float("inf")) > started:
                return
            self._open[endpoint] = _Open(kind, dict(getattr(error, "kwargs", {})), now, now + cooldown, cooldown)

    def answered(self, endpoint: str) -> None:
        """A call to ``endpoint`` got an answer: close it."""
        with self._lock:
            self._open.pop(endpoint, None)
            self._answered[endpoint] = time.monotonic()

    def reset(self) -> None:
        """Forget every failure and answer (a test's process that goes on with fresh endpoints)."""
        with self._lock:
            self._open.clear()
            self._answered.clear()


def is_down(error: BaseException) -> bool:
    """Whether a whole call's ``error`` says that its endpoint did not answer or could not be reached: a read or
    connect timeout, a connection refused or closed, a host not found (botocore's errors of them)."""
    from botocore.exceptions import (ConnectionClosedError, ConnectTimeoutError, EndpointConnectionError,
                                     ReadTimeoutError)

    return isinstance(error, (ReadTimeoutError, ConnectTimeoutError, EndpointConnectionError, ConnectionClosedError))


def endpoint_of(url: str) -> str:
    """The endpoint (scheme://host:port) of a request's URL: what a breaker is kept per."""
    parts = urlparse(url)
    return f"{parts.scheme}://{parts.netloc}"


BREAKER: Breaker | None = None   # this process's, once installed


def install(ours: Callable[[Any], bool], cooldown: Callable[[], float]) -> Breaker:
    """This process's breaker (made once; ``cooldown``: its seconds, read at each failure), acting on the calls of
    the clients whose botocore config ``ours`` picks: its handlers join botocore's built-in ones, which every
    botocore session made from now on registers (s3fs makes the session of a filesystem's client with its first
    call). Call it before the first client that should have it is made."""
    global BREAKER
    with _LOCK:
        if BREAKER is not None:
            return BREAKER
        from botocore import handlers

        breaker = Breaker(cooldown)

        def before_call(params: dict, context: dict, **_: Any) -> None:
            if ours(context.get("client_config")):
                endpoint = endpoint_of(params["url"])
                breaker.before(endpoint)
                context[_CONTEXT_KEY] = (endpoint, time.monotonic())

        def after_call(context: dict, **_: Any) -> None:
            if _CONTEXT_KEY in context:
                breaker.answered(context[_CONTEXT_KEY][0])

        def after_call_error(exception: BaseException, context: dict, **_: Any) -> None:
            if _CONTEXT_KEY in context:
                endpoint, started = context[_CONTEXT_KEY]
                breaker.failed(endpoint, exception, started)

        handlers.BUILTIN_HANDLERS.extend([("before-call.s3", before_call), ("after-call.s3", after_call),
                                          ("after-call-error.s3", after_call_error)])
        BREAKER = breaker
        return breaker
