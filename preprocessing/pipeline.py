"""`preprocessing.run(config)`: raw inputs -> split-binary dataset, parse once, resumable, parallel.

``Preprocessing`` exposes the same job stage by stage (the Prefect flow maps its per-file stages as tasks)."""

from __future__ import annotations

import json
import logging
import shutil
import sys

import polars as pl

from common.errors import UserError
from common.atomic import atomic_path
from feature_spec import Chunk, Feature, FeatureSpec, categorical_dtype, categorical_file_name

from . import splits, vocab, writer
from .config import PreprocessConfig
from .parallel import Runner
from .resolve import FORMAT_VERSION, Resolved, env_flag, resolve
from .stages import (LABEL_FILE, NUMERICAL_FILE, FileTask, Job, count_file, encode_file, parse_file, part_name,
                     use_parse_counts)

log = logging.getLogger("dlrmflow.preprocess")


class Preprocessing:
    """One preprocessing job, stage by stage: ``plan()``, ``parse(i)`` for every file, ``place(metas)``,
    ``count(i)``, ``build_vocab()``, ``encode(i)``, ``finish()``. ``run`` and the Prefect flow drive it;
    every stage skips work that an earlier, interrupted run already finished."""

    def __init__(self, config: PreprocessConfig):
        self.config = config
        self.resolved = resolve(config)
        self.dataset = self.resolved.dataset
        self.job: Job | None = None
        self.tasks: list[FileTask] = []
        self.metas: list[dict] = []
        self.cards: dict[str, int] = {}

    def is_complete(self) -> bool:
        """True when the dataset already exists (``_SUCCESS`` written)."""
        return writer.is_complete(self.dataset)

    def plan(self) -> list[FileTask]:
        """Create the work folders and the per-file tasks (one per input file, in input order)."""
        r = self.resolved
        for folder in ("parsed", "counts", "encoded", "vocab"):
            (r.work / folder).mkdir(parents=True, exist_ok=True)
        self.job = Job(work=r.work, plan=r.plan, fmt=r.fmt, types=r.plan.parse_types(_native_types(r)), rule=r.rule,
                       policy=self.config.on_bad_row, count_on=self.config.count_on,
                       numerical_dtype=self.config.numerical_dtype)
        self.tasks = [FileTask(i, f.uri, f.split) for i, f in enumerate(r.inputs)]
        return self.tasks

    def parse(self, i: int, progress=None) -> dict:
        return parse_file(self.job, self.tasks[i], progress)

    def place(self, metas: list[dict]) -> int:
        """Check the bad-row budget, give each file its first global row; returns the total row count."""
        _check_bad(self.resolved, metas)
        _place(self.job, self.resolved, self.tasks, metas)
        for task, meta in zip(self.tasks, metas):
            use_parse_counts(self.job, task, meta["rows"])
        self.metas = metas
        return self.job.total_rows

    def count(self, i: int, progress=None) -> None:
        count_file(self.job, self.tasks[i], progress)

    def build_vocab(self) -> dict[str, int]:
        """Merge the counts into vocabularies; returns the cardinality of every categorical feature."""
        cards = _build_vocab(self.job, self.resolved)
        self.job.cat_dtypes = {c.name: categorical_dtype(cards[c.name]) for c in self.job.plan.categorical}
        self.cards = cards
        return cards

    def encode(self, i: int, progress=None) -> None:
        encode_file(self.job, self.tasks[i], progress)

    def finish(self) -> str:
        """Write the dataset (spec and ``_SUCCESS`` last), remove the work folder; returns the dataset URI."""
        r = self.resolved
        _write_dataset(r, self.job, self.tasks, self.metas, self.cards)
        shutil.rmtree(r.work, ignore_errors=True)
        if r.work.parent.name == "_work" and not any(r.work.parent.iterdir()):
            r.work.parent.rmdir()
        return self.dataset


def run(config: PreprocessConfig) -> str:
    """Preprocess per ``config``; returns the dataset URI (an existing complete one is reused)."""
    p = Preprocessing(config)
    if p.is_complete():
        _say(f"dataset already complete, nothing to do: {p.dataset}")
        return p.dataset
    tasks = p.plan()
    runner = Runner(config.workers, config.progress and not env_flag("DLRMFLOW_NO_PROGRESS"))
    with runner.open():
        rows = p.place(runner.map(parse_file, p.job, tasks, "parse"))
        runner.map(count_file, p.job, tasks, "count", rows)
        p.build_vocab()
        runner.map(encode_file, p.job, tasks, "encode", rows)
    _say(f"dataset written: {p.finish()}")
    return p.dataset


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _native_types(r: Resolved) -> dict | None:
    if r.fmt.kind != "parquet":
        return None
    from .readers import parquet_types
    return parquet_types(r.inputs[0].uri)


def _check_bad(r: Resolved, metas: list[dict]) -> None:
    bad = sum(m["bad_rows"] for m in metas)
    total = bad + sum(m["rows"] for m in metas)
    if bad and bad > r.config.max_bad_fraction * total:
        raise UserError(f"{bad} of {total} rows are malformed ({bad / total:.2%}), more than --max-bad-fraction "
                        f"{r.config.max_bad_fraction:g}. Fix: correct the inputs or raise --max-bad-fraction; "
                        "the parsed files are kept, so a rerun does not parse them again.")
    if total - bad == 0:
        raise UserError("the inputs hold no rows. Fix: check the input files.")


def _place(job: Job, r: Resolved, tasks: list[FileTask], metas: list[dict]) -> None:
    """Global first row of each file, the total and the split names."""
    start = 0
    for task, meta in zip(tasks, metas):
        task.start, start = start, start + meta["rows"]
    job.total_rows = start
    if r.rule.kind == "column" and not r.rule.cuts:
        job.split_names = splits.order_names({n for m in metas for n in m["split_names"]})
    else:
        job.split_names = list(r.rule.splits)
    if job.count_on == "train" and "train" not in job.split_names and job.plan.vocab_features:
        raise UserError(f"no 'train' split to count values on (splits: {', '.join(job.split_names)}). "
                        "Fix: name the training split 'train', or pass --count-on all.")


def _build_vocab(job: Job, r: Resolved) -> dict[str, int]:
    """Merge the count parts into vocab/<feature>.parquet (kept on resume); returns cardinalities.
    The features still to build are merged together (one parallel polars query each, run at once)."""
    cards = {c.name: c.hash_buckets for c in job.plan.categorical if c.hash_buckets is not None}
    todo = {}
    for c in job.plan.categorical:
        if c.hash_buckets is not None:
            continue
        path = r.work / "vocab" / f"{c.name}.parquet"
        if path.exists():
            cards[c.name] = pl.scan_parquet(path).select(pl.len()).collect().item() + 1
            continue
        dtype = pl.UInt32 if c.kind == "hex" else job.types[c.name]
        files = [r.work / "counts" / part_name(i) / f"{c.name}.arrow" for i in range(len(r.inputs))]
        todo[c.name] = (files, c.threshold, dtype)
    for name, table in vocab.build_many(todo).items():
        path = r.work / "vocab" / f"{name}.parquet"
        with atomic_path(path) as tmp:
            table.write_parquet(tmp, statistics=False)
        cards[name] = len(table) + 1
    return {c.name: cards[c.name] for c in job.plan.categorical}


def _write_dataset(r: Resolved, job: Job, tasks, metas, cards: dict[str, int]) -> None:
    parts = [r.work / "encoded" / part_name(t.i) for t in tasks]
    stats = [json.loads((p / "stats.json").read_text()) for p in parts]
    files = [LABEL_FILE] + ([NUMERICAL_FILE] if job.plan.numerical else []) + \
        [categorical_file_name(c.name) for c in job.plan.categorical]
    checksums = writer.write_splits(r.dataset, parts, job.split_names, files)
    checksums |= writer.write_vocab(r.dataset, r.work / "vocab", job.plan.vocab_features)
    rows = {s: sum(st[s]["rows"] for st in stats) for s in job.split_names}
    index0 = {s: {f: sum(st[s]["index0"][f] for st in stats) for f in job.cat_dtypes} for s in job.split_names}
    spec = _dataset_spec(r, job, cards, rows, index0, checksums, sum(m["bad_rows"] for m in metas))
    writer.finish(r.dataset, spec)


def _dataset_spec(r: Resolved, job: Job, cards, rows, index0, checksums, bad_rows) -> FeatureSpec:
    plan = job.plan
    features = {plan.label: Feature(dtype="bool")}
    features |= {n: Feature(dtype=job.numerical_dtype) for n, _ in plan.numerical}
    features |= {c.name: Feature(dtype=job.cat_dtypes[c.name], cardinality=cards[c.name]) for c in plan.categorical}
    source = {}
    for s in job.split_names:
        chunks = [Chunk(type="split_binary", features=[plan.label], files=[f"{s}/{LABEL_FILE}"])]
        if plan.numerical:
            chunks.append(Chunk(type="split_binary", features=[n for n, _ in plan.numerical],
                                files=[f"{s}/{NUMERICAL_FILE}"]))
        chunks += [Chunk(type="split_binary", features=[c.name], files=[f"{s}/{categorical_file_name(c.name)}"])
                   for c in plan.categorical]
        source[s] = chunks
    metadata = {
        "format_version": FORMAT_VERSION, "name": r.spec.metadata.get("name") or "dataset",
        "fingerprint": r.fingerprint, "rows": rows, "bad_rows": bad_rows,
        "index0_rows": index0, "vocab": {f: f"vocab/{f}.parquet" for f in plan.vocab_features},
        "hash_buckets": {c.name: c.hash_buckets for c in plan.categorical if c.hash_buckets is not None},
        "preprocessing": r.settings(), "checksums": checksums,
    }
    return FeatureSpec(feature_spec=features, source_spec=source, channel_spec=dict(r.spec.channel_spec),
                       metadata=metadata).validate_spec()
