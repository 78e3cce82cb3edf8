"""The one error type for bad input: it names what is wrong, where, and how to fix it."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input (file, URI, spec, option) rather than a bug.

    The command line and the flows show its message without a traceback. Every package's
    input errors derive from it; the message says what, where and how to fix it.
    """
