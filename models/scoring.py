"""Batch scoring, the Python API (no Prefect): raw rows -> click probabilities with a model's own vocabulary.

``score(ScoreConfig(model=..., inputs=[...], out=...))`` finds the run, checkpoint step and dataset (a named
model's champion, or a run folder), then: (1) ``preprocessing.apply.encode_inputs`` encodes the raw rows
with that dataset's vocabularies and transforms into a temporary local dataset; (2)
``training.score.predict_parts`` predicts it on the ranks of a launcher (``launcher``: local torchrun by default,
or Slurm/Kubernetes, the rows going through the run folder); (3) ``training.score.write_scores``
joins the probabilities with the rows' positions into the output Parquet, then its completion marker
``<out>.complete`` (rows and bytes); a reader takes the output only through ``check_scores`` or ``read_scores``.
The temporary folder is removed.
With ``bundle`` (a serving bundle, ``training.export``) instead: the rows are encoded with the bundle's own
vocabularies and input spec and its torch.export program (``model.pt2``; a bundle written before it: its deprecated
TorchScript ``model.pt``) predicts them in this process, batch by batch (no
TorchRec sharding, no process group); the output is the same Parquet.
What ``dlrmflow score``, the score flow and the pipeline's champion/challenger comparison call
(``row_scores`` reads a scores file back for the comparison's same-rows and bootstrap gates).
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any, Callable

from common.atomic import COMPLETE, completed
from common.errors import UserError
from common.store import filesystem
from models.config import ExportConfig, ScoreConfig
from models.decision import RowScores, fingerprint
from models.registry import CHAMPION_FILE, champion_to_load
from training import RunDir, checkpoint_of


def export(config: ExportConfig) -> dict[str, Any]:
    """Export the model's champion (or the run's checkpoint) as a serving bundle at ``config.out``; returns
    the bundle's manifest (``training.export.export_bundle``)."""
    from training import export_bundle

    found = locate_checkpoint(config)
    return export_bundle(found["run"], found["step"], config.out, quantize=config.quantize)


def locate_checkpoint(config: "ScoreConfig | ExportConfig") -> dict[str, Any]:
    """``{"run", "step", "dataset", "warning"}``: the model's champion, or the run's checkpoint. UserError for
    neither or both given, a folder that is no model or has no champion, or a run without that checkpoint."""
    given = [name for name in ("model", "run", "bundle") if getattr(config, name, None)]
    if len(given) != 1:
        raise UserError("score needs one of a model, a run or a bundle, not " +
                        (" and ".join(given) if given else "none") +
                        ". Fix: pass --model STORE/models/NAME, --run RUN_FOLDER or --bundle BUNDLE.")
    if config.run:
        found = checkpoint_of(RunDir(config.run), config.checkpoint)
        return {"run": config.run, **found}
    champion = champion_to_load(config.model)
    if champion is None:
        raise UserError(f"{config.model}: no {CHAMPION_FILE} there, so the model has no champion to score with. "
                        "Fix: check the model folder (STORE/models/NAME), run the pipeline for that model first, "
                        "or pass --run RUN_FOLDER to score with a training run.")
    checkpoint_of(RunDir(champion.run), champion.step)   # the champion's run and checkpoint still exist
    return {"run": champion.run, "step": champion.step, "dataset": champion.dataset, "warning": None}


def score(config: ScoreConfig, *, launcher=None, env: dict[str, str] | None = None,
          on_line: Callable[[str], None] | None = None, slice_by: str | None = None) -> dict[str, Any]:
    """Score ``config.inputs`` (see the module doc) with a checkpoint on the ranks of ``launcher`` (a
    ``training.launchers.LauncherConfig`` or its dict; None: local torchrun, one rank), or with a bundle in this
    process. Returns the summary: rows, bad_rows, out, run, step, dataset, and the metrics (auc, logloss, ...)
    when the inputs carry labels. ``on_line`` gets each line of progress text (default: printed). ``slice_by``: a
    categorical feature whose raw value (by the checkpoint's vocabulary) each row also gets, in the column
    ``slice_column(slice_by)`` (what the nightly comparison slices by; a checkpoint's scoring only)."""
    say = on_line or (lambda line: print(line, file=sys.stderr, flush=True))
    config, pinned = _with_champion_bundle(config)
    if config.bundle and (config.model or config.run):
        locate_checkpoint(config)   # the error naming both
    if slice_by and config.bundle:
        raise UserError(f"scores sliced by '{slice_by}' need a run's or a model's checkpoint, not the bundle "
                        f"{config.bundle}. Fix: score with --run or --model.")
    with tempfile.TemporaryDirectory(prefix="dlrmflow-score-", ignore_cleanup_errors=True) as folder:
        summary = _score_bundle(config, say, folder, pinned) if config.bundle else \
            _score_checkpoint(config, say, folder, launcher, env, on_line, slice_by)
    say(f"wrote {summary['rows']:,} scores to {config.out}" +
        (f": auc {summary['auc']:.4f} logloss {summary['logloss']:.4f}" if "auc" in summary else ""))
    return summary


def check_scores(out: str) -> dict[str, Any]:
    """The completion marker of the scores output ``out`` (``rows``, ``bytes``); UserError when it is missing or
    does not match the file (a write cut short, a scoring still running)."""
    fs, path = filesystem(out)
    marker = completed(path, fs)
    if marker is None:
        raise UserError(f"scores {out} are not complete: no matching completion marker {out}{COMPLETE} (the scoring "
                        "failed, was stopped or still runs). Fix: score again (dlrmflow score ... --out the same).")
    return marker


def read_scores(out: str, columns: list[str] | None = None):
    """The scores output ``out`` (those ``columns``, else all) as a pyarrow Table, once ``check_scores`` finds
    it complete."""
    import pyarrow.parquet as pq

    check_scores(out)
    fs, path = filesystem(out)
    with fs.open(path, "rb") as f:
        return pq.read_table(f, columns=columns)


def _score_checkpoint(config: ScoreConfig, say: Callable[[str], None], folder: str, launcher,
                      env: dict[str, str] | None, on_line: Callable[[str], None] | None,
                      slice_by: str | None = None) -> dict[str, Any]:
    """``score`` with a run's checkpoint: encode with its dataset's vocabularies, predict on ranks (torchrun)."""
    from preprocessing.apply import SCORE_SPLIT, encode_inputs
    from training import predict_parts, scoring_launcher, write_scores

    runner = scoring_launcher(launcher)

    found = locate_checkpoint(config)
    if found["warning"]:
        say(f"warning: {found['warning']}")
    say(f"encoding {len(config.inputs)} input(s) with the vocabularies of {found['dataset']}")
    encoded = encode_inputs(found["dataset"], config.inputs, folder, on_bad_row=config.on_bad_row,
                            max_bad_fraction=config.max_bad_fraction, progress=config.progress)
    say(f"encoded {encoded.rows:,} rows ({encoded.bad_rows:,} bad rows skipped); predicting with "
        f"{found['run']} step {found['step']} on {runner.world_size} rank(s)")
    if slice_by:
        _add_slice(encoded, found["dataset"], slice_by)
    parts = f"{folder}/parts"
    predict_parts(found["run"], found["step"], encoded.dataset, SCORE_SPLIT, parts, launcher=runner,
                  env=env, on_line=on_line)
    return write_scores(encoded.positions, parts, config.out) | {
        "bad_rows": encoded.bad_rows, "run": found["run"], "step": found["step"], "dataset": found["dataset"]}


def row_scores(out: str) -> RowScores:
    """The labelled scores file ``out`` (``score``'s Parquet, complete: ``read_scores``) as ``RowScores``, rows
    sorted by (file, row) so that two models' scores of the same rows pair up."""
    import numpy as np

    from training import LABEL, PROBABILITY

    table = read_scores(out, ["file", "row", PROBABILITY, LABEL])
    files = table.column("file").to_numpy(zero_copy_only=False)
    rows = table.column("row").to_numpy()
    order = _row_order(table)
    labels = table.column(LABEL).to_numpy()[order].astype(np.float64)
    return RowScores(table.column(PROBABILITY).to_numpy()[order].astype(np.float64), labels,
                     fingerprint(files[order], rows[order], labels))


def _row_order(table) -> "np.ndarray":
    """The order that sorts a scores table's rows by (file, row): ``row_scores``' order."""
    import numpy as np

    _, codes = np.unique(table.column("file").to_numpy(zero_copy_only=False), return_inverse=True)
    return np.lexsort((table.column("row").to_numpy(), codes))


def slice_column(feature: str) -> str:
    """The scores output's column of each row's raw value of ``feature`` (``score(..., slice_by=feature)``)."""
    return f"slice_{feature}"


def slice_keys(out: str, feature: str) -> "np.ndarray":
    """The raw values of ``feature`` of the scores file ``out`` (scored with ``slice_by=feature``), in
    ``row_scores``' row order (so that they pair up with its scores)."""
    table = read_scores(out, ["file", "row", slice_column(feature)])
    return table.column(slice_column(feature)).to_numpy(zero_copy_only=False)[_row_order(table)]


def _add_slice(encoded, dataset: str, feature: str) -> None:
    """Add each encoded row's raw value of ``feature`` (by ``dataset``'s vocabulary; index 0: missing or rare) to the
    positions file, which ``write_scores`` copies into the output."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from feature_spec import load as load_spec
    from preprocessing.apply import SCORE_SPLIT
    from training import check_feature, raw_values, read_column

    spec = load_spec(dataset)
    check_feature(spec, feature, "slice_by", dataset)
    indices = read_column(encoded.dataset, load_spec(encoded.dataset), SCORE_SPLIT, feature)
    names = raw_values(dataset, spec, feature, indices)
    unique, inverse = np.unique(indices, return_inverse=True)
    values = np.array([str(names[int(i)]) for i in unique], dtype=object)[inverse.ravel()]
    table = pq.read_table(encoded.positions)
    if table.num_rows != len(values):
        raise UserError(f"{encoded.positions}: {table.num_rows} positions for {len(values)} encoded rows of "
                        f"'{feature}'. Fix: score again (the encoded rows are incomplete).")
    pq.write_table(table.append_column(slice_column(feature), pa.array(values, pa.string())), encoded.positions)


def _with_champion_bundle(config: ScoreConfig) -> tuple[ScoreConfig, str | None]:
    """A model's champion scores with its serving bundle when champion.json pins one (the sha256 of its manifest;
    one process, no torchrun); else with its run's checkpoint. Returns the config and the pinned sha256 (None: a
    bundle the user named, or none)."""
    if not config.model or config.run or config.bundle:
        return config, None
    champion = champion_to_load(config.model)
    if champion is None or not champion.bundle or not champion.bundle_sha256:
        return config, None
    return config.model_copy(update={"model": None, "bundle": champion.bundle}), champion.bundle_sha256


def _score_bundle(config: ScoreConfig, say: Callable[[str], None], folder: str,
                  pinned: str | None = None) -> dict[str, Any]:
    """``score`` with a serving bundle: encode with its vocabularies and input spec, predict in this process.
    ``pinned``: the sha256 its manifest must have (a champion's, from champion.json)."""
    from preprocessing.apply import SCORE_SPLIT, encode_inputs
    from training import load_bundle, predict_split, write_scores

    bundle = load_bundle(config.bundle, cache=f"{folder}/bundle", manifest_sha256=pinned)
    source = bundle.manifest["source"]
    say(f"encoding {len(config.inputs)} input(s) with the vocabularies of the bundle {config.bundle}")
    encoded = encode_inputs(str(bundle.folder), config.inputs, f"{folder}/encoded", spec=bundle.input_spec,
                            on_bad_row=config.on_bad_row, max_bad_fraction=config.max_bad_fraction,
                            progress=config.progress)
    say(f"encoded {encoded.rows:,} rows ({encoded.bad_rows:,} bad rows skipped); predicting with the bundle "
        f"of {source['run']} step {source['step']} in this process")
    parts = f"{folder}/parts"
    predict_split(bundle, encoded.dataset, SCORE_SPLIT, parts)
    return write_scores(encoded.positions, parts, config.out) | {
        "bad_rows": encoded.bad_rows, "run": source["run"], "step": source["step"], "dataset": source["dataset"],
        "bundle": config.bundle}
