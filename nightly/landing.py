"""When a day has landed, without Prefect: the rule that says a day of the dated inputs is complete
(``nightly.config.LandingConfig``: a marker file in each day's folder, by default ``_SUCCESS``; at least N files; the
files unchanged for a quiet period; every rule set must hold), the days the day-landed sensor (``flows.landed``) finds
complete and has not told of yet (``scan``), and the rule that a night started by that sensor's trigger or by the
schedule runs once a day (``ran``, ``once``).

The sensor remembers what it saw in the model's ``landed.jsonl`` (``models.registry.record_landed``): one ``landed``
line per day it told of, with the day's files (URI -> size and mtime, S3: size and ETag: ``nightly.datacheck.content``
of ``InputFile.identity``, as the data gate keys its verdicts), a ``waiting`` line when a quiet period starts, a
``changed`` line when a day's files change after it landed (said once; the day is not told of again: its night runs
once, a re-run is a person's Run with the date)."""

from __future__ import annotations

import datetime as dt
import fnmatch
import posixpath
from dataclasses import dataclass, field

from common.errors import UserError
from common.store import filesystem
from models import registry
from nightly import datacheck
from nightly.config import LandingConfig
from preprocessing.dated import as_glob, dated_part, day_of, fill_date, is_dated
from preprocessing.inputs import expand

LANDED, WAITING, CHANGED = "landed", "waiting", "changed"   # the states of landed.jsonl's lines


def rule_text(rule: LandingConfig) -> str:
    """The completeness rule in words, e.g. ``a _SUCCESS marker in the day's folder``."""
    parts = ([f"a {rule.marker} marker in the day's folder"] if rule.marker else []) + \
        ([f"at least {rule.files} file(s)"] if rule.files else []) + \
        ([f"its files unchanged for {rule.quiet_s:g} s"] if rule.quiet_s else [])
    return " and ".join(parts)


def check(templates: list[str], rule: LandingConfig) -> None:
    """Refuse (one UserError) inputs the sensor cannot watch under ``rule``: an input without ``{date}``, a marker
    where ``{date}`` names no folder (a file a day: no folder of the day to hold it), an input glob that would read the
    marker as data."""
    for template in templates:
        if not is_dated(template):
            raise UserError(f"input '{template}' has no {{date}}: the day-landed sensor watches dated inputs only. "
                            "Fix: give every input as a {date} template, or turn the sensor off (--landing.every-s 0).")
        if not rule.marker:
            continue
        folder, rest = dated_part(template)
        if not rest:
            raise UserError(f"input '{template}': {{date}} names a file, not a day's folder, so no {rule.marker} "
                            "marker can say the day is complete. Fix: --landing.marker none with --landing.files N or "
                            "--landing.quiet-s SECONDS.")
        if "/" not in rest and fnmatch.fnmatch(rule.marker, rest):
            raise UserError(f"input '{template}' matches the day's marker {rule.marker}: the night would read it as "
                            f"data. Fix: name the files (e.g. {folder}/part-*) or the folder ({folder}).")


def days_found(templates: list[str]) -> list[dt.date]:
    """The days any of ``templates`` has a file or folder for, oldest first (one listing per template)."""
    found: set[dt.date] = set()
    for template in templates:
        prefix, _ = dated_part(template)
        fs, path = filesystem(as_glob(prefix))
        for p in fs.glob(path):
            uri = fs.unstrip_protocol(p) if "://" in template else p
            if (day := day_of([prefix], uri)) is not None:
                found.add(day)
    return sorted(found)


@dataclass(frozen=True)
class Day:
    """A day as the sensor sees it: its files (URI -> content identity; None: none yet), whether it is complete by
    the rule and, when not, what it waits for (``quiet_from_now``: a quiet period starts now, its files new or
    changed)."""

    day: dt.date
    files: dict[str, str] | None
    complete: bool
    waits: str = ""
    quiet_from_now: bool = False

    def line(self, state: str, at: str) -> dict:
        """Its line of landed.jsonl in ``state`` at ``at`` (ISO time)."""
        return {"day": self.day.isoformat(), "state": state, "files": self.files, "at": at}


def judge(templates: list[str], day: dt.date, rule: LandingConfig, lines: list[dict], now: dt.datetime) -> Day:
    """``day`` by ``rule``: its files (every template must have some), its marker in each template's folder of the day,
    their count, and with a quiet period the time its files have been as they are now (since its last ``waiting``
    line in ``lines`` with the same files)."""
    filled = [fill_date(t, day) for t in templates]
    try:
        files = datacheck.content({f.uri: f.identity for f in expand(filled)})
    except UserError as e:   # a template matches nothing (yet), or cannot be listed: the day has not landed
        return Day(day, None, False, str(e).split(". Fix:")[0])
    if rule.marker:
        for template in templates:
            folder = fill_date(dated_part(template)[0], day)
            fs, path = filesystem(folder)
            folders = fs.glob(path) if any(c in path for c in "*?[") else [path]
            if not folders or not all(fs.exists(posixpath.join(f, rule.marker)) for f in folders):
                return Day(day, files, False, f"no {rule.marker} in {folder}")
    if rule.files and len(files) < rule.files:
        return Day(day, files, False, f"{len(files)} of at least {rule.files} files")
    if rule.quiet_s:
        last = next((line for line in reversed(lines) if line.get("day") == day.isoformat()), None)
        if last is None or last.get("state") != WAITING or last.get("files") != files:
            return Day(day, files, False, f"{rule.quiet_s:g} s without a change to its files", quiet_from_now=True)
        quiet = (now - dt.datetime.fromisoformat(last["at"])).total_seconds()
        if quiet < rule.quiet_s:
            return Day(day, files, False, f"unchanged for {quiet:.0f} of {rule.quiet_s:g} s")
    return Day(day, files, True)


@dataclass
class Scan:
    """What one look of the sensor found: the days that landed now (to tell of, then to record as ``landed``), the
    other new lines of landed.jsonl (``waiting``, ``changed``) and what to say."""

    landed: list[Day] = field(default_factory=list)
    lines: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def scan(templates: list[str], rule: LandingConfig, model: str, now: dt.datetime | None = None) -> Scan:
    """One look at the newest ``rule.lookback_days`` days of ``templates`` for the model folder ``model``: the days
    complete by ``rule`` that the sensor has not told of and whose night has not run (``ran``)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    at = now.isoformat(timespec="seconds")
    lines, history = registry.landed(model), registry.history(model)
    out = Scan()
    for day in days_found(templates)[-rule.lookback_days:]:
        iso = day.isoformat()
        told = next((line for line in reversed(lines) if line.get("day") == iso and line.get("state") != WAITING), None)
        if told is None and ran(history, iso):
            continue   # its night ran (by hand, or by the schedule): nothing to tell
        seen = judge(templates, day, rule, lines, now)
        if told is not None:
            if seen.files is not None and seen.files != told.get("files"):
                out.lines.append(seen.line(CHANGED, at))
                out.notes.append(f"day {iso}: its files changed since it landed ({len(seen.files)} file(s) now); not "
                                 "told again: its night runs once. To run it on them: Run the pipeline with date "
                                 f"{iso}")
        elif seen.complete:
            out.landed.append(seen)
            out.notes.append(f"day {iso} landed: {len(seen.files)} file(s), {rule_text(rule)}")
        elif seen.quiet_from_now:
            out.lines.append(seen.line(WAITING, at))
            out.notes.append(f"day {iso}: waiting for {seen.waits}")
    return out


def ran(history: list[dict], day: str) -> dict | None:
    """The model's history line of the night ``day`` that runs it once (its last line, when it decided, was skipped
    or its data gate failed it); None when the night has not run, or failed before its decision (then it runs again:
    a retry)."""
    last = next((line for line in reversed(history) if line.get("date") == day), None)
    return None if last is None or last.get("decision") == registry.FAILED else last


def once(model: str, day: dt.date) -> str | None:
    """Why a night of the model folder ``model`` on ``day`` that the day-landed trigger or the schedule started does
    not run (None: it runs): the night already ran, by its history line."""
    line = ran(registry.history(model), day.isoformat())
    if line is None:
        return None
    by = f" by {line['by']}" if line.get("by") else ""
    return (f"the night {day} already ran ({line.get('decision')}{by} at {line.get('at')}): a night the day-landed "
            f"trigger or the schedule starts runs once a day. To run it again, Run the pipeline with date {day}")
