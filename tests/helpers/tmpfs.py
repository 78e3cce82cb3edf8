"""A real full disk for a test: a small tmpfs mounted in a private mount namespace (``unshare -m``, so nothing
outside the child sees it, and it is gone with the child), a Python script run on it. Needs root or user namespaces
with mount rights; ``needs_tmpfs`` skips the test where neither is there."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers.paths import REPO


@functools.cache
def can_mount() -> bool:
    """Whether this machine lets us mount a tmpfs in a private mount namespace."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    for prefix in ([unshare, "-m"], [unshare, "-rm"]):   # root; else a user namespace mapping us to root
        try:
            done = subprocess.run([*prefix, "sh", "-c", f"mount -t tmpfs -o size=16k tmpfs {tempfile.gettempdir()}"],
                                  capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            _PREFIX[:] = prefix
            return True
    return False


_PREFIX: list[str] = []
needs_tmpfs = pytest.mark.skipif(not can_mount(), reason="no tmpfs can be mounted here (unshare -m refused)")


def run_on_tmpfs(script: str, mount: Path, size: str, *args: str, timeout: float = 120) -> dict:
    """Run the Python ``script`` (``sys.argv[1]``: the tmpfs's mount point ``mount``, an empty folder made here,
    ``size`` bytes big, e.g. "256k"; then ``args``) in a fresh interpreter inside a private mount namespace, with
    this repository importable; the JSON object its last line of output prints."""
    assert can_mount()
    mount.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    cmd = [*_PREFIX, "sh", "-c", 'mount -t tmpfs -o "size=$1" tmpfs "$0" && shift && exec "$@"',
           str(mount), size, sys.executable, "-c", script, str(mount), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
