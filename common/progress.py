"""Progress a person reads: a tqdm bar on a terminal, else one line every tenth of the way or every ``EVERY_S``
(``train: step 400/1,000 (40%), 1,234 rows/s, loss 0.4567``), so that a log or a pipe gets a dozen lines, not one
per redraw of a bar.

``progress(...)`` picks the form from ``$DLRMFLOW_PROGRESS`` (``ENV``: ``bar`` or ``lines``; what a command whose
output a rank's pipe hides tells its ranks) or else from whether the stream is a terminal. Both forms take tqdm's
``update``, ``set_postfix`` and ``close``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, Any

ENV = "DLRMFLOW_PROGRESS"
EVERY_S = 30.0


def mode(stream: IO | None = None) -> str:
    """``bar`` or ``lines``: ``$DLRMFLOW_PROGRESS`` if set, else ``bar`` on a terminal."""
    chosen = os.environ.get(ENV, "").strip().lower()
    if chosen in ("bar", "lines"):
        return chosen
    stream = stream or sys.stderr
    return "bar" if hasattr(stream, "isatty") and stream.isatty() else "lines"


def progress(total: int, desc: str, unit: str, *, initial: int = 0, disable: bool = False, stream: IO | None = None,
             every_s: float = EVERY_S):
    """A tqdm bar (on a terminal) or ``Lines`` (elsewhere) counting ``unit`` to ``total``."""
    if mode(stream) == "bar":
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, disable=disable, desc=desc, unit=unit, dynamic_ncols=True,
                    unit_scale=unit != "step", file=stream)
    return Lines(total, desc, unit, initial=initial, disable=disable, stream=stream, every_s=every_s)


def number(value: float) -> str:
    """A count with thousands separators (``1,234``); a fraction with 4 significant digits (``0.4567``)."""
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.4g}" if abs(value) < 1 else f"{value:,.1f}"


class Lines:
    """One line per tenth of ``total`` done, or per ``every_s`` seconds, whichever comes first; and one at the end."""

    def __init__(self, total: int, desc: str, unit: str, *, initial: int = 0, disable: bool = False,
                 stream: IO | None = None, every_s: float = EVERY_S):
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.disable, self.stream, self.every_s = disable, stream, every_s
        self.postfix: dict[str, Any] = {}
        self._start, self._start_n = time.monotonic(), initial
        self._said_at, self._tenth = self._start, self._tenths(initial)
        self._closed = False

    def _tenths(self, n: int) -> int:
        return 10 * n // self.total if self.total else 0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if self._tenths(self.n) > self._tenth or now - self._said_at >= self.every_s:
            self._say(now)

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **values: Any) -> None:
        """What the line ends with: ``{"rows/s": 1234, "loss": 0.4567}`` -> ``1,234 rows/s, loss 0.4567``."""
        self.postfix = {**(ordered_dict or {}), **values}

    def write(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout, flush=True)

    def close(self) -> None:
        if not self._closed and self.n != self._said_n():
            self._say(time.monotonic())
        self._closed = True

    def _said_n(self) -> int | None:
        return getattr(self, "_last_n", None)

    def _say(self, now: float) -> None:
        self._said_at, self._tenth, self._last_n = now, self._tenths(self.n), self.n
        if self.disable:
            return
        done = f"{self.unit} {self.n:,}/{self.total:,}" if self.unit == "step" else \
            f"{self.n:,}/{self.total:,} {self.unit}"
        parts = [f"{self.desc}: {done}" + (f" ({self.n / self.total:.0%})" if self.total else "")]
        if self.unit != "step" and now > self._start and self.n > self._start_n:
            parts.append(f"{number(round((self.n - self._start_n) / (now - self._start)))} {self.unit}/s")
        for key, value in self.postfix.items():
            text = number(value) if isinstance(value, (int, float)) else str(value)
            parts.append(f"{text} {key}" if "/" in key else f"{key} {text}")
        print(", ".join(parts), file=self.stream or sys.stderr, flush=True)

    def __enter__(self) -> "Lines":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
