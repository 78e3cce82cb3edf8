"""infra/install.sh, what can be checked without installing: which interpreter it picks from PATH, the one-line
refusal of a Python the stack cannot run on, the uv bootstrap refusing a wheel whose sha256 is not the pinned one,
and the lock covering every supported Python (a full install is `make install`; docs/install.md)."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]
INSTALL_SH = REPO / "infra" / "install.sh"
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64" or not BASH,
                                 reason="install.sh runs on x86_64 Linux")


def _fake_python(bin_dir: Path, name: str, version: str, impl: str = "cpython", runs: bool = True) -> Path:
    """A stand-in interpreter answering install.sh's probe ('MAJOR MINOR MICRO IMPL EXECUTABLE') as `version`;
    one that does not run exits 127, as a pyenv shim for a version that is not installed does."""
    path = bin_dir / name
    body = f"echo {' '.join(version.split('.'))} {impl} {path}" if runs else "echo 'pyenv: not installed' >&2; exit 127"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _run(tmp_path: Path, args: list[str], pythons: dict[str, str], **env: str) -> subprocess.CompletedProcess:
    """install.sh with PATH = the fake interpreters + the few tools it needs (no real python, no uv)."""
    bin_dir, tools = tmp_path / "bin", tmp_path / "tools"
    bin_dir.mkdir(exist_ok=True)
    tools.mkdir(exist_ok=True)
    for tool in ("dirname", "uname", "getconf"):
        if not (tools / tool).exists():
            (tools / tool).symlink_to(shutil.which(tool))
    for name, version in pythons.items():
        impl, _, version = version.rpartition(" ")
        _fake_python(bin_dir, name, version, impl or "cpython", runs=version != "broken")
    environ = {"PATH": f"{bin_dir}:{tools}", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"), **env}
    return subprocess.run([BASH, str(INSTALL_SH), *args], env=environ, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("pythons", "chosen"), [
    # 3.11 first (what the suite runs on), whatever python3 is and whatever else is there
    ({"python3": "3.13.1", "python3.12": "3.12.3", "python3.11": "3.11.2", "python3.13": "3.13.1"}, "python3.11"),
    # then 3.12 (Ubuntu 24.04's python3), then 3.13; 3.10 and a shim that does not run are passed over
    ({"python3": "3.10.12", "python3.10": "3.10.12", "python3.12": "3.12.3", "python3.11": "broken"}, "python3.12"),
    ({"python3": "3.13.0", "python3.10": "3.10.12"}, "python3"),
    ({"python3": "pypy 3.11.13", "python3.13": "3.13.5"}, "python3.13"),
])
def test_picks_the_preferred_supported_python_on_path(tmp_path, pythons, chosen):
    result = _run(tmp_path, ["--python"], pythons)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "bin" / chosen)


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_refuses_in_one_line_when_no_supported_python_is_on_path(tmp_path):
    line = _one_line_error(_run(tmp_path, ["--python"], {"python3": "3.10.12", "python3.10": "3.10.12"}))
    assert "CPython 3.11, 3.12 or 3.13" in line and "python3 is CPython 3.10.12" in line
    assert "python3.11" in line and "PYTHON=" in line  # how to fix it

def test_refuses_in_one_line_when_there_is_no_python_at_all(tmp_path):
    assert "no python3 found" in _one_line_error(_run(tmp_path, ["--python"], {}))


@pytest.mark.parametrize("version", ["3.10.12", "3.14.0", "pypy 3.11.13", "broken"])
def test_refuses_an_unsupported_PYTHON_in_one_line(tmp_path, version):
    fake = _fake_python(tmp_path, "mypython", version.split()[-1] if version != "broken" else "3.11.2",
                        version.split()[0] if " " in version else "cpython", runs=version != "broken")
    line = _one_line_error(_run(tmp_path, ["--python"], {"python3.11": "3.11.9"}, PYTHON=str(fake)))
    assert line.startswith(f"error: PYTHON={fake} ") and "CPython 3.11, 3.12 or 3.13" in line


def test_uv_bootstrap_refuses_a_wheel_whose_sha256_is_not_the_pinned_one(tmp_path):
    wheel = tmp_path / "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    wheel.write_bytes(b"not uv")
    result = _run(tmp_path, ["--uv"], {}, PYTHON=sys.executable, DLRMFLOW_UV_WHEEL_URL=wheel.as_uri())
    line = _one_line_error(result)
    assert "sha256" in line and "refused" in line
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # nothing kept, not even the download


def _lock_entries(path: Path) -> list[tuple[str, str, str, list[str]]]:
    """(name, version, marker, sha256 hashes) of each entry of a requirements lock."""
    entries = []
    for line in path.read_text().splitlines():
        if m := re.match(r"([A-Za-z0-9][\w.-]*)==(\S+)(?: ; (.*?))?(?: \\)?$", line):
            entries.append((m[1], m[2], m[3] or "", []))
        elif m := re.search(r"--hash=sha256:([0-9a-f]{64})", line):
            entries[-1][3].append(m[1])
    return entries


def test_one_lock_for_every_supported_python_with_torch_hashes_for_each():
    requires = SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"])
    assert [f"3.{m}" for m in range(9, 16) if f"3.{m}.0" in requires] == ["3.11", "3.12", "3.13"]
    assert 'SUPPORTED="CPython 3.11, 3.12 or 3.13"' in INSTALL_SH.read_text()
    entries = _lock_entries(REPO / "infra" / "requirements.lock")
    assert all(hashes for *_, hashes in entries)
    # resolved for all of them: redis needs async-timeout below 3.11.3 (Debian 12's python3 is 3.11.2)
    assert ("async-timeout", "python_full_version < '3.11.3'") in {(n, m) for n, _, m, _ in entries}
    # torch: the CPU build, with the hash of each supported Python's wheel (infra/torch-cpu.lock)
    torch_lock = (REPO / "infra" / "torch-cpu.lock").read_text()
    [(_, version, marker, hashes)] = [e for e in entries if e[0] == "torch"]
    assert f"torch=={version} " in torch_lock and version.endswith("+cpu") and marker == ""
    pinned = re.findall(r"--hash=sha256:([0-9a-f]{64})", torch_lock)
    assert len(pinned) == 3 and set(pinned) <= set(hashes)
