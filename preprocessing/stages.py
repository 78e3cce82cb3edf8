"""The per-input-file stages, run in worker threads (or Prefect task processes); each writes its result atomically.

A parse: raw file -> typed, transformed rows (a folder of Arrow IPC files, one per block) + row/bad-row counts;
  where all of the file's rows are counted rows (count_on=all, a `files` train input) it also counts them
  (parsed/<i>.counts/); ``place`` moves those to counts/<i>, and stage B skips that file.
B count: value counts of the vocabulary features over the counted splits.
C encode: indices, labels and numericals -> per-split binary parts.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from common.atomic import atomic_dir, write_atomic
from feature_spec import categorical_file_name

from . import fastparse, readers, splits, vocab
from .errors import BadRows
from .transforms import SPLIT_COLUMN, Transforms, to_intermediate

LABEL_FILE, NUMERICAL_FILE = "label.bin", "numerical.bin"
# test hook: seconds to sleep after each finished part, so a test can kill a run part-way
_SLOW = float(os.environ.get("DLRMFLOW_TEST_PART_DELAY_S", "0") or 0)


@dataclass
class Job:
    """Everything a worker needs, for all stages (picklable)."""

    work: Path
    plan: Transforms
    fmt: readers.Format
    types: dict
    rule: splits.SplitRule
    policy: str
    split_names: list[str] = field(default_factory=list)
    total_rows: int = 0
    count_on: str = "train"
    numerical_dtype: str = "float16"
    cat_dtypes: dict[str, str] = field(default_factory=dict)


@dataclass
class FileTask:
    """One input file: position i in input order, its URI, mapped split, first global row."""

    i: int
    uri: str
    split: str | None = None
    start: int = 0


def part_name(i: int) -> str:
    return f"{i:06d}"


def parse_file(job: Job, task: FileTask, progress=None) -> dict:
    """Stage A: parse once; writes the folder parsed/<i>.arrow (one IPC file per block, atomically), then
    parsed/<i>.json (rows, bad rows, split names)."""
    folder = job.work / "parsed"
    meta_path = folder / f"{part_name(task.i)}.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    bad = BadRows(task.uri, job.policy)
    rows, names = 0, set()
    # compacted sooner than in stage B: these counts live alongside a parsed block (the memory peak)
    counter = vocab.Counter(job.plan.vocab_features, compact_factor=2) if _may_count_in_parse(job, task) else None
    fast = fastparse.block_parser(job.fmt, job.plan, job.types)
    with atomic_dir(folder / f"{part_name(task.i)}.arrow") as tmp:
        for k, (df, line_numbers) in enumerate(readers.read(task.uri, job.fmt, job.types, bad, fast=fast)):
            out = df if line_numbers is None else \
                to_intermediate(df, job.plan, line_numbers, bad, lambda s: splits.column_names(job.rule, s))
            if job.plan.split_column:
                names.update(out[SPLIT_COLUMN].unique().to_list())
            if len(out):
                out.write_ipc(tmp / f"{k:06d}.ipc", compression="uncompressed")
                if counter:
                    counter.add(out)
            rows += len(out)
            if progress:
                progress(len(df))
            del df, out   # free this block before the reader parses the next one
    if counter and rows:
        with atomic_dir(parse_counts(job, task)) as tmp:
            counter.write(tmp)
    meta = {"rows": rows, "bad_rows": bad.count, "split_names": sorted(names)}
    write_atomic(meta_path, json.dumps(meta, sort_keys=True))
    _pause()
    return meta


def _may_count_in_parse(job: Job, task: FileTask) -> bool:
    """Whether to count in the parse: only where all of this file's rows are sure to be counted rows. (For an
    ordered split the file holding the split point would be counted twice; measured on 1M rows, counting in
    the parse then costs as much CPU as stage B re-reading the parsed part, so it is left to stage B.)"""
    if not job.plan.vocab_features:
        return False
    return job.count_on == "all" or (job.rule.kind == "files" and task.split == "train")


def parse_counts(job: Job, task: FileTask) -> Path:
    """Where the parse puts its counts over all of a file's rows (moved to counts/<i> by ``use_parse_counts``)."""
    return job.work / "parsed" / f"{part_name(task.i)}.counts"


def use_parse_counts(job: Job, task: FileTask, rows: int) -> None:
    """After placing: make the parse's counts the file's counts when all its rows are counted, else drop them."""
    source, target = parse_counts(job, task), job.work / "counts" / part_name(task.i)
    if not source.exists():
        return
    if job.count_on == "all" or job.rule.kind == "files":
        ok = job.count_on == "all" or task.split == "train"
    elif job.rule.kind == "ordered" and "train" in job.split_names:
        ok = bool(np.all(splits.assign(job.rule, task.start, rows, job.total_rows) == job.split_names.index("train")))
    else:
        ok = False
    if ok and not target.exists():
        os.replace(source, target)
    else:
        shutil.rmtree(source)


def _batches(job: Job, task: FileTask):
    """(rows, split codes) per batch of a parsed part, in order."""
    offset = task.start
    for path in sorted((job.work / "parsed" / f"{part_name(task.i)}.arrow").glob("*.ipc")):
        df = pl.read_ipc(path)
        yield df, _codes(job, task, df, offset)
        offset += len(df)


def _codes(job: Job, task: FileTask, df: pl.DataFrame, offset: int) -> np.ndarray:
    if job.rule.kind == "files":
        return np.full(len(df), job.split_names.index(task.split), dtype=np.int8)
    if job.rule.kind == "column":
        return df[SPLIT_COLUMN].replace_strict(job.split_names, list(range(len(job.split_names))),
                                              return_dtype=pl.Int8).to_numpy()
    return splits.assign(job.rule, offset, len(df), job.total_rows)


def count_file(job: Job, task: FileTask, progress=None) -> None:
    """Stage B: value counts over the counted split(s); writes counts/<i>/<feature>.arrow."""
    target = job.work / "counts" / part_name(task.i)
    if target.exists():
        return
    counter = vocab.Counter(job.plan.vocab_features)
    train = job.split_names.index("train") if job.count_on == "train" else None
    for df, codes in _batches(job, task):
        counter.add(df if train is None else df.filter(pl.Series(codes == train)))
        if progress:
            progress(len(df))
    with atomic_dir(target) as tmp:
        counter.write(tmp)
    _pause()


def encode_file(job: Job, task: FileTask, progress=None) -> None:
    """Stage C: write encoded/<i>/<split>/{label,numerical,cat_*}.bin and stats.json."""
    target = job.work / "encoded" / part_name(task.i)
    if target.exists():
        return
    encode = _encoder(job.work / "vocab", job.plan.vocab_features)
    cat_files = {categorical_file_name(f): f for f in job.cat_dtypes}
    stats = {s: {"rows": 0, "index0": dict.fromkeys(job.cat_dtypes, 0)} for s in job.split_names}
    with atomic_dir(target) as tmp:
        files = {}
        for df, codes in _batches(job, task):
            columns = _encode(job, df, encode)
            for code, rows in _split_rows(codes):
                split = job.split_names[code]
                stats[split]["rows"] += int(np.count_nonzero(rows)) if isinstance(rows, np.ndarray) \
                    else rows.stop - rows.start
                for name, values in columns.items():
                    chosen = np.ascontiguousarray(values[rows])
                    if name in cat_files:
                        stats[split]["index0"][cat_files[name]] += int(np.count_nonzero(chosen == 0))
                    _out(files, tmp, split, name).write(memoryview(chosen))
            if progress:
                progress(len(df))
        for f in files.values():
            f.close()
        (tmp / "stats.json").write_text(json.dumps(stats, sort_keys=True))
    _pause()


def _split_rows(codes: np.ndarray):
    """(split code, rows) per split present: a slice where the codes are sorted (ordered splits, files),
    so each split's rows are views, not copies; else a boolean mask."""
    if len(codes) and np.all(codes[:-1] <= codes[1:]):
        edges = np.searchsorted(codes, np.arange(codes[-1] + 2, dtype=codes.dtype))
        return [(c, slice(int(edges[c]), int(edges[c + 1]))) for c in range(codes[0], codes[-1] + 1)
                if edges[c + 1] > edges[c]]
    return [(c, codes == c) for c in np.unique(codes)]


def _encode(job: Job, df: pl.DataFrame, encode) -> dict[str, np.ndarray]:
    """Output arrays of a batch by output file name: label (0/1 bytes), numerical [n, k], cat_<f> indices."""
    out = {LABEL_FILE: df[job.plan.label].to_numpy().astype(np.uint8)}
    if job.plan.numerical:
        num = np.empty((len(df), len(job.plan.numerical)), job.numerical_dtype)
        for j, (n, _) in enumerate(job.plan.numerical):
            num[:, j] = df[n].to_numpy()   # converted while copied in
        out[NUMERICAL_FILE] = num
    indices = encode(df)
    for c in job.plan.categorical:
        idx = indices[c.name] if c.name in indices else df[c.name].to_numpy()
        out[categorical_file_name(c.name)] = idx.astype(job.cat_dtypes[c.name], copy=False)
    return out


def _out(files: dict, folder: Path, split: str, name: str):
    key = (split, name)
    if key not in files:
        (folder / split).mkdir(exist_ok=True)
        files[key] = open(folder / split / name, "wb")
    return files[key]


_ENCODERS: dict[tuple, object] = {}
_ENCODERS_LOCK = threading.Lock()


def _encoder(folder: Path, features: list[str]):
    """The vocabulary encoder of a work folder, built once per process (the worker threads share it);
    keyed by the vocabulary files' identities, so a rebuilt vocabulary is never served stale."""
    paths = [folder / f"{f}.parquet" for f in features]
    key = (folder, tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in paths))
    with _ENCODERS_LOCK:
        if key not in _ENCODERS:
            _ENCODERS.clear()
            _ENCODERS[key] = vocab.encoder({f: pl.read_parquet(p) for f, p in zip(features, paths)})
        return _ENCODERS[key]


def _pause() -> None:
    if _SLOW:
        time.sleep(_SLOW)
