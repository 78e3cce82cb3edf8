"""The operator's side of the data gate: a model's days and their verdicts (``days.jsonl``, written by
``nightly.datacheck.judge`` through the night, ``models.registry.record_verdicts``), listed, and one overridden:
an accepted day is read again by the nights whose window holds it, a quarantined one left out of them
(``nightly.night.set_up``); or a new normal adopted (``accept-shift DATE``: DATE and the later days the gate
quarantined accepted, the reference of the days after them starting at DATE). An override holds the files and the
stats of the day's last verdict (a re-uploaded day is judged again) and says who and why. Only a model of the
store and a day the gate has judged (its files known) can be overridden: anything else is one line that says so."""

from __future__ import annotations

import datetime as dt
import difflib
import getpass
import socket

from common.errors import UserError, bounded
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
    return [{"day": d, "verdict": v["verdict"], "by": v.get("by"), "at": v.get("at"), "why": bounded(v.get("why") or ""),
             "files": len(v["files"]) if v.get("files") is not None else "any", "lines": counts[d]}
            for d, v in sorted(last.items())]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _judged(lines: list[dict], day: dt.date, model: str, action: str) -> dict:
    """The day's last verdict line; a UserError when the gate never judged it (its files unknown to the model)."""
    judged = next((line for line in reversed(lines) if line.get("day") == day.isoformat()), None)
    if judged is None:
        later = " (a day to come)" if day > dt.datetime.now(dt.timezone.utc).date() else ""
        raise UserError(f"day {day}{later} of model {model} has no verdict yet: the data gate judges a day, by its "
                        f"files, the first night that reads it, so there is nothing to {action}. Fix: name a day of "
                        "`dlrmflow days --model NAME` (run the night first), or fix the day's files.")
    return judged


def override(model: str, day: dt.date, verdict: str, why: str, by: str | None = None,
             say=None) -> dict:
    """Record the operator's ``verdict`` (accepted or quarantined) on ``day``, a day the gate judged; returns the
    line."""
    judged = _judged(registry.day_verdicts(model), day, model,
                     "accept" if verdict == datacheck.ACCEPTED else "quarantine")
    line = {"day": day.isoformat(), "files": judged.get("files"), "verdict": verdict,
            "failed": [], "by": f"operator {by or _who()}", "why": why, "at": _now()}
    if judged.get("stats"):
        line["stats"] = judged["stats"]
    registry.record_verdicts(model, [line], owner=line["by"], say=say)
    return line


def accept_shift(model: str, since: dt.date, why: str, by: str | None = None, say=None) -> list[dict]:
    """Adopt a new normal since ``since`` (``datacheck.shift_lines``): that day and every later day the gate
    quarantined are accepted, and the days after them are judged against them; returns the lines."""
    lines = registry.day_verdicts(model)
    judged = _judged(lines, since, model, "accept as a new normal")
    if judged["verdict"] != datacheck.QUARANTINED or not judged.get("stats"):
        raise UserError(f"day {since} of model {model} is not a day the data gate quarantined by its checks "
                        f"({judged['verdict']} by {judged.get('by')}): a new normal starts at one. Fix: name the "
                        "first quarantined day of the shift (`dlrmflow days --model NAME` lists them).")
    who = f"operator {by or _who()}"
    shift = datacheck.shift_lines(lines, since.isoformat(), who, why, _now())
    registry.record_verdicts(model, shift, owner=who, say=say)
    return shift


def _model(config: DaysConfig) -> str:
    """The model's URI; a UserError (with the store's models and the nearest name) when the store has no such
    model: a typo creates nothing."""
    store = Store(config.store)
    model = registry.model_uri(store.uri, config.model)
    fs, path = filesystem(model)
    if not fs.exists(path):
        names = store.models()
        near = difflib.get_close_matches(config.model, names, n=1)
        raise UserError(f"model {config.model} has no folder in {config.store} ({model}); its models: "
                        f"{', '.join(names) or 'none'}.{f' Did you mean {near[0]}?' if near else ''} Fix: check "
                        "--store and --model.")
    return model


def run_days(config: DaysConfig, say=None) -> list[dict]:
    """``config.action`` on ``config.model``'s days: the listing after it."""
    model = _model(config)
    if config.action == "accept-shift":
        shift = accept_shift(model, config.day, config.why, config.by, say=say)
        if say:
            say(f"model {config.model}: a new normal since {config.day} accepted by {shift[0]['by']} "
                f"({config.why}): {', '.join(line['day'] for line in shift)}; the days after them are judged "
                "against them")
    elif config.action != "list":
        verdict = {"accept": datacheck.ACCEPTED, "quarantine": datacheck.QUARANTINED}[config.action]
        line = override(model, config.day, verdict, config.why, config.by, say=say)
        if say:
            say(f"model {config.model}: day {config.day} {verdict} by {line['by']} ({config.why})")
    return listing(model)


def _who() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (KeyError, OSError):
        return socket.gethostname()
