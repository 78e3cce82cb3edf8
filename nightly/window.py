"""Rolling windows: a run is for a date; its input URI templates hold ``{date}`` (``preprocessing.dated``); the run
trains on the days before its date and tests on the date itself.

``window`` finds the days a run trains on: the last ``train_days`` days before its date that it may read, reaching
back (``lookback``) past quarantined days and, with ``skip_missing``, missing ones; too few fails before any work,
naming the dates and URIs. Its ``Window.inputs`` are the ``split=URI`` inputs of the `files` split rule
(``fill_date`` fills a template)."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, replace
from zoneinfo import ZoneInfo

from common.errors import UserError
from common.store import filesystem
from nightly.config import WindowConfig
from preprocessing.dated import check_template, day_of, fill_date


def run_date(given: dt.date | str | None, scheduled: dt.datetime | None, config: WindowConfig) -> dt.date:
    """The run's date: ``given``, else the scheduled time (now when None) in the window's time zone minus the lag."""
    if given:
        return given if isinstance(given, dt.date) else parse_date(given)
    when = scheduled or dt.datetime.now(dt.timezone.utc)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(ZoneInfo(config.timezone)).date() - dt.timedelta(days=config.lag_days)


def catchup_skip(day: dt.date, catchup: str, due: list[dt.date], decided: list[dt.date]) -> str | None:
    """Why a scheduled night for ``day`` is skipped under the ``catchup`` policy, or None when it runs.
    ``due``: the nights of the other runs of its deployment that are due (scheduled no later than now) and not
    finished; ``decided``: the nights the model already decided. ``all`` runs every night; ``latest`` skips a
    night when a newer one is due or decided (after an outage, only the newest night trains)."""
    if catchup == "all":
        return None
    if newer := [d for d in due if d > day]:
        return f"catchup latest: a newer night ({max(newer)}) is due too"
    if later := [d for d in decided if d > day]:
        return f"catchup latest: the model already decided a later night ({max(later)})"
    return None


def parse_date(text: str) -> dt.date:
    """A YYYY-MM-DD date, else a UserError."""
    try:
        return dt.date.fromisoformat(str(text).strip())
    except ValueError:
        raise UserError(f"date {text!r} is not a date. Fix: use YYYY-MM-DD, e.g. 2026-11-20.") from None


@dataclass(frozen=True)
class Window:
    """The days of one run: training days, validation days and the test day (its date); the days it left out and
    how many it wanted (``wanted``: train_days; it reached back past the days it left out to find them)."""

    templates: tuple[str, ...]
    date: dt.date
    train: tuple[dt.date, ...]
    val: tuple[dt.date, ...]
    missing: tuple[tuple[dt.date, str], ...] = ()   # (day, URI it looked for) left out of the window
    quarantined: tuple[tuple[dt.date, str], ...] = ()   # (day, why) left out: the data gate's verdict
    wanted: int = 0                # train_days (0: as many as it holds)
    skip_missing: bool = False     # the missing days were reached past (else each left a hole)
    looked: dt.date | None = None  # the oldest day it looked at
    learned: tuple[dt.date, ...] = ()   # training days left out: the warm start's champion already learned them

    @property
    def days(self) -> tuple[dt.date, ...]:
        """Every day the run reads, oldest first."""
        return self.train + self.val + (self.date,)

    @property
    def reached(self) -> bool:
        """Whether the window starts before the plain one (train_days before its date): it reached back past
        days it left out."""
        return self._found[0] < self.date - dt.timedelta(days=self.wanted or len(self._found) - 1)

    @property
    def _found(self) -> tuple[dt.date, ...]:
        """The days the window found, those the warm start leaves out included, oldest first."""
        return tuple(sorted(self.learned + self.days))

    def next_start(self) -> dt.date:
        """The first day the next night's window may read while today's verdicts stand: never before this window's
        second day (it reaches back past the same days, to one day fewer of them), nor after the day after the plain
        window's first (what a missing day may still fill)."""
        found = self._found
        return min(self.date + dt.timedelta(days=1 - (self.wanted or len(found) - 1)), found[1])

    def after(self, learned: dt.date) -> "Window":
        """This window training only on its days after ``learned`` (the last day a warm start's champion trained
        on); unchanged when that would leave no training day (or none is left out)."""
        train = tuple(d for d in self.train if d > learned)
        if not train or train == self.train:
            return self
        return replace(self, train=train, learned=tuple(d for d in self.train if d <= learned))

    def inputs(self) -> list[str]:
        """The ``split=URI`` inputs (the `files` split rule): train, then val, then test."""
        return [f"{split}={fill_date(t, day)}" for split, days in (("train", self.train), ("val", self.val),
                                                                 ("test", (self.date,)))
                for day in days for t in self.templates]

    def test_inputs(self) -> list[str]:
        """The test day's input URIs (globs as given)."""
        return [fill_date(t, self.date) for t in self.templates]

    def owns(self, uri: str) -> dt.date | None:
        """The day of an input file ``uri`` of these templates, None when it is not one of theirs."""
        return day_of(list(self.templates), uri)

    def describe(self) -> str:
        """The window in one log line: its days, how far it reached back past which days, what it left out."""
        text = (f"window for {self.date}: train {_span(self.train)}, val {_span(self.val)}, test {self.date}")
        past = [f"quarantined {_listed(self.quarantined)}"] if self.quarantined else []
        holes = self.missing if not self.skip_missing else ()
        past += [f"missing {_listed(self.missing)}"] if self.missing and self.skip_missing else []
        if past:
            text += (f"; reached back to {self._found[0]} past " if self.reached else "; left out ") + \
                " and ".join(past)
        if holes:
            text += f"; missing days left out: {_listed(holes)}"
        if self.learned:
            text += (f"; trains only on what the champion has not learned: {_span(self.learned)} left out "
                     "(it trained on them)")
        if self.wanted and len(self.days) - 1 + len(self.learned) < self.wanted:
            text += f"; {len(self.days) - 1} of its {self.wanted} days (looked back to {self.looked})"
        return text


def _span(days: tuple[dt.date, ...]) -> str:
    return str(days[0]) if len(days) == 1 else f"{days[0]}..{days[-1]} ({len(days)} days)"


def _listed(days) -> str:
    return ", ".join(f"{d} ({why})" for d, why in days)


def absolute(templates: list[str]) -> tuple[str, ...]:
    """The input templates, local ones made absolute (runs may change directory), each checked."""
    templates = tuple(t if "://" in t else os.path.abspath(t) for t in templates)
    for t in templates:
        check_template(t)
    return templates


def lookback(date: dt.date, config: WindowConfig) -> tuple[dt.date, ...]:
    """Every day a window of ``date`` may read, oldest first, the date last: ``config.reach()`` days before it (never
    before the first date there is)."""
    reach = min(config.reach(), (date - dt.date.min).days)
    return tuple(date - dt.timedelta(days=k) for k in range(reach, -1, -1))


def window(templates: list[str], date: dt.date, config: WindowConfig, check: bool = True,
           quarantined: dict[dt.date, str] | None = None) -> Window:
    """The window of ``date``: the ``train_days`` days before it, reaching back past quarantined days
    (``quarantined``: day -> why, the data gate's verdicts) and, with ``skip_missing``, past missing ones, no
    further than ``config.reach()`` days before the date, so that a bad day leaves the window full. Every day's
    inputs are checked unless not ``check`` (fsspec). Fails before any work, naming the dates and URIs: a missing
    or quarantined test day, or fewer than ``min_days`` (default train_days) days found (a missing day without
    ``skip_missing`` holds its place: it may just be late)."""
    if not config.train_days:
        raise UserError("the inputs hold {date} but no window is set. Fix: pass --train-days N (the days before "
                        "the run's date to train on).")
    templates = absolute(templates)
    if date - dt.date.min < dt.timedelta(days=config.train_days):
        raise UserError(f"the window for {date} would start {config.train_days} days before it, before the first "
                        f"date there is ({dt.date.min}). Fix: pass a later --date YYYY-MM-DD.")
    if check and (uri := _missing(templates, date)):
        raise UserError(f"no input for the test day {date}: nothing at {uri}. Fix: wait for that day's "
                        "logs, or run for another date (--date YYYY-MM-DD).")
    quarantined = quarantined or {}
    if date in quarantined:
        raise UserError(f"the test day {date} is quarantined ({quarantined[date]}). Fix: replace that day's logs (a "
                        "changed file is judged again), or accept it: dlrmflow days --model NAME accept "
                        f"{date} --why '...'.")
    found, missing, passed = [], [], []   # accepted days, missing ones (day, URI), quarantined ones passed
    holes, looked = 0, date
    for day in reversed(lookback(date, config)[:-1]):
        if len(found) + holes == config.train_days:
            break
        looked = day
        if day in quarantined:
            passed.append(day)
        elif uri := (_missing(templates, day) if check else None):
            missing.append((day, uri))
            holes += not config.skip_missing
        else:
            found.append(day)
    if len(found) < (config.min_days or config.train_days):
        raise UserError(_too_few(date, config, found, missing, {d: quarantined[d] for d in passed}, looked,
                                 exhausted=len(found) + holes < config.train_days))
    found.reverse()
    val = min(config.val_days, len(found) - 1)
    return Window(templates, date, tuple(found[:len(found) - val]), tuple(found[len(found) - val:]),
                  tuple(reversed(missing)), tuple((d, quarantined[d]) for d in reversed(passed)), config.train_days,
                  config.skip_missing, looked)


def _too_few(date: dt.date, config: WindowConfig, found: list[dt.date], missing: list[tuple[dt.date, str]],
             quarantined: dict[dt.date, str], looked: dt.date, exhausted: bool) -> str:
    """The one line of a window that found too few days: what it needs, how far it looked, each day left out and
    why, and the fixes that apply."""
    needed = config.min_days or config.train_days
    where = f"back to {looked}" + (f" (its look-back, --lookback-days {config.reach()})" if exhausted else "")
    left = [f"{len(missing)} missing: " + ", ".join(f"{d} ({uri})" for d, uri in reversed(missing))] \
        if missing else []
    left += [f"{len(quarantined)} quarantined: " + "; ".join(f"{d} ({why})" for d, why in
                                                           reversed(quarantined.items()))] if quarantined else []
    fixes = ["add the missing days' logs" + ("" if config.skip_missing else " (or pass --skip-missing to reach back "
                                                                          "past them)")] if missing else []
    fixes += ["accept a quarantined day (dlrmflow days --model NAME accept DATE)"] if quarantined else []
    fixes += ["raise --lookback-days"] if exhausted else []
    return (f"the window for {date} needs {needed} of the {config.train_days} days before it, but found {len(found)} "
            f"{where}: {' and '.join(left)}. Fix: {', '.join(fixes + ['or lower --min-days'])}.")


def _missing(templates: list[str], day: dt.date) -> str | None:
    """The first URI of ``day`` that matches no file, else None."""
    for t in templates:
        uri = fill_date(t, day)
        try:
            fs, path = filesystem(uri)
            found = fs.glob(path) if any(ch in path for ch in "*?[") else fs.exists(path)
        except FileNotFoundError:
            found = False
        except (OSError, ValueError, ImportError) as e:
            raise UserError(f"input '{uri}' cannot be read: {e}. Fix: check the URI, the endpoint "
                            "(AWS_ENDPOINT_URL) and the credentials (AWS_* environment variables).") from None
        if not found:
            return uri
    return None
