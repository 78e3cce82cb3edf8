"""The data gate: each day a dated run reads is judged once, against the accepted days before it (their medians:
one bad day moves no threshold), from the profiles the parse recorded for every input file
(``preprocessing.profile``: rows, positives, missing values, histograms, top values; no pass over the data), with the
thresholds of ``DataCheckConfig`` (docs/nightly.md).

``day_stats`` sums a day's file profiles; ``judge`` checks a window's days (``Check``: day, feature, check, value,
threshold, passed) and gives each its verdict: accepted, or quarantined with its failed checks. A verdict stands
(a model's ``days.jsonl``, ``models.registry.record_verdicts``) until the day's files change or an operator
overrides it (``dlrmflow days``); ``unparsed`` is the verdict on a day whose parse failed on its own file (no
profile to judge). A quarantined day is left out of every window (``nightly.window``); a quarantined
test day fails the night (``on_data_check: fail``) or keeps the champion (``warn``: ``decision.decide`` refuses with
its checks). ``summary`` is what the model's history records of a night."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from nightly.config import DataCheckConfig

CHECKS = ("rows", "label_rate", "min_rows", "min_positives", "missing", "unseen", "drift", "psi")
SMOOTHING = 0.5   # added to every bin's count in the PSI (a bin one side lacks has no infinite term)
SHOWN = 5         # failed checks a verdict's reason names (all are in its line)


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


@dataclass(frozen=True)
class Reference:
    """The accepted days a day is judged against, as medians over those days (a bad day among them moves no
    threshold): rows, label rate, each feature's missing share, each categorical's top values' shares, each
    numerical's histogram shares."""

    days: int
    rows: float
    rate: float | None
    missing: dict[str, float]
    top: dict[str, dict[object, float]]
    histograms: dict[str, dict[str, float]]   # numerical -> bin -> median share x median count of values


def _median_shares(shares: list[dict]) -> dict:
    """Per key, the median of its share over ``shares`` (a key a day lacks counts 0 there)."""
    keys = dict.fromkeys(k for d in shares for k in d)
    return {k: statistics.median(d.get(k, 0.0) for d in shares) for k in keys}


def reference(days: list[DayStats]) -> Reference:
    """The medians of ``days`` (accepted days, at least one)."""
    rated = [d for d in days if d.rows]
    counted = [d for d in days if d.top]
    return Reference(
        len(days), statistics.median(d.rows for d in days),
        statistics.median(_share(d.positives, d.rows) for d in rated) if rated else None,
        _median_shares([{f: _share(n, d.rows) for f, n in d.missing.items()} for d in rated]),
        {f: _median_shares([{v: _share(c, d.values.get(f, 0)) for v, c in d.top.get(f, {}).items()}
                            for d in counted if d.values.get(f)])
         for f in (days[-1].top if len(counted) == len(days) else {})},
        {n: _median_histogram([d.histograms[n] for d in days if sum(d.histograms.get(n, {}).values())])
         for n in days[-1].histograms})


def _median_histogram(histograms: list[dict[str, int]]) -> dict[str, float]:
    """Per bin, the median of its share, scaled to the median count of values (as counts: the PSI's smoothing
    weighs as it does on one day); {} without a histogram."""
    if not histograms:
        return {}
    size = statistics.median(sum(h.values()) for h in histograms)
    return {b: share * size for b, share in _median_shares([{b: c / sum(h.values()) for b, c in h.items()}
                                                             for h in histograms]).items()}


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
    """The checks of ``day`` against the accepted days ``before`` it (none: no check), by their medians
    (``reference``): rows, label rate, and per feature its missing share and its drift (categoricals: ``drift`` of
    the top values' shares; numericals: ``psi``)."""
    if not before:
        return []
    ref = reference(before)
    span = f"{len(before)} accepted day{'s' if len(before) > 1 else ''} before"
    out = []
    low, high = config.rows_band
    out.append(Check(day.day, None, "rows", day.rows, "in", [low * ref.rows, high * ref.rows],
                     low * ref.rows <= day.rows <= high * ref.rows,
                     f"{low:g}x-{high:g}x the median {ref.rows:g} of the {span}"))
    if ref.rate is not None:
        rate, c = ref.rate, config.label_rate_change
        mine = _share(day.positives, day.rows)
        band = [rate * (1 - c), rate * (1 + c)]
        out.append(Check(day.day, None, "label_rate", mine, "in", band, band[0] <= mine <= band[1],
                         f"the median {rate:.4g} of the {span} +-{c:.0%}"))
    for f in sorted(day.missing, key=_feature_order):
        share, theirs, d = _share(day.missing[f], day.rows), ref.missing.get(f, 0.0), config.missing_change
        band = [max(0.0, theirs - d), min(1.0, theirs + d)]
        out.append(Check(day.day, f, "missing", share, "in", band, band[0] <= share <= band[1],
                         f"the median {theirs:.4g} of the {span} +-{d:g}"))
    for f in sorted(day.top, key=_feature_order):
        if not ref.top.get(f) or not day.values.get(f):
            continue
        gap, where = top_distance(day.top[f], day.values[f], ref.top[f], 1.0, config.top_values)
        out.append(Check(day.day, f, "drift", gap, "<=", config.max_drift, gap <= config.max_drift,
                         f"largest change of a top-{config.top_values} value's share against the median of the {span}"
                         + (f", at value {where!r}" if where is not None and gap > config.max_drift else "")))
    for n in sorted(day.histograms, key=_feature_order):
        if not sum(day.histograms[n].values()) or not ref.histograms.get(n):
            continue   # no value on one side: the missing share tells
        score = psi(day.histograms[n], ref.histograms[n])
        out.append(Check(day.day, n, "psi", score, "<=", config.max_psi, score <= config.max_psi,
                         f"PSI over fixed bins against the median of the {span}"))
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


ACCEPTED, QUARANTINED = "accepted", "quarantined"
GATE = "data gate"   # who judged, in the verdicts the checks made (an operator's name the others)


def standing(lines: list[dict], day: str, files: dict[str, str] | None) -> dict | None:
    """The standing verdict on ``day`` among ``lines`` (a model's ``days.jsonl``, oldest first): its last line whose
    files are the day's files now (an operator's line recorded without files holds whatever they are); None when
    the day is to be judged (never judged, or its files changed since: a re-uploaded day is judged again)."""
    return next((line for line in reversed(lines) if line.get("day") == day
                 and (line.get("files") is None or line.get("files") == files)), None)


@dataclass(frozen=True)
class Judgment:
    """A window's days judged: every check run (each day against the accepted days before it, the test day's own
    checks too), each day's verdict line (standing or new) and the lines made now (to be recorded)."""

    checks: list[Check]
    verdicts: dict[str, dict]
    new: list[dict]

    def quarantined(self) -> dict[str, str]:
        """Day -> why, for the days whose verdict is quarantined."""
        return {d: v.get("why") or "quarantined" for d, v in self.verdicts.items() if v["verdict"] == QUARANTINED}


def judge(days: list[DayStats], files: dict[str, dict[str, str]], lines: list[dict], config: DataCheckConfig,
          unseen: dict[str, float] | None = None, unseen_before: dict[str, float] | None = None,
          before_day: str | None = None, test_day: str | None = None, at: str = "") -> Judgment:
    """Judge a window's ``days`` (oldest first; the last is the test day ``test_day``, default: it is), each once:
    a day with a standing verdict among ``lines`` (``standing``, by the day's input ``files``: URI -> identity) keeps
    it; any other is checked against the days before it that are accepted (their medians: a quarantined day is no
    one's reference) and quarantined when a check fails. Every day's checks are run (the history shows them)."""
    checks, verdicts, new, accepted = [], {}, [], []
    last = days[-1].day if days else None
    for day in days:
        mine = check_day(day, accepted, config)
        if day.day == (test_day or last):
            mine += check_test_day(day, config, unseen, unseen_before, before_day)
        checks += mine
        line = standing(lines, day.day, files.get(day.day))
        if line is None:
            bad = failed(mine)
            line = {"day": day.day, "files": files.get(day.day), "verdict": QUARANTINED if bad else ACCEPTED,
                    "failed": [c.row() for c in bad], "by": GATE,
                    "why": "; ".join(c.text() for c in bad[:SHOWN]) + (f"; and {len(bad) - SHOWN} more"
                                                                      if len(bad) > SHOWN else "") or None,
                    "at": at}
            new.append(line)
        verdicts[day.day] = line
        if line["verdict"] == ACCEPTED:
            accepted.append(day)
    return Judgment(checks, verdicts, new)


def unparsed(day: str, files: dict[str, str], error: str, at: str = "") -> dict:
    """The gate's verdict on a day whose parse failed on one of its own ``files`` (URI -> identity) with ``error``
    (its one line): quarantined, without checks (a failed parse stores no profile to check). It stands as
    ``judge``'s verdicts do, until the day's files change or an operator overrides it."""
    return {"day": day, "files": files, "verdict": QUARANTINED, "failed": [], "by": GATE,
            "why": f"its parse failed: {error}", "at": at}


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


def summary(judgment: Judgment, mode: str, test_day: str, unchecked: list[str] = ()) -> dict:
    """What the model's history records of a night's data gate: the mode, the count of checks, the test day's failed
    checks where its verdict is quarantined (they refuse a promotion under ``warn``), the test day's checks (its
    drift and shares, night after night), the window's days left out as quarantined (day -> why), every day's
    verdict and who gave it, and the days without a stored profile."""
    verdict = judgment.verdicts.get(test_day, {})
    bad = [c.row() for c in failed(judgment.checks) if c.day == test_day] if verdict.get("verdict") == QUARANTINED \
        else []
    if verdict.get("verdict") == QUARANTINED and not bad:   # quarantined by an operator: the verdict refuses
        bad = [Check(test_day, None, "verdict", 0, ">=", 1, False, f"quarantined by {verdict.get('by')}: "
                                                                    f"{verdict.get('why')}").row()]
    return {"on_data_check": mode, "checks": len(judgment.checks), "failed": bad,
            "test_day": [c.row() for c in judgment.checks if c.day == test_day],
            "left_out": {d: why for d, why in judgment.quarantined().items() if d != test_day},
            "verdicts": {d: f"{v['verdict']} ({v.get('by')})" for d, v in judgment.verdicts.items()},
            "unchecked": list(unchecked)}


def refusals(recorded: dict | None) -> list[str]:
    """The failed checks of a night's ``summary`` as the decision's refusals."""
    return [Check(**row).text() for row in (recorded or {}).get("failed", [])]


def _feature_order(name: str) -> tuple:
    """I2 before I10: the name's letters, then its number."""
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return (head, int(tail) if tail else -1, name)
