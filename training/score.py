"""Batch scoring from the launcher's side: predict an encoded split on several ranks, join the per-rank parts.

``predict_parts`` runs ``training.score_worker`` (``score_job``) on the ranks of a launcher (as evaluation does:
local torchrun by default, or Slurm/Kubernetes through the run folder): each rank writes the probabilities of
its rows to a parts folder, which ends up local. ``write_scores`` streams those parts, in row order, beside
the rows' positions (a Parquet file with one row per scored row: file, row, id, label ...) into the output
Parquet (written atomically, then its completion marker ``<out>.complete``: ``common.atomic.mark_complete``;
readers check it with ``models.scoring.check_scores``) and returns the row count and, when there are labels, the metrics
(``training.metrics.compute_metrics``). Training never reads raw rows: preprocessing encodes them first.

A full disk is ``common.space.NoSpace`` (the output, the free space, the fix): ``write_scores`` refuses before
writing when a local output's filesystem has less free space than the rows' positions and probabilities take, and a
write that finds none says so (the partial output removed).
"""

from __future__ import annotations

import json
import posixpath
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from common.atomic import atomic_open, mark_complete, unmark
from common.errors import UserError
from common.space import check_free, writing
from common.store import filesystem
from training.batches import rank_slice
from training.launchers import Launcher, RankJob, RankOutput, build_launcher
from training.metrics import compute_metrics
from training.rundir import RunDir

META = "meta.json"
PROBABILITY, LABEL = "probability", "label"
NO_SPACE_FIX = "free space on {mount}, or write the scores to a filesystem with room (--out)"


def part_name(rank: int) -> str:
    """The probability part of one rank in a parts folder."""
    return f"probs-{rank:05d}.bin"


def score_job(step: int, dataset: str, split: str, parts: str, tag: str = "") -> RankJob:
    """The scoring's rank job: ``training.score_worker RUN --step STEP --dataset DATASET --split SPLIT --parts
    PARTS``; ``tag`` tells apart scorings of one run that may run at once (in the cluster job's name)."""
    return RankJob("score", "training.score_worker",
                   ("--step", str(step), "--dataset", dataset, "--split", split, "--parts", parts), tag)


def scoring_launcher(launcher=None) -> Launcher:
    """The launcher of a scoring's ranks (a ``LauncherConfig``, its dict or a ``Launcher``; None: local torchrun,
    one rank); UserError for one node of a hand-started multi-node job (checked before any work)."""
    runner = build_launcher(launcher)
    if runner.one_of_several:
        raise UserError("scoring cannot run as one node of a job started by hand on several nodes: each node's "
                        "`dlrmflow score` would encode and predict its own copy of the rows. Fix: score on one "
                        "machine (--launcher.nnodes 1), or on several through --launcher slurm or kubernetes.")
    return runner


def predict_parts(run: RunDir | str, step: int, dataset: str, split: str, parts: str | Path, *, launcher=None,
                  env: dict[str, str] | None = None, on_line: Callable[[str], None] | None = None) -> None:
    """Predict ``split`` of the local ``dataset`` with checkpoint ``step`` of ``run`` on the ranks of ``launcher``
    (``scoring_launcher``'s argument); the parts land in the local folder ``parts``. UserError when the ranks fail
    (naming the failing rank's error).

    Ranks that do not see this machine's files (Slurm, Kubernetes) read and write through the run folder, which
    they reach anyway (the checkpoint is there): ``dataset`` is copied to ``<run>/scoring/<token>/dataset``
    (``RunDir.scoring_dir``), the ranks write their parts beside it, these are copied back to ``parts``, and the
    scratch folder is removed, also on failure."""
    run = RunDir(run)
    runner = scoring_launcher(launcher)
    Path(parts).mkdir(parents=True, exist_ok=True)
    output = RankOutput(on_line or (lambda text: print(text, flush=True)), run=run, job="scoring")
    if runner.shares_files:
        rc = runner.run_ranks(score_job(step, dataset, split, str(parts)), run, env=env, on_line=output)
    else:
        token = uuid.uuid4().hex[:8]
        scratch = run.scoring_dir(token)
        try:
            output(f"dlrmflow: the ranks run elsewhere ({runner.describe()}): copying the encoded rows to {scratch}")
            _copy_to(dataset, run, RunDir.SCORING, token, "dataset")
            job = score_job(step, f"{scratch}/dataset", split, f"{scratch}/parts", token)
            rc = runner.run_ranks(job, run, env=env, on_line=output)
            if rc == 0:
                _copy_from(run, Path(parts), RunDir.SCORING, token, "parts")
        finally:
            run.remove_scoring(token)
    output.close()
    if rc != 0:
        raise UserError(output.failure(f"scoring with {run} (step {step})", rc))


def _copy_to(local: str | Path, run: RunDir, *parts: str) -> None:
    """Copy the local folder ``local`` (its files, recursively) to ``parts`` inside the run folder."""
    local = Path(local)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        target = run.path(*parts, path.relative_to(local).as_posix())
        run.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        run.fs.put_file(str(path), target)


def _copy_from(run: RunDir, local: Path, *parts: str) -> None:
    """Copy the files of the folder ``parts`` inside the run folder into the local folder ``local`` (flat)."""
    for path in run.fs.find(run.path(*parts)):
        run.fs.get_file(path, str(local / posixpath.basename(path)))


def probabilities(parts: str | Path) -> Iterator[np.ndarray]:
    """The probabilities of the parts folder in row order, one global batch at a time."""
    parts = Path(parts)
    meta = json.loads((parts / META).read_text())
    rows, batch, world = meta["rows"], meta["batch_rows"], meta["world_size"]
    files = [open(parts / part_name(r), "rb") for r in range(world)]
    try:
        for start in range(0, rows, batch):
            chunks = []
            for r, f in enumerate(files):
                lo, hi, _ = rank_slice(start, min(start + batch, rows), r, world)
                chunks.append(np.frombuffer(f.read(4 * (hi - lo)), np.float32))
            yield np.concatenate(chunks)
    finally:
        for f in files:
            f.close()


def write_scores(positions: str | Path, parts: str | Path, out: str) -> dict[str, Any]:
    """Write ``out`` (Parquet): the columns of ``positions`` with ``probability`` (float32) after ``row``.
    Returns ``{"rows", "out"}`` plus the metrics (auc, logloss, ...) when the positions carry a ``label``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = pq.ParquetFile(str(positions))
    names = source.schema_arrow.names
    at = names.index("row") + 1
    schema = source.schema_arrow.insert(at, pa.field(PROBABILITY, pa.float32()))
    stream, pending = probabilities(parts), np.empty(0, np.float32)
    probs, labels, rows = [], [], 0
    fs, path = filesystem(out)
    world = json.loads((Path(parts) / META).read_text())["world_size"]
    need = Path(positions).stat().st_size + sum((Path(parts) / part_name(r)).stat().st_size for r in range(world))
    check_free(out, need, f"the scores {out}", "the rows' positions and probabilities", NO_SPACE_FIX)
    unmark(path, fs)   # until the new marker, readers take the output for unfinished
    with writing(out, NO_SPACE_FIX), atomic_open(path, "wb", fs) as f, pq.ParquetWriter(f, schema) as writer:
        for table in source.iter_batches(batch_size=1 << 16):
            while len(pending) < table.num_rows:
                pending = np.concatenate([pending, next(stream)])
            p, pending = pending[:table.num_rows], pending[table.num_rows:]
            writer.write_batch(pa.RecordBatch.from_arrays(
                [*table.columns[:at], pa.array(p), *table.columns[at:]], schema=schema))
            rows += table.num_rows
            if LABEL in names:
                probs.append(p)
                labels.append(table.column(LABEL).to_numpy())
    if len(pending) or next(stream, None) is not None:
        raise RuntimeError(f"{parts}: more probabilities than positions")   # a bug, not a user error
    with writing(out, NO_SPACE_FIX):
        mark_complete(path, fs, rows=rows)
    summary: dict[str, Any] = {"rows": rows, "out": out}
    if labels and rows:
        summary |= compute_metrics(np.concatenate(probs), np.concatenate(labels).astype(np.float32))
    return summary
