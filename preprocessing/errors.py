"""Input errors that name the file, the line and the column, and the bad-row policy."""

from __future__ import annotations

import threading

from common.errors import UserError


class InputError(UserError):
    """An input file that cannot be read (missing, unreadable URI, truncated archive)."""


class BadRowError(UserError):
    """A malformed row under ``--on-bad-row error``."""


class BadRows:
    """Applies the bad-row policy for one input file: raise on the first, or count them (blocks of a file may
    report from several threads)."""

    def __init__(self, uri: str, policy: str):
        self.uri, self.policy, self.count = uri, policy, 0
        self._lock = threading.Lock()

    def report(self, line: int, column: str | None, problem: str) -> None:
        """One bad row at a 1-based line (or row for Parquet) of the file."""
        if self.policy == "error":
            where = f"{self.uri}: line {line}" + (f", column {column}" if column else "")
            raise BadRowError(f"{where}: {problem} Fix: correct or remove the row, or run with "
                              "--on-bad-row skip to skip and count malformed rows (up to --max-bad-fraction).")
        with self._lock:
            self.count += 1
