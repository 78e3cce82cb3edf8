"""`dlrmflow spec check SPEC --input URI`'s data half: a spec against a sample of its inputs, every problem at once.

What preprocessing would refuse late (a text column under ``numerical``, a label that is not 0/1) or get silently
wrong (a Parquet text column read as one-element lists, negative values under ``log1p``, a missing column that
another name almost matches) is found here on a sample, each with the spec's line and a fix.
"""

from __future__ import annotations

import re

import polars as pl

from common.errors import quoted
from feature_spec import FeatureSpec
from feature_spec.check import Problem, check_text, line_of, key_lines
from feature_spec.model import close_match

from .lists import unsplit
from .sample import Sample, TextLayout, read_sample
from .transforms import numerical_max

SEPARATORS = ("|", ";", ",")   # a list's element separators, in the order they are tried (a space: free text)
_HEX = re.compile(r"^[0-9a-fA-F]{1,8}$")


def check_against(spec: FeatureSpec, sample: Sample, lines: dict) -> list[Problem]:
    """Every problem of ``spec`` with the ``sample`` of its inputs (``lines``: ``feature_spec.check.key_lines``)."""
    df = sample.rows
    out: list[Problem] = []

    def add(path: tuple, problem: str, fix: str) -> None:
        out.append(Problem(".".join(path), line_of(lines, path), problem, fix))

    columns = [spec.label_feature, *spec.numerical_features, *spec.categorical_features]
    if isinstance(spec.metadata.get("id"), str):
        columns.append(spec.metadata["id"])
    for name in columns:
        if name not in df.columns:
            near = close_match(name, df.columns)
            path = ("metadata", "id") if name == spec.metadata.get("id") else ("feature_spec", name)
            add(path, f"column '{name}' is not in the input" + (f" (did you mean '{near}'?)" if near else
                f" (its columns: {', '.join(df.columns[:20])})") + ".",
                f"name the column as the input does{f': {near!r}' if near else ''}.")
    for i, name in enumerate(spec.numerical_features):
        if name in df.columns:
            _numerical(spec, name, df[name], ("channel_spec", "numerical", str(i)), add)
    if spec.label_feature in df.columns:
        _label(spec, df[spec.label_feature], add)
    for name in spec.categorical_features:
        if name in df.columns:
            _categorical(spec, name, df[name], sample.kind, add)
    return out


def _numerical(spec: FeatureSpec, name: str, col: pl.Series, where: tuple, add) -> None:
    if col.dtype == pl.String:
        bad = col.drop_nulls().filter(col.drop_nulls().str.strip_chars().cast(pl.Float64, strict=False).is_null())
        if len(bad) > 0.5 * col.drop_nulls().len():
            add(where, f"'{name}' is a numerical but holds text (e.g. {quoted(bad[0])}, {len(bad)} of {len(col)} "
                "sampled rows): preprocessing would stop at its first such row.",
                f"move '{name}' from channel_spec.numerical to channel_spec.categorical (and give it `dtype: str`).")
            return
        if len(bad):   # a number column with a few bad values: bad rows, not a text column
            add(where, f"{len(bad)} of {len(col)} sampled rows hold text in numerical '{name}' "
                f"(e.g. {quoted(bad[0])}): preprocessing stops at the first.",
                "correct those rows, or preprocess with --on-bad-row skip (they are left out and counted).")
        col = col.str.strip_chars().cast(pl.Float64, strict=False)
    elif not (col.dtype.is_numeric() or col.dtype == pl.Boolean):
        add(where, f"'{name}' is a numerical but its column is {col.dtype}.",
            f"move '{name}' to channel_spec.categorical (a list: with `hotness: variable`).")
        return
    values = col.cast(pl.Float64).drop_nulls()
    if not len(values):
        return
    transform = spec.feature_spec[name].transform or "log1p"
    low, high = float(values.min()), float(values.max())
    if transform == "log1p" and low < 0:
        add(("feature_spec", name), f"has negative values (min {low:g}) that log1p (the default transform) "
            "turns into 0.", "set `transform: identity` (or `log3p`: log(x + 3), for values above -3).")
    if transform == "identity" and max(abs(low), abs(high)) > numerical_max("float16"):
        add(("feature_spec", name), f"reaches {max(abs(low), abs(high)):g}, above float16's largest value 65504 "
            "(preprocessing would stop there).", "set `transform: log1p` (or preprocess with --numerical-dtype "
            "float32).")


def _label(spec: FeatureSpec, col: pl.Series, add) -> None:
    name, f = spec.label_feature, spec.feature_spec[spec.label_feature]
    where = ("feature_spec", name)
    seen = col.drop_nulls().cast(pl.String).unique().sort()
    shown = ", ".join(repr(v) for v in seen.head(8).to_list())
    if f.positive is not None:
        wanted = [str(v) for v in (f.positive if isinstance(f.positive, list) else [f.positive])]
        rate = col.cast(pl.String).is_in(wanted).mean()
        if not rate:
            add(where, f"no sampled row has the label value(s) {wanted} that `positive` names (values: {shown}).",
                f"set `positive:` to the value of a click, e.g. {quoted(seen[-1])}.")
        return
    numbers = col.cast(pl.Float64, strict=False) if col.dtype != pl.String else \
        col.str.strip_chars().cast(pl.Float64, strict=False)
    if f.positive_if is not None:
        if numbers.drop_nulls().len() < col.drop_nulls().len():
            add(where, f"positive_if needs numbers, but the label holds text (values: {shown}).",
                "use `positive: <value>` for a text label.")
        else:
            op, number = f.positive_rule()
            import operator
            ops = {">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
                   "<": operator.lt}
            rate = ops[op](numbers.drop_nulls(), number).mean() if numbers.drop_nulls().len() else 0
            if rate in (0, 1):
                add(where, f"positive_if '{f.positive_if}' makes every sampled row a "
                    f"{'click' if rate == 1 else 'non-click'} (values: {shown}).", "choose another comparison.")
        return
    binary = numbers.drop_nulls().len() == col.drop_nulls().len() and numbers.drop_nulls().is_in([0.0, 1.0]).all()
    if not binary:
        fix = f"set `positive_if: '>= {_cut(numbers)}'`" if numbers.drop_nulls().len() == col.drop_nulls().len() \
            else f"set `positive: {quoted(seen[-1])}` (the value that means a click)"
        add(where, f"the label is not 0/1 (values: {shown}): every row would be malformed.", f"{fix} on '{name}'.")


def _cut(numbers: pl.Series) -> str:
    """A comparison's number for a rating-like label: its highest values (>= the second largest distinct)."""
    top = numbers.drop_nulls().unique().sort()
    return f"{top[-2] if len(top) > 1 else top[-1]:g}"


def _categorical(spec: FeatureSpec, name: str, col: pl.Series, kind: str, add) -> None:
    f = spec.feature_spec[name]
    where = ("feature_spec", name)
    listed = isinstance(col.dtype, pl.List)
    if kind == "parquet" and unsplit(f, kind, col.dtype):
        sep = find_separator(col)
        add(where, f"is a list feature, but its Parquet column is {col.dtype}: without `sep` every row would be a "
            "one-element list.", f"add `sep: {sep!r}` (the character between its values)" if sep
            else "remove hotness/max_hotness (a one-hot feature), or write the column as a Parquet list.")
    if listed and not f.multi_valued:
        add(where, "is a Parquet list column, but the spec reads one value a row.",
            "add `hotness: variable` (or `max_hotness: N`).")
    if f.dtype == "hex" and col.dtype == pl.String and not listed:
        bad = col.drop_nulls().filter(~col.drop_nulls().str.contains(_HEX.pattern))
        if len(bad):
            add(where, f"has `dtype: hex` but holds {quoted(bad[0])} (hex = up to 8 hex digits).", "set `dtype: str`.")
    if f.dtype == "int" and col.dtype == pl.String and not listed and f.sep is None:
        bad = col.drop_nulls().filter(col.drop_nulls().str.strip_chars().cast(pl.Int64, strict=False).is_null())
        if len(bad):
            add(where, f"has `dtype: int` but holds {quoted(bad[0])}.", "set `dtype: str`.")


def find_separator(col: pl.Series, avoid: str | None = None) -> str | None:
    """The element separator of a text list column: the first of ``SEPARATORS`` (but ``avoid``) in 30% of its values
    or more whose parts repeat (no more distinct elements than distinct values, or under a tenth of all elements),
    else None."""
    values = col.drop_nulls()
    if values.dtype != pl.String or not len(values):
        return None
    for sep in (s for s in SEPARATORS if s != avoid):
        has = values.str.contains(sep, literal=True).mean()
        if has and has >= 0.3:
            elements = values.str.split(sep).explode().str.strip_chars()
            repeat = elements.n_unique() <= values.n_unique() or elements.n_unique() < 0.1 * len(elements)
            if repeat and elements.str.len_chars().mean() < 40:
                return sep
    return None


def headerless_columns(spec: FeatureSpec, inputs: list[str]) -> list[str] | None:
    """The column names of headerless text inputs, as preprocessing reads them (``job._format``): a csv/tsv chunk's
    ``header`` (default: csv has one, tsv not), its ``features`` or else feature_spec's order; None: a header."""
    from .inputs import file_type, split_mapping
    chunks = [c for cs in spec.source_spec.values() for c in cs]
    kind = chunks[0].type if chunks else file_type(split_mapping(inputs[0])[1])
    if kind not in ("csv", "tsv"):
        return None
    header = bool((chunks[0].model_extra or {}).get("header", kind == "csv")) if chunks else kind == "csv"
    return None if header else list(chunks[0].features) if chunks else list(spec.feature_spec)


def text_layout(spec: FeatureSpec, inputs: list[str]) -> TextLayout | None:
    """How preprocessing splits the spec's text inputs into fields (a csv/tsv chunk's type, ``separator`` and
    ``null_values``, else the file name's type); None for Parquet."""
    from .inputs import file_type, split_mapping
    chunks = [c for cs in spec.source_spec.values() for c in cs]
    kind = chunks[0].type if chunks else file_type(split_mapping(inputs[0])[1])
    if kind not in ("csv", "tsv"):
        return None
    extra = (chunks[0].model_extra or {}) if chunks else {}
    nulls = extra.get("null_values") or ()
    return TextLayout.of_kind(kind, extra.get("separator"), nulls if isinstance(nulls, (list, tuple)) else ())


def check_spec_with_inputs(uri: str, text: str, inputs: list[str], rows: int = 100_000
                           ) -> tuple[FeatureSpec | None, list[Problem]]:
    """The spec's own problems (``feature_spec.check.check_text``) and, where it can be built, the data's."""
    spec, problems = check_text(text, uri)
    if spec is not None and inputs:
        sample = read_sample(inputs, rows, headerless_columns(spec, inputs), text_layout(spec, inputs))
        problems += check_against(spec, sample, key_lines(text))
    return spec, sorted(problems, key=lambda p: (p.line is None, p.line or 0))
