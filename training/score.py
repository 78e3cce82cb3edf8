"""Batch scoring from the launcher's side: predict an encoded split on several ranks, join the per-rank parts.

``predict_parts`` runs ``training.score_worker`` under torchrun (as evaluation does): each rank writes the
probabilities of its rows to a local parts folder. ``write_scores`` streams those parts, in row order, beside
the rows' positions (a Parquet file with one row per scored row: file, row, id, label ...) into the output
Parquet (written atomically, then its completion marker ``<out>.complete``: ``common.atomic.mark_complete``;
readers check it with ``nightly.scoring.check_scores``) and returns the row count and, when there are labels, the metrics
(``training.metrics.compute_metrics``). Training never reads raw rows: preprocessing encodes them first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from common.atomic import atomic_open, mark_complete, unmark
from common.errors import UserError
from common.store import filesystem
from training.data import rank_slice
from training.rundir import RunDir

META = "meta.json"
PROBABILITY, LABEL = "probability", "label"


def part_name(rank: int) -> str:
    """The probability part of one rank in a parts folder."""
    return f"probs-{rank:05d}.bin"


def predict_parts(run: RunDir | str, step: int, dataset: str, split: str, parts: str | Path, *, nproc: int = 1,
                  env: dict[str, str] | None = None, on_line: Callable[[str], None] | None = None) -> None:
    """Predict ``split`` of ``dataset`` with checkpoint ``step`` of ``run`` on ``nproc`` ranks (torchrun);
    the parts land in the local folder ``parts``. UserError when the ranks fail (with their error lines)."""
    from training.launchers.local import run_command, torchrun_command

    run = RunDir(run)
    Path(parts).mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def keep(line: str) -> None:
        lines.append(line)
        lines[:] = lines[-200:]
        (on_line or (lambda text: print(text, flush=True)))(line)

    cmd = torchrun_command(run.uri, nproc=nproc, module="training.score_worker",
                           args=["--step", str(step), "--dataset", dataset, "--split", split, "--parts", str(parts)])
    rc = run_command(cmd, env=env, on_line=keep)
    if rc != 0:
        errors = [ln for ln in lines if ln.startswith("error")] or lines[-20:]
        raise UserError(f"scoring with {run} (step {step}) failed (torchrun exit code {rc}):\n" + "\n".join(errors))


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
    unmark(path, fs)   # until the new marker, readers take the output for unfinished
    with atomic_open(path, "wb", fs) as f, pq.ParquetWriter(f, schema) as writer:
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
    mark_complete(path, fs, rows=rows)
    summary: dict[str, Any] = {"rows": rows, "out": out}
    if labels and rows:
        from training.metrics import compute_metrics

        summary |= compute_metrics(np.concatenate(probs), np.concatenate(labels).astype(np.float32))
    return summary
