"""A model's pictures over nights: a date axis ticks whole days (matplotlib's default put 12-hour ticks between
three nights), every day up to ``MAX_TICKS`` days, then every n-th."""

from __future__ import annotations

from datetime import date, timedelta

import matplotlib.dates as mdates
import matplotlib.pyplot as plt

from models import plots


def _ticks(days: int) -> list[date]:
    start = date(2026, 11, 4)
    series = [start + timedelta(d) for d in range(days)]
    fig, ax = plt.subplots()
    ax.plot(series, range(days), "o-")
    plots._daily(ax, series)
    fig.canvas.draw()
    ticks = [mdates.num2date(t).date() for t in ax.get_xticks()]
    plt.close(fig)
    return [t for t in ticks if series[0] <= t <= series[-1]]


def test_date_axes_tick_whole_days():
    assert _ticks(3) == [date(2026, 11, 4), date(2026, 11, 5), date(2026, 11, 6)]
    ticks = _ticks(60)   # two months of nights: every 5th day, never more than MAX_TICKS
    assert len(ticks) <= plots.MAX_TICKS and {(b - a).days for a, b in zip(ticks, ticks[1:])} == {5}


def test_a_first_nights_axis_spans_its_day_not_years():
    """One night's axis (a model's first): matplotlib widened it to four years, ~1,500 daily ticks drawn (10
    CPU-seconds a picture); it spans the day and half a day either side."""
    day = date(2026, 11, 4)
    fig, ax = plt.subplots()
    ax.plot([day], [0.7], "o-")
    plots._daily(ax, [day])
    fig.canvas.draw()
    assert [mdates.num2date(t).date() for t in ax.get_xticks()] == [day]
    plt.close(fig)
