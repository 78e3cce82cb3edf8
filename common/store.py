"""The artifact store: one root URI (a local folder or s3://bucket/prefix) for everything.

Layout (DESIGN.md): ``datasets/<name>-<fingerprint>/``, ``runs/<run-id>/``, and the embedded
default's raw data under ``synthetic/``. S3 settings come from the standard AWS variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``,
``AWS_REGION``), which s3fs/botocore read in every process, torchrun's ranks included; or from a
Prefect Secret block (``use_credentials_block``). No secret is ever stored in a config.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from urllib.parse import urlparse

import fsspec

from common.errors import UserError

DEFAULT_STORE = "./artifacts"
ENV_STORE = "DLRMFLOW_STORE"
SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
BLOCK_KEYS = SECRET_VARIABLES + ("AWS_ENDPOINT_URL", "AWS_REGION")
_SCHEMES = ("file", "s3", "s3a", "memory")
# fail in seconds, not minutes, when an endpoint does not answer
_CHECK_OPTIONS = {"skip_instance_cache": True,
                  "config_kwargs": {"connect_timeout": 3, "read_timeout": 10, "retries": {"max_attempts": 1}}}


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
        return self.join("runs", run_id)

    def synthetic_uri(self, rows: int, seed: int) -> str:
        return self.join("synthetic", f"criteo-{rows}-seed{seed}")

    def synthetic_days_uri(self, rows_per_day: int, seed: int) -> str:
        """The folder of the drifting synthetic days (``<date>/part-*`` under it)."""
        return self.join("synthetic", f"criteo-days-{rows_per_day}-seed{seed}")

    def check(self) -> None:
        """Fail fast with a clear error when the store cannot be written: a missing bucket, missing or
        wrong credentials, an endpoint that does not answer. Writes and removes one small file."""
        if not self.is_s3:
            fs, root = fsspec.core.url_to_fs(self.uri)
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


def use_credentials_block(name: str) -> None:
    """Load a Prefect Secret block holding ``{"AWS_ACCESS_KEY_ID": ..., ...}`` (keys from ``BLOCK_KEYS``)
    into this process's environment, where s3fs and the torchrun ranks find it."""
    from prefect.blocks.system import Secret

    try:
        value = Secret.load(name).get()
    except ValueError as e:
        raise UserError(f"credentials block '{name}': {e}. Fix: create a Secret block with that name.") from None
    if not isinstance(value, dict) or not set(value) <= set(BLOCK_KEYS):
        raise UserError(f"credentials block '{name}' must be a JSON object with keys among {', '.join(BLOCK_KEYS)}.")
    os.environ.update({k: str(v) for k, v in value.items()})


def transient(task, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry remote I/O failures (timeouts, dropped connections), never a
    missing file, a refused permission, bad input or a bug."""
    exc = state.data
    return isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, PermissionError, UserError))


def redact(text: str) -> str:
    """``text`` with the values of the secret AWS variables replaced by ``***``."""
    for var in SECRET_VARIABLES:
        value = os.environ.get(var)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text
