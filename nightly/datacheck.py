"""The data gate: each day a dated run reads is judged once, against the reference of the model's history (the
accepted days before it, by their medians: one bad day moves no threshold), from the profiles the parse recorded
for every input file (``preprocessing.profile``: rows, positives, missing values, histograms, top values, sampled
row hashes; no pass over the data), with the thresholds of ``DataCheckConfig`` (docs/nightly.md).

``day_stats`` sums a day's file profiles; ``judge`` checks a window's days (``Check``: day, feature, check, value,
threshold, passed) and gives each its verdict: accepted, or quarantined with its failed checks. A verdict line
keeps the day's compact stats (``DayStats.stored``), so the reference of a day is read from the model's
``days.jsonl`` alone (``History``: the last ``reference_days`` accepted days before it, since the latest new
normal; the last ``long_reference_days`` too, for slow drift); a model's first days, with fewer than
``min_reference_days`` accepted days before them, are judged against each other (the median of the
``reference_days`` days nearest them, themselves included) and on absolute bounds (``sanity``). When the last
``shift_days`` judged days were all quarantined but agree with each other, the gate reports a new normal since the
first of them (``History.new_normal``) and adopts it or asks the operator (``on_shift``; ``shift_lines``).

A verdict stands (``models.registry.record_verdicts``) until the day's content changes (``standing``, by the
files' size and version without the metadata-only parts: ``content``) or an operator overrides it (``dlrmflow
days``); ``unparsed`` is the verdict on a day whose parse failed on its own file (no profile to judge). A
quarantined day is left out of every window (``nightly.window``); a quarantined test day fails the night
(``on_data_check: fail``) or keeps the champion (``warn``: ``decision.decide`` refuses with its checks).
``summary`` is what the model's history records of a night."""

from __future__ import annotations

import datetime as dt
import math
import re
import statistics
from dataclasses import asdict, dataclass, field

from common.errors import bounded, quoted
from nightly.config import DataCheckConfig

CHECKS = ("rows", "label_rate", "min_rows", "min_positives", "min_negatives", "missing", "unseen", "drift", "psi",
          "duplicates", "rows_long", "label_rate_long")
SMOOTHING = 0.5   # added to every bin's count in the PSI (a bin one side lacks has no infinite term)
SHOWN = 5         # failed checks a verdict's reason names (all are in its line)
KEPT = 50         # a categorical's most frequent values a verdict line keeps (the drift compares top_values of them)
CUT = 64          # a string value's characters kept in the stats (a long value is its prefix)


def _cut(value):
    return value[:CUT] if isinstance(value, str) else value


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
    sampled: int = 0                         # rows in the duplicates' sample (``preprocessing.profile``)
    duplicates: float | None = None          # their share that repeat a row of the day (None: not sampled)

    def stored(self) -> dict:
        """The stats as a verdict line keeps them: each categorical's ``KEPT`` most frequent values."""
        top = {f: sorted(c.items(), key=lambda vc: (-vc[1], str(vc[0])))[:KEPT] for f, c in self.top.items()}
        return {"rows": self.rows, "positives": self.positives, "missing": self.missing,
                "histograms": self.histograms, "values": self.values,
                "top": {f: {"values": [v for v, _ in vc], "counts": [c for _, c in vc]} for f, vc in top.items()},
                "sampled": self.sampled, "duplicates": self.duplicates}

    @classmethod
    def from_stored(cls, day: str, stored: dict) -> "DayStats":
        """The stats a verdict line kept (``stored``)."""
        return cls(day, stored["rows"], stored["positives"], stored["missing"], stored["histograms"],
                   stored.get("values") or {},
                   {f: dict(zip(t["values"], t["counts"])) for f, t in (stored.get("top") or {}).items()},
                   stored.get("sampled") or 0, stored.get("duplicates"))


def _add(dicts: list[dict]) -> dict:
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _duplicates(profiles: list[dict]) -> tuple[int, float | None]:
    """(sampled rows, their share that repeat another) over the files' samples of row hashes, at the sparsest
    file's sample (``preprocessing.profile.duplicates``): a row repeated across the day's files counts too."""
    samples = [p.get("duplicates") for p in profiles]
    if not samples or any(s is None for s in samples):
        return 0, None
    bits = max(s["bits"] for s in samples)
    limit = 1 << (64 - bits)
    total, seen = 0, set()
    for s in samples:
        for h, c in zip(s["hashes"], s["counts"]):
            if h < limit:
                total += c
                seen.add(h)
    return total, (total - len(seen)) / total if total else None


def day_stats(day: str, profiles: list[dict]) -> DayStats:
    """The stats of ``day`` from its files' profiles (``preprocessing.profile``); a categorical's top values are
    the sum of the files' top lists (a string value cut to ``CUT`` characters), kept where every file has them."""
    first = profiles[0] if profiles else {"histograms": {}}
    counted = bool(profiles) and all("top" in p for p in profiles)
    sampled, duplicates = _duplicates(profiles)
    return DayStats(day, sum(p["rows"] for p in profiles), sum(p["positives"] for p in profiles),
                    _add([p["missing"] for p in profiles]),
                    {n: _add([p["histograms"][n] for p in profiles]) for n in first["histograms"]},
                    _add([p["values"] for p in profiles]) if counted else {},
                    {f: _add([{_cut(v): c for v, c in zip(p["top"][f]["values"], p["top"][f]["counts"])}
                              for p in profiles])
                     for f in first["top"]} if counted else {},
                    sampled, duplicates)


@dataclass(frozen=True)
class Reference:
    """The days a day is judged against, as medians over those days (a bad day among them moves no threshold):
    rows, label rate, each feature's missing share, each categorical's top values' shares, each numerical's
    histogram shares, the duplicated share."""

    days: int
    rows: float
    rate: float | None
    missing: dict[str, float]
    top: dict[str, dict[object, float]]
    histograms: dict[str, dict[str, float]]   # numerical -> bin -> median share x median count of values
    duplicates: float | None = None


def _median_shares(shares: list[dict]) -> dict:
    """Per key, the median of its share over ``shares`` (a key a day lacks counts 0 there)."""
    keys = dict.fromkeys(k for d in shares for k in d)
    return {k: statistics.median(d.get(k, 0.0) for d in shares) for k in keys}


def reference(days: list[DayStats]) -> Reference:
    """The medians of ``days`` (at least one)."""
    rated = [d for d in days if d.rows]
    counted = [d for d in days if d.top]
    sampled = [d.duplicates for d in days if d.duplicates is not None]
    return Reference(
        len(days), statistics.median(d.rows for d in days),
        statistics.median(_share(d.positives, d.rows) for d in rated) if rated else None,
        _median_shares([{f: _share(n, d.rows) for f, n in d.missing.items()} for d in rated]),
        {f: _median_shares([{v: _share(c, d.values.get(f, 0)) for v, c in d.top.get(f, {}).items()}
                            for d in counted if d.values.get(f)])
         for f in (days[-1].top if len(counted) == len(days) else {})},
        {n: _median_histogram([d.histograms[n] for d in days if sum(d.histograms.get(n, {}).values())])
         for n in days[-1].histograms},
        statistics.median(sampled) if sampled else None)


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


def check_day(day: DayStats, before: list[DayStats], config: DataCheckConfig, span: str | None = None) -> list[Check]:
    """The checks of ``day`` against the days ``before`` (none: no check), by their medians (``reference``): rows,
    label rate, and per feature its missing share and its drift (categoricals: ``drift`` of the top values' shares;
    numericals: ``psi``), the duplicated share; ``span`` says what the days are (default: the accepted days before
    it)."""
    if not before:
        return []
    ref = reference(before)
    span = span or f"{len(before)} accepted day{'s' if len(before) > 1 else ''} before"
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
                         + (f", at value {quoted(where)}" if where is not None and gap > config.max_drift else "")))
    for n in sorted(day.histograms, key=_feature_order):
        if not sum(day.histograms[n].values()) or not ref.histograms.get(n):
            continue   # no value on one side: the missing share tells
        score = psi(day.histograms[n], ref.histograms[n])
        out.append(Check(day.day, n, "psi", score, "<=", config.max_psi, score <= config.max_psi,
                         f"PSI over fixed bins against the median of the {span}"))
    if day.duplicates is not None and ref.duplicates is not None:
        bound = ref.duplicates + config.max_duplicates_increase
        out.append(Check(day.day, None, "duplicates", day.duplicates, "<=", bound, day.duplicates <= bound,
                         f"share of {day.sampled} sampled rows that repeat another: the median {ref.duplicates:.4g} "
                         f"of the {span} + {config.max_duplicates_increase:g}"))
    return out


def check_long(day: DayStats, before: list[DayStats], config: DataCheckConfig) -> list[Check]:
    """Rows and label rate of ``day`` against the median of the longer horizon ``before`` (``long_reference_days``
    accepted days before it): a slow drift, each day within the band of the few before it, moves out of this one."""
    ref = reference(before)
    span = f"{len(before)} accepted days before"
    low, high = config.long_rows_band
    out = [Check(day.day, None, "rows_long", day.rows, "in", [low * ref.rows, high * ref.rows],
                 low * ref.rows <= day.rows <= high * ref.rows,
                 f"{low:g}x-{high:g}x the median {ref.rows:g} of the {span}")]
    if ref.rate is not None:
        rate, c, mine = ref.rate, config.long_label_rate_change, _share(day.positives, day.rows)
        band = [rate * (1 - c), rate * (1 + c)]
        out.append(Check(day.day, None, "label_rate_long", mine, "in", band, band[0] <= mine <= band[1],
                         f"the median {rate:.4g} of the {span} +-{c:.0%}"))
    return out


def sanity(day: DayStats, config: DataCheckConfig) -> list[Check]:
    """A day's absolute bounds, whatever the days before it: its rows and its positive and negative labels (a
    label rate strictly between 0 and 1)."""
    negatives = day.rows - day.positives
    return [Check(day.day, None, "min_rows", day.rows, ">=", config.min_rows, day.rows >= config.min_rows),
            Check(day.day, None, "min_positives", day.positives, ">=", config.min_positives,
                  day.positives >= config.min_positives),
            Check(day.day, None, "min_negatives", negatives, ">=", config.min_positives,
                  negatives >= config.min_positives)]


def check_test_day(day: DayStats, config: DataCheckConfig, unseen: dict[str, float] | None = None,
                   unseen_before: dict[str, float] | None = None, before_day: str | None = None) -> list[Check]:
    """The test day's own checks: its absolute bounds (``sanity``) and, with a champion, per categorical its share of
    values without an index in the champion's vocabulary (``unseen``) against that of ``before_day``, the newest
    earlier day the champion never trained on (``unseen_before``)."""
    out = sanity(day, config)
    for f in sorted(set(unseen or {}) & set(unseen_before or {}), key=_feature_order):
        share, bound = unseen[f], unseen_before[f] + config.unseen_increase
        out.append(Check(day.day, f, "unseen", share, "<=", bound, share <= bound,
                         f"share of values without an index in the champion's vocabulary: {unseen_before[f]:.4g} on "
                         f"{before_day} + {config.unseen_increase:g}"))
    return out


ACCEPTED, QUARANTINED = "accepted", "quarantined"
GATE = "data gate"   # who judged, in the verdicts the checks made (an operator's name the others)
_METADATA = re.compile(r";(?:ino|ctime)=\d+")   # a local file's version parts that a chmod or a link changes


def content(files: dict[str, str] | None) -> dict[str, str] | None:
    """The part of the files' identities (URI -> ``InputFile.identity``) that a verdict compares: size and version
    without a local file's inode and ctime (size and mtime; S3: size and ETag). A metadata-only change (chmod,
    chown, a hard link) keeps the verdict; the parse's cache key keeps the whole identity."""
    return None if files is None else {u: _METADATA.sub("", i) for u, i in files.items()}


def standing(lines: list[dict], day: str, files: dict[str, str] | None) -> dict | None:
    """The standing verdict on ``day`` among ``lines`` (a model's ``days.jsonl``, oldest first): its last line whose
    files' content (``content``) is the day's now (an operator's line recorded without files holds whatever they
    are); None when the day is to be judged (never judged, or its content changed since: a re-uploaded day is
    judged again)."""
    now = content(files)
    return next((line for line in reversed(lines) if line.get("day") == day
                 and (line.get("files") is None or content(line.get("files")) == now)), None)


class History:
    """A model's judged days as the gate reads them from its ``days.jsonl`` lines (each day's last line), kept
    up to date with tonight's verdicts: the accepted days' stats (the references), the stats of every judged day,
    and the starts of new normals (a day's reference begins at the latest one not after it)."""

    def __init__(self, lines: list[dict]):
        self.last: dict[str, dict] = {}
        for line in lines:
            if line.get("day"):
                self.last[line["day"]] = line
        self.stats = {d: DayStats.from_stored(d, line["stats"]) for d, line in self.last.items()
                      if line.get("stats")}

    def set(self, day: DayStats, line: dict) -> None:
        """``day``'s verdict now is ``line``."""
        self.last[day.day] = line
        self.stats[day.day] = day

    def accepted(self, day: str, pending: list[DayStats] = ()) -> list[DayStats]:
        """The accepted days with stats since the new normal of ``day`` (``pending``: tonight's days not judged yet,
        counted as well), by date; ``day`` itself left out."""
        start = max((line["new_normal"] for line in self.last.values() if line.get("new_normal")
                     and line["verdict"] == ACCEPTED and line["new_normal"] <= day), default="")
        found = {d: self.stats[d] for d, line in self.last.items()
                 if line["verdict"] == ACCEPTED and d in self.stats and start <= d != day}
        found |= {p.day: p for p in pending if start <= p.day != day}
        return [found[d] for d in sorted(found)]

    def checks(self, day: DayStats, pending: list[DayStats], config: DataCheckConfig) -> list[Check]:
        """The checks of ``day`` against its reference: the last ``reference_days`` accepted days before it (and the
        last ``long_reference_days``: ``check_long``) where there are at least ``min_reference_days``; else the
        ``reference_days`` days nearest it among the accepted ones, tonight's ``pending`` ones and itself (a model's
        first days judged against each other: one outlier among them fails, not the others), and its absolute
        bounds (``sanity``)."""
        before = [d for d in self.accepted(day.day) if d.day < day.day]
        if len(before) >= config.min_reference_days:
            short = before[-config.reference_days:]
            out = check_day(day, short, config)
            long = before[-config.long_reference_days:]
            if len(long) > len(short):
                out += check_long(day, long, config)
            return out
        near = sorted([*self.accepted(day.day, pending), day], key=lambda d: (_distance(d.day, day.day), d.day))
        peers = sorted(near[:config.reference_days], key=lambda d: d.day)
        span = (f"{len(peers)} day{'s' if len(peers) > 1 else ''} judged together, itself included (fewer than "
                f"{config.min_reference_days} accepted days before it)")
        return check_day(day, peers, config, span) + sanity(day, config)

    def new_normal(self, config: DataCheckConfig, upto: str) -> list[str]:
        """The days of a new normal up to ``upto``: the last ``shift_days`` or more judged days, all quarantined by
        the gate's checks, that agree with each other (each passes every check against their median, and its
        absolute bounds); the longest such run, [] where there is none."""
        run = []
        for d in sorted((d for d in self.last if d <= upto), reverse=True):
            line = self.last[d]
            gate_quarantined = (line["verdict"], line.get("by")) == (QUARANTINED, GATE) and line.get("failed")
            if not gate_quarantined or d not in self.stats:
                break
            run.insert(0, d)
        for start in range(len(run) - config.shift_days + 1):
            days = [self.stats[d] for d in run[start:]]
            if not any(failed(check_day(d, days, config) + sanity(d, config)) for d in days):
                return run[start:]
        return []


def _distance(a: str, b: str) -> int:
    return abs((dt.date.fromisoformat(a) - dt.date.fromisoformat(b)).days)


def shift_lines(lines: list[dict], since: str, by: str, why: str, at: str = "") -> list[dict]:
    """The lines that accept a new normal since ``since``: that day and every later one whose verdict is the gate's
    quarantine (with its stats), accepted by ``by``; the days after them are judged against them (the reference
    starts at ``since``)."""
    history = History(lines)
    return [{"day": d, "files": line.get("files"), "verdict": ACCEPTED, "failed": [], "by": by, "why": why,
             "at": at, "stats": line["stats"], "new_normal": since}
            for d, line in sorted(history.last.items())
            if d >= since and line["verdict"] == QUARANTINED and line.get("by") == GATE and line.get("stats")]


@dataclass(frozen=True)
class Judgment:
    """A window's days judged: every check run (each day against its reference, the test day's own checks too),
    each day's verdict line (standing or new), the lines made now (to be recorded) and a new normal found (since,
    days, adopted; None: none)."""

    checks: list[Check]
    verdicts: dict[str, dict]
    new: list[dict]
    shift: dict | None = None

    def quarantined(self) -> dict[str, str]:
        """Day -> why, for the days whose verdict is quarantined."""
        return {d: v.get("why") or "quarantined" for d, v in self.verdicts.items() if v["verdict"] == QUARANTINED}


def judge(days: list[DayStats], files: dict[str, dict[str, str]], lines: list[dict], config: DataCheckConfig,
          unseen: dict[str, float] | None = None, unseen_before: dict[str, float] | None = None,
          before_day: str | None = None, test_day: str | None = None, at: str = "") -> Judgment:
    """Judge a window's ``days`` (oldest first; the last is the test day ``test_day``, default: it is), each once:
    a day with a standing verdict among ``lines`` (the model's ``days.jsonl``; ``standing``, by the day's input
    ``files``: URI -> identity) keeps it; any other is checked against its reference in the model's history
    (``History.checks``: a quarantined day is no one's reference) and quarantined when a check fails. Every day's
    checks are run (the history shows them). Then a new normal (``History.new_normal``) is adopted
    (``on_shift: adopt``: its days accepted now) or reported (``ask``)."""
    checks, verdicts, new = [], {}, []
    history = History(lines)
    last = days[-1].day if days else None
    stands = {d.day: standing(lines, d.day, files.get(d.day)) for d in days}
    for k, day in enumerate(days):
        pending = [d for d in days[k + 1:] if (stands[d.day] or {}).get("verdict") != QUARANTINED]
        mine = history.checks(day, pending, config)
        if day.day == (test_day or last):
            mine += [c for c in check_test_day(day, config, unseen, unseen_before, before_day)
                     if (c.check, c.feature) not in {(m.check, m.feature) for m in mine}]
        checks += mine
        line = stands[day.day]
        if line is None:
            bad = failed(mine)
            line = {"day": day.day, "files": files.get(day.day), "verdict": QUARANTINED if bad else ACCEPTED,
                    "failed": [c.row() for c in bad], "by": GATE, "why": _why(bad), "at": at, "stats": day.stored()}
            new.append(line)
        verdicts[day.day] = line
        history.set(day, line)
    shift = None
    if last and (run := history.new_normal(config, last)):
        shift = {"since": run[0], "days": run, "on_shift": config.on_shift, "adopted": config.on_shift == "adopt"}
        if shift["adopted"]:
            why = (f"a new normal since {run[0]}: {len(run)} days agree with each other but not with the days before "
                   "(on_shift adopt)")
            adopted = [{**line, "files": files.get(line["day"], line["files"])}
                       for line in shift_lines(list(history.last.values()), run[0], GATE, why, at)]
            new = [line for line in new if line["day"] not in run] + adopted   # tonight's quarantines: moot
            verdicts |= {line["day"]: line for line in adopted if line["day"] in verdicts}
    return Judgment(checks, verdicts, new, shift)


def _why(bad: list[Check]) -> str | None:
    return "; ".join(c.text() for c in bad[:SHOWN]) + (f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN
                                                       else "") or None


def unparsed(day: str, files: dict[str, str], error: str, at: str = "") -> dict:
    """The gate's verdict on a day whose parse failed on one of its own ``files`` (URI -> identity) with ``error``
    (its one line): quarantined, without checks (a failed parse stores no profile to check). It stands as
    ``judge``'s verdicts do, until the day's files change or an operator overrides it."""
    return {"day": day, "files": files, "verdict": QUARANTINED, "failed": [], "by": GATE,
            "why": bounded(f"its parse failed: {error}"), "at": at}


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


def shift_text(shift: dict | None, model: str | None) -> str:
    """What the gate says of a new normal (``Judgment.shift``): adopted, or the operator's command to adopt it."""
    if not shift:
        return ""
    days = f"the {len(shift['days'])} days since {shift['since']} agree with each other but not with the days before"
    if shift["adopted"]:
        return f"a new normal since {shift['since']} adopted ({days}; on_shift adopt): they are the reference now"
    return (f"a new normal since {shift['since']}? {days}. If it is real, make it the reference: dlrmflow days "
            f"--model {model or 'NAME'} accept-shift {shift['since']} --why '...' (or set data_check.on_shift: "
            "adopt)")


def summary(judgment: Judgment, mode: str, test_day: str, unchecked: list[str] = ()) -> dict:
    """What the model's history records of a night's data gate: the mode, the count of checks, the test day's failed
    checks where its verdict is quarantined (they refuse a promotion under ``warn``), the test day's checks (its
    drift and shares, night after night), the window's days left out as quarantined (day -> why), every day's
    verdict and who gave it, the days without a stored profile and a new normal found (``Judgment.shift``)."""
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
            "unchecked": list(unchecked), "new_normal": judgment.shift}


def refusals(recorded: dict | None) -> list[str]:
    """The failed checks of a night's ``summary`` as the decision's refusals."""
    return [Check(**row).text() for row in (recorded or {}).get("failed", [])]


def _feature_order(name: str) -> tuple:
    """I2 before I10: the name's letters, then its number."""
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return (head, int(tail) if tail else -1, name)
