"""The one error type for bad input: it names what is wrong, where, and how to fix it.

Its subclasses, each where it is defined (``tests/test_layout.py`` fails when a subclass is missing here, or one
named here is gone):

- ``common.lease.LockLost``: a lease expired and another owner took it over while this one held it
- ``common.lease.LeaseHeld``: a lease is held by another live owner and the wait for it timed out
- ``common.space.NoSpace``: a write that found no space (or quota) left on its device, or a stage refused because
  the free space is below what it is estimated to write (the path, the free space, the fix)
- ``feature_spec.errors.SpecError`` (also a ``ValueError``): a feature spec that cannot be used
- ``preprocessing.errors.InputError``: an input file that cannot be read (missing, unreadable, truncated)
- ``preprocessing.errors.BadRowError``: a malformed row under ``--on-bad-row error``
- ``preprocessing.transforms.NumericalRangeError``: a numerical value not finite after its transform, or that
  does not fit the output dtype
- ``preprocessing.writer.FinishedDataset``: a write into a dataset folder that already has ``_SUCCESS``
- ``training.sharding.DoesNotFit``: tables that do not fit in the memory of the given ranks
- ``training.launchers.base.LaunchError``: a rank job that could not be submitted or watched
- ``flows.train.TrainingFailed``: torchrun exited with an error (the failing rank's last lines)
"""

from __future__ import annotations

import reprlib


class UserError(Exception):
    """A problem with the user's input (file, URI, spec, option) rather than a bug.

    The command line and the flows show its message without a traceback. Every package's
    input errors derive from it; the message says what, where and how to fix it.
    """


QUOTED_CHARS = 80      # of a value quoted in a message
MESSAGE_CHARS = 2000   # of a message kept in an event, a verdict, a history entry


def quoted(value: object, limit: int = QUOTED_CHARS) -> str:
    """``repr`` of ``value`` for a message: of its first ``limit`` characters (bytes) at most, with its size after
    it when cut (``'abc'... (104,857,600 bytes)``). A value read from a file may be any size; a message is a line."""
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if isinstance(value, (str, bytes)):
        if len(value) <= limit:
            return repr(value)
        size = len(value.encode(errors="surrogatepass") if isinstance(value, str) else value)
        return f"{value[:limit]!r}... ({size:,} bytes)"
    shown = reprlib.Repr()   # a container's repr without walking all of it
    shown.maxstring = shown.maxother = limit
    text = shown.repr(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def bounded(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out: what a record or an event keeps of a
    message that may quote anything."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"
