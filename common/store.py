"""The artifact store: one root URI (a local folder or s3://bucket/prefix) for everything, and the only
module that names its top-level folders (the constants below; ``RunDir`` names what is inside a run).

S3 settings come from the standard AWS variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``), which s3fs/botocore read in every process,
torchrun's ranks included (or a Prefect Secret block: ``flows.pipeline``). No secret is ever stored in a config.
``filesystem`` is the one way from a URI to an fsspec filesystem and path, ``open_uri`` to an open file.
"""

from __future__ import annotations

import os
import posixpath
import re
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

RUN_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$"   # a folder of runs/: one path segment, never "." or ".."

DEFAULT_STORE = "./artifacts"
ENV_STORE = "DLRMFLOW_STORE"
SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
BLOCK_KEYS = SECRET_VARIABLES + ("AWS_ENDPOINT_URL", "AWS_REGION")
_SCHEMES = ("file", "s3", "s3a", "memory")
# fail in seconds, not minutes, when an endpoint does not answer
_CHECK_OPTIONS = {"skip_instance_cache": True,
                  "config_kwargs": {"connect_timeout": 3, "read_timeout": 10, "retries": {"max_attempts": 1}}}


def storage_options(uri: str) -> dict[str, Any]:
    """fsspec options for ``uri`` from the environment (an S3 endpoint for s3:// URIs)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return {"endpoint_url": endpoint} if uri.startswith(("s3://", "s3a://")) and endpoint else {}


def filesystem(uri: str, **options: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """(fsspec filesystem, path) of ``uri``, opened with ``options`` (default: ``storage_options(uri)``)."""
    return fsspec.core.url_to_fs(uri, **(options or storage_options(uri)))


def open_uri(uri: str, mode: str = "rb", compression: str | None = None, **options: Any) -> fsspec.core.OpenFile:
    """The file ``uri`` to open with ``with`` (``compression``: fsspec's, e.g. "infer"); ``options``: ``filesystem``'s.
    With ``filesystem``, the one way from a URI to its bytes."""
    return fsspec.open(uri, mode, compression=compression, **(options or storage_options(uri)))


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
        self.uri = os.path.abspath(uri) if "://" not in uri else uri.rstrip("/")
        self.scheme = scheme
        self.is_s3 = scheme in ("s3", "s3a")

    def join(self, *parts: str) -> str:
        return posixpath.join(self.uri, *parts)

    def run_uri(self, run_id: str) -> str:
        return self.join(RUNS, check_run_name(run_id))

    def tune_uri(self, name: str) -> str:
        """The folder of the tune called ``name`` (its study; its trials are runs)."""
        return self.join(TUNES, check_run_name(name))

    def synthetic_uri(self, rows: int, seed: int) -> str:
        return self.join(SYNTHETIC, f"criteo-{rows}-seed{seed}")

    def synthetic_days_uri(self, rows_per_day: int, seed: int) -> str:
        """The folder of the drifting synthetic days (``<date>/part-*`` under it)."""
        return self.join(SYNTHETIC, f"criteo-days-{rows_per_day}-seed{seed}")

    def check(self) -> None:
        """Fail fast with a clear error when the store cannot be written: a missing bucket, missing or
        wrong credentials, an endpoint that does not answer. Writes and removes one small file."""
        if not self.is_s3:
            fs, root = filesystem(self.uri)
            try:
                fs.makedirs(root, exist_ok=True)
                self._probe(fs, root)
            except OSError as e:
                raise UserError(f"store '{self.uri}' is not writable: {e}. Fix: choose another --store.") from None
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
        fs = fsspec.filesystem("s3", **_CHECK_OPTIONS)
        root = self.uri.split("://", 1)[1]
        try:
            fs.ls(bucket)
            self._probe(fs, root)
        except FileNotFoundError:
            raise UserError(f"store '{self.uri}': bucket '{bucket}' does not exist at {endpoint}. "
                            "Fix: create it, or check AWS_ENDPOINT_URL.") from None
        except PermissionError as e:
            raise UserError(f"store '{self.uri}': access denied at {endpoint} ({e}). Fix: check the credentials "
                            "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) and the bucket policy.") from None
        except (OSError, BotoCoreError, ClientError) as e:
            raise UserError(f"store '{self.uri}': cannot reach {endpoint}: {type(e).__name__}: {e}. Fix: check "
                            "AWS_ENDPOINT_URL, AWS_REGION and the network.") from None

    @staticmethod
    def _probe(fs, root: str) -> None:
        path = posixpath.join(root, f".dlrmflow-check-{uuid.uuid4().hex[:8]}")
        fs.pipe_file(path, b"ok")
        fs.rm_file(path)


def redact(text: str) -> str:
    """``text`` with the values of the secret AWS variables replaced by ``***``."""
    for var in SECRET_VARIABLES:
        value = os.environ.get(var)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text
