"""A real table with list features, built from the shared real Criteo rows (skips where they are absent).

``real_list_table(tmp_path)`` turns the 10,000 real Criteo Kaggle rows (helpers/paths.py ``CRITEO_10K``) into a
Parquet table with list columns and writes its input spec beside it:

- ``label``, ``I1``..``I13`` (numerical) and ``C1``..``C4``, ``C7``..``C18`` (one-hot hex ids) as in the raw rows;
- ``pair``: ``[C5, C6]``, a fixed-hotness list (``hotness: 2``, hex, ``pooling: mean``); a missing C6 is a
  missing element (index 0, kept in the list);
- ``bag``: the present values of ``C19``..``C26`` as ``"<column>:<id>"`` strings, a variable-length list
  (``hotness: variable``, 0 to 8 values: those columns are often missing together), ``frequency_threshold: 2``.

``real_list_tsv(tmp_path)`` writes the same rows in the Criteo layout (40 tab-separated columns, no header) with
some categoricals holding lists (the C list parse's input, preprocessing/_lists.c): ``C5`` the pair ``C5|C6``
(``hotness: 2``), ``C19`` the bag's ids (hex, variable length, threshold 2), ``C20`` the same with
``max_hotness: 3``, ``C21`` ``I1|I2|I3`` (an int list, negative and missing elements), ``C22`` the bag hashed
into 1000 buckets; the other columns as in the raw rows.

The spec names no files (like examples/adult.yaml): pass the data file as the input, e.g.
``PreprocessConfig(inputs=[str(data)], spec=str(spec), ...)``; its split is ``ordered:train=0.8,val=0.1,test=0.1``
(metadata.preprocessing.split). The same rows as CSV (``bag`` and ``pair`` joined by ``|``) are written by
``real_list_csv``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
import yaml

from helpers.paths import CRITEO_10K

PAIR = ("C5", "C6")
BAG = tuple(f"C{i}" for i in range(19, 27))
ONE_HOT = tuple(f"C{i}" for i in range(1, 19) if f"C{i}" not in PAIR)
NUMERICAL = tuple(f"I{i}" for i in range(1, 14))


def _criteo() -> pl.DataFrame:
    """The real rows as read (categoricals as strings)."""
    if not CRITEO_10K.exists():
        pytest.skip(f"real data not available: {CRITEO_10K}")
    names = ["label", *NUMERICAL, *(f"C{i}" for i in range(1, 27))]
    with gzip.open(CRITEO_10K, "rb") as f:
        return pl.read_csv(f.read(), has_header=False, separator="\t", new_columns=names, quote_char=None,
                           schema_overrides={n: pl.String for n in names[14:]})


def _rows() -> pl.DataFrame:
    raw = _criteo()
    return raw.select(
        "label", *NUMERICAL, *ONE_HOT,
        pl.concat_list(pl.col(c) for c in PAIR).alias("pair"),
        pl.concat_list((pl.lit(f"{c}:") + pl.col(c)) for c in BAG).list.drop_nulls().alias("bag"))


def _spec(sep: str | None) -> dict:
    extra = {"sep": sep} if sep else {}
    features = {"label": {}, **{n: {} for n in NUMERICAL}, **{c: {"dtype": "hex"} for c in ONE_HOT},
                "pair": {"hotness": 2, "dtype": "hex", "pooling": "mean", **extra},
                "bag": {"hotness": "variable", "dtype": "str", "frequency_threshold": 2, **extra}}
    return {"feature_spec": features,
            "channel_spec": {"label": ["label"], "numerical": list(NUMERICAL),
                             "categorical": [*ONE_HOT, "pair", "bag"]},
            "metadata": {"name": "criteo-lists", "preprocessing": {"split": "ordered:train=0.8,val=0.1,test=0.1"}}}


def real_list_table(tmp_path: Path) -> tuple[Path, Path]:
    """(input spec YAML, Parquet file) of the real list table (see the module doc) under ``tmp_path``."""
    folder = tmp_path / "criteo_lists"
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "criteo_lists.parquet"
    _rows().write_parquet(data)
    spec = folder / "criteo_lists.yaml"
    spec.write_text(yaml.safe_dump(_spec(None), sort_keys=False))
    return spec, data


def real_list_csv(tmp_path: Path) -> tuple[Path, Path]:
    """(input spec YAML, CSV file) of the same rows with the lists joined by ``|`` (an empty list: empty field)."""
    folder = tmp_path / "criteo_lists_csv"
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "criteo_lists.csv"
    rows = _rows()
    rows.with_columns(pl.col("pair").list.eval(pl.element().fill_null("")).list.join("|"),
                      pl.col("bag").list.join("|")).write_csv(data)
    spec = folder / "criteo_lists.yaml"
    spec.write_text(yaml.safe_dump(_spec("|"), sort_keys=False))
    return spec, data


def real_list_tsv(tmp_path: Path) -> tuple[Path, Path]:
    """(input spec YAML, TSV file) of the real rows in the Criteo layout with list categoricals (see the module
    doc)."""
    folder = tmp_path / "criteo_lists_tsv"
    folder.mkdir(parents=True, exist_ok=True)
    raw = _criteo()
    bag = pl.concat_list(pl.col(c) for c in BAG).list.drop_nulls().list.join("|")
    raw.with_columns(pl.concat_str([pl.col(c).fill_null("") for c in PAIR], separator="|").alias("C5"),
                     bag.alias("C19"), bag.alias("C20"), bag.alias("C22"),
                     pl.concat_str([pl.col(f"I{i}").cast(pl.String).fill_null("") for i in (1, 2, 3)],
                                   separator="|").alias("C21")) \
        .write_csv(folder / "part-0.tsv", separator="\t", include_header=False, null_value="", quote_style="never")
    lists = {"C5": {"hotness": 2, "dtype": "hex", "pooling": "mean"},
             "C19": {"hotness": "variable", "dtype": "hex", "frequency_threshold": 2},
             "C20": {"max_hotness": 3, "dtype": "hex"},
             "C21": {"hotness": "variable", "dtype": "int"},
             "C22": {"hotness": "variable", "dtype": "hex", "hash_buckets": 1000}}
    categorical = [f"C{i}" for i in range(1, 27)]
    features = {"label": {}, **{n: {} for n in NUMERICAL},
                **{c: dict(lists[c], sep="|") if c in lists else {"dtype": "hex"} for c in categorical}}
    spec = folder / "criteo_lists_tsv.yaml"
    spec.write_text(yaml.safe_dump({"feature_spec": features, "channel_spec": {
        "label": ["label"], "numerical": list(NUMERICAL), "categorical": categorical},
        "metadata": {"name": "criteo-lists-tsv", "preprocessing": {"split": "ordered:train=0.8,val=0.1,test=0.1"}}},
        sort_keys=False))
    return spec, folder / "part-0.tsv"
