"""`dlrmflow spec draft`: a training-ready input spec drafted from a sample of the data, every choice a comment.

Per column of the sample (``sample.read_sample``): the label (a 0/1 column, or a rule on a rating-like or text
column: ``--label rating>=4``, ``--label income==>50K``), numerical or categorical (integers: an id by its name,
a few distinct values, else a quantity), list columns (Parquet lists, or text split at the separator found),
``log1p`` for non-negative numericals beyond 0..100 or heavy-tailed, each categorical's distinct count with a
``frequency_threshold`` and the share of occurrences it keeps (``hash_buckets`` where the vocabulary would be
huge), and the columns left out with the reason (constant, empty, free text, near-unique, a timestamp: offered as
the key of a time-ordered ``column:`` split). The draft is checked (``spec_check``) before it is returned.
"""

from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass, field

import polars as pl

from common.errors import UserError
from feature_spec.check import check_text, key_lines

from .sample import Sample, read_sample
from .spec_check import check_against, find_separator

DEFAULT_ROWS = 100_000
DEFAULT_SPLIT = "random:train=0.8,val=0.1,test=0.1,seed=0"
FEW = 128              # an integer column with at most this many distinct values is categorical (an embedding a
                       # value: on UCI Adult test AUC 0.92 against 0.89 as numericals, benchmarks/RESULTS.md)
IDENTITY_MAX = 10      # a non-negative numerical up to this (and not heavy-tailed) keeps its values
KEEP = 0.99            # the share of occurrences a suggested frequency_threshold keeps at least
THRESHOLDS = (1, 2, 3, 5, 10)
HASH_ABOVE = 5_000_000   # estimated distinct values beyond which a categorical is hashed
NEAR_UNIQUE = 0.9        # distinct / non-null above which a column is an id per row
LABEL_NAMES = ("label", "click", "clicked", "clicks", "is_click", "target", "y", "converted", "conversion")
_RULE = re.compile(r"^(?P<col>.+?)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<value>.+)$")
_ID_NAME = re.compile(r"(?i:(^|[_\-. ])id$)|[a-z0-9](Id|ID)$|(?i:^(user|item|movie|product|ad|campaign|customer|"
                      r"session|query|doc|video|song|track|shop|store|category|account|device)id$)")
_TIME_NAME = re.compile(r"(?i:(^|[_\-. ])(time|timestamp|date|datetime|ts)$|_at$)|[a-z](Time|Date|Timestamp)$")
_DATE_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([+-]\d{2}:?\d{2}|Z)?)?$")
_HEX = re.compile(r"^[0-9a-fA-F]{1,8}$")
_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none"}


@dataclass
class Choice:
    """What the draft does with one column: its channel (None: left out), its spec options and why."""

    name: str
    channel: str | None
    options: dict = field(default_factory=dict)
    why: str = ""
    timestamp: bool = False
    row_id: bool = False
    few: bool = False   # a quantity with few values, made categorical: the first back to numerical if none is left
    distinct: int | None = None   # a categorical's distinct values in the sample
    kept: float | None = None     # the share of its occurrences its frequency_threshold keeps (None: hashed)


@dataclass
class Draft:
    """A drafted spec: its YAML text, the choice made for each column (the label's first) and its name."""

    text: str
    choices: list[Choice]
    name: str

    def rows(self) -> list[dict]:
        """A row per column: its kind, distinct values in the sample, threshold (or hash buckets), share of
        occurrences kept and the reason."""
        out = []
        for c in self.choices:
            o = c.options
            kind = {"numerical": f"numerical ({o.get('transform')})", None: "left out"}.get(c.channel, c.channel)
            if c.channel == "categorical" and ("hotness" in o or "max_hotness" in o):
                kind = "categorical list"
            threshold = f"{o['hash_buckets']:,} hash buckets" if "hash_buckets" in o else o.get("frequency_threshold")
            out.append({"column": c.name, "kind": kind, "cardinality": c.distinct, "threshold": threshold,
                        "share kept": None if c.kept is None else _percent(c.kept), "reason": c.why})
        return out


def draft_spec(inputs: list[str], label: str | None = None, rows: int = DEFAULT_ROWS, name: str | None = None
               ) -> str:
    """The drafted spec YAML of ``inputs`` (checked against its own sample: it loads and matches the data)."""
    return draft(inputs, label, rows, name).text


def draft(inputs: list[str], label: str | None = None, rows: int = DEFAULT_ROWS, name: str | None = None) -> Draft:
    """``draft_spec``'s text with the choice made for each column."""
    sample = read_sample(inputs, rows)
    if sample.kind != "parquet" and sample.kind != "csv":
        raise UserError(f"spec draft reads CSV (with a header row) and Parquet; {sample.files[0]} is read as TSV, "
                        "which preprocessing reads without a header. Fix: convert it, e.g. python -c \"import polars "
                        "as pl; pl.read_csv('IN.tsv', separator='\\t').write_parquet('OUT.parquet')\", and draft "
                        "from the Parquet file.")
    choices = choose(sample, label)
    name = name or _stem(sample.files[0])
    text = render(sample, choices, name)
    spec, problems = check_text(text, "the draft")
    problems += check_against(spec, sample, key_lines(text)) if spec is not None else []
    if problems:   # a column this module has no rule for: said, not written
        raise UserError(f"the drafted spec has a problem: {problems[0]} Fix: write that column's entry by hand "
                        "(docs/spec.md).")
    return Draft(text, choices, name)


def choose(sample: Sample, label: str | None) -> list[Choice]:
    """A choice per column of the sample, the label's first."""
    df = sample.rows
    target = _label(df, label)
    out = [target]
    for name in df.columns:
        if name != target.name:
            out.append(_column(df[name], sample.scale))
    few = [c for c in out if c.few]
    if few and not any(c.channel == "numerical" for c in out):   # the model's dense input: one numerical at least
        back = max(few, key=lambda c: df[c.name].n_unique())
        choice = _numerical(back.name, df[back.name].drop_nulls(), f"integers, {df[back.name].n_unique()} distinct")
        choice.why += " (numerical: no other column is)"
        out[out.index(back)] = choice
    return out


# ---- the label ------------------------------------------------------------------------------------------------
def _label(df: pl.DataFrame, given: str | None) -> Choice:
    if given is None:
        found = [c for c in df.columns if c.lower() in LABEL_NAMES and _binary(df[c])]
        if not found:
            binary = [c for c in df.columns if _binary(df[c])]
            raise UserError("no column named like a label (label, click, target, ...) holds 0/1. Fix: pass --label "
                            "COLUMN, or a rule: --label 'rating>=4', --label 'income==>50K'" +
                            (f" (0/1 columns: {', '.join(binary[:10])})." if binary else "."))
        given = found[0]
    rule = None if given in df.columns else _RULE.match(given)
    name = rule.group("col") if rule else given
    if name not in df.columns:
        raise UserError(f"--label {given}: the input has no column '{name}' (columns: {', '.join(df.columns[:20])}). "
                        "Fix: name the label column as the input does.")
    col = df[name]
    seen = col.drop_nulls()
    if rule:
        op, value = rule.group("op"), rule.group("value").strip()
        number = _number(value)
        if number is None or not _numeric(col):
            if op != "==":
                raise UserError(f"--label {given}: a text label takes `==VALUE` (the value of a click). Fix: "
                                f"--label '{name}=={seen.cast(pl.String).mode()[0]}'.")
            options, positive = {"positive": value}, seen.cast(pl.String) == value
            value = repr(value)
        else:
            options = {"positive_if": f"{op} {value}"}
            positive = _compare(_as_float(seen), op, number)
        rate, what = positive.mean(), f"{name} {op} {value}"
    elif _binary(col):
        options, rate, what = {}, _as_float(seen).mean(), f"{name} (0/1)"
    elif _numeric(col) and seen.n_unique() <= 20:
        cut = _as_float(seen).unique().sort()[-2]
        options, rate = {"positive_if": f">= {cut:g}"}, (_as_float(seen) >= cut).mean()
        what = f"{name} >= {cut:g} (its top values; pass --label '{name}>=N' for another cut)"
    elif not _numeric(col) and seen.n_unique() == 2:
        counts = seen.cast(pl.String).value_counts(sort=True)
        value = counts[name][-1]
        options, rate = {"positive": value}, (seen.cast(pl.String) == value).mean()
        what = f"{name} == {value!r} (the rarer of its two values)"
    else:
        raise UserError(f"--label {given}: '{name}' is not 0/1 ({seen.n_unique()} values). Fix: pass a rule: "
                        f"--label '{name}>=N' (a number) or --label '{name}==VALUE' (a text value).")
    rate = float(rate or 0)
    if rate in (0.0, 1.0):
        raise UserError(f"--label {given}: every sampled row is a {'click' if rate else 'non-click'}. Fix: choose "
                        "another column or rule.")
    return Choice(name, "label", options, f"label: {what} -> click rate {rate:.1%} of {len(col):,} sampled rows")


def _compare(values: pl.Series, op: str, number: float) -> pl.Series:
    return {">=": values >= number, "<=": values <= number, ">": values > number, "<": values < number,
            "==": values == number, "!=": values != number}[op]


# ---- a column -------------------------------------------------------------------------------------------------
def _column(col: pl.Series, scale: float) -> Choice:
    name, present = col.name, col.drop_nulls()
    if not len(present):
        return Choice(name, None, why="empty in the sample")
    if isinstance(col.dtype, pl.List):
        return _listed(name, present, None, scale)
    distinct = present.n_unique()
    if distinct == 1:
        return Choice(name, None, why=f"constant ({present[0]!r})")
    if col.dtype in (pl.Date, pl.Datetime) or isinstance(col.dtype, pl.Datetime):
        return Choice(name, None, why="a timestamp", timestamp=True)
    if col.dtype == pl.Boolean:
        return Choice(name, "numerical", {"transform": "identity"}, "a flag (true/false as 1/0)")
    if col.dtype == pl.String:
        return _text(name, present, distinct, scale)
    if col.dtype.is_integer():
        return _integer(name, present, distinct, scale)
    if col.dtype.is_float():
        return _numerical(name, present, "float")
    return Choice(name, None, why=f"its type {col.dtype} has no rule (write its entry by hand)")


def _text(name: str, present: pl.Series, distinct: int, scale: float) -> Choice:
    if present.str.contains(_DATE_TEXT.pattern).mean() >= 0.95:
        return Choice(name, None, why="a timestamp (dates as text)", timestamp=True)
    if (sep := find_separator(present)) is not None:
        return _listed(name, present.str.split(sep).list.eval(pl.element().str.strip_chars()), sep, scale)
    if distinct > NEAR_UNIQUE * len(present) and len(present) >= 200:
        free = present.str.contains(" ", literal=True).mean() > 0.5 and present.str.len_chars().mean() > 25
        return Choice(name, None, why="free text" if free else
                      f"near-unique ({distinct:,} distinct in {len(present):,} rows): an id per row", row_id=not free)
    hexed = present.str.contains(_HEX.pattern).all() and present.str.contains("[a-fA-F]").any() \
        and present.str.len_chars().max() >= 6
    return _categorical(name, present, "hex" if hexed else "str", scale,
                        "hex ids" if hexed else "text")


def _integer(name: str, present: pl.Series, distinct: int, scale: float) -> Choice:
    low, high = int(present.min()), int(present.max())
    if _TIME_NAME.search(name) or (distinct > 0.01 * len(present) and
                                   (10**9 <= low and high < 4.2 * 10**9 or 10**12 <= low and high < 4.2 * 10**12)):
        return Choice(name, None, why=f"a timestamp ({low}..{high})", timestamp=True)
    unique = distinct > NEAR_UNIQUE * len(present) and len(present) >= 200
    if unique and (present.is_sorted() or _ID_NAME.search(name)):
        return Choice(name, None, why=f"near-unique ({distinct:,} distinct in {len(present):,} rows"
                      f"{', increasing' if present.is_sorted() else ''}): an id per row", row_id=True)
    if _ID_NAME.search(name):
        return _categorical(name, present, "int", scale, "an id (by its name)")
    if distinct <= FEW:
        choice = _categorical(name, present, "int", scale, f"integers, {low}..{high}: an embedding per value "
                              "(move it to numerical if its order matters)")
        choice.few = True
        return choice
    return _numerical(name, present, f"integers, {distinct:,} distinct")


def _numerical(name: str, present: pl.Series, what: str) -> Choice:
    values = present.cast(pl.Float64)
    low, high, median, p99 = values.min(), values.max(), values.median(), values.quantile(0.99)
    span = f"{what}, {low:g}..{high:g}, median {median:g}"
    if low < 0:
        return Choice(name, "numerical", {"transform": "identity"}, f"{span}: negative values, kept as they are")
    if high <= IDENTITY_MAX and p99 <= 10 * max(median, 1):
        return Choice(name, "numerical", {"transform": "identity"}, f"{span}: small range, kept as it is")
    return Choice(name, "numerical", {"transform": "log1p"}, f"{span}: " + (
        "heavy-tailed" if p99 > 10 * max(median, 1) else f"beyond 0..{IDENTITY_MAX}") + ", so log(1 + x)")


def _categorical(name: str, present: pl.Series, dtype: str, scale: float, what: str) -> Choice:
    options, note, kept = _vocabulary(present, scale)
    return Choice(name, "categorical", {"dtype": dtype, **options}, f"{what}; {note}", **kept)


def _listed(name: str, lists: pl.Series, sep: str | None, scale: float) -> Choice:
    lengths = lists.list.len()
    elements = lists.explode().drop_nulls()
    if not len(elements):
        return Choice(name, None, why="lists that are all empty in the sample")
    if elements.dtype == pl.String:
        dtype = "int" if elements.str.strip_chars().str.contains(r"^[+-]?\d+$").all() else "str"
    else:
        dtype = "int" if elements.dtype.is_integer() else "str"
    options, note, kept = _vocabulary(elements, scale)
    longest, p99 = int(lengths.max()), int(lengths.quantile(0.99) or 1)
    hot: dict = {"hotness": "variable"}
    if longest > 50 and p99 < longest:
        hot = {"max_hotness": max(p99, 1)}
    sep_note = f"split at {sep!r}" if sep else "a Parquet list"
    return Choice(name, "categorical", {"dtype": dtype, **hot, **({"sep": sep} if sep else {}), "pooling": "mean",
                                         **options},
                  f"a list ({sep_note}), {lengths.mean():.1f} values a row on average, at most {longest}"
                  f"{f' (cut at {p99}, the 99th percentile)' if 'max_hotness' in hot else ''}; mean-pooled; {note}",
                  **kept)


def _vocabulary(values: pl.Series, scale: float) -> tuple[dict, str, dict]:
    """A categorical's ``frequency_threshold`` (or ``hash_buckets``), what it keeps (a note, and its ``Choice``
    fields ``distinct`` and ``kept``), from its sampled values (``scale``: the inputs' rows a sampled row stands for)."""
    counts = values.value_counts(sort=True)["count"].cast(pl.Float64) * scale
    total, distinct = float(counts.sum()), len(counts)
    estimated = distinct * scale if distinct > 0.5 * len(values) else distinct
    if estimated > HASH_ABOVE:
        buckets = 2 ** min(25, math.ceil(math.log2(estimated)))
        return {"hash_buckets": buckets}, (f"{distinct:,} distinct in the sample, ~{estimated:,.0f} in all: hashed "
                                           f"into {buckets:,} buckets (collisions share a row)"), \
            {"distinct": distinct}
    best = 1
    for t in THRESHOLDS:   # the largest that keeps KEEP of the occurrences: rarer values share index 0
        if float(counts.filter(counts >= t).sum()) >= KEEP * total:
            best = t
    kept = counts.filter(counts >= best)
    share = float(kept.sum()) / total
    return {"frequency_threshold": best}, (f"{distinct:,} distinct; threshold {best} keeps {len(kept):,}, "
                                           f"{_percent(share)} of occurrences"), {"distinct": distinct, "kept": share}


def _percent(share: float) -> str:
    """A share of occurrences kept, as a percentage never rounded up to 100%."""
    return "100%" if share >= 1 else f"{math.floor(share * 10_000) / 100:.2f}%"


# ---- the YAML -------------------------------------------------------------------------------------------------
def render(sample: Sample, choices: list[Choice], name: str) -> str:
    """The spec's YAML text with a comment per choice."""
    used = [c for c in choices if c.channel]
    left = [c for c in choices if not c.channel]
    lines = [f"# Drafted by `dlrmflow spec draft` from {len(sample.rows):,} sampled rows of {len(sample.files)} "
             f"{sample.kind} file(s) (~{sample.total_rows:,} rows in all).",
             "# Every choice is a comment: review them, then `dlrmflow spec check THIS.yaml --input ...`.",
             "feature_spec:"]
    entries = [(f"  {_key(c.name)}: {_flow(c.options)}", c.why) for c in used]
    width = min(60, max(len(e) for e, _ in entries) + 2)
    lines += [f"{(e + '  ').ljust(width)}# {why}" for e, why in entries]
    if left:
        lines.append("  # left out:")
        lines += [f"  #   {c.name}: {c.why}" for c in left]
    lines += ["channel_spec:", f"  label: [{_key(choices[0].name)}]"]
    for channel in ("numerical", "categorical"):
        names = [_key(c.name) for c in used if c.channel == channel]
        if names:
            lines.append(f"  {channel}: [{', '.join(names)}]")
    lines += ["metadata:", f"  name: {_key(name)}"]
    ids = [c.name for c in left if c.row_id]
    if ids:
        lines.append(f"  # id: {_key(ids[0])}   # `dlrmflow score` copies it beside each row's probability")
    lines += ["  preprocessing:", f"    split: {DEFAULT_SPLIT}"]
    stamp = next((c.name for c in left if c.timestamp), None)
    if stamp is not None and (cuts := _time_cuts(sample.rows[stamp])):
        lines.append(f"    # split: column:{stamp}:train<{cuts[0]},val<{cuts[1]},test   # time-ordered instead: "
                     f"train on the past ({stamp}'s 80th and 90th percentiles in the sample)")
    return "\n".join(lines) + "\n"


def _time_cuts(col: pl.Series) -> tuple[str, str] | None:
    """The 80th and 90th percentile of a timestamp column, as the split rule's cut points (numbers or ISO text)."""
    present = col.drop_nulls()
    if col.dtype.is_numeric():
        cuts = [present.quantile(q, "nearest") for q in (0.8, 0.9)]
        return tuple(str(int(c)) if float(c).is_integer() else repr(float(c)) for c in cuts)   # type: ignore
    text = present.cast(pl.String).sort()
    if not len(text):
        return None
    return tuple(text[min(len(text) - 1, int(q * len(text)))].split(" ")[0].split("T")[0] for q in (0.8, 0.9))


def _key(name: str) -> str:
    return name if _BARE.match(name) and name.lower() not in _YAML_WORDS else _quote(name)


def _flow(options: dict) -> str:
    return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in options.items()) + "}"


def _value(v) -> str:
    if isinstance(v, str):
        return v if _BARE.match(v) and v.lower() not in _YAML_WORDS else _quote(v)
    return str(v)


def _quote(text: str) -> str:
    import json
    return json.dumps(text)


# ---- helpers --------------------------------------------------------------------------------------------------
def _stem(uri: str) -> str:
    base = posixpath.basename(uri.rstrip("/"))
    stem = re.sub(r"(\.(gz|bz2|xz|zst|zstd))?$", "", base).rsplit(".", 1)[0]
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", stem) or "dataset"


def _binary(col: pl.Series) -> bool:
    seen = col.drop_nulls()
    if not len(seen) or not _numeric(col):
        return False
    return bool(_as_float(seen).is_in([0.0, 1.0]).all()) and seen.n_unique() == 2


def _numeric(col: pl.Series) -> bool:
    return col.dtype.is_numeric() or col.dtype == pl.Boolean


def _as_float(col: pl.Series) -> pl.Series:
    return col.cast(pl.Float64)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
