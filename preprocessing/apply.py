"""Raw rows -> a split_binary dataset encoded with an EXISTING dataset's vocabularies and transforms (scoring).

``encode_inputs(dataset, inputs, folder)`` reads raw files in the format of the input spec that made ``dataset``
(recorded in its ``metadata.preprocessing``), transforms them with the same code as preprocessing (label,
numerical transform, hex ids, hash buckets: ``transforms.to_intermediate``), looks the categoricals up in the
dataset's stored ``vocab/<f>.parquet`` (values the dataset never kept map to index 0) and writes, under
``folder``: a dataset with the single split ``score`` (the same features, dtypes and cardinalities) and
``positions.parquet``, one row per encoded row, in order: ``file`` (the input URI), ``row``, the id column when
the input spec names one (``metadata.id: COLUMN``) and ``label`` when the inputs carry one.

``row`` is the row's 0-based position among its file's data rows, bad rows included (the header line is not
a row): for text the line number minus 1 (minus 2 with a header), for Parquet the row index. Streaming:
one block of rows is in memory at a time.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

import feature_spec as fspec
from common.errors import UserError
from common.store import filesystem, open_uri
from feature_spec import categorical_file_name

from . import lists, readers, stages, vocab, writer
from .config import PreprocessConfig
from .errors import BadRows
from .job import Job
from .pipeline import dataset_spec
from .transforms import numerical_max, to_intermediate

SCORE_SPLIT = "score"
POSITIONS = "positions.parquet"
ID_KEY = "id"   # metadata.id of an input spec: the column that identifies a row (copied to the scores)


@dataclass(frozen=True)
class Encoded:
    """What ``encode_inputs`` wrote: the dataset (split ``SCORE_SPLIT``) and the positions file."""

    dataset: str
    positions: str
    rows: int
    bad_rows: int
    has_label: bool
    id_column: str | None


class _Recorded(BadRows):
    """The bad-row policy that also remembers the lines it was told about (to align ids and positions)."""

    def __init__(self, uri: str, policy: str):
        super().__init__(uri, policy)
        self.lines: set[int] = set()

    def report(self, line: int, column: str | None, problem: str) -> None:
        super().report(line, column, problem)
        self.lines.add(line)


def scoring_job(dataset: str, inputs: list[str], folder: str, *, on_bad_row: str | None = None,
                max_bad_fraction: float | None = None, spec: str | None = None) -> Job:
    """The preprocessing job that reads ``inputs`` as ``dataset``'s input spec did (one split, ``score``);
    ``spec``: that input spec from elsewhere (a serving bundle's copy) instead of the recorded path."""
    settings = fspec.load(dataset).metadata.get("preprocessing")
    if not isinstance(settings, dict) or "spec" not in settings:
        raise UserError(f"{dataset}: records no input spec (metadata.preprocessing.spec), so its raw rows cannot "
                        "be read. Fix: score with a model whose dataset was written by `dlrmflow preprocess`.")
    if not inputs:
        raise UserError("no input files to score. Fix: pass --input PATH (files, folders or globs).")
    config = PreprocessConfig(
        inputs=[f"{SCORE_SPLIT}={i}" for i in inputs], out=folder, spec=spec or settings["spec"],
        frequency_threshold=settings.get("frequency_threshold"),
        numerical_dtype=settings.get("numerical_dtype", "float16"),
        on_bad_row=on_bad_row or settings.get("on_bad_row", "error"),
        max_bad_fraction=settings.get("max_bad_fraction", 0.001) if max_bad_fraction is None else max_bad_fraction,
        fast_parse=False, progress=False)   # the general parser: it names every row's line
    try:
        return Job.from_config(config)
    except fspec.SpecError:
        spec_path = spec or settings["spec"]
        fs, path = filesystem(spec_path)
        if "/" in spec_path and not fs.exists(path):
            raise UserError(f"{dataset} was preprocessed with the input spec {spec_path!r}, which does not exist "
                            "here, so the raw rows cannot be read as it read them. Fix: run from the folder "
                            "preprocessing ran in (for a relative path), or put that spec back.") from None
        raise


def encode_inputs(dataset: str, inputs: list[str], folder: str | Path, *, on_bad_row: str | None = None,
                  max_bad_fraction: float | None = None, progress: bool = True, spec: str | None = None) -> Encoded:
    """Encode raw ``inputs`` with ``dataset``'s vocabularies into the local ``folder`` (see the module doc).
    ``on_bad_row``/``max_bad_fraction`` default to the dataset's own preprocessing settings; ``dataset`` may be
    a serving bundle (its feature_spec.yaml and vocab/) with ``spec`` its copy of the input spec."""
    folder = Path(folder)
    job = scoring_job(dataset, inputs, str(folder), on_bad_row=on_bad_row, max_bad_fraction=max_bad_fraction,
                      spec=spec)
    model = fspec.load(dataset)
    t = job.transforms
    cards = {c.name: model.cardinality(c.name) for c in t.categorical}
    dtypes = t.categorical_dtypes(cards)
    vocabs = {f: vocab.read_vocab(dataset, model, f) for f in t.vocab_features}
    encode = vocab.Encoder(vocabs)
    id_column = job.spec.metadata.get(ID_KEY)
    out = folder / "dataset"
    (out / writer.SUCCESS).unlink(missing_ok=True)   # a scratch encoding, made again (never a stored dataset)
    (out / SCORE_SPLIT).mkdir(parents=True, exist_ok=True)
    files: dict = {}
    rows = bad_rows = 0
    index0 = dict.fromkeys(dtypes, 0)
    listed = {categorical_file_name(c.name): c.name for c in t.categorical if c.multi_valued}
    list_stats = {f: lists.empty_stats() for f in listed.values()}
    has_label = all(_has_column(f.uri, job, t.label) for f in job.inputs)
    positions = _Positions(folder / POSITIONS, id_column, _id_type(job, id_column), has_label)
    types = _types(job, vocabs, id_column, has_label)
    bar = _bar(progress)
    try:
        for f in job.inputs:
            bad = _Recorded(f.uri, job.config.on_bad_row)
            first, before = (2 if job.fmt.header else 1), rows
            for df, lines, *_ in readers.read(f.uri, job.fmt, types, bad):   # no fast path: every block has lines
                if not has_label:   # any valid label: it is never written out
                    df = df.with_columns(pl.lit("" if t.positive else 0.0, job.types[t.label]).alias(t.label))
                bad.lines.clear()
                parsed = to_intermediate(df, t, lines, bad, lambda s: s, numerical_max(job.config.numerical_dtype))
                keep = ~np.isin(lines, np.fromiter(bad.lines, np.int64)) if bad.lines else slice(None)
                columns = stages.encode_batch(t, job.config.numerical_dtype, dtypes, parsed, encode, source=f.uri)
                for name, values in columns.items():
                    if name in listed:
                        index0[listed[name]] += lists.write(values, listed[name],
                                                            lambda n: _out(files, out / SCORE_SPLIT, n),
                                                            list_stats[listed[name]])
                        continue
                    _out(files, out / SCORE_SPLIT, name).write(memoryview(np.ascontiguousarray(values)))
                for c in t.categorical:
                    if not c.multi_valued:
                        index0[c.name] += int(np.count_nonzero(columns[categorical_file_name(c.name)] == 0))
                ids = None if not id_column else df[id_column] if isinstance(keep, slice) else \
                    df[id_column].filter(pl.Series(keep))
                positions.add(f.uri, lines[keep] - first, ids, columns[stages.LABEL_FILE])
                rows += len(parsed)
                bar.update(len(df))
            stages.check_bad_rows(bad.count, rows - before, job.config.max_bad_fraction, resumable=False, where=f.uri)
            bad_rows += bad.count
    finally:
        for handle in files.values():
            handle.close()
        positions.close()
        bar.close()
    stages.check_bad_rows(bad_rows, rows, job.config.max_bad_fraction, resumable=False)
    for c in t.categorical:
        if c.multi_valued and c.hotness is None:
            _offsets(out / SCORE_SPLIT, c.name)
    placement = stages.Placement((SCORE_SPLIT,), rows, (0,))
    spec = dataset_spec(job, placement, cards, {SCORE_SPLIT: rows}, {SCORE_SPLIT: index0}, {}, bad_rows,
                         {SCORE_SPLIT: list_stats})
    writer.finish(str(out), spec)
    return Encoded(str(out), str(folder / POSITIONS), rows, bad_rows, has_label, id_column)


def _offsets(folder: Path, feature: str) -> None:
    """A variable-length list's offsets file from the lengths file written beside it (then removed)."""
    lengths = folder / lists.lengths_file_name(feature)
    with open(folder / fspec.offsets_file_name(feature), "wb") as f:
        for chunk in lists.offsets_chunks([lengths] if lengths.exists() else []):
            f.write(chunk)
    lengths.unlink(missing_ok=True)


def _types(job: Job, vocabs: dict[str, pl.DataFrame], id_column: str | None, has_label: bool) -> dict:
    """Parse types: preprocessing's, with each vocabulary feature read as its stored values' type (an integer
    vocabulary of a Parquet input stays integer whatever the type of the scored file's column)."""
    types = dict(job.types)
    for c in job.transforms.categorical:
        if c.name in vocabs and c.kind != "hex":
            kind = pl.Int64 if vocabs[c.name]["value"].dtype.is_integer() else pl.String
            if not c.multi_valued:
                types[c.name] = kind
            elif isinstance(types[c.name], pl.List):   # (a text list is split and typed after the parse)
                types[c.name] = pl.List(kind)
    if not has_label:
        types.pop(job.transforms.label)
    if id_column and id_column not in types:
        types[id_column] = _id_type(job, id_column)
    return types


def _id_type(job: Job, id_column: str | None) -> pl.DataType:
    if id_column and job.fmt.kind == "parquet":
        native = readers.parquet_types(job.inputs[0].uri).get(id_column, pl.String)
        return pl.Int64 if native.is_integer() else pl.String
    return pl.String


def _has_column(uri: str, job: Job, column: str) -> bool:
    """Whether a file holds ``column`` (Parquet and text with a header name theirs; others have the spec's)."""
    if job.fmt.kind == "parquet":
        return column in readers.parquet_types(uri)
    if not job.fmt.header:
        return True
    import csv

    with open_uri(uri, "rt", compression="infer") as f:
        header = f.readline().rstrip("\r\n")
    return column in next(csv.reader([header], delimiter=job.fmt.separator), [])


def _out(files: dict, folder: Path, name: str):
    if name not in files:
        files[name] = open(folder / name, "wb")
    return files[name]


class _Positions:
    """``positions.parquet`` written batch by batch: file, row[, id][, label]."""

    def __init__(self, path: Path, id_column: str | None, id_type, has_label: bool):
        import pyarrow as pa
        import pyarrow.parquet as pq

        fields = [pa.field("file", pa.string()), pa.field("row", pa.int64())]
        if id_column:
            fields.append(pa.field(id_column, pa.int64() if id_type == pl.Int64 else pa.string()))
        if has_label:
            fields.append(pa.field("label", pa.int8()))
        self.schema, self.id_column, self.has_label = pa.schema(fields), id_column, has_label
        self.writer = pq.ParquetWriter(str(path), self.schema)

    def add(self, uri: str, rows: np.ndarray, ids: pl.Series | None, labels: np.ndarray) -> None:
        import pyarrow as pa

        columns = [pa.array(np.full(len(rows), uri, dtype=object), pa.string()), pa.array(rows, pa.int64())]
        if self.id_column:
            columns.append(ids.to_arrow().cast(self.schema.field(self.id_column).type))
        if self.has_label:
            columns.append(pa.array(labels.astype(np.int8)))
        self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))

    def close(self) -> None:
        self.writer.close()


def _bar(progress: bool):
    from tqdm import tqdm

    return tqdm(desc="encode", unit=" rows", unit_scale=True, disable=not progress or not sys.stderr.isatty(),
                dynamic_ncols=True)

