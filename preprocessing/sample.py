"""A sample of raw inputs, with each column's own type (Parquet's, or polars' inference on CSV text): what
``dlrmflow spec draft`` drafts a spec from and ``dlrmflow spec check --input`` checks a spec against."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from common.errors import UserError
from common.store import open_uri

from .inputs import expand, file_type

MAX_FILES = 16   # a sample spreads over at most this many input files (evenly spaced in name order)
SPREAD_GROUPS = 8   # and over at least this many row groups of a Parquet file (where it has them)


@dataclass
class Sample:
    """Rows read from the inputs (``rows``: each column in its own type), their kind (parquet, csv, tsv), the
    files read and an estimate of all the inputs' rows (from Parquet metadata, else from bytes per text row)."""

    rows: pl.DataFrame
    kind: str
    files: list[str]
    total_rows: int

    @property
    def scale(self) -> float:
        """How many rows of the inputs one sampled row stands for."""
        return max(1.0, self.total_rows / max(1, len(self.rows)))


def read_sample(inputs: list[str], rows: int = 100_000, columns: list[str] | None = None,
                layout: "TextLayout | None" = None) -> Sample:
    """Up to ``rows`` rows of ``inputs`` (files, folders, globs; local or s3), an equal share from each of up to
    ``MAX_FILES`` files: spread over a Parquet file, a text file's first rows. ``columns``: the names of a headerless
    text file's columns (preprocessing reads a TSV so), else its first line names them. ``layout``: a text file's
    separator, quoting and missing-value marks (default: the file name's, as preprocessing reads it)."""
    files = expand(inputs)
    kinds = {file_type(f.uri) for f in files}
    if len(kinds) > 1:
        raise UserError(f"the inputs mix {' and '.join(sorted(kinds))} files. Fix: pass files of one type.")
    kind = kinds.pop()
    step = max(1, math.ceil(len(files) / MAX_FILES))
    chosen = files[::step]
    share = math.ceil(rows / len(chosen))
    parts, total, text_bytes, text_rows = [], 0, 0, 0
    for f in chosen:
        if kind == "parquet":
            df, n = _parquet(f.uri, share)
            total += n
        else:
            df, used = _text(f.uri, share, layout or TextLayout.of_kind(kind), columns)
            text_bytes, text_rows = text_bytes + used, text_rows + len(df)
        parts.append(df)
    try:
        sample = pl.concat(parts, how="diagonal_relaxed")
    except pl.exceptions.PolarsError as e:
        raise UserError(f"the input files do not share their columns' types ({e}). Fix: pass files of one table.") \
            from None
    if kind == "parquet":
        total = round(total * len(files) / len(chosen))
    else:
        total = round(sum(f.size for f in files) * text_rows / max(1, text_bytes)) if text_bytes else len(sample)
    return Sample(sample.head(rows), kind, [f.uri for f in chosen], max(total, len(sample)))


def _parquet(uri: str, rows: int) -> tuple[pl.DataFrame, int]:
    """Up to ``rows`` rows spread over the file (a file in time order is not read from its head only): evenly
    spaced row groups (about twice the rows wanted, ``SPREAD_GROUPS`` at least), evenly thinned; and the file's
    rows."""
    import pyarrow.parquet as pq
    with open_uri(uri) as f:
        pf = pq.ParquetFile(f)
        total, groups = pf.metadata.num_rows, pf.num_row_groups
        if total <= rows or not groups:
            return pl.from_arrow(pf.read()), total
        per_group = total / groups
        n = min(groups, max(math.ceil(2 * rows / per_group), SPREAD_GROUPS))
        chosen = sorted({round(i * (groups - 1) / max(1, n - 1)) for i in range(n)})
        read = pl.concat([pl.from_arrow(pf.read_row_group(g)) for g in chosen], how="vertical_relaxed")
        if len(read) <= rows:
            return read, total
        return read[np.linspace(0, len(read) - 1, rows).round().astype(np.int64)], total


@dataclass
class TextLayout:
    """How a text file is split into fields, as preprocessing splits it (``readers.Format``): the separator, whether
    a double quote quotes a field (csv), and the fields read as missing besides an empty one."""

    separator: str = ","
    quoted: bool = True
    null_values: tuple[str, ...] = ()

    @classmethod
    def of_kind(cls, kind: str, separator: str | None = None, null_values=()) -> "TextLayout":
        """The layout preprocessing reads a csv or tsv chunk (or file) with."""
        return cls(separator or ("," if kind == "csv" else "\t"), kind == "csv", tuple(null_values or ()))


def _text(uri: str, rows: int, layout: TextLayout, columns: list[str] | None) -> tuple[pl.DataFrame, int]:
    """The first ``rows`` rows of a text file (after its header, unless ``columns`` names them), and the bytes they
    took (uncompressed)."""
    with open_uri(uri, compression="infer") as f:
        lines = []
        for _ in range(rows + 1):
            line = f.readline()
            if not line:
                break
            lines.append(line)
    data = b"".join(lines)
    if not data.strip():
        raise UserError(f"{uri}: is empty. Fix: pass a file with a header row and rows.")
    try:
        df = pl.read_csv(io.BytesIO(data), separator=layout.separator, infer_schema_length=None,
                         try_parse_dates=False, null_values=["", *layout.null_values], truncate_ragged_lines=True,
                         has_header=columns is None, new_columns=columns,
                         quote_char='"' if layout.quoted else None)
    except pl.exceptions.PolarsError as e:
        raise UserError(f"{uri}: cannot be read with separator {layout.separator!r} and "
                        f"{'a header row' if columns is None else 'no header row'} ({str(e).splitlines()[0][:200]}). Fix: "
                        "check the spec's source_spec `separator` and `header` against the file (`spec draft` finds "
                        "them).") from None
    return df, len(data) - (len(lines[0]) if columns is None else 0)
