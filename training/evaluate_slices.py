"""An evaluation's metrics per slice: by the values of one categorical feature (``EvaluateConfig.slice_by``: its
most frequent values on the split and 'other'; ``common.metrics.slices``) and the grouped AUC by another
(``gauc_by``: ``common.metrics.gauc``), the values named by their raw values where the dataset's vocabulary has
them (index 0: missing or below the frequency threshold). Rank 0 of ``training.evaluate_worker`` reads the
feature's column of the split in the order its gathered predictions have (``gathered_rows``); batch scoring
(``models.scoring``) names the slices of scored rows with ``raw_values``. ``slices_png`` draws the slices' AUC and
NE for the evaluation's artifact."""

from __future__ import annotations

from typing import Any

import numpy as np

from common import metrics
from common.errors import UserError
from common.store import open_uri
from feature_spec import file_uri
from training.batches import rank_slice

INDEX0 = "(missing or rare)"   # a vocabulary's index 0: missing values and those below the frequency threshold


def check_feature(spec: Any, feature: str | None, option: str, where: str) -> None:
    """UserError unless ``feature`` (None: nothing to check) is a categorical feature of ``spec`` with one value a
    row; ``option``: the setting that names it, ``where``: the dataset."""
    if feature is None:
        return
    one_value = [f for f in spec.categorical_features
                 if spec.feature_spec[f].values_per_row == 1 and not spec.feature_spec[f].variable_length]
    if feature not in one_value:
        what = "is a list feature (several values a row)" if feature in spec.categorical_features else \
            "is no categorical feature"
        shown = ", ".join(one_value[:12]) + (" ..." if len(one_value) > 12 else "")
        raise UserError(f"{where}: {option} '{feature}' {what} of the dataset. Fix: name a categorical feature with "
                        f"one value a row: {shown or 'the dataset has none'}.")


def gathered_rows(num_rows: int, batch_size: int, world_size: int) -> np.ndarray:
    """The split's row numbers in the order ``Trainer.predict`` gathers its predictions: each rank's rows of every
    global batch (``training.batches.rank_slice``), rank after rank (padding dropped)."""
    step = batch_size * world_size
    parts = [np.arange(*rank_slice(start, min(start + step, num_rows), rank, world_size)[:2])
             for rank in range(world_size) for start in range(0, num_rows, step)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def read_column(dataset: str, spec: Any, split: str, feature: str) -> np.ndarray:
    """The stored indices of the one-value feature ``feature`` in ``split``, one a row, in file order (int64)."""
    from training.cache import local_copy

    uri = file_uri(dataset, spec.file_of(split, feature)[0])
    try:
        path = local_copy(uri)
    except FileNotFoundError:
        raise UserError(f"{uri}: the data file of '{feature}' is missing. Fix: re-run preprocessing for the "
                        "dataset.") from None
    return np.fromfile(path, np.dtype(spec.feature_spec[feature].dtype)).astype(np.int64)


def raw_values(dataset: str, spec: Any, feature: str, indices: np.ndarray) -> dict[int, Any]:
    """Index -> the raw value it stands for, for ``indices`` of ``feature``: from the dataset's vocabulary
    (``INDEX0`` for index 0; a hex id as 8 hex digits), ``bucket N`` for a hashed feature, the index itself without
    a vocabulary (NVIDIA's datasets)."""
    wanted = [int(i) for i in np.unique(indices)]
    vocab = (spec.metadata.get("vocab") or {}).get(feature)
    if not vocab:
        hashed = feature in (spec.metadata.get("hash_buckets") or {})
        return {i: f"bucket {i}" if hashed else i for i in wanted}
    import polars as pl

    uri = file_uri(dataset, vocab)
    try:
        with open_uri(uri) as f:
            table = pl.read_parquet(f, columns=["value", "index"])
    except FileNotFoundError:
        raise UserError(f"{uri}: the vocabulary of '{feature}' is missing. Fix: re-run preprocessing for the "
                        "dataset (its folder is incomplete).") from None
    table = table.filter(pl.col("index").is_in(wanted))
    found = dict(zip(table["index"].to_list(), table["value"].to_list()))
    if _is_hex(spec, feature):   # a hex id is kept as its number: written back as the input's 8 hex digits
        found = {i: f"{v:08x}" if isinstance(v, int) else v for i, v in found.items()}
    return {i: INDEX0 if i == 0 else found.get(i, f"index {i}") for i in wanted}


def _is_hex(spec: Any, feature: str) -> bool:
    """Whether the dataset's input spec (``metadata.preprocessing.spec``: a built-in name or a YAML) reads
    ``feature`` as hex ids (Criteo's C1..C26); False when that spec cannot be read any more."""
    import feature_spec as fspec

    name = (spec.metadata.get("preprocessing") or {}).get("spec")
    if not isinstance(name, str):
        return False
    try:
        source = fspec.preset(name) if name in fspec.presets.PRESETS else fspec.load(name)
    except (fspec.SpecError, UserError, OSError):
        return False
    found = source.feature_spec.get(feature)
    return found is not None and found.dtype == "hex"


def report(probs: np.ndarray, labels: np.ndarray, dataset: str, spec: Any, split: str, order: np.ndarray,
           slice_by: str | None, top: int, gauc_by: str | None) -> dict[str, Any]:
    """``{"slices": ..., "gauc": ...}`` (each only when asked) of predictions whose rows are ``order`` (row numbers
    of ``split``): ``slices``: ``{"by", "top", "table"}`` (``common.metrics.slices``, values raw), ``gauc``:
    ``{"by", "gauc", "groups", "rows", "groups_total"}``."""
    out: dict[str, Any] = {}
    if slice_by:
        keys = read_column(dataset, spec, split, slice_by)[order]
        table = metrics.slices(probs, labels, keys, top)
        names = raw_values(dataset, spec, slice_by, np.array([r["value"] for r in table if r["value"] is not None],
                                                             np.int64))
        for row in table:
            row["value"] = metrics.OTHER if row["value"] is None else names[row["value"]]
        out["slices"] = {"by": slice_by, "top": top, "table": table}
    if gauc_by:
        out["gauc"] = {"by": gauc_by, **metrics.gauc(probs, labels, read_column(dataset, spec, split, gauc_by)[order])}
    return out


def format_slices(found: dict[str, Any]) -> str:
    """The slices and the GAUC of ``report`` as printable lines."""
    lines = []
    if sliced := found.get("slices"):
        lines.append(f"slices by {sliced['by']} (top {sliced['top']} values by rows, then 'other'):")
        lines.append(f"  {'value':<24}{'rows':>10}{'share':>8}{'AUC':>8}{'NE':>8}{'calib.':>8}")
        for row in sliced["table"]:
            cells = [_cell(row.get(k)) for k in ("auc", "normalized_entropy", "calibration")]
            lines.append(f"  {str(row['value'])[:23]:<24}{row['rows']:>10,}{row['share']:>8.1%}"
                         + "".join(f"{c:>8}" for c in cells))
    if found.get("gauc"):
        g = found["gauc"]
        lines.append(f"GAUC by {g['by']}: {_cell(g['gauc'])} ({g['groups']:,} of {g['groups_total']:,} groups hold "
                     f"both classes: {g['rows']:,} rows)")
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def slices_png(sliced: dict[str, Any], title: str) -> bytes:
    """A bar chart of each slice's AUC and NE (``report``'s ``slices``), each bar named by its value and share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.png import png

    table = sliced["table"]
    names = [f"{str(r['value'])[:20]} ({r['share']:.0%})" for r in table]
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.45 * len(table) + 1.6), sharey=True)
    for ax, key, label in ((axes[0], "auc", "ROC AUC"), (axes[1], "normalized_entropy", "normalized entropy")):
        values = [np.nan if r.get(key) is None else r[key] for r in table]
        ax.barh(range(len(table)), values, color="tab:blue" if key == "auc" else "tab:orange")
        ax.set_xlabel(label)
        if key == "auc":
            ax.axvline(0.5, color="grey", lw=0.8, ls="--")
            finite = [v for v in values if np.isfinite(v)]
            ax.set_xlim(min([0.5, *finite]) - 0.02, min(1.0, max([0.5, *finite]) + 0.02))
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(table)), names)
    axes[0].invert_yaxis()
    fig.suptitle(f"{title}: by {sliced['by']}")
    return png(fig)
