"""The data gate: each day of a dated run's window against the days before it, from the profiles the parse recorded
for every input file (``preprocessing.profile``: rows, positives, missing values, histograms, top values; no pass
over the data), with the thresholds of ``DataCheckConfig`` (docs/nightly.md).

``day_stats`` sums a day's file profiles; ``check`` runs every check and returns each result (``Check``: day,
feature, check, value, threshold, passed); ``summary`` is what the model's history records of a night. A failing
check fails the night before training (``on_data_check: fail``) or keeps the champion (``warn``:
``decision.decide`` refuses with it)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from nightly.config import DataCheckConfig

CHECKS = ("rows", "label_rate", "min_rows", "min_positives", "missing", "unseen", "drift", "psi")
SMOOTHING = 0.5   # added to every bin's count in the PSI (a bin one side lacks has no infinite term)


@dataclass(frozen=True)
class DayStats:
    """One day's sums of its input files' profiles."""

    day: str
    rows: int
    positives: int
    missing: dict[str, int]                  # feature -> missing values
    histograms: dict[str, dict[str, int]]    # numerical -> fixed bin -> values (missing ones left out)
    values: dict[str, int] = field(default_factory=dict)             # categorical -> its values counted
    top: dict[str, dict[object, int]] = field(default_factory=dict)  # categorical -> value -> count


def _add(dicts: list[dict]) -> dict:
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def day_stats(day: str, profiles: list[dict]) -> DayStats:
    """The stats of ``day`` from its files' profiles (``preprocessing.profile``); a categorical's top values are
    the sum of the files' top lists, kept where every file has them."""
    first = profiles[0] if profiles else {"histograms": {}}
    counted = bool(profiles) and all("top" in p for p in profiles)
    return DayStats(day, sum(p["rows"] for p in profiles), sum(p["positives"] for p in profiles),
                    _add([p["missing"] for p in profiles]),
                    {n: _add([p["histograms"][n] for p in profiles]) for n in first["histograms"]},
                    _add([p["values"] for p in profiles]) if counted else {},
                    {f: _add([dict(zip(p["top"][f]["values"], p["top"][f]["counts"])) for p in profiles])
                     for f in first["top"]} if counted else {})


def pool(days: list[DayStats]) -> DayStats:
    """Several days as one (counts summed; top values where every day has them)."""
    counted = all(d.top for d in days)
    return DayStats("before", sum(d.rows for d in days), sum(d.positives for d in days),
                    _add([d.missing for d in days]),
                    {n: _add([d.histograms.get(n, {}) for d in days]) for n in days[-1].histograms},
                    _add([d.values for d in days]) if counted else {},
                    {f: _add([d.top.get(f, {}) for d in days]) for f in days[-1].top} if counted else {})


@dataclass(frozen=True)
class Check:
    """One check's result: ``value`` against ``threshold`` (a bound, or [low, high] for ``op`` "in")."""

    day: str
    feature: str | None
    check: str
    value: float
    op: str                          # "<=", ">=" or "in"
    threshold: float | list[float]
    passed: bool
    against: str = ""                # what the threshold was derived from

    def text(self) -> str:
        """e.g. ``day 2026-11-05, feature C3: drift 0.41 > 0.1 (...)``."""
        where = f"day {self.day}" + (f", feature {self.feature}" if self.feature else "")
        if self.op == "in":
            low, high = self.threshold
            rule = f"{'within' if self.passed else 'outside'} [{_num(low)}, {_num(high)}]"
        else:
            sign = {"<=": (">", "<="), ">=": ("<", ">=")}[self.op][self.passed]
            rule = f"{sign} {_num(self.threshold)}"
        return f"{where}: {self.check} {_num(self.value)} {rule}" + (f" ({self.against})" if self.against else "")

    def row(self) -> dict:
        """The check as a JSON object (the history's and the table's row)."""
        return asdict(self)


def _num(x: float) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def psi(day: dict[str, int], before: dict[str, int]) -> float:
    """The population stability index of two histograms over the same fixed bins (counts; each bin + ``SMOOTHING``)."""
    bins = set(day) | set(before)
    n, m = sum(day.values()) + SMOOTHING * len(bins), sum(before.values()) + SMOOTHING * len(bins)
    total = 0.0
    for b in bins:
        p, q = (day.get(b, 0) + SMOOTHING) / n, (before.get(b, 0) + SMOOTHING) / m
        total += (p - q) * math.log(p / q)
    return total


def top_distance(day: dict, day_values: int, before: dict, before_values: int, k: int) -> tuple[float, object]:
    """(L-infinity distance, the value where it is largest) of the two sides' shares over the ``k`` most frequent
    values of each (a value outside one side's top list counts 0 there)."""
    def top(counts: dict) -> list:
        return sorted(counts, key=lambda v: (-counts[v], str(v)))[:k]

    worst, where = 0.0, None
    for v in dict.fromkeys(top(before) + top(day)):
        gap = abs(_share(day.get(v, 0), day_values) - _share(before.get(v, 0), before_values))
        if gap > worst:
            worst, where = gap, v
    return worst, where


def check_day(day: DayStats, before: list[DayStats], config: DataCheckConfig) -> list[Check]:
    """The checks of ``day`` against the days ``before`` it (none: no check): rows, label rate, and per feature
    its missing share and its drift (categoricals: ``drift`` of the top values' shares; numericals: ``psi``)."""
    if not before:
        return []
    ref = pool(before)
    span = f"{len(before)} day{'s' if len(before) > 1 else ''} before"
    out = []
    median = statistics.median(d.rows for d in before)
    low, high = config.rows_band
    out.append(Check(day.day, None, "rows", day.rows, "in", [low * median, high * median],
                     low * median <= day.rows <= high * median, f"{low:g}x-{high:g}x the median {median:g} of the {span}"))
    if ref.rows:
        rate, c = _share(ref.positives, ref.rows), config.label_rate_change
        mine = _share(day.positives, day.rows)
        band = [rate * (1 - c), rate * (1 + c)]
        out.append(Check(day.day, None, "label_rate", mine, "in", band, band[0] <= mine <= band[1],
                         f"{rate:.4g} of the {span} +-{c:.0%}"))
    for f in sorted(day.missing, key=_feature_order):
        share, theirs, d = _share(day.missing[f], day.rows), _share(ref.missing.get(f, 0), ref.rows), config.missing_change
        band = [max(0.0, theirs - d), min(1.0, theirs + d)]
        out.append(Check(day.day, f, "missing", share, "in", band, band[0] <= share <= band[1],
                         f"{theirs:.4g} of the {span} +-{d:g}"))
    for f in sorted(day.top, key=_feature_order):
        if f not in ref.top or not day.values.get(f) or not ref.values.get(f):
            continue
        gap, where = top_distance(day.top[f], day.values[f], ref.top[f], ref.values[f], config.top_values)
        out.append(Check(day.day, f, "drift", gap, "<=", config.max_drift, gap <= config.max_drift,
                         f"largest change of a top-{config.top_values} value's share against the {span}"
                         + (f", at value {where!r}" if where is not None and gap > config.max_drift else "")))
    for n in sorted(day.histograms, key=_feature_order):
        if not sum(day.histograms[n].values()) or not sum(ref.histograms.get(n, {}).values()):
            continue   # no value on one side: the missing share tells
        score = psi(day.histograms[n], ref.histograms[n])
        out.append(Check(day.day, n, "psi", score, "<=", config.max_psi, score <= config.max_psi,
                         f"PSI over fixed bins against the {span}"))
    return out


def check_test_day(day: DayStats, config: DataCheckConfig, unseen: dict[str, float] | None = None,
                   unseen_before: dict[str, float] | None = None, before_day: str | None = None) -> list[Check]:
    """The test day's own checks: its rows and positives and, with a champion, per categorical its share of values
    without an index in the champion's vocabulary (``unseen``) against that of ``before_day``, the newest earlier
    day the champion never trained on (``unseen_before``)."""
    out = [Check(day.day, None, "min_rows", day.rows, ">=", config.min_rows, day.rows >= config.min_rows),
           Check(day.day, None, "min_positives", day.positives, ">=", config.min_positives,
                 day.positives >= config.min_positives)]
    for f in sorted(set(unseen or {}) & set(unseen_before or {}), key=_feature_order):
        share, bound = unseen[f], unseen_before[f] + config.unseen_increase
        out.append(Check(day.day, f, "unseen", share, "<=", bound, share <= bound,
                         f"share of values without an index in the champion's vocabulary: {unseen_before[f]:.4g} on "
                         f"{before_day} + {config.unseen_increase:g}"))
    return out


def check(days: list[DayStats], config: DataCheckConfig, unseen: dict[str, float] | None = None,
          unseen_before: dict[str, float] | None = None, before_day: str | None = None,
          test_day: str | None = None) -> list[Check]:
    """Every check of a window's ``days`` (oldest first): each day against the days before it, then the test day's
    own (``check_test_day``) where the last day is the test day (``test_day``; default: it is)."""
    out = []
    for k, day in enumerate(days):
        out += check_day(day, days[:k], config)
    if days and days[-1].day == (test_day or days[-1].day):
        out += check_test_day(days[-1], config, unseen, unseen_before, before_day)
    return out


def unseen_reference(days: list[str], window: list[str], date: str) -> str | None:
    """The day the test day's unseen shares are compared with: the newest of ``days`` (the window's, oldest first;
    the last is the test day) that a champion tested on ``date``, whose run read ``window`` (its train, val and test
    days), never trained or validated on; None where there is none (or the champion is not older than the test
    day)."""
    if not days or date >= days[-1]:
        return None
    trained = set(window) - {date}
    return next((d for d in reversed(days[:-1]) if d not in trained), None)


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.passed]


def summary(checks: list[Check], mode: str, test_day: str | None = None, unchecked: list[str] = ()) -> dict:
    """What the model's history records of a night's checks: the mode, the counts, every failed check and the test
    day's checks (its drift and shares, night after night; default: the newest day checked), and the days without a
    stored profile."""
    test_day = test_day or max((c.day for c in checks), default=None)
    return {"on_data_check": mode, "checks": len(checks), "failed": [c.row() for c in failed(checks)],
            "test_day": [c.row() for c in checks if c.day == test_day], "unchecked": list(unchecked)}


def refusals(recorded: dict | None) -> list[str]:
    """The failed checks of a night's ``summary`` as the decision's refusals."""
    return [Check(**row).text() for row in (recorded or {}).get("failed", [])]


def _feature_order(name: str) -> tuple:
    """I2 before I10: the name's letters, then its number."""
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return (head, int(tail) if tail else -1, name)
