"""common.process: the one reader of this host's live processes (by group, session or an environment entry) and the
launch prefix of a local rank job and the export child."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from common.process import LAUNCH_PREFIX, launch_command, live_processes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (/proc)")
def test_live_processes_by_group_session_and_environment_entry():
    token = f"DLRMFLOW_TEST_TOKEN={uuid.uuid4().hex}"
    name, value = token.split("=")
    child = subprocess.Popen(["sleep", "30"], start_new_session=True, env={name: value})
    try:
        mine = {child.pid: os.getpid()}
        assert live_processes(group=child.pid) == mine == live_processes(session=child.pid)
        assert live_processes(carrying=token) == mine
        assert live_processes(carrying=token + "0") == {} and live_processes(carrying=name) == {}   # whole entries
    finally:
        child.kill()
        child.wait()
    assert live_processes(group=child.pid, carrying=token) == {}   # ended: none


def test_the_launch_prefix_is_read_as_shell_words(monkeypatch):
    monkeypatch.delenv(LAUNCH_PREFIX, raising=False)
    assert launch_command(["python", "-m", "x"]) == ["python", "-m", "x"]
    monkeypatch.setenv(LAUNCH_PREFIX, "")
    assert launch_command(["x"]) == ["x"]
    monkeypatch.setenv(LAUNCH_PREFIX, "numactl --interleave=all 'a b'")
    assert launch_command(["x"]) == ["numactl", "--interleave=all", "a b", "x"]
