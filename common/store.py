"""The artifact store: one root URI (a local folder or s3://bucket/prefix) for everything, and the only
module that names its top-level folders (the constants below; ``RunDir`` names what is inside a run). ``Store``
builds every top-level URI (``run_uri``, ``dataset_uri``, ``model_uri``, ``tune_uri``, ``synthetic_uri``...) and
converts the locations records keep: a place inside the store is recorded store-relative (``runs/<name>``,
``datasets/<name>/vocab``: ``Store.relative``) and resolved against the root it has when read (``Store.resolve``),
so a store restored at another path or copied to another bucket still finds its own champion, runs and datasets.

S3 settings come from the standard AWS variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``), which s3fs/botocore read in every process,
torchrun's ranks included (or a Prefect Secret block: ``flows.pipeline``). No secret is ever stored in a config.
``filesystem`` is the one way from a URI to an fsspec filesystem and path, ``open_uri`` to an open file.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import socket
import threading
import uuid
from typing import Any
from urllib.parse import urlparse

import fsspec

from common.errors import UserError

DATASETS = "datasets"     # <name>-<fingerprint>/: preprocessed datasets (preprocessing.job)
RUNS = "runs"             # <run-id>/: training runs (training.rundir.RunDir)
MODELS = "models"         # <name>/: named models, their champion and history (models.registry)
TUNES = "tunes"           # <name>/: a tune's study, best config and results (tuning.study.TuneDir)
FILES = "_files"          # <key>/: each input file's parse and counts, shared by datasets (preprocessing.work)
WORK = "_work"            # <dataset key>/: one preprocessing job's work folder (preprocessing.work)
SYNTHETIC = "synthetic"   # criteo-<rows>-seed<seed>/: the embedded default's raw data
STORE_LEASE = "_store.lease"  # the store-wide lease: removals run under it (common.lease.store_lease)
TRASH = "_trash"          # <what>-<token>/: a folder gc (models.gc) renamed away and is deleting (local stores)
SPECS = "specs"           # <name>.yaml and <name>/v<N>.yaml: input specs named in the store (preprocessing.specs)
TOP = (DATASETS, RUNS, MODELS, TUNES, FILES, WORK, SYNTHETIC, TRASH, SPECS)   # the top-level folders: a location
                                                                              # recorded store-relative starts with one

RUN_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$"   # a folder of runs/: one path segment, never "." or ".."
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"   # a folder of models/ (models.registry's NAME_PATTERN)
DATASET_NAME = r"^(?!\.\.?$)[A-Za-z0-9_.\-]{1,255}$"  # a folder of datasets/: one segment, never "." or ".."
SPEC_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"    # a spec of specs/ (``store:NAME``)

DEFAULT_STORE = "./artifacts"
ENV_STORE = "DLRMFLOW_STORE"
SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
BLOCK_KEYS = SECRET_VARIABLES + ("AWS_ENDPOINT_URL", "AWS_REGION")
_SCHEMES = ("file", "s3", "s3a", "memory")


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


def filesystem(uri: str, **options: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """(fsspec filesystem, path) of ``uri``, opened with ``options`` (default: ``storage_options(uri)``). An S3
    filesystem makes one try of each call (``S3FS_TRIES``): its client's retries are the only ones (``s3_bound``)."""
    fs, path = fsspec.core.url_to_fs(uri, **(options or storage_options(uri)))
    if "s3" in fs.protocol:
        fs.retries = S3FS_TRIES   # on the instance every url_to_fs of the same options gets (fsspec caches it)
    return fs, path


def open_uri(uri: str, mode: str = "rb", compression: str | None = None, **options: Any) -> fsspec.core.OpenFile:
    """The file ``uri`` to open with ``with`` (``compression``: fsspec's, e.g. "infer"); ``options``: ``filesystem``'s.
    With ``filesystem``, the one way from a URI to its bytes."""
    fs, path = filesystem(uri, **options)
    return fsspec.core.OpenFile(fs, path, mode, compression=fsspec.core.get_compression(path, compression))


def read_text(uri: str, **options: Any) -> str:
    """The text of the file ``uri`` (FileNotFoundError when there is none); ``options``: ``filesystem``'s."""
    fs, path = filesystem(uri, **options)
    with fs.open(path, "r") as f:
        return f.read()


def check_run_name(name: str, given: str | None = None) -> str:
    """``name`` when it can name a folder in a store's ``runs/``, else a UserError saying how to fix it (a '/' or
    '..' would put the run elsewhere, even in another store). ``given``: the name as the user wrote it, when
    ``name`` is it filled in (a dated run's ``{date}``)."""
    if not re.fullmatch(RUN_NAME, name):
        raise UserError(f"run name {given or name!r} cannot name a folder in the store's {RUNS}/ folder. Fix: use "
                        "letters, digits, '_', '.' or '-' (no '/'), starting with a letter, digit or '_', at most 255.")
    return name


def check_model_name(name: str) -> str:
    """``name`` when it can name a folder in a store's ``models/``, else a UserError saying how to fix it."""
    if not re.fullmatch(MODEL_NAME, name):
        raise UserError(f"model name {name!r} cannot name a folder. Fix: use letters, digits, '.', '_' or '-' "
                        "(at most 64, starting with a letter or digit).")
    return name


def check_dataset_name(name: str) -> str:
    """``name`` when it can name a folder in a store's ``datasets/`` (one path segment), else a UserError."""
    if not re.fullmatch(DATASET_NAME, name):
        raise UserError(f"dataset name {name!r} cannot name a folder in the store's {DATASETS}/ folder. Fix: use "
                        "letters, digits, '_', '.' or '-' (no '/', not '.' or '..'), at most 255.")
    return name


def is_location(text: str) -> bool:
    """Whether ``text`` is a store-relative location as records keep it (``runs/<name>``, ``datasets/<name>/vocab``):
    no scheme, not absolute, its first segment one of the store's top-level folders (``TOP``)."""
    return "://" not in text and not text.startswith("/") and text.split("/", 1)[0] in TOP


def _dot_segments(path: str) -> bool:
    return bool({".", ".."} & set(path.split("/")))


def _location(uri: str) -> tuple[str, tuple[str, ...]] | None:
    """(scheme, path segments) of ``uri`` for comparing places: a local path absolute and normalised, s3a as s3;
    None for a remote path with '.' or '..' segments (S3 takes them literally: such a key is no place to trust)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme == "file":
        return "file", tuple(p for p in os.path.abspath(rest if sep else uri).split("/") if p)
    segments = tuple(p for p in rest.split("/") if p)
    return None if {".", ".."} & set(segments) else ({"s3a": "s3"}.get(scheme, scheme), segments)


def inside(uri: str, root: str) -> bool:
    """Whether ``uri`` is the folder ``root`` or lies in it (same scheme, bucket and path prefix, segment by segment:
    ``s3://b/store2`` is not in ``s3://b/store``)."""
    place, folder = _location(uri), _location(root)
    return place is not None and folder is not None and place[0] == folder[0] and \
        place[1][:len(folder[1])] == folder[1]


def store_of(uri: str, folder: str) -> str:
    """The store that holds ``uri`` as ``<store>/<folder>/<name>`` (``folder``: ``RUNS``, ``MODELS``); for a ``uri``
    that is not in such a folder, its parent folder."""
    path = uri.rstrip("/") if "://" in uri else os.path.abspath(uri)
    parent = posixpath.dirname(path)
    return posixpath.dirname(parent) if posixpath.basename(parent) == folder else parent


def default_store() -> str:
    """``$DLRMFLOW_STORE``, else ``./artifacts``."""
    return os.environ.get(ENV_STORE) or DEFAULT_STORE


class Store:
    """One root URI; local roots are made absolute (runs and subprocesses may change directory)."""

    def __init__(self, uri: str | None = None):
        uri = uri or default_store()
        scheme = urlparse(uri).scheme if "://" in uri else "file"
        if scheme not in _SCHEMES:
            raise UserError(f"store '{uri}': unsupported scheme '{scheme}'. Fix: use a local folder or "
                            "s3://bucket/prefix.")
        if "@" in urlparse(uri).netloc:
            raise UserError("store URI holds credentials. Fix: pass them in the AWS_* environment variables "
                            "or a Prefect Secret block, never in the URI.")
        if scheme == "file":   # a local store: absolute and normalised ('.' and '..' resolved), a plain path
            self.uri = os.path.abspath(uri.split("://", 1)[1] if "://" in uri else uri)
        else:
            self.uri = uri.rstrip("/")
            _, _, path = self.uri.partition("://")
            if _dot_segments(path):
                bucket, _, prefix = path.partition("/")
                fixed = f"{scheme}://{bucket}{posixpath.normpath('/' + prefix)}".rstrip("/")
                raise UserError(f"store '{uri}' has '.' or '..' segments, which {scheme}:// takes literally (a key "
                                "segment named '..', not the folder above), so the store would refuse its own "
                                f"records. Fix: name it without them ({fixed}).")
        self.scheme = scheme
        self.is_s3 = scheme in ("s3", "s3a")
        self._listed: dict[str, set[str]] = {}   # resolve's listings: top-level folder -> the names in it

    def join(self, *parts: str) -> str:
        return posixpath.join(self.uri, *parts)

    def run_uri(self, run_id: str) -> str:
        return self.join(RUNS, check_run_name(run_id))

    def dataset_uri(self, name: str) -> str:
        """The folder of the dataset called ``name`` (``<name>-<fingerprint>``: ``preprocessing.job``)."""
        return self.join(DATASETS, check_dataset_name(name))

    def model_uri(self, name: str) -> str:
        """The folder of the named model ``name`` (its champion, history and bundles: ``models.registry``)."""
        return self.join(MODELS, check_model_name(name))

    def runs(self) -> list[str]:
        """The names of the run folders in ``runs/`` (sorted; entries that cannot name a run left out)."""
        return self._names(RUNS, RUN_NAME)

    def models(self) -> list[str]:
        """The names of the model folders in ``models/`` (sorted; entries that cannot name a model left out)."""
        return self._names(MODELS, MODEL_NAME)

    def named(self, top: str, name: str, legacy: str) -> str:
        """The folder name under the top-level folder ``top`` (``RUNS``, ``TUNES``) of a thing whose default name
        hashes its settings: ``name`` (hashed where the store is left out: ``Store.relative``), unless no folder
        ``name`` exists but one ``legacy`` does (its name from before, hashed with the store's absolute URIs): a run
        or tune made then, in a store that has not moved since, is found again (resumed, reused). The one home of
        that fallback."""
        if legacy == name:
            return name
        fs, root = filesystem(self.join(top))
        if fs.exists(posixpath.join(root, name)) or not fs.exists(posixpath.join(root, legacy)):
            return name
        return legacy

    def _names(self, top: str, pattern: str) -> list[str]:
        fs, root = filesystem(self.join(top))
        if not fs.exists(root):
            return []
        names = [posixpath.basename(info["name"].rstrip("/")) for info in fs.ls(root, detail=True)
                 if info.get("type") == "directory"]
        return sorted(n for n in names if re.fullmatch(pattern, n))

    # ---- locations in records --------------------------------------------------------------------------------

    def relative(self, uri: str) -> str:
        """``uri`` as a record in this store keeps it: store-relative (``runs/<name>``, ``datasets/<name>/vocab``,
        ``models/<name>/bundles/<run>``) when it lies in one of the store's top-level folders; else ``uri`` as it
        is (a place outside the store stays absolute, and is refused where only the store's own may be loaded)."""
        place, root = _location(uri), _location(self.uri)
        if place is None or root is None or place[0] != root[0] or place[1][:len(root[1])] != root[1]:
            return uri
        rest = place[1][len(root[1]):]
        return "/".join(rest) if rest and rest[0] in TOP else uri

    def resolve(self, location: str) -> str:
        """The URI of ``location`` as a record holds it: a store-relative one (``is_location``) joined to this
        store's root; an absolute one as it is when it lies in this store; one that does not, but whose tail is
        ``<top-level folder>/<name>[/...]`` with that folder here, found here (the store moved: restored at another
        path, or copied to another bucket, since the record was written); anything else as it is (the caller
        refuses what must lie in the store: ``inside``)."""
        if is_location(location):
            return self.join(location)
        if inside(location, self.uri):
            return location
        place = _location(location)
        segments = place[1] if place is not None else ()
        for i in range(len(segments) - 2, -1, -1):   # the last top-level folder name first
            if segments[i] in TOP and segments[i + 1] in self._names_in(segments[i]):
                return self.join(*segments[i:])
        return location

    def _names_in(self, top: str) -> set[str]:
        """The names in the top-level folder ``top`` (one listing per folder and ``Store``: records name many)."""
        if top not in self._listed:
            fs, root = filesystem(self.join(top))
            found = fs.ls(root, detail=False) if fs.exists(root) else []
            self._listed[top] = {posixpath.basename(f.rstrip("/")) for f in found}
        return self._listed[top]

    def tune_uri(self, name: str) -> str:
        """The folder of the tune called ``name`` (its study; its trials are runs)."""
        return self.join(TUNES, check_run_name(name))

    def spec_uri(self, name: str) -> str:
        """The input spec called ``name`` in the store: ``specs/<name>.yaml`` (versions: ``preprocessing.specs``)."""
        if not re.fullmatch(SPEC_NAME, name):
            raise UserError(f"spec name {name!r} cannot name a file in the store's {SPECS}/ folder. Fix: use letters, "
                            "digits, '.', '_' or '-' (at most 64, starting with a letter or digit).")
        return self.join(SPECS, f"{name}.yaml")

    def synthetic_uri(self, rows: int, seed: int) -> str:
        return self.join(SYNTHETIC, f"criteo-{rows}-seed{seed}")

    def synthetic_days_uri(self, rows_per_day: int, seed: int) -> str:
        """The folder of the drifting synthetic days (``<date>/part-*`` under it)."""
        return self.join(SYNTHETIC, f"criteo-days-{rows_per_day}-seed{seed}")

    def check(self) -> None:
        """Fail fast with a one-line error when the store cannot be written: a read-only folder or bucket (its
        root, and its models/ where a night's last writes go: the promotion), a missing bucket, missing or wrong
        credentials, an endpoint that is unreachable or does not answer (within ``s3_client_config``'s timeouts
        and retries). Writes and removes one small file in each place."""
        if not self.is_s3:
            fs, root = filesystem(self.uri)
            try:
                fs.makedirs(root, exist_ok=True)
                for place in (root, posixpath.join(root, MODELS)):
                    if place == root or fs.isdir(place):
                        self._probe(fs, place)
            except OSError as e:
                raise store_error(e, self.uri) or UserError(
                    f"store '{self.uri}' is not writable: {e}. Fix: choose another --store.") from None
            return
        self._check_s3()

    def _check_s3(self) -> None:
        import botocore.session
        from botocore.exceptions import BotoCoreError, ClientError

        bucket = urlparse(self.uri).netloc
        if not bucket:
            raise UserError(f"store '{self.uri}' names no bucket. Fix: use s3://bucket/prefix.")
        if botocore.session.get_session().get_credentials() is None:
            raise UserError(f"store '{self.uri}': no AWS credentials. Fix: set AWS_ACCESS_KEY_ID and "
                            "AWS_SECRET_ACCESS_KEY (or a profile, or --credentials-block NAME).")
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
        fs, root = filesystem(self.uri, skip_instance_cache=True, **storage_options(self.uri))
        try:
            fs.ls(bucket)
            for place in (root, posixpath.join(root, MODELS)):   # a bucket policy may deny writes under a prefix
                self._probe(fs, place)
        except FileNotFoundError:
            raise UserError(f"store '{self.uri}': bucket '{bucket}' does not exist at {endpoint}. "
                            "Fix: create it, or check AWS_ENDPOINT_URL.") from None
        except (OSError, BotoCoreError, ClientError) as e:
            raise store_error(e, self.uri) or UserError(
                f"store '{self.uri}': cannot reach {endpoint}: {type(e).__name__}: {e}. Fix: check "
                "AWS_ENDPOINT_URL, AWS_REGION and the network.") from None

    @staticmethod
    def _probe(fs, folder: str) -> None:
        """Write and remove one small file in ``folder`` (its errors: the filesystem's, for ``store_error``)."""
        path = posixpath.join(folder, f".dlrmflow-check-{uuid.uuid4().hex[:8]}")
        fs.pipe_file(path, b"ok")
        fs.rm_file(path)


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
      and ``store_error`` says "not answering".

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
