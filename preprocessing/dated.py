"""Dated inputs: URI templates that hold ``{date}`` (ISO) or ``{date:%Y/%m/%d}`` (strftime): ``fill_date`` fills
one for a day, ``day_of`` finds the day a URI belongs to, ``check_template`` refuses a template that cannot be
filled, ``dated_part`` and ``as_glob`` find a template's day folders. The dated window (``nightly.window``), the
store's clean-up (``models.gc``) and the day-landed sensor (``nightly.landing``) read them."""

from __future__ import annotations

import datetime as dt
import re

from common.errors import UserError

_PLACEHOLDER = re.compile(r"\{date(?::([^{}]*))?\}")
_BRACES = re.compile(r"[{}]")


def is_dated(uri: str) -> bool:
    """Whether ``uri`` holds a ``{date}`` placeholder."""
    return bool(_PLACEHOLDER.search(uri))


def fill_date(template: str, day: dt.date) -> str:
    """``template`` with its ``{date}`` / ``{date:FORMAT}`` placeholders filled in for ``day``."""
    def fill(m: re.Match) -> str:
        fmt = m.group(1)
        return day.isoformat() if not fmt else day.strftime(fmt)

    uri = _PLACEHOLDER.sub(fill, template)
    if _BRACES.search(uri):
        raise UserError(f"input template '{template}': only {{date}} or {{date:FORMAT}} (strftime, e.g. "
                        "{date:%Y/%m/%d}) may appear in braces. Fix: correct the placeholder.")
    return uri


def check_template(template: str) -> None:
    """Fail on a template whose placeholders cannot be filled (unknown names, a format without a % field)."""
    for m in _PLACEHOLDER.finditer(template):
        if m.group(1) is not None and "%" not in m.group(1):
            raise UserError(f"input template '{template}': format '{m.group(1)}' has no strftime field. Fix: use "
                            "e.g. {date:%Y/%m/%d}, or {date} for YYYY-MM-DD.")
    fill_date(template, dt.date(2000, 1, 1))


def day_of(templates: list[str], uri: str) -> dt.date | None:
    """The day whose inputs ``uri`` is one of (by the templates, globs allowed), None when it is none of theirs."""
    for t in templates:
        formats, pattern, last = [], "", 0
        for m in _PLACEHOLDER.finditer(t):
            pattern += _glob_regex(t[last:m.start()]) + "(.+?)"
            formats.append(m.group(1) or "%Y-%m-%d")
            last = m.end()
        match = re.fullmatch(pattern + _glob_regex(t[last:]), uri) if formats else None
        if not match:
            continue
        try:
            days = {dt.datetime.strptime(text, fmt).date() for text, fmt in zip(match.groups(), formats)}
        except ValueError:
            continue
        if len(days) == 1:
            return days.pop()
    return None


def _glob_regex(text: str) -> str:
    return "".join("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch) for ch in text)


def dated_part(template: str) -> tuple[str, str]:
    """(the template up to the end of the last path component holding ``{date}``, the rest after its ``/``): for
    ``logs/{date}/part-*``, (``logs/{date}``, ``part-*``); for ``logs/{date}.tsv``, (``logs/{date}.tsv``, ``""``)."""
    last = list(_PLACEHOLDER.finditer(template))[-1].end()
    cut = template.find("/", last)
    return (template, "") if cut < 0 else (template[:cut], template[cut + 1:])


def as_glob(template: str) -> str:
    """``template`` with each ``{date}`` as a glob that any day's value matches (``{date}``: ``????-??-??``; a
    strftime format: ``%Y`` as ``????``, another field as ``*``), for listing the days there are."""
    def glob(m: re.Match) -> str:
        fmt = m.group(1) or "%Y-%m-%d"
        return re.sub(r"\*+", "*", re.sub(r"%.", lambda f: {"%Y": "????", "%m": "??", "%d": "??"}.get(f.group(), "*"),
                                          fmt))

    return _PLACEHOLDER.sub(glob, template)
