"""The stages over input files, each run for every file by an executor (threads or Prefect tasks); each writes
its part atomically, skips a part an earlier run (of this dataset or of another one that uses the same file)
finished, and returns its result.

``parse_file``: raw file -> typed, transformed rows (a folder of Arrow IPC files, one per block; integer
  vocabulary features as codes into the block's distinct values, see ``vocab.dictionary_encode``) + row/bad-row
  counts and the file's profile (``profile``: what the data gate compares), stored with the file's parts
  (``job.parts[i]``), shared by every dataset that reads the file with the same parse settings; it also counts
  the file's values where all its rows are counted rows (count_on=all, a `files` train input; the count stage
  then skips that file) and for every other `files` input (a dated window's days: the gate compares their
  values, and a later window trains on them).
``count_file``: value counts of the vocabulary features over the counted splits: a file whose rows are all
  counted rows uses (or makes) its stored all-rows counts, a file partly counted gets counts of this job's own.
``encode_file``: indices, labels, numericals -> per-split binary parts (in the job's work folder: its vocabulary's).

Within a file, each stage processes a few blocks at once (``parallel.ordered``; as many as the threads that
the files in flight leave over), in block order, so that one file uses every core.

Each stage writes its parts into local folders and pushes them to ``job.mirror`` (the store, when it is remote)
and pulls the parts it reads from there: a stage may run on any machine that reaches the store.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl

from common.atomic import atomic_dir
from common.errors import UserError
from feature_spec import categorical_file_name

from . import fastparse, lists, parallel, profile, readers, splits, vocab
from .errors import BadRows, blame
from .job import Job
from .transforms import SPLIT_COLUMN, Transforms, check_numerical, numerical_max, to_intermediate
from .work import WorkFolder

LABEL_FILE, NUMERICAL_FILE = "label.bin", "numerical.bin"
_DICTIONARIES = ".dict.arrow"   # beside a parsed block: the distinct values its coded columns refer to
_STATS = "stats.json"   # in an encoded part: rows, index-0 rows and list statistics per split


@dataclass(frozen=True)
class Placement:
    """Where the parsed rows go: split names in output order, the total row count, each file's first global row."""

    split_names: tuple[str, ...]
    total_rows: int
    starts: tuple[int, ...]


def parse_file(job: Job, i: int, progress=None, say=None) -> dict:
    """The parse stage: parse once; writes the file's ``parsed`` folder (one IPC file per block, atomically), its
    counts (``_may_count_in_parse``), its ``profile.json``, then its ``parsed.json``; returns the latter (rows, bad
    rows, split names). Under the file's parse lease: a job of another dataset key parsing the same file meanwhile
    is waited for (``say`` tells), and its parse is used."""
    parts, mirror = job.parts[i], job.mirror
    if mirror.complete(parts.parse_meta):
        return json.loads(mirror.read_text(parts.parse_meta))
    parts.create(job.file_entry(i))
    held = parts.parse_lease(job.inputs[i].uri, say=say)
    try:
        if mirror.complete(parts.parse_meta):   # parsed by the job we waited for
            return json.loads(mirror.read_text(parts.parse_meta))
        return _parse(job, i, progress)
    finally:
        held.release()


def _parse(job: Job, i: int, progress=None) -> dict:
    parts, mirror = job.parts[i], job.mirror
    t, uri = job.transforms, job.inputs[i].uri
    bad = BadRows(uri, job.config.on_bad_row)
    rows, names = 0, set()
    # compacted sooner than in the count stage: these counts live alongside a parsed block (the memory peak)
    counter = vocab.Counter(t.vocab_features, compact_factor=2) \
        if _may_count_in_parse(job, i) and not mirror.complete(parts.counts) else None
    fast = fastparse.block_parser(job.fmt, t, job.types, coded=True) if job.config.fast_parse else None
    with atomic_dir(parts.parsed) as tmp:
        def finish(k: int, parsed: readers.ParsedBlock):
            """Parsed block k -> its part written (IPC + dictionaries), its counts, split names, row counts, profile."""
            df = parsed.rows
            coded = isinstance(df, vocab.Coded)   # the fast parse coded the vocabulary features
            if coded:
                df, dictionaries = df.rows, df.dictionaries
            missing = parsed.missing if parsed.fast else {}
            out = df if parsed.fast else \
                to_intermediate(df, t, parsed.lines, bad, lambda s: splits.column_names(job.rule, s),
                                numerical_max(job.config.numerical_dtype), missing)
            found = set(out[SPLIT_COLUMN].unique().to_list()) if t.split_column else set()
            counts = block = None
            if len(out):
                if not coded:
                    out, dictionaries = vocab.dictionary_encode(out, t.vocab_features)
                out.write_ipc(tmp / f"{k:06d}.ipc", compression="uncompressed")
                if dictionaries:
                    _write_dictionaries(tmp / f"{k:06d}{_DICTIONARIES}", dictionaries)
                counts = vocab.block_counts(out, t.vocab_features, dictionaries) if counter else None
                block = profile.block_profile(out, t, dictionaries, missing)
            return len(out), len(df), found, counts, block

        summed = None
        for n_out, n_raw, block_names, counts, block in readers.read(uri, job.fmt, job.types, bad, fast=fast,
                                                                     then=finish, workers=_block_workers(job)):
            rows += n_out
            names |= block_names
            summed = profile.merge(summed, block)
            if counts:
                counter.merge(counts)
            if progress:
                progress(n_raw)
    mirror.push(parts.parsed)
    if counter and rows:
        with atomic_dir(parts.counts) as tmp:
            counter.write(tmp)
        mirror.push(parts.counts)
    counted_all = rows and _may_count_in_parse(job, i) and mirror.pull(parts.counts)
    mirror.write_text(parts.profile, json.dumps(profile.finish(summed, t, parts.counts if counted_all else None),
                                                sort_keys=True))
    meta = {"rows": rows, "bad_rows": bad.count, "split_names": sorted(names)}
    mirror.write_text(parts.parse_meta, json.dumps(meta, sort_keys=True))
    return meta


def _block_workers(job: Job) -> int:
    """Blocks of one file processed at once: the threads left over by the files processed at once (one file:
    all of them; as many files as threads: one), so that memory stays at a few blocks per thread."""
    threads = job.config.threads()
    return max(1, threads // max(1, min(len(job.inputs), threads)))


def place(job: Job, metas: list[dict]) -> Placement:
    """Check the bad-row budget, give each file its first global row, name the splits."""
    _check_bad(job, metas)
    starts = np.cumsum([0] + [m["rows"] for m in metas]).tolist()
    if job.rule.kind == "column" and not job.rule.cuts:
        names = splits.order_names({n for m in metas for n in m["split_names"]})
    else:
        names = list(job.rule.splits)
    if job.config.count_on == "train" and "train" not in names and job.transforms.vocab_features:
        raise UserError(f"no 'train' split to count values on (splits: {', '.join(names)}). "
                        "Fix: name the training split 'train', or pass --count-on all.")
    return Placement(tuple(names), starts[-1], tuple(starts[:-1]))


def _check_bad(job: Job, metas: list[dict]) -> None:
    """The budget holds for each input file (so for each day of a dated window) and for all of them: a file
    whose rows are all malformed cannot vanish into the budget of the others."""
    for f, m in zip(job.inputs, metas):
        check_bad_rows(m["bad_rows"], m["rows"], job.config.max_bad_fraction, where=f.uri)
    check_bad_rows(sum(m["bad_rows"] for m in metas), sum(m["rows"] for m in metas), job.config.max_bad_fraction)


def check_bad_rows(bad: int, rows: int, limit: float, resumable: bool = True, where: str | None = None) -> None:
    """The bad-row budget: UserError when more than ``limit`` of all rows (``rows`` good + ``bad``) are bad,
    or when there are no good rows (``resumable``: the message says that a rerun reuses the parsed files).
    ``where``: the one input file these rows are of (then a file with no rows at all passes, and the error blames
    it: ``errors.blame``): the budget holds for each input file, and so for each day of a dated window."""
    total = bad + rows
    if bad and bad > limit * total:
        kept = "; the parsed files are kept, so a rerun does not parse them again." if resumable else "."
        error = UserError((f"input file {where}: " if where else "")
                          + f"{bad} of {total} rows are malformed ({bad / total:.2%}), more than --max-bad-fraction "
                          f"{limit:g}. Fix: correct the inputs or raise --max-bad-fraction{kept}")
        raise blame(error, where) if where else error
    if total - bad == 0 and where is None:
        raise UserError("the inputs hold no rows. Fix: check the input files.")


def _may_count_in_parse(job: Job, i: int) -> bool:
    """Whether to count all of the file's rows in the parse: where all of them are sure to be counted rows, and
    for every input of a `files` rule (a dated window's val and test days: the data gate compares their values,
    and the later windows that train on them find them counted). (For an ordered split the file holding the split
    point would be counted twice; measured on 1M rows, counting in the parse then costs as much CPU as the count
    stage re-reading the parsed part, so it is left to that stage.)"""
    if not job.transforms.vocab_features:
        return False
    return job.config.count_on == "all" or job.rule.kind == "files"


def counted(job: Job, placement: Placement, i: int) -> str:
    """Which of file ``i``'s rows are counted rows: "all" (its stored all-rows counts serve), "none", or
    "some" (counted by this job alone: an ordered split point inside the file, random and column rules)."""
    start = placement.starts[i]
    end = placement.starts[i + 1] if i + 1 < len(placement.starts) else placement.total_rows
    if not job.transforms.vocab_features or end == start:
        return "none"
    if job.config.count_on == "all":
        return "all"
    if job.rule.kind == "files":
        return "all" if job.inputs[i].split == "train" else "none"
    if job.rule.kind == "ordered":
        k = job.rule.splits.index("train")
        edges = splits.ordered_bounds(job.rule.fractions, placement.total_rows)
        lo, hi = (int(edges[k - 1]) if k else 0), int(edges[k])
        return "all" if lo <= start and end <= hi else "none" if end <= lo or start >= hi else "some"
    return "some"


def counts_path(job: Job, placement: Placement, i: int) -> Path | None:
    """The counts folder of file ``i``'s counted rows (written by the count stage), or None where none are counted."""
    how = counted(job, placement, i)
    return None if how == "none" else job.parts[i].counts if how == "all" else job.work.counts(i)


def _write_dictionaries(path: Path, dictionaries: dict[str, np.ndarray]) -> None:
    # list columns: a fixed-size array column of width 0 (a feature empty in every row of a block) is written but
    # cannot be read back ("Cannot read zero sized arrays from IPC")
    columns = [pl.Series(f, [v]) for f, v in dictionaries.items()]
    pl.DataFrame([c.cast(pl.List(c.dtype.inner)) for c in columns]).write_ipc(path, compression="uncompressed")


def _read_dictionaries(path: Path) -> dict[str, np.ndarray]:
    if not path.exists():
        return {}
    return {f: column[0].to_numpy() for f, column in pl.read_ipc(path).to_dict().items()}


def file_rows(placement: Placement, i: int) -> int:
    """The rows that the parse of file ``i`` recorded (its place in the global row numbers)."""
    end = placement.starts[i + 1] if i + 1 < len(placement.starts) else placement.total_rows
    return end - placement.starts[i]


def planned_rows(job: Job, placement: Placement) -> dict[str, int] | None:
    """The rows each split gets by the split rule and the parsed row counts alone: ``files`` (the rows of the
    files mapped to it), ``ordered`` (its share of the rows); None where the rows decide (random, column)."""
    names = placement.split_names
    if job.rule.kind == "files":
        return {s: sum(file_rows(placement, i) for i, f in enumerate(job.inputs) if f.split == s) for s in names}
    if job.rule.kind == "ordered":
        ends = splits.ordered_bounds(job.rule.fractions, placement.total_rows).tolist()
        return {s: int(end - start) for s, start, end in zip(names, [0] + ends[:-1], ends)}
    return None


def broken_part(job: Job, i: int, problem: str, part: Path | None = None) -> UserError:
    """The error for input file ``i`` whose parsed part (or ``part``, another of its parts) is missing,
    unreadable or short (removed by a prune or another job meanwhile, or damaged). A broken or missing parse is
    forgotten, so that a rerun parses the file again (a missing count is made again from the parse)."""
    parts = job.parts[i]
    if part is None or not job.mirror.complete(parts.parsed):
        for p in (parts.parse_meta, parts.parsed, parts.counts, parts.profile):
            job.mirror.remove(p)
    return UserError(f"input file {job.inputs[i].uri}: its {'parsed part' if part is None else 'part'} "
                     f"{part or parts.parsed} {problem}. Nothing was written to the dataset. Fix: run the same "
                     "command again; the missing parts are made again (and prune no parts while a preprocessing "
                     "that uses them runs).")


def _batches(job: Job, placement: Placement, i: int, columns: list[str] | None = None):
    """Loaders of the batches of a parsed part, in order: each, called (in any thread), gives (rows: ``columns``
    or all, their coded columns' dictionaries, split codes). The part must hold the rows its parse recorded:
    a missing, unreadable or short part is an error (``broken_part``), never fewer rows."""
    expected = file_rows(placement, i)
    if not job.mirror.pull(job.parts[i].parsed):
        raise broken_part(job, i, f"is missing ({expected} rows were parsed)")
    offset = placement.starts[i]
    if columns is not None and job.transforms.split_column:
        columns = [*columns, SPLIT_COLUMN]
    paths = sorted(job.parts[i].parsed.glob("*.ipc"))
    try:
        sizes = [pl.scan_ipc(path).select(pl.len()).collect().item() for path in paths]
    except (OSError, pl.exceptions.PolarsError) as e:
        raise broken_part(job, i, f"is unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") \
            from None
    if sum(sizes) != expected:
        raise broken_part(job, i, f"holds {sum(sizes)} rows but its parse recorded {expected}")
    for path, n in zip(paths, sizes):
        yield partial(_batch, job, placement, i, path, offset, columns)
        offset += n


def _batch(job: Job, placement: Placement, i: int, path: Path, offset: int, columns: list[str] | None):
    try:
        df = _read_part(path, columns)
        dictionaries = _read_dictionaries(path.with_suffix(_DICTIONARIES))
    except (OSError, pl.exceptions.PolarsError) as e:
        raise broken_part(job, i, f"is unreadable ({type(e).__name__} in {path.name})") from None
    return df, dictionaries, _codes(job, placement, i, df, offset)


def _read_part(path: Path, columns: list[str] | None) -> pl.DataFrame:
    """A parsed block's IPC file, memory-mapped (its columns are views of the page cache: not copied into fresh
    memory that the kernel zeroes and faults in, as polars' read_ipc does)."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
    except pa.ArrowException as e:   # a damaged file (ArrowInvalid is no OSError): unreadable, like one
        raise OSError(f"{type(e).__name__}: {e}") from None
    return pl.from_arrow(table if columns is None else table.select(columns), rechunk=False)


def _codes(job: Job, placement: Placement, i: int, df: pl.DataFrame, offset: int) -> np.ndarray:
    names = placement.split_names
    if job.rule.kind == "files":
        return np.full(len(df), names.index(job.inputs[i].split), dtype=np.int8)
    if job.rule.kind == "column":
        return df[SPLIT_COLUMN].replace_strict(list(names), list(range(len(names))), return_dtype=pl.Int8).to_numpy()
    return splits.assign(job.rule, offset, len(df), placement.total_rows)


def count_file(job: Job, placement: Placement, i: int, progress=None, say=None) -> None:
    """The count stage: value counts over the counted split(s); writes ``counts_path`` (the file's all-rows counts
    under its parse lease, as ``parse_file``)."""
    target = counts_path(job, placement, i)
    if target is None or job.mirror.complete(target):
        return
    if target != job.parts[i].counts:   # this job's own counts (in its work folder)
        _count(job, placement, i, target, progress)
        return
    held = job.parts[i].parse_lease(job.inputs[i].uri, say=say)
    try:
        if not job.mirror.complete(target):   # else counted by the job we waited for
            _count(job, placement, i, target, progress)
    finally:
        held.release()


def _count(job: Job, placement: Placement, i: int, target: Path, progress=None) -> None:
    features = job.transforms.vocab_features
    counter = vocab.Counter(features)
    train = placement.split_names.index("train") if counted(job, placement, i) == "some" else None

    def count(load) -> tuple[int, dict]:
        df, dictionaries, codes = load()
        counted_rows = df if train is None else df.filter(pl.Series(codes == train))
        return len(df), vocab.block_counts(counted_rows, features, dictionaries)

    for n, counts in parallel.ordered(count, _batches(job, placement, i, features), _block_workers(job)):
        counter.merge(counts)
        if progress:
            progress(n)
    with atomic_dir(target) as tmp:
        counter.write(tmp)
    job.mirror.push(target)


def encode_file(job: Job, placement: Placement, cards: dict[str, int], i: int, progress=None) -> dict:
    """The encode stage: write encoded/<i>/<split>/{label,numerical,cat_*}.bin (and a variable-length list's lengths,
    see ``lists``); returns rows, index-0 rows and each list feature's statistics per split."""
    target, mirror = job.work.encoded(i), job.mirror
    if mirror.complete(target):
        return json.loads(mirror.read_text(target / _STATS))
    encode_rows = _encoder(job.work, job.transforms.vocab_features)
    dtypes = job.transforms.categorical_dtypes(cards)
    cat_files = {categorical_file_name(f): f for f in dtypes}
    listed = {categorical_file_name(c.name): c.name for c in job.transforms.categorical if c.multi_valued}
    stats = {s: {"rows": 0, "index0": dict.fromkeys(dtypes, 0),
                 "lists": {f: lists.empty_stats() for f in listed.values()}} for s in placement.split_names}

    def encode(load) -> tuple[int, list]:
        """A batch -> (rows, [(split, output file name, rows of it, their zeros)] in output order; a list
        feature's rows are written (and their zeros counted) by ``lists.write``)."""
        df, dictionaries, codes = load()
        columns = _encode(job, dtypes, df, dictionaries, encode_rows, i)
        pieces = []
        for code, rows in _split_rows(codes):
            for name, values in columns.items():
                if name in listed:
                    pieces.append((placement.split_names[code], name, values[rows], None))
                    continue
                chosen = np.ascontiguousarray(values[rows])
                zeros = int(np.count_nonzero(chosen == 0)) if name in cat_files else 0
                pieces.append((placement.split_names[code], name, chosen, zeros))
        return len(df), pieces

    with atomic_dir(target) as tmp:
        files = {}
        for n, pieces in parallel.ordered(encode, _batches(job, placement, i), _block_workers(job)):
            for split, name, chosen, zeros in pieces:
                if name in listed:
                    f = listed[name]
                    stats[split]["index0"][f] += lists.write(chosen, f, partial(_out, files, tmp, split),
                                                             stats[split]["lists"][f])
                    continue
                if name == LABEL_FILE:
                    stats[split]["rows"] += len(chosen)
                if name in cat_files:
                    stats[split]["index0"][cat_files[name]] += zeros
                _out(files, tmp, split, name).write(memoryview(chosen))
            if progress:
                progress(n)
        for f in files.values():
            f.close()
        encoded = sum(st["rows"] for st in stats.values())
        if encoded != file_rows(placement, i):   # the parse's rows, every one in exactly one split
            raise UserError(f"input file {job.inputs[i].uri}: encoded {encoded} rows but parsed "
                            f"{file_rows(placement, i)}; nothing was written to the dataset. Fix: run the same "
                            "command again; if it happens again, report it as a bug.")
        (tmp / _STATS).write_text(json.dumps(stats, sort_keys=True))
    mirror.push(target)
    return stats


def _split_rows(codes: np.ndarray):
    """(split code, rows) per split present: a slice where the codes are sorted (ordered splits, files),
    so each split's rows are views, not copies; else a boolean mask."""
    if len(codes) and np.all(codes[:-1] <= codes[1:]):
        edges = np.searchsorted(codes, np.arange(codes[-1] + 2, dtype=codes.dtype))
        return [(c, slice(int(edges[c]), int(edges[c + 1]))) for c in range(codes[0], codes[-1] + 1)
                if edges[c + 1] > edges[c]]
    return [(c, codes == c) for c in np.unique(codes)]


def _encode(job: Job, dtypes: dict[str, str], df: pl.DataFrame, dictionaries: dict[str, np.ndarray],
            encode: vocab.Encoder, i: int) -> dict[str, np.ndarray]:
    return encode_batch(job.transforms, job.config.numerical_dtype, dtypes, df, encode, dictionaries,
                        source=f"{job.inputs[i].uri} (parsed before, for another numerical dtype)")


def encode_batch(t: Transforms, numerical_dtype: str, dtypes: dict[str, str], df: pl.DataFrame,
                 encode: vocab.Encoder, dictionaries: dict[str, np.ndarray] | None = None,
                 source: str = "input") -> dict[str, np.ndarray]:
    """Output arrays of a batch of parsed rows by output file name: label (0/1 bytes), numerical [n, k],
    cat_<f> indices (``dictionaries``: of the columns that hold codes, see ``vocab.dictionary_encode``;
    hash-bucket features are already indices); a list feature's: [n, hotness] or a ``lists.Ragged``.
    A numerical that does not fit ``numerical_dtype`` is a NumericalRangeError (the parse names its line; this
    catches parts parsed for a wider dtype, ``source`` naming their file)."""
    out = {LABEL_FILE: df[t.label].to_numpy().astype(np.uint8)}
    if t.numerical:
        check_numerical(df, t, numerical_max(numerical_dtype), lambda row: f"{source}, parsed row {row + 1} of a block")
        num = np.empty((len(df), len(t.numerical)), numerical_dtype)
        for j, (n, _) in enumerate(t.numerical):
            num[:, j] = df[n].to_numpy()   # converted while copied in
        out[NUMERICAL_FILE] = num
    indices = encode(df, dictionaries, dtypes)
    for c in t.categorical:
        if c.multi_valued:
            flat = indices[c.name] if c.name in indices else lists.flatten(df[c.name])
            idx = flat.values if isinstance(flat.values, np.ndarray) else flat.values.fill_null(0).to_numpy()
            truncated = df[lists.truncated_column(c.name)].to_numpy() if c.max_hotness is not None else None
            out[categorical_file_name(c.name)] = lists.layout(idx, flat.lengths, c.hotness, dtypes[c.name], truncated)
            continue
        idx = indices[c.name] if c.name in indices else df[c.name].to_numpy()
        out[categorical_file_name(c.name)] = idx.astype(dtypes[c.name], copy=False)
    return out


def _out(files: dict, folder: Path, split: str, name: str):
    key = (split, name)
    if key not in files:
        (folder / split).mkdir(exist_ok=True)
        files[key] = open(folder / split / name, "wb")
    return files[key]


_ENCODERS: dict[tuple, object] = {}
_ENCODERS_LOCK = threading.Lock()


def _encoder(work: WorkFolder, features: list[str]):
    """The vocabulary encoder of a work folder, built once per process (the worker threads share it);
    keyed by the vocabulary files' identities, so a rebuilt vocabulary is never served stale."""
    paths = [work.vocab(f) for f in features]
    for p in paths:
        work.mirror.pull(p)
    key = (work, tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in paths))
    with _ENCODERS_LOCK:
        if key not in _ENCODERS:
            _ENCODERS.clear()
            _ENCODERS[key] = vocab.Encoder({f: pl.read_parquet(p) for f, p in zip(features, paths)})
        return _ENCODERS[key]

