"""The specs a preprocessing config names besides a preset or a path (``preprocessing.specs``): ``store:NAME`` and a
spec YAML pasted as the value, each checked before any work and recorded as an immutable file of the store; the
store's specs kept by version; and a Parquet text column read as a list without ``sep`` refused."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import feature_spec as fspec
from common.errors import UserError
from common.store import Store
from preprocessing import PreprocessConfig, run
from preprocessing.specs import resolve_spec, save_spec

SPEC = """feature_spec:
  clicked: {}
  price: {transform: log1p}
  city: {dtype: str}
channel_spec:
  label: [clicked]
  numerical: [price]
  categorical: [city]
metadata:
  name: ads
  preprocessing:
    split: random:train=0.8,test=0.2,seed=0
"""


def _csv(path: Path, rows: int = 300, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    pl.DataFrame({"clicked": rng.integers(0, 2, rows), "price": rng.exponential(50, rows).round(2),
                  "city": rng.choice(["paris", "berlin", "rome"], rows)}).write_csv(path)
    return str(path)


def _config(data: str, store: Path, spec: str) -> PreprocessConfig:
    return PreprocessConfig(inputs=[data], out=str(store), spec=spec, workers=1, progress=False)


def test_a_spec_by_store_name_and_pasted_preprocess_alike_and_record_an_immutable_file(tmp_path):
    data, store = _csv(tmp_path / "ads.csv"), tmp_path / "store"
    saved = save_spec(Store(str(store)), "ads", SPEC)
    assert (saved.version, saved.changed) == (1, True) and Path(saved.version_uri).read_text() == SPEC

    by_name = run(_config(data, store, "store:ads"))
    recorded = fspec.load(by_name).metadata["preprocessing"]["spec"]
    assert recorded == str(store / "specs" / "ads" / "v1.yaml")   # the version: NAME.yaml may be replaced later

    pasted = run(_config(data, store, "\n" + textwrap.indent(SPEC, "  ")))   # indented as a form may leave it
    assert pasted == by_name   # the same spec: the same dataset (found, not written again)
    [kept] = (store / "specs" / "_pasted").iterdir()
    assert kept.read_text() == SPEC and resolve_spec(SPEC, Store(str(store))) == str(kept)


def test_a_pasted_spec_with_problems_fails_before_any_work_listing_each(tmp_path):
    data, store = _csv(tmp_path / "ads.csv"), tmp_path / "store"
    typo = SPEC.replace("transform: log1p", "transfrom: log1p").replace("numerical: [price]", "numerical: [prise]")
    with pytest.raises(UserError) as e:
        run(_config(data, store, typo))
    lines = str(e.value).splitlines()
    assert lines[0] == "the pasted spec has 3 problem(s); nothing was preprocessed:"
    assert re.match(r"  line 3: feature_spec\.price\.transfrom: .*did you mean 'transform'", lines[1]), lines
    assert lines[2].startswith("  line 3: feature_spec.price: is in no channel") and " Fix: " in lines[2], lines
    assert lines[3].startswith("  line 5: channel_spec.prise: "), lines
    assert not store.exists()   # nothing read, nothing written


def test_the_store_keeps_each_version_and_never_replaces_a_spec_silently(tmp_path):
    store = Store(str(tmp_path))
    save_spec(store, "ads", SPEC)
    assert save_spec(store, "ads", SPEC).changed is False   # the same text: nothing new
    other = SPEC.replace("log1p", "identity")
    with pytest.raises(UserError, match=r"specs/ads.yaml holds a different spec \(version 1, .*overwrite: true"):
        save_spec(store, "ads", other)
    assert (tmp_path / "specs" / "ads.yaml").read_text() == SPEC
    saved = save_spec(store, "ads", other, overwrite=True)
    assert saved.version == 2 and (tmp_path / "specs" / "ads.yaml").read_text() == other
    assert (tmp_path / "specs" / "ads" / "v1.yaml").read_text() == SPEC
    assert resolve_spec("store:ads", store) == saved.version_uri
    with pytest.raises(UserError, match=r"spec store:clicks: the store has no .*specs/clicks.yaml \(its specs: ads\)"):
        resolve_spec("store:clicks", store)


def test_a_parquet_text_column_with_hotness_and_no_sep_is_refused(tmp_path):
    data = tmp_path / "ads.parquet"
    pl.DataFrame({"clicked": [0, 1] * 50, "price": [1.5] * 100, "tags": ["a|b", "b", "c|a"] * 33 + ["a"]}) \
        .write_parquet(data)
    spec = SPEC.replace("city: {dtype: str}", "tags: {dtype: str, hotness: variable}").replace("[city]", "[tags]")
    with pytest.raises(UserError) as e:
        run(_config(str(data), tmp_path / "store", spec))
    assert str(e.value).startswith("feature_spec.tags: a list feature (hotness variable), but its Parquet column is "
                                   "String in ") and "Fix: add `sep: '|'`" in str(e.value)
    assert "\n" not in str(e.value)
