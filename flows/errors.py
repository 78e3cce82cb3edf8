"""User errors at the boundary of each flow and task: the run fails with the error's message as its state
message and one ERROR line in its logs (the traceback at DEBUG), instead of Prefect logging the traceback
again at every enclosing task, subflow and flow. ``transient``: which failed tasks are retried."""

from __future__ import annotations

import functools
import inspect

from prefect import get_run_logger
from prefect.states import Failed

from common.errors import UserError

LOGGED = "dlrmflow_user_error"  # set on a log record (and on the error) once the message is logged


def user_errors(fn):
    """``fn`` that returns a Failed state holding a UserError it raised (logged once, by the innermost run).

    A calling flow gets the error raised again from a subflow, a task's future's ``result()`` or
    ``task(..., return_state=True).result()``; a task's plain call would return the state instead."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            if not getattr(e, LOGGED, False):
                log = get_run_logger()
                log.debug("traceback of the error below", exc_info=True)
                log.error("%s", e, extra={LOGGED: True})
                setattr(e, LOGGED, True)
            return Failed(message=str(e), data=e)

    run.__signature__ = inspect.signature(fn, eval_str=True)  # resolved: Prefect would read them in this module
    return run


def transient(task, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry remote I/O failures (timeouts, dropped connections), never a
    missing file, a refused permission, bad input or a bug."""
    exc = state.data
    return isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, PermissionError, UserError))
