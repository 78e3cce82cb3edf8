"""`dlrmflow spec draft`: a training-ready input spec drafted from a sample of the data, every choice a comment.

A text input's layout first (``sniff``, from its first lines: the separator, a header row or none, the marks of
missing values), written as a layout-only ``source_spec`` chunk when preprocessing would not read the file so from
its name. Per column of the sample (``sample.read_sample``): the label (a 0/1 column, or a rule on a rating-like or text
column: ``--label rating>=4``, ``--label income==>50K``), numerical or categorical (integers: an id by its name,
a few distinct values, else a quantity), list columns (Parquet lists, or text split at the separator found),
``log1p`` for non-negative numericals beyond 0..10 or heavy-tailed (``log3p`` down to -2), each categorical's distinct count with a
``frequency_threshold`` and the share of occurrences it keeps (``hash_buckets`` where the vocabulary would be
huge), and the columns left out with the reason (constant, empty, free text, near-unique, a timestamp: offered as
the key of a time-ordered ``column:`` split). The draft is checked (``spec_check``) before it is returned.
"""

from __future__ import annotations

import csv
import math
import posixpath
import re
from dataclasses import dataclass, field

import polars as pl

from common.errors import UserError
from feature_spec.check import check_text, key_lines

from .sample import Sample, TextLayout, read_sample
from .spec_check import check_against, find_separator

DEFAULT_ROWS = 100_000
DEFAULT_SPLIT = "random:train=0.8,val=0.1,test=0.1,seed=0"
FEW = 128              # an integer column with at most this many distinct values is categorical (an embedding a
                       # value: on UCI Adult test AUC 0.92 against 0.89 as numericals, benchmarks/RESULTS.md)
IDENTITY_MAX = 10      # a non-negative numerical up to this (and not heavy-tailed) keeps its values
MIN_SEEN = 10          # a categorical's frequency_threshold: a value seen fewer times in all the input shares index 0
                       # (its embedding would learn from a few rows, or none: a value seen once is in one split only).
                       # On the real Criteo 10k rows test AUC 0.7258 / 0.7095 (seeds 0 / 1) with the threshold that
                       # kept 99% of occurrences (1 for most ids), 0.7289 / 0.7305 with 10 (docs/spec.md)
HASH_ABOVE = 5_000_000   # estimated distinct values beyond which a categorical is hashed
NEAR_UNIQUE = 0.9        # distinct / non-null above which a column is an id per row
LABEL_NAMES = ("label", "click", "clicked", "clicks", "is_click", "target", "y", "converted", "conversion", "class",
               "outcome", "response")
POSITIVE_WORDS = {"1", "yes", "y", "true", "t", "positive", "pos", "click", "clicked", "clicks", "converted",
                  "buy", "bought", "purchase", "purchased", "success", "won", "win", "hit"}
HEAD_LINES = 2_000       # lines of a text file read to find its separator, header and missing-value marks
FIELD_SEPARATORS = ("\t", ",", ";", "|")   # a text file's separators tried (the first of the most fields wins ties)
MISSING_MARKS = ("\\N", "?", "N/A", "#N/A", "NaN", "nan", "NULL", "null")   # read as missing wherever they are
NUMBER_MISSING = ("NA", "None", "none", "-", "--", ".")   # read as missing where a column otherwise holds numbers
_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
_JSON_NAME = re.compile(r"(?i)\.(jsonl?|ndjson)(\.(gz|bz2|xz|zst|zstd))?$")
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


@dataclass
class Layout:
    """How a text input is split into fields, as found in its first lines (or as the user said): the source_spec
    chunk that makes preprocessing read it so, and why each part was chosen."""

    type: str                     # the chunk's type: csv (a double quote quotes a field) or tsv (no quoting)
    separator: str
    header: bool
    names: list[str] | None       # a headerless file's column names, in file order
    null_values: tuple[str, ...]
    notes: list[str]              # a comment per choice
    default: bool                 # preprocessing reads the files so from their names alone (no chunk needed)

    @property
    def text(self) -> TextLayout:
        return TextLayout(self.separator, self.type == "csv", self.null_values)


def draft_spec(inputs: list[str], label: str | None = None, rows: int = DEFAULT_ROWS, name: str | None = None,
               header: bool | None = None, names: list[str] | None = None) -> str:
    """The drafted spec YAML of ``inputs`` (checked against its own sample: it loads and matches the data)."""
    return draft(inputs, label, rows, name, header, names).text


def draft(inputs: list[str], label: str | None = None, rows: int = DEFAULT_ROWS, name: str | None = None,
          header: bool | None = None, names: list[str] | None = None) -> Draft:
    """``draft_spec``'s text with the choice made for each column. ``header``: whether text files start with a
    header row (None: found from the first rows); ``names``: a headerless file's column names."""
    layout = sniff(inputs, header, names)
    sample = read_sample(inputs, rows, None if layout is None or layout.header else layout.names,
                         None if layout is None else layout.text)
    if layout is not None:
        sample.rows = _padded_numbers(sample.rows)
    choices = choose(sample, label, layout)
    name = name or _stem(sample.files[0])
    text = render(sample, choices, name, layout)
    spec, problems = check_text(text, "the draft")
    problems += check_against(spec, sample, key_lines(text)) if spec is not None else []
    if problems:   # a column this module has no rule for: said, not written
        raise UserError(f"the drafted spec has a problem: {problems[0]} Fix: write that column's entry by hand "
                        "(docs/spec.md).")
    return Draft(text, choices, name)


def choose(sample: Sample, label: str | None, layout: Layout | None = None) -> list[Choice]:
    """A choice per column of the sample, the label's first."""
    df = sample.rows
    target = _label(df, label, layout)
    out = [target]
    for name in df.columns:
        if name != target.name:
            out.append(_column(df[name], sample.scale, layout))
    few = [c for c in out if c.few]
    if few and not any(c.channel == "numerical" for c in out):   # the model's dense input: one numerical at least
        back = max(few, key=lambda c: df[c.name].n_unique())
        choice = _numerical(back.name, df[back.name].drop_nulls(), f"integers, {df[back.name].n_unique()} distinct")
        choice.why += " (numerical: no other column is)"
        out[out.index(back)] = choice
    return out


# ---- a text file's layout -------------------------------------------------------------------------------------
def sniff(inputs: list[str], header: bool | None = None, names: list[str] | None = None) -> Layout | None:
    """The layout of the first input, from its first ``HEAD_LINES`` lines (None: Parquet): the separator that splits
    them into the same number of fields, most fields first; a header row unless the first row looks like data (a
    number above a column of numbers, a name repeated, an empty name), or as ``header``/``names`` say; the marks
    of missing values it holds."""
    from feature_spec import CRITEO_COLUMNS

    from .inputs import expand, file_type
    first = expand(inputs)[0].uri
    if _JSON_NAME.search(first):
        _no_json(first)
    kind = file_type(first)
    if kind == "parquet":
        if header is not None or names:
            raise UserError("--no-header and --names are for text files; a Parquet file names its columns. Fix: "
                            "leave them out.")
        return None
    if re.search(r"(?i)\.zstd?$", first):
        import fsspec.compression
        if "zstd" not in fsspec.compression.compr:
            raise UserError(f"{first}: a zstd file, and the zstandard package (which preprocessing reads it with) is "
                            "not installed. Fix: pip install zstandard, or recompress: zstd -dc IN.zst | gzip > IN.gz.")
    lines = _head(first)
    if lines[0].lstrip().startswith(("{", "[")):
        _no_json(first)
    separator, fields, share = _separator(lines, first)
    quoted = separator != "\t" or any('"' in line for line in lines)
    rows = list(csv.reader(lines, delimiter=separator)) if quoted else [line.split(separator) for line in lines]
    marks = _missing_marks(rows[1:], fields)
    notes = [f"separator {separator!r}: {fields} fields in {share:.0%} of the first {len(lines):,} lines" +
             ("; a double quote quotes a field" if quoted else "")]
    if names:
        if header:
            raise UserError("--names names a headerless file's columns, but --header says it has a header row. "
                            "Fix: leave one of them out.")
        if len(names) != fields:
            raise UserError(f"--names gives {len(names)} names, but {first} has {fields} fields a line. Fix: name "
                            "each field, comma-separated, in file order.")
        header = False
        notes.append("no header row (--names): columns as --names names them")
    elif header is None:
        header = _has_header(rows, marks)
        notes.append("a header row names the columns" if header else
                     "no header row: the first row holds data (numbers under a column of numbers, or names repeated)"
                     f" (pass --header if it names them); columns named c0..c{fields - 1} in file order")
    else:
        notes.append("a header row names the columns (--header)" if header else
                     f"no header row (--no-header): columns named c0..c{fields - 1} in file order")
    if not header and not names:
        names = [f"c{k}" for k in range(fields)]
        if fields == len(CRITEO_COLUMNS) and _criteo_like(rows):
            names = list(CRITEO_COLUMNS)
            notes[-1] = notes[-1].split(";")[0] + "; Criteo's layout (a 0/1, 13 integers, 26 hex ids): " \
                "named label, I1..I13, C1..C26"
    if marks:
        notes.append(f"read as missing (besides an empty field): {', '.join(marks)}")
    chunk_type = "csv" if quoted else "tsv"
    default = bool(header) and chunk_type == kind == "csv" and separator == "," and not marks
    return Layout(chunk_type, separator, bool(header), None if header else names, tuple(marks), notes, default)


def _padded_numbers(df: pl.DataFrame) -> pl.DataFrame:
    """Text columns that hold numbers with spaces around them (a file separated by ', ') as numbers: preprocessing
    strips a numerical's spaces before it reads the number."""
    out = {}
    for name in df.columns:
        col = df[name]
        if col.dtype == pl.String and len(present := col.drop_nulls()) and present.str.contains(r"^\s").any():
            stripped = col.str.strip_chars()
            for dtype in (pl.Int64, pl.Float64):
                cast = stripped.cast(dtype, strict=False)
                if cast.null_count() == stripped.null_count():
                    out[name] = cast
                    break
    return df.with_columns(**out) if out else df


def _no_json(uri: str) -> None:
    raise UserError(f"{uri}: JSON lines, which preprocessing does not read (CSV, TSV, Parquet). Fix: convert it: "
                    f"python -c \"import polars as pl; pl.read_ndjson('{uri}').write_parquet('OUT.parquet')\" (a "
                    "nested object: .unnest('COLUMN') before write_parquet), then draft from OUT.parquet.")


def _head(uri: str) -> list[str]:
    """The first ``HEAD_LINES`` non-empty lines of a text file (decompressed), without their line ends."""
    from common.store import open_uri
    out = []
    with open_uri(uri, compression="infer") as f:
        for _ in range(HEAD_LINES):
            line = f.readline()
            if not line:
                break
            if line.strip():
                out.append(line.decode("utf-8", errors="replace").rstrip("\r\n"))
    if not out:
        raise UserError(f"{uri}: is empty. Fix: pass a file with rows.")
    return out


def _separator(lines: list[str], uri: str) -> tuple[str, int, float]:
    """(separator, fields a line, share of lines with that many) of the ``FIELD_SEPARATORS`` that splits 90% of the
    lines into one number of fields (2 or more), the most fields first."""
    best = None
    for sep in FIELD_SEPARATORS:
        counts = [len(r) for r in csv.reader(lines, delimiter=sep)]
        mode = max(set(counts), key=counts.count)
        share = counts.count(mode) / len(counts)
        if mode > 1 and share >= 0.9 and (best is None or mode > best[1]):
            best = (sep, mode, share)
    if best is None:
        raise UserError(f"{uri}: no separator (tab, comma, semicolon, pipe) splits its lines into one number of "
                        "fields. Fix: write it as CSV or Parquet (one row a line, the same fields in each).")
    return best


def _missing_marks(rows: list[list[str]], fields: int) -> list[str]:
    """The marks of missing values among ``rows``' fields: ``MISSING_MARKS`` anywhere, ``NUMBER_MISSING`` in a
    column that otherwise holds numbers."""
    found: set[str] = set()
    for k in range(fields):
        values = [r[k] for r in rows if k < len(r) and r[k].strip()]
        found |= {v for v in values if v in MISSING_MARKS}
        others = [v for v in values if v not in MISSING_MARKS and v not in NUMBER_MISSING]
        if others and all(_NUMBER.match(v) for v in others):
            found |= {v for v in values if v in NUMBER_MISSING}
    return [m for m in (*MISSING_MARKS, *NUMBER_MISSING) if m in found]


def _has_header(rows: list[list[str]], marks: list[str]) -> bool:
    """Whether the first row names the columns: its cells unique and non-empty, and more columns of numbers with
    a name above them (or values that never repeat the first cell) than with a number (or a repeated value)."""
    first, body = rows[0], rows[1:]
    if len(set(first)) < len(first) or any(not c.strip() or c in marks for c in first):
        return False
    votes = 0
    for k, cell in enumerate(first):
        values = [r[k] for r in body if k < len(r) and r[k].strip() and r[k] not in marks]
        if not values:
            continue
        if all(_NUMBER.match(v) for v in values):
            votes += -1 if _NUMBER.match(cell) else 1
        elif cell in set(values):
            votes -= 1
        elif all(_HEX.match(v) for v in values) and len(cell) == len(values[0]):
            votes += -1 if _HEX.match(cell) else 1
    return votes > 0 or (votes == 0 and not any(_NUMBER.match(c) for c in first))


def _criteo_like(rows: list[list[str]]) -> bool:
    """Whether headerless rows have Criteo's layout: a 0/1, 13 integers and 26 hex ids (each may be empty)."""
    for r in rows[:200]:
        if len(r) != 40 or r[0] not in ("0", "1") or not all(v == "" or re.match(r"^-?\d+$", v) for v in r[1:14]) \
                or not all(v == "" or _HEX.match(v) for v in r[14:]):
            return False
    return True


# ---- the label ------------------------------------------------------------------------------------------------
def _label(df: pl.DataFrame, given: str | None, layout: Layout | None = None) -> Choice:
    headerless = layout is not None and not layout.header
    if given is None and headerless:   # no names to go by: a 0/1 column, or two values first or last (where
        ends = [df.columns[0], df.columns[-1]]   # a label is written); never a two-valued column in the middle
        found = [c for c in df.columns if _binary(df[c])] or [c for c in ends if df[c].drop_nulls().n_unique() == 2]
        if not found:
            two = [c for c in df.columns if df[c].drop_nulls().n_unique() == 2]
            raise UserError("no column of the headerless input holds 0/1, nor does its first or last column hold two "
                            "values, to be the label. Fix: pass --label COLUMN or a rule, e.g. --label "
                            f"'{df.columns[0]}>=4'" + (f" (columns of two values: {', '.join(two[:10])})." if two
                                                       else f" (columns: {', '.join(df.columns[:10])}...)."))
        given = found[0]
    if given is None:
        found = [c for c in df.columns if c.lower() in LABEL_NAMES and _binary(df[c])] or \
            [c for c in df.columns if c.lower() in LABEL_NAMES and df[c].drop_nulls().n_unique() == 2]
        if not found:
            two = [c for c in df.columns if df[c].drop_nulls().n_unique() == 2]
            raise UserError("no column named like a label (label, click, target, ...) holds two values. Fix: pass "
                            "--label COLUMN, or a rule: --label 'rating>=4', --label 'income==>50K'" +
                            (f" (columns of two values: {', '.join(two[:10])})." if two else "."))
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
    elif col.dtype == pl.Boolean and layout is not None:   # text true/false: compared as the file writes it
        options, rate = {"positive": ["true", "True", "TRUE"]}, _as_float(seen).mean()
        what = f"{name} == true (text)"
    elif _binary(col):
        options, rate, what = {}, _as_float(seen).mean(), f"{name} (0/1)"
    elif _numeric(col) and seen.n_unique() <= 20:
        top = _as_float(seen).unique().sort()
        cut = top[-1] if len(top) == 2 else top[-2]   # two values (-1/1, 1/2): the higher one
        options, rate = {"positive_if": f">= {cut:g}"}, (_as_float(seen) >= cut).mean()
        what = f"{name} >= {cut:g} (its {'higher' if len(top) == 2 else 'top'} values; pass --label '{name}>=N' " \
            "for another cut)"
    elif not _numeric(col) and seen.n_unique() == 2:
        value, why = _positive_value(seen.cast(pl.String))
        options, rate = {"positive": value}, (seen.cast(pl.String) == value).mean()
        what = f"{name} == {value!r} ({why}; pass --label '{name}==VALUE' for the other)"
    else:
        raise UserError(f"--label {given}: '{name}' is not 0/1 ({seen.n_unique()} values). Fix: pass a rule: "
                        f"--label '{name}>=N' (a number) or --label '{name}==VALUE' (a text value).")
    rate = float(rate or 0)
    if rate in (0.0, 1.0):
        raise UserError(f"--label {given}: every sampled row is a {'click' if rate else 'non-click'}. Fix: choose "
                        "another column or rule.")
    return Choice(name, "label", options, f"label: {what} -> click rate {rate:.1%} of {len(col):,} sampled rows")


def _positive_value(values: pl.Series) -> tuple[str, str]:
    """Which of a text label's two values means a click, and why: a word such as yes/true/click, the `>` side of a
    `<=X`/`>X` pair, else the rarer value."""
    counts = values.value_counts(sort=True)
    two = counts[values.name].to_list()
    words = [v for v in two if v.strip().lower() in POSITIVE_WORDS]
    if len(words) == 1:
        return words[0], "a word for yes"
    above = [v for v in two if v.strip().startswith(">")]
    if len(above) == 1 and any(v.strip().startswith("<") for v in two):
        return above[0], "the upper side"
    return two[-1], "the rarer of its two values"


def _compare(values: pl.Series, op: str, number: float) -> pl.Series:
    return {">=": values >= number, "<=": values <= number, ">": values > number, "<": values < number,
            "==": values == number, "!=": values != number}[op]


# ---- a column -------------------------------------------------------------------------------------------------
def _column(col: pl.Series, scale: float, layout: Layout | None = None) -> Choice:
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
    if col.dtype == pl.Boolean and layout is not None:   # a numerical's text is read as a number: `true` is not one
        return _categorical(name, present.cast(pl.String), "str", scale, "a flag (true/false, as text)")
    if col.dtype == pl.Boolean:
        return Choice(name, "numerical", {"transform": "identity"}, "a flag (true/false as 1/0)")
    if col.dtype == pl.String:
        return _text(name, present, distinct, scale, layout.separator if layout else None)
    if col.dtype.is_integer():
        return _integer(name, present, distinct, scale)
    if col.dtype.is_float():
        return _numerical(name, present, "float")
    return Choice(name, None, why=f"its type {col.dtype} has no rule (write its entry by hand)")


def _text(name: str, present: pl.Series, distinct: int, scale: float, field_sep: str | None = None) -> Choice:
    if present.str.contains(_DATE_TEXT.pattern).mean() >= 0.95:
        return Choice(name, None, why="a timestamp (dates as text)", timestamp=True)
    if field_sep != "," and present.str.contains(r"^\s*[+-]?\d+,\d+\s*$").mean() >= 0.95:
        return Choice(name, None, why="numbers with a decimal comma, which preprocessing does not read as numbers "
                      "(write them with a decimal point to use them)")
    if (sep := find_separator(present, field_sep)) is not None:   # the file's own: quoted free text
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
    if low < 0 and low > -3 and (high > IDENTITY_MAX or p99 > 10 * max(median, 1)):   # Criteo's I2: -2..7864
        return Choice(name, "numerical", {"transform": "log3p"}, f"{span}: small negatives, large values, so "
                      "log(x + 3)")
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
    best = MIN_SEEN
    kept = counts.filter(counts >= best)
    share = float(kept.sum()) / total
    return {"frequency_threshold": best}, (f"{distinct:,} distinct; threshold {best} keeps {len(kept):,}, "
                                           f"{_percent(share)} of occurrences"), {"distinct": distinct, "kept": share}


def _percent(share: float) -> str:
    """A share of occurrences kept, as a percentage never rounded up to 100%."""
    return "100%" if share >= 1 else f"{math.floor(share * 10_000) / 100:.2f}%"


# ---- the YAML -------------------------------------------------------------------------------------------------
def render(sample: Sample, choices: list[Choice], name: str, layout: Layout | None = None) -> str:
    """The spec's YAML text with a comment per choice."""
    used = [c for c in choices if c.channel]
    left = [c for c in choices if not c.channel]
    chunk = layout is not None and not layout.default   # a text layout preprocessing needs told: every column named
    kind = sample.kind if layout is None else "csv (a header row, comma-separated)" if layout.default else \
        f"{'headerless ' if not layout.header else ''}{_quote(layout.separator)}-separated text"
    lines = [f"# Drafted by `dlrmflow spec draft` from {len(sample.rows):,} sampled rows of {len(sample.files)} "
             f"{kind} file(s) (~{sample.total_rows:,} rows in all).",
             "# Every choice is a comment: review them, then `dlrmflow spec check THIS.yaml --input ...`.",
             "feature_spec:"]
    entries = [(f"  {_key(c.name)}: {_flow(c.options)}", c.why) for c in used]
    if chunk:   # a column of the file that no channel uses: defined, so the chunk below may name it
        entries += [(f"  {_key(c.name)}: {{}}", f"left out (in no channel): {c.why}") for c in left]
    width = min(60, max(len(e) for e, _ in entries) + 2)
    lines += [f"{(e + '  ').ljust(width)}# {why}" for e, why in entries]
    if left and not chunk:
        lines.append("  # left out:")
        lines += [f"  #   {c.name}: {c.why}" for c in left]
    if chunk:
        assert layout is not None
        lines += ["source_spec:   # how preprocessing splits the --input files into fields (no `files`: --input "
                  "names them)", "  train:", f"    - type: {layout.type}"]
        lines += [f"      # {note}" for note in layout.notes]
        lines += [f"      separator: {_quote(layout.separator)}", f"      header: {str(layout.header).lower()}"]
        if layout.null_values:
            lines.append(f"      null_values: [{', '.join(_quote(v) for v in layout.null_values)}]")
        lines.append(f"      features: [{', '.join(_key(c) for c in sample.rows.columns)}]")
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
