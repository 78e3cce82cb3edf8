"""`preprocessing.run(config)`: raw inputs -> split-binary dataset, parse once, resumable, parallel.

``Preprocessing.run`` is the one place that spells the stage order; an ``Executor`` runs the stages (threads
here, Prefect tasks in the preprocess flow)."""

from __future__ import annotations

import sys
from functools import partial
from typing import Callable

import polars as pl

from common.atomic import atomic_path
from common.errors import UserError
from feature_spec import Chunk, Feature, FeatureSpec, categorical_file_name, offsets_file_name

from . import lists, parallel, stages, vocab, work, writer
from .config import PreprocessConfig
from .inspect import verify_once
from .job import FORMAT_VERSION, Job
from .parallel import Executor, ThreadExecutor
from .stages import LABEL_FILE, NUMERICAL_FILE, Placement


def _say(message: str) -> None:
    print(message, file=sys.stderr)


class Preprocessing:
    """One preprocessing job. ``run`` parses every input file, places the rows (split names, global row
    numbers), counts every file, builds the vocabularies, encodes every file and writes the dataset; every
    stage skips the work that an earlier, interrupted run already finished. The parses and all-rows counts
    are kept per input file for the next dataset that uses the file (``prune_file_parts`` removes them)."""

    def __init__(self, config: PreprocessConfig):
        self.job = Job.from_config(config)

    def run(self, executor: Executor | None = None, say: Callable[[str], None] = _say) -> str:
        """Run every stage with ``executor`` (default: worker threads) unless the dataset is complete; ``say``
        reports each milestone (default: stderr). Returns the dataset URI. Under the dataset key's preprocessing
        lease: a second job of the same key waits (saying so), then finds the finished dataset and reuses it.

        A dataset finished before this run started is verified before it is returned (``inspect.verify_once``: its
        files against their recorded checksums, once per write of it; a file that differs is a UserError, so that
        no run trains on it). One that this run wrote, or that another run of its key finished while this one ran,
        is returned as written: its checksums were just taken from the bytes written; its first reuse verifies it."""
        job = self.job
        if writer.is_complete(job.dataset):
            say(f"dataset with fingerprint {job.fingerprint[:12]} already complete, skipping preprocessing: "
                f"{job.dataset}")
            verify_once(job.dataset, say)
            return job.dataset
        held = work.take_dataset_lease(job.config.out, job.work.root.name, job.parts, say=say)
        try:
            if writer.is_complete(job.dataset):   # written by the job we waited for
                say(f"dataset with fingerprint {job.fingerprint[:12]} was completed by another run meanwhile, "
                    f"reusing it: {job.dataset}")
                return job.dataset
            self._stages(executor or ThreadExecutor(job.config.threads(), job.config.progress), say, held)
        finally:
            work.release_dataset_lease(held, job.config.out)
        return job.dataset

    def _stages(self, executor: Executor, say: Callable[[str], None], held) -> None:
        job = self.job
        files = range(len(job.inputs))
        parallel.keep_freed_memory()
        job.work.create()
        say(f"preprocessing {len(files)} input files -> {job.dataset}")
        metas = executor.map("parse", partial(stages.parse_file, job, say=say), files)
        placement = stages.place(job, metas)
        say(f"parsed {placement.total_rows} rows")
        executor.map("count", partial(stages.count_file, job, placement, say=say), files, placement.total_rows)
        cards = executor.call("build_vocabulary", partial(build_vocab, job, placement))
        say(f"vocabularies built: {len(cards)} categorical features, {sum(cards.values())} embedding rows in all")
        stats = executor.map("encode", partial(stages.encode_file, job, placement, cards), files,
                             placement.total_rows)
        held.check()   # still ours: nobody took the key over while this job ran
        written = executor.call("write_dataset", partial(write_dataset, job, placement, metas, stats, cards))
        job.work.remove()
        say(f"dataset written: {job.dataset}" if written is not False else
            f"dataset finished meanwhile by another run, reusing it: {job.dataset}")


def run(config: PreprocessConfig) -> str:
    """Preprocess per ``config`` in worker threads; returns the dataset URI (an existing complete one is reused)."""
    return Preprocessing(config).run()


def build_vocab(job: Job, placement: Placement) -> dict[str, int]:
    """Merge the counts of every file's counted rows into vocab/<feature>.parquet (kept on resume); returns every categorical's
    cardinality (the features still to build: ``vocab.build_many``, on the job's threads)."""
    t = job.transforms
    cards = {c.name: c.hash_buckets for c in t.categorical if c.hash_buckets is not None}
    todo = {}
    counted = [(i, p) for i in range(len(job.inputs)) if (p := stages.counts_path(job, placement, i)) is not None]
    counts = [p for _, p in counted]
    for c in t.categorical:
        if c.hash_buckets is not None:
            continue
        path = job.work.vocab(c.name)
        if job.mirror.pull(path):
            cards[c.name] = pl.scan_parquet(path).select(pl.len()).collect().item() + 1
            continue
        dtype = lists.element_type(c, job.types[c.name]) if c.multi_valued else \
            pl.UInt32 if c.kind == "hex" else job.types[c.name]
        todo[c.name] = (counts, c.threshold, dtype)
    if todo:
        for i, p in counted:
            if not job.mirror.pull(p):
                raise stages.broken_part(job, i, "is missing (its counts were removed meanwhile)", p)
    for name, table in vocab.build_many(todo, job.config.threads()).items():
        with atomic_path(job.work.vocab(name)) as tmp:
            table.write_parquet(tmp, statistics=False)
        job.mirror.push(job.work.vocab(name))
        cards[name] = len(table) + 1
    return {c.name: cards[c.name] for c in t.categorical}


def write_dataset(job: Job, placement: Placement, metas: list[dict], stats: list[dict], cards: dict[str, int]) -> bool:
    """The split files, vocabularies and feature spec in the dataset folder (``_SUCCESS`` last); False, writing
    nothing, when the dataset was finished meanwhile (by another run of the same key). Every input file's
    encoded part must be there and hold its parsed rows, and every split file the bytes of its planned rows."""
    if writer.is_complete(job.dataset):
        return False
    t, names = job.transforms, placement.split_names
    files = [LABEL_FILE] + ([NUMERICAL_FILE] if t.numerical else []) + \
        [categorical_file_name(c.name) for c in t.categorical]
    variable = [c.name for c in t.categorical if c.multi_valued and c.hotness is None]
    offsets = {lists.lengths_file_name(f): offsets_file_name(f) for f in variable}
    parts = [job.work.encoded(i) for i in range(len(job.inputs))]
    for i, p in enumerate(parts):
        encoded = sum(stats[i][s]["rows"] for s in names)
        if not job.mirror.pull(p) or encoded != stages.file_rows(placement, i):
            raise UserError(f"input file {job.inputs[i].uri}: its encoded part {p} is missing or holds {encoded} "
                            f"rows of the {stages.file_rows(placement, i)} parsed (its work folder was removed "
                            "meanwhile, e.g. by another run of the same dataset). Nothing was written to the "
                            "dataset. Fix: run the same command again; the missing parts are made again.")
    for f in t.vocab_features:
        if not job.mirror.pull(job.work.vocab(f)):
            raise UserError(f"the vocabulary of '{f}' ({job.work.vocab(f)}) is missing (its work folder was removed "
                            "meanwhile, e.g. by another run of the same dataset). Nothing was written to the "
                            "dataset. Fix: run the same command again; the missing parts are made again.")
    rows = {s: sum(st[s]["rows"] for st in stats) for s in names}
    planned = stages.planned_rows(job, placement)
    if planned is not None and planned != rows or sum(rows.values()) != placement.total_rows:
        raise UserError(f"the encoded rows per split {rows} are not the planned ones "
                        f"{planned or placement.total_rows} (split rule {job.rule.text()}); nothing was written to "
                        "the dataset. Fix: run the same command again; if it happens again, report it as a bug.")
    index0 = {s: {c.name: sum(st[s]["index0"][c.name] for st in stats) for c in t.categorical} for s in names}
    list_lengths = {s: {f: lists.merge_stats(st[s]["lists"][f] for st in stats) for f in _listed(job)}
                    for s in names}
    spec = dataset_spec(job, placement, cards, rows, index0, {}, sum(m["bad_rows"] for m in metas), list_lengths)
    sizes = {rel: n for s in names for rel, n in spec.file_sizes(s).items()}   # the planned rows' bytes
    try:
        checksums = writer.write_splits(job.dataset, parts, names, files, offsets, sizes)
        checksums |= writer.write_vocab(job.dataset, {f: job.work.vocab(f) for f in t.vocab_features})
        spec.metadata["checksums"] = checksums
        writer.finish(job.dataset, spec)
    except writer.FinishedDataset:
        return False   # finished by another run while this one wrote: its files are kept, reused
    return True


def _listed(job: Job) -> list[str]:
    return [c.name for c in job.transforms.categorical if c.multi_valued]


def dataset_spec(job: Job, placement: Placement, cards, rows, index0, checksums, bad_rows,
                 list_lengths: dict | None = None) -> FeatureSpec:
    """The feature spec of ``job``'s dataset: its features (``cards``: cardinality per categorical), the files of
    each split of ``placement``, and the metadata (rows, bad rows, index-0 rows, vocabularies, list lengths per
    split). Also the spec of a scoring's dataset (``apply.encode_inputs``)."""
    t, inputs = job.transforms, job.spec.feature_spec
    dtypes = t.categorical_dtypes(cards)
    features = {t.label: Feature(dtype="bool")}
    features |= {n: Feature(dtype=job.config.numerical_dtype) for n, _ in t.numerical}
    features |= {c.name: Feature(dtype=dtypes[c.name], cardinality=cards[c.name], **lists.output_fields(inputs[c.name]))
                 for c in t.categorical}
    source = {}
    for s in placement.split_names:
        chunks = [Chunk(type="split_binary", features=[t.label], files=[f"{s}/{LABEL_FILE}"])]
        if t.numerical:
            chunks.append(Chunk(type="split_binary", features=[n for n, _ in t.numerical],
                                files=[f"{s}/{NUMERICAL_FILE}"]))
        chunks += [Chunk(type="split_binary", features=[c.name], files=lists.output_files(s, c.name, inputs[c.name]))
                   for c in t.categorical]
        source[s] = chunks
    metadata = {
        "format_version": FORMAT_VERSION, "name": job.spec.metadata.get("name") or "dataset",
        "fingerprint": job.fingerprint, "rows": rows, "bad_rows": bad_rows,
        "index0_rows": index0, "vocab": {f: writer.vocab_file(f) for f in t.vocab_features},
        "hash_buckets": {c.name: c.hash_buckets for c in t.categorical if c.hash_buckets is not None},
        "preprocessing": job.settings(), "checksums": checksums,
    }
    if _listed(job):
        metadata["list_lengths"] = list_lengths or {}
    return FeatureSpec(feature_spec=features, source_spec=source, channel_spec=dict(job.spec.channel_spec),
                       metadata=metadata).validate_spec()
