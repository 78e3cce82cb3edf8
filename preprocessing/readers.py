"""Streaming readers: one input file -> typed polars batches with their 1-based line numbers.

Text (CSV/TSV, plain or compressed) is read in blocks cut at line ends and parsed once by
polars with an explicit schema; a block that fails the fast path (wrong field count, a value
that is not a number, a byte that is not UTF-8) is re-checked line by line so the error names the
line and column, and its other rows are still read.
Parquet is read in row batches with pyarrow. Memory is bounded by the block size.
"""

from __future__ import annotations

import csv
import gzip
import io
import mmap
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from common.errors import quoted
from common.prefetch import Prefetcher
from common.store import open_uri

from .errors import BadRows, InputError, blame
from .parallel import ordered

try:   # ISA-L inflates a .gz 2.0-2.2x faster than zlib, same bytes (benchmarks/bench_gzip.py); zlib without isal
    from isal import isal_zlib as INFLATE
except ImportError:
    INFLATE = zlib

# the csv module refuses a field over 128 KiB with an error, not a bad row (polars reads any): a value too long for
# the data is judged as a value (``errors.FIELD_BYTES``), so the module takes any field a block holds
csv.field_size_limit(max(csv.field_size_limit(), (1 << 31) - 1))

EXTRA = "__extra"
BLOCK_BYTES = 32 << 20   # ~130k Criteo rows: bounds the parse memory (the raw strings of a block dominate)
PARQUET_BATCH_ROWS = 262_144


class ParsedBlock(NamedTuple):
    """A block as read: rows with their 1-based line numbers, or the C fast path's rows (``fast``: ``fastparse``)
    with each numerical's count of missing values (``missing``: its rows hold 0s for them)."""
    rows: Any
    lines: np.ndarray | None
    fast: bool = False
    missing: dict[str, int] | None = None


@dataclass
class Format:
    """How a text input is laid out: separator, quoting, header and (headerless) column names."""

    kind: str                       # csv | tsv | criteo | parquet
    columns: list[str] | None = None
    header: bool = False
    sep: str | None = None          # a csv/tsv chunk's `separator` (default: "," for csv, a tab for tsv)
    null_values: tuple[str, ...] = ()   # a csv/tsv chunk's `null_values`: fields read as missing (besides empty)

    @property
    def separator(self) -> str:
        return self.sep or ("," if self.kind == "csv" else "\t")


def read(uri: str, fmt: Format, types: dict[str, pl.DataType], bad: BadRows,
         block_bytes: int | None = None, fast=None, then=None, workers: int = 1) -> Iterator:
    """Yield a ParsedBlock (rows with the columns of ``types``) per block of one file. ``fast`` (text only):
    (block, missing) -> rows or None (see ``fastparse``); the blocks it does not parse are parsed here. ``then(block number,
    ParsedBlock)``, if given, is applied to each block (numbered from 0) in the thread that parsed it and its results
    are yielded instead; text blocks are parsed (and ``then`` applied) ``workers`` at a time, yielded in file order
    (``parallel.ordered``)."""
    try:
        if fmt.kind == "parquet":
            blocks = (ParsedBlock(df, lines) for df, lines in _read_parquet(uri, types, bad))
            yield from blocks if then is None else (then(k, block) for k, block in enumerate(blocks))
        else:
            yield from _read_text(uri, fmt, types, bad, block_bytes or BLOCK_BYTES, fast, then, workers)
    except FileNotFoundError:
        raise InputError(f"{uri}: the file does not exist (any more). Fix: check the input path.") from None
    except TrailingData as e:
        raise blame(InputError(f"{uri}: {e} (another file appended, or a copy that wrote past the end?). Fix: "
                               "re-create the file, or cut it at that byte if what comes before is complete."),
                    uri) from None
    except (EOFError, zlib.error, INFLATE.error, OSError) as e:
        error = InputError(f"{uri}: cannot be read ({type(e).__name__}: {e}); a compressed file may be truncated. "
                           "Fix: re-download or re-create the file.")
        # the file's own bytes (cut short, corrupt, not gzip); any other OSError (a dropped connection, a refused
        # permission) may be no fault of the file's
        raise (blame(error, uri) if isinstance(e, _CORRUPT) else error) from None


_CORRUPT = (EOFError, zlib.error, INFLATE.error, gzip.BadGzipFile)   # a compressed file's own bytes are bad
_COMPRESSED = re.compile(r"\.(gz|bz2|xz|lzma|zst|zstd|zip|lz4|snappy)$", re.IGNORECASE)
_PROBE = 1 << 16


def _local_path(uri: str) -> str | None:
    """The local path of an uncompressed local file (read memory-mapped), else None."""
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    if "://" in path or "::" in path or _COMPRESSED.search(path) or not os.path.isfile(path):
        return None
    return path


def _local_blocks(path: str, size: int) -> Iterator[memoryview | bytes]:
    """Blocks of whole lines of a local file, each up to ``size`` bytes where its lines allow: each a view of its
    own read-only memory map (the page cache's pages; a read would copy them into fresh memory that the kernel zeroes
    and faults in first: ~0.6 CPU s per 1.6 GB), unmapped when the block is dropped, so that only the blocks in
    flight are mapped. Where the file does not end with a line end, its last block is a copy with one added; a file
    system that maps no files is read. (A file truncated while mapped stops the process, as with any memory map:
    inputs are expected to be complete.)"""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size
        try:
            if end:
                mmap.mmap(fd, 1, access=mmap.ACCESS_READ).close()
        except OSError:
            with open(path, "rb") as f:
                yield from _blocks(f, size)
            return
        pos = 0
        while pos < end:
            base = pos - pos % mmap.ALLOCATIONGRANULARITY   # a map starts on a page
            stop = min(pos + size, end)
            mapped = mmap.mmap(fd, stop - base, offset=base, access=mmap.ACCESS_READ)
            if stop < end:
                k = mapped.rfind(b"\n", pos - base)
                if k < 0:   # a line longer than the block: map up to its end
                    stop = _line_end_after(fd, stop, end)
                    mapped = mmap.mmap(fd, stop - base, offset=base, access=mmap.ACCESS_READ)
                else:
                    stop = base + k + 1
            block = memoryview(mapped)[pos - base:stop - base]   # the map goes with its last view
            del mapped
            pos = stop
            yield block if block[-1] == ord("\n") else bytes(block) + b"\n"
    finally:
        os.close(fd)


def _line_end_after(fd: int, pos: int, end: int) -> int:
    """Offset just past the first newline at or after ``pos`` (or the end of the file)."""
    while pos < end:
        probe = os.pread(fd, min(_PROBE, end - pos), pos)
        k = probe.find(b"\n")
        if k >= 0:
            return pos + k + 1
        pos += len(probe)
    return end


def _blocks(f, size: int) -> Iterator[bytes]:
    rest = b""
    while True:
        data = f.read(size)
        if not data:
            if rest:
                yield rest if rest.endswith(b"\n") else rest + b"\n"
            return
        data = rest + data
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data
            continue
        yield data[:cut + 1]
        rest = data[cut + 1:]


class TrailingData(ValueError):
    """Bytes after a gzip stream's last complete member that begin no other member."""


class _Gunzip:
    """``read(size)`` of a gzip stream (one or more members) decompressed by ``inflate`` (``INFLATE``: ISA-L's
    zlib-compatible module, else zlib) directly, not through ``gzip.GzipFile`` (1.4x zlib's throughput that way,
    224 vs 156 MB/s); a truncated stream raises EOFError, a corrupt one ``inflate.error``, bytes after the last
    member that are not another member ``TrailingData`` (zero padding, as tar and some tools leave it, is ignored,
    as gzip itself does)."""

    _IN = 1 << 22
    _MAGIC = b"\x1f\x8b"

    def __init__(self, f, inflate=None):
        self.inflate = inflate or INFLATE
        self.f, self.d, self.tail, self.fed, self.ended = f, self.inflate.decompressobj(31), b"", False, False
        self.read_in = 0   # compressed bytes read so far

    def _more(self) -> bytes:
        data = self.f.read(self._IN)
        self.read_in += len(data)
        return data

    def _next_member(self) -> bool:
        """After a member's end: whether another member follows (else the stream ended, maybe after zeros)."""
        while len(self.tail) < len(self._MAGIC) and (more := self._more()):
            self.tail += more
        if not self.tail or self.tail.startswith(self._MAGIC):
            return bool(self.tail)
        at = self.read_in - len(self.tail)
        rest = self.tail
        while not rest.strip(b"\0"):
            if not (rest := self._more()):
                self.tail = b""
                return False
        raise TrailingData(f"after the end of its last complete gzip member (byte {at:,} of the file) come bytes that "
                           "are not gzip data")

    def read(self, size: int) -> bytes:
        out, n = [], 0
        while n < size and not self.ended:
            if self.d.eof:   # the next member, if any
                self.tail, self.d, self.fed = self.d.unused_data, self.inflate.decompressobj(31), False
                if not self._next_member():
                    self.ended = True
                    break
            if not self.tail:
                self.tail = self._more()
                if not self.tail:
                    if self.fed:
                        raise EOFError("compressed file ended before the end-of-stream marker was reached")
                    break
            self.fed = True
            piece = self.d.decompress(self.tail, size - n)
            self.tail = self.d.unconsumed_tail
            out.append(piece)
            n += len(piece)
        return b"".join(out)


def _read_text(uri, fmt: Format, types, bad, block_bytes, fast=None, then=None, workers: int = 1):
    local = _local_path(uri)
    if local is not None:
        yield from _read_lines(uri, _local_blocks(local, block_bytes), fmt, types, bad, fast, then, workers)
        return
    gz = re.search(r"\.gz$", uri, re.IGNORECASE) is not None
    with open_uri(uri, compression=None if gz else "infer") as f:   # decompressed ahead of the parse
        blocks = Prefetcher(_blocks(_Gunzip(f) if gz else f, block_bytes))
        try:
            yield from _read_lines(uri, blocks, fmt, types, bad, fast, then, workers)
        finally:
            blocks.close()   # the reading thread stops before the file closes


def _read_lines(uri, blocks: Iterator[bytes | memoryview], fmt: Format, types, bad, fast=None, then=None,
                workers: int = 1):
    line = 1
    columns = fmt.columns
    if fmt.header:
        first = bytes(next(blocks, b""))
        head, _, body = first.partition(b"\n")
        try:
            text = head.decode()
        except UnicodeDecodeError as e:
            raise blame(InputError(f"{uri}: line 1, the header, holds a byte that is not UTF-8 "
                                   f"({head[e.start:e.end]!r} at byte {e.start + 1}). Fix: write the header in UTF-8 "
                                   "(iconv -f LATIN1 -t UTF-8 converts a Latin-1 file)."), uri) from None
        columns = next(csv.reader([text.removeprefix("\ufeff").rstrip("\r")], delimiter=fmt.separator))  # BOM, CRLF
        blocks = _chain(body, blocks)
        line = 2
    missing = [c for c in types if c not in columns]
    if missing:
        raise InputError(f"{uri}: has no column {missing[0]!r} (columns: {_names(columns)}). "
                         "Fix: name the columns in the spec as in the file's header.")

    def parse(item):
        k, holder, first = item
        block = holder.pop()   # the only reference: the bytes go as soon as they are parsed
        missing = {}
        rows = fast(block, missing) if fast is not None else None
        parsed = ParsedBlock(rows, None, True, missing) if rows is not None else \
            ParsedBlock(*_parse_block(block, first, columns, fmt, types, bad)[:2])
        del block
        return parsed if then is None else then(k, parsed)

    yield from ordered(parse, _numbered(blocks, line), workers)


def _numbered(blocks: Iterator[bytes | memoryview], line: int) -> Iterator[tuple[int, list, int]]:
    """(block number, [block], its first line number) per non-empty block (in a list that the parse empties)."""
    k = 0
    for block in blocks:
        if block:
            n = count_byte(block, ord("\n"))
            holder = [block]
            del block
            yield k, holder, line
            line += n
            k += 1


def _names(columns: list[str], shown: int = 50) -> str:
    """A file's column names for a message: the first ``shown``, each quoted short (a header may hold anything)."""
    names = [c if len(c) <= 80 else quoted(c) for c in columns[:shown]]
    return ", ".join(names) + (f" and {len(columns) - shown} more" if len(columns) > shown else "")


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def _parse_block(block: bytes | memoryview, line: int, columns, fmt: Format, types,
                 bad) -> tuple[pl.DataFrame, np.ndarray, int]:
    """(typed rows, their line numbers, lines consumed) for one block of whole lines."""
    block = bytes(block)   # a view of a mapped file: polars and the line-by-line check take bytes
    schema = {c: types.get(c, pl.String) for c in columns} | {EXTRA: pl.String}
    try:
        df = _polars_read(block, fmt, schema, [*types, EXTRA])
        ok = df[EXTRA].null_count() == len(df)
        if ok and fmt.kind != "csv":  # a short row would read as trailing nulls: count the separators
            ok = count_byte(block, ord(fmt.separator)) == (len(columns) - 1) * len(df)
        if ok:
            return df.drop(EXTRA), np.arange(line, line + len(df), dtype=np.int64), len(df)
    except pl.exceptions.PolarsError:
        pass
    return _parse_slow(block, line, columns, fmt, types, bad)


def count_byte(data: bytes | memoryview, byte: int, step: int = 1 << 20) -> int:
    """How often ``byte`` occurs in ``data``: numpy over slices into one reused buffer (~2x bytes.count,
    without the GIL, and no fresh pages to fault in per slice)."""
    a = np.frombuffer(data, np.uint8)
    buf = np.empty(min(step, len(a)), bool)
    n = 0
    for i in range(0, len(a), step):
        part = a[i:i + step]
        eq = np.equal(part, byte, out=buf[:len(part)])
        n += int(np.count_nonzero(eq))
    return n


def _polars_read(block: bytes, fmt: Format, schema, select) -> pl.DataFrame:
    names = list(schema)
    return pl.read_csv(block, has_header=False, separator=fmt.separator, schema=schema,
                       columns=sorted(names.index(c) for c in select), quote_char='"' if fmt.kind == "csv" else None,
                       truncate_ragged_lines=True, missing_columns="insert", raise_if_empty=False,
                       null_values=list(fmt.null_values) or None)


def _parse_slow(block: bytes, line: int, columns, fmt: Format, types, bad) -> tuple[pl.DataFrame, np.ndarray, int]:
    """Line-by-line check of a block that failed the fast path; bad rows go to the policy, one report a row: a line
    holding a byte that is not UTF-8 (polars reads no block with one), a line with another number of fields, a
    value that does not convert (``cast_checked``)."""
    raw_lines = block.split(b"\n")[:-1]
    not_utf8 = _not_utf8(block, raw_lines, columns, fmt)
    if fmt.kind == "csv":
        counts = [len(r) for r in csv.reader(io.StringIO(block.decode(errors="replace")), delimiter=fmt.separator)]
    else:
        sep = fmt.separator.encode()
        counts = [ln.count(sep) + 1 for ln in raw_lines]
    keep = []
    for i, n in enumerate(counts):
        if i in not_utf8:
            bad.report(line + i, *not_utf8[i])
        elif n != len(columns):
            bad.report(line + i, None, f"has {n} fields, expected {len(columns)}.")
        else:
            keep.append(i)
    text = b"\n".join(raw_lines[i] for i in keep) + b"\n"
    strings = {c: pl.String for c in columns} | {EXTRA: pl.String}
    df = _polars_read(text, fmt, strings, list(types)) if keep else pl.DataFrame(schema={c: pl.String for c in types})
    lines = np.asarray(keep, dtype=np.int64) + line
    df, lines = cast_checked(df, types, lines, bad)
    return df, lines, len(raw_lines)


def _not_utf8(block: bytes, raw_lines: list[bytes], columns, fmt: Format) -> dict[int, tuple[str | None, str]]:
    """The lines (index in the block) holding a byte that is not UTF-8 -> (column, problem): one decode of the
    block, line by line only where that fails (no UTF-8 sequence spans a line end)."""
    try:
        block.decode()
        return {}
    except UnicodeDecodeError:
        pass
    found = {}
    for i, raw in enumerate(raw_lines):
        try:
            raw.decode()
        except UnicodeDecodeError:
            found[i] = _utf8_problem(raw, columns, fmt)
    return found


def _utf8_problem(raw: bytes, columns, fmt: Format) -> tuple[str | None, str]:
    """(column, problem) of a line holding a byte that is not UTF-8: its first such field."""
    text = raw.decode(errors="surrogateescape")   # the bad bytes as lone surrogates, the fields found as usual
    fields = next(csv.reader([text], delimiter=fmt.separator)) if fmt.kind == "csv" else text.split(fmt.separator)
    for k, field in enumerate(fields):
        if any("\udc80" <= ch <= "\udcff" for ch in field):
            value = field.encode(errors="surrogateescape")
            return (columns[k] if k < len(columns) else None,
                    f"value {quoted(value, 40)} holds a byte that is not UTF-8 (text inputs are read as UTF-8; "
                    "iconv -f LATIN1 -t UTF-8 converts a Latin-1 file).")
    return None, "holds a byte that is not UTF-8 (text inputs are read as UTF-8)."


def cast_checked(df: pl.DataFrame, types, lines: np.ndarray, bad: BadRows) -> tuple[pl.DataFrame, np.ndarray]:
    """Cast columns to ``types``; a value that does not convert makes a bad row (named by line and column; one
    report a row, whatever number of its values fail)."""
    failures = []
    casts = {}
    for name, dtype in types.items():
        col = df[name]
        if col.dtype == dtype:
            continue
        src = col.str.strip_chars() if col.dtype == pl.String else col
        cast = src.cast(dtype, strict=False)
        failed = (col.is_not_null() & cast.is_null()).to_numpy()
        if failed.any():
            what = "an integer" if dtype.is_integer() else "a number"
            failures.append((name, failed, lambda i, col=col, what=what: f"value {quoted(col[i])} is not {what}."))
        casts[name] = cast
    df = df.with_columns(**casts) if casts else df
    failed = bad.report_rows(lines, failures)
    if failed is not None:
        df, lines = df.filter(pl.Series(~failed)), lines[~failed]
    return df, lines


def _read_parquet(uri, types, bad):
    import pyarrow.parquet as pq   # only for Parquet inputs (importing pyarrow costs ~0.2 s)
    with open_uri(uri) as f:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        missing = [c for c in types if c not in names]
        if missing:
            raise InputError(f"{uri}: has no column {missing[0]!r} (columns: {_names(names)}). "
                             "Fix: name the columns in the spec as in the Parquet file.")
        row = 1
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(types)):
            df = pl.from_arrow(batch)
            lines = np.arange(row, row + len(df), dtype=np.int64)
            row += len(df)
            df = df.with_columns(pl.col(c).cast(pl.String) for c, t in types.items()
                                 if t == pl.String and df[c].dtype != pl.String)
            yield cast_checked(df, types, lines, bad)


def parquet_types(uri: str) -> dict[str, pl.DataType]:
    """A Parquet file's own column types (to keep integer categoricals as integers)."""
    import pyarrow.parquet as pq
    with open_uri(uri) as f:
        return dict(pl.from_arrow(pq.ParquetFile(f).schema_arrow.empty_table()).schema)
