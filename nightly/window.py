"""Rolling windows: a run is for a date; its input URI templates hold ``{date}`` (``preprocessing.dated``); the run
trains on the days before its date and tests on the date itself.

``window`` checks that every day a run needs is there (a missing day fails before any work, naming the date and
URI); its ``Window.inputs`` are the ``split=URI`` inputs of the `files` split rule (``fill_date`` fills a template)."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
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
    """The days of one run: training days, validation days and the test day (its date)."""

    templates: tuple[str, ...]
    date: dt.date
    train: tuple[dt.date, ...]
    val: tuple[dt.date, ...]
    missing: tuple[tuple[dt.date, str], ...] = ()   # (day, URI it looked for) left out of the window
    quarantined: tuple[tuple[dt.date, str], ...] = ()   # (day, why) left out: the data gate's verdict

    @property
    def days(self) -> tuple[dt.date, ...]:
        """Every day the run reads, oldest first."""
        return self.train + self.val + (self.date,)

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
        text = (f"window for {self.date}: train {_span(self.train)}, val {_span(self.val)}, test {self.date}")
        if self.missing:
            text += "; missing days left out: " + ", ".join(f"{d} ({uri})" for d, uri in self.missing)
        if self.quarantined:
            text += "; quarantined days left out: " + ", ".join(f"{d} ({why})" for d, why in self.quarantined)
        return text


def _span(days: tuple[dt.date, ...]) -> str:
    return str(days[0]) if len(days) == 1 else f"{days[0]}..{days[-1]} ({len(days)} days)"


def window(templates: list[str], date: dt.date, config: WindowConfig, check: bool = True,
           quarantined: dict[dt.date, str] | None = None) -> Window:
    """The window of ``date``, every day's inputs checked unless not ``check`` (fsspec): a missing test day, or
    fewer than ``min_days`` days before the date, fails before any work with the dates and URIs looked for. The
    ``quarantined`` days (day -> why: the data gate's verdicts) are left out as missing ones are; a quarantined test
    day fails."""
    if not config.train_days:
        raise UserError("the inputs hold {date} but no window is set. Fix: pass --train-days N (the days before "
                        "the run's date to train on).")
    templates = [t if "://" in t else os.path.abspath(t) for t in templates]   # runs may change directory
    for t in templates:
        check_template(t)
    if date - dt.date.min < dt.timedelta(days=config.train_days):
        raise UserError(f"the window for {date} would start {config.train_days} days before it, before the first "
                        f"date there is ({dt.date.min}). Fix: pass a later --date YYYY-MM-DD.")
    before = [date - dt.timedelta(days=k) for k in range(config.train_days, 0, -1)]
    lacking = {day: uri for day in (*before, date) for uri in [_missing(templates, day) if check else None] if uri}
    if date in lacking:
        raise UserError(f"no input for the test day {date}: nothing at {lacking[date]}. Fix: wait for that day's "
                        "logs, or run for another date (--date YYYY-MM-DD).")
    quarantined = {d: why for d, why in (quarantined or {}).items() if d in (*before, date) and d not in lacking}
    if date in quarantined:
        raise UserError(f"the test day {date} is quarantined ({quarantined[date]}). Fix: replace that day's logs (a "
                        "changed file is judged again), or accept it: dlrmflow days --model NAME accept "
                        f"{date} --why '...'.")
    present = [d for d in before if d not in lacking and d not in quarantined]
    needed = config.min_days or config.train_days
    if len(present) < needed:
        left = [f"{len(lacking)} are missing: " + ", ".join(f"{d} ({uri})" for d, uri in lacking.items())] \
            if lacking else []
        left += [f"{len(quarantined)} quarantined: " + "; ".join(f"{d} ({why})" for d, why in quarantined.items())] \
            if quarantined else []
        accept = ", accept a quarantined day (dlrmflow days --model NAME accept DATE)" if quarantined else ""
        raise UserError(f"the window for {date} needs {needed} of the {config.train_days} days before it, but "
                        f"{' and '.join(left)}. Fix: add those days' logs{accept}, or lower --min-days.")
    val = min(config.val_days, len(present) - 1)
    return Window(tuple(templates), date, tuple(present[:len(present) - val]), tuple(present[len(present) - val:]),
                  tuple(lacking.items()), tuple(sorted(quarantined.items())))


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
