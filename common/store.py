"""The artifact store's layout: one root URI (a local folder or s3://bucket/prefix) for everything, and the only
module that names its top-level folders (the constants below; ``RunDir`` names what is inside a run). ``Store``
builds every top-level URI (``run_uri``, ``dataset_uri``, ``model_uri``, ``tune_uri``, ``synthetic_uri``...) and
converts the locations records keep: a place inside the store is recorded store-relative (``runs/<name>``,
``datasets/<name>/vocab``: ``Store.relative``) and resolved against the root it has when read (``Store.resolve``),
so a store restored at another path or copied to another bucket still finds its own champion, runs and datasets.

``filesystem`` is the one way from a URI to an fsspec filesystem and path, ``open_uri`` to an open file. The S3
client they open (its settings, timeouts and transport) is ``common.s3``'s; what a store that cannot be used says
is ``common.store_errors``'.
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
from common.s3 import S3FS_TRIES, storage_options
from common.uri import inside, place

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
_SCHEMES = ("file", "s3", "s3a", "memory")


def filesystem(uri: str, **options: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """(fsspec filesystem, path) of ``uri``, opened with ``options`` (default: ``storage_options(uri)``). An S3
    filesystem makes one try of each call (``S3FS_TRIES``): its client's retries are the only ones
    (``common.s3.s3_bound``)."""
    fs, path = fsspec.core.url_to_fs(uri, **(options or storage_options(uri)))
    if "s3" in fs.protocol:
        fs.retries = S3FS_TRIES   # on the instance every url_to_fs of the same options gets (fsspec caches it)
    return fs, path


def open_uri(uri: str, mode: str = "rb", compression: str | None = None, **options: Any) -> fsspec.core.OpenFile:
    """The file ``uri`` to open with ``with`` (``compression``: fsspec's, e.g. "infer"); ``options``: ``filesystem``'s.
    With ``filesystem``, the one way from a URI to its bytes."""
    fs, path = filesystem(uri, **options)
    return fsspec.core.OpenFile(fs, path, mode, compression=fsspec.core.get_compression(path, compression))


def make_folder(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Make the folder ``path`` (and its parents) where the filesystem has folders; nothing on S3, which has none
    (s3fs's makedirs only asks whether the bucket exists, one request per call, and creates a missing one: a
    store's bucket is never made by a write; ``Store.check`` tells a missing one)."""
    if "s3" not in fs.protocol:
        fs.makedirs(path or ".", exist_ok=True)


def has_file(fs: fsspec.AbstractFileSystem, path: str) -> bool:
    """Whether the file ``path`` of ``fs`` exists, asked of the store now: on S3 one HEAD (s3fs's ``exists`` may
    answer from its listing cache, and adds a listing, to find a folder, when the HEAD finds nothing); a store
    that fails the call raises it."""
    if "s3" not in fs.protocol:
        return fs.exists(path)
    try:
        fs.metadata(path)
    except FileNotFoundError:
        return False
    return True


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
        where, root = place(uri), place(self.uri)
        if where is None or root is None or where[0] != root[0] or where[1][:len(root[1])] != root[1]:
            return uri
        rest = where[1][len(root[1]):]
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
        where = place(location)
        segments = where[1] if where is not None else ()
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
        credentials, an endpoint that is unreachable or does not answer (within ``common.s3.s3_client_config``'s
        timeouts and retries). Writes and removes one small file in each place."""
        from common.store_errors import store_error   # botocore's errors: imported when a check fails

        if not self.is_s3:
            fs, root = filesystem(self.uri)
            try:
                fs.makedirs(root, exist_ok=True)
                for folder in (root, posixpath.join(root, MODELS)):
                    if folder == root or fs.isdir(folder):
                        self._probe(fs, folder)
            except OSError as e:
                raise store_error(e, self.uri) or UserError(
                    f"store '{self.uri}' is not writable: {e}. Fix: choose another --store.") from None
            return
        self._check_s3()

    def _check_s3(self) -> None:
        import botocore.session
        from botocore.exceptions import BotoCoreError, ClientError

        from common.store_errors import store_error

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
            for folder in (root, posixpath.join(root, MODELS)):   # a bucket policy may deny writes under a prefix
                self._probe(fs, folder)
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
