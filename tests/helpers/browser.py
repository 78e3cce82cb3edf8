"""Headless Chromium for the UI tests: one browser per test (``Browser``: its DevTools protocol over a pipe) that opens
pages of the Prefect UI (a single-page app), waits until each page's DOM shows what the test looks for, keeps the DOM
and, when asked, a screenshot; and the visible text of a DOM.

One browser for all of a test's pages: a Chromium start costs ~1.4 CPU-seconds, and one per page (``--dump-dom``,
each waiting out a virtual-time budget while the UI's timers polled the server) was most of the UI tests' browser
time. The browser waits in real time for a pattern instead; a test leaves a page (``Browser.leave``) to stop the UI's
polling of the server while it does other things."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# the test waits for the run's background install of Chromium, skips where it is not installed (fixtures.chromium)
needs_chromium = pytest.mark.usefixtures("chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--hide-scrollbars", "--mute-audio")
RELOAD_EVERY_S = 20   # a page that has not shown the pattern by then is loaded again (data that came later)
SETTLED_S = 0.5   # a page is read once it matches and its text has not changed for this long (parts come later)
SETTLE_AT_MOST_S = 3.0   # (a page whose clock ticks never settles)


class Browser:
    """A headless Chromium of one page, ``width`` x ``height``; its files (DOMs, screenshots, profile, log) in
    ``folder``. A context manager: the browser is stopped on exit."""

    def __init__(self, folder: Path, width: int = 1400, height: int = 1800):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        to_chromium, self._commands = os.pipe()
        self._answers, from_chromium = os.pipe()
        # --remote-debugging-pipe: Chromium reads the protocol's commands on fd 3 and writes on fd 4
        with open(self.folder / "chromium.log", "wb") as log:
            self.proc = subprocess.Popen(
                ["bash", "-c", f'exec "$0" "$@" 3<&{to_chromium} 4>&{from_chromium}', CHROMIUM, *FLAGS,
                 f"--window-size={width},{height}", f"--user-data-dir={self.folder / 'chrome-profile'}",
                 "--remote-debugging-pipe", "about:blank"],
                pass_fds=(to_chromium, from_chromium), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log, start_new_session=True)
        os.close(to_chromium)
        os.close(from_chromium)
        self._next, self._got, self._ended = 0, {}, False
        self._lock, self._changed = threading.Lock(), threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            target = self._send("Target.createTarget", {"url": "about:blank"}, session=None)["targetId"]
            self._session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                       session=None)["sessionId"]
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self, url: str, pattern: str, name: str, picture: bool = False, timeout: float = 60) -> str:
        """The DOM of ``url`` once it matches ``pattern`` (loaded again every RELOAD_EVERY_S until then; an
        AssertionError with the page's text after ``timeout`` s) and has settled (SETTLED_S), kept as
        ``folder/NAME.html``; with ``picture``, a screenshot of it as ``folder/NAME.png``."""
        self._send("Page.navigate", {"url": url})   # answered once the new document is committed
        start = reloaded = time.monotonic()
        while not re.search(pattern, dom := self.dom()):
            now = time.monotonic()
            assert now - start < timeout, \
                f"{url} did not show {pattern!r} in {timeout:.0f} s: {visible_text(dom)[:3000]}"
            if now - reloaded > RELOAD_EVERY_S:
                self._send("Page.reload", {})
                reloaded = now
            time.sleep(0.25)
        matched = changed = time.monotonic()
        while (now := time.monotonic()) - changed < SETTLED_S and now - matched < SETTLE_AT_MOST_S:
            time.sleep(0.25)
            later = self.dom()
            if visible_text(later) != visible_text(dom) and re.search(pattern, later):
                changed = time.monotonic()
            dom = later if re.search(pattern, later) else dom
        (self.folder / f"{name}.html").write_text(dom)
        with open(self.folder / "pages.log", "a") as log:   # where a test's browser time went
            log.write(f"{name}: {url} matched after {matched - start:.1f} s, read after {now - start:.1f} s\n")
        if picture:
            png = self._send("Page.captureScreenshot", {"format": "png"})["data"]
            (self.folder / f"{name}.png").write_bytes(base64.b64decode(png))
        return dom

    def leave(self) -> None:
        """Leave the page for ``about:blank``: the UI's polling of the server stops (for a test that does other
        things before its next page; the next page of the same UI loads faster from the page before)."""
        self._send("Page.navigate", {"url": "about:blank"})

    def dom(self) -> str:
        """The current page's DOM (as ``chromium --dump-dom`` prints it)."""
        found = self._send("Runtime.evaluate", {"expression": "document.documentElement.outerHTML",
                                                "returnByValue": True})
        return found["result"].get("value") or ""

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._send("Browser.close", {}, session=None, timeout=10)
                self.proc.wait(10)
            except (AssertionError, OSError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # its helper processes too
        except ProcessLookupError:
            pass
        self.proc.wait()
        os.close(self._commands)

    def _send(self, method: str, params: dict, session: str | None | bool = True, timeout: float = 60) -> dict:
        with self._lock:
            self._next += 1
            ask = {"id": self._next, "method": method, "params": params}
            if session:
                ask["sessionId"] = self._session
            data = json.dumps(ask).encode() + b"\0"
            while data:
                data = data[os.write(self._commands, data):]
        deadline = time.monotonic() + timeout
        with self._changed:
            while ask["id"] not in self._got:
                left = deadline - time.monotonic()
                assert left > 0 and not self._ended, f"Chromium did not answer {method} (its log: {self.folder})"
                self._changed.wait(left)
            answer = self._got.pop(ask["id"])
        assert "error" not in answer, f"Chromium refused {method}: {answer['error']}"
        return answer["result"]

    def _read(self) -> None:
        buffer = bytearray()
        while chunk := os.read(self._answers, 1 << 20):
            buffer += chunk
            while (end := buffer.find(b"\0")) >= 0:
                message = json.loads(buffer[:end])
                del buffer[:end + 1]
                if "id" in message:   # an answer (events are not used)
                    with self._changed:
                        self._got[message["id"]] = message
                        self._changed.notify_all()
        os.close(self._answers)
        with self._changed:
            self._ended = True
            self._changed.notify_all()


def all_of(*texts: str) -> str:
    """A pattern that matches a DOM holding each of ``texts`` (a page is read once all its parts are drawn)."""
    return "(?s)^" + "".join(f"(?=.*{re.escape(t)})" for t in texts)


def visible_text(dom: str) -> str:
    """The visible text of a DOM dump, one ' | ' between elements."""
    dom = re.sub(r"<(style|svg|script)\b.*?</\1>", "", dom, flags=re.S)
    return re.sub(r"(\s*\|\s*)+", " | ", re.sub(r"<[^>]+>", " | ", dom))
