"""A store that cannot be used, said in one line (what, where, how to fix) instead of a traceback: ``store_error``
finds it in an exception's chain of causes (an S3 endpoint unreachable or not answering, S3 access denied, a local
file system that is read-only or refuses this user). The command line, the flows, the ranks and the leases raise
or say its line.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from common.errors import UserError
from common.s3 import ENV_S3_FAIL_FAST, ENV_S3_READ_TIMEOUT, ENV_S3_RETRIES, s3_client_config
from common.uri import inside

# the S3 calls that write: denied, the store is read-only for these credentials
_S3_WRITES = {"PutObject", "CopyObject", "DeleteObject", "DeleteObjects", "CreateMultipartUpload", "UploadPart",
              "UploadPartCopy", "CompleteMultipartUpload"}


def store_error(exc: BaseException, store: str | None = None) -> UserError | None:
    """The one-line UserError (what, where, how to fix) for a store that cannot be used, found anywhere in
    ``exc``'s chain of causes: an S3 endpoint unreachable (refused, unknown host, no connection within the connect
    timeout) or not answering (no reply within the read timeout), S3 access denied (on a write: a store read-only
    for these credentials), a local file system that is read-only or refuses this user. None for anything else
    (a UserError included). ``store``: the store's URI when the caller knows it (an S3 error names an S3 store, a
    local one a local store it happened in; else the message names the endpoint or the path); a local permission
    error outside the store is not the store's."""
    import sys

    if isinstance(exc, UserError):
        return None
    chain = _causes(exc)
    if "botocore" in sys.modules:   # no botocore error without botocore
        found = _s3_error(chain, store)
        if found is not None:
            return _said_fast(found, chain)
    for e in chain:
        if _refused_write(e) and "://" not in str(e.filename or ""):
            return _local_error(e, store)
    return None


def _refused_write(e: BaseException) -> str | None:
    """What a local file system said when it refused ``e``'s write (read-only, permission), else None."""
    import errno

    reasons = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
               errno.EPERM: "operation not permitted"}
    return reasons.get(e.errno) if isinstance(e, OSError) else None


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (``__cause__``, else ``__context__``; a botocore error's wrapped ``error`` too)."""
    chain: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or any(e is seen for seen in chain):
            continue
        chain.append(e)
        inner = getattr(e, "kwargs", None)
        todo += [e.__cause__ or e.__context__, inner.get("error") if isinstance(inner, dict) else None]
    return chain


def _s3_error(chain: list[BaseException], store: str | None) -> UserError | None:
    from botocore.exceptions import (ClientError, ConnectionClosedError, ConnectTimeoutError,
                                     EndpointConnectionError, ReadTimeoutError)

    for i, e in enumerate(chain):
        if not isinstance(e, (ClientError, ConnectionClosedError, ConnectTimeoutError, EndpointConnectionError,
                              ReadTimeoutError)):
            continue
        endpoint = _endpoint_of(e)
        s3_store = store if store and store.startswith(("s3://", "s3a://")) else None   # else: inputs, outputs
        where = f"store '{s3_store}'" if s3_store else "S3"
        if isinstance(e, ReadTimeoutError):
            settings = s3_client_config()
            return UserError(
                f"{where} not answering: {endpoint} accepted the connection but sent no reply within the "
                f"{settings['read_timeout']:g} s read timeout. Fix: check the S3 service at AWS_ENDPOINT_URL (up but "
                f"hung or overloaded); on a slow link raise {ENV_S3_READ_TIMEOUT} ({settings['read_timeout']:g}) or "
                f"{ENV_S3_RETRIES} ({settings['retries']['total_max_attempts'] - 1}).")
        if isinstance(e, ClientError):
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = e.response.get("Error", {}).get("Code")
            if status != 403 and code != "AccessDenied":
                continue
            message = e.response.get("Error", {}).get("Message") or code
            operation = getattr(e, "operation_name", None) or "a request"
            if operation in _S3_WRITES:
                prefix = f"{s3_store.rstrip('/')}/*" if s3_store else "the bucket and prefix it writes"
                return UserError(
                    f"{where} is read-only for these credentials: {operation} denied at {endpoint} ({message}). "
                    f"Fix: allow s3:PutObject and s3:DeleteObject on {prefix} (bucket policy or IAM), or use "
                    "credentials that may write (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).")
            return UserError(f"{where}: access denied at {endpoint} ({operation}: {message}). Fix: check the "
                             "credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) and the bucket policy.")
        return UserError(f"{where} unreachable: cannot reach {endpoint} ({_unreachable_reason(e, chain[i + 1:])}). "
                         "Fix: check AWS_ENDPOINT_URL, that the S3 service runs, and that this machine can reach it.")
    return None


def _said_fast(error: UserError, chain: list[BaseException]) -> UserError:
    """``error``, and where its call was not tried (``common.breaker.FailedFast``: a call to the endpoint failed
    moments ago), that and for how long this process's calls fail so, before its fix."""
    from common.breaker import FailedFast

    fast = next((e for e in chain if isinstance(e, FailedFast)), None)
    if fast is None:
        return error
    said = f" ({fast.fast()}; {ENV_S3_FAIL_FAST}: {fast.cooldown:g} s). Fix: "
    return UserError(str(error).replace(". Fix: ", said, 1))


def _endpoint_of(e: BaseException) -> str:
    """The endpoint (scheme://host:port) that ``e`` met: its request's URL, else the configured one."""
    found = getattr(e, "kwargs", None)
    url = found.get("endpoint_url") if isinstance(found, dict) else None
    if url:
        parts = urlparse(url)
        return f"{parts.scheme}://{parts.netloc}"
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"


def _unreachable_reason(e: BaseException, inner: list[BaseException]) -> str:
    import socket

    from botocore.exceptions import ConnectionClosedError, ConnectTimeoutError

    if isinstance(e, ConnectTimeoutError):
        return f"no connection within the {s3_client_config()['connect_timeout']:g} s connect timeout"
    if isinstance(e, ConnectionClosedError):
        return "the connection closed before a reply"
    for cause in inner:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return f"host {urlparse(_endpoint_of(e)).hostname!r} not found"
    deepest = inner[-1] if inner else e
    return f"{type(deepest).__name__}: {deepest}"


def _local_error(e: OSError, store: str | None) -> UserError | None:
    path = os.fsdecode(e.filename) if e.filename is not None else None
    local = store if store and "://" not in store else None
    if local and path and not inside(path, local):
        local = None   # not the store's file
    reason = _refused_write(e)
    if reason == "read-only file system":
        if local:
            return UserError(f"store '{local}' is read-only: cannot write {path or local} ({reason}). Fix: choose a "
                             "writable --store (or $DLRMFLOW_STORE), or remount it read-write.")
        return UserError(f"cannot write {path or 'a file'}: {reason}. Fix: choose a writable place for it (--store, "
                         "$DLRMFLOW_STORE or the output path), or remount it read-write.")
    if not local:
        return None   # a file of the user's that is not the store's: its own error says more
    return UserError(f"store '{local}' is not writable by this user: {reason} on {path or local}. Fix: give this "
                     "user write access to the store's folders (chmod/chown), or choose another --store.")
