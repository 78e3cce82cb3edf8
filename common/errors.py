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


class UserError(Exception):
    """A problem with the user's input (file, URI, spec, option) rather than a bug.

    The command line and the flows show its message without a traceback. Every package's
    input errors derive from it; the message says what, where and how to fix it.
    """
