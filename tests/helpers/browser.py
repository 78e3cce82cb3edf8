"""Headless Chromium for the UI tests: the DOM of a page of the Prefect UI (a single-page app) and its
visible text."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Chromium is not installed (infra/install.sh)")


def page(url: str, tmp_path, name: str, picture: bool = False) -> str:
    """The DOM of ``url`` as headless Chromium renders it; with ``picture``, in the same run (a Chromium start costs
    seconds of CPU), a PNG of it kept as ``tmp_path/NAME.png`` for a person to look at."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             "--window-size=1400,1800" if picture else "--window-size=1400,900", "--virtual-time-budget=10000",
             f"--user-data-dir={tmp_path / ('chrome-' + name)}"] + (
                 ["--hide-scrollbars", f"--screenshot={tmp_path / (name + '.png')}"] if picture else [])
    return subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=90).stdout


def visible_text(dom: str) -> str:
    """The visible text of a DOM dump, one ' | ' between elements."""
    dom = re.sub(r"<(style|svg|script)\b.*?</\1>", "", dom, flags=re.S)
    return re.sub(r"(\s*\|\s*)+", " | ", re.sub(r"<[^>]+>", " | ", dom))


def screenshot(url: str, tmp_path, name: str) -> "os.PathLike":
    """A PNG of ``url`` as headless Chromium renders it, kept as ``tmp_path/NAME.png`` (for a person to look at
    after a failure); returns its path."""
    out = tmp_path / f"{name}.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1800",
             "--hide-scrollbars", "--virtual-time-budget=10000", f"--user-data-dir={tmp_path / ('chrome-' + name)}",
             f"--screenshot={out}"]
    subprocess.run([CHROMIUM, *flags, url], capture_output=True, text=True, timeout=90)
    return out
