"""The operator's side of the data gate: a model's days and their verdicts (``days.jsonl``, written by
``nightly.datacheck.judge`` through the night, ``models.registry.record_verdicts``), listed, and one overridden:
an accepted day is read again by the nights whose window holds it, a quarantined one left out of them
(``nightly.night.plan_night``). An override holds the files the day's last verdict judged (when the day was judged:
a re-uploaded day is judged again) and says who and why."""

from __future__ import annotations

import datetime as dt
import getpass
import socket

from common.errors import UserError
from common.store import Store, filesystem
from models import registry
from nightly import datacheck
from nightly.config import DaysConfig


def listing(model: str) -> list[dict]:
    """Each day's last verdict (day, verdict, by, at, why, files count, lines recorded of it), by day."""
    last: dict[str, dict] = {}
    counts: dict[str, int] = {}
    for line in registry.day_verdicts(model):
        last[line["day"]] = line
        counts[line["day"]] = counts.get(line["day"], 0) + 1
    return [{"day": d, "verdict": v["verdict"], "by": v.get("by"), "at": v.get("at"), "why": v.get("why") or "",
             "files": len(v["files"]) if v.get("files") is not None else "any", "lines": counts[d]}
            for d, v in sorted(last.items())]


def override(model: str, day: dt.date, verdict: str, why: str, by: str | None = None,
             say=None) -> dict:
    """Record the operator's ``verdict`` (accepted or quarantined) on ``day``; returns the line."""
    lines = registry.day_verdicts(model)
    judged = next((line for line in reversed(lines) if line.get("day") == day.isoformat()), None)
    line = {"day": day.isoformat(), "files": judged.get("files") if judged else None, "verdict": verdict,
            "failed": [], "by": f"operator {by or _who()}", "why": why,
            "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    registry.record_verdicts(model, [line], owner=line["by"], say=say)
    return line


def run_days(config: DaysConfig, say=None) -> list[dict]:
    """``config.action`` on ``config.model``'s days: the listing after it."""
    model = registry.model_uri(Store(config.store).uri, config.model)
    if config.action != "list":
        verdict = {"accept": datacheck.ACCEPTED, "quarantine": datacheck.QUARANTINED}[config.action]
        line = override(model, config.day, verdict, config.why, config.by, say=say)
        if say:
            say(f"model {config.model}: day {config.day} {verdict} by {line['by']} ({config.why})"
                + ("" if line["files"] is not None else "; the day was never judged: the verdict holds whatever its "
                   "files"))
    rows = listing(model)
    fs, path = filesystem(model)
    if not rows and not fs.exists(path):
        raise UserError(f"model {config.model} has no folder in {config.store} ({model}). Fix: check --store and "
                        "--model.")
    return rows


def _who() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (KeyError, OSError):
        return socket.gethostname()
