"""Split rules: which split each row goes to (files, ordered, random, column)."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
from pydantic import BaseModel

from common.errors import UserError

from .hashing import unit_interval

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_FIX = ("write e.g. `ordered:train=0.8,val=0.1,test=0.1`, `random:train=0.9,test=0.1,seed=0`, "
        "`column:split_col` or `column:ts:train<2024-06-01,test`.")


class SplitRule(BaseModel):
    """A parsed split rule. ``splits`` is the output order of split names."""

    kind: str                              # files | ordered | random | column
    splits: list[str]
    fractions: list[float] = []            # ordered / random
    seed: int = 0                          # random
    column: str | None = None              # column
    cuts: list[str] = []                   # column with cut points: split i takes values < cuts[i]

    def text(self) -> str:
        """The rule in its command-line form."""
        if self.kind == "files":
            return "files:" + ",".join(self.splits)
        if self.kind == "column":
            if not self.cuts:
                return f"column:{self.column}"
            parts = [f"{s}<{c}" for s, c in zip(self.splits, self.cuts)] + [self.splits[-1]]
            return f"column:{self.column}:" + ",".join(parts)
        body = ",".join(f"{s}={f:g}" for s, f in zip(self.splits, self.fractions))
        return f"{self.kind}:{body}" + (f",seed={self.seed}" if self.kind == "random" else "")


def parse(text: str) -> SplitRule:
    """Parse a split rule from its command-line form; UserError with the fix if malformed."""
    kind, _, body = text.partition(":")
    if kind in ("ordered", "random"):
        return _parse_fractions(kind, body, text)
    if kind == "column":
        return _parse_column(body, text)
    if kind == "files":
        return SplitRule(kind="files", splits=[s for s in body.split(",") if s] or ["train"])
    raise UserError(f"split rule '{text}': unknown kind '{kind}'. Fix: {_FIX}")


def _parse_fractions(kind: str, body: str, text: str) -> SplitRule:
    splits, fractions, seed = [], [], 0
    for item in filter(None, body.split(",")):
        name, eq, value = item.partition("=")
        try:
            number = float(value) if name != "seed" else int(value)
        except ValueError:
            raise UserError(f"split rule '{text}': '{item}' is not name=number. Fix: {_FIX}") from None
        if not eq or not _NAME.match(name) or number < 0:
            raise UserError(f"split rule '{text}': '{item}' is not name=fraction. Fix: {_FIX}")
        if name == "seed":
            seed = int(number)
        else:
            splits.append(name)
            fractions.append(float(number))
    if not splits or abs(sum(fractions) - 1.0) > 1e-6 or len(set(splits)) != len(splits):
        raise UserError(f"split rule '{text}': needs distinct split names whose fractions sum to 1 "
                        f"(got {sum(fractions):g}). Fix: {_FIX}")
    return SplitRule(kind=kind, splits=splits, fractions=fractions, seed=seed)


def _parse_column(body: str, text: str) -> SplitRule:
    column, _, cuts_text = body.partition(":")
    if not column:
        raise UserError(f"split rule '{text}': names no column. Fix: {_FIX}")
    if not cuts_text:
        return SplitRule(kind="column", splits=[], column=column)
    items = cuts_text.split(",")
    splits, cuts = [], []
    for item in items[:-1]:
        name, lt, cut = item.partition("<")
        if not lt or not _NAME.match(name) or not cut:
            raise UserError(f"split rule '{text}': '{item}' is not split<value. Fix: {_FIX}")
        splits.append(name)
        cuts.append(cut)
    if not _NAME.match(items[-1]):
        raise UserError(f"split rule '{text}': the last item must be the split for the remaining rows. Fix: {_FIX}")
    return SplitRule(kind="column", splits=[*splits, items[-1]], column=column, cuts=cuts)


def ordered_bounds(fractions: list[float], total: int) -> np.ndarray:
    """Row index where each split ends: round(cumulative fraction * total), the last one = total."""
    bounds = np.rint(np.cumsum(fractions) * total).astype(np.int64)
    bounds[-1] = total
    return bounds


def assign(rule: SplitRule, start: int, n: int, total: int) -> np.ndarray:
    """Split codes (index into ``rule.splits``) for global rows start..start+n (ordered/random)."""
    rows = np.arange(start, start + n, dtype=np.int64)
    if rule.kind == "ordered":
        edges = ordered_bounds(rule.fractions, total)
    else:
        rows = unit_interval(rule.seed, rows)
        edges = np.cumsum(rule.fractions)
        edges[-1] = np.inf
    return np.searchsorted(edges, rows, side="right").astype(np.int8)


def column_names(rule: SplitRule, values: pl.Series) -> pl.Series:
    """Split name per row from a column: its value names the split, or cut points decide (null stays null)."""
    if not rule.cuts:
        return values.cast(pl.String)
    cuts = pl.Series(rule.cuts).cast(values.dtype) if values.dtype != pl.String else pl.Series(rule.cuts)
    expr = pl.lit(rule.splits[-1])
    for i in reversed(range(len(rule.cuts))):
        expr = pl.when(pl.col("v") < cuts[i]).then(pl.lit(rule.splits[i])).otherwise(expr)
    return pl.DataFrame({"v": values}).select(pl.when(pl.col("v").is_null()).then(None).otherwise(expr)).to_series()


def order_names(names: set[str]) -> list[str]:
    """Split names in output order: train, val, validation, test, then the rest alphabetically."""
    first = [n for n in ("train", "val", "validation", "test") if n in names]
    return first + sorted(names - set(first))
