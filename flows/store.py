"""The store's Prefect side: S3 credentials from a Prefect Secret block, and which failed tasks are retried
(the store itself: ``common.store``)."""

from __future__ import annotations

import os

from common.errors import UserError
from common.store import BLOCK_KEYS


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
