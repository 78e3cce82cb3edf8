"""The store's S3 client, the same in every process that opens an s3:// URI (torchrun's ranks included): where
its settings come from, the limits on its calls, and the transport that makes every request keep them.

Settings come from the standard AWS variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``), which s3fs/botocore read in every process,
torchrun's ranks included (or a Prefect Secret block: ``flows.pipeline``). No secret is ever stored in a config
(``redact`` hides their values in text). ``storage_options`` are a URI's fsspec options (``common.store.filesystem``
opens every URI with them): the client's timeouts and retries (``s3_client_config``, ``$DLRMFLOW_S3_*``), the most
one call takes (``s3_bound``), the transport that keeps them (``_bounded_transport``) and the process's breaker
(``common.breaker``, ``s3_fail_fast_s``). What a failed call says to the user: ``common.store_errors``.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
from typing import Any

from common.errors import UserError

SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
BLOCK_KEYS = SECRET_VARIABLES + ("AWS_ENDPOINT_URL", "AWS_REGION")


def storage_options(uri: str) -> dict[str, Any]:
    """fsspec options for ``uri`` from the environment, the same in every process (torchrun's ranks included): for
    s3:// URIs the endpoint (``AWS_ENDPOINT_URL``), the client's timeouts and retries (``s3_client_config``) and the
    transport that makes every request keep them (``_bounded_transport``; its clients also go through the process's
    breaker: ``common.breaker``, ``s3_fail_fast_s``)."""
    if not uri.startswith(("s3://", "s3a://")):
        return {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = s3_client_config()
    s3_fail_fast_s(config)   # a bad value fails here, before any call
    return {**({"endpoint_url": endpoint} if endpoint else {}),
            "config_kwargs": {**config, **_bounded_transport(config)}}


def redact(text: str) -> str:
    """``text`` with the values of the secret AWS variables replaced by ``***``."""
    for var in SECRET_VARIABLES:
        value = os.environ.get(var)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


# the store's S3 client: its timeouts and retries, read in every process that opens an s3:// URI (storage_options)
ENV_S3_CONNECT_TIMEOUT = "DLRMFLOW_S3_CONNECT_TIMEOUT_S"
ENV_S3_READ_TIMEOUT = "DLRMFLOW_S3_READ_TIMEOUT_S"
ENV_S3_RETRIES = "DLRMFLOW_S3_RETRIES"
ENV_S3_FAIL_FAST = "DLRMFLOW_S3_FAIL_FAST_S"
S3_CONNECT_TIMEOUT_S = 10.0   # a TCP connection to the endpoint
S3_READ_TIMEOUT_S = 30.0      # silence on an open connection (s3fs's own default is 15, botocore's 60)
S3_RETRIES = 2                # botocore's standard mode: 3 attempts, exponential backoff with jitter
S3FS_TRIES = 1                # s3fs's own loop around each call (its default: 5 tries, on top of botocore's)


def s3_client_config() -> dict[str, Any]:
    """botocore ``Config`` keywords (s3fs's ``config_kwargs``) of the store's S3 client: the connect and read
    timeouts in seconds (``$DLRMFLOW_S3_CONNECT_TIMEOUT_S``, ``$DLRMFLOW_S3_READ_TIMEOUT_S``) and the retries
    after a request's first attempt, standard mode (``$DLRMFLOW_S3_RETRIES``: timeouts, refused or dropped
    connections, throttling and 5xx answers are retried). What they bound: ``s3_bound``."""
    return {"connect_timeout": _env_number(ENV_S3_CONNECT_TIMEOUT, S3_CONNECT_TIMEOUT_S),
            "read_timeout": _env_number(ENV_S3_READ_TIMEOUT, S3_READ_TIMEOUT_S),
            "retries": {"total_max_attempts": 1 + int(_env_number(ENV_S3_RETRIES, S3_RETRIES, whole=True)),
                        "mode": "standard"}}


def s3_bound(config: dict[str, Any] | None = None) -> float:
    """The most seconds one call of the store's S3 client (a GET, a PUT, a listing...) takes against an endpoint
    that stops answering, the rule that ``storage_options`` makes hold (``config``: ``s3_client_config()``'s): each
    of the call's attempts (1 + the retries; s3fs adds none: ``S3FS_TRIES``) ends after the read timeout without a
    reply (the connect timeout without a connection, if longer), and botocore's backoff between them is under
    2**retries - 1 s in all. One exception: an upload whose bytes the endpoint stops taking partway (a body larger
    than the sockets' buffers, a few MiB) may take up to twice as long, since aiohttp resends an idempotent request
    (a PUT) once on a fresh connection when its connection breaks. A command or a night makes many calls: each is
    bounded so."""
    config = config or s3_client_config()
    attempts = config["retries"]["total_max_attempts"]
    return attempts * max(config["connect_timeout"], config["read_timeout"]) + 2 ** (attempts - 1) - 1


def s3_fail_fast_s(config: dict[str, Any] | None = None) -> float:
    """The seconds a process's calls to an S3 endpoint fail at once after a call to it failed because it did not
    answer or could not be reached (``common.breaker``): ``$DLRMFLOW_S3_FAIL_FAST_S``, default ``s3_bound(config)``
    (a night on a frozen store then waits the bound about once per process, not once per call)."""
    return _env_number(ENV_S3_FAIL_FAST, s3_bound(config))


def _bounded_transport(config: dict[str, Any]) -> dict[str, Any]:
    """aiobotocore's ``AioConfig`` keywords that make ``config``'s timeouts hold for every request of the client
    (aiohttp's read timeout starts only once a request's body is sent): its HTTP session sends no ``Expect:
    100-continue`` (``_BoundedHTTPSession``), and its sockets give up on data the endpoint leaves unacknowledged
    for the read timeout (``_socket``: Linux's TCP_USER_TIMEOUT; the connect timeout if longer, so that it never
    cuts a connect short)."""
    stall_ms = int(1000 * max(config["connect_timeout"], config["read_timeout"]))
    return {"http_session_cls": _bounded_http_session(),
            "connector_args": {"socket_factory": functools.partial(_socket, stall_ms)}}


def _socket(stall_ms: int, addr_info: tuple) -> socket.socket:
    """A socket for aiohttp (its ``socket_factory``) that fails (ETIMEDOUT) once data it sent stays unacknowledged,
    or unsent behind a zero window (an endpoint that stopped reading), for ``stall_ms``."""
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family, kind, proto)
    if hasattr(socket, "TCP_USER_TIMEOUT") and family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, stall_ms)
    return sock


def _bounded_http_session() -> type:
    """aiobotocore's HTTP session class, made once per process (aiobotocore imported only for S3 stores):

    * without ``Expect: 100-continue``. botocore adds it to every PUT and POST with a body (``add_expect_header``
      on ``before-call.s3``); aiohttp then waits for the endpoint's ``100 Continue`` before it sends the body,
      outside any timeout, so a write to an endpoint that stops answering waited forever (a GET failed within the
      read timeout). Without it the body is sent at once and the read timeout holds. The header is not signed
      (botocore leaves ``expect`` out of the signature), so removing it keeps the request valid.
    * a request whose body the endpoint stopped taking (``_socket``'s ETIMEDOUT while it was sent, which aiohttp
      reports as a failed connection) raised as the read timeout it is (``ReadTimeoutError``): retried like one,
      and ``common.store_errors.store_error`` says "not answering".

    Its clients' calls go through the process's breaker (``common.breaker``, installed here: before any client of
    the store is made), which picks them by this class in their config."""
    with _MAKING:
        made = globals().get("_BoundedHTTPSession")
        if made is not None:
            return made
        import errno

        import aiohttp
        from aiobotocore.httpsession import AIOHTTPSession
        from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

        class Bounded(AIOHTTPSession):
            async def send(self, request):
                request.headers.pop("Expect", None)
                try:
                    return await super().send(request)
                except EndpointConnectionError as e:
                    cause = e.kwargs.get("error")
                    if isinstance(cause, aiohttp.ClientOSError) and cause.errno == errno.ETIMEDOUT and \
                            not isinstance(cause, aiohttp.ClientConnectorError):   # sending, not connecting
                        raise ReadTimeoutError(endpoint_url=request.url, error=cause) from e
                    raise

        Bounded.__name__ = Bounded.__qualname__ = "_BoundedHTTPSession"
        Bounded.__module__ = __name__
        from common import breaker

        breaker.install(lambda config: getattr(config, "http_session_cls", None) is Bounded, s3_fail_fast_s)
        globals()["_BoundedHTTPSession"] = Bounded
        return Bounded


_MAKING = threading.Lock()   # one _BoundedHTTPSession per process, whichever thread opens S3 first


def __getattr__(name: str) -> Any:
    """``_BoundedHTTPSession`` made on first use (a filesystem's config names it: unpickled in a fresh process)."""
    if name == "_BoundedHTTPSession":
        return _bounded_http_session()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _env_number(name: str, default: float, whole: bool = False) -> float:
    """``$name`` as seconds > 0 (``whole``: a count >= 0), ``default`` when unset; a UserError for anything else."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or value < 0 or (not whole and not 0 < value < float("inf")):
        what = "a whole number of retries, 0 or more" if whole else "a number of seconds above 0"
        raise UserError(f"{name}={text!r} is not {what}. Fix: set it to e.g. {default:g}, or unset it for the "
                        f"default ({default:g}).")
    return value
