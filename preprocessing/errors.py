"""Input errors that name the file, the line and the column, the bad-row policy, and which input file's own bytes
an error is about (``blame``/``blamed``: what a dated night's data gate quarantines a day for)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from common.errors import UserError, bounded


class InputError(UserError):
    """An input file that cannot be read (missing, unreadable URI, truncated archive)."""


_BLAMED = "dlrmflow_input_file"   # the attribute ``blame`` sets (kept when the error is pickled: a Dask worker's)


def blame(error: UserError, uri: str) -> UserError:
    """``error`` marked as caused by the bytes of input file ``uri`` alone: a truncated or corrupt archive, bytes
    after its end, malformed rows (``--on-bad-row error``, or beyond ``--max-bad-fraction``), a header or value
    that cannot be read, a numerical that does not fit the output dtype. A dated night quarantines that file's day
    (``nightly.night.parse_failed``); so never mark what is not the file's own fault: a missing or unlistable file,
    a lost store, a full disk, a setting that cannot work."""
    setattr(error, _BLAMED, uri)
    return error


def blamed(error: BaseException) -> str | None:
    """The input file whose bytes caused ``error`` (``blame``), else None."""
    uri = getattr(error, _BLAMED, None)
    return uri if isinstance(uri, str) else None


class BadRowError(UserError):
    """A malformed row under ``--on-bad-row error``."""


_NAMED = 8   # other bad fields of a row named in its report
FIELD_BYTES = 64 << 10   # a text value read as a category (or a list of them) longer than this is a bad row


class BadRows:
    """Applies the bad-row policy for one input file: raise on the first, or count them (blocks of a file may
    report from several threads). A row is one bad row however many of its fields are bad: ``report`` is called
    once per row (``report_rows`` does so for per-field checks)."""

    def __init__(self, uri: str, policy: str):
        self.uri, self.policy, self.count = uri, policy, 0
        self._lock = threading.Lock()

    def report(self, line: int, column: str | None, problem: str) -> None:
        """One bad row at a 1-based line (or row for Parquet) of the file."""
        if self.policy == "error":
            problem = bounded(problem, 1000)   # each value is quoted short (common.errors.quoted); this is the cap
            where = f"{self.uri}: line {line}" + (f", column {column}" if column else "")
            raise blame(BadRowError(f"{where}: {problem} Fix: correct or remove the row, or run with "
                                    "--on-bad-row skip to skip and count malformed rows (up to --max-bad-fraction)."),
                        self.uri)
        with self._lock:
            self.count += 1

    def report_rows(self, lines: np.ndarray,
                    checks: Sequence[tuple[str, np.ndarray, Callable[[int], str]]]) -> np.ndarray | None:
        """Report the rows that fail per-field ``checks`` (column, bad mask over the rows, problem of row i), one
        report per row: with its first failing column's problem, the row's other failing columns named after it.
        Returns the mask of the bad rows (None without checks). Python work per bad row only."""
        if not checks:
            return None
        masks = np.vstack([np.asarray(mask, dtype=bool) for _, mask, _ in checks])
        failed = masks.any(axis=0)
        for i in np.flatnonzero(failed):
            which = np.flatnonzero(masks[:, i])
            column, _, problem = checks[which[0]]
            others = [name for name in dict.fromkeys(checks[j][0] for j in which[1:]) if name != column]
            text = problem(int(i))
            if others:
                named = ", ".join(others[:_NAMED]) + (f" and {len(others) - _NAMED} more" if len(others) > _NAMED
                                                       else "")
                text += f" Also bad in this row: {named}."
            self.report(int(lines[i]), column, text)
        return failed
