"""What makes a test slow, in one place: it starts torchrun or a server (a Prefect server, `dlrmflow serve`,
Chromium on its UI). tests/conftest.py marks a test ``slow`` when its fixtures include one declared with
``slow_fixture`` (they start those), or when it carries ``@pytest.mark.slow`` itself; and it fails a test
that starts one (``heavy``, seen by an audit hook on every subprocess this interpreter starts) without the
mark, so `make test-fast` (-m "not slow") cannot quietly grow. A moto S3 server is not counted: it starts in
about a second, and the S3 backends' logic belongs in test-fast."""

from __future__ import annotations

import os
import re

import pytest

SLOW_FIXTURES: set[str] = set()

# `dlrmflow COMMAND` in a child interpreter that launches torchrun or serves (score --bundle and
# the others run in the child itself)
_TORCHRUN_COMMANDS = {"train", "evaluate", "run", "score", "serve", "serve-model", "tune"}


def slow_fixture(*args, **kwargs):
    """``pytest.fixture`` for a fixture that starts torchrun or a server: every test using it is slow."""
    def register(fn):
        SLOW_FIXTURES.add(kwargs.get("name", fn.__name__))
        return pytest.fixture(*args, **kwargs)(fn)
    return register


def heavy(argv) -> str | None:
    """Why starting ``argv`` makes a test slow, or None."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    argv = [os.fsdecode(a) for a in argv]
    names = [os.path.basename(a) for a in argv]
    launchers = {"training.launchers.torchrun"} & set(argv)
    if launchers and any(re.match(r"[^:]*\.invalid(:|$)", a) for a in argv):
        return None   # a rendezvous host under .invalid (RFC 6761) never resolves: it stops before importing torch
    if "torchrun" in names or launchers or "torch.distributed.run" in argv:
        return "torchrun"
    if "prefect" in names and "server" in argv:
        return "a Prefect server"
    if any(n.startswith(("chromium", "chrome")) for n in names):
        return "Chromium"
    for i, a in enumerate(argv[:-1]):
        if a == "-m" and argv[i + 1] in ("flows", "flows.cli"):
            command = next((c for c in argv[i + 2:] if not c.startswith("-")), None)
            if command in _TORCHRUN_COMMANDS and not (command == "score" and "--bundle" in argv):
                return f"`dlrmflow {command}` (torchrun or a server)"
    return None
